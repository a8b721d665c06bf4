"""Reads of conversations."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db.models import Exists, OuterRef, Q

from agent.models import FINAL_RUN_STATUSES, AgentRun
from agent.selectors import run_steps
from chat.exceptions import ConversationNotFound, CursorInvalid, RunAnswerNotFound
from chat.models import Conversation, Message, MessageKind, MessageRole
from devassist.cursors import decode_cursor, encode_cursor


def conversation_get_for(*, user: Any, conversation_id: uuid.UUID) -> Conversation:
    """The user's conversation; someone else's is as unknown as a missing one (404)."""
    conversation = Conversation.objects.owned_by(user).filter(pk=conversation_id).first()
    if conversation is None:
        raise ConversationNotFound(f"Conversation {conversation_id} does not exist.")
    return conversation


def conversation_locked_for(*, user: Any, conversation_id: uuid.UUID) -> Conversation:
    """``conversation_get_for`` with the row locked until the transaction ends (callers are
    inside ``transaction.atomic``), for appending to it."""
    conversation = (
        Conversation.objects.select_for_update()
        .owned_by(user)
        .filter(pk=conversation_id)
        .order_by()
        .first()
    )
    if conversation is None:
        raise ConversationNotFound(f"Conversation {conversation_id} does not exist.")
    return conversation


def conversation_steps(*, conversation: Conversation) -> dict[uuid.UUID, list[dict[str, Any]]]:
    """The ``step`` events of each of the conversation's runs, derived from their traces."""
    return run_steps(list(AgentRun.objects.filter(conversation=conversation).only("trace_id")))


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


#: How many conversations a page of the list holds at most.
CONVERSATION_PAGE_MAX = 100


@dataclass(frozen=True)
class ConversationPage:
    """A page of conversations, newest activity first; ``next_cursor`` continues after it."""

    conversations: list[Conversation]
    next_cursor: str | None


def _encode_cursor(conversation: Conversation) -> str:
    return encode_cursor(conversation.updated_at, conversation.id)


def _decode_cursor(cursor: str) -> tuple[datetime, uuid.UUID]:
    try:
        return decode_cursor(cursor)
    except ValueError as exc:
        raise CursorInvalid("The cursor is not one this API gave out.") from exc


def conversation_list_for(
    *, user: Any, query: str = "", cursor: str | None = None, limit: int = 30
) -> ConversationPage:
    """The user's conversations, most recently active first; with ``query``, those whose title
    or one of whose turns contains it (case-insensitive). ``cursor`` is a previous page's
    ``next_cursor``; raises ``CursorInvalid`` for anything else."""
    limit = max(1, min(limit, CONVERSATION_PAGE_MAX))
    qs = Conversation.objects.owned_by(user).order_by("-updated_at", "-id")
    query = query.strip()
    if query:
        matching_turns = Message.objects.turns().filter(
            conversation=OuterRef("pk"), content__icontains=query
        )
        qs = qs.filter(Q(title__icontains=query) | Q(Exists(matching_turns)))
    if cursor:
        when, ident = _decode_cursor(cursor)
        qs = qs.filter(Q(updated_at__lt=when) | Q(updated_at=when, id__lt=ident))
    rows = list(qs.only("id", "title", "created_at", "updated_at")[: limit + 1])
    more = len(rows) > limit
    rows = rows[:limit]
    return ConversationPage(
        conversations=rows, next_cursor=_encode_cursor(rows[-1]) if more and rows else None
    )


@dataclass(frozen=True)
class DisplayMessage:
    """A message as the chat shows it: a user turn (with its run's state) or a final answer
    (with its route, model and sources)."""

    id: uuid.UUID
    role: str
    content: str
    sequence: int
    created_at: datetime
    run_id: uuid.UUID | None
    mode: str
    model: str
    sources: list[dict[str, Any]]
    run_status: str
    error: str


def display_messages(*, conversation: Conversation) -> list[DisplayMessage]:
    """The conversation as the chat shows it: the user's messages and the final answers, in
    order (system turns, model outputs, tool observations and memory left out). A user turn
    carries its run's status and error, so a failed run shows why."""
    rows = (
        Message.objects.turns()
        .filter(conversation=conversation, role__in=[MessageRole.USER, MessageRole.ASSISTANT])
        .select_related("run", "step")
        .order_by("sequence")
    )
    shown = []
    for message in rows:
        run = message.run
        shown.append(
            DisplayMessage(
                id=message.id,
                role=message.role,
                content=message.content,
                sequence=message.sequence,
                created_at=message.created_at,
                run_id=message.run_id,
                mode=run.mode if run else "",
                model=run.model if run else "",
                sources=answer_sources(message) if message.role == MessageRole.ASSISTANT else [],
                run_status=run.status if run else "",
                error=run.error if run else "",
            )
        )
    return shown


def active_run_for(*, conversation: Conversation) -> AgentRun | None:
    """The conversation's newest run if it is still queued or running."""
    return (
        AgentRun.objects.filter(conversation=conversation)
        .exclude(status__in=FINAL_RUN_STATUSES)
        .order_by("-created_at")
        .first()
    )


def run_answer_for(*, user: Any, run_id: uuid.UUID) -> tuple[AgentRun, Message | None]:
    """The user's run and its final answer message (None until it completed). Raises
    ``RunAnswerNotFound`` (404) for an unknown or foreign run."""
    run = AgentRun.objects.filter(pk=run_id, user=user).first()
    if run is None:
        raise RunAnswerNotFound(f"Run {run_id} does not exist.")
    answer = (
        Message.objects.filter(run=run, role=MessageRole.ASSISTANT, kind=MessageKind.TURN)
        .select_related("step")
        .first()
    )
    return run, answer


def answer_sources(answer: Message) -> list[dict[str, Any]]:
    """The sources an answer cites, as its ``response`` step recorded them (select the
    message's ``step`` with it); none for an answer without that step or with a step whose
    data is not of the shape it wrote."""
    data = answer.step.data if answer.step is not None else None
    sources = data.get("sources") if isinstance(data, dict) else None
    if not isinstance(sources, list):
        return []
    return [source for source in sources if isinstance(source, dict)]
