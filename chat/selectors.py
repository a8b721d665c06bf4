"""Reads of conversations."""

from __future__ import annotations

import uuid
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db.models import Exists, OuterRef, Q
from django.urls import reverse

from agent.models import FINAL_RUN_STATUSES, AgentRun
from agent.selectors import RunOutcome, run_outcomes, run_steps
from chat.exceptions import (
    ConversationNotFound,
    CursorInvalid,
    MessageNotFound,
    RunAnswerNotFound,
)
from chat.models import (
    FEEDBACK_RATINGS,
    Attachment,
    Conversation,
    Message,
    MessageKind,
    MessageRole,
)
from devassist.cursors import decode_cursor, encode_cursor
from traces.models import Step, StepType


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


def message_get_for(*, user: Any, message_id: uuid.UUID) -> Message:
    """One of the user's turns (a user message or an answer, in a conversation of theirs that
    is not deleted), with its conversation and run; raises ``MessageNotFound`` (404)."""
    message = (
        Message.objects.turns()
        .filter(
            pk=message_id,
            conversation__in=Conversation.objects.owned_by(user),
            role__in=[MessageRole.USER, MessageRole.ASSISTANT],
        )
        .select_related("conversation", "run")
        .first()
    )
    if message is None:
        raise MessageNotFound(f"Message {message_id} does not exist.")
    return message


def conversation_steps(*, conversation: Conversation) -> dict[uuid.UUID, list[dict[str, Any]]]:
    """The ``step`` events of each of the conversation's runs, derived from their traces."""
    return run_steps(list(AgentRun.objects.filter(conversation=conversation).only("trace_id")))


@dataclass(frozen=True)
class TurnNode:
    """A turn's place in its conversation's tree (``chat.models``)."""

    id: uuid.UUID
    parent_id: uuid.UUID | None
    role: str
    sequence: int


class TurnTree:
    """A conversation's turns as a tree: parents, children, branches and versions. Built from
    one query (``turn_tree``); pure afterwards."""

    def __init__(self, nodes: Sequence[TurnNode]) -> None:
        self.nodes = {node.id: node for node in nodes}
        self.children: dict[uuid.UUID | None, list[TurnNode]] = defaultdict(list)
        for node in sorted(nodes, key=lambda n: n.sequence):
            # A parent outside the turns (never the case for rows this app wrote) is a root.
            parent = node.parent_id if node.parent_id in self.nodes else None
            self.children[parent].append(node)

    def newest(self) -> TurnNode | None:
        return max(self.nodes.values(), key=lambda n: n.sequence, default=None)

    def leaf(self, current_id: uuid.UUID | None) -> TurnNode | None:
        """The end of the shown branch: ``current_id`` (a conversation's ``current``) when it is
        one of the turns, else the newest turn."""
        return self.nodes.get(current_id) if current_id in self.nodes else self.newest()

    def branch(self, leaf: TurnNode | None) -> list[TurnNode]:
        """The turns from the root to ``leaf``, in order."""
        branch: list[TurnNode] = []
        node = leaf
        while node is not None and len(branch) <= len(self.nodes):
            branch.append(node)
            node = self.nodes.get(node.parent_id) if node.parent_id else None
        return branch[::-1]

    def newest_leaf_under(self, node: TurnNode) -> TurnNode:
        """Where a branch through ``node`` ends: following the newest child down."""
        while self.children.get(node.id):
            node = self.children[node.id][-1]
        return node

    def versions(self, node: TurnNode) -> list[uuid.UUID]:
        """The turns ``node`` switches between: its siblings of its role (itself included), in
        the order they were written."""
        parent = node.parent_id if node.parent_id in self.nodes else None
        return [n.id for n in self.children[parent] if n.role == node.role]


def turn_tree(*, conversation_id: uuid.UUID) -> TurnTree:
    """The conversation's turn tree (one query)."""
    rows = (
        Message.objects.turns()
        .filter(conversation_id=conversation_id)
        .values_list("id", "parent_id", "role", "sequence")
    )
    return TurnTree([TurnNode(*row) for row in rows])


def branch_turns(
    *, conversation_id: uuid.UUID, through_id: uuid.UUID | None, limit: int | None = None
) -> list[Message]:
    """The turns of the branch that ends at ``through_id`` (the newest turn when None), the
    last ``limit`` of them, oldest first (two queries)."""
    tree = turn_tree(conversation_id=conversation_id)
    leaf = tree.nodes.get(through_id) if through_id is not None else tree.newest()
    ids = [node.id for node in tree.branch(leaf)]
    if limit is not None:
        ids = ids[-limit:] if limit > 0 else []
    rows = Message.objects.filter(pk__in=ids).only("role", "content", "sequence", "parent_id")
    return sorted(rows, key=lambda m: m.sequence)


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
    """A turn as the chat shows it: a user message (with its first run's state, and whether
    any answer to it is stored) or an answer (with its run's route, model, status, error and
    sources, and the feedback given on it). ``versions`` are the turns it switches between
    (``TurnTree.versions``), itself among them."""

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
    parent_id: uuid.UUID | None = None
    versions: tuple[uuid.UUID, ...] = ()
    answered: bool = False
    feedback: dict[str, Any] | None = None
    trace_id: uuid.UUID | None = None
    #: A user message's files: ``id``, ``name``, ``size``, ``media_type``, ``url``.
    attachments: tuple[dict[str, Any], ...] = ()

    @property
    def version(self) -> int:
        """Which of its versions it is, from 1."""
        return self.versions.index(self.id) + 1 if self.id in self.versions else 1


