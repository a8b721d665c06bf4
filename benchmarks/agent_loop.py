"""Benchmark: the agent loop's own overhead per iteration, and a step's way to the wire.

Run from the repository root::

    .venv/bin/python benchmarks/agent_loop.py [--runs 10] [--iterations 100] [--redis [URL]]

Every run is the real thing from ``run_create`` on: ``run_start`` and ``_execute``, ``run_react``,
``RunRecorder`` writing the trace through the trace store, ``RunEvents`` writing ``RunEvent`` rows
and broadcasting on the channel layer (in-memory, or Redis with ``--redis`` / ``REDIS_URL``), and
one subscriber following the run's group through ``agent.api.sse_frames``. Two things stand in:
the tool registry holds one no-op tool, and the model answers from a script with no delay (N
calls of the tool, then a final answer).

1. Per iteration: the time between the ends of consecutive ``RunRecorder.iteration_finished``
   calls, in runs of ``--iterations`` intervals under a loop cap raised to let them happen, with
   two models: ``ScriptedProvider`` below, in-process (``--runs`` runs: the loop's own overhead,
   the figure for the target), and the real ``OpenAIProvider`` against
   ``tests.agent.fake_openai.FakeOpenAI`` (``--http-runs`` runs; the server is a thread of this
   process, so its HTTP round trip and its share of the GIL are in that figure). Queries per
   iteration are counted; one ``sync_to_async`` ``SELECT 1`` is the baseline. One more run, with
   timers around the loop's and the trace store's parts, shows where an iteration goes. Each
   iteration is three transactions, written as it happens: the thought when the model has
   replied, the running action when the tool starts, the result with the step's event (and the
   action's end) when it is done.
2. Step to wire: from the step finishing (its result step and its ``step`` event's
   ``RunEvent`` row committed in one transaction, their broadcast called on commit) to the step's
   SSE frame reaching an HTTP client, through ``POST /agent?stream=true`` on a real daphne
   server (this file with ``--serve``, a subprocess), ``--stream-runs`` runs of 9 steps, split
   into legs: up to ``group_send``, the channel layer up to the frame made by ``sse_frames``,
   then Django, daphne and TCP. Both processes stamp with
   ``time.perf_counter()``, CLOCK_MONOTONIC on Linux, one clock for the whole machine. httpx's
   ``ASGITransport`` hands a response body over only once it is complete, so it cannot time
   this; the same path is timed in-process up to the ASGI ``send`` of the frame as well.

Prints p50/p95, the parts of an iteration, PASS/FAIL for the targets (iteration p50 under 20 ms
with the in-process model, step to wire p50 under 10 ms) and, with ``--profile``, a cProfile of
one run. The exit code is 0 whatever the verdicts.

PostgreSQL comes from ``BENCH_DATABASE_URL`` (default
``postgres://postgres@127.0.0.1:5432/devassist_agent_bench``); the database is created when
missing and migrated, and the benchmark user's runs and traces from earlier runs are deleted.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import functools
import inspect
import itertools
import json
import os
import re
import shutil
import sys
import time
import uuid
from collections import defaultdict
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from unittest import mock

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))  # run as a script: make the project importable

from benchmarks.common import profile_report, verdict  # noqa: E402 - after the path above
from benchmarks.trace_tree import (  # noqa: E402
    Measurement,
    QueryCounter,
    configure_environment,
    ensure_database,
    machine_load,
)

if TYPE_CHECKING:
    from agent.llm.base import ChatMessage, LLMChunk, LLMResponse
    from agent.tools.registry import ToolContext, ToolRegistry
DEFAULT_DATABASE_URL = "postgres://postgres@127.0.0.1:5432/devassist_agent_bench"
BENCH_USERNAME = "agent-loop-benchmark"
PROVIDER_PATH = "benchmarks.agent_loop.ScriptedProvider"
EMITS_PATH = "/__bench__/emits"

#: ``_execute`` runs with ``LoopConfig()``, at most 10 iterations: 9 tool calls and the answer.
STREAM_TOOL_CALLS = 9
WARMUP_TOOL_CALLS = 10
RUN_TIMEOUT_S = 60.0

TARGET_ITERATION_P50_MS = 20.0
TARGET_WIRE_P50_MS = 10.0

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


def task_message(tool_calls: int) -> str:
    return f"Call noop {tool_calls} times."


_TASK_CALLS = re.compile(r"Call noop (\d+) times\.")


class ScriptedProvider:
    """``LLMProvider`` answering ``scripted_reply`` at once, in word-sized deltas, with no I/O.

    The reply depends only on the conversation: the number of tool calls comes from the task
    (``task_message``; ``tool_calls`` when the task does not say), the position from the number
    of assistant messages, so one instance serves any number of runs at once. Configure it as
    ``settings.LLM = {"BACKEND": "benchmarks.agent_loop.ScriptedProvider"}``. It speaks the
    text protocol only: ``tools`` (native tool calling's definitions) are not used.
    """

    writes_free_text = False  # it speaks only the ReAct protocol

    def __init__(self, *, tool_calls: int = STREAM_TOOL_CALLS, model: str = "scripted") -> None:
        self.tool_calls = tool_calls
        self.model = model

    def describe(self) -> dict[str, Any]:
        return {"provider": "scripted", "model": self.model}

    async def complete(
        self,
        messages: Sequence[ChatMessage],
        *,
        stop: Sequence[str] | None = None,
        tools: Sequence[Any] | None = None,
    ) -> LLMResponse:
        from agent.llm.base import LLMResponse, Usage

        task = next((m["content"] for m in messages if m["role"] == "user"), "")
        asked = _TASK_CALLS.search(task)
        tool_calls = int(asked.group(1)) if asked else self.tool_calls
        index = 1 + sum(1 for message in messages if message["role"] == "assistant")
        content = scripted_reply(index, tool_calls)
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
        tools: Sequence[Any] | None = None,
    ) -> AsyncGenerator[LLMChunk, None]:
        from agent.llm.base import LLMChunk

        response = await self.complete(messages, stop=stop)
        for piece in re.findall(r"\S+\s*", response.content):
            yield LLMChunk(delta=piece)
        yield LLMChunk(response=response)


SCRIPTED_LLM: dict[str, Any] = {"BACKEND": PROVIDER_PATH, "OPTIONS": {}}


async def noop(args: dict[str, Any], context: ToolContext) -> dict[str, Any]:
    return {"ok": True}


def noop_registry() -> ToolRegistry:
    from agent.tools.registry import Tool, ToolRegistry

    return ToolRegistry(
        [Tool(name="noop", description="Does nothing.", parameters=NOOP_PARAMETERS, handler=noop)]
    )


# --- environment and database -------------------------------------------------------------------


def prepare_user() -> tuple[Any, str]:
    """The benchmark user, without the runs, traces and tokens of earlier benchmark runs, and a
    fresh bearer token for it."""
    from django.contrib.auth.models import User
    from django.db import connection, transaction

    from agent.models import AgentRun, RunEvent
    from devassist.models import ApiToken
    from devassist.tokens import api_token_create
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


class StepClock:
    """Stamps each step event on its way out, by (run id, seq): its broadcast called on commit
    (``devassist.follow._broadcast_committed``: the result step and the event's ``RunEvent``
    row have committed together, the step is finished), the channel layer's ``group_send`` called,
    and the subscriber's ``agent.api.sse_frames`` having made the frame (the event came
    through the channel layer)."""

    def __init__(self) -> None:
        self.stamps: dict[str, dict[tuple[str, int], float]] = {
            "stored": {},
            "broadcast": {},
            "frame": {},
        }

    def wrap_broadcast(self, original: Callable[..., None]) -> Callable[..., None]:
        @functools.wraps(original)
        def broadcast(group: str, messages: list[dict[str, Any]]) -> None:
            for message in messages:
                if message.get("type") == "run.event" and message["event"]["type"] == "step":
                    key = (group.removeprefix("run."), message["seq"])
                    self.stamps["stored"][key] = time.perf_counter()
            original(group, messages)

        return broadcast

    def wrap_group_send(
        self, original: Callable[..., Awaitable[None]]
    ) -> Callable[..., Awaitable[None]]:
        @functools.wraps(original)
        async def group_send(layer: Any, group: str, message: dict[str, Any]) -> None:
            if message.get("type") == "run.event" and message["event"]["type"] == "step":
                key = (group.removeprefix("run."), message["seq"])
                self.stamps["broadcast"][key] = time.perf_counter()
            await original(layer, group, message)

        return group_send

    def wrap_frames(
        self, original: Callable[[uuid.UUID, int], AsyncIterator[bytes]]
    ) -> Callable[[uuid.UUID, int], AsyncIterator[bytes]]:
        @functools.wraps(original)
        async def sse_frames(run_id: uuid.UUID, after_seq: int) -> AsyncIterator[bytes]:
            async for frame in original(run_id, after_seq):
                # orjson writes no spaces, and a quote inside a string is escaped: no false hits.
                if b'"type":"step"' in frame:
                    seq = int(frame[len(b"id: ") : frame.index(b"\n")])
                    self.stamps["frame"][(str(run_id), seq)] = time.perf_counter()
                yield frame

        return sse_frames

    def for_run(self, run_id: str) -> dict[str, dict[int, float]]:
        return {
            leg: {seq: t for (run, seq), t in stamps.items() if run == run_id}
            for leg, stamps in self.stamps.items()
        }


def instrument(stack: contextlib.ExitStack, step_clock: StepClock) -> None:
    """The no-op registry wherever runs look tools up, and the step stamps."""
    from channels.layers import get_channel_layer

    import agent.api
    import agent.modes
    import agent.services
    import devassist.follow

    registry = noop_registry()
    for module in (agent.modes, agent.services):
        stack.enter_context(mock.patch.object(module, "default_registry", return_value=registry))
    broadcast = step_clock.wrap_broadcast(devassist.follow._broadcast_committed)
    stack.enter_context(mock.patch.object(devassist.follow, "_broadcast_committed", broadcast))
    layer_class = type(get_channel_layer())
    group_send = step_clock.wrap_group_send(layer_class.group_send)
    stack.enter_context(mock.patch.object(layer_class, "group_send", group_send))
    frames = step_clock.wrap_frames(agent.api.sse_frames)
    stack.enter_context(mock.patch.object(agent.api, "sse_frames", frames))


def use_llm(config: dict[str, Any]) -> None:
    from django.conf import settings

    from agent.llm import get_llm

    settings.LLM = config
    get_llm.cache_clear()


class PartTimer:
    """Adds up the time spent in chosen functions (async or not) and their calls, by part, and
    snapshots the sums after every call of one more function."""

    def __init__(self) -> None:
        self.parts: list[str] = []
        self.seconds: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)
        self.snapshots: list[tuple[float, dict[str, float], dict[str, int]]] = []

    def patch(self, stack: contextlib.ExitStack, owner: Any, name: str, part: str) -> None:
        original = getattr(owner, name)
        self.parts.append(part)
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

    def snapshot_after(self, stack: contextlib.ExitStack, owner: Any, name: str) -> None:
        original = getattr(owner, name)

        async def snapshotted(*args: Any, **kwargs: Any) -> Any:
            result = await original(*args, **kwargs)
            self.snapshots.append((time.perf_counter(), dict(self.seconds), dict(self.calls)))
            return result

        stack.enter_context(mock.patch.object(owner, name, snapshotted))

    def add(self, part: str, seconds: float) -> None:
        self.seconds[part] += seconds
        self.calls[part] += 1


# --- measuring ----------------------------------------------------------------------------------


async def run_once(user: Any, *, tool_calls: int) -> uuid.UUID:
    """One run start to finish, with one SSE subscriber following it; checks that it completed
    and that the subscriber saw every step and ``done``."""
    from asgiref.sync import sync_to_async

    from agent.api import sse_frames
    from agent.executor import run_start
    from agent.models import AgentRun
    from agent.selectors import run_outcomes
    from agent.services import run_create

    run = await run_create(user=user, message=task_message(tool_calls), tools=["noop"])
    follower = asyncio.create_task(_read_types(sse_frames(run.id, 0)))
    await asyncio.wait_for(run_start(run), RUN_TIMEOUT_S)
    types = await asyncio.wait_for(follower, RUN_TIMEOUT_S)
    finished = await AgentRun.objects.aget(pk=run.id)
    if (
        finished.status != "completed"
        or types.count("step") != tool_calls
        or types[-1:] != ["done"]
    ):
        error = (await sync_to_async(run_outcomes)([finished]))[finished.id].error
        raise SystemExit(
            f"run {run.id} ended {finished.status} ({finished.error_code} {error}); "
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
    before_run: Callable[[int], None] | None = None,
) -> Measurement:
    """``runs`` timed runs (after a short untimed one) of ``iterations + 1`` tool calls each,
    under a loop cap that lets them all happen; one sample per pair of consecutive iterations.
    ``before_run(tool_calls)`` is called before each run."""
    import agent.modes
    from agent.loop import LoopConfig

    result = Measurement(name)
    config = functools.partial(LoopConfig, max_iterations=iterations + 2)
    with mock.patch.object(agent.modes, "LoopConfig", config):
        for index in range(runs + 1):
            tool_calls = WARMUP_TOOL_CALLS if index == 0 else iterations + 1
            if before_run is not None:
                before_run(tool_calls)
            run_id = await run_once(user, tool_calls=tool_calls)
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


@dataclass(frozen=True)
class Part:
    label: str
    calls: float  # per iteration
    ms: float  # per iteration


async def iteration_parts(user: Any, *, iterations: int) -> list[Part]:
    """Where an in-process iteration goes: per part, calls and milliseconds per iteration, over
    the same intervals as the main measurement, in a run of its own (the timers cost a little).
    Indented parts are inside the part above them."""
    import agent.loop
    import agent.modes
    import devassist.follow
    from agent.events import RunEvents
    from agent.loop import LoopConfig
    from agent.recorder import RunRecorder
    from agent.tools.registry import ToolRegistry
    from traces.store import OrmTraceStore

    timer = PartTimer()
    config = functools.partial(LoopConfig, max_iterations=iterations + 2)
    with contextlib.ExitStack() as stack:
        stack.enter_context(mock.patch.object(agent.modes, "LoopConfig", config))
        for part, owner, name in (
            ("model call (agent.loop._call_model)", agent.loop, "_call_model"),
            ("tool call (ToolRegistry.call)", ToolRegistry, "call"),
            ("recorder writes (RunRecorder._write)", RunRecorder, "_write"),
            ("  in the ORM thread: one transaction (_write_sync)", RunRecorder, "_write_sync"),
            ("    trace store add_steps_sync", OrmTraceStore, "add_steps_sync"),
            ("    run events: bulk_create (RunEvents.store)", RunEvents, "store"),
            (
                "  on commit: broadcasts (follow._broadcast_committed)",
                devassist.follow,
                "_broadcast_committed",
            ),
        ):
            timer.patch(stack, owner, name, part)
        timer.snapshot_after(stack, RunRecorder, "iteration_finished")
        await run_once(user, tool_calls=iterations + 1)
    (first, first_seconds, first_calls), (last, last_seconds, last_calls) = (
        timer.snapshots[0],
        timer.snapshots[-1],
    )
    count = len(timer.snapshots) - 1
    parts = [
        Part(
            label,
            (last_calls.get(label, 0) - first_calls.get(label, 0)) / count,
            (last_seconds.get(label, 0.0) - first_seconds.get(label, 0.0)) * 1000 / count,
        )
        for label in timer.parts
    ]
    whole = (last - first) * 1000 / count
    top_level = sum(part.ms for part in parts if not part.label.startswith((" ", "(")))
    parts.append(Part("everything else (parsing, bookkeeping, scheduling)", 0, whole - top_level))
    parts.append(Part("whole iteration (mean)", 1, whole))
    return parts


async def profile_run(user: Any, *, iterations: int) -> str:
    """cProfile of one in-process run in its two busy threads: the event loop's (wall time, by
    own time) and asgiref's sync thread, where the ORM runs (CPU time, by cumulative time within
    the project's code, then by own time)."""
    from asgiref.sync import SyncToAsync

    import agent.modes
    from agent.loop import LoopConfig

    loop_profile, orm_profile = cProfile.Profile(), cProfile.Profile(time.thread_time)
    config = functools.partial(LoopConfig, max_iterations=iterations + 2)
    with mock.patch.object(agent.modes, "LoopConfig", config):
        executor = SyncToAsync.single_thread_executor
        await asyncio.wrap_future(executor.submit(orm_profile.enable))
        loop_profile.enable()
        await run_once(user, tool_calls=iterations + 1)
        loop_profile.disable()
        await asyncio.wrap_future(executor.submit(orm_profile.disable))
    return "".join(
        [
            "\n--- event loop thread, by own time (wall) ---\n",
            profile_report(loop_profile, "tottime", 15),
            "\n--- ORM thread, project code by cumulative time (CPU) ---\n",
            profile_report(orm_profile, "cumulative", r"/(traces|agent)/", 15),
            "\n--- ORM thread, by own time (CPU) ---\n",
            profile_report(orm_profile, "tottime", 15),
        ]
    )


