"""Benchmark: the agent loop's own overhead per iteration, and a step's way to the wire.

Run from the repository root::

    .venv/bin/python benchmarks/agent_loop.py [--runs 10] [--iterations 100] [--redis [URL]]

Every run is the real thing from ``run_create`` on: ``run_start`` and ``_execute``, ``run_react``,
``RunRecorder`` writing the trace through the trace store, ``RunEvents`` writing ``RunEvent`` rows
and broadcasting on the channel layer (in-memory, or Redis with ``--redis`` / ``REDIS_URL``), and
one subscriber following the run's group through ``agent.api.sse_frames``. Only two things are
stand-ins: the tool registry holds one no-op tool, and the model answers from a script with no
delay, ``--iterations + 1`` calls of the tool, then a final answer.

1. Per iteration: the time between the ends of consecutive ``RunRecorder.iteration_finished``
   calls, ``--runs`` runs of ``--iterations`` intervals, with two models: ``ScriptedProvider``
   below, in-process (the loop's own overhead, the figure for the target), and the real
   ``OpenAIProvider`` against ``tests.agent.fake_openai.FakeOpenAI`` (a local HTTP server in a
   thread of this process, so its round trip and its share of the GIL are in that figure).
   Queries per iteration are counted; one ``sync_to_async`` ``SELECT 1`` is the baseline.
2. Step to wire: from ``RunEvents.emit("step", ...)`` being called (the step is in the trace by
   then) to the SSE frame of that step arriving at an HTTP client, through ``POST
   /agent?stream=true`` on a real daphne server (this file with ``--serve``, a subprocess). Both
   processes stamp with ``time.perf_counter()``, CLOCK_MONOTONIC on Linux, one clock for the
   whole machine. httpx's ``ASGITransport`` hands over a response body only once it is complete,
   so it cannot time this; the same path is also timed in-process up to the ASGI ``send`` of
   the frame, which shows what the server and TCP add.

Prints p50/p95, a breakdown of one in-process iteration, PASS/FAIL for the targets (iteration
p50 under 15 ms, step to wire p50 under 5 ms) and, with ``--profile``, a cProfile of one run.
The exit code is 0 whatever the verdicts.

PostgreSQL comes from ``BENCH_DATABASE_URL`` (default
``postgres://postgres@127.0.0.1:5432/devassist_agent_bench``); the database is created when
missing and migrated, and the runs of earlier benchmark runs are deleted first.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import functools
import inspect
import io
import itertools
import json
import os
import pstats
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from unittest import mock

if TYPE_CHECKING:
    from agent.llm.base import ChatMessage, LLMChunk, LLMResponse
    from agent.tools.registry import ToolContext, ToolRegistry
    from benchmarks.trace_tree import QueryCounter

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_DATABASE_URL = "postgres://postgres@127.0.0.1:5432/devassist_agent_bench"
BENCH_USERNAME = "agent-loop-benchmark"
PROVIDER_PATH = "benchmarks.agent_loop.ScriptedProvider"
EMITS_PATH = "/__bench__/emits"

#: ``_execute`` runs with ``LoopConfig()``, at most 10 iterations: 9 tool calls and the answer.
STREAM_TOOL_CALLS = 9
RUN_TIMEOUT_S = 60.0

TARGET_ITERATION_P50_MS = 15.0
TARGET_WIRE_P50_MS = 5.0

NOOP_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {"n": {"type": "integer"}},
    "additionalProperties": False,
}


# --- the scripted model and the no-op tool ------------------------------------------------------


def scripted_reply(index: int, tool_calls: int) -> str:
    """The reply to the model call of iteration ``index``: a call of ``noop`` (its argument
    changes every time, so the loop's repeated-call warning stays out of it) while ``index <=
    tool_calls``, then the final answer."""
    if index <= tool_calls:
        return f'Thought: call {index}.\nAction: tool:noop\nargs: {{"n": {index}}}'
    return f"Thought: done.\nAction: final: {tool_calls} no-op calls made."


class ScriptedProvider:
    """``LLMProvider`` answering ``scripted_reply`` at once, in word-sized deltas, with no I/O.

    The reply depends only on the conversation (the number of assistant messages in it), so
    one instance serves any number of runs at once. Configure it as ``settings.LLM =
    {"BACKEND": "benchmarks.agent_loop.ScriptedProvider", "OPTIONS": {"tool_calls": 9}}``.
    """

    def __init__(self, *, tool_calls: int = STREAM_TOOL_CALLS, model: str = "scripted") -> None:
        self.tool_calls = tool_calls
        self.model = model

    def describe(self) -> dict[str, Any]:
        return {"provider": "scripted", "model": self.model, "tool_calls": self.tool_calls}

    async def complete(
        self,
        messages: Sequence[ChatMessage],
        *,
        stop: Sequence[str] | None = None,
        cancel: threading.Event | None = None,
    ) -> LLMResponse:
        from agent.llm.base import LLMResponse, Usage

        index = 1 + sum(1 for message in messages if message["role"] == "assistant")
        content = scripted_reply(index, self.tool_calls)
        return LLMResponse(
            content=content,
            model=self.model,
            usage=Usage(prompt_tokens=100 * index, completion_tokens=len(content) // 4),
            finish_reason="stop",
        )

    async def stream(
        self,
        messages: Sequence[ChatMessage],
        *,
        stop: Sequence[str] | None = None,
        cancel: threading.Event | None = None,
    ) -> AsyncIterator[LLMChunk]:
        from agent.llm.base import LLMChunk

        response = await self.complete(messages, stop=stop, cancel=cancel)
        for piece in re.findall(r"\S+\s*", response.content):
            yield LLMChunk(delta=piece)
        yield LLMChunk(response=response)


def scripted_llm(tool_calls: int) -> dict[str, Any]:
    return {"BACKEND": PROVIDER_PATH, "OPTIONS": {"tool_calls": tool_calls}}


async def noop(args: dict[str, Any], context: ToolContext) -> dict[str, Any]:
    return {"ok": True}


def noop_registry() -> ToolRegistry:
    from agent.tools.registry import Tool, ToolRegistry

    return ToolRegistry(
        [Tool(name="noop", description="Does nothing.", parameters=NOOP_PARAMETERS, handler=noop)]
    )


# --- environment and database -------------------------------------------------------------------


def configure_environment(redis_url: str | None) -> str:
    """Point the settings at the benchmark database, a throwaway var dir and the chosen channel
    layer; returns the var dir so it can be removed at the end. The server subprocess inherits
    this environment."""
    sys.path.insert(0, str(REPO_ROOT))
    var_dir = tempfile.mkdtemp(prefix="devassist-agent-bench-var-")
    os.environ["DJANGO_SETTINGS_MODULE"] = "devassist.settings"
    os.environ["DATABASE_URL"] = os.environ.get("BENCH_DATABASE_URL", DEFAULT_DATABASE_URL)
    os.environ["DEVASSIST_VAR_DIR"] = var_dir
    os.environ["LOG_LEVEL"] = "WARNING"
    os.environ["SANDBOX_WARM_ON_START"] = "0"
    os.environ.pop("DEBUG", None)
    if redis_url:
        os.environ["REDIS_URL"] = redis_url
        os.environ["CHANNELS_PREFIX"] = "devassist-agent-bench"
    else:
        os.environ.pop("REDIS_URL", None)
    return var_dir


def prepare_user() -> tuple[Any, str]:
    """The benchmark user, without the runs, traces and tokens of earlier benchmark runs, and a
    fresh bearer token for it."""
    from django.contrib.auth.models import User
    from django.db import connection, transaction

    from agent.models import AgentRun, RunEvent
    from devassist.models import ApiToken
    from devassist.services import api_token_create
    from traces.models import Step, Trace, TraceEvent

    user, _ = User.objects.get_or_create(username=BENCH_USERNAME)
    runs = [str(pk) for pk in AgentRun.objects.filter(user=user).values_list("pk", flat=True)]
    traces = [str(pk) for pk in Trace.objects.filter(user=user).values_list("pk", flat=True)]
    with transaction.atomic(), connection.cursor() as cursor:
        # Plain DELETEs: the ORM's cascade would load every step first.
        for model, column, ids in (
            (RunEvent, "run_id", runs),
            (AgentRun, "id", runs),
            (TraceEvent, "trace_id", traces),
            (Step, "trace_id", traces),
            (Trace, "id", traces),
        ):
            cursor.execute(
                f"DELETE FROM {model._meta.db_table} WHERE {column} = ANY(%s::uuid[])", [ids]
            )
        ApiToken.objects.filter(user=user).delete()
    _, token = api_token_create(user=user, name="agent loop benchmark")
    return user, token


# --- instrumentation ----------------------------------------------------------------------------


class IterationClock:
    """Stamps the end of every ``RunRecorder.iteration_finished``, with the number of queries
    run so far, per run."""

    def __init__(self, counter: QueryCounter) -> None:
        self.counter = counter
        self.stamps: dict[uuid.UUID, list[tuple[float, int]]] = defaultdict(list)

    def wrap(self, original: Callable[..., Awaitable[None]]) -> Callable[..., Awaitable[None]]:
        @functools.wraps(original)
        async def iteration_finished(recorder: Any, iteration: Any) -> None:
            await original(recorder, iteration)
            self.stamps[recorder.run.id].append((time.perf_counter(), self.counter.count))

        return iteration_finished


class EmitClock:
    """Stamps the moment ``RunEvents.emit("step", ...)`` is called, by (run id, seq)."""

    def __init__(self) -> None:
        self.stamps: dict[tuple[str, int], float] = {}

    def wrap(self, original: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
        @functools.wraps(original)
        async def emit(events: Any, type_: str, **payload: Any) -> Any:
            called = time.perf_counter()
            event = await original(events, type_, **payload)
            if type_ == "step":
                self.stamps[(str(events.run_id), events.seq)] = called
            return event

        return emit

    def for_run(self, run_id: str) -> dict[int, float]:
        return {seq: t for (run, seq), t in self.stamps.items() if run == run_id}


def instrument(stack: contextlib.ExitStack, emit_clock: EmitClock) -> None:
    """The no-op registry wherever runs look tools up, and the step emit stamps."""
    import agent.runs
    from agent.events import RunEvents

    registry = noop_registry()
    stack.enter_context(mock.patch.object(agent.runs, "default_registry", return_value=registry))
    stack.enter_context(mock.patch.object(RunEvents, "emit", emit_clock.wrap(RunEvents.emit)))


def use_llm(config: dict[str, Any]) -> None:
    from django.conf import settings

    from agent.llm import get_llm

    settings.LLM = config
    get_llm.cache_clear()


class PartTimer:
    """Adds up the time spent in chosen functions (async or not), by part name."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)

    def patch(self, stack: contextlib.ExitStack, owner: Any, name: str, part: str) -> None:
        original = getattr(owner, name)
        timer = self

        if inspect.iscoroutinefunction(original):

            async def timed_async(*args: Any, **kwargs: Any) -> Any:
                started = time.perf_counter()
                try:
                    return await original(*args, **kwargs)
                finally:
                    timer.add(part, time.perf_counter() - started)

            wrapper: Callable[..., Any] = timed_async
        else:

            def timed_sync(*args: Any, **kwargs: Any) -> Any:
                started = time.perf_counter()
                try:
                    return original(*args, **kwargs)
                finally:
                    timer.add(part, time.perf_counter() - started)

            wrapper = timed_sync
        stack.enter_context(mock.patch.object(owner, name, wrapper))

    def add(self, part: str, seconds: float) -> None:
        self.seconds[part] += seconds
        self.calls[part] += 1


# --- measuring ----------------------------------------------------------------------------------


@dataclass
class Measurement:
    name: str
    seconds: list[float] = field(default_factory=list)
    queries: list[int] = field(default_factory=list)

    @property
    def p50_ms(self) -> float:
        return statistics.median(self.seconds) * 1000

    @property
    def p95_ms(self) -> float:
        if len(self.seconds) < 2:
            return self.seconds[0] * 1000
        return statistics.quantiles(self.seconds, n=20, method="inclusive")[18] * 1000

    @property
    def queries_label(self) -> str:
        if not self.queries:
            return "-"
        typical = statistics.median_low(self.queries)
        most = max(self.queries)
        return f"{typical}" if most == typical else f"{typical} (max {most})"


async def run_once(user: Any, *, tool_calls: int) -> uuid.UUID:
    """One run start to finish, followed by one SSE subscriber; checks that it completed and
    that the subscriber saw every step and ``done``."""
    from agent.api import sse_frames
    from agent.models import AgentRun
    from agent.runs import run_create, run_start

    run = await run_create(user=user, message=f"Call noop {tool_calls} times.", tools=["noop"])
    follower = asyncio.create_task(_read_types(sse_frames(run.id, 0)))
    await asyncio.wait_for(run_start(run), RUN_TIMEOUT_S)
    types = await asyncio.wait_for(follower, RUN_TIMEOUT_S)
    finished = await AgentRun.objects.aget(pk=run.id)
    if finished.status != "completed" or types.count("step") != tool_calls or types[-1] != "done":
        raise SystemExit(
            f"run {run.id} ended {finished.status} ({finished.error_code} {finished.error}); "
            f"the subscriber saw {types}"
        )
    return run.id


async def _read_types(frames: AsyncIterator[bytes]) -> list[str]:
    types = []
    async for chunk in frames:
        for line in chunk.splitlines():
            if line.startswith(b"data: "):
                types.append(json.loads(line[6:])["type"])
    return types


async def measure_loop(
    name: str,
    user: Any,
    clock: IterationClock,
    *,
    runs: int,
    iterations: int,
    before_run: Callable[[], None] | None = None,
) -> Measurement:
    """``runs`` timed runs (after one untimed) of ``iterations + 1`` tool calls each, under a
    loop cap that lets them all happen; one sample per pair of consecutive iterations."""
    import agent.runs
    from agent.loop import LoopConfig

    result = Measurement(name)
    config = functools.partial(LoopConfig, max_iterations=iterations + 2)
    with mock.patch.object(agent.runs, "LoopConfig", config):
        for index in range(runs + 1):
            if before_run is not None:
                before_run()
            run_id = await run_once(user, tool_calls=iterations + 1)
            stamps = clock.stamps.pop(run_id)
            if index == 0:
                continue  # warm-up
            for (before, before_queries), (after, after_queries) in itertools.pairwise(stamps):
                result.seconds.append(after - before)
                result.queries.append(after_queries - before_queries)
    return result


async def measure_thread_hop(samples: int) -> Measurement:
    """Baseline: one ``sync_to_async`` round trip running ``SELECT 1``, as every ORM call of an
    iteration makes one."""
    from asgiref.sync import sync_to_async
    from django.db import connection

    def select_one() -> None:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")

    result = Measurement("baseline: sync_to_async(SELECT 1)")
    for index in range(samples + 10):
        started = time.perf_counter()
        await sync_to_async(select_one)()
        if index >= 10:
            result.seconds.append(time.perf_counter() - started)
            result.queries.append(1)
    return result


async def iteration_parts(user: Any, clock: IterationClock, *, iterations: int) -> dict[str, float]:
    """Milliseconds per iteration spent in each part of one in-process run (its own run, so the
    timers stay out of the figures above)."""
    import agent.loop
    import agent.runs
    from agent.events import RunEvents
    from agent.loop import LoopConfig
    from agent.tools.registry import ToolRegistry
    from traces.store import OrmTraceStore

    timer = PartTimer()
    with contextlib.ExitStack() as stack:
        config = functools.partial(LoopConfig, max_iterations=iterations + 2)
        stack.enter_context(mock.patch.object(agent.runs, "LoopConfig", config))
        timer.patch(stack, agent.loop, "_call_model", "model call (stream)")
        timer.patch(stack, OrmTraceStore, "add_step", "trace store add_step")
        timer.patch(stack, OrmTraceStore, "add_steps_sync", "  of which in the DB thread")
        timer.patch(stack, OrmTraceStore, "update_step", "trace store update_step")
        timer.patch(stack, OrmTraceStore, "update_step_sync", "  of which in the DB thread ")
        timer.patch(stack, RunEvents, "_emit", "run event (RunEvent row + group_send)")
        timer.patch(stack, ToolRegistry, "call", "tool call (validate + handler)")
        run_id = await run_once(user, tool_calls=iterations + 1)
    stamps = clock.stamps.pop(run_id)
    whole = stamps[-1][0] - stamps[0][0]
    count = len(stamps) - 1
    # The parts are summed over every iteration, the interval over all but the first: scale.
    share = count / len(stamps)
    parts = {part: seconds * share * 1000 / count for part, seconds in timer.seconds.items()}
    top_level = sum(ms for part, ms in parts.items() if not part.startswith(" "))
    parts["everything else (parsing, bookkeeping, the event loop)"] = (
        whole * 1000 / count - top_level
    )
    parts["whole iteration (mean)"] = whole * 1000 / count
    return parts


async def profile_run(user: Any, *, iterations: int) -> str:
    """cProfile of one in-process run: the event loop's thread and asgiref's sync thread (where
    the ORM runs), each sorted by own time."""
    from asgiref.sync import SyncToAsync

    import agent.runs
    from agent.loop import LoopConfig

    loop_profile, db_profile = cProfile.Profile(), cProfile.Profile()
    config = functools.partial(LoopConfig, max_iterations=iterations + 2)
    with mock.patch.object(agent.runs, "LoopConfig", config):
        executor = SyncToAsync.single_thread_executor
        await asyncio.wrap_future(executor.submit(db_profile.enable))
        loop_profile.enable()
        await run_once(user, tool_calls=iterations + 1)
        loop_profile.disable()
        await asyncio.wrap_future(executor.submit(db_profile.disable))
    out = io.StringIO()
    for label, profile in (("event loop thread", loop_profile), ("ORM thread", db_profile)):
        out.write(f"\n--- {label} ---\n")
        pstats.Stats(profile, stream=out).sort_stats("tottime").print_stats(18)
    return out.getvalue()


# --- step to wire: in-process ASGI --------------------------------------------------------------


async def asgi_stream(app: Any, token: str, message: str) -> tuple[str, dict[int, float]]:
    """``POST /agent?stream=true`` straight into the ASGI app; returns the run id and, per step
    seq, the moment its frame went to ``send``."""
    body = json.dumps({"message": message, "tools": ["noop"]}).encode()
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/agent",
        "raw_path": b"/agent",
        "query_string": b"stream=true",
        "root_path": "",
        "headers": [
            (b"host", b"127.0.0.1"),
            (b"authorization", f"Bearer {token}".encode()),
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
        ],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 80),
    }
    finished = asyncio.Event()
    request_sent = False
    run_id = ""
    sent: dict[int, float] = {}

    async def receive() -> dict[str, Any]:
        nonlocal request_sent
        if not request_sent:
            request_sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        await finished.wait()
        return {"type": "http.disconnect"}

    async def send(event: dict[str, Any]) -> None:
        nonlocal run_id
        if event["type"] == "http.response.start" and event["status"] != 200:
            raise SystemExit(f"POST /agent?stream=true answered {event['status']}")
        if event["type"] != "http.response.body":
            return
        now = time.perf_counter()
        for seq, data in sse_frames_in(event.get("body", b"")):
            if data["type"] == "meta":
                run_id = data["run_id"]
            elif data["type"] == "step":
                sent[seq] = now
        if not event.get("more_body"):
            finished.set()

    try:
        await app(scope, receive, send)
    finally:
        finished.set()
    return run_id, sent


