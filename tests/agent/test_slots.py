"""Run slots (agent/slots.py): at most AGENT_RUN_SLOTS runs work at once, in arrival order, and a
run's slot is free while it waits on the model, a tool or the knowledge store."""

from __future__ import annotations

import asyncio
import threading
import uuid
from typing import Any

import pytest

from agent.events import run_control_group
from agent.models import AgentRun, RunEvent, RunMode, RunStatus
from agent.runs import run_cancel, run_create, run_start
from agent.slots import run_slot, slot_released, waiting_for_slot
from agent.tools.registry import Tool, ToolContext, ToolRegistry
from devassist.follow import broadcast

EMPTY = {"type": "object", "properties": {}, "additionalProperties": False}


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


@pytest.fixture
def one_slot(settings: Any) -> None:
    settings.AGENT_RUN_SLOTS = 1


async def test_runs_beyond_the_limit_wait_in_arrival_order(settings: Any) -> None:
    settings.AGENT_RUN_SLOTS = 2
    order: list[str] = []
    gate = asyncio.Event()

    async def run(name: str) -> None:
        async with run_slot():
            order.append(f"{name} in")
            await gate.wait()
            order.append(f"{name} out")

    tasks = [asyncio.create_task(run(name)) for name in "abcd"]
    await settle()
    assert order == ["a in", "b in"]  # c and d wait for a slot
    gate.set()
    await asyncio.gather(*tasks)
    assert order[:3] == ["a in", "b in", "a out"]
    assert order.index("a out") < order.index("c in") < order.index("d in")


async def runs_inside_at_once(count: int) -> int:
    """Start ``count`` runs that hold their slot until released; return how many got one at
    once (the others wait), after checking that every run got one in the end."""
    entered = 0
    gate = asyncio.Event()

    async def run() -> None:
        nonlocal entered
        async with run_slot():
            entered += 1
            await gate.wait()

    runs = [asyncio.create_task(run()) for _ in range(count)]
    await settle()
    at_once = entered
    gate.set()
    await asyncio.gather(*runs)
    assert entered == count
    return at_once


async def test_no_limit_when_slots_are_zero(settings: Any) -> None:
    settings.AGENT_RUN_SLOTS = 0
    assert await runs_inside_at_once(20) == 20


async def test_a_changed_setting_takes_effect_in_the_same_loop(settings: Any) -> None:
    settings.AGENT_RUN_SLOTS = 1
    assert await runs_inside_at_once(2) == 1
    settings.AGENT_RUN_SLOTS = 2
    assert await runs_inside_at_once(3) == 2


async def test_a_waiting_run_lets_the_next_one_work_and_takes_a_slot_back_in_turn(
    one_slot: None,
) -> None:
    order: list[str] = []
    model = asyncio.Event()
    b_holds = asyncio.Event()
    b_may_leave = asyncio.Event()

    async def waits_on_the_model() -> None:
        async with run_slot():
            order.append("a works")
            async with slot_released():
                await model.wait()
            order.append("a works again")

    async def works() -> None:
        async with run_slot():
            order.append("b works")
            b_holds.set()
            await b_may_leave.wait()
            order.append("b done")

    a = asyncio.create_task(waits_on_the_model())
    await settle()
    b = asyncio.create_task(works())
    await b_holds.wait()
    model.set()  # a's answer is back while b holds the only slot: a waits for it
    await settle()
    assert order == ["a works", "b works"]
    b_may_leave.set()
    await asyncio.gather(a, b)
    assert order == ["a works", "b works", "b done", "a works again"]


async def test_a_cancelled_wait_leaves_without_a_slot_and_frees_everything(
    one_slot: None,
) -> None:
    waiting = asyncio.Event()

    async def run() -> None:
        async with run_slot(), slot_released():
            waiting.set()
            await asyncio.Event().wait()

    task = asyncio.create_task(run())
    await waiting.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await runs_inside_at_once(2) == 1  # exactly one slot free: not none, not two


async def test_an_error_in_the_wait_takes_the_slot_back_before_it_propagates(
    one_slot: None,
) -> None:
    caught = asyncio.Event()
    finish = asyncio.Event()
    other_entered = asyncio.Event()

    async def run() -> None:
        async with run_slot():
            try:
                async with slot_released():
                    raise ValueError("tool failed")
            except ValueError:
                caught.set()  # the loop goes on after a failed tool, holding its slot again
            await finish.wait()

    async def other() -> None:
        async with run_slot():
            other_entered.set()

    failing = asyncio.create_task(run())
    await caught.wait()
    waiting = asyncio.create_task(other())
    await settle()
    assert not other_entered.is_set()
    finish.set()
    await asyncio.gather(failing, waiting)
    assert other_entered.is_set()
    assert await runs_inside_at_once(2) == 1  # exactly one slot free: not none, not two


