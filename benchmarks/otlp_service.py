"""Benchmark: a plain OTel-instrumented service's traffic over OTLP/HTTP, each of its requests a
small trace of its own, against the same spans as one trace, measured in the same run.

Run from the repository root::

    .venv/bin/python benchmarks/otlp_service.py                       # 2,000 requests of 5 spans
    .venv/bin/python benchmarks/otlp_service.py --requests 2048 --spans-per-request 1
    .venv/bin/python benchmarks/otlp_service.py --redis               # the Redis channel layer
    .venv/bin/python benchmarks/otlp_service.py --logs                # with GenAI log records
    .venv/bin/python benchmarks/otlp_service.py --logs after          # sent after the spans
    .venv/bin/python benchmarks/otlp_service.py --at-once 100         # 100 requests at a time

The service's requests are traces of ``--spans-per-request`` spans (a server span over a model
call, database calls and a render), sent by the OTel SDK as an instrumented service sends them:
a ``BatchSpanProcessor`` (512 spans a request, so a request of DevAssist's ``/v1/traces``
holds about a hundred traces) and the OTLP/HTTP protobuf exporter. The baseline is the same
spans as one trace (a root over the requests), through the same client. For each: the time
from the client's flush until every batch is acknowledged (then every trace is stored and
readable: DevAssist answers once its transaction commits), the slowest batch (the SDK's
exporter gives up after ``OTEL_EXPORTER_OTLP_TIMEOUT``, 10 s by default, and sends the batch
again), and the cost per span. p50 of ``--runs`` runs. DevAssist runs under daphne on
PostgreSQL as in ``otlp_ingest.py`` (``BENCH_DATABASE_URL``). Target: a service's spans
stored about as fast as one agent's (within 1.5x of the baseline a span), so how fast a
service's traces reach the trace browser does not depend on how it splits them into traces.
The exit code is 0 whatever the verdict.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from opentelemetry.sdk.trace.export import SpanExporter

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))  # run as a script: make the project importable

from benchmarks.common import verdict  # noqa: E402 - after the path above
from benchmarks.otlp_ingest import (  # noqa: E402
    DEFAULT_DATABASE_URL,
    DEFAULT_REDIS_URL,
    exporter_for,
    prepare_devassist,
)
from benchmarks.trace_tree import configure_environment, machine_load  # noqa: E402

TARGET_RATIO = 1.5
CHILDREN = ("chat", "SELECT answers", "UPDATE sessions", "render")


@dataclass
class Sent:
    ingest_s: float
    slowest_batch_s: float
    traces: int


class TimedExporter(SpanExporter):
    """The SDK's exporter, timing each batch it sends."""

    def __init__(self, exporter: Any) -> None:
        self.exporter = exporter
        self.batches: list[float] = []

    def export(self, spans: Any) -> Any:
        started = time.perf_counter()
        result = self.exporter.export(spans)
        self.batches.append(time.perf_counter() - started)
        return result

    def shutdown(self) -> None:
        self.exporter.shutdown()

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return self.exporter.force_flush(timeout_millis)


