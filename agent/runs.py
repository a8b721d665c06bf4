"""Run lifecycle: create a run and its trace, execute it as a task independent of any HTTP
connection, record every iteration as it happens, cancel it, and follow its events.

A run has a mode (``agent.models.RunMode``): ``agent`` runs the ReAct loop with tools; ``chat``
streams the model's answer to the message with the conversation as history; ``rag`` retrieves
chunks from a knowledge collection and streams an answer that cites them (``sources``). Every
mode is recorded in the run's trace and emits the same SSE events (``meta``, ``step``s,
``delta``s, ``error``, ``done``), so re-attaching and cancelling work alike for all of them."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime
from http import HTTPStatus
from typing import Any

import orjson
import structlog
from asgiref.sync import ThreadSensitiveContext, sync_to_async
from django.db import transaction
from django.utils import timezone

from agent.events import RunEvents, run_control_group
from agent.knowledge.rag import rag_answer
from agent.knowledge.search import SearchResult
from agent.langfuse import langfuse_run_finished, langfuse_run_started
from agent.leases import LeaseKeeper, cancel_lost, worker_id
from agent.llm import get_llm
from agent.llm.base import ChatMessage, LLMProvider, LLMResponse, LLMTimeout, LLMUnavailable
from agent.loop import AgentCancelled, AgentMaxIterations, Iteration, LoopConfig, run_react
from agent.memory import consolidate, long_term_message, recall, short_term_memory
from agent.models import AgentRun, RunEvent, RunMode, RunStatus
from agent.slots import run_slot, waiting_for_slot
from agent.tools.registry import ToolContext, ToolNotFound, default_registry
from chat.models import Conversation, Message, MessageKind, MessageRole
from chat.selectors import conversation_locked_for
from chat.services import NewMessage, messages_append, messages_build
from devassist import db
from devassist.errors import ApiError, BadRequest, Conflict, Forbidden, NotFound
from devassist.follow import GroupListener, LayerFailed, broadcast
from traces.models import StepStatus, Trace, TraceMode, TraceStatus
from traces.store import StepCreate, get_trace_store

logger = structlog.get_logger(__name__)


class AgentInputInvalid(BadRequest):
    code = "agent_input_invalid"


class RunNotFound(NotFound):
    code = "run_not_found"


class RunFinished(Conflict):
    code = "run_finished"


#: The system message of a plain chat run (the conversation's turns follow it).
CHAT_SYSTEM_PROMPT = (
    "You are DevAssist, a developer assistant. Answer the user's message directly and "
    "concisely, in the language of the message. Use Markdown; put code in fenced blocks with "
    "their language."
)

#: A tool call that ends within this long is recorded in one transaction with its thought and
#: result; a longer one gets its thought and running action written once this has passed, so
#: live views show it running (``RunRecorder.tool_started``).
ACTION_WRITE_DELAY_S = 0.05

#: Runs executing in this process: their tasks and cancel events.
_running: dict[uuid.UUID, tuple[asyncio.Task[None], threading.Event]] = {}


async def run_create(
    *,
    user: Any,
    message: str,
    tools: list[str] | None = None,
    request_id: str = "",
    conversation_id: uuid.UUID | None = None,
    history: Sequence[NewMessage] | None = None,
    mode: str = RunMode.AGENT,
) -> AgentRun:
    """A running run with its trace (its root ``goal`` step has the run's id) and its first
    event, ``meta``, all stored in one transaction: the run is ready to follow and to start
    (``run_start``). With ``conversation_id`` (one of the user's), or ``history`` (the earlier
    turns of a new conversation created for the run, possibly none), the message is stored
    in the conversation before the run starts, and the run remembers the conversation
    (``agent.memory``). ``mode`` is a ``RunMode``; only ``agent`` runs use tools. Raises
    ``AgentInputInvalid`` for an empty message, an unknown tool name or mode,
    ``ConversationNotFound`` for an unknown or foreign conversation."""
    if not message or not message.strip():
        raise AgentInputInvalid("The message is empty.")
    if mode not in RunMode.values:
        raise AgentInputInvalid(f"Unknown run mode {mode!r}.", details={"modes": RunMode.values})
    registry = default_registry()
    if tools is not None:
        try:
            registry.subset(tools)
        except ToolNotFound as exc:
            raise AgentInputInvalid(
                exc.message, details={"tools": list(tools), "available": registry.names()}
            ) from exc
    run = AgentRun(
        user=user,
        request_id=request_id,
        mode=mode,
        status=RunStatus.RUNNING,
        input=message,
        tools=[]
        if mode != RunMode.AGENT
        else registry.names()
        if tools is None
        else sorted(set(tools)),
        model=get_llm().model,
        started_at=timezone.now(),
        owner=worker_id(),
        heartbeat_at=timezone.now(),
    )
    stored, trace_events = await sync_to_async(_open_run)(
        run, conversation_id=conversation_id, history=history
    )
    if stored:
        assert run.conversation_id is not None
        short_term_memory().appended(run.conversation_id, stored)
    assert run.trace_id is not None
    await get_trace_store().publish(run.trace_id, trace_events)
    return run


def run_meta(run: AgentRun) -> dict[str, Any]:
    """The run's first event, ``meta`` (seq 1), as ``run_create`` stores it."""
    return {
        "type": "meta",
        "conversation_id": str(run.conversation_id) if run.conversation_id else None,
        "run_id": str(run.id),
        "trace_id": str(run.trace_id),
        "agent": run.mode == RunMode.AGENT,
        "rag": run.mode == RunMode.RAG,
        "model": run.model,
    }


def _open_run(
    run: AgentRun,
    *,
    conversation_id: uuid.UUID | None,
    history: Sequence[NewMessage] | None,
) -> tuple[list[Message], list[dict[str, Any]]]:
    """Store the new ``run``: its trace with the goal step, its conversation's new messages
    (and the conversation, new or moved on), and its ``meta`` event, in one transaction and
    (for a new conversation) one round trip. Returns the stored messages and the trace's
    events to publish."""
    trace = Trace(
        user_id=run.user_id,
        task=run.input,
        mode=TraceMode.AGENT,
        agent_type="devassist",
        metadata={"run_mode": run.mode},
    )
    run.trace = trace
    goal = StepCreate(
        id=run.id,
        step_type="goal",
        name="task",
        status=StepStatus.RUNNING,
        description=run.input,
        data={"task": run.input, "tools": run.tools, "model": run.model},
    )
    with transaction.atomic():
        conversation: Conversation | None = None
        earlier: Sequence[NewMessage] = ()
        if conversation_id is not None:
            conversation = conversation_locked_for(user=run.user, conversation_id=conversation_id)
        elif history is not None:
            conversation = Conversation(owner_id=run.user_id)
            earlier = history
        stored: list[Message] = []
        writes: list[db.Statement] = []
        if conversation is not None:
            run.conversation = conversation
            stored = messages_build(
                conversation=conversation,
                messages=[*earlier, NewMessage(role=MessageRole.USER, content=run.input)],
            )
            # Only the run's own message belongs to it; a new conversation's earlier turns
            # belong to no run.
            stored[-1].run_id = run.id
            stored[-1].request_id = run.request_id
            if conversation_id is None:
                writes += db.insert_statements([conversation])
            else:
                writes.append(
                    db.update_statement(conversation, ["last_sequence", "title", "updated_at"])
                )
        meta = RunEvent(run_id=run.id, seq=1, type="meta", payload=run_meta(run))
        writes += [
            *db.insert_statements([run]),
            *db.insert_statements(stored),
            *db.insert_statements([meta]),
        ]
        events = get_trace_store().open_trace_sync(trace, [goal], with_writes=writes)
    return stored, events


async def _append_messages(run: AgentRun, messages: list[NewMessage]) -> list[Message]:
    """Append to the run's conversation, keeping the short-term memory cache in step."""
    assert run.conversation_id is not None
    stored = await db.in_thread(
        messages_append,
        conversation_id=run.conversation_id,
        messages=messages,
        run_id=run.id,
        request_id=run.request_id,
    )
    short_term_memory().appended(run.conversation_id, stored)
    return stored


def run_start(run: AgentRun, *, collection: str | None = None) -> asyncio.Task[None]:
    """Execute ``run`` as a task of the running loop; it goes on when the caller goes away.
    ``collection`` is the knowledge collection a ``rag`` run answers from (default:
    ``settings.KNOWLEDGE_DEFAULT_COLLECTION``)."""
    cancel = threading.Event()
    task = asyncio.get_running_loop().create_task(
        _execute_apart(run, cancel, collection=collection), name=f"run-{run.id}"
    )
    _running[run.id] = (task, cancel)
    task.add_done_callback(lambda _: _running.pop(run.id, None))
    _lease_keeper.ensure_started()
    return task


#: How long a cancel of a run of this process waits for it to end, to answer ``cancelled``
#: rather than ``cancelling``.
CANCEL_WAIT_S = 2.0


async def run_cancel(*, user: Any, run: AgentRun) -> AgentRun:
    """Stop the run: its model call, its tool (the sandbox container) and the loop. Only its
    owner may (staff browse other people's runs, they do not steer them). Works from any
    worker: the request travels on the channel layer, and is stored, so the run's own worker
    sees it on its next heartbeat if the relay cannot reach it; a run whose worker is gone is
    cancelled at once. Returns the run as it is after the request, finished when it stopped
    in time (see ``CANCEL_WAIT_S``). Raises ``Forbidden`` (someone else's run),
    ``RunFinished``."""
    if run.user_id != user.pk:
        raise Forbidden("Only the user who started a run can cancel it.")
    if run.is_finished:
        raise RunFinished(f"Run {run.id} is already {run.status}.", details={"status": run.status})
    await AgentRun.objects.filter(pk=run.id).aupdate(cancel_requested_at=timezone.now())
    if run.id in _running:
        task = _running[run.id][0]
        _stop_local(run.id)
        await asyncio.wait([task], timeout=CANCEL_WAIT_S)
    elif not await db.in_thread(cancel_lost, run):
        try:
            await broadcast(run_control_group(run.id), {"type": "run.cancel"})
        except Exception:
            # Stored: the run's worker sees it on its next heartbeat (``agent.leases``).
            logger.warning("run_cancel_relay_failed", run_id=str(run.id), exc_info=True)
    return await AgentRun.objects.aget(pk=run.id)


def _stop_local(run_id: uuid.UUID) -> bool:
    """Stop a run executing in this process, if it is one: its work watches ``cancel``, and a
    run waiting for a slot (doing nothing) is cancelled at once."""
    local = _running.get(run_id)
    if local is None:
        return False
    task, cancel = local
    cancel.set()
    if waiting_for_slot(task):
        task.cancel()
    return True


def _stop_from_thread(run_id: uuid.UUID) -> None:
    """``_stop_local`` from another thread (the lease keeper's), on the run's own loop."""
    local = _running.get(run_id)
    if local is not None:
        local[0].get_loop().call_soon_threadsafe(_stop_local, run_id)


#: This process's run leases (``agent.leases``): started with the server
#: (``devassist.asgi``), or with the first run of a process that is not one.
_lease_keeper = LeaseKeeper(local_runs=lambda: list(_running), stop=_stop_from_thread)


def run_leases_start() -> None:
    """Start this process's heartbeat: it renews its runs' leases and fails the runs of
    workers that are gone, whether or not this process runs anything itself."""
    _lease_keeper.ensure_started()


#: The HTTP status of a run that failed, by its error code (anything else is 500).
_FAILURE_STATUS = {
    error.code: error.status for error in (AgentMaxIterations, LLMUnavailable, LLMTimeout)
}


async def run_outcome(run: AgentRun, task: asyncio.Task[None]) -> AgentRun:
    """Wait for ``task`` (shielded: the run goes on if the caller goes away) and return the
    finished run. A run that did not complete raises ``ApiError`` with its code (409
    ``run_cancelled`` when cancelled) and the run, its trace and its conversation in
    ``details``."""
    await asyncio.shield(task)
    run = await AgentRun.objects.aget(pk=run.id)
    if run.status == RunStatus.COMPLETED:
        return run
    cancelled = run.status == RunStatus.CANCELLED
    details = {"run_id": str(run.id), "trace_id": str(run.trace_id)}
    if run.conversation_id is not None:
        details["conversation_id"] = str(run.conversation_id)
    raise ApiError(
        run.error or f"Run {run.status}.",
        code="run_cancelled" if cancelled else run.error_code or "internal_error",
        status=HTTPStatus.CONFLICT
        if cancelled
        else _FAILURE_STATUS.get(run.error_code, HTTPStatus.INTERNAL_SERVER_ERROR),
        details=details,
    )


async def run_get(*, user: Any, run_id: uuid.UUID) -> AgentRun:
    run = await AgentRun.objects.visible_to(user).filter(pk=run_id).afirst()
    if run is None:
        raise RunNotFound(f"Run {run_id} does not exist.")
    return run


async def _execute_apart(
    run: AgentRun, cancel: threading.Event, *, collection: str | None = None
) -> None:
    """``_execute`` with its synchronous work (database, sandbox) in a thread of its own, not
    in the thread of the request that started it (which ends with the request), and its
    connection back in the pool at the end."""
    async with ThreadSensitiveContext():
        try:
            await _execute(run, cancel, collection=collection)
        finally:
            await sync_to_async(db.release_connection)()


async def _execute(
    run: AgentRun, cancel: threading.Event, *, collection: str | None = None
) -> None:
    events = RunEvents(run.id, last_seq=1)  # 1 is meta, stored by run_create
    watcher = asyncio.create_task(_watch_for_cancel(run.id, cancel))
    llm = await langfuse_run_started(run=run, llm=get_llm())
    recorder = RunRecorder(run, events, llm)
    structlog.contextvars.bind_contextvars(run_id=str(run.id), trace_id=str(run.trace_id))
    try:
        async with run_slot():
            history = await recorder.remember() if run.conversation_id else []
            if run.mode == RunMode.RAG:
                answer = await _answer_from_documents(run, recorder, cancel, collection)
            elif run.mode == RunMode.CHAT and llm.writes_free_text:
                answer = await _chat(run, history, llm, recorder, cancel)
            else:
                # The offline provider answers only in the ReAct protocol, and all it can do
                # is run code it is given: its chat goes through the loop, with the tools.
                registry = default_registry()
                answer = await run_react(
                    task=run.input,
                    history=history,
                    llm=llm,
                    tools=registry.subset(run.tools) if run.mode == RunMode.AGENT else registry,
                    recorder=recorder,
                    context=ToolContext(user=run.user, run_id=run.id, cancel=cancel),
                    config=LoopConfig(),
                )
            await recorder.finish(RunStatus.COMPLETED, output=answer)
    except (AgentCancelled, asyncio.CancelledError):
        await asyncio.shield(recorder.finish(RunStatus.CANCELLED, error="Cancelled."))
    except ApiError as exc:
        await recorder.finish(RunStatus.FAILED, error=exc.message, code=exc.code)
    except Exception as exc:
        logger.exception("agent_run_crashed")
        await recorder.finish(
            RunStatus.FAILED, error=f"Internal error: {type(exc).__name__}", code="internal_error"
        )
    finally:
        watcher.cancel()
        with contextlib.suppress(BaseException):
            await watcher  # retrieve its end, whatever the layer raised on the way out
        structlog.contextvars.unbind_contextvars("run_id", "trace_id")


async def _chat(
    run: AgentRun,
    history: list[ChatMessage],
    llm: LLMProvider,
    recorder: RunRecorder,
    cancel: threading.Event,
) -> str:
    """One streamed model call on the conversation and the message; each piece of text goes
    out as a delta. Recorded as a ``thought`` step (the call) and the ``response``."""
    messages: list[ChatMessage] = [
        {"role": "system", "content": CHAT_SYSTEM_PROMPT},
        *history,
        {"role": "user", "content": run.input},
    ]
    started_at, started = time.time(), time.monotonic()
    text = ""
    response: LLMResponse | None = None
    async for chunk in llm.stream(messages, cancel=cancel):
        if chunk.response is not None:
            response = chunk.response
            break
        text += chunk.delta
        await recorder.answer_delta(chunk.delta)
    if cancel.is_set():
        raise AgentCancelled
    if response is None:
        response = LLMResponse(
            content=text, model=llm.model, latency_ms=int((time.monotonic() - started) * 1000)
        )
    await recorder.answered(
        response.content,
        streamed=True,
        model_call=recorder.model_call(response, name="chat", started_at=started_at),
    )
    return response.content


async def _answer_from_documents(
    run: AgentRun, recorder: RunRecorder, cancel: threading.Event, collection: str | None
) -> str:
    """Retrieve (a ``step`` event the moment the chunks are found) and answer with sources
    (``agent.knowledge.rag``), streaming the answer as deltas."""
    started_at, started = time.time(), time.monotonic()
    streamed = ""

    async def retrieved(chunks: list[SearchResult]) -> None:
        await recorder.retrieved(
            chunks, collection=collection, started_at=started_at, started=started
        )

    async def delta(text: str) -> None:
        nonlocal streamed
        streamed += text
        await recorder.answer_delta(text)

    result = await rag_answer(
        question=run.input,
        collection=collection,
        cancel=cancel,
        on_retrieved=retrieved,
        on_delta=delta,
    )
    if cancel.is_set():
        raise AgentCancelled
    # The Sources list (and an extractive answer) are not streamed by the model.
    if result.answer.startswith(streamed):
        await recorder.answer_delta(result.answer[len(streamed) :])
    elif streamed:
        await recorder.answer_delta("\n\n" + result.answer)
    sources = [
        {
            "number": s.number,
            "source": s.source,
            "chunk_index": s.chunk_index,
            "title": s.title,
            "label": s.label,
        }
        for s in result.sources
    ]
    recorder.answer_metadata["sources"] = sources
    await recorder.answered(result.answer, streamed=True, data={"sources": sources})
    return result.answer


async def _watch_for_cancel(run_id: uuid.UUID, cancel: threading.Event) -> None:
    """Stops the run when another worker relays a cancel request. Without a channel layer
    the stored request reaches the run on its worker's next heartbeat (``agent.leases``)."""
    listener = GroupListener(run_control_group(run_id))
    try:
        await listener.join()
        while not cancel.is_set():
            message = await listener.receive()
            if message is not None and message.get("type") == "run.cancel":
                _stop_local(run_id)  # the run is this process's: the watcher is part of it
    except LayerFailed as exc:
        logger.warning("run_cancel_watch_failed", run_id=str(run_id), error=str(exc))
    finally:
        await listener.leave()


#: What a run's end changes (``RunRecorder.finish``).
_RUN_END_FIELDS = ["status", "output", "error", "error_code", "finished_at"]

#: A run's trace ends with the run's status (anything else is a failure).
_TRACE_STATUS: dict[str, str] = {
    RunStatus.COMPLETED.value: TraceStatus.COMPLETED,
    RunStatus.CANCELLED.value: TraceStatus.CANCELLED,
}


def _store_run_end(run_end: db.Statement, rows: list[RunEvent]) -> None:
    with transaction.atomic():
        db.run([run_end, *db.insert_statements(rows)])


def _ms(epoch_s: float) -> int:
    return int(epoch_s * 1000)


class RunRecorder:
    """Writes the run into its trace (goal → thought → action → result, and the response)
    through the trace store as it happens, and its SSE events alongside."""

    def __init__(self, run: AgentRun, events: RunEvents, llm: LLMProvider) -> None:
        """The run, its goal step and its ``meta`` event are stored already (``run_create``);
        ``llm`` is the model the run calls."""
        self.run = run
        self.events = events
        self.store = get_trace_store()
        self.goal_id = run.id  # run_create gives the goal step the run's id
        self.first_output = False
        self.step_count = 0
        self.llm = llm
        #: What the model produced and was shown during the run, for the conversation.
        self.transcript: list[NewMessage] = []
        #: Stored with the final answer's message (a RAG answer's ``sources``).
        self.answer_metadata: dict[str, Any] = {}
        #: The thought and action of the tool call in progress, not written yet, and the task
        #: that writes them if the tool takes longer than ``ACTION_WRITE_DELAY_S``.
        self._unwritten: tuple[StepCreate, StepCreate] | None = None
        self._started_write: asyncio.Task[None] | None = None

    async def model_replied(self, iteration: Iteration) -> None:
        response, parsed = iteration.response, iteration.parsed
        assert response is not None
        assert parsed is not None
        assert self.run.trace_id is not None
        thought = self.model_call(
            response,
            name=f"iteration {iteration.index}",
            started_at=iteration.started_at,
            description=parsed.thought,
            data={"thought": parsed.thought, "action_raw": response.content},
        )
        iteration.handles["thought"] = thought.id
        self.transcript.append(
            NewMessage(
                role=MessageRole.ASSISTANT,
                content=response.content,
                kind=MessageKind.STEP,
                metadata={"iteration": iteration.index, "step_id": str(thought.id)},
            )
        )
        if parsed.action is not None:
            # Written with its action in one transaction when the tool starts, a moment later.
            iteration.handles["thought_step"] = thought
            return
        await self.store.add_step(self.run.trace_id, thought)

    async def tool_started(self, iteration: Iteration) -> None:
        """The thought and its running action are written once the tool has run for
        ``ACTION_WRITE_DELAY_S``, or with the result if it ends sooner (one transaction instead
        of two for quick tools, and nothing a person could have watched is lost)."""
        action = StepCreate(
            step_type="action",
            parent_id=iteration.handles["thought"],
            name=iteration.tool_name or "",
            status=StepStatus.RUNNING,
            data={"tool_name": iteration.tool_name, "arguments": iteration.tool_args},
            started_at=timezone.now(),
        )
        iteration.handles["action"] = action.id
        iteration.handles["action_started"] = asyncio.get_running_loop().time()
        self._unwritten = (iteration.handles.pop("thought_step"), action)
        self._started_write = asyncio.create_task(self._write_started_later())

    async def _write_started_later(self) -> None:
        await asyncio.sleep(ACTION_WRITE_DELAY_S)
        await self._write_started()

    async def _write_started(self) -> None:
        assert self.run.trace_id is not None
        if self._unwritten is not None:
            steps, self._unwritten = self._unwritten, None
            await self.store.add_steps(self.run.trace_id, list(steps))

    async def _settle_started(self) -> tuple[StepCreate, StepCreate] | None:
        """The tool call's thought and action if they are still unwritten (the delayed write
        is called off); otherwise None, once their write is done."""
        task, self._started_write = self._started_write, None
        if task is None:
            return None
        if self._unwritten is not None and not task.done():
            # Still sleeping: a write in flight has already taken the steps out.
            task.cancel()
            unwritten, self._unwritten = self._unwritten, None
            return unwritten
        await task
        return None

    async def iteration_finished(self, iteration: Iteration) -> None:
        assert self.run.trace_id is not None
        assert iteration.parsed is not None
        loop_time = asyncio.get_running_loop().time()
        parent = iteration.handles.get("action", iteration.handles["thought"])
        status = StepStatus.FAILED if iteration.error else StepStatus.COMPLETED
        result = StepCreate(
            step_type="result",
            parent_id=parent,
            name=iteration.tool_name or "format",
            status=status,
            error=iteration.error or "",
            data={
                "observation": iteration.observation,
                "result_truncated": iteration.observation_truncated,
            },
        )
        steps = [result]
        updates = {}
        if "action" in iteration.handles:
            tool_ms = int((loop_time - iteration.handles["action_started"]) * 1000)
            unwritten = await self._settle_started()
            if unwritten is None:
                updates[iteration.handles["action"]] = {"status": status, "duration_ms": tool_ms}
            else:
                thought, action = unwritten
                done = replace(
                    action, status=status, duration_ms=tool_ms, finished_at=timezone.now()
                )
                steps = [thought, done, result]
        self.step_count += 1
        # The step event commits with the result step: the step is finished when both are
        # stored, and it goes out at once.
        event = await self.events.prepare(
            "step",
            step_index=self.step_count,
            step_id=str(iteration.handles["thought"]),
            thought=iteration.parsed.thought,
            action_raw=iteration.response.content if iteration.response else "",
            tool_name=iteration.tool_name,
            tool_args=iteration.tool_args,
            observation=iteration.observation,
            error=iteration.error,
            started_at_ms=_ms(iteration.started_at),
            finished_at_ms=_ms(time.time()),
            latency_ms=int((time.monotonic() - iteration.started) * 1000),
        )
        await self.store.add_steps(self.run.trace_id, steps, updates=updates, with_rows=[event])
        await self.events.publish(event)
        self.transcript.append(
            NewMessage(
                role=MessageRole.TOOL,
                content=iteration.observation,
                kind=MessageKind.STEP,
                metadata={
                    "iteration": iteration.index,
                    "step_id": str(result.id),
                    "tool_name": iteration.tool_name,
                    "error": iteration.error,
                },
            )
        )
        await self._first_output()

    def model_call(
        self,
        response: LLMResponse,
        *,
        name: str,
        started_at: float,
        description: str = "",
        data: dict[str, Any] | None = None,
    ) -> StepCreate:
        """A model call as a ``thought`` step under the goal: its model, usage and timing
        (``started_at`` in epoch seconds), and ``data`` besides."""
        return StepCreate(
            step_type="thought",
            parent_id=self.goal_id,
            name=name,
            status=StepStatus.COMPLETED,
            description=description,
            data={
                **(data or {}),
                "model": response.model,
                "finish_reason": response.finish_reason,
                "prompt_tokens": response.usage.prompt_tokens,
                "completion_tokens": response.usage.completion_tokens,
            },
            tokens=response.usage.total_tokens,
            duration_ms=response.latency_ms,
            started_at=datetime.fromtimestamp(started_at, tz=UTC),
        )

    async def retrieved(
        self,
        chunks: list[SearchResult],
        *,
        collection: str | None,
        started_at: float,
        started: float,
    ) -> None:
        """A RAG run's retrieval: an ``action`` step (``search_docs``) with its ``result``,
        and a ``step`` event shaped like an agent iteration's."""
        assert self.run.trace_id is not None
        args = {"query": self.run.input, "collection": collection}
        found = [
            {
                "source": c.source,
                "chunk_index": c.chunk_index,
                "title": c.title,
                "score": c.score,
            }
            for c in chunks
        ]
        observation = orjson.dumps({"results": found}).decode()
        action = StepCreate(
            step_type="action",
            parent_id=self.goal_id,
            name="search_docs",
            status=StepStatus.COMPLETED,
            data={"tool_name": "search_docs", "arguments": args},
            duration_ms=int((time.monotonic() - started) * 1000),
            started_at=datetime.fromtimestamp(started_at, tz=UTC),
        )
        result = StepCreate(
            step_type="result",
            parent_id=action.id,
            name="search_docs",
            status=StepStatus.COMPLETED,
            description=f"{len(chunks)} chunks",
            data={"observation": observation, "results": found},
        )
        self.step_count += 1
        event = await self.events.prepare(
            "step",
            step_index=self.step_count,
            step_id=str(action.id),
            thought="",
            action_raw="",
            tool_name="search_docs",
            tool_args=args,
            observation=observation,
            error=None,
            started_at_ms=_ms(started_at),
            finished_at_ms=_ms(time.time()),
            latency_ms=int((time.monotonic() - started) * 1000),
        )
        await self.store.add_steps(self.run.trace_id, [action, result], with_rows=[event])
        await self.events.publish(event)
        self.transcript.append(
            NewMessage(
                role=MessageRole.TOOL,
                content=observation,
                kind=MessageKind.STEP,
                metadata={"step_id": str(result.id), "tool_name": "search_docs", "error": None},
            )
        )
        await self._first_output()

    async def answer_delta(self, text: str) -> None:
        await self.events.delta(text)
        await self._first_output()

    async def answered(
        self,
        answer: str,
        *,
        streamed: bool,
        data: dict[str, Any] | None = None,
        model_call: StepCreate | None = None,
    ) -> None:
        """The answer: its last text as a ``delta`` and its ``response`` step (after
        ``model_call``, the ``thought`` step of the call that wrote it, if any), stored in one
        transaction."""
        if not streamed:
            await self.events.delta(answer)
        assert self.run.trace_id is not None
        response = StepCreate(
            step_type="response",
            parent_id=self.goal_id,
            name="answer",
            status=StepStatus.COMPLETED,
            data={"answer": answer, **(data or {})},
        )
        delta = self.events.take_delta()
        await self.store.add_steps(
            self.run.trace_id,
            [model_call, response] if model_call is not None else [response],
            with_rows=[delta] if delta is not None else (),
        )
        if delta is not None:
            await self.events.publish(delta)
        await self._first_output()

    async def remember(self) -> list[ChatMessage]:
        """Recall the conversation for this run (recorded as two ``memory_read`` steps, and
        the long-term memory given to the model stored as a ``memory`` message); returns the
        history to put before the task."""
        assert self.run.trace_id is not None
        assert self.run.conversation_id is not None
        asked = await db.in_thread(
            Message.objects.filter(run_id=self.run.id, role=MessageRole.USER, kind=MessageKind.TURN)
            .only("sequence")
            .first
        )
        before = asked.sequence if asked else 0
        recollection = await recall(
            conversation_id=self.run.conversation_id, before_sequence=before, query=self.run.input
        )
        turns = recollection.turns
        await self.store.add_steps(
            self.run.trace_id,
            [
                StepCreate(
                    step_type="memory_read",
                    parent_id=self.goal_id,
                    name="short-term memory",
                    description=f"{len(turns)} earlier turns of the conversation",
                    data={
                        "turns": len(turns),
                        "from_sequence": turns[0].sequence if turns else None,
                        "through_sequence": turns[-1].sequence if turns else None,
                        "cached": recollection.cached,
                    },
                ),
                StepCreate(
                    step_type="memory_read",
                    parent_id=self.goal_id,
                    name="long-term memory",
                    status=StepStatus.FAILED if recollection.error else StepStatus.COMPLETED,
                    description=f"{len(recollection.facts)} facts recalled",
                    error=recollection.error,
                    data={
                        "facts": recollection.facts,
                        "summaries": recollection.summaries,
                        "searched": recollection.searched,
                    },
                ),
            ],
        )
        if recollection.facts:
            await _append_messages(
                self.run,
                [
                    NewMessage(
                        role=MessageRole.SYSTEM,
                        content=long_term_message(recollection.facts),
                        kind=MessageKind.MEMORY,
                    )
                ],
            )
        return recollection.messages()

    async def _close_conversation(self, status: str, output: str) -> None:
        """Store what the run added to its conversation (its transcript, and the answer when
        it completed), then let long-term memory take in what fell out of the window."""
        assert self.run.trace_id is not None
        assert self.run.conversation_id is not None
        messages = list(self.transcript)
        if status == RunStatus.COMPLETED:
            messages.append(
                NewMessage(
                    role=MessageRole.ASSISTANT,
                    content=output,
                    metadata={
                        "model": self.llm.model,
                        "mode": self.run.mode,
                        **self.answer_metadata,
                    },
                )
            )
        stored = await _append_messages(self.run, messages)
        if status != RunStatus.COMPLETED:
            return
        done = await consolidate(
            conversation_id=self.run.conversation_id,
            llm=self.llm,
            through_sequence=stored[-1].sequence,
        )
        if done is None:
            return
        await self.store.add_step(
            self.run.trace_id,
            StepCreate(
                step_type="memory_write",
                parent_id=self.goal_id,
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

    async def _first_output(self) -> None:
        if not self.first_output:
            self.first_output = True
            await db.in_thread(
                AgentRun.objects.filter(pk=self.run.id).update, first_output_at=timezone.now()
            )

    async def finish(
        self, status: str, *, output: str = "", error: str = "", code: str = ""
    ) -> None:
        """Final bookkeeping; never raises, so a failing run still records its failure."""
        try:
            # A tool call cut short (a cancelled run) keeps its thought and action.
            unwritten = await self._settle_started()
            await self.events.flush_delta()
            if self.run.conversation_id is not None:
                try:
                    await self._close_conversation(status, output)
                except Exception:
                    logger.exception("agent_run_conversation_update_failed")
            self.run.status, self.run.output = status, output
            self.run.error, self.run.error_code = error, code
            self.run.finished_at = timezone.now()
            run_end = db.update_statement(self.run, _RUN_END_FIELDS)
            rows = []
            if error:
                rows.append(
                    await self.events.prepare("error", code=code or "cancelled", message=error)
                )
            rows.append(await self.events.prepare("done", run_id=str(self.run.id), status=status))
            step_status: str = {
                RunStatus.COMPLETED.value: StepStatus.COMPLETED,
                RunStatus.CANCELLED.value: StepStatus.SKIPPED,
            }.get(status, StepStatus.FAILED)
            goal_changes: dict[str, Any] = {"status": step_status}
            if status == RunStatus.FAILED:
                goal_changes["error"] = error
            assert self.run.trace_id is not None
            try:
                # The run's end, its last events and the trace's end commit together.
                await self.store.add_steps(
                    self.run.trace_id,
                    list(unwritten or ()),
                    updates={self.goal_id: goal_changes},
                    with_rows=rows,
                    with_writes=[run_end],
                    complete=_TRACE_STATUS.get(status, TraceStatus.FAILED),
                )
            except Exception:
                # The trace would not take it (closed from outside, say): the run's end and
                # its events are stored all the same, so the run and its stream end.
                logger.exception("agent_run_trace_close_failed")
                await db.in_thread(_store_run_end, run_end, rows)
            for row in rows:
                await self.events.publish(row)
        except Exception:
            logger.exception("agent_run_finish_failed")
        await langfuse_run_finished(run=self.run, status=status, output=output, error=error)
