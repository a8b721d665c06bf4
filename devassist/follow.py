"""Following a seq-numbered event log: its stored events, then live broadcasts, each delivered
once and in order.

Both logs (a trace's events, a run's SSE events) are written before they are broadcast, and
their seq order is commit order. So a follower that joins the broadcast group before it reads
the log misses nothing; a broadcast that arrives ahead of an earlier one is preceded by the
stored events it skipped, and a broadcast of something already delivered is dropped.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

Event = tuple[int, dict[str, Any]]
#: ``fetch(after_seq, up_to)``: stored events with ``after_seq < seq <= up_to`` (no upper bound
#: for None), oldest first, at most one page of them.
Fetch = Callable[[int, int | None], Awaitable[list[Event]]]


class LogFollower:
    def __init__(self, fetch: Fetch, *, after_seq: int, page_size: int) -> None:
        self.fetch = fetch
        self.last = after_seq
        self.page_size = page_size

    async def backlog(self, *, up_to: int | None = None) -> AsyncIterator[Event]:
        """The stored events after the last one delivered (up to ``up_to``), page by page."""
        while up_to is None or self.last < up_to:
            page = await self.fetch(self.last, up_to)
            for seq, event in page:
                self.last = seq
                yield seq, event
            if len(page) < self.page_size:
                return

    async def live(self, seq: int, event: dict[str, Any]) -> AsyncIterator[Event]:
        """A broadcast event: nothing when already delivered, else the stored events it skipped,
        then itself."""
        if seq <= self.last:
            return
        if seq > self.last + 1:
            async for skipped in self.backlog(up_to=seq - 1):
                yield skipped
        self.last = seq
        yield seq, event
