from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

import httpx
import pytest
from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer
from channels.testing import WebsocketCommunicator
from django.db import connection

import traces.selectors
from devassist.asgi import application
from devassist.follow import broadcast
from devassist.tokens import api_token_create
from tests.conftest import use_redis
from tests.servers import daphne_server
from tests.traces.factories import step
from traces.models import Trace
from traces.selectors import trace_events_after
from traces.store import OrmTraceStore, StepCreate, get_trace_store, group_name


def orm_store() -> OrmTraceStore:
    store = get_trace_store()
    assert isinstance(store, OrmTraceStore)
    return store


pytestmark = pytest.mark.django_db(transaction=True)


async def token_for(user: Any) -> str:
    _, raw = await sync_to_async(api_token_create)(user=user, name="ws")
    return raw


def watch(trace_id: Any, token: str | None, query: str = "", **extra: Any) -> WebsocketCommunicator:
    headers = [(b"authorization", f"Bearer {token}".encode())] if token else []
    headers += extra.get("headers", [])
    return WebsocketCommunicator(
        application, f"/api/traces/{trace_id}/watch{query}", headers=headers
    )


async def connected(communicator: WebsocketCommunicator) -> dict[str, Any]:
    ok, _ = await communicator.connect()
    assert ok
    hello = await communicator.receive_json_from()
    assert hello["event"] == "connected"
    return hello


async def live_watch(
    store: OrmTraceStore, user: Any, task: str
) -> tuple[Trace, WebsocketCommunicator, StepCreate]:
    """A trace with a root step, and a watcher of it that heard the root's step_added: it is
    past its first read of the log, following the broadcasts."""
    trace = await store.create_trace(user=user, task=task)
    communicator = watch(trace.id, await token_for(user))
    await connected(communicator)
    root = step("goal")
    await store.add_step(trace.id, root)
    heard = await communicator.receive_json_from(timeout=10)
    assert (heard["event"], heard["seq"]) == ("step_added", 1)
    return trace, communicator, root


async def expect_close(communicator: WebsocketCommunicator, code: int) -> None:
    ok, _ = await communicator.connect()
    assert ok  # accepted only to deliver the close code
    message = await communicator.receive_output()
    assert message == {"type": "websocket.close", "code": code}
    await communicator.wait()


async def test_anonymous_watchers_are_closed_with_4401(user):
    trace = await orm_store().create_trace(user=user, task="t")
    await expect_close(watch(trace.id, None), 4401)
    await expect_close(watch(trace.id, "da_wrong-token"), 4401)


async def test_foreign_missing_and_malformed_traces_are_closed_with_4404(user, other_user):
    store = orm_store()
    theirs = await store.create_trace(user=other_user, task="theirs")
    token = await token_for(user)
    await expect_close(watch(theirs.id, token), 4404)
    await expect_close(watch(uuid.uuid4(), token), 4404)
    await expect_close(watch("not-a-uuid", token), 4404)
    await expect_close(watch(theirs.id, await token_for(other_user), "?after_seq=x"), 4400)


async def test_staff_can_watch_any_trace(user, staff_user):
    trace = await orm_store().create_trace(user=user, task="t")
    communicator = watch(trace.id, await token_for(staff_user))
    hello = await connected(communicator)
    assert hello["trace"]["trace_id"] == str(trace.id)
    await communicator.disconnect()


async def test_live_events_arrive_in_order(layer, user):
    store = orm_store()
    trace = await store.create_trace(user=user, task="live")
    communicator = watch(trace.id, await token_for(user))
    hello = await connected(communicator)
    assert hello["last_seq"] == 0
    assert hello["seq"] == 0
    assert hello["trace"]["status"] == "running"

    root = step("goal", status="running")
    await store.add_steps(trace.id, [root, step("thought", parent=root)])
    await store.update_step(trace.id, root.id, {"status": "completed"})
    await store.complete_trace(trace.id)

    received = [await communicator.receive_json_from() for _ in range(4)]
    assert [(e["event"], e["seq"]) for e in received] == [
        ("step_added", 1),
        ("step_added", 2),
        ("step_updated", 3),
        ("trace_completed", 4),
    ]
    assert received[0]["step"]["step_id"] == str(root.id)
    assert received[2]["step_id"] == str(root.id)
    assert received[2]["updates"]["status"] == "completed"
    assert received[3]["trace"]["status"] == "completed"
    assert await communicator.receive_nothing()
    await communicator.disconnect()


async def test_a_write_of_many_steps_is_one_broadcast_that_watchers_hear_whole(layer, user):
    """A batch of OTLP spans is one write of hundreds of steps: the channel layer carries it
    as one message (one per event made the batch's request wait for every one of them), and
    each watcher gets every step_added from it, in order, without reading the log."""
    store = orm_store()
    trace, communicator, root = await live_watch(store, user, "burst")
    sent: list[dict[str, Any]] = []
    reads: list[int] = []
    real_send = get_channel_layer().group_send
    real_read = traces.selectors.trace_events_after

    async def counted_send(group: str, message: dict[str, Any]) -> None:
        sent.append(message)
        await real_send(group, message)

    def counted_read(**kwargs: Any) -> list[dict[str, Any]]:
        reads.append(kwargs["after_seq"])
        return real_read(**kwargs)

    steps = [step("action", parent=root, name=f"tool {i}") for i in range(300)]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(get_channel_layer(), "group_send", counted_send)
        patch.setattr(traces.selectors, "trace_events_after", counted_read)
        await store.add_steps(trace.id, steps)
        received = [await communicator.receive_json_from(timeout=10) for _ in steps]
    assert len(sent) == 1
    assert [(e["event"], e["seq"]) for e in received] == [
        ("step_added", seq) for seq in range(2, 302)
    ]
    assert [e["step"]["name"] for e in received] == [f"tool {i}" for i in range(300)]
    assert received[-1]["totals"]["total_steps"] == 301
    assert reads == []
    assert await communicator.receive_nothing()
    await communicator.disconnect()


