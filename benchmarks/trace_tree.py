"""Benchmark: reading a big trace tree through the real ASGI app, against naive N+1 loaders.

Run from the repository root::

    .venv/bin/python benchmarks/trace_tree.py [--steps 10000] [--repeat 30] [--profile]

It builds one trace of ``--steps`` steps through the trace store (a goal root, ReAct-like
thought -> action -> result iterations, sub-agent subtrees under some results, uneven fan-out,
failed steps, a few large payloads), then times ``GET /api/traces/{id}/tree`` (compact and full)
and the node windows through ``devassist.asgi.application`` with httpx, counts the SQL queries
of every request, times two naive loaders in the same run (one HTTP request per node with
children, and one ORM query per node) and prints PASS/FAIL for the targets. The exit code is 0
whatever the verdicts.

PostgreSQL comes from ``BENCH_DATABASE_URL`` (default
``postgres://postgres@127.0.0.1:5432/devassist_bench``); the database is created when missing and
the traces of earlier runs are deleted first.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import os
import random
import shutil
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))  # run as a script: make the project importable

from benchmarks import common  # noqa: E402 - after the path above
from benchmarks.common import profile_report, verdict  # noqa: E402

DEFAULT_DATABASE_URL = "postgres://postgres@127.0.0.1:5432/devassist_bench"
BENCH_USERNAME = "trace-benchmark"
BENCH_AGENT_TYPE = "benchmark"
BATCH_SIZE = 1000

MIN_RUNS = 5

TARGET_INGEST_S = 2.0
TARGET_TREE_P50_MS = 300.0
TARGET_TREE_QUERIES = 3
TARGET_NODE_P50_MS = 25.0
TARGET_NAIVE_RATIO = 20.0


# --- environment and database -------------------------------------------------------------------


def configure_environment(
    *,
    default_database_url: str = DEFAULT_DATABASE_URL,
    var_prefix: str = "devassist-bench-var-",
    redis_url: str | None = None,
) -> str:
    """Point the project's settings at a benchmark database (``BENCH_DATABASE_URL`` wins), a
    throwaway var dir and, with ``redis_url``, the Redis channel layer; returns the var dir so
    it can be removed at the end. Subprocesses inherit this environment."""
    var_dir = tempfile.mkdtemp(prefix=var_prefix)
    os.environ["DJANGO_SETTINGS_MODULE"] = "devassist.settings"
    os.environ["DATABASE_URL"] = os.environ.get("BENCH_DATABASE_URL", default_database_url)
    os.environ["DEVASSIST_VAR_DIR"] = var_dir
    os.environ["LOG_LEVEL"] = "WARNING"
    os.environ.pop("DEBUG", None)
    # Importing the ASGI app would otherwise start sandbox containers beside the measurements.
    os.environ["SANDBOX_WARM_ON_START"] = "0"
    if redis_url:
        os.environ["REDIS_URL"] = redis_url
        os.environ["CHANNELS_PREFIX"] = "devassist-bench"
    else:
        os.environ.pop("REDIS_URL", None)
    return var_dir


def ensure_database(url: str) -> None:
    """Create the database named in ``url`` when it does not exist yet."""
    import psycopg
    from psycopg import sql
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    name = conninfo_to_dict(url).get("dbname")
    if not name:
        raise SystemExit(f"No database name in {url!r}")
    with psycopg.connect(make_conninfo(url, dbname="postgres"), autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone()
        if exists is None:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(str(name))))
            print(f"created database {name}")


def recreate_database(url: str) -> None:
    """Drop the database named in ``url`` (if it exists) and create it empty."""
    import psycopg
    from psycopg import sql
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    name = conninfo_to_dict(url).get("dbname")
    if not name:
        raise SystemExit(f"No database name in {url!r}")
    with psycopg.connect(make_conninfo(url, dbname="postgres"), autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {}").format(sql.Identifier(str(name))))
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(str(name))))


# --- query counting -----------------------------------------------------------------------------


class QueryCounter:
    """Counts the queries of every Django connection, whatever thread it lives on.

    Django's ASGI handler runs each request's sync code (auth, ORM) in a fresh thread of its
    own (asgiref ``ThreadSensitiveContext``), so each request gets a new thread-local
    connection: a capture on any one thread's connection would see nothing. Instead this
    execute wrapper is attached to every connection as it is created (``connection_created``).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.count = 0
        self.recording: list[str] | None = None

    def attach(self, sender: Any, connection: Any, **kwargs: Any) -> None:
        if self not in connection.execute_wrappers:
            connection.execute_wrappers.append(self)

    def __call__(
        self, execute: Callable[..., Any], sql: str, params: Any, many: bool, context: Any
    ) -> Any:
        with self._lock:
            self.count += 1
            if self.recording is not None:
                self.recording.append(sql)
        return execute(sql, params, many, context)


