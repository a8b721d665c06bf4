"""Benchmark: ``POST /chat?stream=true`` under concurrency, on one worker with the in-memory
channel layer and, in the same run, on several workers with the Redis channel layer.

Run from the repository root::

    .venv/bin/python benchmarks/chat_stream.py [--levels 1,10,50] [--seconds 10] [--rounds 3]
    REDIS_URL=redis://127.0.0.1:6379/0 .venv/bin/python benchmarks/chat_stream.py [--workers 2]

DevAssist runs under daphne in subprocesses, on PostgreSQL, with the model at
``tests.agent.fake_openai.FakeOpenAI`` (in a process of its own, one per set-up) answering
every call at once (or after ``--quiet-s``) with a 24-word answer in 24 streamed chunks. Five
streams per worker warm the set-up up first (answered at once, not counted unless they fail).
Each stream is a plain chat turn (``use_agent``/``use_rag`` false: no Chroma lookup, no tools),
so what is measured is the server: the route, the conversation and run rows, the run task, the
trace steps, the ``RunEvent`` rows and their way through the channel layer to the HTTP stream.

Set-ups (``--setups``, default both), measured one after the other:

- **memory**: one daphne process, the in-memory channel layer;
- **redis**: ``--workers`` (2) daphne processes on the same database and on Redis
  (``--redis-url``, default ``REDIS_URL``; the set-up is skipped without one) under a channel
  prefix of this run's own. Requests go to the workers in turn (round robin), as a load
  balancer without sticky sessions sends them.

Three ways of loading a set-up, for each concurrency level N:

- **sustained** (the target's): N clients, each keeping one stream open and starting the next
  as soon as its last one ends (what ``ab -c N`` or ``hey -c N`` do), for ``--seconds``; the
  streams started in the first ``--warmup`` seconds are not counted;
- **burst**: ``--rounds`` times, N streams sent in the same instant, each round after the last
  one has ended: N requests that arrive together (the worst case for the first event);
- **burst GET**, the baseline: the same bursts of the lightest authenticated API request
  (``GET /chat/conversations?limit=1``), its "first event" being its response's headers. What
  N requests arriving together cost the set-up before any of them does its own work.

With ``--loads follow`` (or ``sustained,burst,follow``), a fourth way, for issue 13's "a step
reaches a watcher on another worker within 100 ms p95":

- **follow**: sustained like the first, but each stream is an agent run
  (``POST /agent?stream=true``, no tools) whose scripted model makes ``RELAY_STEPS`` steps
  (each a call of a tool that does not exist, so no sandbox: a failed step, its ``step``
  event) and then streams its answer word by word, so that the run has step and delta events
  well after it started. As soon as the stream's ``meta`` gives the run's id, the same client
  re-attaches to the run on the next worker (B; in the memory set-up the same one, the
  baseline) with ``GET /api/runs/{id}/events?after_seq=0``. For every event that reached A
  after B's re-attach was live, the difference of its arrivals (B - A, same clock) is a
  sample; an event A saw that B did not get before its ``done`` is **missing**.

Figures per set-up, level and way:

- **first event**: from sending the request to reading the first ``data:`` line (``meta``);
- **done**: from sending the request to reading ``done`` (the whole answer is out);
- **per event**: (time of ``done`` - time of ``meta``) / (events - 1) for each stream: the
  server's cost per event with a model that costs nothing;
- **streams/s**: streams ended per second (sustained only);
- **stalled**: streams that did not end with ``done`` within ``--stall-s`` (10 s) plus the
  model's ``--quiet-s`` (cut off then, or closed before it): a stream that went silent;
- **errors**: non-200 answers, runs that did not complete, exceptions;
- **server CPU per stream**: the server processes' CPU time over the level divided by its
  streams (what one turn costs the workers, whatever else the machine is doing).

Targets: zero errors and zero stalled streams in every set-up; first event p50 under 100 ms at
50 concurrent streams (sustained) on one worker; with ``follow``, an event reaches the other
worker's watcher within 100 ms p95 on Redis, and none is missing. The exit code is 0 whatever
the verdicts. PostgreSQL comes from ``BENCH_DATABASE_URL`` (default
``postgres://postgres@127.0.0.1:5432/devassist_chat_bench``), created and migrated when missing.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import shutil
import statistics
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))  # run as a script: make the project importable

from benchmarks.common import percentile, verdict  # noqa: E402 - after the path above
from benchmarks.trace_tree import (  # noqa: E402
    configure_environment,
    ensure_database,
    machine_load,
)

DEFAULT_DATABASE_URL = "postgres://postgres@127.0.0.1:5432/devassist_chat_bench"
BENCH_USERNAME = "chat-stream-benchmark"
ANSWER_WORDS = [f"word{i} " for i in range(24)]
#: Issue 14's target: the first event's p50 at the top level, with the workers on Redis.
TARGET_FIRST_EVENT_P50_MS = 150.0
#: The set-ups, in the order they are measured.
SETUPS = ("memory", "redis")
#: Streams sent to each worker at once before the measurements, answered without --quiet-s.
WARMUP_PER_WORKER = 5
#: The follow load's runs: the task the model recognises them by, their steps before the
#: answer, how long the model thinks before each step (the first wait is also the time a
#: re-attach has to become live before the run's second event) and between answer words.
RELAY_TASK = "chat-stream benchmark: follow me from another worker"
RELAY_STEPS = 3
RELAY_STEP_DELAY_S = 0.15
RELAY_CHUNK_DELAY_S = 0.02
TARGET_RELAY_P95_MS = 100.0
LOADS = ("sustained", "burst", "follow")


@dataclass
class Level:
    """The figures of one concurrency level under one way of loading one set-up."""

    setup: str
    concurrency: int
    load: str = "sustained"
    first_event_ms: list[float] = field(default_factory=list)
    done_ms: list[float] = field(default_factory=list)
    per_event_ms: list[float] = field(default_factory=list)
    events: list[int] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    #: Why each stalled stream counts as one (no ``done`` within the bound).
    stalled: list[str] = field(default_factory=list)
    #: Streams ended per second over the level (sustained load).
    streams_per_s: float = float("nan")
    #: The server processes' CPU time (user + system) over the level, per stream.
    server_cpu_ms: float = float("nan")
    #: Follow load: arrival on B - arrival on A of each event both saw after B was live,
    #: with its type.
    relay_ms: list[float] = field(default_factory=list)
    relay_types: list[str] = field(default_factory=list)
    #: Follow load: events A saw that B did not get before its ``done``, and events that
    #: reached A before B's re-attach was live (not samples: B read them from the log).
    relay_missing: list[str] = field(default_factory=list)
    relay_before_live: int = 0


class Workers:
    """The base URLs of a set-up's workers, handed out in turn (round robin)."""

    def __init__(self, urls: list[str]) -> None:
        self.urls = urls
        self._turn = itertools.cycle(urls)

    def next(self) -> str:
        return next(self._turn)

    def after(self, url: str) -> str:
        """The worker after ``url`` in the list (``url`` itself when it is the only one)."""
        return self.urls[(self.urls.index(url) + 1) % len(self.urls)]


