"""Writes to conversations: create one, append messages in order."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from django.db import transaction
from django.utils import timezone

from chat.models import Conversation, Message, MessageKind, MessageRole

TITLE_MAX_CHARS = 80


@dataclass(frozen=True)
class NewMessage:
    """A message to append (its sequence comes from the conversation)."""

    role: str
    content: str
    kind: str = MessageKind.TURN
    metadata: dict[str, Any] = field(default_factory=dict)


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
            )
        )
        if (
            not conversation.title
            and message.role == MessageRole.USER
            and message.kind == MessageKind.TURN
        ):
            conversation.title = title_from(message.content)
    Message.objects.bulk_create(stored)
    conversation.updated_at = timezone.now()
    conversation.save(update_fields=["last_sequence", "title", "updated_at"])
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
