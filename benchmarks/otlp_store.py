"""Benchmark: the server's share of ``otlp_ingest.py``'s burst. The OTel SDK's requests for a
10,000-span trace, stored by DevAssist in-process (no HTTP, no client), against the floor of
any ingester that decodes them as DevAssist does, measured in the same run.

Run from the repository root::

    .venv/bin/python benchmarks/otlp_store.py                 # 10,000 spans, 3 runs
    .venv/bin/python benchmarks/otlp_store.py --spans 2000 --runs 5

The trace is ``otlp_ingest.py``'s (the same shape and ``--seed``), replayed through the SDK as
there (a ``BatchSpanProcessor``, 512 spans a request, children sent before their parents) into
an exporter that keeps the encoded requests. Each run gives the trace a new id, then times, on
PostgreSQL (``BENCH_DATABASE_URL``, default
``postgres://postgres@127.0.0.1:5432/devassist_otlp_bench``, created afresh and migrated):

- **stored request by request**: each request decoded (``traces.otlp.decode_request``) and
  stored (``traces.services.otlp_export_ingest``) in turn, as the server stores the SDK's
  requests: the server's part of ``otlp_ingest.py``'s "flush -> every batch acknowledged";
- **stored as one request**: the same spans merged into one request: no step waits across
  requests for a parent sent later, so nothing is looked up or moved; what storing a trace's
  requests together would cost;
- **decoded into steps**: the requests' decoding alone (``decode_request`` and
  ``traces.otlp.request_spans``);
- **floor**: that decoding, then each request's steps copied bare (one ``COPY`` a request, in
  its own transaction) into a table made like the steps' table (its indexes too): no tree,
  rollups, checks or events. No ingester that decodes spans as DevAssist does is faster.

Figures are p50 over ``--runs`` with the runs' values, and each one's ratio to the floor. The
exit code is 0.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import orjson

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))  # run as a script: make the project importable

from benchmarks.otlp_ingest import (  # noqa: E402 - after the path above
    BENCH_USERNAME,
    DEFAULT_DATABASE_URL,
    MIN_DEPTH,
    TracePlan,
    depth_of,
    p50,
    plan_trace,
    prepare_devassist,
    send,
)
from benchmarks.trace_tree import configure_environment, machine_load  # noqa: E402

FLOOR_TABLE = "otlp_store_floor"
FLOOR = "floor (decoded, copied bare)"


def encoded_requests(plan: TracePlan, trace_id: int) -> list[bytes]:
    """The OTLP/HTTP bodies the SDK sends for ``plan`` as the trace ``trace_id``, in order."""
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
    from opentelemetry.sdk.trace import ReadableSpan
    from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

    class Keeping(SpanExporter):
        def __init__(self) -> None:
            self.bodies: list[bytes] = []

        def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
            self.bodies.append(encode_spans(spans).SerializeToString())
            return SpanExportResult.SUCCESS

    keeping = Keeping()
    send(plan, keeping, trace_id=trace_id)
    return keeping.bodies


def merged(bodies: Sequence[bytes]) -> bytes:
    """``bodies`` as one export request."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    request = ExportTraceServiceRequest()
    for body in bodies:
        request.MergeFromString(body)
    return request.SerializeToString()


def decoded(body: bytes) -> Any:
    from traces.otlp import PROTOBUF, TRACES, Limits, decode_request

    max_bytes = Limits.current().max_body_bytes
    return decode_request(
        body, encoding=PROTOBUF, content_encoding="", max_bytes=max_bytes, signal=TRACES
    )


def store(user: Any) -> Callable[[Sequence[bytes]], None]:
    """Store requests as the OTLP/HTTP endpoint does, one after the other."""
    from traces.otlp import TRACES
    from traces.services import otlp_export_ingest

    def run(bodies: Sequence[bytes]) -> None:
        for body in bodies:
            outcome = otlp_export_ingest(user=user, request=decoded(body), signal=TRACES)
            if outcome.rejected:
                raise RuntimeError(f"{outcome.rejected} spans rejected: {outcome.message}")

    return run


def decode_only(bodies: Sequence[bytes]) -> None:
    from traces.otlp import Limits, request_spans

    limits = Limits.current()
    for body in bodies:
        request_spans(decoded(body), limits=limits)


def drop_floor_table() -> None:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(f"DROP TABLE IF EXISTS {FLOOR_TABLE}")


def create_floor_table() -> None:
    """The floor's table, made like the steps' (one an interrupted run left is replaced)."""
    from django.db import connection

    drop_floor_table()
    with connection.cursor() as cursor:
        cursor.execute(f"CREATE TABLE {FLOOR_TABLE} (LIKE traces_step INCLUDING ALL)")


