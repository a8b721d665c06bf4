"""The run's recorder: what the run does goes into its trace as it happens (goal → thought →
action → result, and the response), with the run's SSE events derived from those steps.

Each write is one transaction (``_write``): the steps through the trace store, the run's events
beside them (``agent.events``), and the run's own fields (lifecycle only: its answer and its
error are in its steps); the trace's and the run's events go out once it has committed.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

import orjson
import structlog
from django.db import transaction
from django.utils import timezone

from agent.conversation import RunAnswer, RunConversation, TranscriptEntry
from agent.events import RunEvents
from agent.knowledge.search import SearchResult
from agent.langfuse import langfuse_run_finished
from agent.llm.base import ChatMessage, LLMProvider, LLMResponse, usage_data
from agent.loop import Iteration
from agent.models import AgentRun, RunEvent, RunStatus
from agent.otel import otel_run_finished
from agent.projections import step_event, step_started_event
from devassist.connections import in_thread
from traces.models import StepStatus, TraceStatus
from traces.outcomes import result_status
from traces.projections import LIVE_OUTPUT_KEY
from traces.store import StepCreate, get_trace_store

logger = structlog.get_logger(__name__)

#: What a running tool's action step keeps of its output for the trace's watchers: the last
#: this many characters of each stream.
LIVE_OUTPUT_TAIL_CHARS = 2000


@dataclass(frozen=True)
class RunEnd:
    """How a run ended: its status, and its answer or its error (with the error's code), for
    its last events and Langfuse; what is stored of them is in its trace."""

    status: str
    output: str = ""
    error: str = ""
    code: str = ""


@dataclass
class _OpenIteration:
    """The iteration being recorded: its model call and, once the tool started, its call."""

    thought: StepCreate
    #: Whether the thought is stored (a reply that calls a tool is stored with the call).
    stored: bool = False
    action: StepCreate | None = None
    tool_started: float = 0.0  # monotonic
    #: The tail of what the running tool printed, per stream (its action's ``live_output``).
    live_output: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class _Call:
    """A model call under way: the name of its ``thought`` step, the messages it was sent,
    and when it began."""

    name: str
    messages: list[ChatMessage]
    started_at: float  # wall clock, epoch seconds


#: A run's trace ends with the run's status (anything else is a failure).
_TRACE_STATUS: dict[str, str] = {
    RunStatus.COMPLETED.value: TraceStatus.COMPLETED,
    RunStatus.CANCELLED.value: TraceStatus.CANCELLED,
}


def model_call_step(
    response: LLMResponse,
    *,
    parent_id: uuid.UUID,
    name: str,
    started_at: float,
    description: str = "",
    data: dict[str, Any] | None = None,
) -> StepCreate:
    """A model call as a ``thought`` step under ``parent_id``: its raw ``output``, model,
    finish reason, ``truncated`` (stopped at ``max_tokens``), ``usage`` (None when the server
    reported none: unknown, not zero) and timing (``started_at`` in epoch seconds), and
    ``data`` besides."""
    return StepCreate(
        step_type="thought",
        parent_id=parent_id,
        name=name,
        status=StepStatus.COMPLETED,
        description=description,
        data={
            **(data or {}),
            "output": response.content,
            "model": response.model,
            "finish_reason": response.finish_reason,
            "truncated": response.truncated,
            "usage": usage_data(response.usage),
        },
        tokens=response.usage.total_tokens if response.usage is not None else 0,
        duration_ms=response.latency_ms,
        started_at=datetime.fromtimestamp(started_at, tz=UTC),
    )


def unanswered_call_step(
    *,
    parent_id: uuid.UUID,
    name: str,
    model: str,
    started_at: float,
    error: str = "",
    error_code: str = "",
    stopped: bool = False,
    data: dict[str, Any] | None = None,
) -> StepCreate:
    """A model call that got no reply as a ``thought`` step under ``parent_id``: failed with
    ``error`` (and the error's ``error_code``, ``llm_unavailable``...), or skipped when it was
    ``stopped``; ``model`` is the one asked, ``started_at`` when (epoch seconds), and ``data``
    besides (no ``output``: there is none)."""
    return StepCreate(
        step_type="thought",
        parent_id=parent_id,
        name=name,
        status=StepStatus.SKIPPED if stopped else StepStatus.FAILED,
        error="" if stopped else error[:500],
        data={**(data or {}), "model": model, **({"error_code": error_code} if error_code else {})},
        duration_ms=int((time.time() - started_at) * 1000),
        started_at=datetime.fromtimestamp(started_at, tz=UTC),
        finished_at=timezone.now(),
    )


class RunRecorder:
    """Records one run (the loop's ``Recorder``, and the other modes' reports)."""

    def __init__(self, run: AgentRun, events: RunEvents, llm: LLMProvider) -> None:
        """The run, its goal step and its ``meta`` event are stored already
        (``agent.services.run_create_sync``); ``llm`` is the model the run calls."""
        self.run = run
        self.events = events
        self.llm = llm
        self.store = get_trace_store()
        self.goal_id = run.id  # the goal step has the run's id
        self.step_count = 0
        #: What the model wrote and was shown during the run, for its conversation.
        self.transcript: list[TranscriptEntry] = []
        #: The answer, once the run has one (or, for a run that ends without one, the text it
        #: had streamed of one, recorded by ``finish``).
        self.answer: RunAnswer | None = None
        #: The answer text streamed so far (``answer_delta``).
        self.streamed = ""
        self._open: _OpenIteration | None = None
        #: The model call under way, until its reply is recorded.
        self._calling: _Call | None = None
        #: The messages each model call was sent, by its step's id (for the OTel export;
        #: the trace keeps the replies, not the prompts that grow with every call).
        self.prompts: dict[uuid.UUID, list[ChatMessage]] = {}

    # -- the loop's reports --

    def model_calling(self, name: str, messages: Sequence[ChatMessage]) -> None:
        """The model is about to be sent ``messages`` for the ``thought`` step ``name``. The
        step is stored with the reply (``model_replied``, ``model_call``); a call that never
        replies is stored by ``finish``, failed with the run's error (skipped when it was
        stopped)."""
        self._calling = _Call(name, list(messages), time.time())

    def _called(self, step: StepCreate) -> StepCreate:
        """``step``, the ``thought`` of the call under way, which has ended: its messages are
        kept by its id."""
        if self._calling is not None:
            self.prompts[step.id] = self._calling.messages
            self._calling = None
        return step

    async def model_replied(self, iteration: Iteration) -> None:
        response, reply = iteration.response, iteration.reply
        assert response is not None
        assert reply is not None
        data: dict[str, Any] = {"thought": reply.thought}
        if response.tool_calls:
            data["tool_calls"] = [asdict(call) for call in response.tool_calls]
        thought = self.model_call(
            response,
            name=f"iteration {iteration.index}",
            started_at=iteration.started_at,
            description=reply.thought,
            data=data,
        )
        self._open = _OpenIteration(thought)
        self.transcript.append(TranscriptEntry("assistant", response.content, thought.id))
        if not reply.calls:
            await self._write([thought])
            self._open.stored = True
        # A reply that calls tools is stored with its first call, as the tool starts (next).

    async def tool_started(self, iteration: Iteration) -> None:
        assert self._open is not None
        data: dict[str, Any] = {"tool_name": iteration.tool_name, "arguments": iteration.tool_args}
        if iteration.call_id is not None:
            data["call_id"] = iteration.call_id
        action = StepCreate(
            step_type="action",
            parent_id=self._open.thought.id,
            name=iteration.tool_name or "",
            status=StepStatus.RUNNING,
            data=data,
            started_at=timezone.now(),
        )
        self._open.action, self._open.tool_started = action, time.monotonic()
        self._open.live_output = {}
        started = await self.events.next(
            "step_started", step_started_event(self.step_count + 1, action=action)
        )
        steps = [action] if self._open.stored else [self._open.thought, action]
        await self._write(steps, events=[started])
        self._open.stored = True

    async def tool_output(self, stream: str, text: str) -> None:
        """A piece of what the running tool printed on ``stream`` (``stdout`` or ``stderr``;
        its rate and size are the tool's to bound: ``execute_code``'s sandbox does): an
        ``output`` event, and the action step's ``live_output`` (the last
        ``LIVE_OUTPUT_TAIL_CHARS`` of each stream) for the trace's watchers, in one
        transaction. Ignored when no tool is running."""
        opened = self._open
        if opened is None or opened.action is None or not text:
            return
        action = opened.action
        opened.live_output[stream] = (opened.live_output.get(stream, "") + text)[
            -LIVE_OUTPUT_TAIL_CHARS:
        ]
        live = {name: opened.live_output.get(name, "") for name in ("stdout", "stderr")}
        event = await self.events.next(
            "output", {"step_id": str(action.id), "stream": stream, "text": text}
        )
        data = {**action.data, LIVE_OUTPUT_KEY: live}
        await self._write([], updates={action.id: {"data": data}}, events=[event])

    async def iteration_finished(self, iteration: Iteration) -> None:
        """One tool call's result (or a reply's format error). The model call stays open
        for the reply's next call, if it has one."""
        opened = self._open
        assert opened is not None
        self._open = replace(opened, action=None)
        data = {"result": iteration.result, "truncated": iteration.observation_truncated}
        # The tool's verdict (a non-zero exit, blocked code) fails the step as it is written,
        # so the trace's error counts agree with the outcome shown (``traces.outcomes``).
        status = result_status(error=iteration.error or "", data=data)
        now = timezone.now()
        action = opened.action
        result = StepCreate(
            step_type="result",
            parent_id=(action or opened.thought).id,
            name=iteration.tool_name or "format",
            status=status,
            error=iteration.error or "",
            data=data,
            started_at=now,
            finished_at=now,
        )
        updates: dict[uuid.UUID, dict[str, Any]] = {}
        if action is not None:
            tool_ms = int((time.monotonic() - opened.tool_started) * 1000)
            updates[action.id] = {"status": status, "duration_ms": tool_ms, "finished_at": now}
            if opened.live_output:
                # The result holds the output now: the live copy goes.
                updates[action.id]["data"] = action.data
            action = replace(action, status=status, duration_ms=tool_ms, finished_at=now)
        self.step_count += 1
        event = step_event(self.step_count, thought=opened.thought, action=action, result=result)
        self.transcript.append(TranscriptEntry("tool", iteration.observation, result.id))
        await self._write([result], updates=updates, events=[await self.events.next("step", event)])

    async def answer_delta(self, text: str) -> None:
        """Answer text as it is written; an empty ``text`` (a flush is due) sends what is
        queued now."""
        await self.events.delta(text)
        self.streamed += text
        if self.run.first_output_at is None:
            self.run.first_output_at = timezone.now()
            await in_thread(
                AgentRun.objects.filter(pk=self.run.id).update,
                first_output_at=self.run.first_output_at,
            )

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
        response = StepCreate(
            step_type="response",
            parent_id=self.goal_id,
            name="answer",
            status=StepStatus.COMPLETED,
            data={"answer": answer, **(data or {})},
        )
        self.answer = RunAnswer(text=answer, step_id=response.id)
        delta = self.events.take_delta()
        await self._write(
            [model_call, response] if model_call is not None else [response],
            events=[delta] if delta is not None else [],
        )

    # -- the other modes' reports --

    def model_call(
        self,
        response: LLMResponse,
        *,
        name: str,
        started_at: float,
        description: str = "",
        data: dict[str, Any] | None = None,
    ) -> StepCreate:
        """A model call of the run as a ``thought`` step under its goal
        (``model_call_step``)."""
        return self._called(
            model_call_step(
                response,
                parent_id=self.goal_id,
                name=name,
                started_at=started_at,
                description=description,
                data=data,
            )
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
        and ``step_started`` and ``step`` events shaped like an agent iteration's (so that a
        client handles every tool call one way)."""
        found = [
            {"source": c.source, "chunk_index": c.chunk_index, "title": c.title, "score": c.score}
            for c in chunks
        ]
        now = timezone.now()
        action = StepCreate(
            step_type="action",
            parent_id=self.goal_id,
            name="search_docs",
            status=StepStatus.COMPLETED,
            data={
                "tool_name": "search_docs",
                "arguments": {"query": self.run.input, "collection": collection},
            },
            duration_ms=int((time.monotonic() - started) * 1000),
            started_at=datetime.fromtimestamp(started_at, tz=UTC),
            finished_at=now,
        )
        result = StepCreate(
            step_type="result",
            parent_id=action.id,
            name="search_docs",
            status=StepStatus.COMPLETED,
            description=f"{len(chunks)} chunks",
            data={"result": {"results": found}},
            started_at=now,
            finished_at=now,
        )
        started_event = await self.events.next(
            "step_started", step_started_event(self.step_count + 1, action=action)
        )
        self.step_count += 1
        event = step_event(self.step_count, thought=None, action=action, result=result)
        observation = orjson.dumps({"results": found}).decode()
        self.transcript.append(TranscriptEntry("tool", observation, result.id))
        await self._write(
            [action, result], events=[started_event, await self.events.next("step", event)]
        )

    # -- the end --

    async def finish(self, end: RunEnd, *, conversation: RunConversation | None) -> None:
        """Store the run's end: its conversation's new messages (``conversation.finished``),
        then, in one transaction, the run's status, its last events (``error``, ``done``) and
        its trace's end (a failed run's error on its goal step; its answer is the ``response``
        step already stored). Never raises, so a failing run still records its failure."""
        try:
            unstored = []
            if self._open is not None and not self._open.stored:
                # A reply that called a tool the run never started (the last "answer now"
                # call): stored before the transcript that points at it.
                unstored.append(self._open.thought)
                self._open.stored = True
            if self._calling is not None:
                unstored.append(self._called(self._unanswered_call(self._calling, end)))
            if unstored:
                try:
                    await self._write(unstored)
                except Exception:
                    # The trace would not take them (closed from outside, say): the run's
                    # end is stored all the same, below.
                    logger.exception("agent_run_steps_not_stored", steps=len(unstored))
            if self.answer is None and self.streamed.strip():
                # Stopped or failed while the answer was being written: what the user saw of
                # it is kept, as a response step cut short.
                await self._partial_answer(end)
            updates: dict[uuid.UUID, dict[str, Any]] = {}
            if self._open is not None and self._open.action is not None:
                # A tool call cut short (a cancelled run, a failed one) ends with the run.
                updates[self._open.action.id] = {
                    "status": StepStatus.SKIPPED
                    if end.status == RunStatus.CANCELLED
                    else StepStatus.FAILED,
                    "finished_at": timezone.now(),
                }
            if conversation is not None:
                try:
                    await conversation.finished(
                        self.run,
                        status=end.status,
                        transcript=self.transcript,
                        answer=self.answer,
                        llm=self.llm,
                    )
                except Exception:
                    logger.exception("agent_run_conversation_update_failed")
            self.run.status, self.run.error_code = end.status, end.code
            self.run.finished_at = timezone.now()
            run_end = {
                "status": end.status,
                "error_code": end.code,
                "finished_at": self.run.finished_at,
            }
            rows = []
            delta = self.events.take_delta()
            if delta is not None:
                rows.append(delta)
            if end.error:
                rows.append(
                    await self.events.next(
                        "error", {"code": end.code or "cancelled", "message": end.error}
                    )
                )
            rows.append(
                await self.events.next("done", {"run_id": str(self.run.id), "status": end.status})
            )
            goal: dict[str, Any] = {
                "status": {
                    RunStatus.COMPLETED.value: StepStatus.COMPLETED,
                    RunStatus.CANCELLED.value: StepStatus.SKIPPED,
                }.get(end.status, StepStatus.FAILED)
            }
            if end.status == RunStatus.FAILED:
                # The run's error is its goal step's (``agent.selectors.run_error``); a
                # cancellation is no error of the trace, its message is derived from the status.
                goal["error"] = end.error
            try:
                await self._write(
                    [],
                    updates={**updates, self.goal_id: goal},
                    events=rows,
                    complete=_TRACE_STATUS.get(end.status, TraceStatus.FAILED),
                    run_fields=run_end,
                )
            except Exception:
                # The trace would not take it (closed from outside, say): the run's end and
                # its events are stored all the same, so the run and its stream end.
                logger.exception("agent_run_trace_close_failed")
                await in_thread(self._write_sync, [], {}, rows, None, run_end)
        except Exception:
            logger.exception("agent_run_finish_failed")
        await langfuse_run_finished(
            run=self.run, status=end.status, output=end.output, error=end.error
        )
        await otel_run_finished(run=self.run, prompts=self.prompts)

    def _unanswered_call(self, call: _Call, end: RunEnd) -> StepCreate:
        """The model call the run ended in, as its ``thought`` step: failed with the run's
        error (a model that was down, timed out, or sent what could not be read), or skipped
        when the run was stopped."""
        return unanswered_call_step(
            parent_id=self.goal_id,
            name=call.name,
            model=self.llm.model,
            started_at=call.started_at,
            error=end.error,
            error_code=end.code,
            stopped=end.status == RunStatus.CANCELLED,
        )

    async def _partial_answer(self, end: RunEnd) -> None:
        """The answer text streamed before the run ended without an answer, as a ``response``
        step marked ``partial`` (skipped: cut short, by a stop or by the run's failure)."""
        response = StepCreate(
            step_type="response",
            parent_id=self.goal_id,
            name="answer (cut short)",
            status=StepStatus.SKIPPED,
            data={"answer": self.streamed, "partial": True, "run_status": end.status},
        )
        await self._write([response])
        self.answer = RunAnswer(text=self.streamed, step_id=response.id)

    # -- writing --

    async def _write(
        self,
        steps: Sequence[StepCreate],
        *,
        updates: Mapping[uuid.UUID, dict[str, Any]] | None = None,
        events: Sequence[RunEvent] = (),
        complete: str | None = None,
        run_fields: dict[str, Any] | None = None,
    ) -> None:
        fields = dict(run_fields or {})
        if self.run.first_output_at is None and any(e.type == "step" for e in events):
            self.run.first_output_at = timezone.now()
            fields["first_output_at"] = self.run.first_output_at
        # A write is never cut short: a run stopped while one is under way (a running tool's
        # output is written a few times a second) would leave its thread inside the write's
        # broadcast, and the run's end could not be stored. The stop takes effect after it.
        writing = asyncio.ensure_future(
            in_thread(self._write_sync, steps, updates or {}, events, complete, fields)
        )
        try:
            await asyncio.shield(writing)
        except asyncio.CancelledError:
            await asyncio.wait([writing])
            if not writing.cancelled() and writing.exception() is not None:
                logger.warning("agent_run_write_failed", error=str(writing.exception()))
            raise

    def _write_sync(
        self,
        steps: Sequence[StepCreate],
        updates: Mapping[uuid.UUID, dict[str, Any]],
        events: Sequence[RunEvent],
        complete: str | None,
        run_fields: dict[str, Any],
    ) -> None:
        assert self.run.trace_id is not None
        if not events and not run_fields:
            # Steps alone: the store's own transaction (no savepoint inside one of ours).
            self.store.add_steps_sync(self.run.trace_id, steps, updates, complete=complete)
            return
        with transaction.atomic():
            if steps or updates or complete is not None:
                self.store.add_steps_sync(self.run.trace_id, steps, updates, complete=complete)
            if events:
                self.events.store(events)
            if run_fields:
                AgentRun.objects.filter(pk=self.run.id).update(**run_fields)