def server_cpu_s() -> float:
    """CPU seconds (user + system) used so far by the DevAssist servers, this process's daphne
    children (read from /proc; NaN where there is none)."""
    tick = os.sysconf("SC_CLK_TCK")
    total, found = 0, False
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            command = (stat.parent / "cmdline").read_bytes()
        except OSError:
            continue
        if int(fields[1]) == os.getpid() and b"daphne" in command:
            total += int(fields[11]) + int(fields[12])
            found = True
    return total / tick if found else float("nan")


def prepare_token() -> str:
    from django.contrib.auth.models import User

    from devassist.models import ApiToken
    from devassist.tokens import api_token_create

    user, _ = User.objects.get_or_create(username=BENCH_USERNAME)
    user.conversations.all().delete()
    user.agent_runs.all().delete()
    ApiToken.objects.filter(user=user).delete()
    return api_token_create(user=user, name="chat stream benchmark")[1]


async def one_stream(
    client: object, level: Level, base_url: str, stall_s: float, *, timed: bool = True
) -> None:
    """One streamed chat turn on the worker at ``base_url``; its error or stall, and its
    figures if ``timed``, go into ``level``."""
    import httpx

    assert isinstance(client, httpx.AsyncClient)
    body = {"message": "hello", "use_agent": False, "use_rag": False}
    started = time.perf_counter()
    first = last = 0.0
    events = 0
    status = ""
    try:
        async with (
            asyncio.timeout(stall_s),
            client.stream("POST", f"{base_url}/chat?stream=true", json=body) as response,
        ):
            if response.status_code != 200:
                detail = (await response.aread()).decode(errors="replace")[:200]
                level.errors.append(f"HTTP {response.status_code}: {detail}")
                return
            async for line in response.aiter_lines():
                if not line.startswith("data: "):
                    continue
                now = time.perf_counter()
                events += 1
                if events == 1:
                    first = now
                last = now
                event = json.loads(line[6:])
                if event["type"] == "done":
                    status = event["status"]
                    break
    except TimeoutError:
        level.stalled.append(f"no done within {stall_s:.0f} s (after {events} events)")
        return
    except Exception as exc:
        level.errors.append(f"{type(exc).__name__}: {exc}")
        return
    if not status:
        level.stalled.append(f"closed without done (after {events} events)")
        return
    if status != "completed":
        level.errors.append(f"run ended {status}")
        return
    if not timed:
        return
    level.first_event_ms.append((first - started) * 1000)
    level.done_ms.append((last - started) * 1000)
    level.per_event_ms.append((last - first) * 1000 / max(1, events - 1))
    level.events.append(events)