def sse_frames_in(chunk: bytes) -> Iterator[tuple[int, dict[str, Any]]]:
    for block in chunk.split(b"\n\n"):
        fields = dict(line.split(b": ", 1) for line in block.splitlines() if line and b": " in line)
        if b"id" in fields and b"data" in fields:
            yield int(fields[b"id"]), json.loads(fields[b"data"])


async def measure_asgi_send(token: str, emit_clock: EmitClock, *, runs: int) -> Measurement:
    from devassist.asgi import application

    result = Measurement("step -> ASGI send (in-process app)")
    for index in range(runs + 1):
        run_id, sent = await asgi_stream(application, token, "Stream the no-op calls.")
        emitted = emit_clock.for_run(run_id)
        if len(sent) != STREAM_TOOL_CALLS or set(sent) != set(emitted):
            raise SystemExit(f"run {run_id}: steps sent {sorted(sent)}, emitted {sorted(emitted)}")
        if index:
            result.seconds.extend(sent[seq] - emitted[seq] for seq in sent)
    return result


# --- step to wire: a real daphne server ---------------------------------------------------------


def serve(port: int) -> None:
    """The server side (``--serve PORT``): DevAssist's ASGI application under daphne on
    127.0.0.1, running the scripted model and the no-op tool, stamping step emits and answering
    ``GET /__bench__/emits?run=<id>`` with them (everything else goes to the application)."""
    sys.path.insert(0, str(REPO_ROOT))  # the environment comes from the parent process
    import django

    django.setup()
    from daphne.server import Server

    emit_clock = EmitClock()
    with contextlib.ExitStack() as stack:
        instrument(stack, emit_clock)
        use_llm(scripted_llm(STREAM_TOOL_CALLS))
        from devassist.asgi import application

        async def bench_application(scope: dict[str, Any], receive: Any, send: Any) -> None:
            if scope["type"] != "http" or scope["path"] != EMITS_PATH:
                await application(scope, receive, send)
                return
            query = dict(
                part.split("=", 1) for part in scope["query_string"].decode().split("&") if part
            )
            body = json.dumps(emit_clock.for_run(query.get("run", ""))).encode()
            await send(
                {
                    "type": "http.response.start",
                    "status": 200,
                    "headers": [(b"content-type", b"application/json")],
                }
            )
            await send({"type": "http.response.body", "body": body})

        Server(
            application=bench_application,
            endpoints=[f"tcp:port={port}:interface=127.0.0.1"],
            verbosity=0,
        ).run()