# --- step to wire: in-process ASGI --------------------------------------------------------------


async def asgi_stream(app: Any, token: str, message: str) -> tuple[str, dict[int, float], str]:
    """``POST /agent?stream=true`` straight into the ASGI app; returns the run id, per step seq
    the moment its frame went to ``send``, and the type of the last event."""
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
    run_id = last_type = ""
    sent: dict[int, float] = {}

    async def receive() -> dict[str, Any]:
        nonlocal request_sent
        if not request_sent:
            request_sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        await finished.wait()
        return {"type": "http.disconnect"}

    async def send(event: dict[str, Any]) -> None:
        nonlocal run_id, last_type
        if event["type"] == "http.response.start" and event["status"] != 200:
            raise SystemExit(f"POST /agent?stream=true answered {event['status']}")
        if event["type"] != "http.response.body":
            return
        now = time.perf_counter()
        for seq, data in sse_frames_in(event.get("body", b"")):
            last_type = data["type"]
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
    return run_id, sent, last_type


def sse_frames_in(chunk: bytes) -> Iterator[tuple[int, dict[str, Any]]]:
    for block in chunk.split(b"\n\n"):
        fields = dict(line.split(b": ", 1) for line in block.splitlines() if line and b": " in line)
        if b"id" in fields and b"data" in fields:
            yield int(fields[b"id"]), json.loads(fields[b"data"])