def copy_bare(bodies: Sequence[bytes]) -> None:
    """Decode each request into steps and copy its rows bare into the floor table."""
    from django.db import connection, transaction
    from django.db.models import JSONField
    from django.utils import timezone

    from traces.models import Step
    from traces.otlp import Limits, request_spans

    fields = Step._meta.concrete_fields
    columns = ", ".join(str(f.column) for f in fields)  # concrete fields: each has a column
    sql = f"COPY {FLOOR_TABLE} ({columns}) FROM STDIN"
    now = timezone.now()
    # What the floor does not work out (rollups, previews, facts): each column's default.
    defaults = {f.attname: f.get_default() for f in fields} | {"created_at": now, "path": []}
    json_columns = {f.attname for f in fields if isinstance(f, JSONField)}
    limits = Limits.current()
    seq = 0
    for body in bodies:
        batch = request_spans(decoded(body), limits=limits)
        with transaction.atomic(), connection.cursor() as cursor, cursor.cursor.copy(sql) as copy:
            for spans in batch.traces.values():
                for item in spans.steps:
                    seq += 1
                    row = defaults | {
                        "id": item.id,
                        "trace_id": spans.trace_id,
                        "parent_id": item.parent_id,
                        "seq": seq,
                        "step_type": item.step_type,
                        "status": item.status,
                        "name": item.name,
                        "description": item.description,
                        "data": item.data,
                        "error": item.error,
                        "started_at": item.started_at,
                        "finished_at": item.finished_at,
                        "tokens": item.tokens,
                        "cost": item.cost,
                    }
                    copy.write_row(
                        [
                            orjson.dumps(row[f.attname]).decode()
                            if f.attname in json_columns
                            else row[f.attname]
                            for f in fields
                        ]
                    )


def timed(work: Callable[[Sequence[bytes]], None], bodies: Sequence[bytes]) -> float:
    started = time.perf_counter()
    work(bodies)
    return time.perf_counter() - started


def measure(plan: TracePlan, var_dir: str, *, runs: int) -> tuple[dict[str, list[float]], int]:
    """Each figure's seconds, run by run, and how many requests the SDK sent."""
    prepare_devassist(var_dir, redis=False)
    from django.conf import settings
    from django.contrib.auth import get_user_model

    settings.OTLP_MAX_SPANS = max(settings.OTLP_MAX_SPANS, len(plan.spans))  # the one request
    stored = store(get_user_model().objects.get(username=BENCH_USERNAME))
    figures: dict[str, list[float]] = {}
    requests = 0
    create_floor_table()
    try:
        for _ in range(runs):
            bodies = encoded_requests(plan, random.getrandbits(128))
            requests = len(bodies)
            one = merged(encoded_requests(plan, random.getrandbits(128)))
            for label, work, sent in [
                ("stored request by request", stored, bodies),
                ("stored as one request", stored, [one]),
                ("decoded into steps", decode_only, bodies),
                (FLOOR, copy_bare, bodies),
            ]:
                figures.setdefault(label, []).append(timed(work, sent))
    finally:
        drop_floor_table()
    return figures, requests


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Benchmark DevAssist's OTLP store in-process.")
    parser.add_argument("--spans", type=int, default=10_000, help="spans in the trace")
    parser.add_argument("--runs", type=int, default=3, help="runs of each")
    parser.add_argument("--seed", type=int, default=18)
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    var_dir = configure_environment(default_database_url=DEFAULT_DATABASE_URL)
    print(f"{os.cpu_count()} CPUs, load average {machine_load()}")
    plan = plan_trace(args.spans, args.seed)
    print(f"trace: {len(plan.spans)} spans, depth {depth_of(plan)}")
    if depth_of(plan) < MIN_DEPTH:
        raise SystemExit(f"the trace is not {MIN_DEPTH} deep: try another --seed")
    try:
        figures, requests = measure(plan, var_dir, runs=args.runs)
    finally:
        shutil.rmtree(var_dir, ignore_errors=True)
    floor = p50(figures[FLOOR])
    spans = args.spans
    print(
        f"\nDevAssist's store in-process, PostgreSQL ({args.runs} runs, {requests} requests)\n"
        f"  {'':32} {'p50 s':>7} {'us/span':>8} {'/floor':>7}   runs"
    )
    for label, values in figures.items():
        runs = ", ".join(f"{v:.3f}" for v in values)
        middle = p50(values)
        print(
            f"  {label:32} {middle:7.3f} {middle / spans * 1e6:8.0f} {middle / floor:6.1f}x"
            f"   ({runs})"
        )
    print(f"load average after: {machine_load()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
