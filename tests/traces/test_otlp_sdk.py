"""The real OpenTelemetry SDK exporting to DevAssist under daphne: an agent instrumented with
the SDK is pointed at DevAssist by the two standard variables (``OTEL_EXPORTER_OTLP_ENDPOINT``
and ``OTEL_EXPORTER_OTLP_HEADERS``), through the SDK's ``BatchSpanProcessor`` and OTLP/HTTP
exporter (protobuf, gzip); and OTLP/JSON posted by a plain HTTP client."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from http import HTTPStatus
from typing import Any

import httpx
import pytest
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from devassist.tokens import api_token_create
from tests.traces.otlp_clients import JSON, json_body, partial_success, sdk_spans
from tests.traces.test_otlp_ingest import genai_agent, openinference_agent
from traces.models import Step, StepType, Trace, TraceStatus
from traces.selectors import trace_tree

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def exported(app_server: str, monkeypatch: pytest.MonkeyPatch, user: Any) -> Iterator[Any]:
    """A tracer provider that exports to the live server as the standard variables say, with
    ``user``'s token; the spans are flushed when the test has made them."""
    _, token = api_token_create(user=user, name="sdk")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", app_server)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", f"Authorization=Bearer%20{token}")
    provider = TracerProvider(
        resource=Resource.create({"service.name": "sdk-agent"}), shutdown_on_exit=False
    )
    exporter = OTLPSpanExporter(compression=Compression.Gzip)
    provider.add_span_processor(BatchSpanProcessor(exporter, max_export_batch_size=2))
    yield provider
    provider.shutdown()


def test_an_agent_pointed_at_devassist_by_two_variables_is_recorded(exported, user):
    tracer = exported.get_tracer("my.agent")
    openinference_agent(tracer)
    genai_agent(tracer)
    assert exported.force_flush(timeout_millis=30_000)

    traces = list(Trace.objects.filter(user=user).order_by("created_at"))
    assert len(traces) == 2
    for trace in traces:
        assert trace.agent_type == "sdk-agent"
        assert trace.status == TraceStatus.COMPLETED
        assert trace.root_count == 1
    inference, genai = traces
    (root,) = trace_tree(trace=inference)
    assert root["name"] == "agent"
    assert [c["name"] for c in root["children"]] == ["ChatCompletion", "calculator", "retrieve"]
    # Sent two spans a request, children first: every one was placed.
    assert inference.total_steps == 4
    assert inference.total_tokens == 15
    assert inference.error_count == 1
    (groot,) = trace_tree(trace=genai)
    assert groot["step_type"] == StepType.GOAL
    assert {c["step_type"] for c in groot["children"]} == {"thought", "action"}
    assert genai.total_tokens == 42
    chat = Step.objects.get(trace=genai, name="chat gpt-4o")
    assert chat.data["model"] == "gpt-4o"


def test_a_span_still_open_leaves_its_trace_running(exported, user):
    tracer = exported.get_tracer("my.agent")
    with tracer.start_as_current_span("agent run"):
        with tracer.start_as_current_span("step 1"):
            pass
        assert exported.force_flush(timeout_millis=30_000)
        trace = Trace.objects.get(user=user)
        assert trace.status == TraceStatus.RUNNING
        (waiting,) = Step.objects.filter(trace=trace)
        assert waiting.parent_id is None
        assert waiting.pending_parent_id is not None
    assert exported.force_flush(timeout_millis=30_000)
    trace.refresh_from_db()
    assert trace.status == TraceStatus.COMPLETED
    (root,) = trace_tree(trace=trace)
    assert [c["name"] for c in root["children"]] == ["step 1"]


def test_otlp_json_from_any_http_client(app_server, user):
    _, token = api_token_create(user=user, name="json")
    spans = sdk_spans(genai_agent)
    response = httpx.post(
        f"{app_server}/v1/traces",
        content=json_body(spans),
        headers={"Content-Type": JSON, "x-api-key": token},
        timeout=30,
    )
    assert response.status_code == HTTPStatus.OK, response.text
    assert response.headers["content-type"] == JSON
    assert partial_success(response) == (0, "")
    trace = Trace.objects.get(pk=uuid.UUID(int=spans[0].context.trace_id))
    assert trace.total_steps == 3
