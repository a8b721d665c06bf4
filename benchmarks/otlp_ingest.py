"""Benchmark: an agent's 10,000-span trace sent over OTLP/HTTP by the OpenTelemetry SDK, to
DevAssist and, in the same run, to Arize Phoenix.

Run from the repository root::

    .venv/bin/python benchmarks/otlp_ingest.py                  # 10,000 spans, 3 runs each
    .venv/bin/python benchmarks/otlp_ingest.py --spans 2000 --runs 5 --no-phoenix
    .venv/bin/python benchmarks/otlp_ingest.py --no-phoenix --grpc  # OTLP/HTTP and OTLP/gRPC
    .venv/bin/python benchmarks/otlp_ingest.py --no-phoenix --redis --watch page  # a page open
    .venv/bin/python benchmarks/otlp_ingest.py --sdk-queue   # what the SDK's own queue keeps

One trace shape, seeded (``--seed``): an OpenInference-instrumented agent (an AGENT root over
LLM and TOOL spans, tools that start sub-agents of CHAIN, LLM, TOOL and RETRIEVER spans, 10
levels deep, uneven fan-out from 0 to hundreds, about 3% failed spans, token counts on the LLM
spans, short inputs and outputs with a few 4-16 KB ones). Each run replays it through the SDK as an
instrumented agent would: spans started and ended in order (children end before their
parents, so they are sent first), a ``BatchSpanProcessor`` (512 spans a request, a queue big
enough that nothing is dropped) and the OTLP/HTTP protobuf exporter. For each server:

- **ingest**: from the client's flush (``force_flush``, called when the last span has ended)
  until the server has acknowledged every batch;
- **readable**: from the same flush until a read of the whole trace returns every span, all in
  one tree: DevAssist's ``GET /api/traces/{id}/tree`` (compact), Phoenix's REST API
  (``GET /v1/projects/{project}/spans?trace_id=``, 1,000 spans a page, its limit). The polls
  ask each server's count of the trace's spans (DevAssist's ``GET /api/traces/{id}``,
  Phoenix's GraphQL ``numSpans``) and the whole trace is read once it counts them all:
  reading it whole at every poll (``--poll whole``) slows the server being waited for,
  Phoenix 2.5-3.5x;
- **first read**: how long the read that found the whole trace took (DevAssist builds a
  finished trace's tree then; it keeps a big one for the reads after, ``trace_tree_json``);
- **read**: that whole-trace read once it is complete, ``--reads`` times (p50); the client
  parses each answer with orjson, for both.

Then, an agent still at work on the stored trace (``--late N``, 20 by default; 0: none): N
times a step whose 5 children end first and go in a request of their own, then the step,
whose request moves them under it; the p50 of those requests into the last run's trace, and
into a trace of one span sent just before (the baseline), and their ratio: what a request
costs as a trace grows.

With ``--sdk-queue``, each server then gets the spans once more through the SDK's own queue
(2,048 spans unless ``OTEL_BSP_MAX_QUEUE_SIZE`` says otherwise), which drops the spans that
end while it is full: how many reached the server (acknowledged, then counted in its read),
what an agent on the SDK's defaults keeps of such a burst (or of ``--pace``).

Figures are p50 over ``--runs`` runs. By default the client emits the spans in a burst (under a
second), so nearly all of them are still queued at the flush; ``--pace S`` spreads their ends
over S seconds, as an agent at work sends them, and then only the last batches remain.
DevAssist runs under daphne on PostgreSQL (``BENCH_DATABASE_URL``, default
``postgres://postgres@127.0.0.1:5432/devassist_otlp_bench``, created afresh and migrated at
each start). With ``--grpc`` the same client
also sends the trace over OTLP/gRPC to ``manage.py otlp_grpc`` (the SDK's gRPC exporter),
read back through the same ``/tree``. With ``--redis`` DevAssist runs on the Redis channel
layer (``BENCH_REDIS_URL``, default ``redis://127.0.0.1:6379/9``). With ``--watch socket``
a client watches each trace on its websocket from its first batch, as the trace page's script
does, and the time from the flush until it has every event up to ``trace_completed`` is
reported too; with ``--watch page`` the trace page itself, in Chromium (``CHROMIUM_PATH``,
default ``/usr/bin/chromium``), until it shows the trace completed and its whole tree.
Phoenix runs from its own virtualenv (``--phoenix-python``, default ``.venv-phoenix/bin/python``;
``pip install arize-phoenix`` there), ``phoenix serve`` on free loopback ports with a
temporary working directory (SQLite, its default); without it the script measures DevAssist
alone. Targets (issue 18): the whole trace readable within 2 s of the flush; at least 10x
faster than Phoenix to ingest and to read the whole trace. The exit code is 0 whatever the
verdicts.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import orjson

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))  # run as a script: make the project importable

from benchmarks.common import verdict  # noqa: E402 - after the path above
from benchmarks.trace_tree import (  # noqa: E402
    WORDS,
    configure_environment,
    machine_load,
    recreate_database,
)

DEFAULT_DATABASE_URL = "postgres://postgres@127.0.0.1:5432/devassist_otlp_bench"
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/9"
BENCH_PASSWORD = "otlp-benchmark-pw-1"
CHROMIUM = os.environ.get("CHROMIUM_PATH", "/usr/bin/chromium")
BENCH_USERNAME = "otlp-benchmark"
PHOENIX_PROJECT = "otlp-bench"
PHOENIX_PAGE = 1000  # the REST API's largest page
#: The benchmark agent's OTel resource (Phoenix files its spans under the project named here).
AGENT_RESOURCE = {"service.name": "benchmark-agent", "openinference.project.name": PHOENIX_PROJECT}
TARGET_READABLE_S = 2.0
TARGET_RATIO = 10.0
MIN_DEPTH = 6


# --- the trace ----------------------------------------------------------------------------------


@dataclass
class PlannedSpan:
    parent: int | None
    name: str
    attributes: dict[str, Any]
    failed: bool = False
    children: list[int] = field(default_factory=list)


@dataclass
class TracePlan:
    """A seeded agent trace of ``limit`` spans, parents before children."""

    rng: random.Random
    limit: int
    spans: list[PlannedSpan] = field(default_factory=list)

    def text(self, low: int, high: int) -> str:
        return " ".join(self.rng.choices(WORDS, k=self.rng.randint(low, high)))

    def add(self, parent: int | None, name: str, kind: str, **attributes: Any) -> int | None:
        if len(self.spans) >= self.limit:
            return None
        if self.rng.random() < 0.02:
            attributes["output.value"] = self.text(600, 2400)  # a 4-16 KB payload
        span = PlannedSpan(
            parent=parent,
            name=name,
            attributes={"openinference.span.kind": kind, **attributes},
            failed=kind == "TOOL" and self.rng.random() < 0.08,
        )
        self.spans.append(span)
        index = len(self.spans) - 1
        if parent is not None:
            self.spans[parent].children.append(index)
        return index

    def llm(self, parent: int) -> int | None:
        prompt, completion = self.rng.randint(50, 4000), self.rng.randint(5, 600)
        return self.add(
            parent,
            "ChatCompletion",
            "LLM",
            **{
                "llm.model_name": "gpt-4o-mini",
                "llm.token_count.prompt": prompt,
                "llm.token_count.completion": completion,
                "llm.token_count.total": prompt + completion,
                "input.value": self.text(10, 40),
                "output.value": self.text(5, 30),
            },
        )

    def agent(self, parent: int | None, level: int, budget: int) -> None:
        """An agent (AGENT at the top, CHAIN below) of LLM calls and tool calls until
        ``budget`` spans are used; some tools start a sub-agent one level deeper."""
        kind = "AGENT" if parent is None else "CHAIN"
        name = "agent run" if parent is None else f"sub-agent L{level}"
        root = self.add(parent, name, kind, **{"input.value": self.text(8, 30)})
        if root is None:
            return
        end = len(self.spans) + budget
        while len(self.spans) < min(end, self.limit):
            if self.llm(root) is None:
                return
            for _ in range(self.rng.choice((0, 1, 1, 1, 2, 3))):
                tool = self.add(
                    root,
                    self.rng.choice(("search_code", "read_file", "run_tests", "web_search")),
                    "TOOL",
                    **{"tool.name": "tool", "input.value": self.text(3, 12)},
                )
                if tool is None:
                    return
                roll = self.rng.random()
                if roll < 0.1 and level < 4:
                    self.agent(tool, level + 1, self.rng.randint(20, 400))
                elif roll < 0.3:
                    for _ in range(self.rng.randint(0, 12)):
                        if self.add(tool, "retrieve", "RETRIEVER") is None:
                            return


def plan_trace(spans: int, seed: int) -> TracePlan:
    """The trace: a chain of sub-agents first (so it is at least ``MIN_DEPTH`` deep), then
    the top agent's own work until ``spans`` spans."""
    plan = TracePlan(random.Random(seed), spans)
    plan.agent(None, 0, spans)
    return plan


