"""Benchmark: the debug panel's data for one run of 2,000 model and tool calls.

Run from the repository root::

    .venv/bin/python benchmarks/debug_merge.py [--calls 2000] [--repeat 30] [--profile]

PostgreSQL comes from ``BENCH_DATABASE_URL`` (default
``postgres://postgres@127.0.0.1:5432/devassist_debug_bench``); the database is created and
migrated when missing, and the benchmark user's conversations from earlier runs are deleted.

1. Stores one conversation with one finished run of ``--calls`` calls (``--calls / 2`` ReAct
   iterations: a ``thought`` step, its ``action`` and ``result``), as the run recorder writes it:
   the goal and the two memory reads, the final model call and the ``response`` step, and the
   messages, each pointing at its step (the user's request, the long-term memory, the model's
   raw outputs, the tool observations, the answer).
2. Times what a superuser waits for: ``GET /api/conversations/{id}/debug`` through the Django
   test client (session, routing, the four queries, the join, the JSON answer), and the parts
   of it: ``conversation_debug`` (the queries and the join) and ``debug_view`` alone on the rows
   in memory, for the finished run and for the same run in progress (its transcript not stored
   yet). Wall-clock p50/p95, and the p50 of the process's CPU time (less inflated by other work
   on the machine). The query count is checked (four, whatever the size).
3. Linearity: the join at a quarter, half, the full and twice the size.
4. Baseline in the same run: the same messages read with each one's step loaded on its own
   (``message.step``, one query per message: the N+1 a join avoids).

Prints PASS/FAIL for the target (the API's answer for 2,000 calls, p50 under 150 ms) with the
ratio of the figure to it; the exit code is 0 whatever the verdict.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import shutil
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))  # run as a script: make the project importable

from benchmarks.common import Measurement, profile_report, verdict  # noqa: E402
from benchmarks.trace_tree import (  # noqa: E402
    configure_environment,
    ensure_database,
    machine_load,
)

DEFAULT_DATABASE_URL = "postgres://postgres@127.0.0.1:5432/devassist_debug_bench"
BENCH_USERNAME = "debug-benchmark"
TARGET_P50_MS = 150.0
TARGET_QUERIES = 4


# --- the rows ---------------------------------------------------------------------------------


@dataclass
class Rows:
    """One conversation's rows, unsaved until ``store``."""

    conversation: Any
    runs: list[Any] = field(default_factory=list)
    steps: list[Any] = field(default_factory=list)
    messages: list[Any] = field(default_factory=list)

    def count(self) -> int:
        return len(self.runs) + len(self.steps) + len(self.messages)


