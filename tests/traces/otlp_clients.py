"""OTLP test clients: spans made by the real OpenTelemetry SDK, encoded by its own OTLP
encoder as protobuf, or as OTLP/JSON (the proto's JSON mapping with hex ids and integer enums,
as the OTLP specification writes it), and posted to DevAssist's ASGI application."""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable, Sequence
from typing import Any

import httpx
from google.protobuf import json_format
from opentelemetry import trace as otel_trace
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

PROTOBUF = "application/x-protobuf"
JSON = "application/json"


def recording_provider(service: str) -> tuple[TracerProvider, InMemorySpanExporter]:
    """A fresh SDK provider for ``service`` and the exporter that keeps its ended spans."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider(
        resource=Resource.create({"service.name": service}), shutdown_on_exit=False
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


def export_request(spans: Sequence[ReadableSpan]) -> ExportTraceServiceRequest:
    return encode_spans(spans)


def protobuf_body(spans: Sequence[ReadableSpan]) -> bytes:
    return export_request(spans).SerializeToString()


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


def json_document(request: ExportTraceServiceRequest) -> dict[str, Any]:
    return hex_ids(json_format.MessageToDict(request, use_integers_for_enums=True))


def json_body(spans: Sequence[ReadableSpan]) -> bytes:
    return json.dumps(json_document(export_request(spans))).encode()


def gzipped(body: bytes) -> bytes:
    return gzip.compress(body)


async def post_otlp(
    body: bytes,
    *,
    token: str | None,
    content_type: str = PROTOBUF,
    headers: dict[str, str] | None = None,
    header: str = "authorization",
) -> httpx.Response:
    """POST ``body`` to ``/v1/traces`` through the ASGI application, as daphne serves it,
    with ``token`` as a bearer token (or as ``x-api-key`` with ``header="x-api-key"``)."""
    from devassist.asgi import application

    sent = {"Content-Type": content_type, **(headers or {})}
    if token is not None:
        sent.update(
            {"Authorization": f"Bearer {token}"} if header == "authorization" else {header: token}
        )
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=application), base_url="http://127.0.0.1", timeout=60
    ) as client:
        return await client.post("/v1/traces", content=body, headers=sent)


def partial_success(response: httpx.Response) -> tuple[int, str]:
    """``(rejected_spans, error_message)`` of a 200 answer, in either encoding."""
    if response.headers["content-type"].startswith(JSON):
        body = response.json().get("partialSuccess", {})
        return int(body.get("rejectedSpans", 0)), body.get("errorMessage", "")
    answer = ExportTraceServiceResponse()
    answer.ParseFromString(response.content)
    return answer.partial_success.rejected_spans, answer.partial_success.error_message