def depth_of(plan: TracePlan) -> int:
    deepest = 0
    for span in plan.spans:
        depth, parent = 0, span.parent
        while parent is not None:
            depth, parent = depth + 1, plan.spans[parent].parent
        deepest = max(deepest, depth)
    return deepest


# --- the client ---------------------------------------------------------------------------------


@dataclass
class Sent:
    trace_id: str
    emit_s: float
    flush_started: float
    ingest_s: float
    #: Spans the exporter had acknowledged: all of them unless the SDK's queue overflowed.
    exported: int


def exporter_for(endpoint: str, headers: dict[str, str]) -> Any:
    """The SDK's OTLP span exporter for ``endpoint``: OTLP/gRPC for ``grpc://host:port``,
    OTLP/HTTP protobuf for an ``http://`` URL."""
    if endpoint.startswith("grpc://"):
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
            OTLPSpanExporter as GrpcSpanExporter,
        )

        return GrpcSpanExporter(
            endpoint=endpoint.removeprefix("grpc://"),
            insecure=True,
            headers={key.lower(): value for key, value in headers.items()},
            timeout=120,
        )
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    return OTLPSpanExporter(endpoint=endpoint, headers=headers, timeout=120)


def send(
    plan: TracePlan,
    exporter: Any,
    *,
    trace_id: int,
    pace_s: float = 0.0,
    sdk_queue: bool = False,
) -> Sent:
    """Replay ``plan`` through the OTel SDK to ``exporter`` (a ``SpanExporter``: the server's,
    ``exporter_for``) as the trace ``trace_id``, its spans ending evenly over ``pace_s``
    seconds (0: as fast as the SDK goes); the flush starts when the last span has ended and
    returns once every batch is acknowledged. The processor's queue holds every span, or
    with ``sdk_queue`` is the SDK's own (2,048 spans unless ``OTEL_BSP_MAX_QUEUE_SIZE`` says
    otherwise), which drops the spans that come while it is full."""
    from opentelemetry import trace as otel_trace
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
    from opentelemetry.sdk.trace.export import (
        BatchSpanProcessor,
        SpanExporter,
        SpanExportResult,
    )
    from opentelemetry.sdk.trace.id_generator import RandomIdGenerator
    from opentelemetry.trace import Status, StatusCode

    class Counting(SpanExporter):
        """The exporter, counting the spans the server acknowledged."""

        def __init__(self, inner: Any) -> None:
            self.inner, self.exported = inner, 0

        def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
            result: SpanExportResult = self.inner.export(spans)
            if result is SpanExportResult.SUCCESS:
                self.exported += len(spans)
            return result

        def shutdown(self) -> None:
            self.inner.shutdown()

    class KnownTraceId(RandomIdGenerator):
        # Known before the first span, so a watcher can wait for the trace.
        def generate_trace_id(self) -> int:
            return trace_id

    provider = TracerProvider(
        resource=Resource.create(AGENT_RESOURCE),
        id_generator=KnownTraceId(),
        shutdown_on_exit=False,
    )
    counting = Counting(exporter)
    queue = None if sdk_queue else max(len(plan.spans) * 2, 512)  # None: the SDK's default
    processor = BatchSpanProcessor(
        counting,
        max_queue_size=queue,
        max_export_batch_size=512,
        export_timeout_millis=120_000,
    )
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("benchmark.agent")

    def emit(index: int, context: Any) -> None:
        planned = plan.spans[index]
        span = tracer.start_span(planned.name, context=context, attributes=planned.attributes)
        inside = otel_trace.set_span_in_context(span)
        for child in planned.children:
            emit(child, inside)
        if planned.failed:
            span.set_status(Status(StatusCode.ERROR, "tool failed"))
        if pace_s:
            time.sleep(pace_s / len(plan.spans))
        span.end()

    started = time.perf_counter()
    emit(0, None)
    flush_started = time.perf_counter()
    if not processor.force_flush(timeout_millis=600_000):
        raise RuntimeError("the flush did not finish")
    ingest_s = time.perf_counter() - flush_started
    provider.shutdown()
    return Sent(
        trace_id=f"{trace_id:032x}",
        emit_s=flush_started - started,
        flush_started=flush_started,
        ingest_s=ingest_s,
        exported=counting.exported,
    )


