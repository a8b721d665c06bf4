"""OTLP/HTTP trace ingestion, the protocol's side: request bodies (protobuf or JSON, gzip) into
spans checked against the limits, spans into steps (the mapping of docs/opentelemetry.md), and
the protocol's answers (``ExportTraceServiceResponse``, ``google.rpc.Status``).

No database here: ``traces.services.otlp_spans_ingest`` writes what this module decodes,
through the trace store. Ids map deterministically, so a re-sent span is the same step: an
OTel trace id (16 bytes) *is* the DevAssist trace id (the same 128 bits as a UUID), and a span
is the step ``uuid5(OTEL_STEP_NAMESPACE, "<trace id hex><span id hex>")``.
"""

from __future__ import annotations

import ast
import base64
import binascii
import json
import re
import time
import uuid
import zlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal, InvalidOperation
from http import HTTPStatus
from typing import Any

import orjson
from django.conf import settings
from google.protobuf import json_format
from google.protobuf.message import DecodeError, Message
from google.rpc import code_pb2, status_pb2
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
    ExportLogsPartialSuccess,
    ExportLogsServiceRequest,
    ExportLogsServiceResponse,
)
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsPartialSuccess,
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTracePartialSuccess,
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

from devassist.responses import json_bytes
from devassist.storable import REPLACEMENT
from traces.messages import asked_in
from traces.models import StepStatus, StepType, TraceStatus
from traces.projections import clip, iso
from traces.store import COST_LIMIT, StepCreate

PROTOBUF = "application/x-protobuf"
JSON = "application/json"

#: Steps of OTLP spans are named in this namespace (``span_step_id``).
OTEL_STEP_NAMESPACE = uuid.UUID("5d1c6f2e-8a47-4b0e-9f3a-0b7e1d2c4a59")

