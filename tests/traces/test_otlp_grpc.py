"""OTLP/gRPC ingestion (``manage.py otlp_grpc``): the real SDK's gRPC exporters, configured by
the standard variables, send spans and log records to DevAssist's ``TraceService`` and
``LogsService``; bad calls get gRPC's status codes; the command serves until SIGTERM."""

from __future__ import annotations

import random
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import grpc
import pytest
from opentelemetry.exporter.otlp.proto.common.metrics_encoder import encode_metrics
from opentelemetry.exporter.otlp.proto.grpc._log_exporter import OTLPLogExporter
from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.logs.v1.logs_service_pb2_grpc import LogsServiceStub
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2_grpc import MetricsServiceStub
from opentelemetry.proto.collector.trace.v1.trace_service_pb2_grpc import TraceServiceStub
from opentelemetry.sdk._logs.export import LogRecordExportResult
from opentelemetry.sdk.metrics.export import MetricExportResult
from opentelemetry.sdk.trace.export import SpanExportResult

from devassist.tokens import api_token_create
from tests.browser import live_server_env
from tests.servers import otlp_grpc_process
from tests.traces.otlp_clients import export_request, logs_request, sdk_spans, sdk_spans_and_logs
from tests.traces.test_otlp_ingest import (
    genai_agent,
    step_of,
    trace_of,
    without_the_storable_check,
)
from tests.traces.test_otlp_logs import LEGACY_INPUT, LEGACY_OUTPUT, legacy_chat, no_span
from tests.traces.test_otlp_sdk import agent_metrics, check_langchain_trace, run_weather_agent
from traces.models import PendingLogEvents, Step, Trace, TraceStatus
from traces.otlp_grpc import otlp_grpc_server

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def receiver() -> Iterator[str]:
    """DevAssist's OTLP/gRPC services on a free port of 127.0.0.1, as an endpoint URL."""
    server, port = otlp_grpc_server("127.0.0.1:0", workers=2)
    server.start()
    yield f"http://127.0.0.1:{port}"
    server.stop(None).wait()


def token_of(user: Any) -> str:
    return api_token_create(user=user, name="grpc")[1]


def pointed_at(monkeypatch: pytest.MonkeyPatch, endpoint: str, headers: str) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", headers)


@pytest.mark.parametrize("header", ["authorization=Bearer%20{token}", "x-api-key={token}"])
def test_an_agent_exporting_over_grpc_by_the_standard_variables_is_recorded(
    receiver, monkeypatch, user, header
):
    pointed_at(monkeypatch, receiver, header.format(token=token_of(user)))
    spans, records = sdk_spans_and_logs(legacy_chat)
    # The log records first, as a batch processor's schedule often sends them.
    logs = OTLPLogExporter(compression=grpc.Compression.Gzip)
    assert logs.export(records) == LogRecordExportResult.SUCCESS
    exporter = OTLPSpanExporter(compression=grpc.Compression.Gzip)
    assert exporter.export(spans) == SpanExportResult.SUCCESS
    logs.shutdown()
    exporter.shutdown()

    trace = Trace.objects.get(pk=trace_of(spans))
    assert (trace.user_id, trace.status, trace.total_steps) == (user.id, TraceStatus.COMPLETED, 2)
    chat = Step.objects.get(trace=trace, name="chat gpt-4o")
    assert chat.data["input"] == LEGACY_INPUT
    assert chat.data["output"] == LEGACY_OUTPUT
    assert chat.tokens == 9


def call(endpoint: str, stub_class: Any, request: Any, token: str | None) -> Any:
    """One ``Export`` call; the response, or the ``grpc.RpcError`` it failed with."""
    metadata = [("authorization", f"Bearer {token}")] if token else []
    with grpc.insecure_channel(endpoint.removeprefix("http://")) as channel:
        try:
            return stub_class(channel).Export(request, metadata=metadata, timeout=30)
        except grpc.RpcError as error:
            return error


def test_a_call_without_a_token_is_unauthenticated(receiver, user):
    failed = call(receiver, TraceServiceStub, export_request(sdk_spans(genai_agent)), None)
    assert failed.code() == grpc.StatusCode.UNAUTHENTICATED
    assert "x-api-key" in failed.details()
    wrong = call(receiver, TraceServiceStub, export_request(sdk_spans(genai_agent)), "da_x")
    assert wrong.code() == grpc.StatusCode.UNAUTHENTICATED
    assert not Trace.objects.exists()


def test_bad_spans_are_partial_success_and_a_whole_bad_call_is_invalid(receiver, user):
    token = token_of(user)
    request = export_request(sdk_spans(genai_agent))
    request.resource_spans[0].scope_spans[0].spans[0].trace_id = bytes(16)
    answer = call(receiver, TraceServiceStub, request, token)
    assert answer.partial_success.rejected_spans == 1
    assert "all zeros" in answer.partial_success.error_message

    _, records = sdk_spans_and_logs(no_span)
    failed = call(receiver, LogsServiceStub, logs_request(records[:1]), token)
    assert failed.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "names no span" in failed.details()