def late_steps(
    endpoint: str,
    headers: dict[str, str],
    *,
    trace_id: str,
    parent_span_id: int,
    steps: int,
    children: int = 5,
) -> list[float]:
    """An agent still at work on the stored trace ``trace_id``: ``steps`` times, a step under
    the span ``parent_span_id`` whose ``children`` end first and go in a request of their own
    (they wait for it), then the step itself (it adopts them: the store moves them under it),
    through the SDK's OTLP exporter. Returns how long each step's request took (its flush)."""
    from opentelemetry import trace as otel_trace
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

    provider = TracerProvider(resource=Resource.create(AGENT_RESOURCE), shutdown_on_exit=False)
    processor = BatchSpanProcessor(
        exporter_for(endpoint, headers),
        schedule_delay_millis=600_000,
        export_timeout_millis=120_000,
    )
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("benchmark.agent")
    parent = otel_trace.set_span_in_context(
        NonRecordingSpan(
            SpanContext(
                trace_id=int(trace_id, 16),
                span_id=parent_span_id,
                is_remote=True,
                trace_flags=TraceFlags(TraceFlags.SAMPLED),
            )
        )
    )
    timed = []
    for index in range(steps):
        step = tracer.start_span(
            "agent step", context=parent, attributes={"openinference.span.kind": "CHAIN"}
        )
        inside = otel_trace.set_span_in_context(step)
        for child in range(children):
            tracer.start_span(
                f"tool {index}.{child}",
                context=inside,
                attributes={"openinference.span.kind": "TOOL", "output.value": "ok"},
            ).end()
        if not processor.force_flush(timeout_millis=120_000):
            raise RuntimeError("the children's flush did not finish")
        step.end()
        started = time.perf_counter()
        if not processor.force_flush(timeout_millis=120_000):
            raise RuntimeError("the step's flush did not finish")
        timed.append(time.perf_counter() - started)
    provider.shutdown()
    return timed


