"""Benchmark: the trace list and its poll for new traces over a million traces, with the
trigram index on the task and, as the baseline in the same run, without it.

Run from the repository root::

    .venv/bin/python benchmarks/trace_list.py                  # 1,000,000 traces
    .venv/bin/python benchmarks/trace_list.py --traces 200000 --repeat 10

It writes ``--traces`` traces with one INSERT ... SELECT (tasks from a seeded vocabulary in
English and Chinese, each with its number; statuses, modes and days over a year; a third of
them each of three users), then, signed in as one of those users and as a staff member (who
sees everyone's), times through ``devassist.asgi.application`` with httpx:

- ``GET /traces/?...``: the list's first page for each filter below;
- its poll for new traces (``GET /traces/new/?...``, the URL the page itself polls every 5 s,
  answered 204 as nothing came).

Filters: none, a status, a word many tasks hold, a word few hold, a word a sixth of the tasks
hold but none of the user's, one task's number, two letters (too short for trigrams) and a word
no task holds (the search that reads every row without the index). Then it drops the index
(``trace_task_trgm``, ``traces/migrations/0013``), analyzes the table and times the same again:
the ratio is what the index saves. Targets (PASS/FAIL, with the index): each list p50 < 200
ms, each poll p50 < 50 ms. The exit code is 0 whatever the verdicts. PostgreSQL comes from
``BENCH_DATABASE_URL`` (default
``postgres://postgres@127.0.0.1:5432/devassist_bench_list``), dropped and created afresh.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shutil
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import Measurement, verdict
from benchmarks.trace_page import session_cookie
from benchmarks.trace_tree import configure_environment, machine_load, recreate_database

DEFAULT_DATABASE_URL = "postgres://postgres@127.0.0.1:5432/devassist_bench_list"
TARGET_LIST_MS = 200.0
TARGET_POLL_MS = 50.0
POLL = re.compile(rb'<div id="new-traces" hx-get="([^"]+)"')

#: (label, query string) of the list's first page.
FILTERS = [
    ("no filter", ""),
    ("status=failed", "status=failed"),
    ("a word many tasks hold", "q=deploy"),
    ("a word few tasks hold", "q=flamegraph"),
    ("a word only others' tasks hold", "q=kubernetes"),
    ("one task's number", "q=%23424242"),
    ("two letters", "q=pa"),
    ("a word no task holds", "q=zebra"),
]

VERBS = ["Fix", "Deploy", "Refactor", "Summarise", "Search", "Plot", "Explain", "调试", "部署"]
NOUNS = ["the parser", "the flaky test", "the release notes", "the CSV import", "数据管道", "日志"]
RARE = "flamegraph"  # one task in 5,000 holds it
THEIRS = "kubernetes"  # a task in six, none of the first user's


def write_traces(count: int) -> float:
    """``count`` traces for three users, written by PostgreSQL itself; returns the seconds."""
    from django.contrib.auth.models import User
    from django.db import connection

    users = [User.objects.create(username=f"bench-{i}").pk for i in range(3)]
    started = time.perf_counter()
    with connection.cursor() as cursor:
        cursor.execute(
            """
            INSERT INTO traces_trace (id, mode, task, agent_type, status, total_steps,
                total_tokens, total_cost, error_count, root_count, last_seq, created_at,
                metadata, user_id)
            SELECT gen_random_uuid(),
                CASE WHEN i %% 5 = 0 THEN 'call' ELSE 'agent' END,
                (%s::text[])[1 + (i / 3) %% %s] || ' ' || (%s::text[])[1 + (i / 7) %% %s]
                    || CASE WHEN i %% 5000 = 17 THEN ' with a ' || %s ELSE '' END
                    || CASE WHEN i %% 3 > 0 AND i %% 4 = 0 THEN ' on ' || %s ELSE '' END
                    || ' #' || i,
                'devassist',
                (ARRAY['completed', 'completed', 'failed', 'running'])[1 + i %% 4],
                12, 900, 0, 0, 1, 12,
                now() - make_interval(secs => i * 31.5),
                '{}'::jsonb,
                (%s::int[])[1 + i %% 3]
            FROM generate_series(1, %s) AS i
            """,
            [VERBS, len(VERBS), NOUNS, len(NOUNS), RARE, THEIRS, users, count],
        )
        cursor.execute("ANALYZE traces_trace")
    return time.perf_counter() - started


async def timed(client: Any, name: str, url: str, repeat: int, status: int) -> Measurement:
    for _ in range(2):
        assert (await client.get(url)).status_code == status, url
    result = Measurement(name)
    for _ in range(repeat):
        started = time.perf_counter()
        response = await client.get(url)
        result.seconds.append(time.perf_counter() - started)
        assert response.status_code == status, (url, response.status_code)
    return result


async def measure(cookies: dict[str, tuple[str, str]], repeat: int) -> dict[str, Measurement]:
    """p50s of each viewer's list and poll for each filter, keyed ``viewer: filter: what``."""
    import httpx

    from devassist.asgi import application

    out: dict[str, Measurement] = {}
    for viewer, cookie in cookies.items():
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=application),
            base_url="http://127.0.0.1",
            cookies=dict([cookie]),
            timeout=None,
        ) as client:
            for label, query in FILTERS:
                page = f"/traces/?{query}"
                first = await client.get(page)
                found = POLL.search(first.content)
                assert found is not None, f"no poll on {page}"
                poll = found.group(1).decode().replace("&amp;", "&")
                name = f"{viewer}: {label}"
                out[f"{name}: list"] = await timed(client, name, page, repeat, 200)
                out[f"{name}: poll"] = await timed(client, name, poll, repeat, 204)
    return out


def drop_index() -> None:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("DROP INDEX trace_task_trgm")
        cursor.execute("ANALYZE traces_trace")


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Benchmark the trace list and its poll.")
    parser.add_argument("--traces", type=int, default=1_000_000, help="traces in the table")
    parser.add_argument("--repeat", type=int, default=20, help="timed requests per URL")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
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

        call_command("migrate", verbosity=0)
        print(f"wrote {args.traces:,} traces in {write_traces(args.traces):.1f} s")
        cookies = {
            "a user": session_cookie(User.objects.get(username="bench-0")),
            "staff": session_cookie(User.objects.create(username="bench-staff", is_staff=True)),
        }
        connection.close()
        indexed = asyncio.run(measure(cookies, args.repeat))
        drop_index()
        connection.close()
        plain = asyncio.run(measure(cookies, args.repeat))

        print(f"\n{'p50 ms':<52} {'indexed':>8} {'no index':>9} {'ratio':>7}")
        for key, with_index in indexed.items():
            without = plain[key]
            print(
                f"{key:<52} {with_index.p50_ms:8.1f} {without.p50_ms:9.1f}"
                f" {without.p50_ms / with_index.p50_ms:6.1f}x"
            )
        print("\ntargets (with the index)")
        for key, with_index in indexed.items():
            target = TARGET_LIST_MS if key.endswith("list") else TARGET_POLL_MS
            verdict(
                f"{key} p50 < {target:.0f} ms",
                with_index.p50_ms < target,
                f"{with_index.p50_ms:.1f} ms",
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
