"""The chat's domain errors (``devassist.api`` maps their kinds to HTTP statuses)."""

from __future__ import annotations

from devassist.exceptions import Forbidden, InvalidInput, NotFound, TooLarge


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