#: One step's way out, perf_counter seconds: stored (publish called), group_send called, frame
#: made by the subscriber, frame out.
StepTimes = tuple[float, float, float, float]


def step_times(
    run_id: str, stamps: dict[str, dict[int, float]], out: dict[int, float], last_type: str
) -> list[StepTimes]:
    """Joins the server's stamps of a run's steps with the moments their frames went out;
    checks that every step of the run went out and that the stream ended with ``done``."""
    emitted, broadcast, framed = stamps["stored"], stamps["broadcast"], stamps["frame"]
    seqs = set(out)
    complete = len(seqs) == STREAM_TOOL_CALLS and seqs == set(emitted) == set(broadcast)
    if last_type != "done" or not complete or seqs != set(framed):
        raise SystemExit(
            f"run {run_id}: stream ended on {last_type!r}, steps out {sorted(out)}, "
            f"stamped { ({leg: sorted(by_seq) for leg, by_seq in stamps.items()}) }"
        )
    return [(emitted[seq], broadcast[seq], framed[seq], out[seq]) for seq in sorted(seqs)]


def step_measurements(label: str, out_leg: str, times: list[StepTimes]) -> list[Measurement]:
    """The whole way (``label``), then its legs."""
    return [
        Measurement(label, [out - stored for stored, _, _, out in times]),
        Measurement("  stored -> group_send", [b - e for e, b, _, _ in times]),
        Measurement("  group_send -> frame made (channel layer)", [f - b for _, b, f, _ in times]),
        Measurement(f"  frame made -> {out_leg}", [out - f for _, _, f, out in times]),
    ]


