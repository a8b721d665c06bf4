"""Property test over OTLP ingestion: whatever an exporter sends to ``/v1/traces`` and
``/v1/logs`` (protobuf or JSON; ids of any length, times from 1970 to the far future, the
attributes the mapping reads holding any type, text with NUL, lone surrogates and digits
``int()`` cannot read, numbers at every edge, nesting), the answer is never a 5xx, a refusal is
a ``google.rpc.Status`` in the request's encoding (never the database's refusal of what the
mapping let through), and every trace stored can be read back by the API, the trace page and
its steps' pages."""

from __future__ import annotations

import json
import time
import uuid
from http import HTTPStatus
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

from tests.conftest import token_client
from tests.devassist.test_poison_properties import (
    PROPERTY,
    assert_readable,
    texts,
    trace_reads,
)
from tests.traces.otlp_clients import JSON, PROTOBUF, request_body
from tests.traces.test_otlp_ingest import rpc_status
from traces.models import Step, Trace

pytestmark = pytest.mark.django_db

#: Each example reads every page of what it stored: fewer examples than the JSON endpoints'.
OTLP_PROPERTY = settings(PROPERTY, max_examples=20)

NOW_NS = time.time_ns()

#: The attributes the mapping reads, and keys shaped like its flattened lists'.
KEYS = [
    "openinference.span.kind",
    "gen_ai.operation.name",
    "traceloop.span.kind",
    "llm.request.type",
    "ai.operationId",
    "input.value",
    "output.value",
    "input.mime_type",
    "gen_ai.input.messages",
    "gen_ai.output.messages",
    "gen_ai.prompt",
    "traceloop.entity.input",
    "ai.prompt.messages",
    "ai.response.text",
    "ai.toolCall.args",
    "ai.toolCall.result",
    "gen_ai.request.model",
    "llm.model_name",
    "tool.name",
    "gen_ai.tool.name",
    "gen_ai.tool.call.arguments",
    "llm.token_count.total",
    "llm.token_count.prompt",
    "gen_ai.usage.input_tokens",
    "ai.usage.totalTokens",
    "llm.cost.total",
    "gen_ai.usage.cost",
    "gen_ai.prompt.0.role",
    "gen_ai.prompt.0.content",
    "gen_ai.prompt.\u00b2.content",
    "llm.input_messages.0.message.content",
    "llm.output_messages.1.message.tool_calls.0.tool_call.function.arguments",
    "retrieval.documents.0.document.content",
]
VALUES_READ = [
    "LLM",
    "TOOL",
    "AGENT",
    "chat",
    "execute_tool",
    "ai.generateText",
    "ai.toolCall",
    "application/json",
    '{"messages": [{"role": "user", "content": "hi"}]}',
    '[{"role": "user", "content": [{"type": "text", "text": "hi"}]}]',
    "[1, 2",
]


def any_value(text: Any) -> Any:
    """An ``AnyValue`` of any kind, its strings drawn from ``text``."""
    scalar = st.one_of(
        st.builds(lambda value: AnyValue(string_value=value), text),
        st.builds(lambda value: AnyValue(string_value=value), st.sampled_from(VALUES_READ)),
        st.builds(
            lambda value: AnyValue(int_value=value),
            st.integers(min_value=-(2**63), max_value=2**63 - 1),
        ),
        st.builds(lambda value: AnyValue(double_value=value), st.floats()),
        st.builds(lambda value: AnyValue(bool_value=value), st.booleans()),
        st.builds(lambda value: AnyValue(bytes_value=value), st.binary(max_size=8)),
        st.just(AnyValue()),
    )

    def nest(inner: Any) -> Any:
        def array(values: list[AnyValue]) -> AnyValue:
            value = AnyValue()
            value.array_value.values.extend(values)
            return value

        def kvlist(pairs: list[tuple[str, AnyValue]]) -> AnyValue:
            value = AnyValue()
            value.kvlist_value.values.extend(KeyValue(key=k, value=v) for k, v in pairs)
            return value

        return st.one_of(
            st.lists(inner, max_size=3).map(array),
            st.lists(st.tuples(text, inner), max_size=3).map(kvlist),
        )

    return st.recursive(scalar, nest, max_leaves=6)


