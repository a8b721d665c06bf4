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
from dataclasses import dataclass, replace
from typing import Any

import structlog
from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import transaction
from django.utils.translation import gettext_noop

from agent.conversation import RunAnswer, TranscriptEntry
from agent.executor import run_outcome, run_start
from agent.knowledge.store import collection_has_chunks, open_collection
from agent.llm.base import ChatMessage, LLMProvider
from agent.models import AgentRun, RunMode, RunStatus
from agent.recorder import model_call_step, unanswered_call_step
from agent.selectors import run_outcomes, run_steps
from agent.services import run_create, run_create_sync
from chat.attachments import attachment_inputs, attachments_copy, files_stored
from chat.exceptions import ChatInputInvalid, MessageActionInvalid, MessageTooLarge
from chat.memory import (
    Consolidation,
    SummaryCall,
    consolidate,
    long_term_message,
    recall,
    short_term_memory,
)
from chat.models import Attachment, Conversation, Message, MessageKind, MessageRole
from chat.route_choice import Route, choose_route
from chat.selectors import answer_sources, conversation_locked_for, message_get_for
from chat.services import (
    NewMessage,
    conversation_create,
    conversation_ensure_idle,
    messages_append,
    messages_build,
)
from chat.titles import title_from_model, wants_model_title
from devassist.connections import in_thread
from sandbox.files import InputFile, input_files
from traces.models import StepStatus
from traces.store import StepCreate, get_trace_store

logger = structlog.get_logger(__name__)

#: The longest message a chat turn accepts, in characters (longer ones are 413).
MESSAGE_MAX_CHARS = 32_000


@dataclass(frozen=True)
class ChatTurn:
    """A started turn: its run (executing as ``task``), the route it took and the user
    message it answers (None for a run outside a conversation)."""

    run: AgentRun
    route: Route
    task: asyncio.Task[None]
    asked: Message | None = None


async def agent_turn_start(
    *,
    user: Any,
    message: str,
    tools: list[str] | None = None,
    conversation_id: uuid.UUID | None = None,
    collection: str | None = None,
    files: Sequence[tuple[str, bytes]] = (),
    request_id: str = "",
) -> ChatTurn:
    """The agent on ``message``: a turn of the user's conversation ``conversation_id`` that
    takes the agent route (``chat_turn_start``), or, without one, a run on its own.
    ``collection`` is what ``search_docs`` searches unless the model names another; ``files``
    (name, bytes) are given to the run's code. Raises as ``chat_turn_start`` (a run on its
    own: ``AgentInputInvalid``, ``CollectionNotFound``, ``SandboxInputsTooLarge``)."""
    if conversation_id is not None:
        return await chat_turn_start(
            user=user,
            message=message,
            conversation_id=conversation_id,
            use_agent=True,
            collection=collection,
            tools=tools,
            files=files,
            request_id=request_id,
        )
    inputs = input_files(files)
    if collection:
        await sync_to_async(open_collection, thread_sensitive=False)(collection)
    run = await run_create(
        user=user, message=message, tools=tools, request_id=request_id, inputs=inputs
    )
    task = run_start(run, collection=collection, inputs=inputs)
    return ChatTurn(run=run, route=Route(RunMode.AGENT, "explicit"), task=task)