async def measure_asgi_send(token: str, step_clock: StepClock, *, runs: int) -> list[StepTimes]:
    """``runs`` streamed runs (after one untimed) straight into the ASGI application."""
    from devassist.asgi import application

    times: list[StepTimes] = []
    for index in range(runs + 1):
        run_id, sent, last_type = await asgi_stream(
            application, token, task_message(STREAM_TOOL_CALLS)
        )
        run_times = step_times(run_id, step_clock.for_run(run_id), sent, last_type)
        if index:
            times.extend(run_times)
    return times


# --- step to wire: a real daphne server ---------------------------------------------------------


def serve(port: int) -> None:
    """The server side (``--serve PORT``): DevAssist's ASGI application under daphne on
    127.0.0.1, running the scripted model and the no-op tool, stamping stored steps and answering
    ``GET /__bench__/emits?run=<id>`` with them (everything else goes to the application)."""
    sys.path.insert(0, str(REPO_ROOT))  # the environment comes from the parent process
    import django

    django.setup()
    from daphne.server import Server

    step_clock = StepClock()
    with contextlib.ExitStack() as stack:
        instrument(stack, step_clock)
        use_llm(SCRIPTED_LLM)
        from devassist.asgi import application

        async def bench_application(scope: dict[str, Any], receive: Any, send: Any) -> None:
            if scope["type"] != "http" or scope["path"] != EMITS_PATH:
                await application(scope, receive, send)
                return
            query = dict(
                part.split("=", 1) for part in scope["query_string"].decode().split("&") if part
            )
            body = json.dumps(step_clock.for_run(query.get("run", ""))).encode()
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


