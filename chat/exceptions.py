"""The chat's domain errors (``devassist.api`` maps their kinds to HTTP statuses)."""

from __future__ import annotations

from devassist.exceptions import Conflict, Forbidden, InvalidInput, NotFound, TooLarge


class ChatInputInvalid(InvalidInput):
    code = "chat_input_invalid"


class MessageTooLarge(TooLarge):
    code = "message_too_large"


class ConversationNotFound(NotFound):
    code = "conversation_not_found"


class RunAnswerNotFound(NotFound):
    code = "run_not_found"


class TitleInvalid(InvalidInput):
    code = "title_invalid"


class CursorInvalid(InvalidInput):
    code = "cursor_invalid"


class SuperuserRequired(Forbidden):
    code = "superuser_required"


class MessageNotFound(NotFound):
    code = "message_not_found"


class MessageActionInvalid(InvalidInput):
    """An action a message does not take (regenerating a user message's answer when it has
    none to regenerate from, editing an answer, feedback on a user message)."""

    code = "message_action_invalid"


class ConversationBusy(Conflict):
    """The conversation has a run going: its branch cannot change under it."""

    code = "conversation_busy"


class FeedbackInvalid(InvalidInput):
    code = "feedback_invalid"


class AttachmentNotFound(NotFound):
    code = "attachment_not_found"
