"""Run leases: a run whose worker is gone is failed with ``worker_lost`` (its trace, its steps,
its event log), by any worker's heartbeat or at once when someone re-attaches or cancels; a
run whose worker is alive is left alone."""

from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta
from http import HTTPStatus
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.utils import timezone

from agent.events import follow_run
from agent.leases import (
    CANCELLED_LOST_MESSAGE,
    WORKER_LOST,
    WORKER_LOST_MESSAGE,
    LeaseKeeper,
    reap_lost,
    renew,
    worker_id,
)
from agent.models import AgentRun, RunEvent, RunStatus
from agent.services import run_create
from tests.conftest import post_as, token_client
from traces.models import Step, StepStatus, Trace, TraceStatus

pytestmark = pytest.mark.django_db(transaction=True)


async def lost_run(user: Any, *, ago_s: float = 600, heartbeat: bool = True) -> AgentRun:
    """A running run (with its trace and goal step) of a worker that stopped ``ago_s`` ago."""
    run = await run_create(user=user, message="left behind")
    then = timezone.now() - timedelta(seconds=ago_s)
    await AgentRun.objects.filter(pk=run.id).aupdate(
        owner="gone-host:1:dead", heartbeat_at=then if heartbeat else None, created_at=then
    )
    return await AgentRun.objects.aget(pk=run.id)


async def log_of(run: AgentRun) -> list[dict[str, Any]]:
    return [e.payload async for e in RunEvent.objects.filter(run_id=run.id).order_by("seq")]


async def test_a_run_whose_worker_is_gone_fails_with_worker_lost(user):
    run = await lost_run(user)

    reaped = await sync_to_async(reap_lost)()

    assert reaped == [run.id]
    stored = await AgentRun.objects.aget(pk=run.id)
    assert (stored.status, stored.error_code) == (RunStatus.FAILED, WORKER_LOST)
    assert stored.finished_at is not None
    assert run.trace_id is not None
    trace = await Trace.objects.aget(pk=run.trace_id)
    assert trace.status == TraceStatus.FAILED
    goal = await Step.objects.aget(pk=run.id)
    assert (goal.status, goal.error) == (StepStatus.FAILED, WORKER_LOST_MESSAGE)
    detail = await sync_to_async(lambda: token_client(user).get(f"/api/runs/{run.id}").json())()
    assert (detail["error"], detail["error_code"]) == (WORKER_LOST_MESSAGE, WORKER_LOST)
    log = await log_of(run)
    assert [e["type"] for e in log] == ["meta", "error", "done"]
    assert log[1]["code"] == WORKER_LOST
    assert log[2] == {"type": "done", "run_id": str(run.id), "status": "failed"}
    assert await sync_to_async(reap_lost)() == []  # once


async def test_a_run_from_before_leases_counts_from_its_creation(user):
    run = await lost_run(user, heartbeat=False)

    assert await sync_to_async(reap_lost)() == [run.id]


async def test_a_run_whose_worker_beats_is_left_alone(user, settings):
    settings.RUN_LEASE_S = 30
    fresh = await run_create(user=user, message="alive")
    renewed = await lost_run(user, ago_s=600)

    beats = await sync_to_async(renew)([renewed.id])
    reaped = await sync_to_async(reap_lost)()

    assert reaped == []
    assert beats == [(renewed.id, RunStatus.RUNNING, False)]
    for run in (fresh, renewed):
        stored = await AgentRun.objects.aget(pk=run.id)
        assert stored.status == RunStatus.RUNNING
        assert stored.owner == worker_id()


async def test_reattaching_to_a_lost_run_fails_it_and_ends_at_once(user):
    run = await lost_run(user)

    async def drain() -> list[Any]:
        return [item async for item in follow_run(run.id, after_seq=1, heartbeat_s=60)]

    items = await asyncio.wait_for(drain(), 10)

    assert [event["type"] for _, event in items] == ["error", "done"]
    assert items[0][1]["code"] == WORKER_LOST


async def test_a_stream_that_is_already_open_ends_when_the_run_is_reaped(user):
    run = await run_create(user=user, message="its worker is about to die")

    async def drain() -> list[Any]:
        return [item async for item in follow_run(run.id, after_seq=1, heartbeat_s=0.5)]

    stream = asyncio.create_task(drain())
    await asyncio.sleep(0.2)
    then = timezone.now() - timedelta(minutes=10)
    await AgentRun.objects.filter(pk=run.id).aupdate(heartbeat_at=then, owner="gone:1:x")
    await sync_to_async(reap_lost)()  # another worker's heartbeat
    items = await asyncio.wait_for(stream, 10)

    assert [event["type"] for _, event in items if _ is not None][-2:] == ["error", "done"]


async def test_cancelling_a_lost_run_cancels_it_at_once(user):
    run = await lost_run(user)

    response = await post_as(user, f"/api/runs/{run.id}/cancel")

    assert response.status_code == HTTPStatus.OK
    assert response.json()["status"] == "cancelled"
    stored = await AgentRun.objects.aget(pk=run.id)
    assert stored.status == RunStatus.CANCELLED
    assert [e["type"] for e in await log_of(run)] == ["meta", "error", "done"]
    assert run.trace_id is not None
    trace = await Trace.objects.aget(pk=run.trace_id)
    assert trace.status == TraceStatus.CANCELLED
    # Its message is not the one derived from the status: the goal step holds it.
    goal = await Step.objects.aget(pk=run.id)
    assert (goal.status, goal.error) == (StepStatus.SKIPPED, CANCELLED_LOST_MESSAGE)
    assert response.json()["error"] == CANCELLED_LOST_MESSAGE


async def test_a_heartbeat_stops_a_local_run_that_was_cancelled_or_ended_elsewhere(user):
    cancelled = await run_create(user=user, message="cancelled while the relay was down")
    await AgentRun.objects.filter(pk=cancelled.id).aupdate(cancel_requested_at=timezone.now())
    ended = await run_create(user=user, message="failed by another worker")
    await AgentRun.objects.filter(pk=ended.id).aupdate(status=RunStatus.FAILED)
    running = await run_create(user=user, message="goes on")
    stopped: list[uuid.UUID] = []
    keeper = LeaseKeeper(
        local_runs=lambda: [cancelled.id, ended.id, running.id], stop=stopped.append
    )

    await sync_to_async(keeper.beat)()

    assert sorted(stopped) == sorted([cancelled.id, ended.id])


async def test_the_keeper_thread_fails_lost_runs_on_its_own(user, settings):
    settings.RUN_LEASE_KEEPER = True
    settings.RUN_HEARTBEAT_S = 0.1
    settings.RUN_LEASE_S = 0.5
    run = await run_create(user=user, message="nobody holds this one")
    await AgentRun.objects.filter(pk=run.id).aupdate(owner="gone:1:x")
    keeper = LeaseKeeper(local_runs=list, stop=lambda run_id: None)
    keeper.ensure_started()

    for _ in range(200):
        stored = await AgentRun.objects.aget(pk=run.id)
        if stored.is_finished:
            break
        await asyncio.sleep(0.05)

    assert (stored.status, stored.error_code) == (RunStatus.FAILED, WORKER_LOST)