@contextlib.contextmanager
def daphne_server() -> Iterator[str]:
    """This file with ``--serve`` in a subprocess; yields its base URL once it answers."""
    import httpx

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
    base_url = f"http://127.0.0.1:{port}"
    with tempfile.TemporaryFile() as log:
        process = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), "--serve", str(port)],
            cwd=REPO_ROOT,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            deadline = time.monotonic() + 60
            while True:
                if process.poll() is not None or time.monotonic() > deadline:
                    log.seek(0)
                    raise SystemExit(f"the daphne server did not start:\n{log.read().decode()}")
                with contextlib.suppress(httpx.TransportError):
                    if httpx.get(f"{base_url}{EMITS_PATH}", timeout=2).status_code == 200:
                        break
                time.sleep(0.2)
            yield base_url
        finally:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


async def measure_wire(base_url: str, token: str, *, runs: int) -> Measurement:
    """``runs`` streamed runs (after one untimed) through the server: per step, the moment the
    client reads its ``data:`` line minus the moment the server called ``emit``."""
    import httpx

    result = Measurement("step -> SSE frame at the client (daphne)")
    headers = {"Authorization": f"Bearer {token}"}
    body = {"message": "Stream the no-op calls.", "tools": ["noop"]}
    async with httpx.AsyncClient(base_url=base_url, headers=headers, timeout=30) as client:
        for index in range(runs + 1):
            received: dict[int, float] = {}
            run_id, seq, last = "", 0, ""
            async with client.stream("POST", "/agent?stream=true", json=body) as response:
                response.raise_for_status()
                async for line in response.aiter_lines():
                    if line.startswith("id: "):
                        seq = int(line[4:])
                    elif line.startswith("data: "):
                        now = time.perf_counter()
                        event = json.loads(line[6:])
                        last = event["type"]
                        if last == "meta":
                            run_id = event["run_id"]
                        elif last == "step":
                            received[seq] = now
            emitted_raw = (await client.get(EMITS_PATH, params={"run": run_id})).json()
            emitted = {int(key): value for key, value in emitted_raw.items()}
            complete = len(received) == STREAM_TOOL_CALLS and set(received) == set(emitted)
            if last != "done" or not complete:
                raise SystemExit(
                    f"run {run_id}: stream ended on {last!r}, steps received {sorted(received)}, "
                    f"emitted {sorted(emitted)}"
                )
            if index:
                result.seconds.extend(received[s] - emitted[s] for s in received)
    return result


