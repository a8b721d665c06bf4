"""Benchmark: ``POST /chat?stream=true`` under concurrency, on one server process.

Run from the repository root::

    .venv/bin/python benchmarks/chat_stream.py [--levels 1,10,50] [--seconds 10] [--rounds 3]

DevAssist runs under daphne in a subprocess (one process, the in-memory channel layer), on
PostgreSQL, with the model at ``tests.agent.fake_openai.FakeOpenAI`` (in a third process)
answering every call at once with a 24-word answer in 24 streamed chunks. Each stream is a
plain chat turn (``use_agent``/``use_rag`` false: no Chroma lookup, no tools), so what is
measured is the server: the route, the conversation and run rows, the run task, the trace
steps, the ``RunEvent`` rows and their way through the channel layer to the HTTP stream.

Two ways of loading the server, for each concurrency level N:

- **sustained** (the target's): N clients, each keeping one stream open and starting the next
  as soon as its last one ends (what ``ab -c N`` or ``hey -c N`` do), for ``--seconds``; the
  streams started in the first ``--warmup`` seconds are not counted;
- **burst**: ``--rounds`` times, N streams sent in the same instant, each round after the last
  one has ended: N requests that arrive together (the worst case for the first event);
- **burst GET**, the baseline: the same bursts of the lightest authenticated API request
  (``GET /chat/conversations?limit=1``), its "first event" being its response's headers. What
  N requests arriving together cost this process before any of them does its own work.

Figures per level and way:

- **first event**: from sending the request to reading the first ``data:`` line (``meta``);
- **done**: from sending the request to reading ``done`` (the whole answer is out);
- **per event**: (time of ``done`` - time of ``meta``) / (events - 1) for each stream: the
  server's cost per event with a model that costs nothing;
- **streams/s**: streams ended per second (sustained only);
- **errors**: non-200 answers, streams without ``done``, runs that did not complete,
  exceptions;
- **server CPU per stream**: the server process's CPU time over the level divided by its
  streams (what one turn costs the one process, whatever else the machine is doing).

Targets: zero errors, first event p50 under 100 ms at 50 concurrent streams (sustained). The
exit code is 0 whatever the verdicts. PostgreSQL comes from ``BENCH_DATABASE_URL`` (default
``postgres://postgres@127.0.0.1:5432/devassist_chat_bench``), created and migrated when missing.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

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
TARGET_FIRST_EVENT_P50_MS = 100.0
STREAM_TIMEOUT_S = 60.0


@dataclass
class Level:
    """The figures of one concurrency level under one way of loading the server."""

    concurrency: int
    load: str = "sustained"
    first_event_ms: list[float] = field(default_factory=list)
    done_ms: list[float] = field(default_factory=list)
    per_event_ms: list[float] = field(default_factory=list)
    events: list[int] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    #: Streams ended per second over the level (sustained load).
    streams_per_s: float = float("nan")
    #: The server process's CPU time (user + system) over the level, per stream.
    server_cpu_ms: float = float("nan")


def server_cpu_s() -> float:
    """CPU seconds (user + system) used so far by the DevAssist server, this process's daphne
    child (read from /proc; NaN where there is none)."""
    tick = os.sysconf("SC_CLK_TCK")
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            command = (stat.parent / "cmdline").read_bytes()
        except OSError:
            continue
        if int(fields[1]) == os.getpid() and b"daphne" in command:
            return (int(fields[11]) + int(fields[12])) / tick
    return float("nan")


def prepare_token() -> str:
    from django.contrib.auth.models import User

    from devassist.models import ApiToken
    from devassist.services import api_token_create

    user, _ = User.objects.get_or_create(username=BENCH_USERNAME)
    user.conversations.all().delete()
    user.agent_runs.all().delete()
    ApiToken.objects.filter(user=user).delete()
    return api_token_create(user=user, name="chat stream benchmark")[1]


async def one_stream(client: object, level: Level, *, timed: bool = True) -> None:
    """One streamed chat turn; its error, and its figures if ``timed``, go into ``level``."""
    import httpx

    assert isinstance(client, httpx.AsyncClient)
    body = {"message": "hello", "use_agent": False, "use_rag": False}
    started = time.perf_counter()
    first = last = 0.0
    events = 0
    status = ""
    try:
        async with client.stream("POST", "/chat?stream=true", json=body) as response:
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
    except Exception as exc:
        level.errors.append(f"{type(exc).__name__}: {exc}")
        return
    if status != "completed":
        level.errors.append(f"run ended {status or 'without done'}")
        return
    if not timed:
        return
    level.first_event_ms.append((first - started) * 1000)
    level.done_ms.append((last - started) * 1000)
    level.per_event_ms.append((last - first) * 1000 / max(1, events - 1))
    level.events.append(events)


async def one_get(client: object, level: Level) -> None:
    """The baseline: the lightest authenticated API request (one page of one conversation
    title, one query after the token's); its time to the response's headers is its "first
    event"."""
    import httpx

    assert isinstance(client, httpx.AsyncClient)
    started = time.perf_counter()
    try:
        async with client.stream("GET", "/chat/conversations?limit=1") as response:
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


async def sustained(client: object, concurrency: int, seconds: float, warmup: float) -> Level:
    """``concurrency`` clients each keeping one stream open for ``seconds``. The streams
    started in the first ``warmup`` seconds are not in the latency figures; the CPU per stream
    is over all of the level's streams."""
    level = Level(concurrency, "sustained")
    started = time.perf_counter()
    measuring_from = started + warmup
    cpu_before = server_cpu_s()
    streams = 0

    async def client_loop() -> None:
        nonlocal streams
        while time.perf_counter() - started < seconds:
            await one_stream(client, level, timed=time.perf_counter() >= measuring_from)
            streams += 1

    await asyncio.gather(*(client_loop() for _ in range(concurrency)))
    level.server_cpu_ms = (server_cpu_s() - cpu_before) * 1000 / max(1, streams)
    level.streams_per_s = streams / (time.perf_counter() - started)
    return level


async def burst(client: object, concurrency: int, rounds: int, *, baseline: bool = False) -> Level:
    """``rounds`` times, ``concurrency`` streams (``baseline``: ``one_get`` requests) sent
    together, each round after the last."""
    level = Level(concurrency, "burst GET" if baseline else "burst")
    cpu_before = server_cpu_s()
    for _ in range(rounds):
        calls = (
            one_get(client, level) if baseline else one_stream(client, level)
            for _ in range(concurrency)
        )
        await asyncio.gather(*calls)
    level.server_cpu_ms = (server_cpu_s() - cpu_before) * 1000 / (rounds * concurrency)
    return level


async def measure(
    base_url: str, token: str, args: argparse.Namespace, levels: list[int]
) -> list[Level]:
    import httpx

    limits = httpx.Limits(max_connections=max(levels) * 2, max_keepalive_connections=0)
    results = []
    async with httpx.AsyncClient(
        base_url=base_url,
        headers={"Authorization": f"Bearer {token}"},
        timeout=STREAM_TIMEOUT_S,
        limits=limits,
    ) as client:
        warmup = Level(0, "warm-up")
        await asyncio.gather(*(one_stream(client, warmup) for _ in range(5)))
        if warmup.errors:
            results.append(warmup)
        for concurrency in levels:
            if args.seconds > 0:
                level = await sustained(client, concurrency, args.seconds, args.warmup)
                results.append(level)
            if args.rounds > 0:
                results.append(await burst(client, concurrency, args.rounds))
                results.append(await burst(client, concurrency, args.rounds, baseline=True))
    return results


def report(results: list[Level]) -> None:
    print(f"\n{'load':>9} {'streams':>7} {'n':>5} {'first p50':>10} {'first p95':>10} "
          f"{'done p50':>10} {'per-event p50':>14} {'per-event p95':>14} {'events':>7} "
          f"{'errors':>7} {'streams/s':>10} {'server CPU/stream':>18}")  # fmt: skip
    for level in results:
        print(
            f"{level.load:>9} {level.concurrency:>7} {len(level.first_event_ms):>5} "
            f"{percentile(level.first_event_ms, 0.5):>8.1f}ms "
            f"{percentile(level.first_event_ms, 0.95):>8.1f}ms "
            f"{percentile(level.done_ms, 0.5):>8.1f}ms "
            f"{percentile(level.per_event_ms, 0.5):>12.2f}ms "
            f"{percentile(level.per_event_ms, 0.95):>12.2f}ms "
            f"{statistics.median(level.events) if level.events else 0:>7} "
            f"{len(level.errors):>7} "
            f"{level.streams_per_s:>10.1f} "
            f"{level.server_cpu_ms:>16.1f}ms"
        )
        for error in sorted(set(level.errors))[:5]:
            print(f"           error: {error}")
    print()
    by_load = {(level.load, level.concurrency): level for level in results}
    for (load, concurrency), level in by_load.items():
        baseline = by_load.get(("burst GET", concurrency))
        if load == "burst" and baseline is not None:
            chat = percentile(level.first_event_ms, 0.5)
            get = percentile(baseline.first_event_ms, 0.5)
            print(
                f"burst of {concurrency}: first event p50 {chat:.1f} ms, "
                f"{chat / get:.1f}x the authenticated GET's {get:.1f} ms"
            )
    print()
    top = max(level.concurrency for level in results)
    verdict(
        f"zero errors up to {top} streams",
        not any(level.errors for level in results),
        f"{sum(len(level.errors) for level in results)} errors",
    )
    target = next((r for r in results if r.concurrency == top and r.load == "sustained"), None)
    if target is not None:
        p50 = percentile(target.first_event_ms, 0.5)
        verdict(
            f"first event p50 < {TARGET_FIRST_EVENT_P50_MS:.0f} ms at {top} sustained streams",
            p50 < TARGET_FIRST_EVENT_P50_MS,
            f"{p50:.1f} ms",
        )


@contextlib.contextmanager
def model_server(replies: int) -> Iterator[str]:
    """The scripted model in a process of its own (this one's CPU is the client's), answering
    ``replies`` calls; yields its base URL."""
    process = subprocess.Popen(
        [sys.executable, str(Path(__file__).resolve()), "--model", str(replies)],
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


def serve_model(replies: int) -> None:
    """``--model N``: the scripted model server; prints its base URL, serves until killed."""
    from tests.agent.fake_openai import FakeOpenAI

    reply = {"content": "".join(ANSWER_WORDS), "chunks": ANSWER_WORDS}
    with FakeOpenAI() as model:
        model.script([reply] * replies)
        print(model.base_url, flush=True)
        threading.Event().wait()


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
    parser.add_argument("--model", type=int, metavar="REPLIES", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.model is not None:
        serve_model(args.model)
        return 0
    levels = [int(n) for n in args.levels.split(",")]
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

        from tests.servers import daphne_server

        # Enough replies for the bursts and for sustained levels at well above this
        # machine's rate (about 20 streams/s).
        streams = 5 + args.rounds * sum(levels) + int(args.seconds * 100) * len(levels)
        with model_server(streams) as model_url:
            env = {
                "DATABASE_URL": os.environ["DATABASE_URL"],
                "DEVASSIST_VAR_DIR": var_dir,
                "LLM_BASE_URL": model_url,
                "LLM_API_KEY": "bench",
                "LLM_MODEL": "fake-model",
                "LLM_MAX_RETRIES": "0",
                "SANDBOX_WARM_ON_START": "0",
                "SANDBOX_POOL_SIZE": "0",
                "LOG_LEVEL": "WARNING",
                "SECRET_KEY": "chat-stream-benchmark",
                "DATABASE_POOL_MAX": os.environ.get("DATABASE_POOL_MAX", "20"),
            }
            with daphne_server(env, timeout_s=60) as base_url:
                results = asyncio.run(measure(base_url, token, args, levels))
        report(results)
        print(f"\nload average now {machine_load()} (other work on the machine skews the figures)")
    finally:
        shutil.rmtree(var_dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