async def one_get(client: object, level: Level, base_url: str) -> None:
    """The baseline: the lightest authenticated API request (one page of one conversation
    title, one query after the token's); its time to the response's headers is its "first
    event"."""
    import httpx

    assert isinstance(client, httpx.AsyncClient)
    started = time.perf_counter()
    try:
        async with client.stream("GET", f"{base_url}/chat/conversations?limit=1") as response:
            first = time.perf_counter()
            await response.aread()
            if response.status_code != 200:
                level.errors.append(f"HTTP {response.status_code}")
                return
    except Exception as exc:
        level.errors.append(f"{type(exc).__name__}: {exc}")
        return
    level.first_event_ms.append((first - started) * 1000)
    level.done_ms.append((time.perf_counter() - started) * 1000)


async def sse_events(response: object) -> AsyncIterator[tuple[int, dict[str, Any], float]]:
    """The ``(seq, event, perf_counter at its arrival)`` of an SSE response's events."""
    import httpx

    assert isinstance(response, httpx.Response)
    seq = 0
    async for line in response.aiter_lines():
        if line.startswith("id: "):
            seq = int(line[4:])
        elif line.startswith("data: "):
            yield seq, json.loads(line[6:]), time.perf_counter()


@dataclass
class Reattach:
    """What a re-attach to a run on another worker saw: each event's arrival by seq, and when
    its replay of ``meta`` arrived (from then on its follower is in the run's group)."""

    arrivals: dict[int, float] = field(default_factory=dict)
    live_from: float = float("inf")
    done: bool = False
    problem: str = ""


async def reattach(client: object, base_url: str, run_id: str, stall_s: float) -> Reattach:
    """Follow the run ``run_id`` on the worker at ``base_url`` from its first event, until
    its ``done``. From ``after_seq=0``, so that the log's ``meta`` comes first: daphne sends
    a streamed response's headers only with its first body frame, and this one marks the
    moment the follower has joined the run's group and read the log."""
    import httpx

    assert isinstance(client, httpx.AsyncClient)
    seen = Reattach()
    url = f"{base_url}/api/runs/{run_id}/events?after_seq=0"
    try:
        async with asyncio.timeout(stall_s), client.stream("GET", url) as response:
            if response.status_code != 200:
                seen.problem = f"re-attach HTTP {response.status_code}"
                return seen
            async for seq, event, now in sse_events(response):
                if seq in seen.arrivals:
                    seen.problem = f"re-attach got seq {seq} twice"
                seen.arrivals[seq] = now
                if seq == 1:
                    seen.live_from = now
                if event["type"] == "done":
                    seen.done = True
                    break
    except TimeoutError:
        seen.problem = f"re-attach: no done within {stall_s:.0f} s"
    except Exception as exc:
        seen.problem = f"re-attach {type(exc).__name__}: {exc}"
    return seen