async def test_release_is_a_no_op_outside_a_run_and_in_a_task_the_run_started(
    one_slot: None,
) -> None:
    async with slot_released():  # outside a run
        pass
    gate = asyncio.Event()
    entered = asyncio.Event()

    async def other_run() -> None:
        async with run_slot():
            entered.set()

    async with run_slot():

        async def child() -> None:  # inherits the run's context, but is not the run
            async with slot_released():
                await gate.wait()

        task = asyncio.create_task(child())
        other = asyncio.create_task(other_run())
        await settle()
        assert not entered.is_set()  # the child did not give the run's slot away
        gate.set()
        await task
    await other
    assert entered.is_set()


async def test_a_tool_call_frees_the_slot(one_slot: None) -> None:
    started = asyncio.Event()
    finish = asyncio.Event()

    async def slow(args: dict[str, Any], context: Any) -> dict[str, Any]:
        started.set()
        await finish.wait()
        return {}

    registry = ToolRegistry(
        [Tool(name="slow", description="Waits.", parameters=EMPTY, handler=slow)]
    )
    context = ToolContext(user=None)

    async def run() -> None:
        async with run_slot():
            await registry.call("slow", {}, context)

    tool_run = asyncio.create_task(run())
    await started.wait()
    async with run_slot():  # taken while the tool works
        finish.set()
    await tool_run


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
    for _ in range(200):  # until the slow call is under way (the script's first reply taken)
        if len(scripted.requests) == 1:
            break
        await asyncio.sleep(0.01)
    quick = await run_create(user=user, message="second", mode=RunMode.CHAT)
    quick_task = run_start(quick)
    done, _ = await asyncio.wait({slow_task, quick_task}, return_when=asyncio.FIRST_COMPLETED)
    assert done == {quick_task}
    await slow_task
    runs = {r.input: r async for r in AgentRun.objects.filter(pk__in=[slow.id, quick.id])}
    assert runs["first"].status == runs["second"].status == RunStatus.COMPLETED
    assert runs["first"].output == "slow answer"
    assert runs["second"].output == "quick answer"


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("asked", ["here", "by another worker"])
async def test_stopping_a_run_that_waits_for_a_slot_cancels_it_at_once(
    one_slot: None, user: Any, asked: str
) -> None:
    release = asyncio.Event()
    holding = asyncio.Event()

    async def busy_run() -> None:
        async with run_slot():
            holding.set()
            await release.wait()

    holder = asyncio.create_task(busy_run())
    await holding.wait()
    run = await run_create(user=user, message="hello", mode=RunMode.CHAT)
    task = run_start(run)
    for _ in range(200):
        if waiting_for_slot(task):
            break
        await asyncio.sleep(0.01)
    assert waiting_for_slot(task)

    if asked == "here":
        await run_cancel(user=user, run=run)
    else:  # what run_cancel sends when the run executes in another process
        await broadcast(run_control_group(run.id), {"type": "run.cancel"})
    # Over while the only slot is still taken (asyncio.wait: a run swallows a cancellation,
    # so wait_for's timeout would not show).
    done, _ = await asyncio.wait({task}, timeout=5)
    assert done == {task}

    assert not release.is_set()
    stored = await AgentRun.objects.aget(pk=run.id)
    assert stored.status == RunStatus.CANCELLED
    end = await RunEvent.objects.filter(run_id=run.id, type="done").aget()
    assert end.payload["status"] == RunStatus.CANCELLED
    release.set()
    await holder


async def slot_is_free_while(work: Any, started: threading.Event, finish: threading.Event) -> Any:
    """Run ``work()`` holding the only slot; once its outside call has ``started``, another run
    must get the slot before ``finish`` lets that call return. Returns what ``work`` returned."""

    async def run() -> Any:
        async with run_slot():
            return await work()

    task = asyncio.create_task(run())
    try:
        for _ in range(500):
            if started.is_set():
                break
            await asyncio.sleep(0.01)
        assert started.is_set()
        async with asyncio.timeout(2), run_slot():  # free while the call is out
            pass
    finally:
        finish.set()
    return await task


async def test_retrieval_for_a_rag_answer_frees_the_slot(
    one_slot: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    import agent.knowledge.rag as rag

    started, finish = threading.Event(), threading.Event()

    def search(**kwargs: Any) -> list[Any]:
        started.set()
        finish.wait(30)
        return []

    monkeypatch.setattr(rag, "search", search)
    answer = await slot_is_free_while(
        lambda: rag.rag_answer(question="Where is it?", collection="docs"), started, finish
    )
    assert answer.chunks == []


async def test_long_term_recall_frees_the_slot(
    one_slot: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    import agent.memory as memory

    started, finish = threading.Event(), threading.Event()
    cache = memory.ShortTermMemory(turns=1, conversations=1)
    full = [memory.Turn("user", "a", 1), memory.Turn("assistant", "b", 2)]
    monkeypatch.setattr(cache, "window", lambda conversation_id, *, through_sequence: (full, True))
    monkeypatch.setattr(memory, "short_term_memory", lambda: cache)

    def query_texts(*args: Any, **kwargs: Any) -> list[Any]:
        started.set()
        finish.wait(30)
        return []

    monkeypatch.setattr(memory, "query_texts", query_texts)
    recollection = await slot_is_free_while(
        lambda: memory.recall(conversation_id=uuid.uuid4(), before_sequence=3, query="q"),
        started,
        finish,
    )
    assert recollection.searched is True