def root_span_id(client: httpx.Client, trace_id: str) -> int:
    """The span id of a trace's root, as DevAssist stored it (its step's ``otel_span``)."""
    import uuid

    trace = uuid.UUID(trace_id)
    node = client.get(f"/api/traces/{trace}/node/root", params={"limit": 1})
    node.raise_for_status()
    root = node.json()["children"][0]["step_id"]
    step = client.get(f"/api/traces/{trace}/steps/{root}")
    step.raise_for_status()
    return int(step.json()["data"]["otel_span"]["span_id"], 16)


def late_figures(
    client: httpx.Client, endpoint: str, headers: dict[str, str], *, long_trace: str, steps: int
) -> tuple[float, float]:
    """p50 of a late step's request (``late_steps``) into ``long_trace`` and, the baseline,
    into a trace of one span sent just before (the same requests, the same server)."""
    fresh_trace = random.getrandbits(128)
    one_span = TracePlan(random.Random(0), 1)
    one_span.add(None, "agent", "AGENT")
    send(one_span, exporter_for(endpoint, headers), trace_id=fresh_trace)
    fresh_root = root_span_id(client, f"{fresh_trace:032x}")
    long_root = root_span_id(client, long_trace)
    fresh = late_steps(
        endpoint, headers, trace_id=f"{fresh_trace:032x}", parent_span_id=fresh_root, steps=steps
    )
    long = late_steps(endpoint, headers, trace_id=long_trace, parent_span_id=long_root, steps=steps)
    return p50(long), p50(fresh)


# --- the readers --------------------------------------------------------------------------------


def read_devassist(client: httpx.Client, trace_id: str) -> tuple[int, int]:
    """(spans in the tree, top-level nodes) of the whole trace, through ``/tree``."""
    import uuid

    response = client.get(f"/api/traces/{uuid.UUID(trace_id)}/tree")
    if response.status_code == 404:
        return 0, 0
    response.raise_for_status()
    roots = orjson.loads(response.content)["root_steps"]
    count, stack = 0, list(roots)
    while stack:
        node = stack.pop()
        count += 1
        stack.extend(node["children"])
    return count, len(roots)


def count_devassist(client: httpx.Client, trace_id: str) -> int:
    """The steps DevAssist has stored of the trace (its totals, ``GET /api/traces/{id}``)."""
    import uuid

    response = client.get(f"/api/traces/{uuid.UUID(trace_id)}")
    if response.status_code == 404:
        return 0
    response.raise_for_status()
    return int(orjson.loads(response.content)["total_steps"])


PHOENIX_NUM_SPANS = """query ($traceId: ID!) {
  projects { edges { node { name trace(traceId: $traceId) { numSpans } } } }
}"""


def count_phoenix(client: httpx.Client, trace_id: str) -> int:
    """The spans Phoenix has stored of the trace (its GraphQL API's ``numSpans``)."""
    response = client.post(
        "/graphql", json={"query": PHOENIX_NUM_SPANS, "variables": {"traceId": trace_id}}
    )
    response.raise_for_status()
    for edge in orjson.loads(response.content)["data"]["projects"]["edges"]:
        if edge["node"]["name"] == PHOENIX_PROJECT and edge["node"]["trace"]:
            return int(edge["node"]["trace"]["numSpans"])
    return 0


def read_phoenix(client: httpx.Client, trace_id: str) -> tuple[int, int]:
    """(spans, spans without a parent) of the whole trace, page by page."""
    count = roots = 0
    cursor: str | None = None
    while True:
        params: dict[str, Any] = {"trace_id": trace_id, "limit": PHOENIX_PAGE}
        if cursor:
            params["cursor"] = cursor
        response = client.get(f"/v1/projects/{PHOENIX_PROJECT}/spans", params=params)
        if response.status_code == 404:  # the project is created with its first span
            return 0, 0
        response.raise_for_status()
        body = orjson.loads(response.content)
        count += len(body["data"])
        roots += sum(1 for span in body["data"] if not span.get("parent_id"))
        cursor = body.get("next_cursor")
        if not cursor:
            return count, roots