# --- the run ------------------------------------------------------------------------------------


def fake_openai_llm(base_url: str) -> dict[str, Any]:
    return {
        "BACKEND": "agent.llm.openai_provider.OpenAIProvider",
        "OPTIONS": {"base_url": base_url, "api_key": "bench", "model": "fake-model"},
    }


async def run(user: Any, token: str, counter: QueryCounter, args: argparse.Namespace) -> None:
    from agent.runs import RunRecorder
    from tests.agent.fake_openai import FakeOpenAI

    tool_calls = args.iterations + 1
    clock = IterationClock(counter)
    emit_clock = EmitClock()
    with contextlib.ExitStack() as stack:
        instrument(stack, emit_clock)
        stack.enter_context(
            mock.patch.object(
                RunRecorder,
                "iteration_finished",
                clock.wrap(RunRecorder.iteration_finished),
            )
        )
        baseline = await measure_thread_hop(200)

        use_llm(scripted_llm(tool_calls))
        scripted = await measure_loop(
            "iteration, in-process scripted model",
            user,
            clock,
            runs=args.runs,
            iterations=args.iterations,
        )
        with FakeOpenAI() as fake:
            use_llm(fake_openai_llm(fake.base_url))
            replies: list[str | dict[str, Any]] = [
                scripted_reply(index, tool_calls) for index in range(1, tool_calls + 2)
            ]
            over_http = await measure_loop(
                "iteration, OpenAIProvider -> FakeOpenAI (HTTP)",
                user,
                clock,
                runs=args.runs,
                iterations=args.iterations,
                before_run=lambda: fake.script(replies),
            )

        use_llm(scripted_llm(tool_calls))
        parts = await iteration_parts(user, clock, iterations=args.iterations)
        profile = await profile_run(user, iterations=args.iterations) if args.profile else ""

        use_llm(scripted_llm(STREAM_TOOL_CALLS))
        asgi = await measure_asgi_send(token, emit_clock, runs=args.stream_runs)
    with daphne_server() as base_url:
        wire = await measure_wire(base_url, token, runs=args.stream_runs)

    print_table([scripted, over_http, baseline, wire, asgi])
    print(
        f"\n{args.runs} timed runs x {args.iterations} iterations per loop measurement (one "
        "untimed run first); an iteration is one model call, a thought, an action and a result "
        "step, a step update, a RunEvent row and its broadcast to one SSE subscriber. "
        f"Step to wire: {args.stream_runs} streamed runs x {STREAM_TOOL_CALLS} steps."
    )
    print_parts(parts)
    print_verdicts(scripted, wire)
    if profile:
        print(f"\ncProfile of one in-process run ({tool_calls} iterations):{profile}")