def daphne_server() -> contextlib.AbstractContextManager[str]:
    """This file with ``--serve`` in a subprocess (it inherits this environment)."""
    from tests.servers import free_port, http_server

    port = free_port()
    command = [sys.executable, str(Path(__file__).resolve()), "--serve", str(port)]
    return http_server(command, port=port, ready_path=EMITS_PATH, timeout_s=60)


async def measure_wire(base_url: str, token: str, *, runs: int) -> list[StepTimes]:
    """``runs`` streamed runs (after one untimed) through the server; a frame is out when the
    client reads its ``data:`` line."""
    import httpx

    times: list[StepTimes] = []
    headers = {"Authorization": f"Bearer {token}"}
    body = {"message": task_message(STREAM_TOOL_CALLS), "tools": ["noop"]}
    async with httpx.AsyncClient(base_url=base_url, headers=headers, timeout=30) as client:
        for index in range(runs + 1):
            received: dict[int, float] = {}
            run_id, seq, last_type = "", 0, ""
            async with client.stream("POST", "/agent?stream=true", json=body) as response:
                response.raise_for_status()
                async for line in response.aiter_lines():
                    if line.startswith("id: "):
                        seq = int(line[4:])
                    elif line.startswith("data: "):
                        now = time.perf_counter()
                        event = json.loads(line[6:])
                        last_type = event["type"]
                        if last_type == "meta":
                            run_id = event["run_id"]
                        elif last_type == "step":
                            received[seq] = now
            raw = (await client.get(EMITS_PATH, params={"run": run_id})).json()
            stamps = {
                leg: {int(seq): stamp for seq, stamp in by_seq.items()}
                for leg, by_seq in raw.items()
            }
            run_times = step_times(run_id, stamps, received, last_type)
            if index:
                times.extend(run_times)
    return times


