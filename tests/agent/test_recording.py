"""How a run's tool calls reach the trace: a quick one in one transaction with its thought
and result, a slow one with its running action visible while the tool works."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import agent.runs
from agent.runs import ACTION_WRITE_DELAY_S, run_create, run_start
from agent.tools.registry import Tool, ToolRegistry
from traces.models import Step, TraceEvent

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
        monkeypatch.setattr(agent.runs, "default_registry", lambda: registry)
        run = await run_create(user=user, message="wait a bit")
        return run, run_start(run)

    return start


async def events_of(trace_id: Any) -> list[tuple[str, str, str]]:
    rows = TraceEvent.objects.filter(trace_id=trace_id).order_by("seq")
    return [
        (e.event, e.payload.get("step", {}).get("step_type", ""), e.payload.get("step_id", ""))
        async for e in rows
    ]


async def test_a_quick_tool_call_is_written_with_its_thought_and_result_at_once(tool_run):
    run, task = await tool_run(0)
    await asyncio.wait_for(task, timeout=15)

    events = await events_of(run.trace_id)
    added = [step_type for event, step_type, _ in events if event == "step_added"]
    assert added[:5] == ["goal", "thought", "action", "result", "thought"]
    # The action is stored finished: no update follows for it.
    action = await Step.objects.aget(trace_id=run.trace_id, step_type="action")
    assert action.status == "completed"
    assert action.duration_ms is not None
    assert action.duration_ms < 1000
    assert action.started_at is not None
    assert action.finished_at is not None
    assert action.started_at <= action.finished_at
    updated = {step_id for event, _, step_id in events if event == "step_updated"}
    assert str(action.id) not in updated
    assert action.parent_id is not None
    thought_seq = (await Step.objects.aget(pk=action.parent_id)).seq
    result = await Step.objects.aget(trace_id=run.trace_id, step_type="result")
    assert (action.seq, result.seq) == (thought_seq + 1, thought_seq + 2)


async def test_a_slow_tool_call_shows_its_running_action_while_it_works(tool_run):
    run, task = await tool_run(ACTION_WRITE_DELAY_S * 10)

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
    assert action.duration_ms >= ACTION_WRITE_DELAY_S * 10 * 1000 * 0.9
    events = await events_of(run.trace_id)
    assert ("step_updated", "", str(action.id)) in events
