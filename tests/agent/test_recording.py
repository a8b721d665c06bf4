"""How a run's tool calls reach the trace as they happen: the thought when the model has
replied, the running action while the tool works, the result (and the ``step`` event derived
from those steps) when it is done."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import structlog
from asgiref.sync import sync_to_async

import agent.modes
import agent.services
from agent.executor import run_start
from agent.models import RunEvent
from agent.services import run_create
from agent.tools.registry import Tool, ToolRegistry
from traces.models import Step, TraceEvent
from traces.selectors import trace_events_after, trace_get

pytestmark = pytest.mark.django_db(transaction=True)

EMPTY = {"type": "object", "properties": {}, "additionalProperties": False}


def registry_with(seconds: float) -> ToolRegistry:
    async def wait(args: dict[str, Any], context: Any) -> dict[str, Any]:
        await asyncio.sleep(seconds)
        return {"waited_s": seconds}

    return ToolRegistry([Tool(name="wait", description="Waits.", parameters=EMPTY, handler=wait)])


@pytest.fixture
def tool_run(scripted: Any, monkeypatch: pytest.MonkeyPatch, user: Any) -> Any:
    scripted.script(
        ["Thought: wait\nAction: tool:wait\nargs: {}", "Thought: ok\nAction: final: done"]
    )

    async def start(seconds: float) -> tuple[Any, asyncio.Task[None]]:
        registry = registry_with(seconds)
        monkeypatch.setattr(agent.modes, "default_registry", lambda: registry)
        monkeypatch.setattr(agent.services, "default_registry", lambda: registry)
        run = await run_create(user=user, message="wait a bit")
        return run, run_start(run)

    return start


async def events_of(trace_id: Any) -> list[tuple[str, str, str]]:
    """The trace's events as a watcher that connects afterwards is sent them."""
    events = await sync_to_async(trace_events_after)(trace_id=trace_id, after_seq=0)
    return [
        (e["event"], e.get("step", {}).get("step_type", ""), e.get("step_id", "")) for e in events
    ]


async def test_a_tool_call_is_a_thought_an_action_and_its_result_in_order(tool_run):
    run, task = await tool_run(0)
    await asyncio.wait_for(task, timeout=15)

    events = await events_of(run.trace_id)
    added = [step_type for event, step_type, _ in events if event == "step_added"]
    assert added[:5] == ["goal", "thought", "action", "result", "thought"]
    action = await Step.objects.aget(trace_id=run.trace_id, step_type="action")
    assert action.status == "completed"
    assert action.duration_ms is not None
    assert action.started_at is not None
    assert action.finished_at is not None
    assert action.started_at <= action.finished_at
    assert action.parent_id is not None
    thought_seq = (await Step.objects.aget(pk=action.parent_id)).seq
    result = await Step.objects.aget(trace_id=run.trace_id, step_type="result")
    assert (action.seq, result.seq) == (thought_seq + 1, thought_seq + 2)
    assert result.data["result"] == {"waited_s": 0}


async def test_the_step_event_is_derived_from_the_steps(tool_run):
    run, task = await tool_run(0)
    await asyncio.wait_for(task, timeout=15)

    (event,) = [e.payload async for e in RunEvent.objects.filter(run_id=run.id, type="step")]
    thought = await Step.objects.aget(trace_id=run.trace_id, step_type="thought", seq=2)
    result = await Step.objects.aget(trace_id=run.trace_id, step_type="result")
    assert event["step_id"] == str(thought.id)
    assert event["tool_name"] == "wait"
    assert event["tool_args"] == {}
    assert event["observation"] == result.data["result"] == {"waited_s": 0}
    assert event["thought"] == thought.data["thought"]
    assert event["action_raw"] == thought.data["output"]
    assert event["finished_at_ms"] >= event["started_at_ms"]


async def test_a_slow_tool_call_shows_its_running_action_while_it_works(tool_run):
    run, task = await tool_run(0.5)

    for _ in range(100):
        running = await Step.objects.filter(
            trace_id=run.trace_id, step_type="action", status="running"
        ).afirst()
        if running is not None:
            break
        await asyncio.sleep(0.02)
    assert running is not None
    assert not await Step.objects.filter(trace_id=run.trace_id, step_type="result").aexists()
    await asyncio.wait_for(task, timeout=15)

    action = await Step.objects.aget(pk=running.id)
    assert action.status == "completed"
    assert action.duration_ms is not None
    assert action.duration_ms >= 450
    events = await events_of(run.trace_id)
    assert ("step_updated", "", str(action.id)) in events