def send(
    endpoint: str,
    headers: dict[str, str],
    *,
    requests: int,
    per: int,
    one: bool,
    logs: str | None = None,
    at_once: int = 1,
) -> Sent:
    """Emit ``requests`` requests of ``per`` spans each, as traces of their own or (``one``)
    all under one root span, ``at_once`` served at a time, and flush them through the SDK to
    ``endpoint``; with ``logs``, each model call's prompt and answer as GenAI log records too,
    sent ``first`` (records are emitted while their span runs, and the SDK sends them every
    second, its spans every five) or ``after`` the spans."""
    from opentelemetry._logs import LogRecord
    from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
    from opentelemetry.sdk._logs import LoggerProvider
    from opentelemetry.sdk._logs.export import (
        BatchLogRecordProcessor,
        InMemoryLogRecordExporter,
        LogRecordExportResult,
        SimpleLogRecordProcessor,
    )
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from opentelemetry.trace import SpanKind, Status, StatusCode, use_span

    service = f"bench-service-{random.getrandbits(32):08x}"
    provider = TracerProvider(
        resource=Resource.create({"service.name": service}), shutdown_on_exit=False
    )
    exporter = TimedExporter(exporter_for(endpoint, headers))
    processor = BatchSpanProcessor(
        exporter,
        max_queue_size=max(512, (requests + 1) * per * 2),
        max_export_batch_size=512,
        export_timeout_millis=120_000,
    )
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("benchmark.service")
    log_provider = LoggerProvider(
        resource=Resource.create({"service.name": service}), shutdown_on_exit=False
    )
    log_exporter = OTLPLogExporter(
        endpoint=endpoint.replace("/v1/traces", "/v1/logs"), headers=headers, timeout=120
    )
    # Sent after the spans: held until they are flushed (a batch processor would send them
    # as they come, mostly before the spans), then in batches of 512 as the SDK sends them.
    held = InMemoryLogRecordExporter()
    log_processor = (
        SimpleLogRecordProcessor(held)
        if logs == "after"
        else BatchLogRecordProcessor(
            log_exporter,
            max_queue_size=max(512, requests * 4),
            max_export_batch_size=512,
            export_timeout_millis=120_000,
        )
    )
    log_provider.add_log_record_processor(log_processor)
    logger = log_provider.get_logger("benchmark.service")

    def serve(first: int, count: int) -> None:
        """Serve requests ``first`` to ``first + count - 1`` at once: each one's server span
        ends once all of them have done their work."""
        roots = [
            tracer.start_span(
                f"POST /ask/{index % 50}",
                kind=SpanKind.SERVER,
                attributes={"http.request.method": "POST", "http.route": "/ask/{topic}"},
            )
            for index in range(first, first + count)
        ]
        for index, root in enumerate(roots, start=first):
            with use_span(root, end_on_exit=False):
                work(index)
        for root in roots:
            root.end()

    def work(index: int) -> None:
        for child in range(per - 1):
            name = CHILDREN[child % len(CHILDREN)]
            with tracer.start_as_current_span(name) as span:
                if name == "chat":
                    span.set_attribute("gen_ai.operation.name", "chat")
                    span.set_attribute("gen_ai.usage.input_tokens", 120)
                    span.set_attribute("gen_ai.usage.output_tokens", 40)
                    if logs:
                        for event, body in (
                            ("gen_ai.user.message", {"content": f"question {index}"}),
                            ("gen_ai.choice", {"message": {"content": "an answer"}}),
                        ):
                            logger.emit(LogRecord(event_name=event, body=body))
                elif index % 40 == 0:
                    span.set_status(Status(StatusCode.ERROR, "deadlock detected"))

    def serve_all() -> None:
        for first in range(0, requests, at_once):
            serve(first, min(at_once, requests - first))

    if one:
        with tracer.start_as_current_span("nightly batch"):
            serve_all()
    else:
        serve_all()
    flush_started = time.perf_counter()
    if not log_processor.force_flush(timeout_millis=600_000):
        raise RuntimeError("the flush of the log records did not finish")
    if not processor.force_flush(timeout_millis=600_000):
        raise RuntimeError("the flush did not finish")
    records = held.get_finished_logs()
    for first in range(0, len(records), 512):
        if log_exporter.export(records[first : first + 512]) != LogRecordExportResult.SUCCESS:
            raise RuntimeError("a batch of log records was not taken")
    ingest_s = time.perf_counter() - flush_started
    provider.shutdown()
    log_provider.shutdown()

    from traces.models import PendingLogEvents, Trace

    traces = Trace.objects.filter(agent_type=service)
    stored = sum(traces.values_list("total_steps", flat=True))
    expected = requests * per + (1 if one else 0)
    if stored != expected:
        raise RuntimeError(f"{stored} spans stored, {expected} sent")
    if logs and PendingLogEvents.objects.filter(trace__agent_type=service).exists():
        raise RuntimeError("log records still wait for their spans")
    return Sent(ingest_s, max(exporter.batches), traces.count())


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Benchmark a service's many small traces.")
    parser.add_argument("--requests", type=int, default=2000, help="the service's requests")
    parser.add_argument("--spans-per-request", type=int, default=5)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument(
        "--logs",
        nargs="?",
        const="first",
        choices=["first", "after"],
        help="each model call's prompt and answer as GenAI log records too, sent first (as "
        "the SDK sends them) or after the spans",
    )
    parser.add_argument(
        "--at-once",
        type=int,
        default=1,
        help="requests the service serves at a time: each one's server span ends after all of "
        "their work, so with many most come in a later batch than their children",
    )
    parser.add_argument(
        "--redis",
        action="store_true",
        help=f"the Redis channel layer (BENCH_REDIS_URL, default {DEFAULT_REDIS_URL})",
    )
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    var_dir = configure_environment(
        default_database_url=DEFAULT_DATABASE_URL,
        var_prefix="devassist-otlp-service-var-",
        redis_url=os.environ.get("BENCH_REDIS_URL", DEFAULT_REDIS_URL) if args.redis else None,
    )
    per = args.spans_per_request
    print(f"{os.cpu_count()} CPUs, load average {machine_load()}")
    print(
        f"{args.requests} requests of {per} spans ({args.requests * per} spans), on the "
        f"{'Redis' if args.redis else 'in-memory'} channel layer"
        + (f", {args.at_once} served at a time" if args.at_once > 1 else "")
        + (
            f", each model call's prompt and answer as log records sent {args.logs}"
            if args.logs
            else ""
        )
    )
    shapes = {"a trace per request": False, "one trace (baseline)": True}
    runs: dict[str, list[Sent]] = {name: [] for name in shapes}
    try:
        token, env = prepare_devassist(var_dir, redis=args.redis)

        from tests.servers import daphne_server

        with daphne_server(env, timeout_s=60) as base_url:
            headers = {"Authorization": f"Bearer {token}"}
            endpoint = f"{base_url}/v1/traces"
            send(endpoint, headers, requests=20, per=per, one=False, logs=args.logs)  # warm-up
            for _ in range(args.runs):
                for name, one in shapes.items():
                    runs[name].append(
                        send(
                            endpoint,
                            headers,
                            requests=args.requests,
                            per=per,
                            one=one,
                            logs=args.logs,
                            at_once=args.at_once,
                        )
                    )
    finally:
        shutil.rmtree(var_dir, ignore_errors=True)
    spans = args.requests * per
    print(
        f"\n{'(seconds, p50 of ' + str(args.runs) + ')':<24} {'acknowledged':>12} "
        f"{'slowest batch':>14} {'µs a span':>10} {'traces':>7}"
    )
    p50: dict[str, tuple[float, float]] = {}
    for name, sent in runs.items():
        ingest = statistics.median(s.ingest_s for s in sent)
        slowest = statistics.median(s.slowest_batch_s for s in sent)
        p50[name] = ingest, slowest
        print(
            f"{name:<24} {ingest:12.3f} {slowest:14.3f} {ingest / spans * 1e6:10.0f} "
            f"{sent[0].traces:7d}"
        )
    many, single = p50["a trace per request"], p50["one trace (baseline)"]
    ratio = many[0] / single[0]
    print(f"\na trace per request / one trace: {ratio:.2f}x")
    print("\nverdict:")
    verdict(
        f"a trace per request within {TARGET_RATIO}x of one trace a span",
        ratio <= TARGET_RATIO,
        f"{ratio:.2f}x",
    )
    print(f"load average after: {machine_load()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
