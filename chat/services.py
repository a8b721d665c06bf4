"""Writes to conversations: create one, append messages in order."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import structlog
from django.db import transaction
from django.utils import timezone

from agent.knowledge.store import delete_where
from chat.exceptions import TitleInvalid
from chat.memory import memory_config, short_term_memory
from chat.models import Conversation, Message, MessageKind, MessageRole

logger = structlog.get_logger(__name__)

TITLE_MAX_CHARS = 80


@dataclass(frozen=True)
class NewMessage:
    """A message to append (its sequence comes from the conversation); ``step_id`` is the
    trace step it records (``Message.step``), stored before or in the same transaction."""

    role: str
    content: str
    kind: str = MessageKind.TURN
    metadata: dict[str, Any] = field(default_factory=dict)
    step_id: uuid.UUID | None = None


def conversation_create(*, owner: Any, title: str = "") -> Conversation:
    return Conversation.objects.create(owner=owner, title=title[:TITLE_MAX_CHARS])


@transaction.atomic
def messages_append(
    *,
    conversation_id: uuid.UUID,
    messages: Sequence[NewMessage],
    run_id: uuid.UUID | None = None,
    request_id: str = "",
) -> list[Message]:
    """Append ``messages`` with the next sequence numbers (no gaps, no duplicates under
    concurrent writers: the conversation row is locked). An untitled conversation takes its
    title from the first user turn. Returns the stored messages in order."""
    conversation = Conversation.objects.select_for_update().get(pk=conversation_id)
    stored = messages_build(
        conversation=conversation, messages=messages, run_id=run_id, request_id=request_id
    )
    Message.objects.bulk_create(stored)
    conversation.save(update_fields=["last_sequence", "title", "updated_at"])
    return stored


def messages_build(
    *,
    conversation: Conversation,
    messages: Sequence[NewMessage],
    run_id: uuid.UUID | None = None,
    request_id: str = "",
) -> list[Message]:
    """``messages`` as unsaved rows numbered after the conversation's newest, and the
    conversation (locked, or new) moved on to match: its ``last_sequence``, its title (an
    untitled one takes it from the first user turn) and ``updated_at``. The caller saves
    both in one transaction. Raises ``ValueError`` for an unknown role or kind."""
    stored = []
    for message in messages:
        if message.role not in MessageRole.values or message.kind not in MessageKind.values:
            raise ValueError(f"invalid message role/kind: {message.role}/{message.kind}")
        conversation.last_sequence += 1
        stored.append(
            Message(
                conversation=conversation,
                role=message.role,
                kind=message.kind,
                content=message.content,
                run_id=run_id,
                request_id=request_id,
                sequence=conversation.last_sequence,
                metadata=message.metadata,
                step_id=message.step_id,
            )
        )
        if (
            not conversation.title
            and message.role == MessageRole.USER
            and message.kind == MessageKind.TURN
        ):
            conversation.title = title_from(message.content)
    conversation.updated_at = timezone.now()
    return stored


def title_from(text: str) -> str:
    """A conversation title from a message: its first line, cut at a word near 80 chars."""
    line = " ".join(text.strip().split("\n", 1)[0].split())
    if len(line) <= TITLE_MAX_CHARS:
        return line
    cut = line[: TITLE_MAX_CHARS - 1]
    if " " in cut[TITLE_MAX_CHARS // 2 :]:
        cut = cut.rsplit(" ", 1)[0]
    return cut + "…"


def conversation_rename(*, conversation: Conversation, title: str) -> Conversation:
    """Set the title (whitespace collapsed, at most ``TITLE_MAX_CHARS``); the conversation
    keeps its place in the list, which follows the last message. Raises ``TitleInvalid``
    (400) for a blank title."""
    cleaned = " ".join(title.split())[:TITLE_MAX_CHARS]
    if not cleaned:
        raise TitleInvalid("The title is blank.")
    conversation.title = cleaned
    conversation.save(update_fields=["title"])
    return conversation


def conversation_delete(*, conversation: Conversation) -> None:
    """Delete the conversation with its messages and memory (the summaries, their records in
    the long-term store, the cached window); its runs and traces stay (their
    ``conversation`` becomes empty). A long-term store that cannot be reached keeps its
    records, which no conversation can recall any more."""
    conversation_id = conversation.id
    conversation.delete()
    short_term_memory().forget(conversation_id)
    try:
        delete_where(memory_config().collection, where={"conversation_id": str(conversation_id)})
    except Exception as exc:
        logger.warning(
            "conversation_memory_not_deleted", conversation_id=str(conversation_id), error=str(exc)
        )
