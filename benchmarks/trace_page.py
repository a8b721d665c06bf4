"""Benchmark: the trace browser's first render of traces of 100, 10,000 and 100,000 steps.

Run from the repository root::

    .venv/bin/python benchmarks/trace_page.py [--sizes 100,10000,100000] [--repeat 20]

For each size it builds one trace of the seeded ReAct-like shape of ``benchmarks/trace_tree.py``
(iterations, uneven fan-out, sub-agents, failures, a few large payloads), then:

0. writes the trace with bulk INSERTs of the rows the store's batch builder makes (the store's
   own write path is what ``benchmarks/trace_tree.py`` times);
1. times ``GET /traces/<id>/`` (the first render, skeleton only) through
   ``devassist.asgi.application`` with httpx and a signed-in session, up to ``--repeat`` times
   after a warm-up, and counts its SQL queries; also a deep link (``?step=`` the deepest step)
   and one "show more" window of the widest node;
2. records the HTML size and the rows rendered (``<li class="node``);
3. opens the page in the system Chromium (Playwright) against a daphne server on the same
   database and counts the DOM's element nodes and tree rows once the page has loaded.

Targets (PASS/FAIL per size): first render p50 < 200 ms and < 2,000 rendered rows. The exit code
is 0 whatever the verdicts. PostgreSQL comes from ``BENCH_DATABASE_URL`` (default
``postgres://postgres@127.0.0.1:5432/devassist_bench_page``); that database is dropped and
created afresh on every run (deleting 100,000 steps row by row takes minutes: the deferred
self-referencing foreign key of every deleted step is checked at commit), so point it at a
database of its own.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shutil
import statistics
import sys
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import Measurement, verdict
from benchmarks.trace_tree import (
    BENCH_USERNAME,
    COUNTER,
    configure_environment,
    generate_steps,
    machine_load,
    recreate_database,
)

TARGET_P50_MS = 200.0
TARGET_ROWS = 2000
DEFAULT_DATABASE_URL = "postgres://postgres@127.0.0.1:5432/devassist_bench_page"
CHROMIUM = os.environ.get("CHROMIUM_PATH", "/usr/bin/chromium")
ROW = re.compile(rb'<li class="node')


@dataclass
class Built:
    steps: int
    trace_id: uuid.UUID
    deep_step: uuid.UUID
    deep_depth: int
    wide_step: uuid.UUID
    wide_children: int
    build_s: float


@dataclass
class Timed(Measurement):
    """Timings of a page with the queries, size and rows of each render."""

    queries: list[int] = field(default_factory=list)
    size: int = 0
    rows: int = 0


def bulk_steps(trace: Any, items: Sequence[Any]) -> list[Any]:
    """``items`` (``StepCreate``s, parents first) as ``Step`` rows with everything the store
    keeps on write (seq, depth, path, children counts, subtree rollups), computed by the
    store's own write builder 1,000 at a time, for ``bulk_create`` (the store's writes take a
    transaction per 1,000 steps; ``benchmarks/trace_tree.py`` times those)."""
    from traces.store import _Write

    write = _Write(trace)
    for start in range(0, len(items), 1000):
        write.add(items[start : start + 1000])
    return list(write.new_steps.values())


def build(user: Any, count: int, seed: int) -> Built:
    """One completed trace of ``count`` steps, written with bulk INSERTs of the rows the store's
    batch builder makes (``benchmarks/trace_tree.py`` times the store's own writes)."""
    from django.db import connection, transaction
    from django.db.models import Sum
    from django.utils import timezone

    from traces.models import Step, Trace

    started = time.perf_counter()
    trace = Trace.objects.create(
        user=user, task=f"Benchmark: {count:,} steps", agent_type="benchmark"
    )
    steps = bulk_steps(trace, generate_steps(count, seed))
    with transaction.atomic():
        Step.objects.bulk_create(steps, batch_size=2000)
        totals = Step.objects.for_trace(trace).aggregate(tokens=Sum("tokens"), cost=Sum("cost"))
        Trace.objects.filter(pk=trace.pk).update(
            status="completed",
            completed_at=timezone.now(),
            total_steps=len(steps),
            total_tokens=totals["tokens"] or 0,
            total_cost=totals["cost"] or 0,
            error_count=sum(1 for s in steps if s.is_error),
            root_count=sum(1 for s in steps if s.parent_id is None),
            last_seq=len(steps),
            total_duration_ms=60_000,
        )
    build_s = time.perf_counter() - started
    with connection.cursor() as cursor:
        cursor.execute(f"ANALYZE {Step._meta.db_table}")
    in_trace = Step.objects.for_trace(trace)
    deep = in_trace.order_by("-depth", "seq").values("id", "depth").first()
    wide = in_trace.order_by("-children_count", "seq").values("id", "children_count").first()
    assert deep is not None
    assert wide is not None
    return Built(
        steps=in_trace.count(),
        trace_id=trace.id,
        deep_step=deep["id"],
        deep_depth=deep["depth"],
        wide_step=wide["id"],
        wide_children=wide["children_count"],
        build_s=build_s,
    )


def session_cookie(user: Any) -> tuple[str, str]:
    from django.conf import settings
    from django.test import Client

    client = Client()
    client.force_login(user)
    return settings.SESSION_COOKIE_NAME, client.cookies[settings.SESSION_COOKIE_NAME].value


async def timed(client: Any, name: str, url: str, repeat: int) -> Timed:
    for _ in range(2):
        (await client.get(url)).raise_for_status()
    result = Timed(name)
    for _ in range(repeat):
        before = COUNTER.count
        started = time.perf_counter()
        response = await client.get(url)
        result.seconds.append(time.perf_counter() - started)
        response.raise_for_status()
        result.queries.append(COUNTER.count - before)
        result.size = len(response.content)
        result.rows = len(ROW.findall(response.content))
    return result


async def measure_server(built: list[Built], cookie: tuple[str, str], repeat: int) -> list[Timed]:
    import httpx

    from devassist.asgi import application

    results = []
    transport = httpx.ASGITransport(app=application)
    async with httpx.AsyncClient(
        transport=transport, base_url="http://127.0.0.1", cookies=dict([cookie]), timeout=None
    ) as client:
        for b in built:
            page = f"/traces/{b.trace_id}/"
            results.append(await timed(client, f"{b.steps:,}: first render", page, repeat))
            results.append(
                await timed(
                    client,
                    f"{b.steps:,}: deep link (depth {b.deep_depth})",
                    f"{page}?step={b.deep_step}",
                    repeat,
                )
            )
            results.append(
                await timed(
                    client,
                    f"{b.steps:,}: show more ({b.wide_children:,} children)",
                    f"{page}children/{b.wide_step}/?offset={min(50, b.wide_children - 1)}&dir=next",
                    repeat,
                )
            )
    return results


def measure_dom(built: list[Built], cookie: tuple[str, str]) -> dict[int, tuple[int, int, float]]:
    """Per size: (DOM elements, tree rows, load ms) of the page in Chromium via daphne."""
    from django.db import connection
    from playwright.sync_api import sync_playwright

    from tests.servers import daphne_server

    database = connection.settings_dict
    env = {
        "DATABASE_URL": (
            f"postgres://{database['USER']}@{database['HOST']}:{database['PORT']}"
            f"/{database['NAME']}"
        ),
        "DEVASSIST_VAR_DIR": os.environ["DEVASSIST_VAR_DIR"],
        "SANDBOX_WARM_ON_START": "0",
        "SANDBOX_POOL_SIZE": "0",
        "LOG_LEVEL": "WARNING",
    }
    out: dict[int, tuple[int, int, float]] = {}
    with daphne_server(env) as base_url, sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM, args=["--headless", "--no-sandbox", "--disable-gpu"]
        )
        context = browser.new_context(base_url=base_url)
        context.add_cookies([{"name": cookie[0], "value": cookie[1], "url": base_url}])
        page = context.new_page()
        for b in built:
            page.goto(f"/traces/{b.trace_id}/", wait_until="load")
            elements = page.evaluate("document.getElementsByTagName('*').length")
            rows = page.evaluate("document.querySelectorAll('#tree li.node').length")
            load_ms = page.evaluate(
                "(() => { const t = performance.getEntriesByType('navigation')[0];"
                " return t.loadEventEnd - t.startTime; })()"
            )
            out[b.steps] = (elements, rows, load_ms)
        browser.close()
    return out


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Benchmark the trace page's first render.")
    parser.add_argument("--sizes", default="100,10000,100000", help="comma-separated step counts")
    parser.add_argument("--repeat", type=int, default=20, help="timed requests per page")
    parser.add_argument("--seed", type=int, default=20250101)
    parser.add_argument("--no-browser", action="store_true", help="skip the Chromium DOM count")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    run_started = time.perf_counter()
    var_dir = configure_environment(default_database_url=DEFAULT_DATABASE_URL)
    os.environ["DEBUG"] = "0"
    print(f"{os.cpu_count()} CPUs, load average {machine_load()}")
    try:
        recreate_database(os.environ["DATABASE_URL"])
        import django

        django.setup()
        from django.contrib.auth.models import User
        from django.core.management import call_command
        from django.db import connection
        from django.db.backends.signals import connection_created

        connection_created.connect(COUNTER.attach, weak=False)
        call_command("migrate", verbosity=0)
        user = User.objects.create(username=BENCH_USERNAME)
        built = []
        for size in sizes:
            b = build(user, size, args.seed + size)
            print(
                f"built {b.steps:,} steps in {b.build_s:.1f} s (depth {b.deep_depth}, widest "
                f"node {b.wide_children:,} children)"
            )
            built.append(b)
        cookie = session_cookie(user)
        connection.close()
        results = asyncio.run(measure_server(built, cookie, args.repeat))
        dom = {} if args.no_browser else measure_dom(built, cookie)

        print(f"\n{'request':<42} {'p50 ms':>8} {'p95 ms':>8} {'queries':>8} {'KB':>8} {'rows':>6}")
        for r in results:
            queries = statistics.median_low(r.queries)
            print(
                f"{r.name:<42} {r.p50_ms:8.1f} {r.p95_ms:8.1f} {queries:8d}"
                f" {r.size / 1024:8.1f} {r.rows:6d}"
            )
        if dom:
            print(f"\n{'Chromium':<42} {'elements':>8} {'rows':>8} {'load ms':>8}")
            for steps, (elements, rows, load_ms) in dom.items():
                print(f"{f'{steps:,} steps':<42} {elements:8d} {rows:8d} {load_ms:8.0f}")
        print("\ntargets")
        for b, first in zip(built, results[::3], strict=True):
            rows = dom.get(b.steps, (0, first.rows, 0))[1]
            shown = max(rows, first.rows)
            verdict(
                f"{b.steps:,} steps: first render p50 < {TARGET_P50_MS:.0f} ms",
                first.p50_ms < TARGET_P50_MS,
                f"{first.p50_ms:.0f} ms",
            )
            verdict(
                f"{b.steps:,} steps: rows shown < {TARGET_ROWS:,}", shown < TARGET_ROWS, f"{shown}"
            )
        print(
            f"\nwhole run {time.perf_counter() - run_started:.0f} s; load average now "
            f"{machine_load()}"
        )
    finally:
        shutil.rmtree(var_dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
