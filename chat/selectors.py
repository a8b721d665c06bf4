"""Reads of conversations."""

from __future__ import annotations

import uuid
from typing import Any

from chat.models import Conversation, Message
from devassist.errors import NotFound


class ConversationNotFound(NotFound):
    code = "conversation_not_found"


def conversation_get_for(*, user: Any, conversation_id: uuid.UUID) -> Conversation:
    """The user's conversation; someone else's is as unknown as a missing one (404)."""
    conversation = Conversation.objects.owned_by(user).filter(pk=conversation_id).first()
    if conversation is None:
        raise ConversationNotFound(f"Conversation {conversation_id} does not exist.")
    return conversation


def turns_through(
    *, conversation_id: uuid.UUID, through_sequence: int, limit: int
) -> list[Message]:
    """The last ``limit`` turns (user messages and final answers) with a sequence up to
    ``through_sequence``, oldest first."""
    newest = (
        Message.objects.turns()
        .filter(conversation_id=conversation_id, sequence__lte=through_sequence)
        .order_by("-sequence")
        .only("role", "content", "sequence")[:limit]
    )
    return list(reversed(newest))


def turns_between(
    *, conversation_id: uuid.UUID, after_sequence: int, before_sequence: int
) -> list[Message]:
    """Turns with ``after_sequence < sequence < before_sequence``, oldest first."""
    return list(
        Message.objects.turns()
        .filter(
            conversation_id=conversation_id,
            sequence__gt=after_sequence,
            sequence__lt=before_sequence,
        )
        .order_by("sequence")
        .only("role", "content", "sequence")
    )