async def followed_stream(
    client: object, level: Level, workers: Workers, stall_s: float, *, timed: bool = True
) -> None:
    """One agent run streamed from the next worker (A) and followed from the worker after it
    (B) from the moment its ``meta`` names it; A's figures, and if ``timed`` the relay's,
    go into ``level``."""
    import httpx

    assert isinstance(client, httpx.AsyncClient)
    a_url = workers.next()
    b_url = workers.after(a_url)
    body = {"message": RELAY_TASK, "tools": []}
    started = time.perf_counter()
    on_a: dict[int, tuple[float, str]] = {}
    follower: asyncio.Task[Reattach] | None = None
    status = ""
    try:
        async with (
            asyncio.timeout(stall_s),
            client.stream("POST", f"{a_url}/agent?stream=true", json=body) as response,
        ):
            if response.status_code != 200:
                detail = (await response.aread()).decode(errors="replace")[:200]
                level.errors.append(f"HTTP {response.status_code}: {detail}")
                return
            async for seq, event, now in sse_events(response):
                on_a[seq] = (now, event["type"])
                if event["type"] == "meta":
                    follower = asyncio.create_task(
                        reattach(client, b_url, event["run_id"], stall_s)
                    )
                elif event["type"] == "done":
                    status = event["status"]
                    break
        seen = await follower if follower is not None else Reattach(problem="no meta")
    except TimeoutError:
        # B started later, so its own bound ends soon after: say what it got meanwhile.
        other = await follower if follower is not None else Reattach()
        level.stalled.append(
            f"no done within {stall_s:.0f} s (after {len(on_a)} events; the re-attach on "
            f"the other worker {'got' if other.done else 'did not get'} its done, "
            f"{len(other.arrivals)} events)"
        )
        return
    except Exception as exc:
        level.errors.append(f"{type(exc).__name__}: {exc}")
        return
    finally:
        if follower is not None and not follower.done():
            follower.cancel()
    if not status:
        level.stalled.append(f"closed without done (after {len(on_a)} events)")
        return
    if status != "completed":
        level.errors.append(f"run ended {status}")
        return
    if seen.problem:
        (level.errors if seen.done else level.stalled).append(seen.problem)
    if not timed:
        return
    arrivals = sorted(at for at, _ in on_a.values())
    level.first_event_ms.append((arrivals[0] - started) * 1000)
    level.done_ms.append((arrivals[-1] - started) * 1000)
    level.per_event_ms.append((arrivals[-1] - arrivals[0]) * 1000 / max(1, len(arrivals) - 1))
    level.events.append(len(arrivals))
    for seq, (at, type_) in sorted(on_a.items()):
        if seq not in seen.arrivals:
            level.relay_missing.append(f"seq {seq} ({type_})")
        elif at < seen.live_from:
            level.relay_before_live += seq > 1
        else:
            level.relay_ms.append((seen.arrivals[seq] - at) * 1000)
            level.relay_types.append(type_)


async def sustained(
    client: object, workers: Workers, level: Level, args: argparse.Namespace
) -> Level:
    """``level.concurrency`` clients each keeping one stream open for ``--seconds`` (a
    ``follow`` level: one ``followed_stream``, two HTTP streams). The streams started in the
    first ``--warmup`` seconds are not in the latency figures; the CPU per stream is over all
    of the level's streams."""
    started = time.perf_counter()
    measuring_from = started + args.warmup
    cpu_before = server_cpu_s()
    streams = 0

    async def client_loop() -> None:
        nonlocal streams
        while time.perf_counter() - started < args.seconds:
            timed = time.perf_counter() >= measuring_from
            if level.load == "follow":
                await followed_stream(client, level, workers, args.stall_bound_s, timed=timed)
            else:
                await one_stream(client, level, workers.next(), args.stall_bound_s, timed=timed)
            streams += 1

    await asyncio.gather(*(client_loop() for _ in range(level.concurrency)))
    level.server_cpu_ms = (server_cpu_s() - cpu_before) * 1000 / max(1, streams)
    level.streams_per_s = streams / (time.perf_counter() - started)
    return level


