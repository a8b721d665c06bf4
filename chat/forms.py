"""What the chat page's forms send, parsed."""

from __future__ import annotations

from django import forms

#: The composer's route picker: ``(use_agent, use_rag)`` for ``chat.turns.chat_turn_start``
#: (None lets the router decide; ``chat`` rules both other routes out).
ROUTE_FLAGS: dict[str, tuple[bool | None, bool | None]] = {
    "auto": (None, None),
    "agent": (True, None),
    "rag": (None, True),
    "chat": (False, False),
}


class ChatSendForm(forms.Form):
    """The composer: the message (kept as typed; ``chat_turn_start`` refuses an empty or
    oversized one), the route picked, and the open conversation (empty for a new chat)."""

    message = forms.CharField(strip=False)
    route = forms.ChoiceField(choices=[(name, name) for name in ROUTE_FLAGS], required=False)
    conversation_id = forms.UUIDField(required=False)

    def route_flags(self) -> tuple[bool | None, bool | None]:
        """``(use_agent, use_rag)`` of the picked route (``auto`` when none was sent)."""
        return ROUTE_FLAGS[self.cleaned_data["route"] or "auto"]


class EditForm(forms.Form):
    """An edited version of a user message, with the route picked for its answer."""

    message = forms.CharField(strip=False)
    route = forms.ChoiceField(choices=[(name, name) for name in ROUTE_FLAGS], required=False)

    def route_flags(self) -> tuple[bool | None, bool | None]:
        return ROUTE_FLAGS[self.cleaned_data["route"] or "auto"]


class FeedbackForm(forms.Form):
    rating = forms.ChoiceField(choices=[("up", "up"), ("down", "down")])
    comment = forms.CharField(required=False, strip=True, max_length=2000)


class BranchForm(forms.Form):
    message_id = forms.UUIDField()


class RenameForm(forms.Form):
    title = forms.CharField(max_length=200)
