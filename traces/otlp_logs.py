"""OTLP/HTTP log ingestion, the protocol's side: log records into events of their spans' steps.

DevAssist keeps no log store of its own: a log record belongs to the span it was emitted in
(its ``trace_id`` and ``span_id``) and joins that step's ``data.events``, beside the span's own
events. That is where OpenTelemetry's GenAI instrumentations put what a model was asked and
answered: the official ones (``opentelemetry-instrumentation-openai-v2`` and its siblings) emit
the prompt and the completion as log-based events, never as span attributes, unless told
otherwise. Their content becomes the step's ``input`` and ``output`` messages, as the same
content sent as span attributes does (``traces.otlp``):

- ``gen_ai.system.message``, ``gen_ai.user.message``, ``gen_ai.assistant.message`` and
  ``gen_ai.tool.message`` (the conventions up to 1.36) are the input, one message each, the
  role taken from the event's name and the rest from its body; ``gen_ai.choice`` is an output
  message (its body's ``message``, with its ``finish_reason`` and ``index``);
- any event with ``gen_ai.input.messages`` / ``gen_ai.output.messages`` attributes (the later
  conventions' ``gen_ai.client.inference.operation.details``) gives those.

The content moves out of the event (it is stored once), unless the span brought its own input
or output: then it stays in the event. No database here: ``traces.services.otlp_logs_ingest``
stores what this module decodes.
"""

from __future__ import annotations

import hashlib
import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord

from traces.otlp import (
    LOGS,
    MAX_CLOCK_SKEW_NS,
    Limits,
    Refusals,
    Refused,
    attributes_of,
    check_count,
    check_id,
    check_texts,
    event_messages,
    item_name,
    service_of,
    span_step_id,
    time_of,
    value_of,
)
from traces.projections import iso

#: What a record is called when it names no event.
_PLAIN_RECORD = "log"
#: The sampled bit of a record's ``flags`` (its span's W3C trace flags; 0: none sent).
_SAMPLED = 0x01


@dataclass
class TraceLogs:
    """The log records of one trace in a request, as events by the step of their span."""

    trace_id: uuid.UUID
    #: The service (``service.name``) of the trace's first records in the request.
    service: str
    resource: dict[str, Any]
    events: dict[uuid.UUID, list[dict[str, Any]]] = field(default_factory=dict)
    #: The OpenTelemetry span id (hex) of each step in ``events``.
    span_ids: dict[uuid.UUID, str] = field(default_factory=dict)
    #: When the earliest of the records was emitted (observed), in ns since 1970; 0: none says.
    earliest_ns: int = 0

    @property
    def earliest(self) -> datetime | None:
        return time_of(self.earliest_ns) if self.earliest_ns else None

    @property
    def otel_trace_id(self) -> str:
        return self.trace_id.hex

    @property
    def count(self) -> int:
        return sum(len(events) for events in self.events.values())


@dataclass
class LogBatch(Refusals):
    """A request's log records by trace, and the ones refused."""

    traces: dict[uuid.UUID, TraceLogs] = field(default_factory=dict)


def count_log_records(request: ExportLogsServiceRequest) -> int:
    return sum(len(s.log_records) for r in request.resource_logs for s in r.scope_logs)


def request_log_records(
    request: ExportLogsServiceRequest, *, limits: Limits, now_ns: int | None = None
) -> LogBatch:
    """The request's log records as step events, grouped by trace and span; records that
    name no span, or break the protocol or the limits (bad ids, a time more than a day ahead,
    too many attributes, a value too long) are counted as rejected with a reason.
    ``OtlpError`` (413) for more records than ``limits.max_spans``."""
    total = count_log_records(request)
    check_count(total, limits, LOGS)
    now_ns = now_ns if now_ns is not None else time.time_ns()
    batch = LogBatch(total=total)
    for resource_logs in request.resource_logs:
        try:
            resource = attributes_of(resource_logs.resource.attributes, limits)
        except Refused as exc:
            count = sum(len(s.log_records) for s in resource_logs.scope_logs)
            batch.reject(count, f"resource: {exc}")
            continue
        service = service_of(resource)
        for scope_logs in resource_logs.scope_logs:
            for record in scope_logs.log_records:
                try:
                    event = _record_event(record, limits=limits, now_ns=now_ns)
                except Refused as exc:
                    batch.reject(1, f"log record {item_name(_record_name(record))}: {exc}")
                    continue
                trace_id = uuid.UUID(bytes=record.trace_id)
                entry = batch.traces.get(trace_id)
                if entry is None:
                    entry = batch.traces[trace_id] = TraceLogs(
                        trace_id=trace_id, service=service, resource=resource
                    )
                step_id = span_step_id(record.trace_id, record.span_id)
                entry.events.setdefault(step_id, []).append(event)
                moment = record.time_unix_nano or record.observed_time_unix_nano
                if moment and (not entry.earliest_ns or moment < entry.earliest_ns):
                    entry.earliest_ns = moment  # the trace's start, if they open it
                entry.span_ids[step_id] = record.span_id.hex()
    return batch


def _record_name(record: LogRecord) -> str:
    if record.event_name:
        return record.event_name
    for pair in record.attributes:
        if pair.key == "event.name" and pair.value.WhichOneof("value") == "string_value":
            return pair.value.string_value
    return _PLAIN_RECORD