async def burst(client: object, workers: Workers, level: Level, args: argparse.Namespace) -> Level:
    """``--rounds`` times, ``level.concurrency`` streams (``burst GET``: ``one_get``
    requests) sent together, each round after the last."""
    cpu_before = server_cpu_s()
    for _ in range(args.rounds):
        calls = (
            one_get(client, level, workers.next())
            if level.load == "burst GET"
            else one_stream(client, level, workers.next(), args.stall_bound_s)
            for _ in range(level.concurrency)
        )
        await asyncio.gather(*calls)
    level.server_cpu_ms = (server_cpu_s() - cpu_before) * 1000 / (args.rounds * level.concurrency)
    return level


async def measure(
    setup: str, workers: Workers, token: str, args: argparse.Namespace, levels: list[int]
) -> list[Level]:
    import httpx

    limits = httpx.Limits(max_connections=max(levels) * 2, max_keepalive_connections=0)
    results = []
    async with httpx.AsyncClient(
        headers={"Authorization": f"Bearer {token}"},
        # Longer than the stall bound: a stream without ``done`` is cut off as stalled first.
        timeout=args.stall_bound_s + 30,
        limits=limits,
    ) as client:
        warmup = Level(setup, 0, "warm-up")
        await asyncio.gather(
            *(
                one_stream(client, warmup, workers.next(), args.stall_bound_s)
                for _ in range(WARMUP_PER_WORKER * len(workers.urls))
            )
        )
        if warmup.errors or warmup.stalled:
            results.append(warmup)
        for concurrency in levels:
            if args.seconds > 0 and "sustained" in args.loads:
                results.append(await sustained(client, workers, Level(setup, concurrency), args))
            if args.seconds > 0 and "follow" in args.loads:
                level = Level(setup, concurrency, "follow")
                results.append(await sustained(client, workers, level, args))
            if args.rounds > 0 and "burst" in args.loads:
                for load in ("burst", "burst GET"):
                    results.append(
                        await burst(client, workers, Level(setup, concurrency, load), args)
                    )
    return results


