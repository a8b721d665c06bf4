"""Several workers, verified: two real daphne processes on the test PostgreSQL database and the
test Redis. A run started on worker A is followed, watched and cancelled through worker B, with
its events arriving on B while it runs; a worker killed mid-run (``kill -9``) loses nothing: its
run fails with ``worker_lost`` through the other worker, the run's trace fails, every stream
that follows it ends, the lists still load, and the run's sandbox container is removed; a
worker killed while it stores a batch of OTLP spans keeps nothing of it, and the batch sent
again through the other worker makes the trace whole.

The model is ``FakeOpenAI`` with delays (a slow model: only the sandbox container's test needs
Docker); each worker pair has a ``CHANNELS_PREFIX`` of its own, so nothing else on the test
Redis reaches it. Every wait is bounded, and the servers are always stopped (the killed one
included).
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
import uuid
from collections.abc import Callable, Coroutine, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from http import HTTPStatus
from pathlib import Path
from typing import Any

import httpx
import pytest
from django.contrib.auth.models import User
from websockets.asyncio.client import connect

from devassist.tokens import api_token_create
from sandbox.backends.docker import LABEL_OWNER, LABEL_PID
from sandbox.engine import docker_client
from tests.agent.fake_openai import FakeOpenAI
from tests.browser import live_server_env
from tests.servers import daphne_server
from tests.settings import TEST_REDIS_URL
from tests.traces.otlp_clients import PROTOBUF, partial_success, protobuf_body, sdk_spans

#: The longest any one wait of these tests may take (a run's end, a stream's end, a status).
BOUND_S = 60.0
#: httpx: 10 s to connect and for plain requests; a stream's read waits 45 s (longer than any
#: quiet step or heartbeat of these tests, shorter than the whole test).
TIMEOUT = httpx.Timeout(10.0, read=45.0)
#: A slow chat answer: a word every 0.3 s for about a minute (cancelled or killed long before).
SLOW_ANSWER = {"chunks": [f"word{i} " for i in range(200)], "chunk_delay_s": 0.3}
#: One ReAct iteration that fails fast (no such tool): a ``step`` event without Docker.
NO_SUCH_TOOL = "Thought: try a tool\nAction: tool:nope\nargs: {}"
FINAL_WORDS = [f"answer{i} " for i in range(16)]
#: With ``RUN_LEASE_S=3`` and ``RUN_HEARTBEAT_S=1``, a killed worker's run fails within about
#: 4 s; this leaves room for a busy machine and none for a stream's 30 s heartbeat.
LOST_WITHIN_S = 20.0


@dataclass(frozen=True)
class Frame:
    """One thing a stream delivered, with the time it arrived (``time.monotonic``)."""

    at: float
    #: The SSE ``id`` or the websocket message's ``seq``; None for a heartbeat comment.
    seq: int | None
    #: The event (SSE ``data``, or the websocket message); None for a heartbeat comment.
    event: dict[str, Any] | None


@dataclass
class Received:
    """What one SSE stream or websocket delivered, in order of arrival."""

    frames: list[Frame] = field(default_factory=list)

    def events(self) -> list[dict[str, Any]]:
        return [frame.event for frame in self.frames if frame.event is not None]

    def types(self) -> list[str]:
        """The events' ``type`` (SSE) or ``event`` (websocket) names."""
        return [str(event.get("type") or event.get("event")) for event in self.events()]

    def first(self, name: str) -> Frame:
        for frame in self.frames:
            if frame.event is not None and name in (
                frame.event.get("type"),
                frame.event.get("event"),
            ):
                return frame
        raise AssertionError(f"no {name!r} among {self.types()}")

    def has(self, name: str) -> bool:
        return name in self.types()

    def pings(self) -> list[Frame]:
        return [frame for frame in self.frames if frame.event is None]


@dataclass(frozen=True)
class Workers:
    a: str
    b: str
    model: FakeOpenAI
    #: Worker A's process (to kill).
    process_a: subprocess.Popen[bytes]