class Watcher:
    """Someone watching the trace as it arrives: a client of its websocket (``socket``), as the
    trace page's script is, or the trace page itself in Chromium (``page``, signed in as the
    benchmark user). Ready (``ready``) before the trace is sent, it waits for the trace to
    exist (its first batch), follows it until it is complete and notes when
    (``perf_counter``): the socket at ``trace_completed``, the page once it shows the trace
    completed and its one tree (the root's row alone at the top)."""

    def __init__(self, base_url: str, headers: dict[str, str], trace_id: str, kind: str) -> None:
        import threading
        import uuid

        self.base_url = base_url
        self.headers = headers
        self.trace_id = uuid.UUID(trace_id)
        self.kind = kind
        self.ready = threading.Event()
        self.completed_at: float | None = None
        #: What the page showed instead of the whole tree, when it never did.
        self.never = ""
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._watch, name="watcher", daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        try:
            if self.kind == "page":
                self._watch_page()
            else:
                self._watch_socket()
        except BaseException as exc:  # reported by ``wait``
            self.error = exc
        finally:
            self.ready.set()

    def _wait_for_trace(self) -> None:
        with httpx.Client(base_url=self.base_url, headers=self.headers) as client:
            while client.get(f"/api/traces/{self.trace_id}").status_code == 404:
                time.sleep(0.01)

    def _watch_socket(self) -> None:
        from websockets.sync.client import connect

        self.ready.set()
        self._wait_for_trace()
        url = self.base_url.replace("http://", "ws://") + f"/api/traces/{self.trace_id}/watch"
        with connect(url, additional_headers=self.headers, max_size=None) as socket:
            while orjson.loads(socket.recv(timeout=600))["event"] != "trace_completed":
                pass
        self.completed_at = time.perf_counter()

    def _watch_page(self) -> None:
        import re

        from playwright.sync_api import TimeoutError as PlaywrightTimeout
        from playwright.sync_api import sync_playwright

        from tests.browser import CHROMIUM_ARGS

        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            page = browser.new_page(base_url=self.base_url)
            page.goto("/login/")
            page.fill("input[name=username]", BENCH_USERNAME)
            page.fill("input[name=password]", BENCH_PASSWORD)
            page.click("button[type=submit]")
            page.wait_for_url(re.compile(r"^(?!.*/login/).*$"))
            self.ready.set()
            self._wait_for_trace()
            page.goto(f"/traces/{self.trace_id}/")
            page.locator("#trace-status").filter(has_text="completed").wait_for(timeout=600_000)
            try:
                page.wait_for_function(
                    "document.querySelectorAll('#tree > ul.tree > li.node').length === 1"
                    " && !document.querySelector('#tree > ul.tree > li.more')",
                    timeout=30_000,
                )
            except PlaywrightTimeout:
                rows = page.locator("#tree > ul.tree > li.node").count()
                more = page.locator("#tree > ul.tree > li.more").all_inner_texts()
                self.never = f"{rows} rows at the top and {more or 'no link'} 30 s after"
            else:
                self.completed_at = time.perf_counter()
            browser.close()

    def wait(self, timeout_s: float) -> float | None:
        """When the watcher saw the whole trace; None when the page said the trace was
        completed but never showed its tree (``never`` says what it showed)."""
        self._thread.join(timeout_s)
        if self.error is not None:
            raise RuntimeError(f"the watcher failed: {self.error!r}") from self.error
        if self.completed_at is None and not self.never:
            raise RuntimeError(f"the watcher did not see the whole trace in {timeout_s} s")
        return self.completed_at


@dataclass
class Run:
    trace_id: str
    ingest_s: float
    readable_s: float
    #: The read that found the whole trace (the first of the finished trace).
    first_read_s: float
    reads_s: list[float]
    emit_s: float
    #: Flush -> the watcher saw the whole trace (``--watch``; ``inf``: never).
    watched_s: float | None = None


def wait_readable(
    server: Server, sent: Sent, spans: int, *, one_tree: bool, give_up_s: float
) -> tuple[float, float]:
    """Poll the trace ``sent`` on ``server`` every ``server.poll_s`` until its whole read
    returns ``spans`` spans (all in one tree with ``one_tree``); the seconds since its flush
    then, and the seconds that read took (``RuntimeError`` after ``give_up_s``). Where the
    server can count the trace's spans, the poll asks that, and the whole trace is read once
    it counts them all, so that the polling itself does not slow the server down."""
    count = 0
    while True:
        stored = server.count(sent.trace_id)
        if stored is None or stored >= spans:
            started = time.perf_counter()
            count, roots = server.read(sent.trace_id)
            if count == spans and (roots == 1 or not one_tree):
                done = time.perf_counter()
                return done - sent.flush_started, done - started
        if time.perf_counter() - sent.flush_started > give_up_s:
            raise RuntimeError(f"only {count} spans readable after {give_up_s} s")
        time.sleep(server.poll_s)


@dataclass(frozen=True)
class Server:
    """How the benchmark reads a server back through ``client``: ``reader`` the whole trace,
    (spans, top-level spans); ``counter`` the spans it has stored, cheaply, for the polls
    (``None``: the polls read the whole trace); ``poll_s`` between polls."""

    client: httpx.Client
    reader: Callable[[httpx.Client, str], tuple[int, int]]
    counter: Callable[[httpx.Client, str], int] | None
    poll_s: float

    def read(self, trace_id: str) -> tuple[int, int]:
        return self.reader(self.client, trace_id)

    def count(self, trace_id: str) -> int | None:
        """The trace's stored spans; None when the polls read the whole trace instead."""
        return None if self.counter is None else self.counter(self.client, trace_id)