def mostly(good: Any, bad: Any) -> Any:
    """``good`` about seven times in eight, ``bad`` otherwise: most spans pass the checks and
    reach the mapping."""
    return st.sampled_from([*[good] * 7, bad]).flatmap(lambda chosen: chosen)


def ids(size: int) -> Any:
    return mostly(
        st.integers(min_value=1, max_value=2 ** (8 * size) - 1).map(
            lambda value: value.to_bytes(size, "big")
        ),
        st.just(bytes(size)) | st.binary(max_size=size + 1),
    )


def times() -> Any:
    return mostly(
        st.integers(min_value=NOW_NS - 10**13, max_value=NOW_NS),
        st.sampled_from([0, 1, NOW_NS + 10**15, 2**63, 2**64 - 1]),
    )


def spans_request(text: Any) -> Any:
    """An ``ExportTraceServiceRequest`` of up to 6 spans of one or two traces, parents among
    them or not, the mapping's attributes holding anything."""

    @st.composite
    def build(draw: Any) -> ExportTraceServiceRequest:
        trace_ids = draw(st.lists(ids(16), min_size=1, max_size=2))
        span_ids = draw(st.lists(ids(8), min_size=1, max_size=6))
        request = ExportTraceServiceRequest()
        resource = request.resource_spans.add()
        resource.resource.attributes.add(key="service.name", value=draw(any_value(text)))
        scope = resource.scope_spans.add()
        scope.scope.name = draw(text)
        for span_id in span_ids:
            span = scope.spans.add()
            span.trace_id = draw(st.sampled_from(trace_ids))
            span.span_id = span_id
            span.parent_span_id = draw(st.sampled_from([b"", *span_ids]) | ids(8))
            span.name = draw(text)
            span.start_time_unix_nano = draw(times())
            span.end_time_unix_nano = draw(times())
            span.status.code = draw(st.sampled_from([0, 1, 2]))
            span.status.message = draw(text)
            for key in draw(st.lists(mostly(st.sampled_from(KEYS), text), max_size=5)):
                span.attributes.add(key=key, value=draw(any_value(text)))
            for _ in range(draw(st.integers(min_value=0, max_value=2))):
                event = span.events.add()
                event.name = draw(st.sampled_from(["exception", "gen_ai.choice"]) | text)
                event.time_unix_nano = draw(times())
                event.attributes.add(key="exception.message", value=draw(any_value(text)))
        return request

    return build()


def logs_request(text: Any, trace_id: bytes, span_id: bytes) -> Any:
    """An ``ExportLogsServiceRequest`` of up to 3 records, mostly for the span given."""

    @st.composite
    def build(draw: Any) -> ExportLogsServiceRequest:
        request = ExportLogsServiceRequest()
        scope = request.resource_logs.add().scope_logs.add()
        for _ in range(draw(st.integers(min_value=1, max_value=3))):
            record = scope.log_records.add()
            record.trace_id = draw(st.just(trace_id) | ids(16))
            record.span_id = draw(st.just(span_id) | ids(8))
            record.time_unix_nano = draw(times())
            record.event_name = draw(
                st.sampled_from(["gen_ai.user.message", "gen_ai.choice", ""]) | text
            )
            record.body.CopyFrom(draw(any_value(text)))
            record.attributes.add(key="gen_ai.input.messages", value=draw(any_value(text)))
        return request

    return build()


#: Text a protobuf string can hold (no lone surrogates: the Python encoder refuses them).
proto_texts = texts.map(lambda text: text.encode("utf-8", "replace").decode())
#: What OTLP/JSON may carry: lone surrogates escaped, as JavaScript's exporter writes them.
json_texts = texts