def report(results: list[Level], setups: dict[str, str]) -> None:
    print(f"\n{'set-up':>8} {'load':>9} {'streams':>7} {'n':>5} {'first p50':>10} "
          f"{'first p95':>10} {'done p50':>10} {'done p95':>10} {'per-event p50':>14} "
          f"{'events':>7} {'stalled':>8} {'errors':>7} {'streams/s':>10} "
          f"{'server CPU/stream':>18}")  # fmt: skip
    for level in results:
        print(
            f"{level.setup:>8} {level.load:>9} {level.concurrency:>7} "
            f"{len(level.first_event_ms):>5} "
            f"{percentile(level.first_event_ms, 0.5):>8.1f}ms "
            f"{percentile(level.first_event_ms, 0.95):>8.1f}ms "
            f"{percentile(level.done_ms, 0.5):>8.1f}ms "
            f"{percentile(level.done_ms, 0.95):>8.1f}ms "
            f"{percentile(level.per_event_ms, 0.5):>12.2f}ms "
            f"{statistics.median(level.events) if level.events else 0:>7} "
            f"{len(level.stalled):>8} "
            f"{len(level.errors):>7} "
            f"{level.streams_per_s:>10.1f} "
            f"{level.server_cpu_ms:>16.1f}ms"
        )
        for problem in sorted(set(level.errors + level.stalled))[:5]:
            print(f"           {'error' if problem in level.errors else 'stalled'}: {problem}")
    print()
    for name, description in setups.items():
        print(f"{name}: {description}")
    by_key = {(level.setup, level.load, level.concurrency): level for level in results}
    for (setup, load, concurrency), level in by_key.items():
        baseline = by_key.get((setup, "burst GET", concurrency))
        if load == "burst" and baseline is not None:
            chat = percentile(level.first_event_ms, 0.5)
            get = percentile(baseline.first_event_ms, 0.5)
            print(
                f"{setup}, burst of {concurrency}: first event p50 {chat:.1f} ms, "
                f"{chat / get:.1f}x the authenticated GET's {get:.1f} ms"
            )
        one = by_key.get(("memory", load, concurrency))
        if setup == "redis" and load == "sustained" and one is not None:
            print(
                f"redis vs memory, {concurrency} sustained: first event p50 "
                f"{percentile(level.first_event_ms, 0.5):.1f} vs "
                f"{percentile(one.first_event_ms, 0.5):.1f} ms, done p50 "
                f"{percentile(level.done_ms, 0.5):.0f} vs {percentile(one.done_ms, 0.5):.0f} ms, "
                f"{level.streams_per_s:.1f} vs {one.streams_per_s:.1f} streams/s "
                f"({level.streams_per_s / one.streams_per_s:.2f}x)"
            )
    follows = [level for level in results if level.load == "follow"]
    if follows:
        report_follow(follows)
    print()
    top = max(level.concurrency for level in results)
    for setup in setups:
        mine = [level for level in results if level.setup == setup]
        verdict(
            f"{setup}: zero stalled streams up to {top}",
            not any(level.stalled for level in mine),
            f"{sum(len(level.stalled) for level in mine)} stalled",
        )
        verdict(
            f"{setup}: zero errors up to {top} streams",
            not any(level.errors for level in mine),
            f"{sum(len(level.errors) for level in mine)} errors",
        )
    for level in follows:
        if level.setup != "redis":
            continue
        p95 = percentile(late(level.relay_ms), 0.95)
        baseline = by_key.get(("memory", "follow", level.concurrency))
        against = ""
        if baseline is not None and baseline.relay_ms:
            base = percentile(late(baseline.relay_ms), 0.95)
            against = f"; {p95 / base:.1f}x the memory set-up's {base:.1f} ms" if base else ""
        verdict(
            f"redis: an event reaches the other worker within {TARGET_RELAY_P95_MS:.0f} ms p95 "
            f"({level.concurrency} followed streams)",
            bool(level.relay_ms) and p95 < TARGET_RELAY_P95_MS,
            f"{p95:.1f} ms over {len(level.relay_ms)} events{against}",
        )
    for level in follows:
        verdict(
            f"{level.setup}: no event missing on the other worker ({level.concurrency} followed "
            "streams)",
            not level.relay_missing,
            f"{len(level.relay_missing)} missing",
        )
    target = by_key.get(("redis", "sustained", top))
    one = by_key.get(("memory", "sustained", top))
    beside = (
        f"; one worker in memory: {percentile(one.first_event_ms, 0.5):.1f} ms"
        if one is not None
        else ""
    )
    if target is not None:
        p50 = percentile(target.first_event_ms, 0.5)
        verdict(
            f"redis workers: first event p50 < {TARGET_FIRST_EVENT_P50_MS:.0f} ms at {top} "
            "sustained streams",
            p50 < TARGET_FIRST_EVENT_P50_MS,
            f"{p50:.1f} ms{beside}",
        )
    elif one is not None:
        print(
            f"first event p50 at {top} sustained streams{beside.removeprefix(';')} (the target "
            "is for the workers on Redis: --redis-url or REDIS_URL)"
        )


def late(delays_ms: list[float]) -> list[float]:
    """How late each event reached B: max(0, B - A)."""
    return [max(0.0, delay) for delay in delays_ms]


def report_follow(follows: list[Level]) -> None:
    """The follow loads' relay figures: B - A per event (all events, and the steps alone),
    and max(0, B - A), the target's figure."""
    print(f"\n{'set-up':>8} {'streams':>7} {'events':>7} {'B-A p50':>9} {'B-A p95':>9} "
          f"{'late p50':>9} {'late p95':>9} {'step p95':>9} {'B first':>8} {'before live':>12} "
          f"{'missing':>8}")  # fmt: skip
    for level in follows:
        steps = [ms for ms, t in zip(level.relay_ms, level.relay_types, strict=True) if t == "step"]
        first = sum(ms < 0 for ms in level.relay_ms) / max(1, len(level.relay_ms))
        print(
            f"{level.setup:>8} {level.concurrency:>7} {len(level.relay_ms):>7} "
            f"{percentile(level.relay_ms, 0.5):>7.1f}ms "
            f"{percentile(level.relay_ms, 0.95):>7.1f}ms "
            f"{percentile(late(level.relay_ms), 0.5):>7.1f}ms "
            f"{percentile(late(level.relay_ms), 0.95):>7.1f}ms "
            f"{percentile(late(steps), 0.95):>7.1f}ms "
            f"{first:>7.0%} "
            f"{level.relay_before_live:>12} "
            f"{len(level.relay_missing):>8}"
        )
        for missing in level.relay_missing[:5]:
            print(f"           missing on B: {missing}")
    print(
        "B-A: an event's arrival on the re-attach to the next worker minus its arrival on the "
        "stream that started the run (same client, same clock); late: max(0, B-A); B first: "
        "share of events B had first; before live: events that reached A before B's "
        "re-attach was live (not counted)"
    )


