"""Live tool progress: a running ``execute_code`` call's start and output reach the run's stream
(``step_started``, ``output``) and the trace's watchers (``step_updated`` with ``live_output``)
before its result, on both channel layers, and a re-attach replays them."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest

from agent.events import follow_run
from agent.executor import run_start, stop_local
from agent.models import RunEvent
from agent.services import run_create
from tests.agent.test_live_events import watch
from traces.models import Step

pytestmark = pytest.mark.django_db(transaction=True)

CODE = "import time\nfor i in range(3):\n    print(i, flush=True)\n    time.sleep(1)"


@pytest.fixture
def counting_run(scripted: Any, sandbox_image: str, user: Any) -> Any:
    """Starts an agent run whose one tool call prints 0, 1, 2 a second apart."""
    scripted.script(
        [
            "Thought: count\nAction: tool:execute_code\nargs: " + json.dumps({"code": CODE}),
            "Thought: ok\nAction: final: counted",
        ]
    )

    async def start() -> Any:
        run = await run_create(user=user, message="count to three", tools=["execute_code"])
        return run, run_start(run)

    return start


async def test_the_stream_carries_the_tool_start_and_its_output_before_its_step(
    layer, counting_run
):
    run, task = await counting_run()
    arrived: list[tuple[float, dict[str, Any]]] = []
    async with asyncio.timeout(60):
        async for item in follow_run(run.id, after_seq=1, heartbeat_s=5):
            if item is not None:
                arrived.append((time.monotonic(), item[1]))
                if item[1]["type"] == "done":
                    break
    await task

    kinds = [event["type"] for _, event in arrived]
    assert kinds[0] == "step_started"
    assert kinds[-2:] == ["delta", "done"] or kinds[-1] == "done"
    started = arrived[0][1]
    action = await Step.objects.aget(pk=started["step_id"])
    assert action.step_type == "action"
    assert started["step_index"] == 1
    assert started["tool_name"] == "execute_code"
    assert started["tool_args"] == {"code": CODE}
    assert started["started_at_ms"] > 0
    step_at, step = next((at, e) for at, e in arrived if e["type"] == "step")
    outputs = [(at, e) for at, e in arrived if e["type"] == "output"]
    assert all(e["step_id"] == started["step_id"] and e["stream"] == "stdout" for _, e in outputs)
    assert "".join(e["text"] for _, e in outputs) == "0\n1\n2\n"
    # The first line arrives while the program still sleeps its 3 s, long before its step.
    first_at = next(at for at, e in outputs if e["text"].startswith("0\n"))
    assert step_at - first_at > 1.5
    assert kinds.index("step_started") < kinds.index("output") < kinds.index("step")
    assert step["observation"]["stdout"] == "0\n1\n2\n"
    assert step["action_id"] == started["step_id"]
    # A few rows: one per hand-over, not one per byte.
    assert await RunEvent.objects.filter(run_id=run.id, type="output").acount() <= 4

    # Re-attaching replays them once, in order, like any other event.
    replay = [item async for item in follow_run(run.id, after_seq=0) if item is not None]
    assert [e for _, e in replay if e["type"] in {"step_started", "output", "step"}] == [
        e for _, e in arrived if e["type"] in {"step_started", "output", "step"}
    ]
    # The result holds the output now: the action's live copy is gone.
    await action.arefresh_from_db()
    assert "live_output" not in action.data


async def test_a_watcher_sees_the_live_output_before_the_result_step(layer, counting_run, user):
    run, task = await counting_run()
    communicator = await watch(user, run.trace_id)
    messages: list[dict[str, Any]] = []
    try:
        async with asyncio.timeout(60):
            while not messages or messages[-1]["event"] != "trace_completed":
                messages.append(await communicator.receive_json_from(timeout=30))
    finally:
        await communicator.disconnect()
    await task

    added = [m for m in messages if m["event"] == "step_added"]
    action = next(m["step"] for m in added if m["step"]["step_type"] == "action")
    result_at = next(
        i for i, m in enumerate(messages) if m in added and m["step"]["step_type"] == "result"
    )
    live = [
        (i, m["updates"]["live_output"])
        for i, m in enumerate(messages)
        if m["event"] == "step_updated"
        and m["step_id"] == action["step_id"]
        and m["updates"].get("live_output")
    ]
    assert live
    assert all(i < result_at for i, _ in live)
    assert live[0][1]["stdout"].startswith("0\n")
    assert live[-1][1] == {"stdout": "0\n1\n2\n", "stderr": ""}
    # When the result is in, watchers learn that the live copy is gone.
    gone = [
        m
        for m in messages[result_at:]
        if m["event"] == "step_updated" and m["step_id"] == action["step_id"]
    ]
    assert gone[0]["updates"]["live_output"] is None


async def test_a_program_stopped_mid_run_keeps_what_it_printed_and_the_stream_ends(
    counting_run,
):
    run, task = await counting_run()
    events: list[dict[str, Any]] = []
    try:
        async with asyncio.timeout(60):
            async for item in follow_run(run.id, after_seq=1, heartbeat_s=5):
                if item is None:
                    continue
                events.append(item[1])
                if item[1]["type"] == "output":
                    stop_local(run.id)
                if item[1]["type"] == "done":
                    break
    finally:
        await task

    kinds = [event["type"] for event in events]
    assert events[-1]["status"] == "cancelled"
    assert kinds[:2] == ["step_started", "output"]
    assert "step" not in kinds
    action = await Step.objects.aget(trace__run=run, step_type="action")
    assert action.status == "skipped"
    # The only record of what the program printed before Stop.
    assert action.data["live_output"]["stdout"].startswith("0\n")