def measure(
    plan: TracePlan,
    server: Server,
    *,
    endpoint: str,
    headers: dict[str, str],
    reads: int,
    give_up_s: float,
    pace_s: float,
    watch_url: str | None = None,
    watch: str | None = None,
) -> Run:
    trace_id = random.getrandbits(128)
    watcher = None
    if watch_url and watch:
        watcher = Watcher(watch_url, headers, f"{trace_id:032x}", watch)
        if not watcher.ready.wait(120):
            raise RuntimeError("the watcher did not get ready")
    sent = send(plan, exporter_for(endpoint, headers), trace_id=trace_id, pace_s=pace_s)
    expected = len(plan.spans)
    readable_s, first_read_s = wait_readable(
        server, sent, expected, one_tree=True, give_up_s=give_up_s
    )
    watched_s = None
    if watcher is not None:
        seen = watcher.wait(give_up_s)
        if seen is None:
            print(f"  the page never showed the whole tree: {watcher.never}")
        watched_s = seen - sent.flush_started if seen is not None else math.inf
    timed = []
    for _ in range(reads):
        started = time.perf_counter()
        assert server.read(sent.trace_id)[0] == expected
        timed.append(time.perf_counter() - started)
    return Run(
        trace_id=sent.trace_id,
        ingest_s=sent.ingest_s,
        readable_s=readable_s,
        first_read_s=first_read_s,
        reads_s=timed,
        emit_s=sent.emit_s,
        watched_s=watched_s,
    )


def kept_by_sdk_queue(
    plan: TracePlan,
    server: Server,
    *,
    endpoint: str,
    headers: dict[str, str],
    give_up_s: float,
    pace_s: float,
) -> int:
    """The spans the SDK's own queue let through (``send``'s ``sdk_queue``), ending over
    ``pace_s`` seconds: how many the server acknowledged, once all of them are readable
    (``RuntimeError`` if they never are)."""
    sent = send(
        plan,
        exporter_for(endpoint, headers),
        trace_id=random.getrandbits(128),
        pace_s=pace_s,
        sdk_queue=True,
    )
    wait_readable(server, sent, sent.exported, one_tree=False, give_up_s=give_up_s)
    return sent.exported


def report_kept(name: str, kept: int, spans: int) -> None:
    print(
        f"\n{name}, the same spans through the SDK's own queue "
        f"({os.environ.get('OTEL_BSP_MAX_QUEUE_SIZE', '2048')} spans):\n"
        f"  spans that reached the server  {kept:8,} of {spans:,} ({spans - kept:,} dropped)"
    )


# --- the servers --------------------------------------------------------------------------------


def prepare_user() -> str:
    """The benchmark user and a fresh API token."""
    from django.contrib.auth import get_user_model

    from devassist.tokens import api_token_create

    user, _ = get_user_model().objects.get_or_create(username=BENCH_USERNAME)
    user.set_password(BENCH_PASSWORD)  # the trace page's sign-in (``--watch page``)
    user.save()
    _, token = api_token_create(user=user, name="otlp benchmark")
    return token


def prepare_devassist(var_dir: str, *, redis: bool) -> tuple[str, dict[str, str]]:
    """Create the benchmark database (``configure_environment`` chose it) afresh and migrate
    it, and return the benchmark user's new API token and the environment of a DevAssist
    server on it (on the Redis channel layer with ``redis``). Afresh, not emptied: with
    autovacuum off (as on the development machines), the rows deleted by earlier runs stay
    in the tables, and a table of 10,000 live steps grew to 565 MB over a dozen runs, which
    the planner then scanned whole (benchmarks/README.md, "2026-12-05 20:10")."""
    recreate_database(os.environ["DATABASE_URL"])
    import django
    from django.core.management import call_command
    from django.db import connection

    django.setup()
    call_command("migrate", verbosity=0)
    token = prepare_user()
    connection.close()
    env = {
        "DATABASE_URL": os.environ["DATABASE_URL"],
        "DEVASSIST_VAR_DIR": var_dir,
        "SANDBOX_WARM_ON_START": "0",
        "SANDBOX_POOL_SIZE": "0",
        "LOG_LEVEL": "WARNING",
        "SECRET_KEY": "otlp-benchmark",
    }
    if redis:
        env |= {"REDIS_URL": os.environ["REDIS_URL"], "CHANNELS_PREFIX": "devassist-bench"}
    return token, env


@contextlib.contextmanager
def phoenix_server(python: Path) -> Iterator[str]:
    """``phoenix serve`` on free loopback ports with a working directory of its own."""
    from tests.servers import free_port, http_server

    work = tempfile.mkdtemp(prefix="phoenix-bench-")
    port = free_port()
    env = {
        **os.environ,
        "PHOENIX_WORKING_DIR": work,
        "PHOENIX_HOST": "127.0.0.1",
        "PHOENIX_PORT": str(port),
        "PHOENIX_GRPC_PORT": str(free_port()),
        "PHOENIX_TELEMETRY_ENABLED": "false",
    }
    phoenix = str(python.parent / "phoenix")
    try:
        with http_server(
            [phoenix, "serve"], port=port, ready_path="/healthz", env=env, timeout_s=300
        ) as base_url:
            yield base_url
    finally:
        shutil.rmtree(work, ignore_errors=True)


