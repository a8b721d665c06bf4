"""A run's events: written to ``RunEvent`` (so re-attaching misses nothing), then broadcast to
the channel group ``run.<id>``. The run's executor is their only writer."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from functools import partial
from typing import Any

import structlog
from channels.layers import get_channel_layer
from django.db import transaction

from agent.models import AgentRun, RunEvent
from devassist import db
from devassist.follow import LogFollower

logger = structlog.get_logger(__name__)

HEARTBEAT_S = 15.0
#: Answer deltas are gathered for this long before they become one event (and one row).
DELTA_FLUSH_S = 0.03
REPLAY_PAGE = 500


def run_group(run_id: uuid.UUID | str) -> str:
    return f"run.{run_id}"


class RunEvents:
    """Emits a run's events in ``seq`` order: stored first, broadcast after."""

    def __init__(self, run_id: uuid.UUID, *, last_seq: int = 0) -> None:
        """``last_seq``: the seq of the run's newest event, stored by someone else."""
        self.run_id = run_id
        self.seq = last_seq
        self._delta = ""
        self._delta_since = 0.0

    async def prepare(self, type_: str, **payload: Any) -> RunEvent:
        """The next event as an unsaved row, for a writer that stores it in a transaction of
        its own (the trace store, with the step it reports); ``publish`` it once stored."""
        await self.flush_delta()
        return self._next(type_, payload)

    async def publish(self, row: RunEvent) -> None:
        """Broadcast a stored event to the run's followers."""
        layer = get_channel_layer()
        if layer is None:
            return
        try:
            await layer.group_send(
                run_group(self.run_id), {"type": "run.event", "seq": row.seq, "event": row.payload}
            )
        except Exception:
            # Stored already: followers fill the gap from the log on the next event.
            logger.exception("run_event_broadcast_failed", run_id=str(self.run_id))

    def _next(self, type_: str, payload: dict[str, Any]) -> RunEvent:
        self.seq += 1
        return RunEvent(
            run_id=self.run_id, seq=self.seq, type=type_, payload={"type": type_, **payload}
        )

    async def delta(self, text: str) -> None:
        """Queue answer text; it leaves as one ``delta`` event per ~30 ms."""
        if not text:
            return
        if not self._delta:
            self._delta_since = time.monotonic()
        self._delta += text
        if time.monotonic() - self._delta_since >= DELTA_FLUSH_S:
            await self.flush_delta()

    async def flush_delta(self) -> None:
        row = self.take_delta()
        if row is not None:
            await db.in_thread(_store_event, row)
            await self.publish(row)

    def take_delta(self) -> RunEvent | None:
        """The queued answer text as the next event, unsaved, for a writer that stores it in
        a transaction of its own (``publish`` it once stored); None when nothing is queued."""
        if not self._delta:
            return None
        text, self._delta = self._delta, ""
        return self._next("delta", {"content": text})


def _store_event(row: RunEvent) -> None:
    with transaction.atomic():
        db.run([*db.skip_flush_wait(), *db.insert_statements([row])])


def step_events(run_ids: list[uuid.UUID]) -> dict[uuid.UUID, list[dict[str, Any]]]:
    """The ``step`` events of these runs, per run, in order (one query)."""
    steps: dict[uuid.UUID, list[dict[str, Any]]] = {run_id: [] for run_id in run_ids}
    events = RunEvent.objects.filter(run_id__in=run_ids, type="step").order_by("run_id", "seq")
    for event in events.only("run_id", "payload"):
        steps[event.run_id].append(event.payload)
    return steps


async def logged_events(
    run_id: uuid.UUID, after_seq: int, up_to: int | None = None
) -> list[tuple[int, dict[str, Any]]]:
    """The run's stored events after ``after_seq`` (up to ``up_to``), a page at most; the
    connection goes back to the pool after the read (a follower mostly waits)."""
    return await db.in_thread(_logged_events, run_id, after_seq, up_to)


def _logged_events(
    run_id: uuid.UUID, after_seq: int, up_to: int | None
) -> list[tuple[int, dict[str, Any]]]:
    qs = RunEvent.objects.filter(run_id=run_id, seq__gt=after_seq).order_by("seq")
    if up_to is not None:
        qs = qs.filter(seq__lte=up_to)
    return [(seq, payload) for seq, payload in qs.values_list("seq", "payload")[:REPLAY_PAGE]]


async def follow_run(
    run_id: uuid.UUID, *, after_seq: int = 0, heartbeat_s: float = HEARTBEAT_S
) -> AsyncIterator[tuple[int, dict[str, Any]] | None]:
    """The run's events after ``after_seq``: the stored ones, then live ones, each once and in
    order, ending with ``done``. Yields None when ``heartbeat_s`` passes without an event."""
    layer = get_channel_layer()
    channel = await layer.new_channel(prefix="run-follow.")
    await layer.group_add(run_group(run_id), channel)
    follower = LogFollower(
        partial(logged_events, run_id), after_seq=after_seq, page_size=REPLAY_PAGE
    )
    try:
        # Joined the group before reading the log: nothing falls between the two.
        async for seq, event in follower.backlog():
            yield seq, event
            if event["type"] == "done":
                return
        while True:
            try:
                message = await asyncio.wait_for(layer.receive(channel), heartbeat_s)
            except TimeoutError:
                if await db.in_thread(_finished_without_done, run_id, follower.last):
                    return
                yield None
                continue
            if message.get("type") != "run.event":
                continue
            async for seq, event in follower.live(message["seq"], message["event"]):
                yield seq, event
                if event["type"] == "done":
                    return
    finally:
        await layer.group_discard(run_group(run_id), channel)


def _finished_without_done(run_id: uuid.UUID, last: int) -> bool:
    """A run whose executor died (a crashed worker) never sends ``done``; stop following it
    once it is marked finished and its log holds nothing newer."""
    run = AgentRun.objects.filter(pk=run_id).only("status").first()
    if run is None:
        return True
    return run.is_finished and not RunEvent.objects.filter(run_id=run_id, seq__gt=last).exists()
