"""Following a seq-numbered event log: its stored events, then live broadcasts, each delivered
once and in order.

Both logs (a trace's events, a run's SSE events) are written before they are broadcast, and
their seq order is commit order. So a follower that joins the broadcast group before it reads
the log misses nothing; a broadcast that arrives ahead of an earlier one is preceded by the
stored events it skipped, and a broadcast of something already delivered is dropped.
"""

from __future__ import annotations

import asyncio
import time
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from functools import partial
from typing import Any

import structlog
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import transaction

logger = structlog.get_logger(__name__)

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


#: A follower whose channel layer failed reads its log this often instead.
POLL_S = 1.0
#: Followers re-join their group this often (a group entry expires after
#: ``settings.CHANNELS_GROUP_EXPIRY_S``, so one left by a dead process does not linger).
REJOIN_S = 60.0


class LayerFailed(Exception):
    """The channel layer failed or is unreachable; the log is still there to read."""


async def broadcast(group: str, message: dict[str, Any]) -> None:
    """Send ``message`` to everyone listening to ``group``, on every worker (a
    ``GroupListener``). Raises what the channel layer raises."""
    await get_channel_layer().group_send(group, {**message, "group": group})


#: The type of a message that carries several (``broadcast_on_commit``); listeners get each.
BATCH_TYPE = "follow.batch"


def broadcast_on_commit(group: str, messages: Sequence[dict[str, Any]]) -> None:
    """``broadcast`` ``messages`` to ``group`` once the current transaction commits (at once
    outside one), from the committing thread, as one message of the channel layer: its
    listeners get each of them, in order. A failure is logged, never raised: what the
    messages carry is stored in its log, and followers fill the gap from there.

    One message per commit, not one per event: a write of 512 OTLP spans has 512 events, and
    sending them one by one (a Redis round trip or three each, on the worker's event loop,
    which also forwards them to the watchers) made the spans' request wait for all of them
    (benchmarks/README.md, "2026-12-05 14:55")."""
    if messages:
        transaction.on_commit(partial(_broadcast_committed, group, list(messages)))


def _broadcast_committed(group: str, messages: list[dict[str, Any]]) -> None:
    message = messages[0] if len(messages) == 1 else {"type": BATCH_TYPE, "messages": messages}
    try:
        async_to_sync(broadcast)(group, message)
    except Exception:
        logger.exception("broadcast_failed", group=group)


class _Hub:
    """This process's one reader of the channel layer (per event loop and layer): one
    channel, in every group that someone in the process listens to, read by one task that is
    never cancelled while it runs, and each message handed to the listeners of its group.

    One reader because channels-redis serves all of a process's channels through one lock and
    one blocking read on Redis: a second reader would wait for the first, and a reader that is
    cancelled in the middle of its read (a timeout, say) loses the message Redis was handing
    it, which may have been anyone's. Listeners wait on their own queues, which a timeout or a
    cancellation leaves intact."""

    def __init__(self, layer: Any) -> None:
        self.layer = layer
        self.channel: str | None = None
        self.listeners: dict[str, set[asyncio.Queue[Any]]] = {}
        self._lock = asyncio.Lock()
        self._tasks: list[asyncio.Task[None]] = []

    async def subscribe(self, group: str) -> asyncio.Queue[Any]:
        """A queue that receives ``group``'s messages; raises ``LayerFailed``."""
        queue: asyncio.Queue[Any] = asyncio.Queue()
        async with self._lock:
            try:
                if self.channel is None:
                    self.channel = await self.layer.new_channel()
                if group not in self.listeners:
                    await self.layer.group_add(group, self.channel)
            except Exception as exc:
                raise LayerFailed(str(exc) or type(exc).__name__) from exc
            self.listeners.setdefault(group, set()).add(queue)
            if not self._tasks:
                self._tasks = [
                    asyncio.create_task(self._read(self.channel), name="channel-layer-reader"),
                    asyncio.create_task(self._rejoin(self.channel), name="channel-layer-rejoin"),
                ]
        return queue

    async def unsubscribe(self, group: str, queue: asyncio.Queue[Any]) -> None:
        async with self._lock:
            queues = self.listeners.get(group)
            if queues is None or queue not in queues:
                return
            queues.discard(queue)
            if queues:
                return
            del self.listeners[group]
            try:
                await self.layer.group_discard(group, self.channel)
            except Exception:
                logger.warning("channel_group_leave_failed", group=group, exc_info=True)
            if not self.listeners:
                # Nobody listens: the reader stops (its channel is in no group any more) and
                # the next listener starts another on a new channel, so no task outlives the
                # last listener and no new reader shares a channel with one being cancelled.
                self._stop_tasks()
                self.channel = None

    async def _read(self, channel: str) -> None:
        while True:
            try:
                message = await self.layer.receive(channel)
            except Exception as exc:
                self.fail(LayerFailed(str(exc) or type(exc).__name__))
                return
            queues = self.listeners.get(message.get("group", ""), ())
            batch = message["messages"] if message.get("type") == BATCH_TYPE else [message]
            for queue in queues:
                for item in batch:
                    queue.put_nowait(item)

    async def _rejoin(self, channel: str) -> None:
        """Renew the channel's group entries, which expire (``CHANNELS_GROUP_EXPIRY_S``)."""
        while True:
            await asyncio.sleep(REJOIN_S)
            try:
                for group in list(self.listeners):
                    await self.layer.group_add(group, channel)
            except Exception as exc:
                self.fail(LayerFailed(str(exc) or type(exc).__name__))
                return

    def fail(self, error: LayerFailed) -> None:
        """Tell every listener the layer failed (they read their logs instead) and start
        afresh: the next listener joins again, on a new channel."""
        logger.warning("channel_layer_failed", error=str(error), listeners=len(self.listeners))
        for queues in self.listeners.values():
            for queue in queues:
                queue.put_nowait(error)
        self.listeners = {}
        self.channel = None
        self._stop_tasks()

    def _stop_tasks(self) -> None:
        current = asyncio.current_task()
        for task in self._tasks:
            if task is not current:
                task.cancel()
        self._tasks = []


