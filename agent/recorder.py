"""The run's recorder: what the run does goes into its trace as it happens (goal → thought →
action → result, and the response), with the run's SSE events derived from those steps.

Each write is one transaction (``_write``): the steps through the trace store, the run's events
beside them (``agent.events``), and the run's own fields; the trace's and the run's events go
out once it has committed.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
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
from agent.llm.base import LLMProvider, LLMResponse
from agent.loop import Iteration
from agent.models import AgentRun, RunEvent, RunStatus
from agent.projections import step_event
from devassist.connections import in_thread
from traces.models import StepStatus, TraceStatus
from traces.store import StepCreate, get_trace_store

logger = structlog.get_logger(__name__)


@dataclass(frozen=True)
class RunEnd:
    """How a run ended: its status, and its answer or its error (with the error's code)."""

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


#: A run's trace ends with the run's status (anything else is a failure).
_TRACE_STATUS: dict[str, str] = {
    RunStatus.COMPLETED.value: TraceStatus.COMPLETED,
    RunStatus.CANCELLED.value: TraceStatus.CANCELLED,
}


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
        #: The answer, once the run has one.
        self.answer: RunAnswer | None = None
        self._open: _OpenIteration | None = None

    # -- the loop's reports --

    async def model_replied(self, iteration: Iteration) -> None:
        response, parsed = iteration.response, iteration.parsed
        assert response is not None
        assert parsed is not None
        thought = self.model_call(
            response,
            name=f"iteration {iteration.index}",
            started_at=iteration.started_at,
            description=parsed.thought,
            data={"thought": parsed.thought, "action_raw": response.content},
        )
        self._open = _OpenIteration(thought)
        self.transcript.append(TranscriptEntry("assistant", response.content, thought.id))
        if parsed.action is None:
            await self._write([thought])
            self._open.stored = True
        # A reply that calls a tool is stored with its call, as the tool starts (next).

    async def tool_started(self, iteration: Iteration) -> None:
        assert self._open is not None
        action = StepCreate(
            step_type="action",
            parent_id=self._open.thought.id,
            name=iteration.tool_name or "",
            status=StepStatus.RUNNING,
            data={"tool_name": iteration.tool_name, "arguments": iteration.tool_args},
            started_at=timezone.now(),
        )
        self._open.action, self._open.tool_started = action, time.monotonic()
        await self._write([self._open.thought, action])
        self._open.stored = True

    async def iteration_finished(self, iteration: Iteration) -> None:
        opened, self._open = self._open, None
        assert opened is not None
        status = StepStatus.FAILED if iteration.error else StepStatus.COMPLETED
        now = timezone.now()
        action = opened.action
        result = StepCreate(
            step_type="result",
            parent_id=(action or opened.thought).id,
            name=iteration.tool_name or "format",
            status=status,
            error=iteration.error or "",
            data={"result": iteration.result, "truncated": iteration.observation_truncated},
            started_at=now,
            finished_at=now,
        )
        updates: dict[uuid.UUID, dict[str, Any]] = {}
        if action is not None:
            tool_ms = int((time.monotonic() - opened.tool_started) * 1000)
            updates[action.id] = {"status": status, "duration_ms": tool_ms, "finished_at": now}
            action = replace(action, status=status, duration_ms=tool_ms, finished_at=now)
        self.step_count += 1
        event = step_event(self.step_count, thought=opened.thought, action=action, result=result)
        self.transcript.append(TranscriptEntry("tool", iteration.observation, result.id))
        await self._write([result], updates=updates, events=[await self.events.next("step", event)])

    async def answer_delta(self, text: str) -> None:
        await self.events.delta(text)
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
        self.step_count += 1
        event = step_event(self.step_count, thought=None, action=action, result=result)
        observation = orjson.dumps({"results": found}).decode()
        self.transcript.append(TranscriptEntry("tool", observation, result.id))
        await self._write([action, result], events=[await self.events.next("step", event)])

    # -- the end --

    async def finish(self, end: RunEnd, *, conversation: RunConversation | None) -> None:
        """Store the run's end: its conversation's new messages (``conversation.finished``),
        then, in one transaction, the run's status, its last events (``error``, ``done``) and
        its trace's end. Never raises, so a failing run still records its failure."""
        try:
            if self._open is not None and not self._open.stored:
                # A reply that called a tool the run never started (the last "answer now"
                # call): stored before the transcript that points at it.
                await self._write([self._open.thought])
                self._open.stored = True
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
                        answer=self.answer if end.status == RunStatus.COMPLETED else None,
                        llm=self.llm,
                    )
                except Exception:
                    logger.exception("agent_run_conversation_update_failed")
            self.run.status, self.run.output = end.status, end.output
            self.run.error, self.run.error_code = end.error, end.code
            self.run.finished_at = timezone.now()
            run_end = {
                "status": end.status,
                "output": end.output,
                "error": end.error,
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
        await in_thread(self._write_sync, steps, updates or {}, events, complete, fields)

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