def display_messages(*, conversation: Conversation) -> list[DisplayMessage]:
    """The branch of the conversation the chat shows (from the root to its ``current`` turn)
    as the chat shows it: the user's messages and the answers (system turns, model outputs,
    tool observations and memory left out). Errors come from the runs' traces
    (``agent.selectors.run_outcomes``), feedback from their ``feedback`` steps. Four queries
    at most: the turns (every branch's: the tree is made of them), their files, the errors
    (when a run failed or was cancelled) and the feedback (when an answer has a run)."""
    turns = list(
        Message.objects.turns()
        .filter(conversation=conversation)
        .select_related("run", "step")
        .prefetch_related("attachments")
    )
    tree = TurnTree([TurnNode(m.id, m.parent_id, m.role, m.sequence) for m in turns])
    branch = {node.id for node in tree.branch(tree.leaf(conversation.current_id))}
    rows = sorted(
        (
            m
            for m in turns
            if m.id in branch and m.role in (MessageRole.USER, MessageRole.ASSISTANT)
        ),
        key=lambda m: m.sequence,
    )
    runs = {message.run.id: message.run for message in rows if message.run is not None}
    outcomes = run_outcomes(list(runs.values()), answers=False)
    feedback = answer_feedback(
        [m.run for m in rows if m.role == MessageRole.ASSISTANT and m.run is not None]
    )
    return [_display(message, tree, outcomes, feedback) for message in rows]


def _display(
    message: Message,
    tree: TurnTree,
    outcomes: dict[uuid.UUID, RunOutcome],
    feedback: dict[uuid.UUID, dict[str, Any]],
) -> DisplayMessage:
    run = message.run
    answer = message.role == MessageRole.ASSISTANT
    node = tree.nodes.get(message.id)
    return DisplayMessage(
        id=message.id,
        role=message.role,
        content=message.content,
        sequence=message.sequence,
        created_at=message.created_at,
        run_id=message.run_id,
        mode=run.mode if run else "",
        model=run.model if run else "",
        sources=answer_sources(message) if answer else [],
        run_status=run.status if run else "",
        error=outcomes[run.id].error if run and run.id in outcomes else "",
        parent_id=message.parent_id,
        versions=tuple(tree.versions(node)) if node else (message.id,),
        answered=any(child.role == MessageRole.ASSISTANT for child in tree.children[message.id]),
        feedback=feedback.get(run.id) if answer and run else None,
        trace_id=run.trace_id if run else None,
        attachments=tuple(_attachment(a) for a in message.attachments.all()),
    )


def attachment_list(message: Message) -> list[dict[str, Any]]:
    """A message's files as ``DisplayMessage.attachments`` lists them (one query)."""
    return [_attachment(a) for a in message.attachments.all()]


def _attachment(attachment: Attachment) -> dict[str, Any]:
    return {
        "id": attachment.id,
        "name": attachment.name,
        "size": attachment.size,
        "media_type": attachment.media_type,
        "url": reverse("api:chat_attachment", kwargs={"attachment_id": attachment.id}),
    }


def answer_display_for(*, user: Any, run_id: uuid.UUID) -> tuple[AgentRun, DisplayMessage | None]:
    """One of the user's runs and its answer as the chat shows it (None until the run has
    ended and its answer is stored). Raises ``RunAnswerNotFound`` (404) for an unknown or
    foreign run."""
    run, answer = run_answer_for(user=user, run_id=run_id)
    if answer is None:
        return run, None
    answer.run = run
    tree = turn_tree(conversation_id=answer.conversation_id)
    outcomes = run_outcomes([run], answers=False)
    return run, _display(answer, tree, outcomes, answer_feedback([run]))


def answer_feedback(runs: Sequence[AgentRun]) -> dict[uuid.UUID, dict[str, Any]]:
    """The latest feedback on each run (its trace's newest ``feedback`` step, written by
    ``chat.services.answer_feedback_give``): ``{"rating": "up"|"down", "comment", "at"}``;
    runs without any are left out. One query, none without runs."""
    run_of_trace = {run.trace_id: run.id for run in runs if run.trace_id is not None}
    if not run_of_trace:
        return {}
    latest: dict[uuid.UUID, dict[str, Any]] = {}
    rows = (
        Step.objects.filter(trace_id__in=list(run_of_trace), step_type=StepType.FEEDBACK)
        .order_by("trace_id", "seq")
        .values_list("trace_id", "data", "started_at")
    )
    for trace_id, data, at in rows:
        if isinstance(data, dict) and data.get("rating") in FEEDBACK_RATINGS:
            latest[run_of_trace[trace_id]] = {
                "rating": data["rating"],
                "comment": str(data.get("comment") or ""),
                "at": at,
            }
    return latest


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