async def agent_turn_result(*, turn: ChatTurn) -> dict[str, Any]:
    """Wait for the agent's run and return ``{run_id, trace_id, conversation_id, answer,
    steps}``; raises as ``chat_turn_result``."""
    run = await run_outcome(turn.run, turn.task)
    outcome = (await sync_to_async(run_outcomes)([run]))[run.id]
    return {
        "run_id": run.id,
        "trace_id": run.trace_id,
        "conversation_id": run.conversation_id,
        "answer": outcome.answer,
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
    files: Sequence[tuple[str, bytes]] = (),
    request_id: str = "",
    edit_of: Message | None = None,
) -> ChatTurn:
    """Route ``message`` (``chat.route_choice``) and start its run in the conversation.

    With ``conversation_id`` the conversation's own turns are the history and ``history`` is
    ignored; without it a new conversation is created holding ``history``. The message follows
    the end of the branch shown, or with ``edit_of`` (a user message of the conversation) it
    is a new version of that message, forking the conversation there. ``tools`` limits an
    agent run's tools. ``files`` (name, bytes) are attached to the message and given to its
    runs' code under ``/tmp/inputs`` (an edit keeps the original's files); a message with files
    takes the agent's route unless it names one. Raises ``ChatInputInvalid`` (400) for an
    empty message, ``SandboxInputsTooLarge`` (413) for too many or too large files,
    ``MessageTooLarge`` (413) past ``MESSAGE_MAX_CHARS``, ``ConversationNotFound`` (404) for an
    unknown or foreign conversation, ``CollectionNotFound`` (404) when RAG is asked of a
    missing collection (or the agent of a missing ``collection`` named), ``AgentInputInvalid``
    (400) for an unknown tool, ``ConversationBusy`` (409) while a run of the conversation is
    going (its answer comes first). ``collection`` is what RAG answers from and the agent's
    ``search_docs`` searches by default."""
    _check_message(message)
    new_files = input_files(files)
    route = await _route(
        message,
        use_agent=use_agent,
        use_rag=use_rag,
        collection=collection,
        has_files=bool(new_files),
    )
    kept = await sync_to_async(attachment_inputs)(edit_of) if edit_of is not None else ()
    run, stored = await sync_to_async(_open_turn)(
        user=user,
        message=message,
        mode=route.mode,
        tools=tools if route.agent else None,
        request_id=request_id,
        conversation_id=conversation_id,
        history=history if conversation_id is None else None,
        edit_of=edit_of,
        inputs=new_files + kept,
        new_files=new_files,
    )
    assert run.conversation_id is not None
    short_term_memory().appended(run.conversation_id, stored)
    logger.info("chat_turn_started", run_id=str(run.id), route=route.mode, reason=route.reason)
    task = run_start(
        run,
        conversation=ChatConversation(stored[-1]),
        collection=collection,
        inputs=new_files + kept,
    )
    return ChatTurn(run=run, route=route, task=task, asked=stored[-1])


async def chat_turn_regenerate(
    *,
    user: Any,
    message_id: uuid.UUID,
    use_agent: bool | None = None,
    use_rag: bool | None = None,
    collection: str | None = None,
    request_id: str = "",
) -> ChatTurn:
    """Answer a user message again: ``message_id`` is an answer (regenerate it: the new run
    takes its route unless one is asked for) or a user message. The new answer is another
    version beside the earlier ones, which stay; the conversation shows the branch of the
    user message while the run goes. Raises ``MessageNotFound`` (404),
    ``MessageActionInvalid`` (400) for an answer that answers no user message,
    ``ConversationBusy`` (409) while a run of the conversation is going, and as
    ``chat_turn_start``."""
    target = await sync_to_async(message_get_for)(user=user, message_id=message_id)
    asked: Message | None = target
    if target.role == MessageRole.ASSISTANT:
        asked = await Message.objects.filter(pk=target.parent_id or uuid.UUID(int=0)).afirst()
        if asked is None or asked.role != MessageRole.USER:
            raise MessageActionInvalid(
                gettext_noop("This answer answers no message of yours to ask again.")
            )
        if use_agent is None and use_rag is None and target.run is not None:
            # The answer's own route (both flags false is the plain chat).
            use_agent = target.run.mode == RunMode.AGENT
            use_rag = target.run.mode == RunMode.RAG
    assert asked is not None
    route = await _route(asked.content, use_agent=use_agent, use_rag=use_rag, collection=collection)
    inputs = await sync_to_async(attachment_inputs)(asked)
    run = await sync_to_async(_open_regeneration)(
        user=user, asked=asked, mode=route.mode, request_id=request_id, inputs=inputs
    )
    logger.info("chat_turn_regenerated", run_id=str(run.id), asked=str(asked.id), route=route.mode)
    task = run_start(
        run, conversation=ChatConversation(asked), collection=collection, inputs=inputs
    )
    return ChatTurn(run=run, route=route, task=task, asked=asked)