@pytest.mark.parametrize(
    ("method", "body"),
    [
        ("opentelemetry.proto.collector.trace.v1.TraceService", b"\xff\xff\xff\xff"),
        # A span named with bytes that are not UTF-8.
        ("opentelemetry.proto.collector.trace.v1.TraceService", b"\x0a\x05\x12\x03\x12\x01\xff"),
        ("opentelemetry.proto.collector.logs.v1.LogsService", b"\x0a\x03\x12\x01"),
    ],
)
def test_a_message_that_does_not_decode_is_invalid_with_why(receiver, user, method, body):
    """Decoded by DevAssist as ``POST /v1/traces`` decodes it, not by gRPC: the reason
    reaches the sender (gRPC's own decoding fails a call as ``INTERNAL``, without it)."""
    metadata = [("authorization", f"Bearer {token_of(user)}")]
    with grpc.insecure_channel(receiver.removeprefix("http://")) as channel:
        export = channel.unary_unary(f"/{method}/Export")
        with pytest.raises(grpc.RpcError) as failed:
            export(body, metadata=metadata, timeout=30)
    assert failed.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "Malformed protobuf body" in failed.value.details()
    assert not Trace.objects.exists()


def test_what_the_database_refuses_is_invalid_not_unavailable(receiver, user, monkeypatch):
    spans = without_the_storable_check(monkeypatch)
    failed = call(receiver, TraceServiceStub, export_request(spans), token_of(user))
    assert failed.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "NUL" in failed.details()
    assert not Trace.objects.exists()


def test_a_zero_code_agent_is_recorded_by_the_two_variables_alone(receiver, user):
    """``opentelemetry-instrument`` exports over gRPC unless told otherwise: the LangChain
    agent with no OTel code, given the endpoint and the token and nothing else of OTLP's."""
    trace = run_weather_agent(
        "tests.traces.langchain_agent", receiver, user, service="langchain-agent", zero_code=True
    )
    check_langchain_trace(trace)


def test_another_users_trace_is_permission_denied(receiver, user, other_user):
    spans = sdk_spans(genai_agent)
    call(receiver, TraceServiceStub, export_request(spans[:1]), token_of(user))
    failed = call(receiver, TraceServiceStub, export_request(spans[1:]), token_of(other_user))
    assert failed.code() == grpc.StatusCode.PERMISSION_DENIED
    assert Step.objects.filter(trace_id=trace_of(spans)).count() == 1


def test_calls_past_the_limits_are_resource_exhausted(receiver, user, settings):
    token = token_of(user)
    settings.OTLP_MAX_SPANS = 1
    failed = call(receiver, TraceServiceStub, export_request(sdk_spans(genai_agent)), token)
    assert failed.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "OTEL_BSP_MAX_EXPORT_BATCH_SIZE" in failed.details()
    assert not Trace.objects.exists()


def test_the_command_serves_until_sigterm(django_db_blocker, live_model, tmp_path, user):
    """``manage.py otlp_grpc`` in a process of its own: it serves, and SIGTERM ends it
    cleanly (``otlp_grpc_process`` checks)."""
    spans = sdk_spans(genai_agent)
    env = live_server_env(django_db_blocker, live_model, tmp_path)
    with otlp_grpc_process(env) as address:
        answer = call(address, TraceServiceStub, export_request(spans), token_of(user))
    assert not answer.HasField("partial_success")
    assert Trace.objects.get(pk=trace_of(spans)).total_steps == len(spans)
    assert Step.objects.filter(pk=step_of(spans[0])).exists()


def test_metrics_are_refused_without_a_failure_saying_how_to_stop_sending_them(
    receiver, monkeypatch, user
):
    """The Microsoft Agent Framework exports metrics over gRPC by default, whatever
    OTEL_METRICS_EXPORTER says: the SDK's exporter succeeds, every data point refused."""
    pointed_at(monkeypatch, receiver, f"x-api-key={token_of(user)}")
    data = agent_metrics()
    assert OTLPMetricExporter().export(data) == MetricExportResult.SUCCESS
    answer = call(receiver, MetricsServiceStub, encode_metrics(data), token_of(user))
    assert answer.partial_success.rejected_data_points == 3
    assert "OTEL_METRICS_EXPORTER=none" in answer.partial_success.error_message
    failed = call(receiver, MetricsServiceStub, ExportMetricsServiceRequest(), None)
    assert failed.code() == grpc.StatusCode.UNAUTHENTICATED


def test_log_records_and_their_spans_sent_at_the_same_moment_never_miss_each_other(user):
    """Twelve agents' spans and log records, each in a call of its own, all at once over
    eight threads of the server: whichever of a trace's two calls takes its lock first, every
    model call's step ends with its messages and no record is left waiting."""
    server, port = otlp_grpc_server("127.0.0.1:0", workers=8)
    server.start()
    try:
        token = token_of(user)
        agents = [sdk_spans_and_logs(legacy_chat) for _ in range(12)]
        calls: list[tuple[Any, Any]] = []
        for spans, records in agents:
            calls += [
                (TraceServiceStub, export_request(spans)),
                (LogsServiceStub, logs_request(records)),
            ]
        random.Random(7).shuffle(calls)
        with ThreadPoolExecutor(max_workers=8) as pool:
            answers = list(pool.map(lambda c: call(f"127.0.0.1:{port}", c[0], c[1], token), calls))
    finally:
        server.stop(None).wait()
    assert not [a for a in answers if isinstance(a, grpc.RpcError)]
    for spans, _ in agents:
        chat = Step.objects.get(pk=step_of(spans[0]))
        assert (chat.data["input"], chat.data["output"]) == (LEGACY_INPUT, LEGACY_OUTPUT)
    assert Trace.objects.filter(status=TraceStatus.COMPLETED).count() == 12
    assert not PendingLogEvents.objects.exists()
