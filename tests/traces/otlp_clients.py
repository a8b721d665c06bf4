"""OTLP test clients: spans and log records made by the real OpenTelemetry SDK, encoded by its
own OTLP encoders as protobuf, or as OTLP/JSON (the proto's JSON mapping with hex ids and
integer enums, as the OTLP specification writes it), and posted to DevAssist's ASGI
application."""

from __future__ import annotations

import gzip
import json
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any

import httpx
from channels.testing import WebsocketCommunicator
from google.protobuf import json_format
from google.protobuf.message import Message
from opentelemetry import trace as otel_trace
from opentelemetry._logs import Logger
from opentelemetry.exporter.otlp.proto.common._log_encoder import encode_logs
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk._logs import LoggerProvider, ReadableLogRecord
from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, SimpleLogRecordProcessor
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import Sampler

from traces.otlp import LOGS, TRACES

PROTOBUF = "application/x-protobuf"
JSON = "application/json"


def recording_provider(
    service: str, *, sampler: Sampler | None = None
) -> tuple[TracerProvider, InMemorySpanExporter]:
    """A fresh SDK provider for ``service`` (with ``sampler``, by default the SDK's) and the
    exporter that keeps its ended spans."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider(
        resource=Resource.create({"service.name": service}),
        shutdown_on_exit=False,
        sampler=sampler,
    )
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


def sdk_spans(
    build: Callable[[otel_trace.Tracer], Any], *, service: str = "test-agent"
) -> list[ReadableSpan]:
    """The spans ``build`` makes with a tracer of a fresh SDK provider, in the order they
    ended (the order an exporter sends them)."""
    provider, exporter = recording_provider(service)
    build(provider.get_tracer("tests.otlp", "1.0"))
    provider.shutdown()
    return list(exporter.get_finished_spans())


def sdk_spans_and_logs(
    build: Callable[[otel_trace.Tracer, Logger], Any],
    *,
    service: str = "test-agent",
    sampler: Sampler | None = None,
) -> tuple[list[ReadableSpan], list[ReadableLogRecord]]:
    """The spans and log records ``build`` makes with a tracer (with ``sampler``) and a
    logger of fresh SDK providers (a record emitted inside a span names it), each in the
    order they ended or were emitted."""
    provider, exporter = recording_provider(service, sampler=sampler)
    logs = InMemoryLogRecordExporter()
    logger_provider = LoggerProvider(
        resource=Resource.create({"service.name": service}), shutdown_on_exit=False
    )
    logger_provider.add_log_record_processor(SimpleLogRecordProcessor(logs))
    build(provider.get_tracer("tests.otlp", "1.0"), logger_provider.get_logger("tests.otlp"))
    provider.shutdown()
    logger_provider.shutdown()
    return list(exporter.get_finished_spans()), list(logs.get_finished_logs())


def logs_request(records: Sequence[ReadableLogRecord]) -> ExportLogsServiceRequest:
    return encode_logs(records)


def logs_body(records: Sequence[ReadableLogRecord]) -> bytes:
    return request_body(logs_request(records))


def logs_json_body(records: Sequence[ReadableLogRecord]) -> bytes:
    return request_body(logs_request(records), JSON)


def export_request(spans: Sequence[ReadableSpan]) -> ExportTraceServiceRequest:
    return encode_spans(spans)


def protobuf_body(spans: Sequence[ReadableSpan]) -> bytes:
    return request_body(export_request(spans))


def hex_ids(value: Any) -> Any:
    """A proto3 JSON document with its base64 ids written as OTLP/JSON writes them: hex."""
    import base64

    if isinstance(value, list):
        return [hex_ids(item) for item in value]
    if isinstance(value, dict):
        return {
            key: base64.b64decode(item).hex()
            if key in {"traceId", "spanId", "parentSpanId"} and isinstance(item, str)
            else hex_ids(item)
            for key, item in value.items()
        }
    return value


def json_document(request: Message) -> dict[str, Any]:
    return hex_ids(json_format.MessageToDict(request, use_integers_for_enums=True))


def json_body(spans: Sequence[ReadableSpan]) -> bytes:
    return request_body(export_request(spans), JSON)


def request_body(request: Message, encoding: str = PROTOBUF) -> bytes:
    """An export request (spans or log records) as a body in ``encoding``: protobuf, or
    OTLP/JSON."""
    if encoding == JSON:
        return json.dumps(json_document(request)).encode()
    return bytes(request.SerializeToString())


def gzipped(body: bytes) -> bytes:
    return gzip.compress(body)


async def post_otlp(
    body: bytes,
    *,
    token: str | None,
    content_type: str = PROTOBUF,
    headers: dict[str, str] | None = None,
    header: str = "authorization",
    path: str = "/v1/traces",
) -> httpx.Response:
    """POST ``body`` to ``path`` (``/v1/traces``, ``/v1/logs``) through the ASGI application,
    as daphne serves it, with ``token`` as a bearer token (or as ``x-api-key`` with
    ``header="x-api-key"``)."""
    from devassist.asgi import application

    sent = {"Content-Type": content_type, **(headers or {})}
    if token is not None:
        sent.update(
            {"Authorization": f"Bearer {token}"} if header == "authorization" else {header: token}
        )
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=application), base_url="http://127.0.0.1", timeout=60
    ) as client:
        return await client.post(path, content=body, headers=sent)


def partial_success(response: httpx.Response, *, logs: bool = False) -> tuple[int, str]:
    """``(rejected_spans, error_message)`` of a 200 answer, in either encoding
    (``rejected_log_records`` with ``logs``)."""
    signal = LOGS if logs else TRACES
    if response.headers["content-type"].startswith(JSON):
        body = response.json().get("partialSuccess", {})
        rejected = body.get("rejectedLogRecords" if logs else "rejectedSpans", 0)
        return int(rejected), body.get("errorMessage", "")
    answer = signal.response()
    answer.ParseFromString(response.content)
    found = answer.partial_success
    return getattr(found, signal.rejected_field), found.error_message


@asynccontextmanager
async def watching(trace_id: Any, token: str) -> AsyncIterator[WebsocketCommunicator]:
    """The trace's watch websocket, connected with ``token``, past its ``connected``."""
    from devassist.asgi import application

    watcher = WebsocketCommunicator(
        application,
        f"/api/traces/{trace_id}/watch",
        headers=[(b"authorization", f"Bearer {token}".encode())],
    )
    connected, _ = await watcher.connect()
    assert connected
    try:
        assert (await watcher.receive_json_from(timeout=10))["event"] == "connected"
        yield watcher
    finally:
        await watcher.disconnect()
