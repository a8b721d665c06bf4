"""Run leases: every queued or running run is held by the worker process that executes it.

The worker renews the leases of its runs every ``settings.RUN_HEARTBEAT_S``; a run whose lease
is older than ``settings.RUN_LEASE_S`` has lost its worker (killed, crashed, restarted), and
any worker fails it with ``worker_lost``: its trace completes as failed, its event log gets
``error`` and ``done``, so every stream that follows it ends, and its sandbox container
(labelled with the run's id) is removed. Each worker looks for such runs on every heartbeat
(``LeaseKeeper``); a re-attach or a cancel of one does not wait for that (``reap_if_lost``).

The keeper is a daemon thread rather than a task of the server's event loop: it keeps beating
while the loop is busy, and it runs in a worker that has no request to serve.
"""

from __future__ import annotations

import os
import socket
import threading
import uuid
from collections.abc import Callable, Iterable
from datetime import datetime, timedelta
from functools import lru_cache

import structlog
from asgiref.sync import async_to_sync
from django.conf import settings
from django.db import connection, transaction
from django.db.models import Max, Q
from django.utils import timezone

from agent.events import run_group
from agent.models import LIVE_RUN_STATUSES, AgentRun, RunEvent, RunStatus
from devassist.follow import broadcast
from sandbox.exceptions import SandboxUnavailable
from sandbox.services import run_containers_remove
from traces.models import Step, StepStatus, TraceStatus
from traces.store import get_trace_store

logger = structlog.get_logger(__name__)

WORKER_LOST = "worker_lost"
WORKER_LOST_MESSAGE = (
    "The worker running this run stopped before it finished (it was killed or restarted)."
)
CANCELLED_LOST_MESSAGE = "Cancelled (the worker running it had stopped)."


@lru_cache(maxsize=4)
def _worker_id(pid: int) -> str:
    return f"{socket.gethostname()}:{pid}:{uuid.uuid4().hex[:8]}"


def worker_id() -> str:
    """This process's name as a run's owner: host, pid and a random part (a pid is reused)."""
    return _worker_id(os.getpid())


def _stale_cutoff(now: datetime) -> datetime:
    return now - timedelta(seconds=settings.RUN_LEASE_S)


def _lost(now: datetime) -> Q:
    """Live runs whose lease ran out (a run from before leases counts from its creation)."""
    cutoff = _stale_cutoff(now)
    return Q(status__in=LIVE_RUN_STATUSES) & (
        Q(heartbeat_at__lt=cutoff) | Q(heartbeat_at__isnull=True, created_at__lt=cutoff)
    )


def is_lost(run: AgentRun, *, now: datetime | None = None) -> bool:
    """Whether ``run`` (with ``status``, ``owner``, ``heartbeat_at``, ``created_at``) is live
    and its lease ran out."""
    if run.is_finished:
        return False
    beat = run.heartbeat_at or run.created_at
    return beat is not None and beat < _stale_cutoff(now or timezone.now())


def renew(run_ids: Iterable[uuid.UUID]) -> list[tuple[uuid.UUID, str, bool]]:
    """Renew the leases of this worker's runs ``run_ids``; returns each one's ``(id, status,
    cancel requested)`` as stored, so the worker can stop a run that was cancelled when the
    relay could not reach it, or that was failed while its worker was presumed dead."""
    ids = list(run_ids)
    if not ids:
        return []
    AgentRun.objects.filter(pk__in=ids, status__in=LIVE_RUN_STATUSES).update(
        owner=worker_id(), heartbeat_at=timezone.now()
    )
    return [
        (run_id, status, cancel_at is not None)
        for run_id, status, cancel_at in AgentRun.objects.filter(pk__in=ids).values_list(
            "id", "status", "cancel_requested_at"
        )
    ]


def reap_lost(*, limit: int = 100) -> list[uuid.UUID]:
    """Fail every run whose worker is gone (at most ``limit`` per call); returns their ids."""
    now = timezone.now()
    candidates = list(
        AgentRun.objects.filter(_lost(now))
        .order_by("heartbeat_at")
        .values_list("id", flat=True)[:limit]
    )
    return [run_id for run_id in candidates if _finish_lost(run_id)]


def reap_if_lost(run: AgentRun) -> bool:
    """Fail ``run`` now if its worker is gone; True when the run is finished after this."""
    if not is_lost(run):
        return False
    return _finish_lost(run.id) or _finished(run.id)


def cancel_lost(run: AgentRun) -> bool:
    """Cancel ``run`` at once if its worker is gone (nobody is left to stop it); True when
    the run is finished after this."""
    if not is_lost(run):
        return False
    return _finish_lost(run.id, status=RunStatus.CANCELLED) or _finished(run.id)


def _finished(run_id: uuid.UUID) -> bool:
    return not AgentRun.objects.filter(pk=run_id, status__in=LIVE_RUN_STATUSES).exists()