def print_table(results: Sequence[Measurement]) -> None:
    print()
    header = f"{'measurement':<46}{'samples':>8}{'p50 ms':>9}{'p95 ms':>9}{'queries':>10}"
    print(header)
    print("-" * len(header))
    for m in results:
        print(
            f"{m.name:<46}{len(m.seconds):>8}{m.p50_ms:>9.2f}{m.p95_ms:>9.2f}{m.queries_label:>10}"
        )


def print_parts(parts: dict[str, float]) -> None:
    print("\none in-process iteration, part by part (mean ms per iteration, timers on):")
    for part, ms in parts.items():
        print(f"  {part:<58}{ms:>7.2f}")


def print_verdicts(iteration: Measurement, wire: Measurement) -> None:
    from benchmarks.trace_tree import verdict

    print("\ntargets:")
    verdict(
        f"loop overhead per iteration p50 < {TARGET_ITERATION_P50_MS:.0f} ms "
        "(in-process scripted model)",
        iteration.p50_ms < TARGET_ITERATION_P50_MS,
        f"{iteration.p50_ms:.2f} ms",
    )
    verdict(
        f"step to wire p50 < {TARGET_WIRE_P50_MS:.0f} ms (daphne, TCP)",
        wire.p50_ms < TARGET_WIRE_P50_MS,
        f"{wire.p50_ms:.2f} ms",
    )


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Benchmark the agent loop and its SSE stream.")
    parser.add_argument("--runs", type=int, default=10, help="timed runs per loop measurement")
    parser.add_argument(
        "--iterations", type=int, default=100, help="timed iterations per run (intervals)"
    )
    parser.add_argument(
        "--stream-runs",
        type=int,
        default=40,
        help=f"timed streamed runs ({STREAM_TOOL_CALLS} steps each) per step-to-wire measurement",
    )
    parser.add_argument(
        "--redis",
        nargs="?",
        const="redis://127.0.0.1:6379/0",
        default=os.environ.get("REDIS_URL") or None,
        help="use the Redis channel layer (default URL redis://127.0.0.1:6379/0; REDIS_URL "
        "also turns it on)",
    )
    parser.add_argument("--profile", action="store_true", help="print a cProfile of one run")
    parser.add_argument("--serve", type=int, metavar="PORT", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.serve is not None:
        serve(args.serve)
        return 0
    run_started = time.perf_counter()
    var_dir = configure_environment(args.redis)
    from benchmarks.trace_tree import QueryCounter, ensure_database, machine_load

    print(f"{os.cpu_count()} CPUs, load average {machine_load()}")
    layer = f"Redis ({args.redis})" if args.redis else "in-memory"
    print(f"channel layer: {layer}")
    try:
        ensure_database(os.environ["DATABASE_URL"])

        import django
        from django.core.management import call_command
        from django.db import connection
        from django.db.backends.signals import connection_created

        django.setup()
        counter = QueryCounter()
        connection_created.connect(counter.attach, weak=False)
        call_command("migrate", verbosity=0)
        user, token = prepare_user()
        connection.close()
        asyncio.run(run(user, token, counter, args))
        print(
            f"\nwhole run {time.perf_counter() - run_started:.0f} s; "
            f"load average now {machine_load()} (other work on the machine skews the figures)"
        )
    finally:
        shutil.rmtree(var_dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
