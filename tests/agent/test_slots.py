"""Run slots (agent/slots.py): at most AGENT_RUN_SLOTS runs work at once, in arrival order; a
run's slot is free while it waits on the model or a tool, a Stop ends a wait for one at once,
and no run leaves one taken."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
from asgiref.sync import sync_to_async

from agent.events import run_control_group
from agent.executor import run_start
from agent.models import AgentRun, RunEvent, RunMode, RunStatus
from agent.selectors import run_outcomes
from agent.services import run_cancel, run_create
from agent.slots import RunSlot
from agent.tools.registry import Tool, ToolContext, ToolRegistry
from devassist.follow import broadcast

EMPTY = {"type": "object", "properties": {}, "additionalProperties": False}


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


@pytest.fixture
def one_slot(settings: Any) -> None:
    settings.AGENT_RUN_SLOTS = 1


async def runs_inside_at_once(count: int) -> int:
    """Start ``count`` runs that hold their slot until let go; return how many got one at
    once (the others wait), after checking that every run got one in the end."""
    entered = 0
    gate = asyncio.Event()

    async def run() -> None:
        nonlocal entered
        slot = RunSlot()
        await slot.take()
        try:
            entered += 1
            await gate.wait()
        finally:
            slot.give_back()

    runs = [asyncio.create_task(run()) for _ in range(count)]
    await settle()
    at_once = entered
    gate.set()
    async with asyncio.timeout(5):  # a slot left taken would keep one waiting for ever
        await asyncio.gather(*runs)
    assert entered == count
    return at_once


async def a_slot_is_free(timeout_s: float = 2) -> bool:
    """Whether another run gets a slot within ``timeout_s`` (it gives it back at once)."""
    slot = RunSlot()
    try:
        async with asyncio.timeout(timeout_s):
            await slot.take()
    except TimeoutError:
        return False
    slot.give_back()
    return True


async def test_runs_beyond_the_limit_wait_in_arrival_order(settings: Any) -> None:
    settings.AGENT_RUN_SLOTS = 2
    order: list[str] = []
    gate = asyncio.Event()

    async def run(name: str) -> None:
        slot = RunSlot()
        await slot.take()
        order.append(f"{name} in")
        await gate.wait()
        order.append(f"{name} out")
        slot.give_back()

    tasks = [asyncio.create_task(run(name)) for name in "abcd"]
    await settle()
    assert order == ["a in", "b in"]  # c and d wait for a slot
    gate.set()
    await asyncio.gather(*tasks)
    assert order.index("a out") < order.index("c in") < order.index("d in")


async def test_no_limit_when_slots_are_zero(settings: Any) -> None:
    settings.AGENT_RUN_SLOTS = 0
    assert await runs_inside_at_once(20) == 20


async def test_a_changed_setting_takes_effect_in_the_same_loop(settings: Any) -> None:
    settings.AGENT_RUN_SLOTS = 1
    assert await runs_inside_at_once(2) == 1
    settings.AGENT_RUN_SLOTS = 2
    assert await runs_inside_at_once(3) == 2


async def test_a_wait_lets_the_next_run_work_and_takes_the_slot_back_in_turn(
    one_slot: None,
) -> None:
    order: list[str] = []
    model = asyncio.Event()
    b_holds = asyncio.Event()
    b_may_leave = asyncio.Event()

    async def waits_on_the_model() -> None:
        slot = RunSlot()
        await slot.take()
        order.append("a works")
        async with slot.released():
            await model.wait()
        order.append("a works again")
        slot.give_back()

    async def works() -> None:
        slot = RunSlot()
        await slot.take()
        order.append("b works")
        b_holds.set()
        await b_may_leave.wait()
        order.append("b done")
        slot.give_back()

    a = asyncio.create_task(waits_on_the_model())
    await settle()
    b = asyncio.create_task(works())
    async with asyncio.timeout(5):  # b gets the slot a gave back
        await b_holds.wait()
    model.set()  # a's answer is back while b holds the only slot: a waits for it
    await settle()
    assert order == ["a works", "b works"]
    b_may_leave.set()
    await asyncio.gather(a, b)
    assert order == ["a works", "b works", "b done", "a works again"]


async def test_a_block_that_has_its_result_at_once_keeps_the_slot(one_slot: None) -> None:
    slot = RunSlot()
    await slot.take()
    other = asyncio.create_task(a_slot_is_free())
    await settle()  # the other run waits for the slot
    async with slot.released():
        pass  # a chunk already received: nothing to wait for
    assert slot.held
    assert not other.done()
    slot.give_back()
    assert await other


async def test_the_slot_is_free_while_the_model_streams(
    one_slot: None, scripted: Any, openai_provider: Any
) -> None:
    scripted.script([{"content": "slow answer", "chunks": ["slow ", "answer"], "chunk_delay_s": 1}])
    deltas: list[str] = []

    async def run() -> None:
        slot = RunSlot()
        await slot.take()
        async for chunk in slot.model(openai_provider).stream([{"role": "user", "content": "hi"}]):
            assert slot.held  # the run handles each chunk with its slot
            deltas.append(chunk.delta)
        slot.give_back()

    task = asyncio.create_task(run())
    await scripted.wait_for_request()
    assert await a_slot_is_free(0.5)  # the answer takes 2 s
    await task
    assert "".join(deltas) == "slow answer"
    assert await runs_inside_at_once(2) == 1  # exactly one slot free: not none, not two


async def test_a_tool_call_frees_the_slot(one_slot: None) -> None:
    started = asyncio.Event()
    finish = asyncio.Event()

    async def slow(args: dict[str, Any], context: Any) -> dict[str, Any]:
        started.set()
        await finish.wait()
        return {"ok": True}

    registry = ToolRegistry(
        [Tool(name="slow", description="Waits.", parameters=EMPTY, handler=slow)]
    )

    async def run() -> Any:
        slot = RunSlot()
        await slot.take()
        tools = slot.tools(registry)
        assert tools.names() == ["slow"]
        result = await tools.call("slow", {}, ToolContext(user=None))
        assert slot.held
        slot.give_back()
        return result

    tool_run = asyncio.create_task(run())
    await started.wait()
    assert await a_slot_is_free()  # taken while the tool works
    finish.set()
    assert await tool_run == {"ok": True}


async def test_an_error_in_the_wait_takes_the_slot_back_before_it_propagates(
    one_slot: None,
) -> None:
    caught = asyncio.Event()
    finish = asyncio.Event()

    async def run() -> None:
        slot = RunSlot()
        await slot.take()
        try:
            async with slot.released():
                await asyncio.sleep(0.01)
                raise ValueError("tool failed")
        except ValueError:
            assert slot.held  # the loop goes on after a failed tool, holding its slot again
            caught.set()
        await finish.wait()
        slot.give_back()

    failing = asyncio.create_task(run())
    await caught.wait()
    assert not await a_slot_is_free(0.1)
    finish.set()
    await failing
    assert await runs_inside_at_once(2) == 1


async def test_a_task_the_run_started_does_not_give_its_slot_away(one_slot: None) -> None:
    slot = RunSlot()
    await slot.take()
    gate = asyncio.Event()

    async def child() -> None:  # has the run's slot object, but is not the run
        async with slot.released():
            await gate.wait()

    task = asyncio.create_task(child())
    await settle()
    assert not await a_slot_is_free(0.1)
    gate.set()
    await task
    assert slot.held
    slot.give_back()
    assert await runs_inside_at_once(2) == 1


@pytest.mark.django_db(transaction=True)
async def test_a_run_streaming_from_a_slow_model_does_not_hold_back_another(
    scripted: Any, one_slot: None, user: Any
) -> None:
    # The first call streams slowly, the second answers at once.
    scripted.script(
        [
            {"content": "slow answer", "chunks": ["slow ", "answer"], "chunk_delay_s": 0.5},
            {"content": "quick answer", "chunks": ["quick ", "answer"]},
        ]
    )
    slow = await run_create(user=user, message="first", mode=RunMode.CHAT)
    slow_task = run_start(slow)
    await scripted.wait_for_request()
    quick = await run_create(user=user, message="second", mode=RunMode.CHAT)
    quick_task = run_start(quick)
    done, _ = await asyncio.wait(
        {slow_task, quick_task}, timeout=10, return_when=asyncio.FIRST_COMPLETED
    )
    assert done == {quick_task}
    done, _ = await asyncio.wait({slow_task}, timeout=10)
    assert done == {slow_task}
    runs = {r.input: r async for r in AgentRun.objects.filter(pk__in=[slow.id, quick.id])}
    assert runs["first"].status == runs["second"].status == RunStatus.COMPLETED
    outcomes = await sync_to_async(run_outcomes)(list(runs.values()))
    assert outcomes[slow.id].answer == "slow answer"
    assert outcomes[quick.id].answer == "quick answer"
    assert await runs_inside_at_once(2) == 1


@pytest.mark.django_db(transaction=True)
async def test_a_rag_run_searches_with_its_slot_free(
    one_slot: None, user: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import agent.knowledge.rag as rag

    started, finish = threading.Event(), threading.Event()

    def search(**kwargs: Any) -> list[Any]:
        started.set()
        finish.wait(30)
        return []

    monkeypatch.setattr(rag, "search", search)
    run = await run_create(user=user, message="Where is it?", mode=RunMode.RAG)
    task = run_start(run)
    try:
        for _ in range(500):
            if started.is_set():
                break
            await asyncio.sleep(0.01)
        assert started.is_set()
        assert await a_slot_is_free()
    finally:
        finish.set()
    await asyncio.wait_for(task, timeout=15)
    stored = await AgentRun.objects.aget(pk=run.id)
    assert stored.status == RunStatus.COMPLETED
    assert await RunEvent.objects.filter(run_id=run.id, type="step").aexists()  # recorded
    assert await runs_inside_at_once(2) == 1


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("asked", ["here", "by another worker"])
async def test_stopping_a_run_that_waits_for_a_slot_cancels_it_at_once(
    one_slot: None, layer: str, user: Any, asked: str
) -> None:
    """On both channel layers: a stop from another worker arrives on the layer."""
    holder = RunSlot()
    await holder.take()
    run = await run_create(user=user, message="hello", mode=RunMode.CHAT)
    task = run_start(run)
    await asyncio.sleep(0.3)  # the run is waiting for the only slot (and listening for a stop)
    assert not task.done()

    if asked == "here":
        await run_cancel(user=user, run=run)
    else:  # what run_cancel sends when the run executes in another process
        await broadcast(run_control_group(run.id), {"type": "run.cancel"})
    # Over while the only slot is still taken (asyncio.wait: a run swallows a cancellation,
    # so wait_for's timeout would not show).
    done, _ = await asyncio.wait({task}, timeout=5)
    assert done == {task}
    assert holder.held

    stored = await AgentRun.objects.aget(pk=run.id)
    assert stored.status == RunStatus.CANCELLED
    end = await RunEvent.objects.filter(run_id=run.id, type="done").aget()
    assert end.payload["status"] == RunStatus.CANCELLED
    holder.give_back()
    assert await runs_inside_at_once(2) == 1


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("ending", ["failed", "cancelled"])
async def test_no_slot_is_left_taken_after_a_failed_or_cancelled_run(
    scripted: Any, one_slot: None, user: Any, ending: str
) -> None:
    if ending == "failed":  # the model endpoint fails, its one retry too
        scripted.script([{"status": 500, "message": "boom"}, {"status": 500, "message": "boom"}])
    else:  # stopped while the model streams slowly
        scripted.script([{"content": "a b c", "chunks": ["a ", "b ", "c"], "chunk_delay_s": 1}])
    run = await run_create(user=user, message="hello", mode=RunMode.CHAT)
    task = run_start(run)
    if ending == "cancelled":
        await scripted.wait_for_request()
        await run_cancel(user=user, run=run)
    await asyncio.wait_for(task, timeout=15)

    stored = await AgentRun.objects.aget(pk=run.id)
    assert stored.status == (RunStatus.FAILED if ending == "failed" else RunStatus.CANCELLED)
    assert await runs_inside_at_once(2) == 1  # exactly one slot free: not none, not two