def _finish_lost(run_id: uuid.UUID, *, status: str = RunStatus.FAILED) -> bool:
    """End the lost run as ``status``: the run row (only if it is still live and its lease
    still stale: a worker that renewed it in the meantime keeps it), its trace, its steps
    that were running, and ``error`` + ``done`` in its event log, in one transaction. False
    when another worker got there first or the run came back to life."""
    now = timezone.now()
    cancelled = status == RunStatus.CANCELLED
    error, code = (
        (CANCELLED_LOST_MESSAGE, "cancelled") if cancelled else (WORKER_LOST_MESSAGE, WORKER_LOST)
    )
    logged: list[RunEvent] = []
    with transaction.atomic():
        claimed = (
            AgentRun.objects.filter(_lost(now), pk=run_id)
            .select_for_update(skip_locked=True)
            .only("id", "trace_id")
            .first()
        )
        if claimed is None:
            return False
        AgentRun.objects.filter(pk=run_id).update(status=status, error_code=code, finished_at=now)
        last = RunEvent.objects.filter(run_id=run_id).aggregate(last=Max("seq"))["last"] or 0
        logged = RunEvent.objects.bulk_create(
            [
                RunEvent(
                    run_id=run_id,
                    seq=last + 1,
                    type="error",
                    payload={"type": "error", "code": code, "message": error},
                ),
                RunEvent(
                    run_id=run_id,
                    seq=last + 2,
                    type="done",
                    payload={"type": "done", "run_id": str(run_id), "status": status},
                ),
            ]
        )
        if claimed.trace_id is not None:
            # The trace store broadcasts the trace's events once this commits.
            _close_trace(claimed.trace_id, goal_id=run_id, error=error, cancelled=cancelled)
    logger.warning("agent_run_worker_lost", run_id=str(run_id), status=status)
    _remove_sandbox(run_id)
    try:
        async_to_sync(_announce)(run_id, logged)
    except Exception:
        # Logged: followers read it on their next quiet tick all the same.
        logger.warning("agent_run_worker_lost_broadcast_failed", run_id=str(run_id), exc_info=True)
    return True


def _remove_sandbox(run_id: uuid.UUID) -> None:
    """Remove the lost run's sandbox container (``SANDBOX_STATE=run``): its worker is gone,
    so nobody else would before it expires. Logged, never raised: without a Docker engine
    there is nothing to remove."""
    try:
        run_containers_remove(owner=str(run_id))
    except SandboxUnavailable as exc:
        logger.info("agent_run_sandbox_not_removed", run_id=str(run_id), error=str(exc))
    except Exception:
        logger.warning("agent_run_sandbox_not_removed", run_id=str(run_id), exc_info=True)


async def _announce(run_id: uuid.UUID, logged: list[RunEvent]) -> None:
    """Broadcast the run events that ending a lost run logged."""
    for row in logged:
        await broadcast(
            run_group(run_id), {"type": "run.event", "seq": row.seq, "event": row.payload}
        )


def _close_trace(trace_id: uuid.UUID, *, goal_id: uuid.UUID, error: str, cancelled: bool) -> None:
    """Fail (or cancel) the trace and the steps that were still running, and give the goal
    step ``goal_id`` the run's error (``agent.selectors.run_error`` reads it there, a
    cancellation's too: its message says the worker was gone); a trace that is already closed
    is left as it is."""
    to_end = Step.objects.for_trace(trace_id).filter(Q(status=StepStatus.RUNNING) | Q(pk=goal_id))
    step_end = (
        {"status": StepStatus.SKIPPED}
        if cancelled
        else {"status": StepStatus.FAILED, "error": error}
    )
    updates: dict[uuid.UUID, dict[str, str]] = {
        step_id: dict(step_end) if status == StepStatus.RUNNING else {}
        for step_id, status in to_end.values_list("id", "status")
    }
    if goal_id in updates:
        updates[goal_id]["error"] = error
    try:
        get_trace_store().add_steps_sync(
            trace_id,
            [],
            updates,
            complete=TraceStatus.CANCELLED if cancelled else TraceStatus.FAILED,
        )
    except Exception:
        logger.warning("agent_run_trace_not_closed", trace_id=str(trace_id), exc_info=True)


class LeaseKeeper:
    """This process's heartbeat: renews the leases of the runs it executes and fails the
    runs of workers that are gone. ``local_runs`` lists this process's runs; ``stop(run_id)``
    is called (from the keeper's thread) for one that must stop: cancelled while the channel
    layer could not relay it, or ended by another worker."""

    def __init__(
        self,
        local_runs: Callable[[], Iterable[uuid.UUID]],
        stop: Callable[[uuid.UUID], None],
    ) -> None:
        self.local_runs = local_runs
        self.stop = stop
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def ensure_started(self) -> None:
        with self._lock:
            if self._thread is not None and self._thread.is_alive():
                return
            self._thread = threading.Thread(target=self._loop, name="run-leases", daemon=True)
            self._thread.start()

    def beat(self) -> None:
        """One heartbeat: renew, stop what must stop, reap the lost."""
        for run_id, status, cancel_requested in renew(self.local_runs()):
            if status not in LIVE_RUN_STATUSES or cancel_requested:
                self.stop(run_id)
        for run_id in reap_lost():
            logger.info("agent_run_reaped", run_id=str(run_id), by=worker_id())

    def _loop(self) -> None:
        while True:
            self._wake.wait(settings.RUN_HEARTBEAT_S)
            self._wake.clear()
            if not settings.RUN_LEASE_KEEPER:
                continue
            try:
                self.beat()
            except Exception:
                logger.exception("run_lease_beat_failed")
            finally:
                connection.close()  # the thread's own; back to the pool, if there is one