async def chat_turn_edit(
    *,
    user: Any,
    message_id: uuid.UUID,
    message: str,
    use_agent: bool | None = None,
    use_rag: bool | None = None,
    collection: str | None = None,
    request_id: str = "",
) -> ChatTurn:
    """Send an edited version of the user message ``message_id``: a new message beside it
    (the conversation forks there; the earlier version and what followed it stay) and its
    run. Raises ``MessageNotFound`` (404), ``MessageActionInvalid`` (400) for an answer, and
    as ``chat_turn_start``."""
    original = await sync_to_async(message_get_for)(user=user, message_id=message_id)
    if original.role != MessageRole.USER:
        raise MessageActionInvalid(gettext_noop("Only your own messages can be edited."))
    return await chat_turn_start(
        user=user,
        message=message,
        conversation_id=original.conversation_id,
        use_agent=use_agent,
        use_rag=use_rag,
        collection=collection,
        request_id=request_id,
        edit_of=original,
    )


def _check_message(message: str) -> None:
    if not message.strip():
        raise ChatInputInvalid(gettext_noop("The message is empty."))
    if len(message) > MESSAGE_MAX_CHARS:
        raise MessageTooLarge(
            f"The message is longer than {MESSAGE_MAX_CHARS} characters.",
            details={"max_chars": MESSAGE_MAX_CHARS, "chars": len(message)},
        )