@contextmanager
def two_workers(
    django_db_blocker: Any, model: FakeOpenAI, var_root: Path, **extra: str
) -> Iterator[Workers]:
    """Workers A and B under daphne: the test database, the test Redis under a prefix of
    their own, the same secret key and model, a var dir (embedded Chroma) each, ``extra`` in
    their environment. Both are stopped at the end, whatever happened to A."""
    prefix = f"devassist-test-workers-{uuid.uuid4().hex[:8]}"
    processes: list[subprocess.Popen[bytes]] = []
    with ExitStack() as stack:
        urls = []
        for name in ("a", "b"):
            (var_root / name).mkdir(parents=True, exist_ok=True)
            env = {
                **live_server_env(django_db_blocker, model, var_root / name),
                "REDIS_URL": TEST_REDIS_URL,
                "CHANNELS_PREFIX": prefix,
                **extra,
            }
            urls.append(stack.enter_context(daphne_server(env, started=processes.append)))
        yield Workers(a=urls[0], b=urls[1], model=model, process_a=processes[0])


@pytest.fixture(scope="module")
def workers(
    django_db_setup: Any, django_db_blocker: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Workers]:
    """One pair for the module's tests that kill nothing; heartbeats every 4 s, so a 12 s
    quiet step has some."""
    with (
        FakeOpenAI() as model,
        two_workers(
            django_db_blocker, model, tmp_path_factory.mktemp("workers"), SSE_HEARTBEAT_S="4"
        ) as pair,
    ):
        yield pair


@pytest.fixture
def token(user: User) -> str:
    return api_token_create(user=user, name="workers")[1]


def api(base_url: str, token: str) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        base_url=base_url, headers={"Authorization": f"Bearer {token}"}, timeout=TIMEOUT
    )


async def read_sse(response: httpx.Response, into: Received) -> None:
    """Collect an SSE response's frames into ``into`` as they arrive, up to ``done`` or the end
    of the body."""
    assert response.status_code == HTTPStatus.OK, (await response.aread())[:500]
    seq: int | None = None
    async for line in response.aiter_lines():
        if line.startswith(":"):
            into.frames.append(Frame(time.monotonic(), None, None))
        elif line.startswith("id: "):
            seq = int(line[4:])
        elif line.startswith("data: "):
            event = json.loads(line[6:])
            into.frames.append(Frame(time.monotonic(), seq, event))
            if event["type"] == "done":
                return


async def stream(
    client: httpx.AsyncClient, method: str, url: str, into: Received, **kw: Any
) -> None:
    """Open an SSE stream (a started run, or a re-attach) and collect it into ``into``."""
    async with client.stream(method, url, **kw) as response:
        await read_sse(response, into)


async def watch(base_url: str, token: str, trace_id: str, into: Received) -> None:
    """Watch the trace over the websocket (bearer token, everything from seq 0) and collect
    the messages into ``into`` up to ``trace_completed``."""
    url = f"ws{base_url.removeprefix('http')}/api/traces/{trace_id}/watch?after_seq=0"
    async with connect(
        url, additional_headers={"Authorization": f"Bearer {token}"}, open_timeout=10
    ) as socket:
        async for raw in socket:
            message = json.loads(raw)
            into.frames.append(Frame(time.monotonic(), message.get("seq"), message))
            if message["event"] == "trace_completed":
                return


async def until(condition: Callable[[], object], what: str, timeout_s: float = BOUND_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"no {what} within {timeout_s:.0f} s")
        await asyncio.sleep(0.05)


