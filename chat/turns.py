"""Chat turns: route a message, keep the conversation, and start the run that answers it.

A chat turn always belongs to a conversation: an existing one of the user's (its history comes
from the database), or a new one created for it (holding the ``history`` the client sent). The
user's message is stored with the run, before the run starts; the run gets the conversation
as a ``ChatConversation`` (its history and memory going in, its transcript and answer coming
back when it ends).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import structlog
from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import transaction

from agent.conversation import RunAnswer, TranscriptEntry
from agent.executor import run_outcome, run_start
from agent.knowledge.store import collection_has_chunks, open_collection
from agent.llm.base import ChatMessage, LLMProvider
from agent.models import AgentRun, RunMode, RunStatus
from agent.selectors import run_steps
from agent.services import run_create, run_create_sync
from chat.exceptions import ChatInputInvalid, MessageTooLarge
from chat.memory import consolidate, long_term_message, recall, short_term_memory
from chat.models import Message, MessageKind, MessageRole
from chat.route_choice import Route, choose_route
from chat.selectors import answer_sources, conversation_locked_for
from chat.services import NewMessage, conversation_create, messages_append, messages_build
from devassist.connections import in_thread
from traces.models import StepStatus
from traces.store import StepCreate, get_trace_store

logger = structlog.get_logger(__name__)

#: The longest message a chat turn accepts, in characters (longer ones are 413).
MESSAGE_MAX_CHARS = 32_000


@dataclass(frozen=True)
class ChatTurn:
    """A started turn: its run (executing as ``task``) and the route it took."""

    run: AgentRun
    route: Route
    task: asyncio.Task[None]


async def agent_turn_start(
    *,
    user: Any,
    message: str,
    tools: list[str] | None = None,
    conversation_id: uuid.UUID | None = None,
    request_id: str = "",
) -> ChatTurn:
    """The agent on ``message``: a turn of the user's conversation ``conversation_id`` that
    takes the agent route (``chat_turn_start``), or, without one, a run on its own. Raises as
    ``chat_turn_start`` (a run on its own: ``AgentInputInvalid``)."""
    if conversation_id is not None:
        return await chat_turn_start(
            user=user,
            message=message,
            conversation_id=conversation_id,
            use_agent=True,
            tools=tools,
            request_id=request_id,
        )
    run = await run_create(user=user, message=message, tools=tools, request_id=request_id)
    return ChatTurn(run=run, route=Route(RunMode.AGENT, "explicit"), task=run_start(run))


async def agent_turn_result(*, turn: ChatTurn) -> dict[str, Any]:
    """Wait for the agent's run and return ``{run_id, trace_id, conversation_id, answer,
    steps}``; raises as ``chat_turn_result``."""
    run = await run_outcome(turn.run, turn.task)
    return {
        "run_id": run.id,
        "trace_id": run.trace_id,
        "conversation_id": run.conversation_id,
        "answer": run.output,
        "steps": (await sync_to_async(run_steps)([run]))[run.id],
    }


async def chat_turn_start(
    *,
    user: Any,
    message: str,
    conversation_id: uuid.UUID | None = None,
    history: Sequence[NewMessage] = (),
    use_agent: bool | None = None,
    use_rag: bool | None = None,
    collection: str | None = None,
    tools: list[str] | None = None,
    request_id: str = "",
) -> ChatTurn:
    """Route ``message`` (``chat.route_choice``) and start its run in the conversation.

    With ``conversation_id`` the conversation's own turns are the history and ``history`` is
    ignored; without it a new conversation is created holding ``history``. ``tools`` limits an
    agent run's tools. Raises ``ChatInputInvalid`` (400) for an empty message,
    ``MessageTooLarge`` (413) past ``MESSAGE_MAX_CHARS``, ``ConversationNotFound`` (404) for an
    unknown or foreign conversation, ``CollectionNotFound`` (404) when RAG is asked of a
    missing collection, ``AgentInputInvalid`` (400) for an unknown tool."""
    if not message.strip():
        raise ChatInputInvalid("The message is empty.")
    if len(message) > MESSAGE_MAX_CHARS:
        raise MessageTooLarge(
            f"The message is longer than {MESSAGE_MAX_CHARS} characters.",
            details={"max_chars": MESSAGE_MAX_CHARS, "chars": len(message)},
        )
    route = choose_route(
        message=message, use_agent=use_agent, use_rag=use_rag, documents_exist=True
    )
    # Only a question routed to RAG by the heuristic depends on documents: look only then.
    name = collection or settings.KNOWLEDGE_DEFAULT_COLLECTION
    if (
        route.mode == RunMode.RAG
        and route.reason == "heuristic"
        and not await sync_to_async(collection_has_chunks, thread_sensitive=False)(name)
    ):
        route = choose_route(
            message=message, use_agent=use_agent, use_rag=use_rag, documents_exist=False
        )
    if route.rag:
        # Asked for RAG on a collection that does not exist (the default one too): 404 now,
        # not a failed run.
        await sync_to_async(open_collection, thread_sensitive=False)(name)
    run, stored = await sync_to_async(_open_turn)(
        user=user,
        message=message,
        mode=route.mode,
        tools=tools if route.agent else None,
        request_id=request_id,
        conversation_id=conversation_id,
        history=history if conversation_id is None else None,
    )
    assert run.conversation_id is not None
    short_term_memory().appended(run.conversation_id, stored)
    logger.info("chat_turn_started", run_id=str(run.id), route=route.mode, reason=route.reason)
    task = run_start(run, conversation=ChatConversation(stored[-1]), collection=collection)
    return ChatTurn(run=run, route=route, task=task)


def _open_turn(
    *,
    user: Any,
    message: str,
    mode: str,
    tools: list[str] | None,
    request_id: str,
    conversation_id: uuid.UUID | None,
    history: Sequence[NewMessage] | None,
) -> tuple[AgentRun, list[Message]]:
    """The conversation (locked, or new with ``history``), the run, and the user's message,
    stored in one transaction. Returns the run and the stored messages (the user's last)."""
    with transaction.atomic():
        if conversation_id is not None:
            conversation = conversation_locked_for(user=user, conversation_id=conversation_id)
        else:
            conversation = conversation_create(owner=user)
        run = run_create_sync(
            user=user,
            message=message,
            mode=mode,
            tools=tools,
            request_id=request_id,
            conversation_id=conversation.id,
        )
        stored = messages_build(
            conversation=conversation,
            messages=[
                *(history or ()),
                NewMessage(role=MessageRole.USER, content=message, step_id=run.id),
            ],
        )
        # Only the run's own message belongs to it; a new conversation's earlier turns
        # belong to no run.
        stored[-1].run_id = run.id
        stored[-1].request_id = request_id
        Message.objects.bulk_create(stored)
        conversation.save(update_fields=["last_sequence", "title", "updated_at"])
    return run, stored


class ChatConversation:
    """A chat turn's conversation, as its run sees it (``agent.conversation``): the history
    with its memory going in (recorded as ``memory_read`` steps), the transcript and answer
    stored as messages when the run ends, then long-term memory consolidated (a
    ``memory_write`` step)."""

    def __init__(self, asked: Message) -> None:
        """``asked``: the turn's stored user message."""
        self.asked = asked

    async def history(self, run: AgentRun) -> list[ChatMessage]:
        assert run.conversation_id is not None
        assert run.trace_id is not None
        recollection = await recall(
            conversation_id=run.conversation_id,
            before_sequence=self.asked.sequence,
            query=run.input,
        )
        turns = recollection.turns
        long_term = StepCreate(
            step_type="memory_read",
            parent_id=run.id,
            name="long-term memory",
            status=StepStatus.FAILED if recollection.error else StepStatus.COMPLETED,
            description=f"{len(recollection.facts)} facts recalled",
            error=recollection.error,
            data={
                "facts": recollection.facts,
                "summaries": recollection.summaries,
                "searched": recollection.searched,
            },
        )
        # In the run's thread with its connection back in the pool after it: the run goes on to
        # wait on the model, and a connection held meanwhile is one the pool lacks.
        await in_thread(
            get_trace_store().add_steps_sync,
            run.trace_id,
            [
                StepCreate(
                    step_type="memory_read",
                    parent_id=run.id,
                    name="short-term memory",
                    description=f"{len(turns)} earlier turns of the conversation",
                    data={
                        "turns": len(turns),
                        "from_sequence": turns[0].sequence if turns else None,
                        "through_sequence": turns[-1].sequence if turns else None,
                        "cached": recollection.cached,
                    },
                ),
                long_term,
            ],
        )
        if recollection.facts:
            await self._append(
                run,
                [
                    NewMessage(
                        role=MessageRole.SYSTEM,
                        content=long_term_message(recollection.facts),
                        kind=MessageKind.MEMORY,
                        step_id=long_term.id,
                    )
                ],
            )
        return recollection.messages()

    async def finished(
        self,
        run: AgentRun,
        *,
        status: str,
        transcript: Sequence[TranscriptEntry],
        answer: RunAnswer | None,
        llm: LLMProvider,
    ) -> None:
        assert run.conversation_id is not None
        assert run.trace_id is not None
        messages = [
            NewMessage(
                role=entry.role, content=entry.content, kind=MessageKind.STEP, step_id=entry.step_id
            )
            for entry in transcript
        ]
        if answer is not None:
            messages.append(
                NewMessage(role=MessageRole.ASSISTANT, content=answer.text, step_id=answer.step_id)
            )
        stored = await self._append(run, messages)
        if status != RunStatus.COMPLETED or not stored:
            return
        done = await consolidate(
            conversation_id=run.conversation_id, llm=llm, through_sequence=stored[-1].sequence
        )
        if done is None:
            return
        await get_trace_store().add_step(
            run.trace_id,
            StepCreate(
                step_type="memory_write",
                parent_id=run.id,
                name="long-term memory",
                status=StepStatus.FAILED if done.error else StepStatus.COMPLETED,
                description=(
                    f"{len(done.facts)} facts from {done.summarised_turns} turns"
                    if not done.error
                    else f"{done.summarised_turns} turns not summarised"
                ),
                error=done.error,
                data={
                    "summary_id": done.summary_id,
                    "from_sequence": done.from_sequence,
                    "through_sequence": done.through_sequence,
                    "summarised_turns": done.summarised_turns,
                    "facts": done.facts,
                },
            ),
        )

    async def _append(self, run: AgentRun, messages: list[NewMessage]) -> list[Message]:
        """Append to the run's conversation, keeping the short-term memory cache in step."""
        assert run.conversation_id is not None
        if not messages:
            return []
        stored = await in_thread(
            messages_append,
            conversation_id=run.conversation_id,
            messages=messages,
            run_id=run.id,
            request_id=run.request_id,
        )
        short_term_memory().appended(run.conversation_id, stored)
        return stored


async def chat_turn_result(*, turn: ChatTurn) -> dict[str, Any]:
    """Wait for the turn's run (it goes on if the caller goes away) and return
    ``{conversation_id, run_id, trace_id, route, model, reply, steps, sources}``. A run that
    did not complete raises what ``agent.executor.run_outcome`` raises (``RunCancelled``, the
    failure's error) with the run in ``details``."""
    run = await run_outcome(turn.run, turn.task)
    steps = (await sync_to_async(run_steps)([run]))[run.id]
    answer = (
        await Message.objects.filter(run=run, role=MessageRole.ASSISTANT, kind=MessageKind.TURN)
        .select_related("step")
        .afirst()
    )
    return {
        "conversation_id": run.conversation_id,
        "run_id": run.id,
        "trace_id": run.trace_id,
        "route": run.mode,
        "model": run.model,
        "reply": run.output,
        "steps": steps,
        "sources": answer_sources(answer) if answer else [],
    }