@contextlib.contextmanager
def model_server(replies: int, quiet_s: float, *, instant: int) -> Iterator[str]:
    """The scripted model in a process of its own (this one's CPU is the client's), answering
    ``instant`` calls at once (the warm-up), then ``replies`` calls, each after ``quiet_s``;
    yields its base URL."""
    process = subprocess.Popen(
        [
            sys.executable,
            str(Path(__file__).resolve()),
            *("--model", str(replies), "--quiet-s", str(quiet_s), "--instant", str(instant)),
        ],
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        yield process.stdout.readline().strip()
    finally:
        process.terminate()
        process.wait(timeout=10)


def serve_model(replies: int, quiet_s: float, instant: int) -> None:
    """``--model N``: the scripted model server; prints its base URL, serves until killed."""
    from tests.agent.fake_openai import FakeOpenAI, Reply

    class Model(FakeOpenAI):
        """Chat turns take the script's replies in order; a follow run's calls are answered
        by how far that run is (its own earlier replies in the request), whatever order
        concurrent runs call in: ``RELAY_STEPS`` tool calls, then the answer."""

        def _next_reply(self, body: dict[str, Any]) -> Reply | None:
            messages = body.get("messages", [])
            tasks = [i for i, m in enumerate(messages) if m.get("content") == RELAY_TASK]
            if not tasks:
                return super()._next_reply(body)
            made = sum(m.get("role") == "assistant" for m in messages[tasks[-1] :])
            if made < RELAY_STEPS:
                return {
                    "content": f"Thought: step {made + 1}\nAction: tool:relay_probe\nargs: {{}}",
                    "delay_s": RELAY_STEP_DELAY_S,
                }
            chunks = ["Thought: done.\nAction: final: ", *ANSWER_WORDS]
            return {
                "content": "".join(chunks),
                "chunks": chunks,
                "chunk_delay_s": RELAY_CHUNK_DELAY_S,
            }

    reply: dict[str, Any] = {"content": "".join(ANSWER_WORDS), "chunks": ANSWER_WORDS}
    with Model() as model:
        script: list[str | dict[str, Any]] = [reply] * instant
        model.script(script + [{**reply, "delay_s": quiet_s}] * replies)
        print(model.base_url, flush=True)
        threading.Event().wait()


def worker_count(setup: str, args: argparse.Namespace) -> int:
    return 1 if setup == "memory" else int(args.workers)


@contextlib.contextmanager
def setup_servers(setup: str, env: dict[str, str], args: argparse.Namespace) -> Iterator[Workers]:
    """The set-up's daphne workers (one on the in-memory layer, or ``--workers`` on Redis
    under a channel prefix of their own), stopped at the end."""
    from tests.servers import daphne_server

    count = worker_count(setup, args)
    if setup == "redis":
        prefix = f"devassist-bench-{uuid.uuid4().hex[:8]}"
        env = {**env, "REDIS_URL": args.redis_url, "CHANNELS_PREFIX": prefix}
    with contextlib.ExitStack() as stack:
        urls = [stack.enter_context(daphne_server(env, timeout_s=60)) for _ in range(count)]
        yield Workers(urls)


def channel_layer_of(base_url: str) -> str:
    """The channel layer a worker reports at /healthz."""
    import httpx

    layer = httpx.get(f"{base_url}/healthz", timeout=10).json()["checks"]["channel_layer"]
    return f"{layer.get('backend', '?')} ({'ok' if layer.get('ok') else 'failing'})"


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Benchmark POST /chat?stream=true.")
    parser.add_argument("--levels", default="1,10,50", help="concurrency levels")
    parser.add_argument(
        "--seconds", type=float, default=10.0, help="sustained load per level (0: none)"
    )
    parser.add_argument(
        "--warmup", type=float, default=2.0, help="first seconds of a sustained level not counted"
    )
    parser.add_argument(
        "--rounds", type=int, default=3, help="bursts per concurrency level (0: none)"
    )
    parser.add_argument(
        "--loads",
        default="sustained,burst",
        help="of sustained, burst (with burst GET), follow (a run followed from another worker)",
    )
    parser.add_argument(
        "--setups", default=",".join(SETUPS), help="memory (1 worker), redis (--workers), or both"
    )
    parser.add_argument("--workers", type=int, default=2, help="daphne workers on Redis")
    parser.add_argument(
        "--redis-url",
        default=os.environ.get("REDIS_URL", ""),
        help="Redis of the redis set-up (default: REDIS_URL; without one it is skipped)",
    )
    parser.add_argument(
        "--stall-s",
        type=float,
        default=10.0,
        help="a stream without done after this long (plus --quiet-s) counts as stalled",
    )
    parser.add_argument(
        "--quiet-s",
        type=float,
        default=0.0,
        help="the model waits this long before each answer: every stream is quiet that long",
    )
    parser.add_argument("--model", type=int, metavar="REPLIES", help=argparse.SUPPRESS)
    parser.add_argument("--instant", type=int, default=0, help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.model is not None:
        serve_model(args.model, args.quiet_s, args.instant)
        return 0
    levels = [int(n) for n in args.levels.split(",")]
    args.loads = [name for name in args.loads.split(",") if name]
    if set(args.loads) - set(LOADS):
        raise SystemExit(f"unknown loads in {args.loads}; choose from {', '.join(LOADS)}")
    args.stall_bound_s = args.stall_s + args.quiet_s
    setups = [name for name in args.setups.split(",") if name]
    unknown = set(setups) - set(SETUPS)
    if unknown:
        raise SystemExit(f"unknown set-ups {sorted(unknown)}; choose from {', '.join(SETUPS)}")
    if "redis" in setups and not args.redis_url:
        print("no REDIS_URL (or --redis-url): the redis set-up is skipped")
        setups.remove("redis")
    if not setups:
        return 0
    var_dir = configure_environment(
        default_database_url=DEFAULT_DATABASE_URL, var_prefix="devassist-chat-bench-var-"
    )
    print(f"{os.cpu_count()} CPUs, load average {machine_load()}")
    try:
        ensure_database(os.environ["DATABASE_URL"])
        import django
        from django.core.management import call_command
        from django.db import connection

        django.setup()
        call_command("migrate", verbosity=0)
        token = prepare_token()
        connection.close()

        env = {
            "DATABASE_URL": os.environ["DATABASE_URL"],
            "DEVASSIST_VAR_DIR": var_dir,
            "LLM_API_KEY": "bench",
            "LLM_MODEL": "fake-model",
            "LLM_MAX_RETRIES": "0",
            "SANDBOX_WARM_ON_START": "0",
            "SANDBOX_POOL_SIZE": "0",
            "LOG_LEVEL": "WARNING",
            "SECRET_KEY": "chat-stream-benchmark",
            "DATABASE_POOL_MAX": os.environ.get("DATABASE_POOL_MAX", "20"),
        }
        results: list[Level] = []
        described: dict[str, str] = {}
        for setup in setups:
            count = worker_count(setup, args)
            # Enough replies for the bursts and for sustained levels at well above this
            # machine's rate (about 20 streams/s per worker); the warm-up's come first and
            # at once, so that a cold worker's first requests are not taken for stalls.
            replies = args.rounds * sum(levels) + int(args.seconds * 100) * len(levels) * count
            with (
                model_server(replies, args.quiet_s, instant=WARMUP_PER_WORKER * count) as model,
                setup_servers(setup, {**env, "LLM_BASE_URL": model}, args) as workers,
            ):
                layers = ", ".join(channel_layer_of(url) for url in workers.urls)
                described[setup] = f"{len(workers.urls)} daphne worker(s), {layers}"
                results += asyncio.run(measure(setup, workers, token, args, levels))
        if "redis" in described:
            from importlib.metadata import version

            described["redis"] += (
                f"; redis-py {version('redis')}, channels-redis {version('channels-redis')}"
            )
        report(results, described)
        print(f"\nload average now {machine_load()} (other work on the machine skews the figures)")
    finally:
        shutil.rmtree(var_dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