COUNTER = QueryCounter()


# --- the trace ----------------------------------------------------------------------------------

WORDS = (
    "parse", "config", "module", "request", "handler", "cache", "index", "query", "latency",
    "token", "budget", "retry", "stream", "socket", "schema", "migration", "fixture", "assert",
    "coverage", "branch", "commit", "diff", "patch", "lint", "docker", "sandbox", "container",
    "timeout", "buffer", "offset", "window", "cursor", "vector", "embedding", "chunk", "summary",
    "plan", "review", "refactor", "function", "class", "import", "error", "trace", "span",
)  # fmt: skip
TOOLS = ("search_code", "read_file", "run_tests", "shell", "web_search", "edit_file", "grep")


class _BudgetSpent(Exception):
    """The tree has all the steps it was asked for."""


@dataclass
class TreePlan:
    """Generates steps depth-first (parents before children) until ``limit`` is reached."""

    rng: random.Random
    limit: int
    steps: list[Any] = field(default_factory=list)
    clock: datetime = field(default_factory=lambda: datetime(2025, 1, 1, tzinfo=UTC))

    def text(self, low: int, high: int) -> str:
        return " ".join(self.rng.choices(WORDS, k=self.rng.randint(low, high)))

    def add(self, step_type: str, parent_id: uuid.UUID | None, **fields: Any) -> uuid.UUID:
        from traces.store import StepCreate

        if len(self.steps) >= self.limit:
            raise _BudgetSpent
        duration = self.rng.randint(1, 3000)
        started = self.clock
        self.clock += timedelta(milliseconds=self.rng.randint(1, 50))
        step_id = uuid.UUID(int=self.rng.getrandbits(128), version=4)
        self.steps.append(
            StepCreate(
                id=step_id,
                parent_id=parent_id,
                step_type=step_type,
                name=fields.pop("name", step_type),
                description=fields.pop("description", self.text(3, 12)),
                started_at=started,
                finished_at=started + timedelta(milliseconds=duration),
                duration_ms=duration,
                **fields,
            )
        )
        return step_id

    def agent(self, parent_id: uuid.UUID | None, level: int, budget: int) -> None:
        """A goal with iterations until ``budget`` steps are used, then a response."""
        goal = self.add(
            "goal",
            parent_id,
            name="sub-agent" if level else "goal",
            data={"task": self.text(8, 30), "level": level},
        )
        end = len(self.steps) + budget
        while len(self.steps) < end - 1:
            self.iteration(goal, level)
        self.add("response", goal, data={"text": self.text(10, 60)})

    def iteration(self, goal: uuid.UUID, level: int) -> None:
        rng = self.rng
        tokens = rng.randint(40, 4000)
        thought = self.add(
            "thought",
            goal,
            name="reason",
            data={"text": self.text(10, 50)},
            tokens=tokens,
            cost=(Decimal(tokens) * Decimal("0.0000025")).quantize(Decimal("0.00000001")),
            # A few long descriptions, which the compact view cuts to 200 characters.
            description=self.text(60, 120) if rng.random() < 0.05 else self.text(3, 12),
        )
        for _ in range(rng.choices((0, 1, 2, 3, 6), weights=(6, 60, 20, 10, 4))[0]):
            tool = rng.choice(TOOLS)
            action = self.add(
                "action",
                thought,
                name=tool,
                data={"tool": tool, "args": {"query": self.text(2, 8), "limit": 20}},
            )
            fan_out = rng.choices(
                (0, 1, rng.randint(2, 8), rng.randint(10, 40)), weights=(4, 60, 26, 10)
            )[0]
            for _ in range(fan_out):
                self.result(action, level)

    def result(self, action: uuid.UUID, level: int) -> None:
        rng = self.rng
        fields: dict[str, Any] = {"data": {"output": self.text(5, 40), "exit_code": 0}}
        if rng.random() < 0.04:
            fields["status"] = "failed"
            fields["error"] = "Traceback (most recent call last):\n" + self.text(20, 120)
            fields["data"] = {"output": "", "exit_code": 1}
        elif rng.random() < 0.015:
            # A large tool output (4-32 KB), as a file read or a test log produces.
            fields["data"] = {"output": self.text(600, 5000), "exit_code": 0}
        result = self.add("result", action, name="observation", **fields)
        # Sub-agents get rarer and smaller with nesting; three levels reach depth 15.
        if level < 3 and rng.random() < 0.01 / (level + 1):
            self.agent(result, level + 1, rng.randint(40, 500) // (level + 1))


def generate_steps(count: int, seed: int) -> list[Any]:
    """``count`` steps of one agent run, parents first, deterministic for a seed."""
    plan = TreePlan(rng=random.Random(seed), limit=count)
    with contextlib.suppress(_BudgetSpent):
        plan.agent(None, 0, count)
    return plan.steps


@dataclass(frozen=True)
class BenchTrace:
    trace_id: uuid.UUID
    token: str
    total_steps: int
    max_depth: int
    wide_step_id: uuid.UUID
    wide_children: int
    root_children: int
    build_seconds: float


def build_trace(step_count: int, seed: int) -> BenchTrace:
    """Create the benchmark user, a token and the trace (through the store), synchronously."""
    from asgiref.sync import async_to_sync
    from django.contrib.auth.models import User
    from django.db import connection
    from django.db.models import Max

    from devassist.tokens import api_token_create
    from traces.models import Step
    from traces.store import get_trace_store

    user, _ = User.objects.get_or_create(username=BENCH_USERNAME)
    _delete_old_traces(user)
    _, token = api_token_create(user=user, name="trace benchmark")

    steps = generate_steps(step_count, seed)
    store = get_trace_store()
    started = time.perf_counter()
    trace = async_to_sync(store.create_trace)(
        user=user, task="Benchmark: a large agent run", agent_type=BENCH_AGENT_TYPE
    )
    for start in range(0, len(steps), BATCH_SIZE):
        store.add_steps_sync(trace.id, steps[start : start + BATCH_SIZE])
    async_to_sync(store.complete_trace)(trace.id)
    build_seconds = time.perf_counter() - started

    with connection.cursor() as cursor:
        # Fresh statistics, as autovacuum would have them on a live database.
        cursor.execute(f"ANALYZE {Step._meta.db_table}")
    in_trace = Step.objects.for_trace(trace)
    wide = in_trace.order_by("-children_count", "seq").values("id", "children_count").first()
    assert wide is not None
    root = in_trace.roots().get()
    return BenchTrace(
        trace_id=trace.id,
        token=token,
        total_steps=in_trace.count(),
        max_depth=in_trace.aggregate(deepest=Max("depth"))["deepest"],
        wide_step_id=wide["id"],
        wide_children=wide["children_count"],
        root_children=root.children_count,
        build_seconds=build_seconds,
    )


def _delete_old_traces(user: Any) -> None:
    """Drop earlier runs' traces with plain DELETEs (the ORM's cascade walks every step)."""
    from django.db import connection, transaction

    from traces.models import Step, Trace, TraceEvent

    old = [str(pk) for pk in Trace.objects.filter(user=user).values_list("pk", flat=True)]
    if not old:
        return
    with transaction.atomic(), connection.cursor() as cursor:
        for model in (TraceEvent, Step, Trace):
            column = "id" if model is Trace else "trace_id"
            cursor.execute(
                f"DELETE FROM {model._meta.db_table} WHERE {column} = ANY(%s::uuid[])", [old]
            )


# --- measuring ----------------------------------------------------------------------------------


@dataclass
class Measurement(common.Measurement):
    """Timings with the queries each request made and the answer's size."""

    queries: list[int] = field(default_factory=list)
    size_bytes: int = 0
    requests: int = 1

    @property
    def typical_queries(self) -> int:
        return int(statistics.median_low(self.queries))

    @property
    def queries_label(self) -> str:
        if not self.queries:
            return "-"
        typical, most = self.typical_queries, max(self.queries)
        return f"{typical}" if most == typical else f"{typical} (max {most})"


async def measure_get(
    client: Any, name: str, url: str, args: argparse.Namespace, warmup: int = 2
) -> Measurement:
    """Time up to ``args.repeat`` sequential GETs of ``url`` after ``warmup`` untimed ones,
    stopping early (after at least ``MIN_RUNS``) once ``args.budget`` seconds are spent."""
    for _ in range(warmup):
        (await client.get(url)).raise_for_status()
    result = Measurement(name)
    while len(result.seconds) < args.repeat and (
        len(result.seconds) < MIN_RUNS or sum(result.seconds) < args.budget
    ):
        before = COUNTER.count
        started = time.perf_counter()
        response = await client.get(url)
        elapsed = time.perf_counter() - started
        response.raise_for_status()
        result.seconds.append(elapsed)
        result.queries.append(COUNTER.count - before)
        result.size_bytes = len(response.content)
    return result


async def recorded_queries(client: Any, url: str) -> list[str]:
    """The SQL of one GET of ``url``."""
    COUNTER.recording = []
    try:
        (await client.get(url)).raise_for_status()
        return COUNTER.recording
    finally:
        COUNTER.recording = None


async def naive_http_tree(
    client: Any, trace_id: uuid.UUID
) -> tuple[list[dict[str, Any]], int, int]:
    """The tree as a client without the tree endpoint loads it: the top level, then the children
    of every node that has any, 500 at a time. Returns (roots, requests, bytes)."""
    requests = 0
    size = 0

    async def children_of(node: str) -> list[dict[str, Any]]:
        nonlocal requests, size
        children: list[dict[str, Any]] = []
        offset: int | None = 0
        while offset is not None:
            response = await client.get(
                f"/api/traces/{trace_id}/node/{node}", params={"limit": 500, "offset": offset}
            )
            response.raise_for_status()
            requests += 1
            size += len(response.content)
            body = response.json()
            children.extend(body["children"])
            offset = body["next_offset"]
        for child in children:
            child["children"] = await children_of(child["step_id"]) if child["has_children"] else []
        return children

    roots = await children_of("root")
    return roots, requests, size


def naive_orm_tree(trace_id: uuid.UUID) -> list[dict[str, Any]]:
    """The tree the N+1 way on the ORM: one ``filter(parent=...)`` query per step."""
    from traces.models import Step

    def children_of(parent: Step | None) -> list[dict[str, Any]]:
        if parent is None:
            rows = Step.objects.filter(trace_id=trace_id, parent__isnull=True)
        else:
            rows = Step.objects.filter(trace_id=trace_id, parent=parent)
        return [
            {"step_id": str(step.id), "children": children_of(step)}
            for step in rows.order_by("seq")
        ]

    return children_of(None)


def flatten(nodes: Sequence[dict[str, Any]]) -> list[tuple[str, str | None]]:
    """(step_id, parent_id) pairs depth-first, to compare two loaded trees."""
    out: list[tuple[str, str | None]] = []
    stack: list[tuple[dict[str, Any], str | None]] = [(n, None) for n in reversed(nodes)]
    while stack:
        node, parent = stack.pop()
        out.append((node["step_id"], parent))
        stack.extend((c, node["step_id"]) for c in reversed(node["children"]))
    return out


def tree_max_depth(nodes: Sequence[dict[str, Any]]) -> int:
    deepest = -1
    stack = [(n, 0) for n in nodes]
    while stack:
        node, depth = stack.pop()
        deepest = max(deepest, depth)
        stack.extend((c, depth + 1) for c in node["children"])
    return deepest


def connection_setup_ms(samples: int = 10) -> float:
    """Median cost of opening a Django database connection: the ASGI handler opens one per
    request, because each request's sync code runs on a new thread."""
    from django.db import connection

    times = []
    for _ in range(samples):
        connection.close()
        started = time.perf_counter()
        connection.ensure_connection()
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1000


@dataclass(frozen=True)
class Parts:
    """Median ms of a response's parts, run in-process, and an optional cProfile report."""

    label: str
    medians_ms: dict[str, float]
    profile: str | None


def response_parts(bench: BenchTrace, label: str, repeat: int, profile: bool) -> Parts:
    """Time the parts of the tree (``label`` "tree compact" / "tree full") or the widest node's
    first window ("node window") in-process: the selector's queries and dict building, and the
    JSON encoding the endpoint does (``devassist.responses.json_bytes``)."""
    from devassist.responses import json_bytes
    from traces import selectors
    from traces.projections import trace_dict

    trace = selectors.trace_get(trace_id=bench.trace_id)

    if label == "node window":
        store_part = "selectors.node_window"

        def load() -> dict[str, Any]:
            window = selectors.node_window(trace_id=trace.id, step_id=bench.wide_step_id, limit=100)
            return {
                "step": window.step,
                "children": window.children,
                "total_children": window.total_children,
                "next_offset": window.next_offset,
            }
    else:
        store_part = "selectors.trace_tree"
        full = label == "tree full"

        def load() -> dict[str, Any]:
            roots = selectors.trace_tree(trace=trace, full=full)
            return {"trace": trace_dict(trace), "root_steps": roots}

    times: dict[str, list[float]] = {store_part: [], "render": []}
    profiler = cProfile.Profile() if profile else None
    for index in range(repeat + 1):
        if profiler is not None and index == repeat:
            profiler.enable()
        started = time.perf_counter()
        body = load()
        loaded = time.perf_counter()
        json_bytes(body)
        rendered = time.perf_counter()
        if profiler is not None and index == repeat:
            profiler.disable()
        if index == 0:
            continue  # warm-up
        times[store_part].append(loaded - started)
        times["render"].append(rendered - loaded)
    report = profile_report(profiler, "tottime", 15) if profiler is not None else None
    medians = {name: statistics.median(values) * 1000 for name, values in times.items()}
    return Parts(label, medians, report)


# --- the run ------------------------------------------------------------------------------------


def another_naive_run(measurement: Measurement, args: argparse.Namespace) -> bool:
    """At least one run, then more while under ``--naive-repeat`` and ``--naive-budget``."""
    if not measurement.seconds:
        return True
    return (
        len(measurement.seconds) < args.naive_repeat
        and sum(measurement.seconds) < args.naive_budget
    )


async def run(bench: BenchTrace, args: argparse.Namespace) -> None:
    import httpx
    from asgiref.sync import sync_to_async

    from devassist.asgi import application

    base = f"/api/traces/{bench.trace_id}"
    tree_url = f"{base}/tree"
    wide_url = f"{base}/node/{bench.wide_step_id}?limit=100"
    transport = httpx.ASGITransport(app=application)
    headers = {"Authorization": f"Bearer {bench.token}"}
    async with httpx.AsyncClient(
        transport=transport, base_url="http://127.0.0.1", headers=headers, timeout=None
    ) as client:
        (await client.get(f"{base}/node/root?limit=1")).raise_for_status()
        compact_sql = await recorded_queries(client, tree_url)
        print(f"\nqueries of one compact tree request ({len(compact_sql)}):")
        for statement in compact_sql:
            print(f"  {' '.join(statement.split())[:110]}")

        results = [
            await measure_get(client, "tree compact", tree_url, args, warmup=1),
            await measure_get(client, "tree full", f"{tree_url}?view=full", args, warmup=1),
            await measure_get(client, "node root", f"{base}/node/root?limit=100", args),
            await measure_get(client, f"node wide ({bench.wide_children} ch.)", wide_url, args),
            await measure_get(client, "node wide offset=100", f"{wide_url}&offset=100", args),
        ]
        node_results = results[2:]

        compact_tree = (await client.get(tree_url)).json()["root_steps"]
        naive = Measurement("naive HTTP loader")
        naive_tree: list[dict[str, Any]] = []
        while another_naive_run(naive, args):
            before = COUNTER.count
            started = time.perf_counter()
            naive_tree, requests, size = await naive_http_tree(client, bench.trace_id)
            naive.seconds.append(time.perf_counter() - started)
            naive.queries.append(COUNTER.count - before)
            naive.size_bytes, naive.requests = size, requests
        results.append(naive)

    orm = Measurement("naive ORM loader", requests=0)
    orm_tree: list[dict[str, Any]] = []
    while another_naive_run(orm, args):
        before = COUNTER.count
        started = time.perf_counter()
        orm_tree = await sync_to_async(naive_orm_tree)(bench.trace_id)
        orm.seconds.append(time.perf_counter() - started)
        orm.queries.append(COUNTER.count - before)
    results.append(orm)

    connect_ms = await sync_to_async(connection_setup_ms)()
    labels = ["tree compact", "node window"] + (["tree full"] if args.profile else [])
    parts = [
        await sync_to_async(response_parts)(
            bench, label, 20 if label == "node window" else 3, args.profile
        )
        for label in labels
    ]

    print_checks(bench, compact_tree, naive_tree, orm_tree)
    print_table(results)
    print(f"\nopening a database connection (once per request under ASGI): {connect_ms:.1f} ms")
    for part in parts:
        listed = ", ".join(f"{name} {ms:.1f} ms" for name, ms in part.medians_ms.items())
        print(f"{part.label}, parts run in-process (p50): {listed}")
    print_verdicts(bench, results[0], node_results, naive, orm)
    for part in parts:
        if part.profile:
            print(f"\ncProfile of one in-process {part.label} response:\n{part.profile}")


def print_checks(
    bench: BenchTrace,
    compact_tree: list[dict[str, Any]],
    naive_tree: list[dict[str, Any]],
    orm_tree: list[dict[str, Any]],
) -> None:
    compact = flatten(compact_tree)
    same = compact == flatten(naive_tree) == flatten(orm_tree)
    print(
        f"\nloaded trees: tree endpoint {len(compact)} steps, "
        f"depth {tree_max_depth(compact_tree)}; "
        f"naive loaders give the same tree: {'yes' if same else 'NO'}"
    )
    if len(compact) != bench.total_steps or not same:
        print("WARNING: the loaded trees do not match the stored trace")


def print_table(results: Sequence[Measurement]) -> None:
    print()
    header = (
        f"{'measurement':<28}{'runs':>5}{'p50 ms':>11}{'p95 ms':>11}"
        f"{'queries/run':>13}{'requests':>10}{'size':>12}"
    )
    print(header)
    print("-" * len(header))
    for m in results:
        queries = f"{m.typical_queries}"
        if max(m.queries) != m.typical_queries:
            queries += f" (max {max(m.queries)})"
        size = f"{m.size_bytes / 1024:,.0f} KiB" if m.size_bytes else "-"
        print(
            f"{m.name:<28}{len(m.seconds):>5}{m.p50_ms:>11.1f}{m.p95_ms:>11.1f}"
            f"{queries:>13}{m.requests:>10}{size:>12}"
        )


def print_verdicts(
    bench: BenchTrace,
    compact: Measurement,
    nodes: Sequence[Measurement],
    naive: Measurement,
    orm: Measurement,
) -> None:
    http_ratio = naive.p50_ms / compact.p50_ms
    orm_ratio = orm.p50_ms / compact.p50_ms
    print(f"\nnaive HTTP loader / compact tree (p50): {http_ratio:.1f}x")
    print(f"naive ORM loader / compact tree (p50):  {orm_ratio:.1f}x")
    print("\ntargets:")
    verdict(
        f"ingest of {bench.total_steps:,} steps in batches of {BATCH_SIZE:,} "
        f"< {TARGET_INGEST_S:.0f} s",
        bench.build_seconds < TARGET_INGEST_S,
        f"{bench.build_seconds:.2f} s",
    )
    verdict(
        f"compact tree of {bench.total_steps:,} steps p50 < {TARGET_TREE_P50_MS:.0f} ms "
        f"with <= {TARGET_TREE_QUERIES} queries",
        compact.p50_ms < TARGET_TREE_P50_MS and compact.typical_queries <= TARGET_TREE_QUERIES,
        f"{compact.p50_ms:.1f} ms, {compact.typical_queries} queries",
    )
    for node in nodes:
        verdict(
            f"{node.name} p50 < {TARGET_NODE_P50_MS:.0f} ms",
            node.p50_ms < TARGET_NODE_P50_MS,
            f"{node.p50_ms:.1f} ms",
        )
    verdict(
        f"compact tree >= {TARGET_NAIVE_RATIO:.0f}x faster than the naive HTTP loader",
        http_ratio >= TARGET_NAIVE_RATIO,
        f"{http_ratio:.1f}x",
    )


def machine_load() -> str:
    return " ".join(f"{value:.2f}" for value in os.getloadavg())


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Benchmark the trace tree and node endpoints.")
    parser.add_argument("--steps", type=int, default=10_000, help="steps in the trace")
    parser.add_argument("--repeat", type=int, default=30, help="timed requests per endpoint")
    parser.add_argument(
        "--budget",
        type=float,
        default=12.0,
        help=f"seconds after which an endpoint stops repeating (at least {MIN_RUNS} runs)",
    )
    parser.add_argument(
        "--naive-repeat", type=int, default=3, help="timed runs of each naive loader"
    )
    parser.add_argument(
        "--naive-budget",
        type=float,
        default=20.0,
        help="seconds after which a naive loader stops repeating (at least one run)",
    )
    parser.add_argument("--seed", type=int, default=20250101, help="seed of the tree's shape")
    parser.add_argument(
        "--profile", action="store_true", help="print a cProfile of the compact tree's parts"
    )
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    run_started = time.perf_counter()
    var_dir = configure_environment()
    print(f"{os.cpu_count()} CPUs, load average {machine_load()}")
    try:
        ensure_database(os.environ["DATABASE_URL"])

        import django
        from django.core.management import call_command
        from django.db import connection
        from django.db.backends.signals import connection_created

        django.setup()
        connection_created.connect(COUNTER.attach, weak=False)
        call_command("migrate", verbosity=0)

        bench = build_trace(args.steps, args.seed)
        print(
            f"built trace {bench.trace_id}: {bench.total_steps} steps, depth {bench.max_depth}, "
            f"root fan-out {bench.root_children}, widest node {bench.wide_children} children, "
            f"in {bench.build_seconds:.2f} s "
            f"({bench.total_steps / bench.build_seconds:,.0f} steps/s, "
            f"batches of {BATCH_SIZE})"
        )
        connection.close()
        asyncio.run(run(bench, args))
        print(
            f"\nwhole run {time.perf_counter() - run_started:.0f} s; "
            f"load average now {machine_load()} (other work on the machine skews the figures)"
        )
    finally:
        shutil.rmtree(var_dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
