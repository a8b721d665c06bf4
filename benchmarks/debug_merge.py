"""Benchmark: merging 2,000 model and tool calls of one run into the debug panel's view.

Run from the repository root::

    .venv/bin/python benchmarks/debug_merge.py [--calls 2000] [--repeat 50] [--profile]

No services needed: the rows are unsaved model instances shaped as the run recorder writes them,
and ``chat.debug.debug_view`` never touches the database.

1. Builds one conversation with one run of ``--calls`` calls (``--calls / 2`` ReAct iterations:
   a ``thought`` step, its ``action`` and ``result``), every source present at once, as in the
   moment a run has stored its transcript but is not marked finished yet: the three steps, the
   live ``step`` event and the two step messages of every iteration, the user's message, a
   memory message, answer deltas and the stored answer. About 7 rows per iteration.
2. Times ``debug_view`` (the merge, ordering and grouping) on those rows, on the rows of a
   finished run (steps and messages) and of a run in progress (steps and live events), and
   ``debug_view_json`` with ``json.dumps`` on top (what the API answers), after a warm-up:
   p50/p95 of the wall-clock time, and the p50 of the process's CPU time (less inflated by
   other work on the machine).
3. Linearity: the merge at a quarter, half, the full and twice the size; the CPU time per call
   should stay flat.
4. Baseline in the same run: a naive merge that finds each call's message by scanning the
   message list (the nested scan the merge avoids), on the same rows.

Prints PASS/FAIL for the target (merge p95 under 100 ms for 2,000 calls) with the ratio of the
figure to it; the exit code is 0 whatever the verdict.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))  # run as a script: make the project importable

from benchmarks.common import Measurement, profile_report, verdict  # noqa: E402 - after the path above

TARGET_P95_MS = 100.0


def configure_environment() -> Path:
    """Settings for the benchmark: a temporary var dir, quiet logs. Returns the temporary
    directory to remove at the end."""
    work = Path(tempfile.mkdtemp(prefix="devassist-bench-debug-"))
    os.environ["DJANGO_SETTINGS_MODULE"] = "devassist.settings"
    os.environ["DEVASSIST_VAR_DIR"] = str(work / "var")
    os.environ["LOG_LEVEL"] = "WARNING"
    os.environ["SANDBOX_WARM_ON_START"] = "0"
    for name in ("DEBUG", "DATABASE_URL"):
        os.environ.pop(name, None)
    # Start as the server does: Django set up, the routing loaded, then ``gc.freeze()``.
    import devassist.asgi  # noqa: F401

    return work


# --- the rows ---------------------------------------------------------------------------------


@dataclass
class Rows:
    messages: list[Any] = field(default_factory=list)
    runs: list[Any] = field(default_factory=list)
    steps: list[Any] = field(default_factory=list)
    events: list[Any] = field(default_factory=list)

    def count(self) -> int:
        return len(self.messages) + len(self.runs) + len(self.steps) + len(self.events)


def build_rows(calls: int) -> Rows:
    """One run of ``calls`` model and tool calls with every source of each present."""
    from agent.models import AgentRun, RunEvent
    from chat.models import Message
    from traces.models import Step

    start = datetime(2025, 3, 1, 12, tzinfo=UTC)
    conversation_id = uuid.uuid4()
    trace_id = uuid.uuid4()
    run = AgentRun(
        id=uuid.uuid4(),
        trace_id=trace_id,
        request_id="bench",
        mode="agent",
        status="running",
        input="question",
        model="fake-model",
        created_at=start,
        started_at=start,
    )
    rows = Rows(runs=[run])

    def message(role: str, content: str, kind: str, metadata: dict[str, Any]) -> None:
        rows.messages.append(
            Message(
                id=uuid.uuid4(),
                conversation_id=conversation_id,
                role=role,
                kind=kind,
                content=content,
                run_id=run.id,
                request_id="bench",
                sequence=len(rows.messages) + 1,
                metadata=metadata,
                created_at=start + timedelta(seconds=len(rows.messages)),
            )
        )

    def event(type_: str, payload: dict[str, Any]) -> None:
        seq = len(rows.events) + 1
        rows.events.append(
            RunEvent(
                run_id=run.id,
                seq=seq,
                type=type_,
                payload={"type": type_, **payload},
                created_at=start + timedelta(seconds=seq),
            )
        )

    message("user", "question", "turn", {})
    message("system", "Long-term memory: a fact", "memory", {})
    for index in range(calls // 2):
        at = start + timedelta(seconds=index)
        reply = f'Thought: step {index}\nAction: tool:search_docs\nargs: {{"query": "q{index}"}}'
        observation = json.dumps({"results": [{"source": f"doc{index}.md", "score": 0.5}]})
        thought = Step(
            id=uuid.uuid4(),
            trace_id=trace_id,
            seq=3 * index + 1,
            step_type="thought",
            status="completed",
            name=f"iteration {index + 1}",
            description=f"step {index}",
            data={
                "thought": f"step {index}",
                "action_raw": reply,
                "model": "fake-model",
                "prompt_tokens": 120,
                "completion_tokens": 30,
            },
            tokens=150,
            started_at=at,
            duration_ms=200,
            created_at=at,
        )
        action = Step(
            id=uuid.uuid4(),
            trace_id=trace_id,
            parent_id=thought.id,
            seq=3 * index + 2,
            step_type="action",
            status="completed",
            name="search_docs",
            data={"tool_name": "search_docs", "arguments": {"query": f"q{index}"}},
            started_at=at,
            finished_at=at + timedelta(milliseconds=40),
            duration_ms=40,
            created_at=at,
        )
        result = Step(
            id=uuid.uuid4(),
            trace_id=trace_id,
            parent_id=action.id,
            seq=3 * index + 3,
            step_type="result",
            status="completed",
            name="search_docs",
            data={"observation": observation},
            created_at=at,
        )
        rows.steps += [thought, action, result]
        event(
            "step",
            {
                "step_index": index + 1,
                "step_id": str(thought.id),
                "thought": f"step {index}",
                "action_raw": reply,
                "tool_name": "search_docs",
                "tool_args": {"query": f"q{index}"},
                "observation": observation,
                "error": None,
                "started_at_ms": int(at.timestamp() * 1000),
                "finished_at_ms": int(at.timestamp() * 1000) + 250,
                "latency_ms": 250,
            },
        )
        message("assistant", reply, "step", {"iteration": index + 1, "step_id": str(thought.id)})
        message(
            "tool",
            observation,
            "step",
            {"step_id": str(result.id), "tool_name": "search_docs", "error": None},
        )
    for piece in ("The ", "answer ", "is here."):
        event("delta", {"content": piece})
    message("assistant", "The answer is here.", "turn", {"model": "fake-model", "mode": "agent"})
    return rows


def merge(rows: Rows) -> Any:
    from chat.debug import debug_view

    return debug_view(
        conversation_id="bench",
        title="bench",
        messages=rows.messages,
        runs=rows.runs,
        steps=rows.steps,
        events=rows.events,
    )


def naive_merge(rows: Rows) -> int:
    """The merge's matching done the way it must not be: each call looks for its message by
    scanning the messages (and each result for its action by scanning the steps)."""
    matched = 0
    for step in rows.steps:
        if step.step_type == "thought":
            for message in rows.messages:
                if message.metadata.get("step_id") == str(step.id):
                    matched += 1
                    break
        elif step.step_type == "result":
            for action in rows.steps:
                if action.id == step.parent_id:
                    for message in rows.messages:
                        if message.metadata.get("step_id") == str(step.id):
                            matched += 1
                            break
                    break
    return matched


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
    parser = argparse.ArgumentParser(description="Benchmark the debug panel's merge.")
    parser.add_argument("--calls", type=int, default=2000, help="model + tool calls in the run")
    parser.add_argument("--repeat", type=int, default=50, help="timed merges per measurement")
    parser.add_argument("--naive-repeat", type=int, default=3, help="timed naive merges")
    parser.add_argument("--profile", action="store_true", help="print a cProfile of one merge")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    work = configure_environment()
    try:
        from chat.debug import debug_view_json

        print(
            f"{os.cpu_count()} CPUs, load average {' '.join(f'{v:.2f}' for v in os.getloadavg())}"
        )
        rows = build_rows(args.calls)
        view = merge(rows)
        entries = sum(len(group.entries) for group in view.groups)
        # Every call merged into one entry: the model calls, the answer, the tool calls.
        assert view.counts["model"] - 1 == view.counts["tool"] == args.calls // 2, view.counts
        assert len(view.groups) == 1, [group.key for group in view.groups]
        print(
            f"{args.calls:,} calls: {rows.count():,} rows ({len(rows.steps):,} steps, "
            f"{len(rows.messages):,} messages, {len(rows.events):,} events) -> {entries:,} entries"
        )
        merged = timed("debug_view (merge), every source", args.repeat, lambda: merge(rows))
        # What the selector reads in the two usual states: a finished run (no live events) and
        # a run in progress (its transcript not stored yet).
        finished = Rows(messages=rows.messages, runs=rows.runs, steps=rows.steps)
        in_progress = Rows(messages=rows.messages[:2], runs=rows.runs, steps=rows.steps)
        in_progress.events = rows.events
        merged_finished = timed(
            "debug_view, finished run (steps, messages)", args.repeat, lambda: merge(finished)
        )
        merged_live = timed(
            "debug_view, run in progress (steps, events)", args.repeat, lambda: merge(in_progress)
        )
        encoded = timed(
            "debug_view + debug_view_json + json.dumps",
            args.repeat,
            lambda: json.dumps(debug_view_json(merge(rows))),
        )
        print(f"JSON answer: {len(json.dumps(debug_view_json(view))) / 1024:,.0f} KB")
        naive = timed("naive matching (nested scans)", args.naive_repeat, lambda: naive_merge(rows))
        header = f"\n{'measurement':<46}{'runs':>6}{'p50 ms':>10}{'p95 ms':>10}{'CPU p50':>10}"
        print(header)
        print("-" * (len(header) - 1))
        for m in (merged, merged_finished, merged_live, encoded, naive):
            print(
                f"{m.name:<46}{len(m.seconds):>6}{m.p50_ms:>10.2f}{m.p95_ms:>10.2f}"
                f"{m.cpu_p50_ms:>10.2f}"
            )
        print(f"\nnaive matching / merge (p50): {naive.p50_ms / merged.p50_ms:,.0f}x")
        print("\nlinearity (the merge at other sizes):")
        for calls in (args.calls // 4, args.calls // 2, args.calls, args.calls * 2):
            sized = build_rows(calls)

            def merge_sized(sized: Rows = sized) -> Any:
                return merge(sized)

            m = timed(f"{calls} calls", max(5, args.repeat // 5), merge_sized)
            per_call_us = m.cpu_p50_ms * 1000 / calls
            print(
                f"  {calls:>6,} calls: p50 {m.p50_ms:7.2f} ms, CPU p50 {m.cpu_p50_ms:7.2f} ms, "
                f"{per_call_us:5.1f} µs of CPU per call"
            )
        print("\ntarget:")
        verdict(
            f"merge of {args.calls:,} calls p95 < {TARGET_P95_MS:.0f} ms",
            merged.p95_ms < TARGET_P95_MS,
            f"p50 {merged.p50_ms:.1f} ms, p95 {merged.p95_ms:.1f} ms "
            f"({merged.p95_ms / TARGET_P95_MS:.2f} of the target)",
        )
        print(f"load average after: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
        if args.profile:
            profiler = cProfile.Profile()
            profiler.enable()
            merge(rows)
            profiler.disable()
            print(profile_report(profiler, "cumulative", 25))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