# --- the run ------------------------------------------------------------------------------------


def fake_openai_llm(base_url: str) -> dict[str, Any]:
    return {
        "BACKEND": "agent.llm.openai_provider.OpenAIProvider",
        "OPTIONS": {"base_url": base_url, "api_key": "bench", "model": "fake-model"},
    }


async def run(user: Any, token: str, counter: QueryCounter, args: argparse.Namespace) -> None:
    from agent.recorder import RunRecorder
    from tests.agent.fake_openai import FakeOpenAI

    tool_calls = args.iterations + 1
    clock = IterationClock(counter)
    step_clock = StepClock()
    with contextlib.ExitStack() as stack:
        instrument(stack, step_clock)
        stack.enter_context(
            mock.patch.object(
                RunRecorder,
                "iteration_finished",
                clock.wrap(RunRecorder.iteration_finished),
            )
        )
        baseline = await measure_thread_hop(200)

        use_llm(SCRIPTED_LLM)
        scripted = await measure_loop(
            "iteration, in-process scripted model",
            user,
            clock,
            runs=args.runs,
            iterations=args.iterations,
        )
        with FakeOpenAI() as fake:
            use_llm(fake_openai_llm(fake.base_url))

            def script(calls: int) -> None:
                fake.script([scripted_reply(index, calls) for index in range(1, calls + 2)])

            over_http = await measure_loop(
                "iteration, OpenAIProvider -> FakeOpenAI (HTTP)",
                user,
                clock,
                runs=args.http_runs,
                iterations=args.iterations,
                before_run=script,
            )

        use_llm(SCRIPTED_LLM)
        parts = await iteration_parts(user, iterations=args.iterations)
        profile = await profile_run(user, iterations=args.iterations) if args.profile else ""
        asgi = step_measurements(
            "step -> ASGI send (in-process app)",
            "ASGI send (Django)",
            await measure_asgi_send(token, step_clock, runs=args.stream_runs),
        )
    with daphne_server() as base_url:
        wire = step_measurements(
            "step -> frame at the client (daphne, TCP)",
            "client (Django, daphne, TCP)",
            await measure_wire(base_url, token, runs=args.stream_runs),
        )

    print_table([scripted, over_http, baseline, *wire, *asgi])
    print(
        f"\nLoop: {args.runs} (scripted) and {args.http_runs} (HTTP) timed runs x "
        f"{args.iterations} iterations, after a short untimed run; an iteration is one model "
        "call, a thought, an action and a result step with the step's RunEvent row (three "
        "transactions, as it happens) and its broadcast to one SSE subscriber. Steps: "
        f"{args.stream_runs} timed streamed runs x {STREAM_TOOL_CALLS} steps each way."
    )
    print_parts(parts)
    print_verdicts(scripted, wire[0])
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


def print_parts(parts: Sequence[Part]) -> None:
    print("\none in-process iteration, part by part (timers on; indented parts are inside the")
    print("part above them):")
    header = f"{'part':<56}{'calls':>7}{'ms':>8}"
    print(header)
    print("-" * len(header))
    for part in parts:
        calls = f"{part.calls:.1f}" if part.calls else ""
        print(f"{part.label:<56}{calls:>7}{part.ms:>8.2f}")


def print_verdicts(iteration: Measurement, wire: Measurement) -> None:
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
    parser.add_argument(
        "--runs", type=int, default=10, help="timed runs with the in-process scripted model"
    )
    parser.add_argument(
        "--http-runs", type=int, default=3, help="timed runs with OpenAIProvider and FakeOpenAI"
    )
    parser.add_argument(
        "--iterations", type=int, default=100, help="timed iterations per run (intervals)"
    )
    parser.add_argument(
        "--stream-runs",
        type=int,
        default=30,
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
    var_dir = configure_environment(
        default_database_url=DEFAULT_DATABASE_URL,
        var_prefix="devassist-agent-bench-var-",
        redis_url=args.redis,
    )

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