def _record_event(record: LogRecord, *, limits: Limits, now_ns: int) -> dict[str, Any]:
    """The step event of ``record``; ``Refused`` for one that names no span or breaks the
    protocol or the limits."""
    if not any(record.trace_id) or not any(record.span_id):  # absent, or OTel's invalid id
        raise Refused(
            "it names no span (a trace id and a span id): DevAssist keeps log records as "
            "events of their spans"
        )
    check_id(record.trace_id, 16, "trace id")
    check_id(record.span_id, 8, "span id")
    if record.flags and not record.flags & _SAMPLED:
        # A span its sampler left out is never exported: its records would open a trace
        # that never gets a step, and wait for good.
        raise Refused("its span was not sampled (W3C trace flags), so it is never sent")
    moment = record.time_unix_nano or record.observed_time_unix_nano
    if moment > now_ns + MAX_CLOCK_SKEW_NS:
        raise Refused("its time lies more than a day in the future")
    check_texts([("a name", record.event_name), ("a severity", record.severity_text)], limits)
    attributes = attributes_of(record.attributes, limits)
    name = record.event_name or attributes.pop("event.name", None)
    event: dict[str, Any] = {
        "name": name if isinstance(name, str) and name else _PLAIN_RECORD,
        "time": iso(time_of(moment)) if moment else None,
        "attributes": attributes,
        "source": "log",
    }
    if record.HasField("body"):
        event["body"] = value_of(record.body, limits)
    if record.severity_text:
        event["severity"] = record.severity_text
    event["uid"] = _record_uid(record, attributes)
    return event


def _record_uid(record: LogRecord, attributes: Mapping[str, Any]) -> str:
    """What tells ``record`` apart from a re-send of it (``with_log_events``): a digest of its
    ``log.record.uid`` attribute (the conventions' id of a record) when it has one, else of the
    whole record. An exporter that retries a request the server had stored (its answer lost
    to a proxy's timeout, a worker killed after the commit) sends the same bytes again, and
    the same record decoded from OTLP/JSON is the same message."""
    uid = attributes.get("log.record.uid")
    if isinstance(uid, str) and uid:
        identity = b"log.record.uid:" + uid.encode("utf-8", "surrogatepass")
    else:
        identity = record.SerializeToString(deterministic=True)
    return hashlib.blake2b(identity, digest_size=16).hexdigest()


# --- events into a step's data ------------------------------------------------------------------


def with_log_events(
    data: Mapping[str, Any], events: Iterable[dict[str, Any]], *, max_events: int
) -> dict[str, Any]:
    """The step data ``data`` (an OTLP span's, ``traces.otlp``) with its span's log record
    ``events`` among its events, in time order. The GenAI content of an event becomes the
    step's ``input`` / ``output`` messages, appended to those earlier records gave (the keys
    the records filled are listed in ``otel_span.from_logs``); when the span set that key
    itself, the content stays in the event.

    A record the step has already (its ``uid``: ``_record_uid``) is a re-send and is left out,
    as a re-sent span is. A step keeps at most ``max_events`` events (``OTLP_MAX_EVENTS``, as
    for a span's own): the records past them are not kept, and counted in
    ``otel_span.dropped.log_records`` (a span that logs without end would otherwise grow its
    step with every request)."""
    updated = dict(data)
    otel = dict(updated.get("otel_span") or {})
    from_logs = set(otel.get("from_logs", ()))
    kept = list(updated.get("events") or [])
    seen = {event.get("uid") for event in kept if isinstance(event, dict)}
    dropped = 0
    for event in events:
        uid = event.get("uid")
        if uid is not None and uid in seen:
            continue
        seen.add(uid)
        if len(kept) >= max_events:
            dropped += 1
            continue
        content, rest = event_messages(event)
        if any(key in updated and key not in from_logs for key in content):
            kept.append(event)  # the span's own input or output stands; this one stays whole
            continue
        updated = _placed(
            updated,
            {key: [*(updated.get(key) or []), *messages] for key, messages in content.items()},
        )
        from_logs.update(content)
        kept.append(rest)
    kept.sort(key=lambda item: (item.get("time") is None, item.get("time") or ""))
    updated["events"] = kept
    if from_logs:
        otel["from_logs"] = sorted(from_logs)
    if dropped:
        counts = dict(otel.get("dropped") or {})
        counts["log_records"] = counts.get("log_records", 0) + dropped
        otel["dropped"] = counts
    if from_logs or dropped:
        updated["otel_span"] = otel
    return updated


#: The keys a step's data starts with (``traces.otlp``): what a reader looks for first.
_HEAD_KEYS = (
    "tool_name",
    "arguments",
    "result",
    "model",
    "usage",
    "input",
    "output",
    "system_instructions",
)


def _placed(data: dict[str, Any], values: dict[str, Any]) -> dict[str, Any]:
    """``data`` with ``values`` set, new keys among its first ones (``_HEAD_KEYS``), as the
    span's own input and output would be: where the preview shows them."""
    head = {key: data[key] for key in _HEAD_KEYS if key in data}
    head.update(values)
    return {**head, **{key: value for key, value in data.items() if key not in head}}