async def test_after_seq_replays_the_missed_events_then_goes_live(layer, user):
    store = orm_store()
    trace = await store.create_trace(user=user, task="replay")
    await store.add_steps(trace.id, [step("goal"), step("goal"), step("goal")])

    communicator = watch(trace.id, await token_for(user), "?after_seq=1")
    hello = await connected(communicator)
    assert hello["last_seq"] == 3
    replayed = [await communicator.receive_json_from() for _ in range(2)]
    assert [e["seq"] for e in replayed] == [2, 3]

    await store.add_step(trace.id, step("goal"))
    live = await communicator.receive_json_from()
    assert live["seq"] == 4
    assert await communicator.receive_nothing()
    await communicator.disconnect()


async def test_gaps_are_filled_from_the_log_and_duplicates_dropped(layer, user):
    """Writers can race, so a broadcast may arrive before an earlier committed event's."""
    store = orm_store()
    trace = await store.create_trace(user=user, task="race")
    communicator = watch(trace.id, await token_for(user))
    await connected(communicator)

    # Two steps committed whose broadcast is lost (or late) ...
    async def lost(group: str, message: dict[str, Any]) -> None:
        pass

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("devassist.follow.broadcast", lost)
        await store.add_steps(trace.id, [step("goal"), step("goal")])
    # ... then a third whose broadcast arrives first.
    await store.add_step(trace.id, step("goal"))
    received = [await communicator.receive_json_from() for _ in range(3)]
    assert [e["seq"] for e in received] == [1, 2, 3]

    # The late broadcast of seq 2 is a duplicate now.
    late = (await sync_to_async(trace_events_after)(trace_id=trace.id, after_seq=1, limit=1))[0]
    await broadcast(group_name(trace.id), {"type": "trace.event", "event": late})
    assert await communicator.receive_nothing()
    await communicator.disconnect()


async def test_steps_whose_broadcast_was_lost_arrive_after_a_quiet_period(layer, user, settings):
    """Nothing else happens after them: the follower reads the record when the trace has
    been quiet for a heartbeat, and each step comes as its step_added."""
    settings.SSE_HEARTBEAT_S = 1.0
    store = orm_store()
    trace, communicator, root = await live_watch(store, user, "quiet")

    async def lost(group: str, message: dict[str, Any]) -> None:
        pass

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("devassist.follow.broadcast", lost)
        await store.add_steps(
            trace.id, [step("thought", parent=root, name="unheard"), step("action", parent=root)]
        )
    started = time.monotonic()
    received = [await communicator.receive_json_from(timeout=10) for _ in range(2)]
    assert time.monotonic() - started >= 0.5  # read on the quiet period, not heard
    assert [(e["event"], e["seq"]) for e in received] == [("step_added", 2), ("step_added", 3)]
    assert received[0]["step"]["name"] == "unheard"
    assert received[0]["totals"]["total_steps"] == 3
    await communicator.disconnect()


async def test_session_cookie_authenticates_the_watch(user, client):
    await sync_to_async(client.force_login)(user)
    trace = await orm_store().create_trace(user=user, task="cookie")
    cookie = f"sessionid={client.cookies['sessionid'].value}".encode()
    communicator = watch(
        trace.id, None, headers=[(b"cookie", cookie), (b"origin", b"http://localhost")]
    )
    hello = await connected(communicator)
    assert hello["trace"]["trace_id"] == str(trace.id)
    await communicator.disconnect()


async def test_foreign_origin_is_refused(user):
    trace = await orm_store().create_trace(user=user, task="csrf")
    communicator = watch(
        trace.id, await token_for(user), headers=[(b"origin", b"http://evil.example")]
    )
    ok, _ = await communicator.connect()
    assert not ok


async def test_redis_layer_carries_events_between_two_application_instances(user, settings):
    """The watcher runs here; the writer is a separate daphne process. Both use Redis."""
    prefix = use_redis(settings, settings.TEST_REDIS_URL)
    token = await token_for(user)
    trace = await orm_store().create_trace(user=user, task="two processes")
    db = connection.settings_dict
    database_url = (
        f"postgres://{db['USER']}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"
    )
    env = {
        "DATABASE_URL": database_url,
        "REDIS_URL": settings.TEST_REDIS_URL,
        "CHANNELS_PREFIX": prefix,
        "SECRET_KEY": "test-secret",
        "LOG_LEVEL": "WARNING",
    }
    with daphne_server(env) as base_url:
        communicator = watch(trace.id, token)
        await connected(communicator)
        async with httpx.AsyncClient(
            base_url=base_url, headers={"Authorization": f"Bearer {token}"}
        ) as http:
            response = await http.post(
                f"/api/traces/{trace.id}/steps",
                json=[{"step_type": "goal", "name": "from the other process"}],
            )
            assert response.status_code == 201, response.text
            assert (await http.post(f"/api/traces/{trace.id}/complete", json={})).status_code == 200
        added = await communicator.receive_json_from(timeout=10)
        done = await communicator.receive_json_from(timeout=10)
        assert (added["event"], added["seq"], added["step"]["name"]) == (
            "step_added",
            1,
            "from the other process",
        )
        assert (done["event"], done["seq"]) == ("trace_completed", 2)
        await communicator.disconnect()
    await asyncio.sleep(0)