def body_of(request: Any, encoding: str, patch: dict[str, str]) -> bytes:
    """``request`` in ``encoding``; in JSON with the strings ``patch`` names swapped back in
    (the placeholders stand for text protobuf cannot hold)."""
    if encoding == PROTOBUF:
        return request_body(request)
    text = request_body(request, JSON).decode()
    for placeholder, value in patch.items():
        text = text.replace(json.dumps(placeholder), json.dumps(value))
    return text.encode()


def posted(client: Client, path: str, body: bytes, encoding: str) -> Any:
    response = client.post(path, body, content_type=encoding)
    assert response.status_code < HTTPStatus.INTERNAL_SERVER_ERROR, response.content[:500]
    assert response["Content-Type"] == encoding
    if response.status_code >= HTTPStatus.BAD_REQUEST:
        code, message = rpc_status(response)
        assert code
        assert message
        # What the mapping let through and the database refused is a bug, not bad input.
        assert "database refused" not in message
    return response


def assert_every_trace_readable(user: User, owner: Client, staff: Client) -> None:
    for trace in Trace.objects.filter(user=user):
        steps = [
            str(step) for step in Step.objects.filter(trace=trace).values_list("pk", flat=True)
        ]
        pages = [f"/traces/{trace.id}/", *(f"/traces/{trace.id}/?step={s}" for s in steps[:3])]
        pages += [f"/api/traces/{trace.id}/steps/{s}" for s in steps[:3]]
        pages += [f"/traces/{trace.id}/timeline/", f"/traces/{trace.id}/search/?q=a"]
        pages += [f"/api/traces/{trace.id}/waiting-{what}" for what in ("steps", "log-records")]
        assert_readable(owner, staff, *trace_reads(trace.id), *pages)


@pytest.fixture
def browsing(user: User, staff_user: User) -> tuple[Client, Client, Client]:
    """The user's exporter (its API token), its browser session, and a staff member's API."""
    session = Client()
    session.force_login(user)
    return token_client(user), session, token_client(staff_user)


@OTLP_PROPERTY
@given(request=spans_request(proto_texts), encoding=st.sampled_from([PROTOBUF, JSON]))
def test_any_spans(user: User, browsing: Any, request: Any, encoding: str) -> None:
    exporter, owner, staff = browsing
    posted(exporter, "/v1/traces", body_of(request, encoding, {}), encoding)
    assert_every_trace_readable(user, owner, staff)


@OTLP_PROPERTY
@given(
    request=spans_request(st.just("\ufffe-placeholder")),
    text=json_texts,
)
def test_any_text_over_otlp_json(user: User, browsing: Any, request: Any, text: str) -> None:
    """JSON carries what protobuf cannot (lone surrogates): every string a placeholder, then
    the drawn text in its place."""
    exporter, owner, staff = browsing
    body = body_of(request, JSON, {"\ufffe-placeholder": text})
    posted(exporter, "/v1/traces", body, JSON)
    assert_every_trace_readable(user, owner, staff)


@OTLP_PROPERTY
@given(data=st.data(), encoding=st.sampled_from([PROTOBUF, JSON]))
def test_any_log_records_before_or_after_their_span(
    user: User, browsing: Any, data: Any, encoding: str
) -> None:
    exporter, owner, staff = browsing
    trace_id, span_id = uuid.uuid4().bytes, uuid.uuid4().bytes[:8]
    spans = ExportTraceServiceRequest()
    span = spans.resource_spans.add().scope_spans.add().spans.add()
    span.trace_id, span.span_id, span.name = trace_id, span_id, "chat"
    span.start_time_unix_nano = span.end_time_unix_nano = NOW_NS
    logs = data.draw(logs_request(proto_texts, trace_id, span_id))
    first_logs = data.draw(st.booleans())
    for path, request in [("/v1/logs", logs), ("/v1/traces", spans)][:: 1 if first_logs else -1]:
        posted(exporter, path, body_of(request, encoding, {}), encoding)
    assert_every_trace_readable(user, owner, staff)
    # The span is a good one: whatever its records were, it is stored.
    assert Step.objects.filter(trace_id=uuid.UUID(bytes=trace_id)).count() == 1