class Readers:
    """A test's stream and websocket readers, as tasks; whatever happens, none outlives the
    ``async with``."""

    def __init__(self) -> None:
        self.tasks: list[asyncio.Task[None]] = []

    async def __aenter__(self) -> Readers:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)

    def start(self, reader: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task = asyncio.create_task(reader)
        self.tasks.append(task)
        return task

    async def finish(self, timeout_s: float = BOUND_S) -> None:
        """Wait for every reader to end (each at its ``done`` / ``trace_completed``), for
        ``timeout_s`` at most."""
        await asyncio.wait_for(asyncio.gather(*self.tasks), timeout_s)

    async def run(
        self, client: httpx.AsyncClient, url: str, body: dict[str, Any], into: Received
    ) -> dict[str, Any]:
        """Start a streamed run with ``POST url``, its stream read into ``into``; returns its
        ``meta`` event."""
        task = self.start(stream(client, "POST", url, into, json=body))
        await until(lambda: into.frames or task.done(), "meta", timeout_s=30)
        if task.done():
            task.result()
        meta = into.frames[0].event
        assert meta is not None, into.frames
        assert meta["type"] == "meta", into.frames
        return meta


def assert_same_log(a: Received, b: Received) -> None:
    """Both streams delivered the run's events after ``meta`` once each, in order, alike."""
    after_meta = [(f.seq, f.event) for f in a.frames if f.event and f.event["type"] != "meta"]
    on_b = [(f.seq, f.event) for f in b.frames if f.event is not None]
    assert on_b == after_meta
    seqs = [seq for seq, _ in on_b]
    assert seqs == list(range(2, 2 + len(seqs))), seqs


def assert_watch_complete(watched: Received, status: str) -> dict[str, Any]:
    """The websocket delivered the trace's events from seq 1 once each and in order, with
    ``trace_completed`` last (and ``status``); returns that message's trace."""
    events = [e for e in watched.events() if e["event"] != "connected"]
    assert watched.types()[0] == "connected"
    seqs = [e["seq"] for e in events]
    assert seqs == list(range(1, len(seqs) + 1)), seqs
    assert events[-1]["event"] == "trace_completed", watched.types()
    assert events[-1]["trace"]["status"] == status
    trace: dict[str, Any] = events[-1]["trace"]
    return trace


# --- two workers ------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
async def test_run_on_a_is_followed_live_and_watched_through_b(workers: Workers, token: str):
    """A run on A is re-attached (SSE) and watched (websocket) through B: B gets each event
    while the run is still going, the same events as A's own stream, and both end."""
    workers.model.script(
        [
            {"content": NO_SUCH_TOOL, "delay_s": 2.0},
            {
                "chunks": ["Thought: done\nAction: final: ", *FINAL_WORDS],
                "delay_s": 2.0,
                "chunk_delay_s": 0.2,
            },
        ]
    )
    on_a, on_b, watched = Received(), Received(), Received()
    async with api(workers.a, token) as a, api(workers.b, token) as b, Readers() as readers:
        for client in (a, b):
            health = (await client.get("/healthz")).json()["checks"]["channel_layer"]
            assert health["ok"], health
            assert "Redis" in health["backend"], health
        meta = await readers.run(a, "/agent?stream=true", {"message": "go"}, on_a)
        run_id, trace_id = meta["run_id"], meta["trace_id"]
        readers.start(stream(b, "GET", f"/api/runs/{run_id}/events?after_seq=1", on_b))
        readers.start(watch(workers.b, token, trace_id, watched))
        await readers.finish()
        run = (await b.get(f"/api/runs/{run_id}")).json()

    assert on_a.events()[-1] == {"type": "done", "run_id": run_id, "status": "completed"}
    assert_same_log(on_a, on_b)
    assert on_b.types().count("step") == 1, on_b.types()
    assert on_b.has("delta"), on_b.types()
    assert (run["status"], run["answer"]) == ("completed", "".join(FINAL_WORDS).strip())
    trace = assert_watch_complete(watched, "completed")
    assert trace["trace_id"] == trace_id
    assert watched.has("step_added")
    # Live, not at the end: the step reached B (both ways) before A's stream had the answer's
    # first piece, which the model began to send 2 s after the step; and B had the first piece
    # of the answer while the model was still writing it (16 pieces, 0.2 s apart).
    first_delta_on_a = on_a.first("delta").at
    assert on_b.first("step").at < first_delta_on_a
    step_added = [f for f in watched.frames if f.event and f.event["event"] == "step_added"]
    assert any(f.event and f.event["step"]["step_type"] == "result" for f in step_added)
    result_added = next(
        f for f in step_added if f.event and f.event["step"]["step_type"] == "result"
    )
    assert result_added.at < first_delta_on_a
    assert on_b.first("done").at - on_b.first("delta").at > 1.0


@pytest.mark.django_db(transaction=True)
async def test_streams_through_b_outlive_a_quiet_step(workers: Workers, token: str):
    """A step that is quiet for 12 s (the model thinking) on Redis: the streams on A and B get
    heartbeats meanwhile, stay open, and get the rest and ``done``; the websocket on B stays
    open and gets ``trace_completed``."""
    workers.model.script(
        [
            {"content": NO_SUCH_TOOL, "delay_s": 1.0},
            {"content": "Thought: done\nAction: final: after the quiet", "delay_s": 12.0},
        ]
    )
    on_a, on_b, watched = Received(), Received(), Received()
    async with api(workers.a, token) as a, api(workers.b, token) as b, Readers() as readers:
        meta = await readers.run(a, "/agent?stream=true", {"message": "go"}, on_a)
        readers.start(stream(b, "GET", f"/api/runs/{meta['run_id']}/events?after_seq=1", on_b))
        readers.start(watch(workers.b, token, meta["trace_id"], watched))
        await readers.finish()

    for received in (on_a, on_b):
        assert received.events()[-1] == {
            "type": "done",
            "run_id": meta["run_id"],
            "status": "completed",
        }
        step, answer = received.first("step"), received.first("delta")
        text = "".join(e["content"] for e in received.events() if e["type"] == "delta")
        assert text == "after the quiet"
        assert answer.at - step.at > 10.0, "the quiet step was not quiet"
        quiet_pings = [p for p in received.pings() if step.at < p.at < answer.at]
        assert quiet_pings, "no heartbeat during the quiet step"
    assert_same_log(on_a, on_b)
    assert_watch_complete(watched, "completed")
    step_added = [f for f in watched.frames if f.event and f.event["event"] == "step_added"]
    assert step_added[-1].at - step_added[0].at > 10.0


@pytest.mark.django_db(transaction=True)
async def test_cancel_through_b_stops_the_run_and_its_model_call_on_a(workers: Workers, token: str):
    """Cancelled through B mid-answer, the run on A stops: its model stream is closed, its
    streams on A and B end with ``error`` + ``done`` (``cancelled``), its trace is cancelled,
    and the cancel answers with the state it caused."""
    workers.model.script([SLOW_ANSWER])
    disconnects = workers.model.disconnects
    on_a, on_b = Received(), Received()
    body = {"message": "tell me a long story", "use_agent": False, "use_rag": False}
    async with api(workers.a, token) as a, api(workers.b, token) as b, Readers() as readers:
        meta = await readers.run(a, "/chat?stream=true", body, on_a)
        run_id, trace_id = meta["run_id"], meta["trace_id"]
        readers.start(stream(b, "GET", f"/api/runs/{run_id}/events", on_b))
        await until(lambda: on_b.has("delta"), "delta on B", timeout_s=30)
        cancelled_at = time.monotonic()
        cancel = await b.post(f"/api/runs/{run_id}/cancel")
        await readers.finish()
        ended_in = time.monotonic() - cancelled_at
        run = (await b.get(f"/api/runs/{run_id}")).json()
        trace = (await b.get(f"/api/traces/{trace_id}")).json()
        await until(lambda: workers.model.disconnects > disconnects, "model stream closed", 10)

    assert ended_in < 30, "the run went on after the cancel"  # the answer would take 60 s
    for received in (on_a, on_b):
        *_, error, done = received.events()
        assert error == {"type": "error", "code": "cancelled", "message": "Cancelled."}, error
        assert done == {"type": "done", "run_id": run_id, "status": "cancelled"}
    assert on_b.types()[0] == "meta"
    assert [f.seq for f in on_b.frames if f.event] == [f.seq for f in on_a.frames if f.event]
    assert (run["status"], run["error_code"]) == ("cancelled", "")
    assert run["finished_at"] is not None
    assert trace["status"] == "cancelled"
    assert cancel.status_code == HTTPStatus.OK, cancel.text
    assert cancel.json()["status"] in {"cancelling", "cancelled"}, cancel.json()


def containers_of(pid: int) -> list[str]:
    """The names of the sandbox containers of the worker with this pid."""
    client = docker_client(timeout_s=10)
    try:
        listed = client.api.containers(all=True, filters={"label": [f"{LABEL_PID}={pid}"]})
    finally:
        client.close()
    return [entry["Names"][0] for entry in listed]


@pytest.mark.docker
@pytest.mark.django_db(transaction=True)
async def test_cancel_through_b_stops_the_sandbox_container_on_a(
    sandbox_image: str, workers: Workers, token: str
):
    """Cancelled through B while its code sleeps in a container on A, the run stops and A
    removes the container (A keeps no warm pool: its only container is the run's)."""
    sleep = json.dumps({"code": "import time\ntime.sleep(30)", "timeout_s": 30})
    workers.model.script([f"Thought: wait\nAction: tool:execute_code\nargs: {sleep}"])
    pid = workers.process_a.pid
    on_a = Received()
    body = {"message": "sleep", "tools": ["execute_code"]}
    async with api(workers.a, token) as a, api(workers.b, token) as b, Readers() as readers:
        meta = await readers.run(a, "/agent?stream=true", body, on_a)
        await until(lambda: containers_of(pid), "a sandbox container on A", timeout_s=30)
        cancelled_at = time.monotonic()
        cancel = await b.post(f"/api/runs/{meta['run_id']}/cancel")
        await readers.finish()
        await until(lambda: not containers_of(pid), "the container's removal", timeout_s=15)
        stopped_in = time.monotonic() - cancelled_at

    assert stopped_in < 20, "the code ran on after the cancel"  # it sleeps 30 s
    assert on_a.events()[-1] == {"type": "done", "run_id": meta["run_id"], "status": "cancelled"}
    assert cancel.status_code == HTTPStatus.OK, cancel.text
    assert cancel.json()["status"] in {"cancelling", "cancelled"}, cancel.json()


# --- a worker killed mid-run ------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
async def test_run_of_a_killed_worker_fails_with_worker_lost_through_b(
    django_db_blocker: Any, tmp_path: Path, token: str
):
    """``kill -9`` of worker A mid-answer: within the bound (with a 1 s heartbeat and a 3 s
    lease, a few seconds) B fails the run with ``worker_lost``, fails its trace, and ends every
    stream that followed it from B with ``error`` + ``done``; a re-attach and a cancel answer
    at once with the final state; the lists still load."""
    with (
        FakeOpenAI() as model,
        two_workers(
            django_db_blocker,
            model,
            tmp_path,
            RUN_HEARTBEAT_S="1",
            RUN_LEASE_S="3",
            # No quiet tick of a stream comes before the leases: it is they that end the run.
            SSE_HEARTBEAT_S="30",
        ) as pair,
    ):
        model.script([SLOW_ANSWER])
        on_a, on_b, watched = Received(), Received(), Received()
        body = {"message": "tell me a long story", "use_agent": False, "use_rag": False}
        async with api(pair.a, token) as a, api(pair.b, token) as b, Readers() as on_b_readers:
            async with Readers() as on_a_readers:
                meta = await on_a_readers.run(a, "/chat?stream=true", body, on_a)
                run_id, trace_id = meta["run_id"], meta["trace_id"]
                url = f"/api/runs/{run_id}/events?after_seq=1"
                on_b_readers.start(stream(b, "GET", url, on_b))
                on_b_readers.start(watch(pair.b, token, trace_id, watched))
                await until(lambda: on_b.has("delta"), "delta on B", timeout_s=30)
                await until(lambda: len(watched.frames) > 1, "the watch's replay", timeout_s=30)
                pair.process_a.kill()  # kill -9
                pair.process_a.wait(timeout=10)
                killed_at = time.monotonic()

            async def status() -> dict[str, Any]:
                response = await b.get(f"/api/runs/{run_id}")
                assert response.status_code == HTTPStatus.OK, response.text
                run: dict[str, Any] = response.json()
                return run

            run = await status()
            while run["status"] == "running" and time.monotonic() - killed_at < BOUND_S:
                await asyncio.sleep(0.5)
                run = await status()
            failed_in = time.monotonic() - killed_at
            assert (run["status"], run["error_code"]) == ("failed", "worker_lost"), run
            # Lease 3 s, renewed and checked every 1 s: a few seconds, far from any heartbeat.
            assert failed_in < LOST_WITHIN_S, f"failed {failed_in:.1f} s after the kill"
            await on_b_readers.finish(timeout_s=BOUND_S - failed_in)

            trace = (await b.get(f"/api/traces/{trace_id}")).json()
            reattached = Received()
            await asyncio.wait_for(stream(b, "GET", url, reattached), 10)
            cancel = await asyncio.wait_for(b.post(f"/api/runs/{run_id}/cancel"), 10)
            traces = await b.get("/api/traces")
            conversations = await b.get("/chat/conversations")

    assert run["finished_at"] is not None
    assert run["error"]
    assert trace["status"] == "failed"
    for received in (on_b, reattached):
        *_, error, done = received.events()
        assert error["type"] == "error", received.events()[-3:]
        assert error["code"] == "worker_lost", error
        assert done == {"type": "done", "run_id": run_id, "status": "failed"}
        assert received.has("delta")
        seqs = [frame.seq for frame in received.frames if frame.event]
        assert seqs == list(range(2, 2 + len(seqs))), seqs
    assert [f.seq for f in reattached.frames if f.event] == [f.seq for f in on_b.frames if f.event]
    assert_watch_complete(watched, "failed")
    if cancel.status_code == HTTPStatus.OK:
        assert cancel.json()["status"] == "failed", cancel.json()
    else:
        assert cancel.status_code == HTTPStatus.CONFLICT, cancel.text
        assert cancel.json()["error"]["details"]["status"] == "failed", cancel.json()
    assert traces.status_code == HTTPStatus.OK, traces.text
    listed = {t["trace_id"]: t["status"] for t in traces.json()["traces"]}
    assert listed[trace_id] == "failed"
    assert conversations.status_code == HTTPStatus.OK, conversations.text
    assert meta["conversation_id"] in {c["id"] for c in conversations.json()["conversations"]}


def containers_of_run(run_id: str) -> list[str]:
    """The names of the run's sandbox containers (labelled with its id)."""
    client = docker_client(timeout_s=10)
    try:
        listed = client.api.containers(all=True, filters={"label": [f"{LABEL_OWNER}={run_id}"]})
    finally:
        client.close()
    return [entry["Names"][0] for entry in listed]


@pytest.mark.docker
@pytest.mark.django_db(transaction=True)
async def test_the_sandbox_container_of_a_killed_workers_run_is_removed_through_b(
    sandbox_image: str, django_db_blocker: Any, tmp_path: Path, token: str
):
    """``kill -9`` of worker A while its run's code sleeps in the run's container (which keeps
    the state of the run's calls): B fails the run with ``worker_lost`` and removes that
    container, found by the run's id, long before it would expire or any reaper's round."""
    first = json.dumps({"code": "x = 1"})
    sleep = json.dumps({"code": "import time\ntime.sleep(60)", "timeout_s": 60})
    with (
        FakeOpenAI() as model,
        two_workers(
            django_db_blocker, model, tmp_path, RUN_HEARTBEAT_S="1", RUN_LEASE_S="3"
        ) as pair,
    ):
        model.script(
            [
                f"Thought: set\nAction: tool:execute_code\nargs: {first}",
                f"Thought: wait\nAction: tool:execute_code\nargs: {sleep}",
            ]
        )
        on_a = Received()
        body = {"message": "sleep", "tools": ["execute_code"]}
        async with api(pair.a, token) as a, api(pair.b, token) as b:
            async with Readers() as readers:
                meta = await readers.run(a, "/agent?stream=true", body, on_a)
                run_id = meta["run_id"]
                await until(lambda: on_a.has("step"), "the first call's step", timeout_s=60)
                await until(lambda: on_a.types().count("step_started") == 2, "the second call")
                assert len(containers_of_run(run_id)) == 1
                pair.process_a.kill()  # kill -9
                pair.process_a.wait(timeout=10)
                killed_at = time.monotonic()
            await until(lambda: not containers_of_run(run_id), "the container's removal")
            removed_in = time.monotonic() - killed_at
            # The container may go before the run is failed: a sandbox backend also removes
            # the containers of dead processes on this host when it starts and on its rounds.
            # B fails the run once A's lease is stale.
            while True:
                run = (await b.get(f"/api/runs/{run_id}")).json()
                if run["status"] != "running" or time.monotonic() - killed_at > LOST_WITHIN_S:
                    break
                await asyncio.sleep(0.1)

    assert removed_in < LOST_WITHIN_S, f"removed {removed_in:.1f} s after the kill"
    assert (run["status"], run["error_code"]) == ("failed", "worker_lost"), run


# --- OTLP spans through two workers ---------------------------------------------------------

#: Iterations of the agent whose spans a killed worker was storing, and tool calls in each:
#: 1 + 60 * 100 spans, enough that storing them takes a few seconds.
ITERATIONS, TOOLS = 60, 99
OTLP_SPANS = 1 + ITERATIONS * (1 + TOOLS)


def many_spans_agent(tracer: Any) -> None:
    """An OpenInference agent: a root over ``ITERATIONS`` model calls of 10 tokens, each
    with ``TOOLS`` tool calls under it."""
    root_attributes = {"openinference.span.kind": "AGENT", "input.value": "index the repo"}
    with tracer.start_as_current_span("agent", attributes=root_attributes):
        for iteration in range(ITERATIONS):
            llm = {"openinference.span.kind": "LLM", "llm.token_count.total": 10}
            with tracer.start_as_current_span(f"llm {iteration}", attributes=llm):
                for tool in range(TOOLS):
                    kind = {"openinference.span.kind": "TOOL"}
                    tracer.start_span(f"tool {iteration}.{tool}", attributes=kind).end()


def writing_steps(django_db_blocker: Any) -> bool:
    """Whether another connection holds the lock that writing steps takes, in a transaction
    not yet ended (a worker inside a store of OTLP spans). Run in a thread of its own: it
    closes that thread's connection."""
    from django.db import connection

    with django_db_blocker.unblock():
        try:
            with connection.cursor() as cursor:
                cursor.execute(
                    "SELECT count(*) FROM pg_locks"
                    " JOIN pg_class ON pg_class.oid = pg_locks.relation"
                    " WHERE relname = 'traces_step' AND mode = 'RowExclusiveLock'"
                    " AND pid <> pg_backend_pid()"
                )
                (count,) = cursor.fetchone()
        finally:
            connection.close()
    return bool(count)


@pytest.mark.django_db(transaction=True)
async def test_otlp_spans_a_killed_worker_was_storing_are_stored_whole_through_b(
    django_db_blocker: Any, tmp_path: Path, token: str
):
    """``kill -9`` of worker A while it writes a batch of an agent's spans: nothing of that
    batch is stored, the trace is not left locked, and the exporter's re-send of the batch
    through B (as a balancer sends it) and the rest of the trace make the whole tree, its
    rollups right; a websocket watching through B from before the kill sees every step once,
    in an unbroken sequence, up to ``trace_completed``."""
    spans = sdk_spans(many_spans_agent)
    assert len(spans) == OTLP_SPANS
    first, killed, last = spans[:500], spans[500:-1], spans[-1:]  # in the order they ended
    trace_id = str(uuid.UUID(int=spans[0].context.trace_id))
    headers = {"Content-Type": PROTOBUF}

    with FakeOpenAI() as model, two_workers(django_db_blocker, model, tmp_path) as pair:
        watched = Received()
        async with api(pair.a, token) as a, api(pair.b, token) as b, Readers() as readers:
            sent = await a.post("/v1/traces", content=protobuf_body(first), headers=headers)
            assert sent.status_code == HTTPStatus.OK, sent.content
            readers.start(watch(pair.b, token, trace_id, watched))
            await until(lambda: len(watched.frames) > len(first), "the watch's replay")

            storing = asyncio.create_task(
                a.post("/v1/traces", content=protobuf_body(killed), headers=headers)
            )
            deadline = time.monotonic() + BOUND_S
            while not await asyncio.to_thread(writing_steps, django_db_blocker):
                assert not storing.done(), "A answered before it was seen writing the steps"
                assert time.monotonic() < deadline, "A never wrote the steps"
                await asyncio.sleep(0.02)
            pair.process_a.kill()  # kill -9
            pair.process_a.wait(timeout=10)
            with pytest.raises(httpx.TransportError):
                await storing

            before = (await b.get(f"/api/traces/{trace_id}")).json()
            answers = [
                await b.post("/v1/traces", content=protobuf_body(batch), headers=headers)
                for batch in (killed, last)
            ]
            await readers.finish()
            trace = (await b.get(f"/api/traces/{trace_id}")).json()
            tree = (await b.get(f"/api/traces/{trace_id}/tree")).json()

    assert (before["status"], before["total_steps"]) == ("running", len(first))
    for answer in answers:
        assert answer.status_code == HTTPStatus.OK, answer.content
        assert partial_success(answer) == (0, "")
    assert (trace["status"], trace["total_steps"], trace["total_tokens"]) == (
        "completed",
        OTLP_SPANS,
        10 * ITERATIONS,
    )
    (root,) = tree["root_steps"]
    assert (root["name"], root["subtree_steps"], root["subtree_tokens"]) == (
        "agent",
        OTLP_SPANS,
        10 * ITERATIONS,
    )
    assert len(root["children"]) == ITERATIONS
    assert {len(llm["children"]) for llm in root["children"]} == {TOOLS}
    assert_watch_complete(watched, "completed")
    added = [e["step"]["name"] for e in watched.events() if e["event"] == "step_added"]
    assert sorted(added) == sorted(span.name for span in spans)
