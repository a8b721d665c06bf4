"""Run slots: how many runs of this process do their own work at once (``AGENT_RUN_SLOTS``).

A run does its own work (recording its steps and events, reading the model's stream, building
prompts) in the process's one event loop and the threads it hands database work to. When many
runs have work ready at the same moment, a new request, which needs a few milliseconds of CPU
before its ``meta`` event goes out, waits behind all of them. With the model answering at once
and 50 sustained streams (benchmarks/chat_stream.py), first event p50 is 2.3-2.7 s on one
worker and 1.8-2.9 s on two workers with Redis without slots; 82-91 ms and 127-198 ms with 2
(benchmarks/README.md, "Run slots").

So a run holds one of ``AGENT_RUN_SLOTS`` slots while it executes (``RunSlot``, taken by
``agent.executor``) and gives it back while it waits on something outside the process. That
happens in one place: the model and the tools the run is given are wrapped once
(``RunSlot.model``, ``RunSlot.tools``, applied by ``agent.executor`` and ``agent.modes``), and
the wrappers give the slot back while a completion, each chunk of a stream, or a tool call is
awaited. The loop, the providers, the tools and the knowledge code see an ordinary provider
and registry and know nothing of slots. Runs that find no free slot wait in arrival order,
doing nothing, so a Stop (cancelling the run's task) ends such a wait at once.
``AGENT_RUN_SLOTS = 0`` turns the limit off.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Sequence
from contextlib import aclosing, asynccontextmanager
from typing import Any, ParamSpec, TypeVar

from django.conf import settings

from agent.llm.base import ChatMessage, LLMChunk, LLMProvider, LLMResponse, ToolDefinition
from agent.tools.registry import ToolContext, ToolRegistry
from devassist.connections import in_thread, release_connection

P = ParamSpec("P")
T = TypeVar("T")

# asyncio primitives belong to one event loop; tests and servers may run several. Each loop's
# semaphore is kept with the size it was made for (a changed setting makes a new one).
_semaphores: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, tuple[int, asyncio.Semaphore]] = (
    weakref.WeakKeyDictionary()
)


def _semaphore() -> asyncio.Semaphore | None:
    """This loop's slots, or None when ``AGENT_RUN_SLOTS`` is 0 (no limit)."""
    size = int(settings.AGENT_RUN_SLOTS)
    if size <= 0:
        return None
    loop = asyncio.get_running_loop()
    made = _semaphores.get(loop)
    if made is None or made[0] != size:
        made = _semaphores[loop] = (size, asyncio.Semaphore(size))
    return made[1]


class RunSlot:
    """One run's claim on a slot, made in the run's own task. Only that task gives the slot
    back and takes it again: in any other task (one the run started) ``released`` and
    ``holding`` do nothing."""

    def __init__(self) -> None:
        self._semaphore = _semaphore()
        self._task = asyncio.current_task()
        self.held = False

    async def take(self) -> None:
        """Wait in turn for a free slot (at once when there is no limit). Cancelled while
        waiting, it leaves without one."""
        if self._semaphore is None or self.held:
            return
        if self._semaphore.locked():
            # A run must not wait holding its thread's database connection: 50 runs waiting
            # for a slot would hold the pool's 20, and the runs holding the slots would wait
            # for one (every stream stalled in benchmarks/chat_stream.py at 50).
            await in_thread(release_connection)
        await self._semaphore.acquire()
        self.held = True

    def give_back(self) -> None:
        """Free the slot if this run holds it (the run's end; safe to call twice)."""
        if self._semaphore is not None and self.held:
            self.held = False
            self._semaphore.release()

    @asynccontextmanager
    async def released(self) -> AsyncIterator[None]:
        """The slot is free while the block (a wait outside the process) waits, and taken
        again, in turn, after it, also when it raises. A cancelled block leaves without a
        slot: the run is ending, and its end must not wait for one.

        The slot is given back only once the block really waits (the loop runs something
        else): a block that has its result at once (a streamed chunk already received) keeps
        it, instead of going to the back of the line for work that was ready."""
        if not self.held or asyncio.current_task() is not self._task:
            yield
            return
        waiting = asyncio.get_running_loop().call_soon(self.give_back)
        try:
            yield
        except asyncio.CancelledError:
            raise
        except BaseException:
            await self.take()
            raise
        finally:
            waiting.cancel()  # the block is over: nothing to give back any more
        await self.take()

    def holding(self, report: Callable[P, Awaitable[T]]) -> Callable[P, Awaitable[T]]:
        """``report`` (a callback that records) run with the slot held, for code that calls
        back into the run from inside a ``released`` block (a RAG answer's retrieval and
        deltas)."""

        async def held(*args: P.args, **kwargs: P.kwargs) -> T:
            if self._semaphore is None or self.held or asyncio.current_task() is not self._task:
                return await report(*args, **kwargs)
            await self.take()
            try:
                return await report(*args, **kwargs)
            finally:
                self.give_back()

        return held

    def model(self, llm: LLMProvider) -> LLMProvider:
        """``llm``, with the slot free while each of its calls (each streamed chunk) is
        awaited."""
        return _SlotFreeModel(llm, self)

    def tools(self, registry: ToolRegistry) -> ToolRegistry:
        """``registry``'s tools, with the slot free while each call runs."""
        return _SlotFreeTools(registry, self)


class _SlotFreeModel:
    """An ``LLMProvider`` that passes every call on to ``inner`` with the run's slot free while
    it waits. Errors and cancellations reach the caller unchanged."""

    def __init__(self, inner: LLMProvider, slot: RunSlot) -> None:
        self.inner = inner
        self.model = inner.model
        self.writes_free_text = inner.writes_free_text
        self._slot = slot

    async def complete(
        self,
        messages: Sequence[ChatMessage],
        *,
        stop: Sequence[str] | None = None,
        tools: Sequence[ToolDefinition] | None = None,
    ) -> LLMResponse:
        async with self._slot.released():
            return await self.inner.complete(messages, stop=stop, tools=tools)

    async def stream(
        self,
        messages: Sequence[ChatMessage],
        *,
        stop: Sequence[str] | None = None,
        tools: Sequence[ToolDefinition] | None = None,
    ) -> AsyncGenerator[LLMChunk, None]:
        # Free while each chunk is awaited, held while the caller handles it (its deltas).
        # Closing this stream closes the inner one (its HTTP response) at once.
        async with aclosing(self.inner.stream(messages, stop=stop, tools=tools)) as inner:
            while True:
                async with self._slot.released():
                    chunk = await anext(inner, None)
                if chunk is None:
                    return
                yield chunk

    def describe(self) -> dict[str, Any]:
        return self.inner.describe()


class _SlotFreeTools(ToolRegistry):
    """``inner``'s tools (the same compiled entries), each call made with the run's slot
    free: a tool works outside the run (a container, a thread, the search)."""

    def __init__(self, inner: ToolRegistry, slot: RunSlot) -> None:
        super().__init__()
        self._entries = inner._entries
        self._slot = slot

    async def call(self, name: str, args: Any, context: ToolContext) -> Any:
        async with self._slot.released():
            return await super().call(name, args, context)