async def _route(
    message: str,
    *,
    use_agent: bool | None,
    use_rag: bool | None,
    collection: str | None,
    has_files: bool = False,
) -> Route:
    """The route ``message`` takes; raises ``CollectionNotFound`` (404) when RAG (or the agent
    with ``collection`` named) is asked of a collection that does not exist."""
    route = choose_route(
        message=message,
        use_agent=use_agent,
        use_rag=use_rag,
        documents_exist=True,
        has_files=has_files,
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
    if route.rag or (route.agent and collection):
        # Asked for RAG (or the agent) on a collection that does not exist (the default one
        # too, for RAG): 404 now, not a failed run.
        await sync_to_async(open_collection, thread_sensitive=False)(name)
    return route


def _open_turn(
    *,
    user: Any,
    message: str,
    mode: str,
    tools: list[str] | None,
    request_id: str,
    conversation_id: uuid.UUID | None,
    history: Sequence[NewMessage] | None,
    edit_of: Message | None = None,
    inputs: tuple[InputFile, ...] = (),
    new_files: tuple[InputFile, ...] = (),
) -> tuple[AgentRun, list[Message]]:
    """The conversation (locked, or new with ``history``), the run (with ``inputs``), and the
    user's message (a new version of ``edit_of`` when given, keeping its files) with its
    ``new_files``, stored in one transaction (the files' bytes just before). Returns the run
    and the stored messages (the user's last)."""
    with files_stored(new_files) as attachments, transaction.atomic():
        if conversation_id is not None:
            conversation = conversation_locked_for(user=user, conversation_id=conversation_id)
            conversation_ensure_idle(conversation=conversation)
        else:
            conversation = conversation_create(owner=user)
        run = run_create_sync(
            user=user,
            message=message,
            mode=mode,
            tools=tools,
            request_id=request_id,
            conversation_id=conversation.id,
            inputs=inputs,
        )
        asked = NewMessage(role=MessageRole.USER, content=message, step_id=run.id)
        if edit_of is not None:
            asked = replace(asked, parent_id=edit_of.parent_id, follows_tip=False)
        stored = messages_build(conversation=conversation, messages=[*(history or ()), asked])
        # Only the run's own message belongs to it; a new conversation's earlier turns
        # belong to no run.
        stored[-1].run_id = run.id
        stored[-1].request_id = request_id
        Message.objects.bulk_create(stored)
        for attachment in attachments:
            attachment.message = stored[-1]
        Attachment.objects.bulk_create(attachments)
        if edit_of is not None:
            attachments_copy(source=edit_of, to=stored[-1])
        conversation.save(update_fields=["last_sequence", "title", "current", "updated_at"])
    return run, stored


def _open_regeneration(
    *, user: Any, asked: Message, mode: str, request_id: str, inputs: tuple[InputFile, ...]
) -> AgentRun:
    """The run that answers ``asked`` again, with the conversation showing ``asked``'s branch,
    in one transaction (the conversation locked: no other run may be going)."""
    with transaction.atomic():
        conversation = conversation_locked_for(user=user, conversation_id=asked.conversation_id)
        conversation_ensure_idle(conversation=conversation)
        run = run_create_sync(
            user=user,
            message=asked.content,
            mode=mode,
            tools=None,
            request_id=request_id,
            conversation_id=conversation.id,
            inputs=inputs,
        )
        conversation.current_id = asked.id
        conversation.save(update_fields=["current", "updated_at"])
    return run


def _summary_call_step(
    call: SummaryCall, *, parent_id: uuid.UUID, done: Consolidation, llm: LLMProvider
) -> StepCreate:
    """The model call that summarised the turns, as a ``thought`` step under the memory
    write (``parent_id``), with the prompt it was sent: its tokens count in the trace's, and
    the OTel export sends it as a model call of its own. Failed with the error when the model
    failed (a summary the store would not take has the model's reply all the same)."""
    if call.response is None:
        return unanswered_call_step(
            parent_id=parent_id,
            name="summary",
            model=llm.model,
            started_at=call.started_at,
            error=done.error,
            data={"input": call.messages},
        )
    return model_call_step(
        call.response,
        parent_id=parent_id,
        name="summary",
        started_at=call.started_at,
        description=f"{len(done.facts)} facts" if done.facts else "",
        data={"input": call.messages},
    )


class ChatConversation:
    """A chat turn's conversation, as its run sees it (``agent.conversation``): the history
    with its memory going in (recorded as ``memory_read`` steps), the transcript and answer
    stored as messages when the run ends, the conversation titled after its first exchange
    (``chat.titles``), then long-term memory consolidated (a ``memory_write`` step)."""

    def __init__(self, asked: Message) -> None:
        """``asked``: the turn's stored user message."""
        self.asked = asked

    async def history(self, run: AgentRun) -> list[ChatMessage]:
        assert run.conversation_id is not None
        assert run.trace_id is not None
        recollection = await recall(
            conversation_id=run.conversation_id, asked_id=self.asked.id, query=run.input
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
        # Every run ends with its answer turn, beside the earlier answers to the same message:
        # a run that failed or was stopped keeps what it wrote (possibly nothing).
        messages.append(
            NewMessage(
                role=MessageRole.ASSISTANT,
                content=answer.text if answer is not None else "",
                step_id=answer.step_id if answer is not None else None,
                parent_id=self.asked.id,
                follows_tip=False,
            )
        )
        stored = await self._append(run, messages)
        if status != RunStatus.COMPLETED or answer is None:
            return
        if self.asked.parent_id is None:
            conversation = await Conversation.objects.aget(pk=run.conversation_id)
            if wants_model_title(conversation=conversation, llm=llm):
                await title_from_model(
                    run=run, question=self.asked.content, answer=answer.text, llm=llm
                )
        done = await consolidate(
            conversation_id=run.conversation_id, llm=llm, through_id=stored[-1].id
        )
        if done is None:
            return
        written = StepCreate(
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
        )
        steps = [written]
        if done.call is not None:
            steps.append(_summary_call_step(done.call, parent_id=written.id, done=done, llm=llm))
        await in_thread(get_trace_store().add_steps_sync, run.trace_id, steps)

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
    outcome = (await sync_to_async(run_outcomes)([run]))[run.id]
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
        "reply": outcome.answer,
        "steps": steps,
        "sources": answer_sources(answer) if answer else [],
    }