#: The tree's ``name`` column holds this many characters of a span's name.
NAME_CHARS = 200
#: A trace's task (its root span's input, or name) is cut to this many characters.
TASK_CHARS = 1000
#: Spans may end this far after the server's clock (clients' clocks drift); later is refused.
MAX_CLOCK_SKEW_NS = 24 * 3600 * 10**9
_TOKENS_MAX = 2**31 - 1
_COST_QUANTUM = Decimal("0.00000001")
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class OtlpError(Exception):
    """A request refused as a whole: its HTTP status and the ``google.rpc.Code`` of its
    ``Status`` body."""

    def __init__(self, status: HTTPStatus, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.code = _RPC_CODES.get(status, code_pb2.UNKNOWN)


_RPC_CODES = {
    HTTPStatus.BAD_REQUEST: code_pb2.INVALID_ARGUMENT,
    HTTPStatus.UNAUTHORIZED: code_pb2.UNAUTHENTICATED,
    HTTPStatus.FORBIDDEN: code_pb2.PERMISSION_DENIED,
    HTTPStatus.NOT_FOUND: code_pb2.UNIMPLEMENTED,
    HTTPStatus.METHOD_NOT_ALLOWED: code_pb2.UNIMPLEMENTED,
    HTTPStatus.REQUEST_ENTITY_TOO_LARGE: code_pb2.RESOURCE_EXHAUSTED,
    HTTPStatus.UNSUPPORTED_MEDIA_TYPE: code_pb2.INVALID_ARGUMENT,
    HTTPStatus.INTERNAL_SERVER_ERROR: code_pb2.INTERNAL,
    HTTPStatus.SERVICE_UNAVAILABLE: code_pb2.UNAVAILABLE,
}


@dataclass(frozen=True)
class Limits:
    """What one request may hold: its body's bytes once decompressed, spans in all, and per
    span its attributes (and each event's, link's and the resource's), events, links, and
    the characters of one string value (or the bytes of a bytes value)."""

    max_body_bytes: int
    max_spans: int
    max_attributes: int
    max_events: int
    max_value_chars: int

    @classmethod
    def current(cls) -> Limits:
        """The limits the settings set (``MAX_REQUEST_BYTES``, ``OTLP_MAX_*``)."""
        return cls(
            max_body_bytes=settings.DATA_UPLOAD_MAX_MEMORY_SIZE,
            max_spans=settings.OTLP_MAX_SPANS,
            max_attributes=settings.OTLP_MAX_ATTRIBUTES,
            max_events=settings.OTLP_MAX_EVENTS,
            max_value_chars=settings.OTLP_MAX_VALUE_CHARS,
        )


# --- the signals ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Signal:
    """What one OTLP endpoint takes and answers: its request and response messages, and what
    its items are called (in messages, and in ``partial_success``)."""

    items: str
    request: type[Message]
    response: type[Message]
    partial_success: type[Message]
    rejected_field: str
    #: The SDK's variable of the most items its exporter sends at once; "" for metrics,
    #: which DevAssist refuses whatever their size (an exporter is told to send none).
    batch_size_variable: str = ""


TRACES = Signal(
    items="spans",
    request=ExportTraceServiceRequest,
    response=ExportTraceServiceResponse,
    partial_success=ExportTracePartialSuccess,
    rejected_field="rejected_spans",
    batch_size_variable="OTEL_BSP_MAX_EXPORT_BATCH_SIZE",
)
LOGS = Signal(
    items="log records",
    request=ExportLogsServiceRequest,
    response=ExportLogsServiceResponse,
    partial_success=ExportLogsPartialSuccess,
    rejected_field="rejected_log_records",
    batch_size_variable="OTEL_BLRP_MAX_EXPORT_BATCH_SIZE",
)


#: Metrics: taken to be refused, every data point (``metrics_refused``).
METRICS = Signal(
    items="metric data points",
    request=ExportMetricsServiceRequest,
    response=ExportMetricsServiceResponse,
    partial_success=ExportMetricsPartialSuccess,
    rejected_field="rejected_data_points",
)

#: What an exporter of metrics is told (DevAssist keeps none): how to stop sending them.
NO_METRICS = (
    "DevAssist keeps traces and logs, not metrics: set OTEL_METRICS_EXPORTER=none (or point "
    "the metrics exporter at a metrics backend)."
)

#: The fields of a metric that hold its data points, one of them set.
_METRIC_DATA = ("gauge", "sum", "histogram", "exponential_histogram", "summary")


def metrics_refused(request: ExportMetricsServiceRequest) -> Any:
    """The answer to a metrics export: every data point refused as OTLP's partial success
    says, with ``NO_METRICS``. Not an error: SDK set-ups that export traces to an endpoint
    often export metrics there too, some whatever ``OTEL_METRICS_EXPORTER`` says (Google's
    ADK, the Microsoft Agent Framework), and their exporters log a failed export every
    minute; a partial success is not retried, and they log it at most as a warning."""
    points = 0
    for resource in request.resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                kind = metric.WhichOneof("data")
                if kind in _METRIC_DATA:
                    points += len(getattr(metric, kind).data_points)
    return success_response(rejected=points, message=NO_METRICS, signal=METRICS)


# --- the body ---------------------------------------------------------------------------------


def encoding_of(content_type: str) -> str:
    """``PROTOBUF`` or ``JSON`` for a request's ``Content-Type``; ``OtlpError`` (415)
    otherwise."""
    media = content_type.split(";", 1)[0].strip().lower()
    if media in (PROTOBUF, "application/protobuf"):
        return PROTOBUF
    if media == JSON:
        return JSON
    raise OtlpError(
        HTTPStatus.UNSUPPORTED_MEDIA_TYPE,
        f"Unsupported Content-Type {content_type!r}: send {PROTOBUF} or {JSON}.",
    )


def decode_request(
    body: bytes,
    *,
    encoding: str,
    content_encoding: str,
    max_bytes: int,
    signal: Signal = TRACES,
) -> Any:
    """The ``signal``'s export request in ``body`` (an ``ExportTraceServiceRequest`` by
    default; ``encoding`` as ``encoding_of`` gives it; ``content_encoding`` ``gzip`` or none).
    ``OtlpError``: 415 for another content encoding, 413 for a body past ``max_bytes`` once
    decompressed, 400 for one that does not decode."""
    coding = content_encoding.strip().lower()
    if coding == "gzip":
        body = _gunzip(body, max_bytes, signal)
    elif coding not in ("", "identity"):
        raise OtlpError(
            HTTPStatus.UNSUPPORTED_MEDIA_TYPE,
            f"Unsupported Content-Encoding {content_encoding!r}: send gzip or nothing.",
        )
    if len(body) > max_bytes:
        raise _too_large(max_bytes, signal)
    request = signal.request()
    if encoding == PROTOBUF:
        try:
            request.ParseFromString(body)
        except (DecodeError, RecursionError, ValueError) as exc:
            raise OtlpError(HTTPStatus.BAD_REQUEST, f"Malformed protobuf body: {exc}") from exc
        return request
    try:
        # The standard library's parser, not orjson: it takes a lone surrogate's escape.
        document = json.loads(body, parse_constant=_no_constant)
    except (RecursionError, ValueError) as exc:
        raise OtlpError(HTTPStatus.BAD_REQUEST, f"Malformed JSON body: {exc}") from exc
    if not isinstance(document, dict):
        raise OtlpError(HTTPStatus.BAD_REQUEST, "The JSON body must be an object.")
    try:
        json_format.ParseDict(_proto_json(document), request, ignore_unknown_fields=True)
    except (json_format.ParseError, RecursionError, TypeError, ValueError) as exc:
        raise OtlpError(HTTPStatus.BAD_REQUEST, f"Invalid OTLP JSON: {exc}") from exc
    return request


def _too_large(max_bytes: int, signal: Signal) -> OtlpError:
    advice = (
        f"send smaller batches ({signal.batch_size_variable})."
        if signal.batch_size_variable
        else NO_METRICS
    )
    return OtlpError(
        HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
        f"The request body is larger than {max_bytes} bytes (decompressed): {advice}",
    )


def _gunzip(body: bytes, max_bytes: int, signal: Signal) -> bytes:
    """``body`` decompressed, never more than ``max_bytes`` of it (a small body can hold a
    huge one). Every member of it, one after the other, as ``gunzip`` reads them (a gzip body
    may be several members put end to end); 400 for one that ends early or bytes after the
    last that are not a member."""
    out = bytearray()
    rest = body
    while True:
        inflater = zlib.decompressobj(wbits=31)
        try:
            out += inflater.decompress(rest, max_bytes + 1 - len(out))
        except zlib.error as exc:
            raise OtlpError(HTTPStatus.BAD_REQUEST, f"Malformed gzip body: {exc}") from exc
        if len(out) > max_bytes or inflater.unconsumed_tail:
            raise _too_large(max_bytes, signal)
        if not inflater.eof:
            raise OtlpError(HTTPStatus.BAD_REQUEST, "Malformed gzip body: it ends early.")
        rest = inflater.unused_data
        if not rest:
            return bytes(out)


def _no_constant(name: str) -> None:
    raise ValueError(f"{name} is not JSON")


_ID_FIELDS = frozenset({"traceId", "trace_id", "spanId", "span_id", "parentSpanId"})
_ID_FIELDS |= {"parent_span_id"}
#: What an id that is neither hex nor base64 becomes: one byte, refused as a wrong length.
_BAD_ID = base64.b64encode(b"\x00").decode()
#: Half of a UTF-16 surrogate pair: JSON can escape one (``"\\ud83d"``), a protobuf string
#: cannot hold it. JavaScript's OTLP/JSON exporter sends one when an attribute length limit
#: (``OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT``) cuts an emoji in two.
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def _proto_json(value: Any) -> Any:
    """An OTLP/JSON document in the proto3 JSON form ``ParseDict`` reads.

    OTLP/JSON writes trace and span ids as hex, where proto3's JSON mapping of ``bytes`` is
    base64; base64 ids are taken too (their lengths tell them apart: 16 bytes are 32 hex
    digits or 24 base64 characters ending in ``==``). An id that is neither becomes one
    that the span checks refuse, so the span is rejected, not the request. A lone surrogate
    in a string (or a key) becomes U+FFFD, as text DevAssist cannot store does
    (``devassist.storable``): the span is kept, not the request refused."""
    if isinstance(value, str):
        return _LONE_SURROGATE.sub(REPLACEMENT, value)
    if isinstance(value, list):
        return [_proto_json(item) for item in value]
    if not isinstance(value, dict):
        return value
    converted = {}
    for key, item in value.items():
        if key in _ID_FIELDS and isinstance(item, str):
            converted[key] = _id_as_base64(item)
        else:
            # A key too: ``ParseDict`` looks fields up by name, and fails on a lone surrogate.
            converted[_LONE_SURROGATE.sub(REPLACEMENT, key)] = _proto_json(item)
    return converted


def _id_as_base64(text: str) -> str:
    if not text:
        return text
    try:
        return base64.b64encode(bytes.fromhex(text)).decode()
    except ValueError:
        pass
    try:
        base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        return _BAD_ID
    return text


# --- the answers ------------------------------------------------------------------------------


def success_response(*, rejected: int, message: str, signal: Signal) -> Any:
    """The ``signal``'s export response (``ExportTraceServiceResponse``,
    ``ExportLogsServiceResponse``): empty when every item was taken, with ``partial_success``
    (``rejected_spans`` or ``rejected_log_records``, ``error_message``) otherwise."""
    response = signal.response()
    if rejected or message:
        response.partial_success.CopyFrom(
            signal.partial_success(**{signal.rejected_field: rejected, "error_message": message})
        )
    return response


def success_body(*, rejected: int, message: str, encoding: str, signal: Signal = TRACES) -> bytes:
    """``success_response`` in ``encoding``."""
    return encode(success_response(rejected=rejected, message=message, signal=signal), encoding)


def status_body(error: OtlpError, *, encoding: str) -> bytes:
    """The ``google.rpc.Status`` of a refused request."""
    return encode(status_pb2.Status(code=error.code, message=error.message), encoding)


def encode(message: Any, encoding: str) -> bytes:
    """``message`` (an OTLP response, a status) in ``encoding``."""
    if encoding == JSON:
        return json.dumps(json_format.MessageToDict(message), ensure_ascii=False).encode()
    return bytes(message.SerializeToString())


# --- spans into steps -------------------------------------------------------------------------


@dataclass
class TraceSpans:
    """The spans of one trace in a request, as steps in the order to store them (parents
    before their children, siblings by start time), and what the trace takes from them."""

    trace_id: uuid.UUID
    #: The service (``service.name``) of the trace's first spans in the request.
    service: str
    resource: dict[str, Any]
    steps: list[StepCreate] = field(default_factory=list)
    #: Set when the batch holds the trace's root span (one without a parent), which names
    #: the trace after its own service, as tracing UIs do (a trace of spans from several
    #: services is its entry point's).
    complete: str | None = None
    duration_ms: int | None = None
    task: str | None = None
    root_service: str | None = None
    #: The root span's step, when the batch holds it ended (``complete``).
    ended_by: uuid.UUID | None = None
    #: The root span's step, when the batch holds it without an input that asks anything (none,
    #: or structured input ``asked_in`` finds no question in: a framework's own state): the
    #: trace is then named after what log records that waited for it, or the trace's first
    #: model call, were asked, else ``task`` (``traces.services``).
    unnamed_root: uuid.UUID | None = None

    @property
    def otel_trace_id(self) -> str:
        """The trace id as OTel writes it (32 hex digits)."""
        return self.trace_id.hex


#: How much of an item's name a refusal's reason shows (``item_name``).
REASON_NAME_CHARS = 100


def item_name(name: str) -> str:
    """A span's or log record's ``name`` as a refusal's reason shows it: quoted and cut (it
    can be as long as a client likes, and may be why it is refused)."""
    return repr(clip(name, REASON_NAME_CHARS))


@dataclass
class Refusals:
    """How many of a request's ``total`` items were refused (``rejected``, with the first
    reasons in ``reasons``)."""

    total: int = 0
    rejected: int = 0
    reasons: list[str] = field(default_factory=list)

    def reject(self, count: int, reason: str) -> None:
        self.rejected += count
        if len(self.reasons) < 5:
            self.reasons.append(reason)


@dataclass
class SpanBatch(Refusals):
    """A request's spans by trace, and the ones refused."""

    traces: dict[uuid.UUID, TraceSpans] = field(default_factory=dict)


class Refused(Exception):
    """A span or log record the limits or the protocol refuse; the message says why."""


def span_step_id(trace_id: bytes, span_id: bytes) -> uuid.UUID:
    """The step id of a span (the same for every sending of it)."""
    return uuid.uuid5(OTEL_STEP_NAMESPACE, trace_id.hex() + span_id.hex())


def count_spans(request: ExportTraceServiceRequest) -> int:
    return sum(len(s.spans) for r in request.resource_spans for s in r.scope_spans)


def check_count(total: int, limits: Limits, signal: Signal) -> None:
    """``OtlpError`` (413) for a request of more than ``limits.max_spans`` items."""
    if total > limits.max_spans:
        raise OtlpError(
            HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
            f"The request holds {total} {signal.items}; at most {limits.max_spans} are taken "
            f"at once ({signal.batch_size_variable}).",
        )


def service_of(resource: Mapping[str, Any]) -> str:
    """The service a resource names (``service.name``, ``otel`` without one)."""
    return str(resource.get("service.name") or "otel")[:100]


def request_spans(
    request: ExportTraceServiceRequest, *, limits: Limits, now_ns: int | None = None
) -> SpanBatch:
    """The request's spans as steps, grouped by trace; spans that break the protocol or the
    limits (bad ids, timestamps out of range, too many attributes, events or links, a value
    too long) are counted as rejected with a reason. A span sent twice in the request is
    taken once. ``OtlpError`` (413) for more than ``limits.max_spans`` spans."""
    total = count_spans(request)
    check_count(total, limits, TRACES)
    now_ns = now_ns if now_ns is not None else time.time_ns()
    batch = SpanBatch(total=total)
    spans: dict[uuid.UUID, dict[bytes, tuple[Span, StepCreate, int]]] = {}
    for resource_spans in request.resource_spans:
        try:
            resource = attributes_of(resource_spans.resource.attributes, limits)
        except Refused as exc:
            count = sum(len(s.spans) for s in resource_spans.scope_spans)
            batch.reject(count, f"resource: {exc}")
            continue
        service = service_of(resource)
        for scope_spans in resource_spans.scope_spans:
            scope = scope_spans.scope.name
            for span in scope_spans.spans:
                try:
                    step, start = _span_step(
                        span, limits=limits, now_ns=now_ns, scope=scope, service=service
                    )
                except Refused as exc:
                    span_id = span.span_id.hex() or "(no id)"
                    batch.reject(1, f"span {span_id} {item_name(span.name)}: {exc}")
                    continue
                trace_id = uuid.UUID(bytes=span.trace_id)
                entry = batch.traces.get(trace_id)
                if entry is None:
                    entry = batch.traces[trace_id] = TraceSpans(
                        trace_id=trace_id,
                        service=service,
                        resource=resource,
                    )
                    spans[trace_id] = {}
                if span.span_id in spans[trace_id]:
                    continue
                spans[trace_id][span.span_id] = (span, step, start)
                if not span.parent_span_id:
                    _set_root(entry, span, step, service)
    for trace_id, entry in batch.traces.items():
        entry.steps = _parents_first(spans[trace_id])
    return batch


def _set_root(entry: TraceSpans, span: Span, step: StepCreate, service: str) -> None:
    if not span.end_time_unix_nano:
        return
    entry.root_service = service
    entry.ended_by = step.id
    # The step's status, not the span's: a tool call whose framework says it failed (its
    # span ended OK) ends its trace failed too.
    entry.complete = (
        TraceStatus.FAILED if step.status == StepStatus.FAILED else TraceStatus.COMPLETED
    )
    entry.duration_ms = step.duration_ms
    given = step.data.get("input")
    entry.task = task_of(given, span.name)
    structured = as_structured(given)
    if not asked_in(structured) and not (isinstance(structured, str) and structured.strip()):
        entry.unnamed_root = step.id


def task_of(root_input: Any, name: str) -> str:
    """A trace's task: its root's input (a string as it is, structured input what it asks,
    ``traces.messages.asked_in``, else its JSON text), else its name, cut to ``TASK_CHARS``.
    JSON text of an object or a list is structured input, with or without a JSON mime type
    (smolagents and AutoGen send none)."""
    return (asked_in(as_structured(root_input)) or _as_text(root_input) or name)[:TASK_CHARS]


def as_structured(value: Any) -> Any:
    """``value``, or the object or list its JSON text holds when it is such text."""
    if isinstance(value, str):
        parsed = json_text_value(value)
        if isinstance(parsed, dict | list):
            return parsed
    return value


def _as_text(value: Any) -> str:
    """A string as it is, structured JSON as its compact text (``json_bytes``, which never
    fails on a value it cannot encode as it is), nothing (an empty list or object too) as
    ""."""
    if value is None or isinstance(value, str):
        return value or ""
    if value in ([], {}):
        return ""  # nothing asked (Semantic Kernel's agent records "[]" as its input)
    return json_bytes(value).decode()


def _parents_first(spans: Mapping[bytes, tuple[Span, StepCreate, int]]) -> list[StepCreate]:
    """The steps ordered by their depth within the batch, then by start: a parent in the
    batch comes before its children (the store takes them so), and siblings get their seqs
    in the order they started."""
    levels: dict[bytes, int] = {}

    def level(span_id: bytes) -> int:
        chain: list[bytes] = []
        current: bytes | None = span_id
        while current is not None and current not in levels and current in spans:
            if current in chain:  # a loop of parents: its steps wait (the store keeps them)
                break
            chain.append(current)
            parent = spans[current][0].parent_span_id
            current = parent or None
        base = levels.get(current, -1) if current is not None else -1
        for depth, sid in enumerate(reversed(chain), start=base + 1):
            levels[sid] = depth
        return levels[span_id]

    ordered = sorted(spans, key=lambda sid: (level(sid), spans[sid][2]))
    return [spans[sid][1] for sid in ordered]


# --- one span ---------------------------------------------------------------------------------


_NO_SPAN_ID = bytes(8)


def check_id(value: bytes, size: int, what: str) -> None:
    if len(value) != size:
        raise Refused(f"{what} must be {size} bytes, got {len(value)}")
    if not any(value):
        raise Refused(f"{what} is all zeros")


def time_of(ns: int) -> datetime:
    return _EPOCH + timedelta(microseconds=ns // 1000)


def _span_step(
    span: Span, *, limits: Limits, now_ns: int, scope: str, service: str
) -> tuple[StepCreate, int]:
    """The step of ``span`` and its start (ns); ``Refused`` for a span that breaks the
    protocol or the limits. An all-zero parent id is cleared from ``span``: it is a root."""
    check_id(span.trace_id, 16, "trace id")
    check_id(span.span_id, 8, "span id")
    if span.parent_span_id == _NO_SPAN_ID:
        # An all-zero id is OTel's invalid span id: no parent. Some emitters and converters
        # (Zipkin's and Jaeger's root spans carried over) write it for a root.
        span.ClearField("parent_span_id")
    if span.parent_span_id:
        check_id(span.parent_span_id, 8, "parent span id")
        if span.parent_span_id == span.span_id:
            raise Refused("a span cannot be its own parent")
    start, end = span.start_time_unix_nano, span.end_time_unix_nano
    if start == 0:
        raise Refused("no start time")
    if start > now_ns + MAX_CLOCK_SKEW_NS or end > now_ns + MAX_CLOCK_SKEW_NS:
        raise Refused("a timestamp lies more than a day in the future")
    for what, count in (("events", len(span.events)), ("links", len(span.links))):
        if count > limits.max_events:
            raise Refused(f"{count} {what}, more than {limits.max_events}")
    if any(event.time_unix_nano > now_ns + MAX_CLOCK_SKEW_NS for event in span.events):
        raise Refused("an event's time lies more than a day in the future")
    texts = [("a name", span.name), ("a status message", span.status.message)]
    check_texts([*texts, *(("an event name", event.name) for event in span.events)], limits)
    attributes = attributes_of(span.attributes, limits)
    _parse_declared_json(attributes)
    events = [
        {
            "name": event.name,
            "time": iso(time_of(event.time_unix_nano)) if event.time_unix_nano else None,
            "attributes": attributes_of(event.attributes, limits),
        }
        for event in span.events
    ]
    links = [
        {
            "trace_id": link.trace_id.hex(),
            "span_id": link.span_id.hex(),
            "attributes": attributes_of(link.attributes, limits),
        }
        for link in span.links
    ]
    step_type = step_type_of(attributes, is_root=not span.parent_span_id, name=span.name)
    data, tool_error = _step_data(
        span, attributes, events, links, step_type=step_type, scope=scope, service=service
    )
    failed = span.status.code == Status.STATUS_CODE_ERROR or bool(tool_error)
    error = ""
    if failed:
        error = (
            span.status.message
            or _exception_text(events)
            or tool_error
            or "The span ended with an error."
        )
    if not end:
        status = StepStatus.RUNNING
    else:
        status = StepStatus.FAILED if failed else StepStatus.COMPLETED
    restated = restates_usage(attributes, span.kind)
    name = _step_name(span.name, data)
    if name[:NAME_CHARS] != span.name:
        # The span's own name, where the step's is another (its tool's) or cut short.
        data["otel_span"]["name"] = span.name
    step = StepCreate(
        id=span_step_id(span.trace_id, span.span_id),
        parent_id=span_step_id(span.trace_id, span.parent_span_id) if span.parent_span_id else None,
        step_type=step_type,
        status=status,
        name=name[:NAME_CHARS],
        data=data,
        error=error,
        started_at=time_of(start),
        finished_at=time_of(end) if end else None,
        duration_ms=max(0, (end - start) // 1_000_000) if end else None,
        tokens=0 if restated else tokens_of(attributes) or _replies_tokens(span.name, data),
        cost=Decimal(0) if restated else cost_of(attributes),
        out_of_order=True,
    )
    return step, start


#: Haystack's model calls, whose usage is in their replies' ``meta`` (no attribute says it).
_HAYSTACK_MODEL_CALLS = frozenset({"haystack.agent.step.llm", "haystack.chat_generator.run"})


def _replies_tokens(span_name: str, data: Mapping[str, Any]) -> int:
    """The tokens of a Haystack model call (``_HAYSTACK_MODEL_CALLS``): the sum of its
    replies' ``meta.usage`` (their total, else prompt plus completion); 0 for any other
    span."""
    if span_name not in _HAYSTACK_MODEL_CALLS:
        return 0
    used = 0
    for meta in _replies_metas(data.get("output")):
        usage = meta.get("usage")
        if isinstance(usage, dict):
            used += tokens_of({f"gen_ai.usage.{key}": value for key, value in usage.items()})
    return min(used, _TOKENS_MAX)


def _replies_metas(output: Any) -> list[dict[str, Any]]:
    """The ``meta`` of each of a Haystack chat generator's ``replies`` in its ``output``."""
    replies = output.get("replies") if isinstance(output, dict) else None
    metas = [reply.get("meta") for reply in replies or [] if isinstance(reply, dict)]
    return [meta for meta in metas if isinstance(meta, dict)]


def _replies_meta(output: Any) -> dict[str, Any]:
    """The ``meta`` of a Haystack chat generator's first reply (its ``model``...), or {}."""
    return next(iter(_replies_metas(output)), {})


#: Python's call methods, which an instrumentation may put after a tool's name in its span's
#: name (DSPy's ``get_weather.__call__``, with no ``tool.name``).
_CALL_METHODS = (".__call__", ".__acall__")


def _span_tool_name(span_name: str) -> str:
    """The tool a tool call's span names, for a span without a tool name attribute."""
    for method in _CALL_METHODS:
        if span_name.endswith(method) and len(span_name) > len(method):
            return span_name.removesuffix(method)
    return span_name


def _step_name(span_name: str, data: Mapping[str, Any]) -> str:
    """A step's name: its span's, or for a tool call whose span's name does not say which
    tool it called (smolagents' ``SimpleTool``, LlamaIndex's ``FunctionTool.acall``) or says
    it with a call method after it (DSPy's ``get_weather.__call__``), the tool's name
    (``data.tool_name``)."""
    tool = data.get("tool_name")
    if not isinstance(tool, str) or not tool.strip():
        return span_name
    if tool not in span_name or span_name.removeprefix(tool) in _CALL_METHODS:
        return tool.strip()
    return span_name


def _exception_text(events: list[dict[str, Any]]) -> str:
    """``type: message`` of the span's first ``exception`` event (the OTel convention)."""
    for event in events:
        if event["name"] == "exception":
            found = event["attributes"]
            kind, message = found.get("exception.type"), found.get("exception.message")
            return ": ".join(str(part) for part in (kind, message) if part)
    return ""


def attributes_of(pairs: Iterable[KeyValue], limits: Limits) -> dict[str, Any]:
    items = list(pairs)
    if len(items) > limits.max_attributes:
        raise Refused(
            f"{len(items)} attributes, more than {limits.max_attributes} "
            "(OTEL_ATTRIBUTE_COUNT_LIMIT)"
        )
    return {pair.key: value_of(pair.value, limits) for pair in items}


def check_texts(texts: Iterable[tuple[str, str]], limits: Limits) -> None:
    """``Refused`` for one of an item's own texts (``("a name", text)``) longer than
    ``limits.max_value_chars``, as a value of its attributes would be."""
    for what, text in texts:
        if len(text) > limits.max_value_chars:
            raise Refused(
                f"{what} of {len(text)} characters, more than {limits.max_value_chars} "
                "(OTLP_MAX_VALUE_CHARS)"
            )


def value_of(value: AnyValue, limits: Limits) -> Any:
    """An ``AnyValue`` as JSON: bytes as base64 text, nesting as lists and objects (protobuf
    bounds the nesting of what it decodes)."""
    kind = value.WhichOneof("value")
    if kind == "string_value":
        text = value.string_value
        if len(text) > limits.max_value_chars:
            raise Refused(
                f"a value of {len(text)} characters, more than {limits.max_value_chars} "
                "(OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT)"
            )
        return text
    if kind in ("int_value", "bool_value", "double_value"):
        return getattr(value, kind)
    if kind == "bytes_value":
        if len(value.bytes_value) > limits.max_value_chars:
            raise Refused(f"a bytes value of {len(value.bytes_value)} bytes")
        return base64.b64encode(value.bytes_value).decode()
    if kind == "array_value":
        return [value_of(item, limits) for item in value.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: value_of(kv.value, limits) for kv in value.kvlist_value.values}
    return None


# --- the mapping ------------------------------------------------------------------------------

#: ``openinference.span.kind`` → step type (a root AGENT or CHAIN is the goal: below).
OPENINFERENCE_KINDS: dict[str, str] = {
    "AGENT": StepType.GOAL,
    "CHAIN": StepType.THOUGHT,
    "LLM": StepType.THOUGHT,
    "PROMPT": StepType.THOUGHT,
    "TOOL": StepType.ACTION,
    "RETRIEVER": StepType.MEMORY_READ,
    "EMBEDDING": StepType.MEMORY_READ,
    "RERANKER": StepType.MEMORY_READ,
    "GUARDRAIL": StepType.FEEDBACK,
    "EVALUATOR": StepType.FEEDBACK,
}
#: ``gen_ai.operation.name`` (OTel GenAI semantic conventions) → step type.
GENAI_OPERATIONS: dict[str, str] = {
    "invoke_agent": StepType.GOAL,
    "invoke_workflow": StepType.GOAL,
    "create_agent": StepType.GOAL,
    "chat": StepType.THOUGHT,
    "text_completion": StepType.THOUGHT,
    "generate_content": StepType.THOUGHT,
    "execute_tool": StepType.ACTION,
    "embeddings": StepType.MEMORY_READ,
    "retrieval": StepType.MEMORY_READ,
}
#: ``traceloop.span.kind`` (OpenLLMetry) → step type.
TRACELOOP_KINDS: dict[str, str] = {
    "workflow": StepType.GOAL,
    "agent": StepType.GOAL,
    "task": StepType.THOUGHT,
    "tool": StepType.ACTION,
}
#: ``llm.request.type`` (OpenLLMetry's model calls) → step type.
LLM_REQUEST_TYPES: dict[str, str] = {
    "chat": StepType.THOUGHT,
    "completion": StepType.THOUGHT,
    "embedding": StepType.MEMORY_READ,
    "rerank": StepType.MEMORY_READ,
}


#: ``ai.operationId`` (the Vercel AI SDK's telemetry) → step type. A function call
#: (``ai.generateText``…) holds its model calls (``.doGenerate``, ``.doStream``) and tool calls.
AI_SDK_OPERATIONS: dict[str, str] = {
    "ai.generateText": StepType.THOUGHT,
    "ai.streamText": StepType.THOUGHT,
    "ai.generateObject": StepType.THOUGHT,
    "ai.streamObject": StepType.THOUGHT,
    "ai.generateText.doGenerate": StepType.THOUGHT,
    "ai.streamText.doStream": StepType.THOUGHT,
    "ai.generateObject.doGenerate": StepType.THOUGHT,
    "ai.streamObject.doStream": StepType.THOUGHT,
    "ai.toolCall": StepType.ACTION,
    "ai.embed": StepType.MEMORY_READ,
    "ai.embedMany": StepType.MEMORY_READ,
    "ai.embed.doEmbed": StepType.MEMORY_READ,
    "ai.embedMany.doEmbed": StepType.MEMORY_READ,
}
#: The Vercel AI SDK's function calls: their usage restates that of the model calls under
#: them (``restates_usage``).
_AI_SDK_CALLS = frozenset(
    {
        "ai.generateText",
        "ai.streamText",
        "ai.generateObject",
        "ai.streamObject",
        "ai.embed",
        "ai.embedMany",
    }
)

#: Kinds that group work: the goal when they are the root span (it holds the task), a
#: thought below it.
_ROOT_GOALS = frozenset(
    {
        ("openinference.span.kind", "CHAIN"),
        ("traceloop.span.kind", "task"),
        *(("ai.operationId", call) for call in _AI_SDK_CALLS - {"ai.embed", "ai.embedMany"}),
    }
)


#: The attribute of Google ADK's 1.x schema that holds a model call's request: its model call
#: spans (``call_llm``) name no operation.
_ADK_MODEL_CALL = "gcp.vertex.agent.llm_request"
#: Google ADK's 1.x request and response attributes, which it sets to ``{}`` where they do not
#: apply (on every tool span, "as UI expect these") or with content capture off: nothing
#: recorded, not an input and an output of ``{}``.
_ADK_EMPTY_WHERE_NOT_RECORDED = (_ADK_MODEL_CALL, "gcp.vertex.agent.llm_response")
#: Haystack's own tracer's spans (``haystack.tracing``, on whenever OpenTelemetry is set up in
#: the agent's process), by their names, which say what they are (their attributes hold content
#: only with ``HAYSTACK_CONTENT_TRACING_ENABLED``).
HAYSTACK_SPANS: dict[str, str] = {
    "haystack.pipeline.run": StepType.GOAL,
    "haystack.agent.run": StepType.GOAL,
    "haystack.agent.step": StepType.THOUGHT,
    "haystack.agent.step.llm": StepType.THOUGHT,
    "haystack.chat_generator.run": StepType.THOUGHT,
    "haystack.agent.step.tool": StepType.ACTION,
    "haystack.component.run": StepType.THOUGHT,
}


def step_type_of(attributes: Mapping[str, Any], *, is_root: bool, name: str) -> str:
    """The step type of a span with ``attributes``: the first of ``openinference.span.kind``,
    ``gen_ai.operation.name``, ``traceloop.span.kind``, ``llm.request.type`` and
    ``ai.operationId`` that names one (``_ROOT_GOALS`` at the root are the goal); otherwise
    ``goal`` for a root span; for one of Haystack's (by its ``name``) what it is, a retriever
    component's a ``memory_read``; ``thought`` for Google ADK 1.x's model call and for a GenAI
    operation of a framework's own; ``action`` for any other."""
    for key, table, fold in (
        ("openinference.span.kind", OPENINFERENCE_KINDS, str.upper),
        ("gen_ai.operation.name", GENAI_OPERATIONS, str.lower),
        ("traceloop.span.kind", TRACELOOP_KINDS, str.lower),
        ("llm.request.type", LLM_REQUEST_TYPES, str.lower),
        ("ai.operationId", AI_SDK_OPERATIONS, str),
    ):
        value = attributes.get(key)
        if not isinstance(value, str):
            continue
        found = table.get(fold(value))
        if found is not None:
            if is_root and (key, fold(value)) in _ROOT_GOALS:
                return StepType.GOAL
            return found
    if is_root:
        return StepType.GOAL
    if name in HAYSTACK_SPANS:
        component = attributes.get("haystack.component.type")
        retriever = isinstance(component, str) and component.endswith("Retriever")
        return StepType.MEMORY_READ if retriever else HAYSTACK_SPANS[name]
    if _ADK_MODEL_CALL in attributes:
        return StepType.THOUGHT  # Google ADK's 1.x ``call_llm``: no operation name
    # An operation of the GenAI conventions' that names no tool call (a framework's own, as
    # Strands' ``execute_event_loop_cycle``) is the agent's own work: it calls tools with an
    # ``execute_tool`` of its own.
    named = isinstance(attributes.get("gen_ai.operation.name"), str)
    return StepType.THOUGHT if named else StepType.ACTION


_INPUT_TOKENS = (
    "gen_ai.usage.input_tokens",
    "gen_ai.usage.prompt_tokens",
    "llm.token_count.prompt",
    "ai.usage.inputTokens",
    "ai.usage.promptTokens",
)
_OUTPUT_TOKENS = (
    "gen_ai.usage.output_tokens",
    "gen_ai.usage.completion_tokens",
    "llm.token_count.completion",
    "ai.usage.outputTokens",
    "ai.usage.completionTokens",
)
_TOTAL_TOKENS = (
    "llm.token_count.total",
    "llm.usage.total_tokens",
    "gen_ai.usage.total_tokens",
    "ai.usage.totalTokens",
    "ai.usage.tokens",
)
_COST = (
    "gen_ai.usage.cost",
    "llm.cost.total",
    "gen_ai.usage.total_cost",
    "operation.cost",
    "gen_ai.cost.total_cost",  # LiteLLM's own OTel callback
)


def _count(attributes: Mapping[str, Any], keys: Iterable[str]) -> int | None:
    for key in keys:
        value = attributes.get(key)
        if isinstance(value, int | float) and not isinstance(value, bool) and value >= 0:
            return int(min(value, _TOKENS_MAX))
    return None


#: OpenInference's kinds of spans that group work (an agent's run, a chain of steps): token
#: counts on them sum up the model calls under them (smolagents puts its run's totals on its
#: AGENT span), which count them already.
_GROUPING_KINDS = frozenset({"AGENT", "CHAIN"})


#: The GenAI conventions' operations that run an agent in the process (a span of another
#: kind than CLIENT): their usage sums up the model calls under them (Strands and the
#: Microsoft Agent Framework put a run's totals on its ``invoke_agent`` span). A CLIENT one
#: invokes a remote agent, whose model calls are not in the trace: its usage is its own.
_GENAI_AGENT_RUNS = frozenset({"invoke_agent", "invoke_workflow"})


def restates_usage(attributes: Mapping[str, Any], span_kind: int) -> bool:
    """Whether the span's usage (tokens and cost) restates that of the model calls under it,
    so that its step counts none of its own (its ``data.usage`` still shows it) and the
    trace's totals count each token once: a Vercel AI SDK function call (``_AI_SDK_CALLS``),
    an OpenInference span of a grouping kind (``_GROUPING_KINDS``), a GenAI agent run in the
    process (``_GENAI_AGENT_RUNS``)."""
    operation = attributes.get("ai.operationId")
    kind = attributes.get("openinference.span.kind")
    genai = attributes.get("gen_ai.operation.name")
    return (
        (isinstance(operation, str) and operation in _AI_SDK_CALLS)
        or (isinstance(kind, str) and kind.upper() in _GROUPING_KINDS)
        or (
            isinstance(genai, str)
            and genai.lower() in _GENAI_AGENT_RUNS
            and span_kind != Span.SPAN_KIND_CLIENT
        )
    )


def tokens_of(attributes: Mapping[str, Any]) -> int:
    """The span's tokens: its total (``llm.token_count.total``, ``llm.usage.total_tokens``,
    ``gen_ai.usage.total_tokens``, ``ai.usage.totalTokens`` or ``ai.usage.tokens``), else
    input plus output (``gen_ai.usage.input_tokens`` / ``output_tokens``, their older
    ``prompt_tokens`` / ``completion_tokens``, ``llm.token_count.prompt`` / ``completion``,
    ``ai.usage.inputTokens`` / ``outputTokens`` or ``promptTokens`` / ``completionTokens``);
    0 when it names none."""
    total = _count(attributes, _TOTAL_TOKENS)
    if total is not None:
        return total
    used = (_count(attributes, _INPUT_TOKENS) or 0) + (_count(attributes, _OUTPUT_TOKENS) or 0)
    return min(used, _TOKENS_MAX)


def cost_of(attributes: Mapping[str, Any]) -> Decimal:
    """The span's cost in USD (``gen_ai.usage.cost``, ``llm.cost.total``,
    ``gen_ai.usage.total_cost``, Pydantic AI's ``operation.cost``, LiteLLM's
    ``gen_ai.cost.total_cost``), to 8 places; 0
    when it names none or one that is not a finite amount the store holds."""
    for key in _COST:
        value = attributes.get(key)
        if isinstance(value, bool) or not isinstance(value, int | float | str):
            continue
        try:
            cost = Decimal(str(value)).quantize(_COST_QUANTUM)
        except (InvalidOperation, ValueError):
            continue
        if cost.is_finite() and 0 <= cost < COST_LIMIT:
            return cost
    return Decimal(0)


#: Attributes that move out of ``attributes`` to the top of the step's data (they are the
#: biggest, and what a reader looks for first): input, then output.
_INPUT_KEYS = (
    "input.value",
    "gen_ai.input.messages",
    "gen_ai.prompt",
    "traceloop.entity.input",
    "ai.prompt.messages",
    "ai.prompt",
    # Google ADK's 1.x schema: a model call's request and response.
    "gcp.vertex.agent.llm_request",
    # Haystack's own tracer, with HAYSTACK_CONTENT_TRACING_ENABLED.
    "haystack.agent.input",
    "haystack.agent.step.llm.input",
    "haystack.component.input",
    "haystack.pipeline.input_data",
)
_OUTPUT_KEYS = (
    "output.value",
    "gen_ai.output.messages",
    "gen_ai.completion",
    "traceloop.entity.output",
    "ai.response.text",
    "ai.response.object",
    "ai.response.toolCalls",
    # Pydantic AI's agent run: what it answered.
    "final_result",
    "gcp.vertex.agent.llm_response",
    "haystack.agent.output",
    "haystack.agent.step.llm.output",
    "haystack.component.output",
    "haystack.pipeline.output_data",
)
#: Pydantic AI's agent run: the whole conversation of the run, history included (its model
#: calls have their own ``gen_ai.input.messages``; the run has none).
_MESSAGES_KEYS = ("pydantic_ai.all_messages",)
_MODEL_KEYS = (
    "gen_ai.request.model",
    "gen_ai.response.model",
    "llm.model_name",
    "embedding.model_name",
    "ai.model.id",
)
_TOOL_NAME_KEYS = (
    "tool.name",
    "gen_ai.tool.name",
    "traceloop.entity.name",
    "ai.toolCall.name",
    "haystack.tool.name",
)
#: Not OpenInference's ``tool.parameters``: that is the tool's parameters' definition (a JSON
#: schema, as its own tracers and its OpenAI Agents SDK instrumentation write it), and stays
#: among the attributes; OpenInference records a call's arguments as its input.
_TOOL_ARGUMENT_KEYS = (
    "gen_ai.tool.call.arguments",
    "ai.toolCall.args",
    "ai.toolCall.input",
    "gcp.vertex.agent.tool_call_args",  # Google ADK's 1.x schema
    "haystack.agent.step.tool.input",
)
_TOOL_RESULT_KEYS = (
    "gen_ai.tool.call.result",
    "ai.toolCall.result",
    "ai.toolCall.output",
    "gcp.vertex.agent.tool_response",
    "haystack.agent.step.tool.output",
)
#: Attributes that hold JSON when they hold text: OpenLLMetry writes a function's arguments
#: (``{"args": [...], "kwargs": {...}}``) and its return value so, the GenAI conventions'
#: messages are structured (JSON text where an SDK records strings only), and the Vercel AI
#: SDK writes its prompts, objects, tool calls and tool results as JSON text.
_JSON_TEXT_KEYS = frozenset(
    {
        "traceloop.entity.input",
        "traceloop.entity.output",
        "gen_ai.input.messages",
        "gen_ai.output.messages",
        "gen_ai.system_instructions",
        "gen_ai.tool.definitions",
        "ai.prompt.messages",
        "ai.prompt",
        "ai.response.object",
        "ai.response.toolCalls",
        "ai.toolCall.args",
        "ai.toolCall.input",
        "ai.toolCall.result",
        "ai.toolCall.output",
        "gcp.vertex.agent.llm_request",
        "gcp.vertex.agent.llm_response",
        "gcp.vertex.agent.tool_call_args",
        "gcp.vertex.agent.tool_response",
        "haystack.agent.input",
        "haystack.agent.output",
        "haystack.agent.step.llm.input",
        "haystack.agent.step.llm.output",
        "haystack.agent.step.tool.input",
        "haystack.component.input",
        "haystack.component.output",
        "haystack.pipeline.input_data",
        "haystack.pipeline.output_data",
    }
)
_SPAN_KINDS = {
    Span.SPAN_KIND_INTERNAL: "internal",
    Span.SPAN_KIND_SERVER: "server",
    Span.SPAN_KIND_CLIENT: "client",
    Span.SPAN_KIND_PRODUCER: "producer",
    Span.SPAN_KIND_CONSUMER: "consumer",
}
_STATUS_CODES = {Status.STATUS_CODE_OK: "ok", Status.STATUS_CODE_ERROR: "error"}


#: Lists that instrumentations flatten into one attribute per field of each item, by the
#: item's index: ``(prefix, the item's name between the index and the field or "")``.
#: OpenLLMetry's ``gen_ai.prompt.<i>.<field>`` / ``gen_ai.completion.<i>.<field>`` and
#: OpenInference's ``llm.input_messages.<i>.message.<field>`` /
#: ``llm.output_messages.<i>.message.<field>`` are the messages; OpenInference's
#: ``retrieval.documents.<i>.document.<field>`` a retriever's documents,
#: ``reranker.input_documents`` / ``output_documents`` a reranker's, and the tools a model
#: was offered are OpenInference's ``llm.tools.<i>.tool.<field>`` and OpenLLMetry's
#: ``llm.request.functions.<i>.<field>``; OpenInference's
#: ``embedding.embeddings.<i>.embedding.<field>`` an embedding call's texts and vectors.
#: By the key each list takes in the step's data.
_FLATTENED = {
    "input_messages": (("gen_ai.prompt.", ""), ("llm.input_messages.", "message")),
    "output_messages": (("gen_ai.completion.", ""), ("llm.output_messages.", "message")),
    "documents": (("retrieval.documents.", "document"),),
    "input_documents": (("reranker.input_documents.", "document"),),
    "output_documents": (("reranker.output_documents.", "document"),),
    "tools": (("llm.tools.", "tool"), ("llm.request.functions.", "")),
    "embeddings": (("embedding.embeddings.", "embedding"),),
}
_FLATTENED_PREFIXES = tuple(prefix for sources in _FLATTENED.values() for prefix, _ in sources)


def _gather_lists(attributes: dict[str, Any]) -> dict[str, list[Any]]:
    """The flattened lists of ``_FLATTENED`` in ``attributes``, taken out of them, by their
    key; one pass over the keys when there are none, as in most spans (a scan per list for
    every span took mapping ``benchmarks/otlp_ingest.py``'s 10,000 spans from 0.27 s to
    0.31 s)."""
    if not any(key.startswith(_FLATTENED_PREFIXES) for key in attributes):
        return {}
    gathered = {key: _gather_list(attributes, sources) for key, sources in _FLATTENED.items()}
    for key, name in _JSON_TEXT_FIELDS:
        for item in gathered.get(key) or []:
            if isinstance(item, dict) and isinstance(item.get(name), str):
                item[name] = json_text_value(item[name])
    # A model's answer that says only what it calls (LiteLLM's ``gen_ai.completion.0.
    # function_call.*``, without a role) is the assistant's.
    for item in gathered.get("output_messages") or []:
        if isinstance(item, dict) and "role" not in item:
            item["role"] = "assistant"
    return {key: items for key, items in gathered.items() if items is not None}


#: The fields of the items of ``_FLATTENED``'s lists that instrumentations write as JSON text,
#: parsed: OpenInference's documents' ``metadata`` and tools' ``json_schema``, OpenLLMetry's
#: functions' ``parameters``.
_JSON_TEXT_FIELDS = (
    ("documents", "metadata"),
    ("input_documents", "metadata"),
    ("output_documents", "metadata"),
    ("tools", "json_schema"),
    ("tools", "parameters"),
)


def _gather_list(
    attributes: dict[str, Any], sources: Iterable[tuple[str, str]]
) -> list[Any] | None:
    """The list flattened into ``attributes`` by the first of ``sources`` that has any item,
    taken out of them and put back together: ``gen_ai.prompt.0.role`` and
    ``gen_ai.prompt.0.content`` become ``[{"role": ..., "content": ...}]``; nested fields nest
    (``tool_calls.0.name``: ``{"tool_calls": [{"name": ...}]}``). None when there is none."""
    for prefix, item in sources:
        found: dict[str, Any] = {}
        for key in [k for k in attributes if k.startswith(prefix)]:
            path = key[len(prefix) :].split(".")
            if not 2 <= len(path) <= _MAX_FLATTENED_PARTS or not _is_index(path[0]):
                continue  # not a field of a numbered item: it stays an attribute
            if item and path[1] == item and len(path) > 2:
                path = [path[0], *path[2:]]  # OpenInference's ``<i>.message.<field>``
                # ...and its ``tool_calls.<j>.tool_call.<field>`` inside a message.
                if path[1:4:2] == ["tool_calls", "tool_call"] and len(path) > 4:
                    path = [*path[:3], *path[4:]]
            node = found
            for name in path[:-1]:
                node = node.setdefault(name, {})
                if not isinstance(node, dict):
                    break  # a field that also has a value: this one stays an attribute
            else:
                if path[-1] not in node:  # (one that has fields below it: likewise)
                    node[path[-1]] = attributes.pop(key)
        if found:
            return _as_lists(found)
    return None


#: The most parts a flattened key's name takes after its prefix (``0.tool_calls.0.name``
#: has 4): one with more stays an attribute, rather than nest as deep as a client likes.
_MAX_FLATTENED_PARTS = 16


def _is_index(name: str) -> bool:
    """Whether a key's part is an item's number: ASCII digits only (``"²".isdigit()``, but
    ``int("²")`` fails)."""
    return name.isascii() and name.isdigit()


def _as_lists(value: Any) -> Any:
    """Objects whose keys are all numbers as lists, in the numbers' order, all the way down."""
    if not isinstance(value, dict):
        return value
    items = {name: _as_lists(item) for name, item in value.items()}
    if items and all(_is_index(name) for name in items):
        return [items[name] for name in sorted(items, key=int)]
    return items


def _lift(attributes: dict[str, Any], keys: Iterable[str], mime_key: str | None = None) -> Any:
    """Take the first of ``keys`` out of ``attributes``; a JSON text whose ``mime_key`` says
    ``application/json``, or one of ``_JSON_TEXT_KEYS``, comes back parsed (as it is when it
    does not parse). None when none is there."""
    for key in keys:
        if key in attributes:
            value = attributes.pop(key)
            is_json = key in _JSON_TEXT_KEYS or (
                mime_key is not None and attributes.get(mime_key) == "application/json"
            )
            return json_text_value(value) if is_json and isinstance(value, str) else value
    return None


#: How deep a JSON text an attribute holds may nest to be taken parsed: as deep as an
#: ``AnyValue`` can (protobuf decodes 100 levels of messages, two a level), well within what
#: a step's data can hold (``devassist.storable.MAX_JSON_DEPTH``) around it.
_MAX_TEXT_NESTING = 50


#: The types Logfire's SDK declares an attribute it sent as JSON text with (Pydantic AI writes
#: its spans as Logfire does).
_DECLARED_JSON_TYPES = frozenset({"object", "array"})


def _parse_declared_json(attributes: dict[str, Any]) -> None:
    """Parse, in place, the attributes that ``logfire.json_schema`` declares JSON text of an
    object or a list: Logfire's SDK sends every structured value as such text, with a schema
    naming them (Pydantic AI's ``pydantic_ai.all_messages``, ``model_request_parameters``,
    ``final_result``). A text that does not parse to an object or a list (a ``final_result``
    that is a plain answer) stays as it came."""
    schema = attributes.get("logfire.json_schema")
    if not isinstance(schema, str):
        return
    declared = json_text_value(schema)
    properties = declared.get("properties") if isinstance(declared, dict) else None
    if not isinstance(properties, dict):
        return
    for key, spec in properties.items():
        value = attributes.get(key)
        if not isinstance(value, str) or not isinstance(spec, dict):
            continue
        if spec.get("type") in _DECLARED_JSON_TYPES:
            parsed = json_text_value(value)
            if isinstance(parsed, dict | list):
                attributes[key] = parsed


def json_text_value(text: str) -> Any:
    """The JSON ``text`` (an attribute that holds JSON) parsed; the text itself when it does
    not parse, or nests deeper than ``_MAX_TEXT_NESTING`` levels."""
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        return text
    return value if _nests_within(value, _MAX_TEXT_NESTING) else text


def _nests_within(value: Any, levels: int) -> bool:
    """Whether ``value`` nests at most ``levels`` lists and objects deep (walked without
    recursion: what is too deep for the stack must not exhaust it)."""
    if not isinstance(value, dict | list):
        return True
    pending = [(value, 1)]
    while pending:
        item, depth = pending.pop()
        if depth > levels:
            return False
        children = item.values() if isinstance(item, dict) else item
        pending += [(child, depth + 1) for child in children if isinstance(child, dict | list)]
    return True


#: The events of a model call's input messages (GenAI conventions up to 1.36), by the role
#: their name gives.
MESSAGE_EVENTS: dict[str, str] = {
    "gen_ai.system.message": "system",
    "gen_ai.user.message": "user",
    "gen_ai.assistant.message": "assistant",
    "gen_ai.tool.message": "tool",
}
#: The event of one of a model call's answers (a choice).
CHOICE_EVENT = "gen_ai.choice"
#: Attributes of an event that hold a model call's messages and its system prompt (the later
#: conventions' ``gen_ai.client.inference.operation.details``), by the key they take in the
#: step's data.
_MESSAGE_ATTRIBUTES = {
    "system_instructions": "gen_ai.system_instructions",
    "input": "gen_ai.input.messages",
    "output": "gen_ai.output.messages",
}
#: The fields of a message event (or of a choice) that instrumentations write as JSON text.
_MESSAGE_TEXT_FIELDS = ("content", "message")


def event_messages(event: dict[str, Any]) -> tuple[dict[str, list[Any]], dict[str, Any]]:
    """The model call's messages in ``event`` (a span's event, or a log record as one) by the
    data key they fill (``input``, ``output``, ``system_instructions``), and the event without
    them; ``({}, event)`` for an event that holds none.

    - ``MESSAGE_EVENTS`` are an input message each, their role from the event's name, the rest
      from the record's body (an object, its JSON text, or the content itself), or a span
      event's attributes (Strands Agents');
    - a ``CHOICE_EVENT`` is an output message: its ``message`` (the conventions'; JSON text, or
      the content itself), else its ``content`` (Google ADK's), with its other fields
      (``finish_reason``, ``index``...);
    - any event with ``_MESSAGE_ATTRIBUTES`` gives those, as lists.

    A message's ``content`` that is Google's ``Content`` (its ``role`` and ``parts``) gives its
    parts. Nothing the event held is lost: what is not read stays in the message or the
    event."""
    name, attributes = event.get("name"), event.get("attributes") or {}
    from_body = event.get("source") == "log"  # a log record's are its body's
    fields = event.get("body") if from_body else attributes
    if name in MESSAGE_EVENTS or (name == CHOICE_EVENT and fields is not None):
        message = _event_message(fields, name)
        key = "output" if name == CHOICE_EVENT else "input"
        rest = _without(event, body=True) if from_body else _without(event, attributes=attributes)
        return {key: [message]}, rest
    found = {
        key: _listed(attributes[attribute])
        for key, attribute in _MESSAGE_ATTRIBUTES.items()
        if attribute in attributes
    }
    if not found:
        return {}, event
    return found, _without(event, attributes=_MESSAGE_ATTRIBUTES.values())


#: A choice's own fields beside its message: why it ended, and which choice it is.
_CHOICE_FIELDS = ("finish_reason", "index")


def _event_message(fields: Any, name: str) -> dict[str, Any]:
    """The message of a ``MESSAGE_EVENTS`` or ``CHOICE_EVENT`` event whose body (or, on a
    span, attributes) is ``fields``: an input message's role first, from the event's name
    unless it says its own; a choice's message, then its own fields."""
    if isinstance(fields, str):
        parsed = json_text_value(fields)
        fields = parsed if isinstance(parsed, dict) else fields
    given = (
        dict(fields) if isinstance(fields, dict) else {} if fields is None else {"content": fields}
    )
    for key in _MESSAGE_TEXT_FIELDS:
        if isinstance(given.get(key), str):
            parsed = json_text_value(given[key])
            given[key] = parsed if isinstance(parsed, dict | list) else given[key]
    if name != CHOICE_EVENT:
        _google_content(given)
        return {"role": given.pop("role", MESSAGE_EVENTS[name]), **given}
    answer = given.pop("message", None)
    message: dict[str, Any] = {}
    if answer is not None:
        message = dict(answer) if isinstance(answer, dict) else {"content": answer}
        message.setdefault("role", "assistant")
    message.update({key: given.pop(key) for key in _CHOICE_FIELDS if key in given})
    for key, value in given.items():
        message.setdefault(key, value)  # the rest of what it held (Google ADK's content)
    _google_content(message)
    message.setdefault("role", "assistant")
    return message


def _google_content(message: dict[str, Any]) -> None:
    """Put the parts of a ``content`` that is Google's ``Content`` in ``message``, and its
    role where the message says none: it says who spoke where the event's name does not
    (Google ADK sends the model's earlier calls as user messages)."""
    content = message.get("content")
    if isinstance(content, dict) and isinstance(content.get("parts"), list):
        del message["content"]
        message["parts"] = content["parts"]
        if isinstance(content.get("role"), str):
            message.setdefault("role", content["role"])


def _listed(value: Any) -> list[Any]:
    """A messages attribute as a list (JSON text where an SDK records strings only)."""
    if isinstance(value, str):
        value = json_text_value(value)
    return value if isinstance(value, list) else [value]


def _without(
    event: dict[str, Any], *, body: bool = False, attributes: Iterable[str] = ()
) -> dict[str, Any]:
    rest = {key: value for key, value in event.items() if not (body and key == "body")}
    dropped = set(attributes)
    if dropped:
        rest["attributes"] = {k: v for k, v in event["attributes"].items() if k not in dropped}
    return rest


def _event_content(events: list[dict[str, Any]], name: str, key: str) -> Any:
    """The content of the first event ``name`` (``gen_ai.content.prompt`` or
    ``.completion``, the GenAI conventions before 1.28) that has it under ``key``, JSON text
    parsed, taken out of the event (it is stored once: the event keeps its name and time);
    None when no event has it."""
    for event in events:
        attributes = event.get("attributes") or {}
        if event.get("name") == name and attributes.get(key) is not None:
            value = attributes.pop(key)
            return json_text_value(value) if isinstance(value, str) else value
    return None


def _span_event_messages(
    events: list[dict[str, Any]], given: Mapping[str, Any]
) -> tuple[dict[str, list[Any]], list[dict[str, Any]]]:
    """The messages the span's ``events`` hold (``event_messages``) for the data keys the
    span did not set itself (``given``), appended in the events' order, and the events
    without them (an event whose content is for a key the span set stays whole)."""
    found: dict[str, list[Any]] = {}
    kept = []
    for event in events:
        content, rest = event_messages(event)
        if any(given.get(key) is not None for key in content):
            kept.append(event)
            continue
        for key, messages in content.items():
            found.setdefault(key, []).extend(messages)
        kept.append(rest)
    return found, kept


def _step_data(
    span: Span,
    attributes: dict[str, Any],
    events: list[dict[str, Any]],
    links: list[dict[str, Any]],
    *,
    step_type: str,
    scope: str,
    service: str,
) -> tuple[dict[str, Any], str]:
    """The step's data: what a reader looks for first (the tool's name, arguments and
    result for an ``action``; the model, usage, input and output otherwise), then every
    other attribute, the events, the links, and the span's own facts under ``otel_span``;
    and what went wrong where a tool call's framework says the call failed (its span ended
    OK: ``_tool_return``), "" otherwise."""
    data: dict[str, Any] = {}
    tool_error = ""
    for key in _ADK_EMPTY_WHERE_NOT_RECORDED:
        if attributes.get(key) == "{}":
            del attributes[key]
    inputs = _lift(attributes, _INPUT_KEYS, "input.mime_type")
    outputs = _lift(attributes, _OUTPUT_KEYS, "output.mime_type")
    lists = _gather_lists(attributes)
    # Flattened messages are the input and output when nothing else is (OpenLLMetry's model
    # calls), and sit beside them otherwise (OpenInference's, beside the request's JSON).
    if inputs is None:
        inputs = lists.pop("input_messages", None)
    if outputs is None:
        outputs = lists.pop("output_messages", None)
    # Else the earlier GenAI conventions' content events (DevAssist's own export sends them).
    if inputs is None:
        inputs = _event_content(events, "gen_ai.content.prompt", "gen_ai.prompt")
    if outputs is None:
        outputs = _event_content(events, "gen_ai.content.completion", "gen_ai.completion")
    # Else the messages its events hold as log records hold them (Strands Agents sends its
    # model calls' so).
    instructions = _lift(attributes, ("gen_ai.system_instructions",))
    if events:
        given = {"input": inputs, "output": outputs, "system_instructions": instructions}
        found, events[:] = _span_event_messages(events, given)
        inputs = found.get("input", inputs)
        outputs = found.get("output", outputs)
        instructions = found.get("system_instructions", instructions)
    data.update(lists)
    # The tools a model was offered, as the GenAI conventions record them (JSON text where an
    # SDK records strings): Pydantic AI's, OpenTelemetry's own instrumentations'.
    if "tools" not in data and "gen_ai.tool.definitions" in attributes:
        data["tools"] = _lift(attributes, ("gen_ai.tool.definitions",))
    if step_type == StepType.ACTION:
        name = next((attributes[k] for k in _TOOL_NAME_KEYS if k in attributes), None)
        data["tool_name"] = name if isinstance(name, str) else _span_tool_name(span.name)
        arguments = _lift(attributes, _TOOL_ARGUMENT_KEYS)
        if isinstance(arguments, str):
            arguments = json_text_value(arguments)
        if arguments is None and isinstance(inputs, str):
            # A tool's input is its arguments: an object, even where its JSON text comes
            # without a JSON mime type (smolagents').
            parsed = json_text_value(inputs)
            inputs = parsed if isinstance(parsed, dict) else inputs
        if arguments is None:
            arguments = _named_arguments(_sole_content(inputs, dict))
            if arguments is not inputs:
                data["input"] = inputs  # as it came, beside the arguments it holds
        elif inputs is not None:
            data["input"] = inputs
        data["arguments"] = arguments
        result = _lift(attributes, _TOOL_RESULT_KEYS)
        if result is None and (answer := _sole_content(outputs)) is not outputs:
            result = answer
        returned = _tool_return(outputs) if result is None else None
        if returned is not None:
            # The framework's object stays whole as the output, beside the result it holds.
            result, tool_error = returned.result, returned.error
        if attributes.get("haystack.tool.error") is True and not tool_error:
            # Haystack's tool call that failed, its span not said to (its result says why).
            tool_error = result if isinstance(result, str) and result else _TOOL_FAILED
        data["result"] = result if result is not None else outputs
        if result is not None and outputs is not None:
            data["output"] = outputs
    else:
        model = next((attributes[k] for k in _MODEL_KEYS if k in attributes), None)
        if model is None and span.name in _HAYSTACK_MODEL_CALLS:
            model = _replies_meta(outputs).get("model")
        if model is not None:
            data["model"] = model
        counts = {
            "prompt_tokens": _count(attributes, _INPUT_TOKENS),
            "completion_tokens": _count(attributes, _OUTPUT_TOKENS),
            "total_tokens": _count(attributes, _TOTAL_TOKENS),
        }
        # The counts the span gave, and only those.
        usage = {name: count for name, count in counts.items() if count is not None}
        if usage:
            data["usage"] = usage
        if inputs is not None:
            data["input"] = inputs
        if outputs is not None:
            data["output"] = outputs
        messages = _lift(attributes, _MESSAGES_KEYS)
        if messages is not None:
            data["messages"] = messages
    # The GenAI conventions keep a model's (or an agent's) system prompt apart from its
    # messages (Pydantic AI, OpenTelemetry's own instrumentations); after them, so that the
    # step's preview starts with what was asked.
    if instructions is not None:
        data["system_instructions"] = instructions
    data["attributes"] = attributes
    if events:
        data["events"] = events
    if links:
        data["links"] = links
    otel: dict[str, Any] = {
        # Whose span it is: one trace may hold spans from several services.
        "service": service,
        "trace_id": span.trace_id.hex(),
        "span_id": span.span_id.hex(),
        "kind": _SPAN_KINDS.get(span.kind, "unspecified"),
    }
    if span.parent_span_id:
        otel["parent_span_id"] = span.parent_span_id.hex()
    if span.status.code in _STATUS_CODES:
        otel["status"] = {"code": _STATUS_CODES[span.status.code], "message": span.status.message}
    if scope:
        otel["scope"] = scope
    dropped = {
        name: count
        for name, count in (
            ("attributes", span.dropped_attributes_count),
            ("events", span.dropped_events_count),
            ("links", span.dropped_links_count),
        )
        if count
    }
    if dropped:
        otel["dropped"] = dropped
    # Named so that it sorts after the rest (PostgreSQL keeps a JSON object's keys shortest
    # first, and the detail pane shows them in that order).
    data["otel_span"] = otel
    return data, tool_error


@dataclass(frozen=True)
class _ToolReturn:
    """What a tool call returned, read out of its framework's object: the result, and what
    went wrong where the framework says the call failed ("" where it does not)."""

    result: Any
    error: str = ""


#: A failed tool call's error when its framework's object says no more than that it failed.
_TOOL_FAILED = "The tool reported an error."


#: What a Python tool call's recorded input holds besides its arguments: ``args`` and
#: ``kwargs``, and smolagents' ``Tool.__call__`` flag (1.2x: ``sanitize_inputs_outputs``).
_CALL_KEYS = frozenset({"args", "kwargs", "sanitize_inputs_outputs"})


def _sole_content(value: Any, kind: type | tuple[type, ...] = object) -> Any:
    """The content of ``value`` when it is one message whose content is a ``kind`` (a tool
    call's input or output as message events give it: Strands Agents' ``gen_ai.tool.message``
    and ``gen_ai.choice``); ``value`` itself otherwise."""
    if isinstance(value, list) and len(value) == 1 and isinstance(value[0], dict):
        content = value[0].get("content")
        if isinstance(value[0].get("role"), str) and isinstance(content, kind):
            return content
    return value


def _named_arguments(inputs: Any) -> Any:
    """A Python tool call's input as the named arguments it holds: LlamaIndex records a call
    as ``{"kwargs": {...}}``, OpenLLMetry a function's as ``{"args": [], "kwargs": {...}}``,
    smolagents' with its ``sanitize_inputs_outputs`` flag beside them. Anything else
    (positional arguments among it) is returned as it is."""
    if (
        isinstance(inputs, dict)
        and isinstance(inputs.get("kwargs"), dict)
        and set(inputs) <= _CALL_KEYS
        and not inputs.get("args")
    ):
        return inputs["kwargs"]
    return inputs


def _tool_return(output: Any) -> _ToolReturn | None:
    """The result a tool call's output holds when the output is its framework's object (a
    dump, as OpenInference's LangChain and LlamaIndex instrumentations record their TOOL
    spans' output), JSON text or parsed; None for any other output, which is the result as
    it is. The object is told by the fields that make it one, never by a ``content`` key
    alone, which a tool's own result may have:

    - LangChain's ``ToolMessage`` (a tool invoked with a tool call, as LangGraph's
      ``ToolNode`` does): ``type`` ``"tool"`` and a ``tool_call_id``. Its result is its
      ``content``; ``status: "error"`` is a failure (a tool that handles its own errors).
      openinference-instrumentation-langchain records it as ``{"type": "tool", "data": {…}}``
      (0.1.62 on), as its fields alone (0.1.48 to 0.1.61), or as its ``str()`` under
      ``output`` (up to 0.1.47: ``_tool_message_str``).
    - LlamaIndex's ``ToolOutput`` (``FunctionTool.call``): a ``tool_name`` with ``raw_input``
      and ``raw_output``, and its text as ``content`` (llama-index-core up to 0.12.44) or as
      ``blocks``. Its result is ``raw_output``, the tool's own return value (the text is
      that value's ``str()``: a dict's Python repr), or the text where that is null;
      ``is_error`` is a failure."""
    value = as_structured(output)
    if not isinstance(value, dict):
        return None
    if value.keys() == {"type", "data"} and value["type"] == "tool":
        value = value["data"]  # LangChain's ``message_to_dict``
    elif value.keys() == {"output"} and isinstance(value["output"], str):
        return _tool_message_str(value["output"])
    if not isinstance(value, dict):
        return None
    if value.get("type") == "tool" and isinstance(value.get("tool_call_id"), str):
        if "content" not in value:
            return None
        content = value["content"]
        failed = value.get("status") == "error"
        return _ToolReturn(content, (_as_text(content) or _TOOL_FAILED) if failed else "")
    if isinstance(value.get("tool_name"), str) and {"raw_input", "raw_output"} <= value.keys():
        if "content" in value:
            text = _as_text(value["content"])
        elif isinstance(value.get("blocks"), list):
            text = "\n".join(
                block["text"]
                for block in value["blocks"]
                if isinstance(block, dict) and isinstance(block.get("text"), str)
            )
        else:
            return None
        raw = value["raw_output"]
        result = raw if raw is not None else text
        failed = value.get("is_error") is True
        return _ToolReturn(result, (text or _as_text(raw) or _TOOL_FAILED) if failed else "")
    return None


#: ``str()`` of LangChain's ``ToolMessage``: its ``content`` first, as a Python string
#: literal, then its other fields that are not their defaults (``status='error'`` last).
_TOOL_MESSAGE_STR = re.compile(r"""content=('(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")( .*)""", re.DOTALL)


def _tool_message_str(text: str) -> _ToolReturn | None:
    """The result of a ``ToolMessage`` that openinference-instrumentation-langchain up to
    0.1.47 recorded as its ``str()`` (``content='42' name='add' tool_call_id='call_1'``, its
    tool run's output under ``output``); None for any other text."""
    found = _TOOL_MESSAGE_STR.fullmatch(text)
    if found is None or " tool_call_id=" not in found[2]:
        return None
    try:
        content = ast.literal_eval(found[1])
    except (SyntaxError, ValueError):
        return None
    failed = found[2].endswith(" status='error'")
    return _ToolReturn(content, (content or _TOOL_FAILED) if failed else "")