_hubs: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Hub] = weakref.WeakKeyDictionary()


def _hub() -> _Hub:
    """The running loop's hub on the current channel layer."""
    loop = asyncio.get_running_loop()
    layer = get_channel_layer()
    hub = _hubs.get(loop)
    if hub is None or hub.layer is not layer:
        if hub is not None:
            hub.fail(LayerFailed("the channel layer was replaced"))
        hub = _hubs[loop] = _Hub(layer)
    return hub


class GroupListener:
    """Listens to one group of the channel layer through the process's one reader."""

    def __init__(self, group: str) -> None:
        self.group = group
        self._hub: _Hub | None = None
        self._queue: asyncio.Queue[Any] | None = None

    async def join(self) -> None:
        """Raises ``LayerFailed`` when the layer cannot be reached."""
        self._hub = _hub()
        self._queue = await self._hub.subscribe(self.group)

    async def receive(self, timeout_s: float | None = None) -> dict[str, Any] | None:
        """The next message, or None after ``timeout_s``; raises ``LayerFailed``."""
        assert self._queue is not None
        try:
            async with asyncio.timeout(timeout_s):
                item = await self._queue.get()
        except TimeoutError:
            return None
        if isinstance(item, LayerFailed):
            raise item
        return item

    async def leave(self) -> None:
        if self._hub is not None and self._queue is not None:
            await self._hub.unsubscribe(self.group, self._queue)


async def follow(
    group: str,
    follower: LogFollower,
    *,
    live_event: Callable[[dict[str, Any]], Event | None],
    heartbeat_s: float,
) -> AsyncIterator[Event | None]:
    """The log's events after ``follower.last``, stored ones then live ones, each once and in
    order, for as long as the caller iterates; None after each ``heartbeat_s`` without one.

    ``live_event`` turns a message of ``group`` into its ``(seq, event)``, or None for another
    kind of message. A quiet period also reads the log, so an event whose broadcast was lost
    (or that another process stored without one) still arrives. When the channel layer fails
    or cannot be reached, the follower reads the log every ``POLL_S`` instead: the log is the
    source of truth, the broadcast only makes it prompt."""
    listener: GroupListener | None = GroupListener(group)
    try:
        assert listener is not None
        await listener.join()
    except LayerFailed as exc:
        logger.warning("channel_layer_unavailable", group=group, error=str(exc))
        listener = None
    try:
        # Joined the group before reading the log: nothing falls between the two.
        async for item in follower.backlog():
            yield item
        quiet_since = time.monotonic()
        while True:
            message = None
            if listener is not None:
                try:
                    message = await listener.receive(heartbeat_s)
                except LayerFailed as exc:
                    logger.warning("channel_layer_failed", group=group, error=str(exc))
                    await listener.leave()
                    listener = None
            else:
                await asyncio.sleep(min(POLL_S, heartbeat_s))
            live = live_event(message) if message is not None else None
            if live is not None:
                async for item in follower.live(*live):
                    yield item
                quiet_since = time.monotonic()
                continue
            if message is not None:
                continue  # someone else's kind of message
            delivered = False
            async for item in follower.backlog():
                delivered = True
                yield item
            if delivered:
                quiet_since = time.monotonic()
            elif time.monotonic() - quiet_since >= heartbeat_s:
                yield None
                quiet_since = time.monotonic()
    finally:
        if listener is not None:
            await listener.leave()
