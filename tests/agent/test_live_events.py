"""Live events on both channel layers: streams and websockets that stay quiet longer than any
default timeout, a layer that is unreachable or fails mid-stream, re-attaching at the end of a
finished run, cancel answers, and what the Redis layer leaves behind."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from http import HTTPStatus
from typing import Any, cast

import pytest
import redis
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator

import agent.modes
import agent.services
from agent.events import follow_run, run_control_group
from agent.executor import run_start
from agent.models import AgentRun, RunEvent, RunStatus
from agent.services import run_create
from agent.tools.registry import Tool, ToolRegistry
from devassist.asgi import application
from devassist.channel_layer import RedisChannelLayer
from devassist.follow import GroupListener
from devassist.tokens import api_token_create
from tests.conftest import post_as, redis_reachable, require, use_redis

pytestmark = pytest.mark.django_db(transaction=True)

EMPTY = {"type": "object", "properties": {}, "additionalProperties": False}
#: Longer than redis-py's 5 s socket timeout and channels-redis's 5 s blocking read together.
QUIET_S = 12


@pytest.fixture
def waiting_run(scripted: Any, monkeypatch: pytest.MonkeyPatch, user: Any) -> Any:
    """Starts an agent run whose one tool call waits ``seconds`` in silence."""
    scripted.script(
        ["Thought: wait\nAction: tool:wait\nargs: {}", "Thought: ok\nAction: final: done"]
    )

    async def start(seconds: float) -> tuple[AgentRun, asyncio.Task[None]]:
        async def wait(args: dict[str, Any], context: Any) -> dict[str, Any]:
            # Ends when the run is cancelled (its task is), as execute_code does.
            await asyncio.sleep(seconds)
            return {"waited_s": seconds}

        registry = ToolRegistry(
            [Tool(name="wait", description="Waits.", parameters=EMPTY, handler=wait)]
        )
        monkeypatch.setattr(agent.modes, "default_registry", lambda: registry)
        monkeypatch.setattr(agent.services, "default_registry", lambda: registry)
        run = await run_create(user=user, message="wait a bit")
        return run, run_start(run)

    return start


async def collect(events: AsyncIterator[Any], *, timeout_s: float) -> list[Any]:
    async def drain() -> list[Any]:
        return [item async for item in events]

    return await asyncio.wait_for(drain(), timeout_s)


def types_of(items: list[Any]) -> list[str]:
    return ["ping" if item is None else item[1]["type"] for item in items]


async def watch(user: Any, trace_id: Any) -> WebsocketCommunicator:
    """A watch of the trace from its first event (steps are written as they happen, so some
    may be stored before the watch connects)."""
    _, token = await sync_to_async(api_token_create)(user=user, name="ws")
    communicator = WebsocketCommunicator(
        application,
        f"/api/traces/{trace_id}/watch?after_seq=0",
        headers=[(b"authorization", f"Bearer {token}".encode())],
    )
    ok, _ = await communicator.connect(timeout=10)
    assert ok
    hello = await communicator.receive_json_from(timeout=10)
    assert hello["event"] == "connected"
    return communicator


async def watch_to_the_end(communicator: WebsocketCommunicator, *, timeout_s: float) -> list[str]:
    events: list[str] = []
    async with asyncio.timeout(timeout_s):
        while not events or events[-1] != "trace_completed":
            message = await communicator.receive_json_from(timeout=timeout_s)
            events.append(message["event"])
    return events


async def test_a_stream_quiet_longer_than_every_timeout_keeps_its_heartbeats_and_ends(
    layer, waiting_run
):
    run, task = await waiting_run(QUIET_S)
    items = await collect(follow_run(run.id, after_seq=1, heartbeat_s=3), timeout_s=60)
    await task

    kinds = types_of(items)
    assert kinds[-1] == "done"
    assert kinds.count("step") == 1
    assert kinds.count("ping") >= 2  # about one per 3 s of the quiet tool call
    assert items[-1][1]["status"] == RunStatus.COMPLETED


async def test_a_websocket_quiet_longer_than_every_timeout_gets_every_step_and_the_end(
    layer, waiting_run, user
):
    run, task = await waiting_run(QUIET_S)
    communicator = await watch(user, run.trace_id)
    try:
        events = await watch_to_the_end(communicator, timeout_s=60)
    finally:
        await communicator.disconnect()
    await task

    assert events[-1] == "trace_completed"
    assert events.count("step_added") >= 5  # thought, action, result, thought, response


async def test_streams_and_websockets_read_the_log_when_the_layer_is_unreachable(
    settings, waiting_run, user
):
    use_redis(settings, "redis://127.0.0.1:1/0")  # nothing listens there
    run, task = await waiting_run(1)
    communicator = await watch(user, run.trace_id)
    try:
        items, events = await asyncio.gather(
            collect(follow_run(run.id, after_seq=1, heartbeat_s=3), timeout_s=60),
            watch_to_the_end(communicator, timeout_s=60),
        )
    finally:
        await communicator.disconnect()
    await task

    assert types_of(items)[-1] == "done"
    assert types_of(items).count("step") == 1
    assert events[-1] == "trace_completed"


async def test_a_stream_whose_layer_fails_mid_stream_goes_on_from_the_log(
    settings, waiting_run, monkeypatch
):
    require(redis_reachable(settings.TEST_REDIS_URL), "no Redis at TEST_REDIS_URL")
    use_redis(settings, settings.TEST_REDIS_URL)
    run, task = await waiting_run(2)
    items = []
    async for item in follow_run(run.id, after_seq=1, heartbeat_s=3):
        items.append(item)
        if len(items) == 1:  # the first step has arrived live: now Redis "goes away"

            async def unreachable(self: Any, channel: str) -> Any:
                raise redis.ConnectionError("Connection refused")

            monkeypatch.setattr(RedisChannelLayer, "receive", unreachable)
        if item is not None and item[1]["type"] == "done":
            break
    await task

    assert types_of(items)[-1] == "done"
    assert types_of(items).count("step") == 1


async def test_reattaching_at_or_after_a_finished_runs_last_event_answers_with_done(
    layer, waiting_run
):
    run, task = await waiting_run(0)
    await task
    last = await RunEvent.objects.filter(run_id=run.id).order_by("-seq").afirst()
    assert last is not None
    assert last.type == "done"

    for after in (last.seq, last.seq + 5):
        items = await collect(follow_run(run.id, after_seq=after, heartbeat_s=60), timeout_s=10)
        assert items == [(last.seq, last.payload)]
    before_last = await collect(
        follow_run(run.id, after_seq=last.seq - 1, heartbeat_s=60), timeout_s=10
    )
    assert before_last == [(last.seq, last.payload)]


async def test_a_finished_run_without_a_logged_done_still_ends_its_stream(layer, waiting_run):
    run, task = await waiting_run(0)
    await task
    await RunEvent.objects.filter(run_id=run.id, type="done").adelete()

    items = await collect(follow_run(run.id, after_seq=1, heartbeat_s=60), timeout_s=10)

    assert items[-1][1] == {"type": "done", "run_id": str(run.id), "status": "completed"}


async def test_a_cancel_answers_cancelled_once_the_run_has_stopped(layer, waiting_run, user):
    run, task = await waiting_run(30)
    for _ in range(500):
        if await RunEvent.objects.filter(run_id=run.id).acount() > 1 or task.done():
            break
        await asyncio.sleep(0.01)
    response = await post_as(user, f"/api/runs/{run.id}/cancel")
    await asyncio.wait_for(task, 10)

    assert response.status_code == HTTPStatus.OK
    assert response.json()["status"] == "cancelled"


async def test_a_cancel_of_a_run_on_another_worker_answers_cancelling(layer, user):
    run = await run_create(user=user, message="runs elsewhere")  # started by nobody here
    listener = GroupListener(run_control_group(run.id))  # as the run's worker listens
    await listener.join()

    response = await post_as(user, f"/api/runs/{run.id}/cancel")
    relayed = [await listener.receive(timeout_s=10)]
    await listener.leave()

    assert response.status_code == HTTPStatus.OK
    assert response.json()["status"] == "cancelling"
    assert relayed == [{"type": "run.cancel", "group": run_control_group(run.id)}]
    stored = await AgentRun.objects.aget(pk=run.id)
    assert stored.cancel_requested_at is not None


async def test_only_the_owner_may_cancel_a_run(user, other_user, staff_user, superuser):
    run = await run_create(user=user, message="mine")

    for someone, status in (
        (other_user, HTTPStatus.NOT_FOUND),
        (staff_user, HTTPStatus.FORBIDDEN),
        (superuser, HTTPStatus.FORBIDDEN),
    ):
        response = await post_as(someone, f"/api/runs/{run.id}/cancel")
        assert response.status_code == status, someone
        assert "error" in response.json()
    stored = await AgentRun.objects.aget(pk=run.id)
    assert stored.cancel_requested_at is None


async def test_the_redis_layer_leaves_nothing_without_an_expiry(settings, waiting_run, user):
    require(redis_reachable(settings.TEST_REDIS_URL), "no Redis at TEST_REDIS_URL")
    prefix = use_redis(settings, settings.TEST_REDIS_URL)
    client = redis.Redis.from_url(settings.TEST_REDIS_URL)

    def without_expiry() -> list[bytes]:
        return [key for key in client.scan_iter(f"{prefix}*") if cast(int, client.ttl(key)) < 0]

    run, task = await waiting_run(2)
    communicator = await watch(user, run.trace_id)
    seen: list[bytes] = []
    try:
        stream = follow_run(run.id, after_seq=1, heartbeat_s=3)
        async with asyncio.timeout(60):
            async for item in stream:
                # A stream and a websocket follow the run, its cancel watcher listens.
                seen += list(client.scan_iter(f"{prefix}*"))
                # channels-redis backs a message being received up in "<channel>$inflight"
                # for a moment, with no expiry, and deletes it with the next receive: only
                # what is left once the run is over counts.
                assert [key for key in without_expiry() if not key.endswith(b"$inflight")] == []
                if item is not None and item[1]["type"] == "done":
                    break
        await watch_to_the_end(communicator, timeout_s=60)
    finally:
        await communicator.disconnect()
    await task

    assert seen, "the run used the layer"
    assert without_expiry() == []
