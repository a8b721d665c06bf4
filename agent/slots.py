"""Run slots: how many runs may work in this process at once.

A run does its own work (reading the model's stream, recording its steps and events, building
prompts) in the process's one event loop and the threads it hands database work to. When many
runs have work ready at the same moment, sharing the CPU among all of them makes each of them
slow, and a new request, which needs a few milliseconds of CPU before its ``meta`` event goes
out, waits behind all of them.

So a run holds one of ``AGENT_RUN_SLOTS`` slots while it works (``run_slot``), and gives it back
while it waits on something outside the process (``slot_released``): the model's answer or its
next streamed chunk, a tool (the sandbox, the search), the knowledge store (a RAG answer's
retrieval, long-term memory). Runs that find no free slot wait in
arrival order. With a model that takes seconds, nearly every run is waiting at any moment and
slots are free; with a fast model or a busy machine, at most ``AGENT_RUN_SLOTS`` runs compete
for the CPU, and requests, which take no slot, get it first. A run waiting for a slot does
nothing, so a Stop cancels it at once (``waiting_for_slot``). ``AGENT_RUN_SLOTS = 0`` turns the
limit off.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from django.conf import settings


@dataclass
class _Slot:
    """One run's claim: the run's own task, and whether it holds a slot right now."""

    task: asyncio.Task[object] | None
    semaphore: asyncio.Semaphore
    held: bool = False


_current: ContextVar[_Slot | None] = ContextVar("agent_run_slot", default=None)
# Runs' tasks waiting for a slot (to start, or after a wait): a Stop may cancel them at once.
_waiting: weakref.WeakSet[asyncio.Task[Any]] = weakref.WeakSet()
# asyncio primitives belong to one event loop; tests and servers may run several. Each loop's
# semaphore is kept with the size it was made for (a changed setting makes a new one).
_semaphores: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, tuple[int, asyncio.Semaphore]] = (
    weakref.WeakKeyDictionary()
)


def _semaphore() -> asyncio.Semaphore | None:
    size = int(settings.AGENT_RUN_SLOTS)
    if size <= 0:
        return None
    loop = asyncio.get_running_loop()
    made = _semaphores.get(loop)
    if made is None or made[0] != size:
        made = _semaphores[loop] = (size, asyncio.Semaphore(size))
    return made[1]


@asynccontextmanager
async def run_slot() -> AsyncIterator[None]:
    """Hold a slot for the block (a run's execution), waiting in turn for one to be free."""
    semaphore = _semaphore()
    if semaphore is None:
        yield
        return
    slot = _Slot(task=asyncio.current_task(), semaphore=semaphore)
    token = _current.set(slot)
    try:
        await _take(slot)
        yield
    finally:
        _current.reset(token)
        if slot.held:
            slot.held = False
            semaphore.release()


@asynccontextmanager
async def slot_released() -> AsyncIterator[None]:
    """Give the running run's slot back for the block (a wait on the model or a tool) and take
    one again after it, in turn. A cancelled wait leaves without a slot: the run is ending.
    Outside a run, or in a task the run started, this does nothing."""
    slot = _current.get()
    if slot is None or not slot.held or slot.task is not asyncio.current_task():
        yield
        return
    slot.held = False
    slot.semaphore.release()
    try:
        yield
    except asyncio.CancelledError:
        raise
    except BaseException:
        await _take(slot)
        raise
    await _take(slot)


def waiting_for_slot(task: asyncio.Task[Any]) -> bool:
    """Whether ``task`` (a run's) is waiting for a slot, doing nothing meanwhile: cancelling
    it then interrupts no work."""
    return task in _waiting


async def _take(slot: _Slot) -> None:
    if slot.task is not None:
        _waiting.add(slot.task)
    try:
        await slot.semaphore.acquire()
    finally:
        if slot.task is not None:
            _waiting.discard(slot.task)
    slot.held = True