async def test_a_trace_closed_from_outside_still_lets_the_run_end_and_its_stream_finish(
    scripted: Any, user: Any
) -> None:
    from agent.models import AgentRun, RunEvent, RunMode
    from traces.store import get_trace_store

    scripted.script([{"content": "an answer", "chunks": ["an ", "answer"], "chunk_delay_s": 0.3}])
    run = await run_create(user=user, message="hello", mode=RunMode.CHAT)
    task = run_start(run)
    await scripted.wait_for_request()  # the model call is under way
    assert run.trace_id is not None
    await get_trace_store().complete_trace(run.trace_id, status="failed")  # e.g. over the API

    await task

    # The answer cannot go into a closed trace, so the run fails; its end is stored anyway, and
    # its stream gets the error and done (before, it never got done and stayed open). The
    # error's text is not in the trace, which took no more writes: the stream has it.
    stored = await AgentRun.objects.aget(pk=run.id)
    assert stored.status == "failed"
    assert stored.error_code
    assert stored.finished_at is not None
    ends = [e async for e in RunEvent.objects.filter(run_id=run.id).order_by("seq")][-2:]
    assert [e.type for e in ends] == ["error", "done"]
    assert ends[0].payload["code"] == stored.error_code
    assert ends[0].payload["message"]
    assert ends[1].payload["status"] == "failed"
    trace = await sync_to_async(trace_get)(trace_id=run.trace_id)
    assert trace.status == "failed"  # as it was closed


async def test_a_failed_model_call_the_closed_trace_will_not_take_still_lets_the_run_end(
    scripted: Any, user: Any
) -> None:
    """The call the run failed in is stored as a step before the run's end; when the trace
    will not take it, the end is stored all the same."""
    from agent.models import AgentRun, RunEvent, RunMode
    from traces.store import get_trace_store

    scripted.script([{"status": 500, "delay_s": 0.5}] * 2)
    run = await run_create(user=user, message="hello", mode=RunMode.CHAT)
    task = run_start(run)
    await scripted.wait_for_request()
    assert run.trace_id is not None
    await get_trace_store().complete_trace(run.trace_id, status="failed")

    with structlog.testing.capture_logs() as logs:
        await task

    stored = await AgentRun.objects.aget(pk=run.id)
    assert (stored.status, stored.error_code) == ("failed", "llm_unavailable")
    assert stored.finished_at is not None
    ends = [e async for e in RunEvent.objects.filter(run_id=run.id).order_by("seq")][-2:]
    assert [e.type for e in ends] == ["error", "done"]
    (lost,) = [entry for entry in logs if entry["event"] == "agent_run_steps_not_stored"]
    assert lost["steps"] == 1


async def test_a_run_ends_with_its_trace_in_one_write(scripted: Any, user: Any) -> None:
    from agent.models import AgentRun, RunEvent, RunMode

    scripted.script([{"content": "an answer", "chunks": ["an ", "answer"]}])
    run = await run_create(user=user, message="hello", mode=RunMode.CHAT)
    await run_start(run)

    stored = await AgentRun.objects.aget(pk=run.id)
    assert run.trace_id is not None
    trace = await sync_to_async(trace_get)(trace_id=run.trace_id)
    assert (stored.status, trace.status) == ("completed", "completed")
    assert stored.finished_at is not None
    assert trace.completed_at is not None
    events = [e async for e in TraceEvent.objects.filter(trace_id=trace.id).order_by("seq")]
    assert events[-1].event == "trace_completed"
    assert events[-1].payload["trace"]["status"] == "completed"
    assert events[-1].seq == trace.last_seq
    types = [e.type async for e in RunEvent.objects.filter(run_id=run.id).order_by("seq")]
    assert types[0] == "meta"
    assert types[-1] == "done"
    goal = await Step.objects.aget(pk=run.id)
    assert goal.status == "completed"
