"""Writes to conversations: create one, append messages in order (turns into the tree of turns),
choose the branch shown, title, rename, delete (with an undo delay) and restore, and feedback on
answers."""

from __future__ import annotations

import re
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import structlog
from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext_noop

from agent.knowledge.store import delete_where
from agent.leases import reap_if_lost
from agent.models import FINAL_RUN_STATUSES, AgentRun
from chat.attachments import attachments_forget
from chat.exceptions import (
    ConversationBusy,
    ConversationNotFound,
    FeedbackInvalid,
    MessageActionInvalid,
    MessageNotFound,
    TitleInvalid,
)
from chat.memory import memory_config, short_term_memory
from chat.models import (
    FEEDBACK_RATINGS,
    Conversation,
    Message,
    MessageKind,
    MessageRole,
    TitleSource,
    undo_delay,
)
from chat.selectors import turn_tree
from traces.store import StepCreate, get_trace_store

logger = structlog.get_logger(__name__)

TITLE_MAX_CHARS = 80
#: The longest comment feedback takes, in characters.
FEEDBACK_COMMENT_MAX_CHARS = 2000


@dataclass(frozen=True)
class NewMessage:
    """A message to append (its sequence comes from the conversation); ``step_id`` is the
    trace step it records (``Message.step``), stored before or in the same transaction. A
    turn follows the end of the branch shown, or with ``follows_tip=False`` the turn
    ``parent_id`` (None: it is a first turn)."""

    role: str
    content: str
    kind: str = MessageKind.TURN
    metadata: dict[str, Any] = field(default_factory=dict)
    step_id: uuid.UUID | None = None
    parent_id: uuid.UUID | None = None
    follows_tip: bool = True


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
    concurrent writers: the conversation row is locked), as ``messages_build`` places them.
    Returns the stored messages in order."""
    conversation = Conversation.objects.select_for_update().get(pk=conversation_id)
    stored = messages_build(
        conversation=conversation, messages=messages, run_id=run_id, request_id=request_id
    )
    Message.objects.bulk_create(stored)
    conversation.save(update_fields=["last_sequence", "title", "current", "updated_at"])
    return stored


def messages_build(
    *,
    conversation: Conversation,
    messages: Sequence[NewMessage],
    run_id: uuid.UUID | None = None,
    request_id: str = "",
) -> list[Message]:
    """``messages`` as unsaved rows numbered after the conversation's newest, and the
    conversation (locked, or new) moved on to match: its ``last_sequence``, ``updated_at``,
    its title (an untitled one takes it from the first user turn, ``title_from``) and its
    ``current`` turn. Each turn follows the end of the branch shown, or its ``parent_id``; the
    branch shown then ends at a new user turn, or at any turn that continues it (an answer to
    the user turn it ended at). The caller saves both in one transaction. Raises
    ``ValueError`` for an unknown role or kind."""
    tip = branch_tip(conversation)
    stored = []
    for message in messages:
        if message.role not in MessageRole.values or message.kind not in MessageKind.values:
            raise ValueError(f"invalid message role/kind: {message.role}/{message.kind}")
        conversation.last_sequence += 1
        row = Message(
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
        if message.kind == MessageKind.TURN:
            row.parent_id = tip if message.follows_tip else message.parent_id
            if message.role == MessageRole.USER or row.parent_id == tip:
                tip = row.id
        stored.append(row)
        if (
            not conversation.title
            and message.role == MessageRole.USER
            and message.kind == MessageKind.TURN
        ):
            conversation.title = title_from(message.content)
    conversation.current_id = tip
    conversation.updated_at = timezone.now()
    return stored


def branch_tip(conversation: Conversation) -> uuid.UUID | None:
    """The turn the branch shown ends at: the conversation's ``current``, else (a
    conversation from before turns had parents, or none yet) its newest turn."""
    if conversation.current_id is not None or conversation.last_sequence == 0:
        return conversation.current_id
    return (
        Message.objects.turns()
        .filter(conversation=conversation)
        .order_by("-sequence")
        .values_list("id", flat=True)
        .first()
    )


@transaction.atomic
def conversation_branch_choose(*, conversation: Conversation, message_id: uuid.UUID) -> None:
    """Show the branch through the turn ``message_id`` (one of a turn's versions): the
    conversation's ``current`` becomes the newest turn under it. Raises ``MessageNotFound``
    for a turn not in the conversation, ``ConversationBusy`` (409) while a run of the
    conversation is going (its answer belongs to the branch it was asked on)."""
    locked = Conversation.objects.select_for_update().get(pk=conversation.pk)
    tree = turn_tree(conversation_id=locked.id)
    if message_id not in tree.nodes:
        raise MessageNotFound(f"Message {message_id} is not a turn of this conversation.")
    conversation_ensure_idle(conversation=locked)
    leaf = tree.newest_leaf_under(tree.nodes[message_id])
    locked.current_id = leaf.id
    locked.save(update_fields=["current"])
    conversation.current_id = leaf.id


def conversation_ensure_idle(*, conversation: Conversation) -> None:
    """Raise ``ConversationBusy`` (409) when one of the conversation's runs is still going (a
    run whose worker died is failed first, ``agent.leases.reap_if_lost``, and does not count):
    a turn's answer belongs right after its message, so nothing may be added or changed in the
    conversation until it is there."""
    for run in AgentRun.objects.filter(conversation=conversation).exclude(
        status__in=FINAL_RUN_STATUSES
    ):
        if not reap_if_lost(run):
            raise ConversationBusy(
                gettext_noop("The conversation has a run going: wait for it, or stop it, first."),
                details={"run_id": str(run.id)},
            )


# --- titles ----------------------------------------------------------------------------------

_FENCE = re.compile(r"^\s*(```|~~~)")
_LINK = re.compile(r"!?\[([^\]]*)\]\([^)]*\)")
_LEADING_MARKS = re.compile(r"^\s*(?:#{1,6}\s+|>\s*|[-*+]\s+|\d+[.)]\s+)+")
_INLINE_MARKS = re.compile(r"(\*\*|__|\*|_|~~|`)")


def title_from(text: str) -> str:
    """A conversation title from a message, without Markdown: its first line of prose
    (code fences skipped, headings, quotes, list markers, emphasis, inline code and link
    targets taken off), or the first line of code when it has no prose; whitespace collapsed
    and cut at a word near ``TITLE_MAX_CHARS``."""
    prose: list[str] = []
    code: list[str] = []
    fenced = False
    for line in text.splitlines():
        if _FENCE.match(line):
            fenced = not fenced
            continue
        (code if fenced else prose).append(line)
    for line in [*prose, *code]:
        cleaned = _clean_line(line)
        if cleaned:
            return clip_title(cleaned)
    return ""


def _clean_line(line: str) -> str:
    line = _LINK.sub(r"\1", line)
    line = _LEADING_MARKS.sub("", line)
    line = _INLINE_MARKS.sub("", line)
    return " ".join(line.split())


def clip_title(text: str) -> str:
    """``text`` on one line, cut at a word near ``TITLE_MAX_CHARS`` (with an ellipsis)."""
    line = " ".join(text.split())
    if len(line) <= TITLE_MAX_CHARS:
        return line
    cut = line[: TITLE_MAX_CHARS - 1]
    if " " in cut[TITLE_MAX_CHARS // 2 :]:
        cut = cut.rsplit(" ", 1)[0]
    return cut + "…"


def conversation_title_set(*, conversation_id: uuid.UUID, title: str) -> bool:
    """Store a title the model summarised, unless the conversation's title was set by its
    owner (or it is gone) meanwhile. Returns whether it was stored."""
    cleaned = clip_title(_clean_line(title).strip(" \"'“”「」.。"))
    if not cleaned:
        return False
    updated = Conversation.objects.filter(pk=conversation_id, title_source=TitleSource.AUTO).update(
        title=cleaned, title_source=TitleSource.MODEL
    )
    return bool(updated)


def conversation_rename(*, conversation: Conversation, title: str) -> Conversation:
    """Set the title (whitespace collapsed, at most ``TITLE_MAX_CHARS``), for good: the model
    does not replace it. The conversation keeps its place in the list, which follows the last
    message. Raises ``TitleInvalid`` (400) for a blank title."""
    cleaned = " ".join(title.split())[:TITLE_MAX_CHARS]
    if not cleaned:
        raise TitleInvalid(gettext_noop("The title is blank."))
    conversation.title = cleaned
    conversation.title_source = TitleSource.USER
    conversation.save(update_fields=["title", "title_source"])
    return conversation


# --- deleting --------------------------------------------------------------------------------


def conversation_delete(*, conversation: Conversation) -> None:
    """Delete the conversation: hidden at once, restorable for ``undo_delay()``
    (``conversation_restore``), then purged (``conversations_purge``): by the owner's next
    delete, which purges what the owner can no longer restore, or by ``manage.py
    purge_conversations``."""
    conversations_purge(user=conversation.owner_id)
    conversation.deleted_at = timezone.now()
    conversation.save(update_fields=["deleted_at"])
    logger.info("conversation_deleted", conversation_id=str(conversation.id))


@transaction.atomic
def conversation_restore(*, user: Any, conversation_id: uuid.UUID) -> Conversation:
    """Bring back one of the user's conversations deleted less than ``undo_delay()`` ago.
    Raises ``ConversationNotFound`` (404) for anything else, a conversation deleted longer
    ago included (it is purged, or about to be)."""
    conversation = (
        Conversation.objects.select_for_update()
        .restorable_by(user)
        .filter(pk=conversation_id)
        .first()
    )
    if conversation is None:
        raise ConversationNotFound(f"Conversation {conversation_id} cannot be restored.")
    conversation.deleted_at = None
    conversation.save(update_fields=["deleted_at"])
    logger.info("conversation_restored", conversation_id=str(conversation.id))
    return conversation


def conversations_purge(*, user: Any | None = None) -> int:
    """Delete for good the conversations deleted more than ``undo_delay()`` ago (the user's,
    or everyone's), with their messages, their files and their memory (the summaries, their
    records in the long-term store, the cached window); their runs and traces stay (their
    ``conversation`` becomes empty). A long-term store that cannot be reached keeps its
    records, which no conversation can recall any more. Returns how many were purged."""
    expired = Conversation.objects.filter(deleted_at__lt=timezone.now() - undo_delay())
    if user is not None:
        expired = expired.filter(owner=user)
    ids = list(expired.values_list("id", flat=True))
    for conversation_id in ids:
        attachments_forget(conversation_id=conversation_id)
        Conversation.objects.filter(pk=conversation_id).delete()
        short_term_memory().forget(conversation_id)
        try:
            delete_where(
                memory_config().collection, where={"conversation_id": str(conversation_id)}
            )
        except Exception as exc:
            logger.warning(
                "conversation_memory_not_deleted",
                conversation_id=str(conversation_id),
                error=str(exc),
            )
    if ids:
        logger.info("conversations_purged", count=len(ids))
    return len(ids)


# --- feedback --------------------------------------------------------------------------------


def answer_feedback_give(
    *, user: Any, answer: Message, rating: str, comment: str = ""
) -> dict[str, Any]:
    """Record the user's rating (``up`` or ``down``) of an answer, with an optional comment,
    as a ``feedback`` step of its run's trace (under the run's goal step); the newest one is
    the answer's feedback. Returns it as ``chat.selectors.answer_feedback`` reads it. Raises
    ``FeedbackInvalid`` (400) for another rating or a comment past
    ``FEEDBACK_COMMENT_MAX_CHARS``, ``MessageActionInvalid`` (400) for a message that is not
    an answer with a trace."""
    if rating not in FEEDBACK_RATINGS:
        raise FeedbackInvalid(f"The rating must be one of {', '.join(FEEDBACK_RATINGS)}.")
    comment = comment.strip()
    if len(comment) > FEEDBACK_COMMENT_MAX_CHARS:
        raise FeedbackInvalid(
            f"The comment is longer than {FEEDBACK_COMMENT_MAX_CHARS} characters.",
            details={"max_chars": FEEDBACK_COMMENT_MAX_CHARS, "chars": len(comment)},
        )
    run = answer.run
    if answer.role != MessageRole.ASSISTANT or run is None or run.trace_id is None:
        raise MessageActionInvalid(gettext_noop("Only an answer with a run can be rated."))
    step = get_trace_store().add_feedback_sync(
        run.trace_id,
        StepCreate(
            step_type="feedback",
            parent_id=run.id,
            name=f"feedback: {rating}",
            description=comment[:200],
            data={
                "rating": rating,
                "comment": comment,
                "message_id": str(answer.id),
                "user_id": user.pk,
            },
        ),
    )
    logger.info("answer_rated", run_id=str(run.id), rating=rating, commented=bool(comment))
    return {"rating": rating, "comment": comment, "at": step.started_at}
