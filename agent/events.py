"""A run's events: the replay buffer of its SSE stream, written to ``RunEvent`` (so re-attaching
misses nothing), then broadcast to the channel group ``run.<id>``. The run's recorder writes
them while the run goes; besides it, ``agent.services.run_create`` writes the first (``meta``)
with the run, and ``agent.leases`` the last (``error``, ``done``) of a run whose worker died.
Nothing reads them as the run's history (its trace is that)."""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator, Sequence
from functools import partial
from typing import Any

import structlog
from django.conf import settings
from django.db import transaction

from agent.models import AgentRun, RunEvent
from devassist.connections import in_thread
from devassist.follow import LogFollower, broadcast_on_commit, follow

logger = structlog.get_logger(__name__)

#: Answer deltas are gathered for this long before they become one event (and one row).
DELTA_FLUSH_S = 0.03
REPLAY_PAGE = 500


def run_group(run_id: uuid.UUID | str) -> str:
    """The group of the run's followers: its events."""
    return f"run.{run_id}"


def run_control_group(run_id: uuid.UUID | str) -> str:
    """The group of the run's executor: requests to it (``run.cancel``)."""
    return f"run-control.{run_id}"


class RunEvents:
    """Emits a run's events in ``seq`` order: stored first, broadcast once stored."""

    def __init__(self, run_id: uuid.UUID, *, last_seq: int = 0) -> None:
        """``last_seq``: the seq of the run's newest event, stored by someone else."""
        self.run_id = run_id
        self.seq = last_seq
        self._delta = ""
        self._delta_since = 0.0
        self._answering = False  # whether answer text has gone out yet

    async def next(self, type_: str, payload: dict[str, Any]) -> RunEvent:
        """The next event as an unsaved row, for a writer that stores it (``store``) in a
        transaction of its own, with the step it reports; answer text still queued goes out
        first, so the events keep their order."""
        await self.flush_delta()
        return self._next(type_, payload)

    def store(self, rows: Sequence[RunEvent]) -> None:
        """Store ``rows`` in the caller's transaction; they are broadcast to the run's
        followers once it commits."""
        RunEvent.objects.bulk_create(rows)
        broadcast_on_commit(
            run_group(self.run_id),
            [{"type": "run.event", "seq": row.seq, "event": row.payload} for row in rows],
        )

    def _next(self, type_: str, payload: dict[str, Any]) -> RunEvent:
        self.seq += 1
        return RunEvent(
            run_id=self.run_id, seq=self.seq, type=type_, payload={"type": type_, **payload}
        )

    async def delta(self, text: str) -> None:
        """Queue answer text; it leaves as one ``delta`` event per ~30 ms, or at once when it
        is the answer's first text (what a reader waits for) or ``text`` is empty (a flush is
        due: the text must not wait longer)."""
        if text and not self._delta:
            self._delta_since = time.monotonic()
        self._delta += text
        first = bool(text) and not self._answering
        if first or not text or time.monotonic() - self._delta_since >= DELTA_FLUSH_S:
            self._answering = self._answering or bool(self._delta)
            await self.flush_delta()

    async def flush_delta(self) -> None:
        row = self.take_delta()
        if row is not None:
            await in_thread(self._store_one, row)

    def _store_one(self, row: RunEvent) -> None:
        with transaction.atomic():
            self.store([row])

    def take_delta(self) -> RunEvent | None:
        """The queued answer text as the next event, unsaved, for a writer that stores it
        with its own rows; None when nothing is queued."""
        if not self._delta:
            return None
        text, self._delta = self._delta, ""
        return self._next("delta", {"content": text})


async def logged_events(
    run_id: uuid.UUID, after_seq: int, up_to: int | None = None
) -> list[tuple[int, dict[str, Any]]]:
    """The run's stored events after ``after_seq`` (up to ``up_to``), a page at most; the
    connection goes back to the pool after the read (a follower mostly waits)."""
    return await in_thread(_logged_events, run_id, after_seq, up_to)


def _logged_events(
    run_id: uuid.UUID, after_seq: int, up_to: int | None
) -> list[tuple[int, dict[str, Any]]]:
    qs = RunEvent.objects.filter(run_id=run_id, seq__gt=after_seq).order_by("seq")
    if up_to is not None:
        qs = qs.filter(seq__lte=up_to)
    return [(seq, payload) for seq, payload in qs.values_list("seq", "payload")[:REPLAY_PAGE]]


async def follow_run(
    run_id: uuid.UUID, *, after_seq: int = 0, heartbeat_s: float | None = None
) -> AsyncIterator[tuple[int, dict[str, Any]] | None]:
    """The run's events after ``after_seq``: the stored ones, then live ones, each once and in
    order, ending with ``done``. Yields None when ``heartbeat_s`` (default
    ``settings.SSE_HEARTBEAT_S``) passes without an event.

    A finished run answers at once: what remains of its log, then its ``done`` (sent again to
    a client that already has it). A run whose worker died is failed first
    (``agent.leases``), so its stream ends too."""
    follower = LogFollower(
        partial(logged_events, run_id), after_seq=after_seq, page_size=REPLAY_PAGE
    )
    if await in_thread(_finished_or_reaped, run_id):
        async for stored in follower.backlog():
            yield stored
            if stored[1]["type"] == "done":
                return
        yield await in_thread(_last_done, run_id)
        return
    async for item in follow(
        run_group(run_id),
        follower,
        live_event=_live_run_event,
        heartbeat_s=settings.SSE_HEARTBEAT_S if heartbeat_s is None else heartbeat_s,
    ):
        if item is None and await in_thread(_finished_or_reaped, run_id):
            # Finished on this quiet tick (or failed just now, its worker gone): the rest of
            # its log, then its ``done``, which a run whose end could not be logged lacks.
            async for stored in follower.backlog():
                yield stored
                if stored[1]["type"] == "done":
                    return
            yield await in_thread(_last_done, run_id)
            return
        yield item
        if item is not None and item[1]["type"] == "done":
            return


def _live_run_event(message: dict[str, Any]) -> tuple[int, dict[str, Any]] | None:
    if message.get("type") != "run.event":
        return None
    return message["seq"], message["event"]


def _finished_or_reaped(run_id: uuid.UUID) -> bool:
    """Whether the run is over: finished, missing, or failed just now because its worker
    died (``agent.leases.reap_if_lost``)."""
    from agent.leases import reap_if_lost

    run = AgentRun.objects.filter(pk=run_id).only("status", "owner", "heartbeat_at").first()
    if run is None:
        return True
    return run.is_finished or reap_if_lost(run)


def _last_done(run_id: uuid.UUID) -> tuple[int, dict[str, Any]]:
    """The finished run's ``done`` event as stored; one made from the run when its log has
    none (a run that ended before its end could be logged)."""
    done = RunEvent.objects.filter(run_id=run_id, type="done").order_by("-seq").first()
    if done is not None:
        return done.seq, done.payload
    run = AgentRun.objects.filter(pk=run_id).only("status").first()
    last = RunEvent.objects.filter(run_id=run_id).order_by("-seq").values_list("seq", flat=True)
    seq = (last.first() or 0) + 1
    status = run.status if run is not None else "failed"
    return seq, {"type": "done", "run_id": str(run_id), "status": status}
