"""Run lifecycle: create a run and its trace, execute it as a task independent of any HTTP
connection, record every iteration as it happens, cancel it, and follow its events."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
import uuid
from datetime import UTC, datetime
from typing import Any

import structlog
from channels.layers import get_channel_layer
from django.utils import timezone

from agent.events import RunEvents, run_group
from agent.llm import get_llm
from agent.llm.base import LLMProvider
from agent.loop import AgentCancelled, Iteration, LoopConfig, run_react
from agent.models import AgentRun, RunMode, RunStatus
from agent.tools.registry import ToolContext, ToolNotFound, default_registry
from devassist.errors import ApiError, BadRequest, Conflict, NotFound
from traces.models import StepStatus, TraceMode, TraceStatus
from traces.store import StepCreate, get_trace_store

logger = structlog.get_logger(__name__)


class AgentInputInvalid(BadRequest):
    code = "agent_input_invalid"


class RunNotFound(NotFound):
    code = "run_not_found"


class RunFinished(Conflict):
    code = "run_finished"


#: Runs executing in this process: their tasks and cancel events.
_running: dict[uuid.UUID, tuple[asyncio.Task[None], threading.Event]] = {}


async def run_create(
    *, user: Any, message: str, tools: list[str] | None = None, request_id: str = ""
) -> AgentRun:
    """A queued run with its trace. Raises ``AgentInputInvalid`` for an empty message or an
    unknown tool name."""
    if not message or not message.strip():
        raise AgentInputInvalid("The message is empty.")
    registry = default_registry()
    if tools is not None:
        try:
            registry.subset(tools)
        except ToolNotFound as exc:
            raise AgentInputInvalid(
                exc.message, details={"tools": list(tools), "available": registry.names()}
            ) from exc
    llm = get_llm()
    trace = await get_trace_store().create_trace(
        user=user, task=message, mode=TraceMode.AGENT, agent_type="devassist"
    )
    return await AgentRun.objects.acreate(
        user=user,
        trace=trace,
        request_id=request_id,
        mode=RunMode.AGENT,
        input=message,
        tools=registry.names() if tools is None else sorted(set(tools)),
        model=llm.model,
    )


def run_start(run: AgentRun) -> asyncio.Task[None]:
    """Execute ``run`` as a task of the running loop; it goes on when the caller goes away."""
    cancel = threading.Event()
    task = asyncio.get_running_loop().create_task(_execute(run, cancel), name=f"run-{run.id}")
    _running[run.id] = (task, cancel)
    task.add_done_callback(lambda _: _running.pop(run.id, None))
    return task


async def run_cancel(*, run: AgentRun) -> AgentRun:
    """Ask the run to stop: its model call, its tool (the sandbox container) and the loop.
    Works from any worker: the request travels on the channel layer."""
    if run.is_finished:
        raise RunFinished(f"Run {run.id} is already {run.status}.", details={"status": run.status})
    await AgentRun.objects.filter(pk=run.id).aupdate(cancel_requested_at=timezone.now())
    local = _running.get(run.id)
    if local is not None:
        local[1].set()
    else:
        await get_channel_layer().group_send(run_group(run.id), {"type": "run.cancel"})
    return run


async def run_get(*, user: Any, run_id: uuid.UUID) -> AgentRun:
    run = await AgentRun.objects.visible_to(user).filter(pk=run_id).afirst()
    if run is None:
        raise RunNotFound(f"Run {run_id} does not exist.")
    return run


async def _execute(run: AgentRun, cancel: threading.Event) -> None:
    events = RunEvents(run.id)
    watcher = asyncio.create_task(_watch_for_cancel(run.id, cancel))
    llm = get_llm()
    recorder = RunRecorder(run, events)
    structlog.contextvars.bind_contextvars(run_id=str(run.id), trace_id=str(run.trace_id))
    try:
        await recorder.start(llm)
        registry = default_registry().subset(run.tools)
        context = ToolContext(user=run.user, run_id=run.id, cancel=cancel)
        answer = await run_react(
            task=run.input,
            llm=llm,
            tools=registry,
            recorder=recorder,
            context=context,
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


async def _watch_for_cancel(run_id: uuid.UUID, cancel: threading.Event) -> None:
    """Sets ``cancel`` when another worker relays a cancel request."""
    layer = get_channel_layer()
    channel = await layer.new_channel(prefix="run-control.")
    await layer.group_add(run_group(run_id), channel)
    try:
        while not cancel.is_set():
            message = await layer.receive(channel)
            if message.get("type") == "run.cancel":
                cancel.set()
    finally:
        await layer.group_discard(run_group(run_id), channel)


def _ms(epoch_s: float) -> int:
    return int(epoch_s * 1000)


class RunRecorder:
    """Writes the run into its trace (goal → thought → action → result, and the response)
    through the trace store as it happens, and its SSE events alongside."""

    def __init__(self, run: AgentRun, events: RunEvents) -> None:
        self.run = run
        self.events = events
        self.store = get_trace_store()
        self.goal_id = uuid.uuid4()
        self.first_output = False
        self.step_count = 0

    async def start(self, llm: LLMProvider) -> None:
        now = timezone.now()
        await AgentRun.objects.filter(pk=self.run.id).aupdate(
            status=RunStatus.RUNNING, started_at=now, model=llm.model
        )
        assert self.run.trace_id is not None
        await self.store.add_step(
            self.run.trace_id,
            StepCreate(
                id=self.goal_id,
                step_type="goal",
                name="task",
                status=StepStatus.RUNNING,
                description=self.run.input,
                data={"task": self.run.input, "tools": self.run.tools, "model": llm.model},
            ),
        )
        await self.events.emit(
            "meta",
            conversation_id=None,
            run_id=str(self.run.id),
            trace_id=str(self.run.trace_id),
            agent=True,
            rag=False,
            model=llm.model,
        )

    async def model_replied(self, iteration: Iteration) -> None:
        response, parsed = iteration.response, iteration.parsed
        assert response is not None
        assert parsed is not None
        assert self.run.trace_id is not None
        thought = StepCreate(
            step_type="thought",
            parent_id=self.goal_id,
            name=f"iteration {iteration.index}",
            status=StepStatus.COMPLETED,
            description=parsed.thought,
            data={
                "thought": parsed.thought,
                "action_raw": response.content,
                "model": response.model,
                "finish_reason": response.finish_reason,
                "prompt_tokens": response.usage.prompt_tokens,
                "completion_tokens": response.usage.completion_tokens,
            },
            tokens=response.usage.total_tokens,
            duration_ms=response.latency_ms,
            started_at=datetime.fromtimestamp(iteration.started_at, tz=UTC),
        )
        iteration.handles["thought"] = thought.id
        if parsed.action is not None:
            # Written with its action in one transaction when the tool starts, a moment later.
            iteration.handles["thought_step"] = thought
            return
        await self.store.add_step(self.run.trace_id, thought)

    async def tool_started(self, iteration: Iteration) -> None:
        assert self.run.trace_id is not None
        action = StepCreate(
            step_type="action",
            parent_id=iteration.handles["thought"],
            name=iteration.tool_name or "",
            status=StepStatus.RUNNING,
            data={"tool_name": iteration.tool_name, "arguments": iteration.tool_args},
        )
        await self.store.add_steps(
            self.run.trace_id, [iteration.handles.pop("thought_step"), action]
        )
        iteration.handles["action"] = action.id
        iteration.handles["action_started"] = asyncio.get_running_loop().time()

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
        updates = {}
        if "action" in iteration.handles:
            tool_ms = int((loop_time - iteration.handles["action_started"]) * 1000)
            updates[iteration.handles["action"]] = {"status": status, "duration_ms": tool_ms}
        await self.store.add_steps(self.run.trace_id, [result], updates=updates)
        self.step_count += 1
        await self.events.emit(
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
        await self._first_output()

    async def answer_delta(self, text: str) -> None:
        await self.events.delta(text)
        await self._first_output()

    async def answered(self, answer: str, *, streamed: bool) -> None:
        if not streamed:
            await self.events.delta(answer)
        await self.events.flush_delta()
        assert self.run.trace_id is not None
        await self.store.add_step(
            self.run.trace_id,
            StepCreate(
                step_type="response",
                parent_id=self.goal_id,
                name="answer",
                status=StepStatus.COMPLETED,
                data={"answer": answer},
            ),
        )
        await self._first_output()

    async def _first_output(self) -> None:
        if not self.first_output:
            self.first_output = True
            await AgentRun.objects.filter(pk=self.run.id).aupdate(first_output_at=timezone.now())

    async def finish(
        self, status: str, *, output: str = "", error: str = "", code: str = ""
    ) -> None:
        """Final bookkeeping; never raises, so a failing run still records its failure."""
        try:
            await self.events.flush_delta()
            await AgentRun.objects.filter(pk=self.run.id).aupdate(
                status=status,
                output=output,
                error=error,
                error_code=code,
                finished_at=timezone.now(),
            )
            trace_status: str = {
                RunStatus.COMPLETED.value: TraceStatus.COMPLETED,
                RunStatus.CANCELLED.value: TraceStatus.CANCELLED,
            }.get(status, TraceStatus.FAILED)
            assert self.run.trace_id is not None
            step_status: str = {
                RunStatus.COMPLETED.value: StepStatus.COMPLETED,
                RunStatus.CANCELLED.value: StepStatus.SKIPPED,
            }.get(status, StepStatus.FAILED)
            goal_changes: dict[str, Any] = {"status": step_status}
            if status == RunStatus.FAILED:
                goal_changes["error"] = error
            await self.store.update_step(self.run.trace_id, self.goal_id, goal_changes)
            await self.store.complete_trace(self.run.trace_id, status=trace_status)
            if error:
                await self.events.emit("error", code=code or "cancelled", message=error)
            await self.events.emit("done", run_id=str(self.run.id), status=status)
        except Exception:
            logger.exception("agent_run_finish_failed")