def build_rows(calls: int, user: Any = None) -> Rows:
    """One finished run of ``calls`` model and tool calls, every message pointing at its step."""
    from agent.models import AgentRun
    from chat.models import Conversation, Message
    from traces.models import Step, Trace

    start = datetime(2025, 3, 1, 12, tzinfo=UTC)
    conversation = Conversation(id=uuid.uuid4(), owner=user, title="bench")
    trace = Trace(id=uuid.uuid4(), user=user, task="question", status="completed")
    run = AgentRun(
        id=uuid.uuid4(),
        user=user,
        conversation=conversation,
        trace=trace,
        request_id="bench",
        mode="agent",
        status="completed",
        input="question",
        model="fake-model",
        created_at=start,
        started_at=start,
        finished_at=start + timedelta(seconds=calls),
    )
    rows = Rows(conversation=conversation, runs=[run])

    def step(step_type: str, parent: Any, **fields: Any) -> Any:
        at = start + timedelta(milliseconds=500 * len(rows.steps))
        made = Step(
            id=fields.pop("id", None) or uuid.uuid4(),
            trace=trace,
            parent=parent,
            seq=len(rows.steps) + 1,
            step_type=step_type,
            status="completed",
            started_at=at,
            created_at=at,
            **fields,
        )
        rows.steps.append(made)
        return made

    def message(role: str, content: str, kind: str, recorded: Any, **metadata: Any) -> None:
        rows.messages.append(
            Message(
                id=uuid.uuid4(),
                conversation=conversation,
                role=role,
                kind=kind,
                content=content,
                run=run,
                step=recorded,
                request_id="bench",
                sequence=len(rows.messages) + 1,
                metadata=metadata,
                created_at=start + timedelta(seconds=len(rows.messages)),
            )
        )

    def model_call(index: int, reply: str) -> Any:
        return step(
            "thought",
            goal,
            name=f"iteration {index}",
            description=f"step {index}",
            data={
                "thought": f"step {index}",
                "model": "fake-model",
                "finish_reason": "stop",
                "prompt_tokens": 120,
                "completion_tokens": 30,
            },
            tokens=150,
            duration_ms=200,
        )

    goal = step("goal", None, id=run.id, name="task", description="question")
    message("user", "question", "turn", goal)
    step("memory_read", goal, name="short-term memory", description="0 earlier turns")
    memory = step("memory_read", goal, name="long-term memory", description="1 facts recalled")
    message("system", "Long-term memory: a fact", "memory", memory)
    for index in range(1, calls // 2 + 1):
        reply = f'Thought: step {index}\nAction: tool:search_docs\nargs: {{"query": "q{index}"}}'
        observation = json.dumps({"results": [{"source": f"doc{index}.md", "score": 0.5}]})
        thought = model_call(index, reply)
        action = step(
            "action",
            thought,
            name="search_docs",
            data={"tool_name": "search_docs", "arguments": {"query": f"q{index}"}},
            duration_ms=40,
        )
        result = step(
            "result",
            action,
            name="search_docs",
            data={"observation": observation, "result_truncated": False},
        )
        message("assistant", reply, "step", thought, iteration=index)
        message("tool", observation, "step", result, iteration=index, tool_name="search_docs")
    final = "Thought: done\nAction: final: The answer is here."
    message("assistant", final, "step", model_call(calls // 2 + 1, final))
    response = step("response", goal, name="answer", data={"answer": "The answer is here."})
    message("assistant", "The answer is here.", "turn", response, model="fake-model")
    return rows


def in_progress(rows: Rows) -> Rows:
    """The same run still running: its transcript and answer not stored yet."""
    return Rows(
        conversation=rows.conversation,
        runs=[{**run, "status": "running", "finished_at": None} for run in rows.runs],
        steps=rows.steps[:-1],
        messages=rows.messages[:2],
    )


def values(rows: Rows) -> Rows:
    """``rows`` as ``QuerySet.values`` reads them (what ``debug_view`` takes)."""
    from chat.debug import MESSAGE_FIELDS, RUN_FIELDS, STEP_FIELDS

    def read(objects: list[Any], fields: tuple[str, ...]) -> list[Any]:
        return [{name: getattr(obj, name) for name in fields} for obj in objects]

    return Rows(
        conversation=rows.conversation,
        runs=read(rows.runs, RUN_FIELDS),
        steps=read(rows.steps, STEP_FIELDS),
        messages=read(rows.messages, MESSAGE_FIELDS),
    )


def join(rows: Rows) -> Any:
    """``debug_view`` on ``rows`` read by ``values``."""
    from chat.debug import debug_view

    return debug_view(
        conversation_id=rows.conversation.id,
        title="bench",
        runs=rows.runs,
        steps=rows.steps,
        messages=rows.messages,
    )


def store(rows: Rows) -> None:
    from agent.models import AgentRun
    from chat.models import Message
    from traces.models import Step

    rows.conversation.save()
    rows.runs[0].trace.save()
    AgentRun.objects.bulk_create(rows.runs)
    Step.objects.bulk_create(rows.steps, batch_size=1000)
    Message.objects.bulk_create(rows.messages, batch_size=1000)


def prepare_user() -> Any:
    from django.contrib.auth import get_user_model

    from chat.models import Conversation
    from traces.models import Trace

    user, _ = get_user_model().objects.get_or_create(
        username=BENCH_USERNAME, defaults={"is_superuser": True, "is_staff": True}
    )
    Conversation.objects.filter(owner=user).delete()
    Trace.objects.filter(user=user).delete()  # the runs keep theirs (set null): remove them
    user.agent_runs.all().delete()
    return user


def naive_read(conversation_id: uuid.UUID) -> int:
    """Each message's step loaded on its own: one query per message."""
    from chat.models import Message

    found = 0
    for message in Message.objects.filter(conversation_id=conversation_id).order_by("sequence"):
        found += message.step is not None
    return found


# --- measurements -----------------------------------------------------------------------------


def timed(name: str, repeat: int, run: Callable[[], Any]) -> Measurement:
    for _ in range(3):
        run()
    result = Measurement(name)
    for _ in range(repeat):
        started, cpu_started = time.perf_counter(), time.process_time()
        run()
        result.seconds.append(time.perf_counter() - started)
        result.cpu.append(time.process_time() - cpu_started)
    return result


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Benchmark the debug panel's data.")
    parser.add_argument("--calls", type=int, default=2000, help="model + tool calls in the run")
    parser.add_argument("--repeat", type=int, default=30, help="timed runs per measurement")
    parser.add_argument("--naive-repeat", type=int, default=3, help="timed naive reads")
    parser.add_argument("--profile", action="store_true", help="print a cProfile of one answer")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    var_dir = configure_environment(
        default_database_url=DEFAULT_DATABASE_URL, var_prefix="devassist-debug-bench-var-"
    )
    try:
        ensure_database(os.environ["DATABASE_URL"])
        import django
        from django.core.management import call_command
        from django.db import connection
        from django.test import Client
        from django.test.utils import CaptureQueriesContext
        from django.urls import reverse

        django.setup()
        call_command("migrate", verbosity=0)
        from chat.debug import conversation_debug, debug_view_json

        print(f"{os.cpu_count()} CPUs, load average {machine_load()}")
        user = prepare_user()
        rows = build_rows(args.calls, user)
        store(rows)
        rows = values(rows)
        view = join(rows)
        entries = sum(len(group.entries) for group in view.groups)
        assert len(view.groups) == 1, [group.key for group in view.groups]
        assert view.counts["tool"] == args.calls // 2, view.counts
        print(
            f"{args.calls:,} calls: {rows.count():,} rows ({len(rows.steps):,} steps, "
            f"{len(rows.messages):,} messages) -> {entries:,} entries"
        )
        conversation_id = rows.conversation.id
        with CaptureQueriesContext(connection) as queries:
            read = conversation_debug(user=user, conversation_id=conversation_id)
        query_count = len(queries)
        assert [e.key for g in read.groups for e in g.entries] == [
            e.key for g in view.groups for e in g.entries
        ]
        client = Client(HTTP_HOST="127.0.0.1")
        client.force_login(user)
        url = reverse("api:conversation_debug", args=[conversation_id])

        def answer() -> None:
            response = client.get(url)
            assert response.status_code == 200, response.content[:200]

        print(f"queries of conversation_debug: {query_count} (target {TARGET_QUERIES})")
        print(f"JSON answer: {len(client.get(url).content) / 1024:,.0f} KB")
        live = in_progress(rows)
        measured = [
            timed(f"GET {url.replace(str(conversation_id), '{id}')}", args.repeat, answer),
            timed(
                "conversation_debug (4 queries + join)",
                args.repeat,
                lambda: conversation_debug(user=user, conversation_id=conversation_id),
            ),
            timed("debug_view, finished run (in memory)", args.repeat, lambda: join(rows)),
            timed("debug_view, run in progress (in memory)", args.repeat, lambda: join(live)),
            timed(
                "debug_view + debug_view_json + json.dumps",
                args.repeat,
                lambda: json.dumps(debug_view_json(join(rows))),
            ),
            timed(
                "baseline: message.step one by one",
                args.naive_repeat,
                lambda: naive_read(conversation_id),
            ),
        ]
        header = f"\n{'measurement':<46}{'runs':>6}{'p50 ms':>10}{'p95 ms':>10}{'CPU p50':>10}"
        print(header)
        print("-" * (len(header) - 1))
        for m in measured:
            print(
                f"{m.name:<46}{len(m.seconds):>6}{m.p50_ms:>10.2f}{m.p95_ms:>10.2f}"
                f"{m.cpu_p50_ms:>10.2f}"
            )
        http, read_and_join, naive = measured[0], measured[1], measured[-1]
        print(f"\nbaseline / conversation_debug (p50): {naive.p50_ms / read_and_join.p50_ms:,.1f}x")
        print("\nlinearity (the join in memory at other sizes):")
        for calls in (args.calls // 4, args.calls // 2, args.calls, args.calls * 2):
            sized = values(build_rows(calls))

            def join_sized(sized: Rows = sized) -> Any:
                return join(sized)

            m = timed(f"{calls} calls", max(5, args.repeat // 3), join_sized)
            per_call_us = m.cpu_p50_ms * 1000 / calls
            print(
                f"  {calls:>6,} calls: p50 {m.p50_ms:7.2f} ms, CPU p50 {m.cpu_p50_ms:7.2f} ms, "
                f"{per_call_us:5.1f} µs of CPU per call"
            )
        print("\ntargets:")
        verdict(
            f"the API's answer for {args.calls:,} calls, p50 < {TARGET_P50_MS:.0f} ms",
            http.p50_ms < TARGET_P50_MS,
            f"p50 {http.p50_ms:.1f} ms, p95 {http.p95_ms:.1f} ms "
            f"({http.p50_ms / TARGET_P50_MS:.2f} of the target)",
        )
        verdict(
            f"conversation_debug in {TARGET_QUERIES} queries",
            query_count == TARGET_QUERIES,
            f"{query_count} queries",
        )
        print(f"load average after: {machine_load()}")
        if args.profile:
            profiler = cProfile.Profile()
            profiler.enable()
            answer()
            profiler.disable()
            print(profile_report(profiler, "cumulative", 30))
    finally:
        shutil.rmtree(var_dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