# --- the report ---------------------------------------------------------------------------------


def p50(values: Sequence[float]) -> float:
    return statistics.median(values)


def report(name: str, runs: list[Run], watch: str | None = None) -> dict[str, float]:
    figures = {
        "emit": p50([r.emit_s for r in runs]),
        "ingest": p50([r.ingest_s for r in runs]),
        "readable": p50([r.readable_s for r in runs]),
        "first read": p50([r.first_read_s for r in runs]),
        "read": p50([p50(r.reads_s) for r in runs]),
    }
    print(f"\n{name} ({len(runs)} runs; seconds, p50 with the runs' values)")
    rows = [
        ("client emits the spans", [r.emit_s for r in runs], figures["emit"]),
        ("flush -> every batch acknowledged", [r.ingest_s for r in runs], figures["ingest"]),
        ("flush -> whole trace readable", [r.readable_s for r in runs], figures["readable"]),
        ("its first whole read", [r.first_read_s for r in runs], figures["first read"]),
        ("whole-trace read", [p50(r.reads_s) for r in runs], figures["read"]),
    ]
    if all(r.watched_s is not None for r in runs):
        watched = [r.watched_s for r in runs if r.watched_s is not None]
        label = "the open page shows it all" if watch == "page" else "the watcher has every event"
        rows.insert(3, (f"flush -> {label}", watched, p50(watched)))
    for label, values, middle in rows:
        each = ", ".join(f"{v:.3f}" for v in values)
        print(f"  {label:<36} {middle:8.3f}   ({each})")
    return figures


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Benchmark OTLP ingestion against Phoenix.")
    parser.add_argument("--spans", type=int, default=10_000, help="spans in the trace")
    parser.add_argument("--runs", type=int, default=3, help="runs per server")
    parser.add_argument("--reads", type=int, default=5, help="whole-trace reads per run")
    parser.add_argument("--seed", type=int, default=18)
    parser.add_argument(
        "--phoenix-python",
        type=Path,
        default=REPO_ROOT / ".venv-phoenix" / "bin" / "python",
        help="the interpreter of a virtualenv with arize-phoenix installed",
    )
    parser.add_argument("--no-phoenix", action="store_true", help="measure DevAssist alone")
    parser.add_argument(
        "--grpc",
        action="store_true",
        help="also send the trace to DevAssist over OTLP/gRPC (manage.py otlp_grpc)",
    )
    parser.add_argument(
        "--pace",
        type=float,
        default=0.0,
        help="seconds over which the spans end (an agent at work); 0: a burst, the default",
    )
    parser.add_argument(
        "--late",
        type=int,
        default=20,
        help="then send this many late steps (each after its 5 children) into the stored "
        "trace and into a fresh one; 0: none",
    )
    parser.add_argument(
        "--sdk-queue",
        action="store_true",
        help="then send the spans once more through the SDK's own queue (2,048 spans by "
        "default), which drops what comes while it is full, and count those that reach "
        "each server",
    )
    parser.add_argument(
        "--give-up", type=float, default=900.0, help="seconds to wait for a whole trace"
    )
    parser.add_argument(
        "--poll",
        choices=["count", "whole"],
        default="count",
        help="wait for the trace by polling the server's count of its spans, then reading it "
        "whole (the default), or by reading it whole at every poll (which slows the server)",
    )
    parser.add_argument(
        "--watch",
        choices=["socket", "page"],
        help="watch each trace on DevAssist as it arrives: on its websocket, as the trace page's "
        f"script does, or on the trace page in Chromium ({CHROMIUM})",
    )
    parser.add_argument(
        "--redis",
        action="store_true",
        help="run DevAssist on the Redis channel layer (BENCH_REDIS_URL, default "
        f"{DEFAULT_REDIS_URL}) instead of the in-memory one",
    )
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    var_dir = configure_environment(
        default_database_url=DEFAULT_DATABASE_URL,
        var_prefix="devassist-otlp-bench-var-",
        redis_url=os.environ.get("BENCH_REDIS_URL", DEFAULT_REDIS_URL) if args.redis else None,
    )
    print(f"{os.cpu_count()} CPUs, load average {machine_load()}")
    layer = "Redis" if args.redis else "in-memory"
    watched = f", watched ({args.watch})" if args.watch else ""
    print(f"DevAssist on the {layer} channel layer{watched}")
    plan = plan_trace(args.spans, args.seed)
    kinds: dict[str, int] = {}
    for span in plan.spans:
        kind = span.attributes["openinference.span.kind"]
        kinds[kind] = kinds.get(kind, 0) + 1
    widest = max(len(span.children) for span in plan.spans)
    print(
        f"trace: {len(plan.spans)} spans, depth {depth_of(plan)}, widest fan-out {widest}, "
        f"{sum(s.failed for s in plan.spans)} failed, kinds {kinds}"
    )
    if depth_of(plan) < MIN_DEPTH:
        raise SystemExit(f"the trace is not {MIN_DEPTH} deep: try another --seed")
    try:
        token, env = prepare_devassist(var_dir, redis=args.redis)

        from tests.servers import daphne_server, otlp_grpc_process

        results: dict[str, dict[str, float]] = {}
        with daphne_server(env, timeout_s=60) as base_url:
            headers = {"Authorization": f"Bearer {token}"}
            with httpx.Client(base_url=base_url, headers=headers, timeout=120) as client:
                read_devassist(client, "0" * 31 + "1")  # warm the server up
                counter = count_devassist if args.poll == "count" else None
                devassist = Server(client, read_devassist, counter, poll_s=0.02)

                def measured(endpoint: str) -> list[Run]:
                    return [
                        measure(
                            plan,
                            devassist,
                            endpoint=endpoint,
                            headers=headers,
                            reads=args.reads,
                            give_up_s=args.give_up,
                            pace_s=args.pace,
                            watch_url=base_url,
                            watch=args.watch,
                        )
                        for _ in range(args.runs)
                    ]

                runs = measured(f"{base_url}/v1/traces")
                late = None
                if args.late:
                    late = late_figures(
                        client,
                        f"{base_url}/v1/traces",
                        headers,
                        long_trace=runs[-1].trace_id,
                        steps=args.late,
                    )
                kept = None
                if args.sdk_queue:
                    kept = kept_by_sdk_queue(
                        plan,
                        devassist,
                        endpoint=f"{base_url}/v1/traces",
                        headers=headers,
                        give_up_s=args.give_up,
                        pace_s=args.pace,
                    )
                if args.grpc:
                    with otlp_grpc_process(env) as address:
                        grpc_runs = measured(f"grpc://{address}")
            results["DevAssist"] = report("DevAssist (daphne, PostgreSQL)", runs, args.watch)
            if kept is not None:
                report_kept("DevAssist", kept, len(plan.spans))
            if late is not None:
                long_s, fresh_s = late
                print(
                    f"\nan agent still at work (a step sent after its 5 children, p50 of "
                    f"{args.late}):\n"
                    f"  into the {len(plan.spans):,}-span trace  {long_s * 1000:8.1f} ms\n"
                    f"  into a trace of one span      {fresh_s * 1000:8.1f} ms\n"
                    f"  ratio                         {long_s / fresh_s:8.2f}x"
                )
            if args.grpc:
                report("DevAssist over OTLP/gRPC (manage.py otlp_grpc, PostgreSQL)", grpc_runs)
        if not args.no_phoenix and args.phoenix_python.exists():
            with phoenix_server(args.phoenix_python) as base_url:
                with httpx.Client(base_url=base_url, timeout=120) as client:
                    counter = count_phoenix if args.poll == "count" else None
                    phoenix = Server(client, read_phoenix, counter, poll_s=0.25)
                    runs = [
                        measure(
                            plan,
                            phoenix,
                            endpoint=f"{base_url}/v1/traces",
                            headers={},
                            reads=args.reads,
                            give_up_s=args.give_up,
                            pace_s=args.pace,
                        )
                        for _ in range(args.runs)
                    ]
                    kept = None
                    if args.sdk_queue:
                        kept = kept_by_sdk_queue(
                            plan,
                            phoenix,
                            endpoint=f"{base_url}/v1/traces",
                            headers={},
                            give_up_s=args.give_up,
                            pace_s=args.pace,
                        )
                results["Phoenix"] = report("Arize Phoenix (phoenix serve, SQLite)", runs)
                if kept is not None:
                    report_kept("Arize Phoenix", kept, len(plan.spans))
        elif not args.no_phoenix:
            print(f"\nPhoenix: no interpreter at {args.phoenix_python}; measured DevAssist alone")

        ours = results["DevAssist"]
        print("\nverdicts:")
        verdict(
            f"whole trace readable within {TARGET_READABLE_S:.0f} s of the flush",
            ours["readable"] < TARGET_READABLE_S,
            f"{ours['readable']:.2f} s",
        )
        if "Phoenix" in results:
            theirs = results["Phoenix"]
            for label, key in (
                ("ingest", "ingest"),
                ("readable", "readable"),
                ("first read", "first read"),
                ("read", "read"),
            ):
                ratio = theirs[key] / ours[key]
                print(f"  Phoenix / DevAssist, {label}: {ratio:.1f}x")
            ingest_ratio = theirs["readable"] / ours["readable"]
            verdict(
                f">= {TARGET_RATIO:.0f}x faster than Phoenix to ingest (flush -> readable)",
                ingest_ratio >= TARGET_RATIO,
                f"{ingest_ratio:.1f}x",
            )
            read_ratio = theirs["read"] / ours["read"]
            verdict(
                f">= {TARGET_RATIO:.0f}x faster than Phoenix to read the whole trace",
                read_ratio >= TARGET_RATIO,
                f"{read_ratio:.1f}x",
            )
        print(f"\nload average after: {machine_load()}")
    finally:
        shutil.rmtree(var_dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
