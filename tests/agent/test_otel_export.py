"""The OpenTelemetry export of runs, against real OTLP receivers in the test (an http.server
decoding the requests with opentelemetry-proto, and grpcio serving its ``TraceService``): span
names, parents and attributes after the GenAI conventions over both protocols, content only
when allowed, Langfuse's export beside it, a collector that is down or hangs never failing or
holding up a run, and the protocol variables."""

from __future__ import annotations

import asyncio
import gzip
import json
import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

import grpc
import pytest
import structlog
from asgiref.sync import sync_to_async
from django.utils import timezone
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2_grpc import (
    TraceServiceServicer,
    add_TraceServiceServicer_to_server,
)
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

from agent.executor import run_start
from agent.langfuse import langfuse_reset, langfuse_wait_for_exports
from agent.models import AgentRun, RunStatus
from agent.otel import model_attributes, otel_flush, otel_reset, span_id_of
from agent.services import run_cancel, run_create
from tests.agent.test_langfuse import LangfuseReceiver
from tests.conftest import token_client
from tests.servers import free_port
from traces.models import Step

pytestmark = pytest.mark.django_db

USAGE = {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}


class _Received:
    exports: list[ExportTraceServiceRequest]

    def spans(self) -> list[tuple[Span, dict[str, Any]]]:
        """Every span received, with its resource's attributes."""
        return [
            (span, attributes(resource_spans.resource))
            for request in self.exports
            for resource_spans in request.resource_spans
            for scope_spans in resource_spans.scope_spans
            for span in scope_spans.spans
        ]


class OtlpReceiver(_Received):
    """An OTLP/HTTP trace endpoint on 127.0.0.1 (``/v1/traces``) that decodes every request
    into ``exports``. With ``hold`` set, each request waits until it is released
    (``release``); ``arrived`` is set when one came in."""

    def __init__(self, *, hold: bool = False) -> None:
        self.exports: list[ExportTraceServiceRequest] = []
        self.headers: list[dict[str, str]] = []
        self.arrived = threading.Event()
        self.released = threading.Event()
        if not hold:
            self.released.set()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                receiver.arrived.set()
                receiver.released.wait(60)
                if self.path != "/v1/traces":
                    self.send_error(HTTPStatus.NOT_FOUND)
                    return
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                request = ExportTraceServiceRequest()
                request.ParseFromString(body)
                receiver.exports.append(request)
                receiver.headers.append(dict(self.headers))
                self.send_response(HTTPStatus.OK)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base_url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> OtlpReceiver:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.released.set()
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()


class GrpcOtlpReceiver(_Received):
    """An OTLP/gRPC trace service on 127.0.0.1 (grpcio serving opentelemetry-proto's
    ``TraceService``, as a collector's port 4317 does) that keeps every request in
    ``exports`` and its metadata in ``headers``; messages past ``max_message_bytes`` (grpcio's
    4 MiB by default) are refused, as a collector's receiver refuses them."""

    def __init__(self, *, max_message_bytes: int | None = None) -> None:
        self.exports: list[ExportTraceServiceRequest] = []
        self.headers: list[dict[str, str]] = []
        receiver = self

        class Service(TraceServiceServicer):
            def Export(
                self, request: ExportTraceServiceRequest, context: grpc.ServicerContext
            ) -> ExportTraceServiceResponse:
                receiver.exports.append(request)
                receiver.headers.append(dict(context.invocation_metadata()))
                return ExportTraceServiceResponse()

        options = []
        if max_message_bytes is not None:
            options.append(("grpc.max_receive_message_length", max_message_bytes))
        self.server = grpc.server(ThreadPoolExecutor(max_workers=2), options=options)
        add_TraceServiceServicer_to_server(Service(), self.server)
        port = self.server.add_insecure_port("127.0.0.1:0")
        self.base_url = f"http://127.0.0.1:{port}"

    def __enter__(self) -> GrpcOtlpReceiver:
        self.server.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.stop(grace=None).wait(10)


def attributes(item: Any) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for attribute in item.attributes:
        value = attribute.value
        kind = value.WhichOneof("value")
        if kind == "array_value":
            values[attribute.key] = [v.string_value for v in value.array_value.values]
        else:
            values[attribute.key] = getattr(value, kind) if kind else None
    return values


@pytest.fixture(autouse=True)
def _no_exporter_left() -> Iterator[None]:
    yield
    otel_reset()


@pytest.fixture
def receiver() -> Iterator[OtlpReceiver]:
    with OtlpReceiver() as receiver:
        yield receiver


@pytest.fixture
def otel_on(settings: Any, receiver: OtlpReceiver) -> OtlpReceiver:
    settings.OTEL_EXPORTER_OTLP_ENDPOINT = receiver.base_url
    return receiver


def agent_run(user: Any, scripted: Any, message: str = "What is 6*7?") -> AgentRun:
    """One agent run over the API: a tool call the tool refuses, then the answer."""
    scripted.script(
        [
            {
                "content": 'Thought: run it\nAction: tool:execute_code\nargs: {"timeout_s": 0}',
                "usage": USAGE,
            },
            {"content": "Thought: done\nAction: final: 42", "usage": USAGE},
        ]
    )
    response = token_client(user).post(
        "/agent", data=json.dumps({"message": message}), content_type="application/json"
    )
    assert response.status_code == HTTPStatus.OK, response.content
    return AgentRun.objects.get(pk=response.json()["run_id"])


@pytest.fixture(params=["http/protobuf", "grpc"])
def collector(request: Any, settings: Any) -> Iterator[_Received]:
    """A receiver of either protocol, with the export pointed at it over that protocol."""
    receiver_class = GrpcOtlpReceiver if request.param == "grpc" else OtlpReceiver
    with receiver_class() as receiver:
        settings.OTEL_EXPORTER_OTLP_PROTOCOL = request.param
        settings.OTEL_EXPORTER_OTLP_ENDPOINT = receiver.base_url
        yield receiver


def test_a_run_is_exported_as_a_genai_trace(collector, scripted, user, monkeypatch):
    # The SDK reads the headers a backend's key goes in (URL-encoded, as the variable is).
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", "x-api-key=backend%20key")
    run = agent_run(user, scripted)
    assert otel_flush()

    assert collector.headers
    for headers in collector.headers:
        assert {name.lower(): value for name, value in headers.items()}["x-api-key"] == (
            "backend key"
        )
    received = collector.spans()
    spans = {span.name: span for span, _ in received}
    assert sorted(spans) == [
        "chat fake-model",
        "execute_tool execute_code",
        "invoke_agent devassist",
    ]
    chats = [span for span, _ in received if span.name == "chat fake-model"]
    assert len(chats) == 2
    resource = received[0][1]
    assert resource["service.name"] == "devassist"

    assert run.trace_id is not None
    root = spans["invoke_agent devassist"]
    assert root.trace_id == run.trace_id.bytes
    assert root.parent_span_id == b""
    assert root.span_id == span_id_of(run.id).to_bytes(8, "big")
    root_values = attributes(root)
    assert root_values["gen_ai.operation.name"] == "invoke_agent"
    assert root_values["gen_ai.agent.name"] == "devassist"
    assert root_values["gen_ai.provider.name"] == "openai"
    assert root_values["devassist.run_id"] == str(run.id)
    assert root_values["devassist.run.status"] == RunStatus.COMPLETED
    assert root.status.code != Status.STATUS_CODE_ERROR

    for chat in chats:
        assert chat.trace_id == root.trace_id
        assert chat.parent_span_id == root.span_id
        assert chat.kind == Span.SPAN_KIND_CLIENT
        assert root.start_time_unix_nano <= chat.start_time_unix_nano <= chat.end_time_unix_nano
        values = attributes(chat)
        assert values["gen_ai.operation.name"] == "chat"
        assert values["gen_ai.request.model"] == "fake-model"
        # The provider, as the conventions name an OpenAI-protocol client's, and its server.
        assert values["gen_ai.provider.name"] == values["gen_ai.system"] == "openai"
        server = urlsplit(scripted.base_url)
        assert (values["server.address"], values["server.port"]) == (server.hostname, server.port)
        assert values["gen_ai.usage.input_tokens"] == 11
        assert values["gen_ai.usage.output_tokens"] == 7
        # Content stays home unless allowed.
        assert not chat.events
        assert "gen_ai.input.messages" not in values

    tool = spans["execute_tool execute_code"]
    assert tool.parent_span_id == root.span_id
    tool_values = attributes(tool)
    assert tool_values["gen_ai.operation.name"] == "execute_tool"
    assert tool_values["gen_ai.tool.name"] == "execute_code"
    assert "gen_ai.tool.call.arguments" not in tool_values
    assert tool.status.code == Status.STATUS_CODE_ERROR
    assert "code" in tool.status.message
    assert tool_values["error.type"] == "_OTHER"
    assert "error.type" not in root_values


@pytest.mark.parametrize(
    ("mode", "as_attributes", "as_events"),
    [("true", True, True), ("span_only", True, False), ("event_only", False, True)],
)
def test_content_goes_out_only_when_allowed(
    otel_on, scripted, user, settings, mode, as_attributes, as_events
):
    settings.OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT = mode
    agent_run(user, scripted, message="What is 6*7? 请回答")
    assert otel_flush()
    received = {span.name: span for span, _ in otel_on.spans()}
    first, second = sorted(
        (span for span, _ in otel_on.spans() if span.name.startswith("chat")),
        key=lambda span: span.start_time_unix_nano,
    )
    root = received["invoke_agent devassist"]

    # Each call's prompt is the messages the model was sent: the system prompt, the task,
    # and for the second the first reply and the tool's result (the observation).
    sent = [request["messages"] for request in scripted.requests]
    assert [m["role"] for m in sent[1]] == ["system", "user", "assistant", "user"]
    assert sent[0][1]["content"] == "What is 6*7? 请回答"

    # The conventions' current form: the messages as attributes, content as parts.
    values = attributes(first)
    assert ("gen_ai.input.messages" in values) is as_attributes
    if as_attributes:
        for span, messages in zip((first, second), sent, strict=True):
            exported = json.loads(attributes(span)["gen_ai.input.messages"])
            assert [(m["role"], m["parts"]) for m in exported] == [
                (m["role"], [{"type": "text", "content": m["content"]}]) for m in messages
            ]
        (reply,) = json.loads(values["gen_ai.output.messages"])
        assert (reply["role"], reply["finish_reason"]) == ("assistant", "stop")
        assert "execute_code" in reply["parts"][0]["content"]
        answer = json.loads(attributes(root)["gen_ai.output.messages"])
        assert answer == [
            {
                "role": "assistant",
                "parts": [{"type": "text", "content": "42"}],
                "finish_reason": "stop",
            }
        ]

    # Their earlier form: events.
    assert bool(first.events) is as_events
    if as_events:
        prompt = {e.name: attributes(e) for e in first.events}
        assert json.loads(prompt["gen_ai.content.prompt"]["gen_ai.prompt"]) == sent[0]
        completion = json.loads(prompt["gen_ai.content.completion"]["gen_ai.completion"])
        assert "execute_code" in completion[0]["content"]
        later = json.loads(
            {e.name: attributes(e) for e in second.events}["gen_ai.content.prompt"]["gen_ai.prompt"]
        )
        assert later == sent[1]
        root_events = {e.name: attributes(e) for e in root.events}
        answer = json.loads(root_events["gen_ai.content.completion"]["gen_ai.completion"])
        assert answer == [{"role": "assistant", "content": "42"}]

    # Tools' arguments and results go with either.
    tool = attributes(received["execute_tool execute_code"])
    assert json.loads(tool["gen_ai.tool.call.arguments"]) == {"timeout_s": 0}
    assert "code" in tool["gen_ai.tool.call.result"]


def test_a_reply_that_asks_for_tools_goes_out_with_its_tool_calls(
    otel_on, scripted, user, settings, monkeypatch
):
    """Native tool calling: the reply's tool calls are ``tool_call`` parts (it went out as
    an empty text), and each result answers its call by id; the root carries the question,
    the answer (``input.value`` / ``output.value``, which Phoenix lists) and the user."""
    settings.AGENT_PROTOCOL = "tools"
    settings.OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT = "span_only"
    scripted.script(
        [
            {
                "tool_calls": [{"name": "execute_code", "arguments": {"timeout_s": 0}}],
                "usage": USAGE,
            },
            {"content": "It is 42.", "usage": USAGE},
        ]
    )
    response = token_client(user).post(
        "/agent", data=json.dumps({"message": "What is 6*7?"}), content_type="application/json"
    )
    assert response.status_code == HTTPStatus.OK, response.content
    assert otel_flush()
    spans = otel_on.spans()
    first, second = sorted(
        (span for span, _ in spans if span.name.startswith("chat")),
        key=lambda span: span.start_time_unix_nano,
    )

    (reply,) = json.loads(attributes(first)["gen_ai.output.messages"])
    assert reply == {
        "role": "assistant",
        "parts": [
            {
                "type": "tool_call",
                "id": "call_1",
                "name": "execute_code",
                "arguments": {"timeout_s": 0},
            }
        ],
        "finish_reason": "tool_calls",
    }
    system, user_turn, asked, answered = json.loads(attributes(second)["gen_ai.input.messages"])
    assert system["role"] == "system"
    assert user_turn["parts"] == [{"type": "text", "content": "What is 6*7?"}]
    assert asked["parts"] == reply["parts"]
    assert answered["role"] == "tool"
    assert answered["parts"][0]["type"] == "tool_call_response"
    assert answered["parts"][0]["id"] == "call_1"
    assert answered["parts"][0]["response"] == scripted.requests[1]["messages"][-1]["content"]
    root = attributes(next(span for span, _ in spans if span.name == "invoke_agent devassist"))
    assert root["input.value"] == "What is 6*7?"
    assert root["output.value"] == "It is 42."
    assert root["user.id"] == str(user.pk)


def test_the_title_call_goes_out_with_the_prompt_it_was_sent(otel_on, api, scripted, settings):
    """The conversation's title is a model call of its own: its span's input is the title
    prompt, not the run's conversation, which it is no part of."""
    settings.CHAT_TITLES = "model"
    settings.OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT = "span_only"
    scripted.script(["Use SANDBOX_MEMORY_MB.", "Sandbox memory"])
    body = {"message": "How do I change the memory?", "use_agent": False, "use_rag": False}
    response = api.post("/chat", data=json.dumps(body), content_type="application/json")
    assert response.status_code == HTTPStatus.OK, response.content
    assert otel_flush()

    chats = sorted(
        (span for span, _ in otel_on.spans() if span.name.startswith("chat")),
        key=lambda span: span.start_time_unix_nano,
    )
    answer, title = (json.loads(attributes(c)["gen_ai.input.messages"]) for c in chats)
    assert [m["role"] for m in answer] == ["system", "user"]
    sent = scripted.requests[1]["messages"]
    assert [(m["role"], m["parts"][0]["content"]) for m in title] == [
        (m["role"], m["content"]) for m in sent
    ]
    step = Step.objects.get(trace_id=response.json()["trace_id"], name="title")
    assert step.data["input"] == sent  # the trace page shows what it was asked
    assert [attributes(c)["devassist.step_name"] for c in chats] == ["chat", "title"]


def test_a_model_call_that_failed_goes_out_as_a_failed_chat_span(otel_on, scripted, user, settings):
    """A model that was down left no ``chat`` span: only the run's error said so. The failed
    call is a failed span, with its prompt and no completion, and the run's error."""
    settings.OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT = "span_only"
    scripted.script([{"status": 500, "message": "the model is down"}] * 2)
    response = token_client(user).post(
        "/agent", data=json.dumps({"message": "What is 6*7?"}), content_type="application/json"
    )
    assert response.status_code == HTTPStatus.BAD_GATEWAY, response.content
    assert otel_flush()

    spans = otel_on.spans()
    (chat,) = [span for span, _ in spans if span.name.startswith("chat")]
    assert chat.status.code == Status.STATUS_CODE_ERROR
    assert "the model is down" in chat.status.message
    chat_attributes = attributes(chat)
    assert chat_attributes["error.type"] == "llm_unavailable"  # the run's error's code
    assert chat_attributes["devassist.step_name"] == "iteration 1"
    assert chat_attributes["devassist.step_status"] == "failed"
    assert chat_attributes["gen_ai.request.model"] == "fake-model"
    # No model answered it (Phoenix showed the response model as the call's output).
    assert "gen_ai.response.model" not in chat_attributes
    system, asked = json.loads(chat_attributes["gen_ai.input.messages"])
    assert system["role"] == "system"
    assert asked["parts"] == [{"type": "text", "content": "What is 6*7?"}]
    assert "gen_ai.output.messages" not in chat_attributes
    root = next(span for span, _ in spans if span.name == "invoke_agent devassist")
    assert chat.parent_span_id == root.span_id
    assert root.status.code == Status.STATUS_CODE_ERROR


@pytest.mark.django_db(transaction=True)
async def test_a_model_call_the_user_stopped_goes_out_as_stopped(otel_on, scripted, user, settings):
    """It read as a call that ended normally."""
    settings.OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT = "span_only"
    scripted.script([{"content": "Thought: slow\nAction: final: late", "delay_s": 10}])
    run = await run_create(user=user, message="take your time")
    task = run_start(run)
    await scripted.wait_for_request()  # the model call is under way
    await run_cancel(user=user, run=run)
    await asyncio.wait_for(task, timeout=20)
    assert await sync_to_async(otel_flush)()

    spans = otel_on.spans()
    (chat,) = [span for span, _ in spans if span.name.startswith("chat")]
    values = attributes(chat)
    assert chat.status.code == Status.STATUS_CODE_UNSET  # no error: the user stopped it
    assert values["devassist.step_status"] == "skipped"
    assert "gen_ai.output.messages" not in values
    assert "gen_ai.response.model" not in values
    root = next(span for span, _ in spans if span.name == "invoke_agent devassist")
    assert attributes(root)["devassist.run.status"] == "cancelled"


def test_the_answer_of_a_run_that_failed_while_writing_it_ends_for_the_error(
    otel_on, api, scripted, settings
):
    """A run cut off mid-answer went out as an answer that ended normally ("stop")."""
    settings.CHAT_TITLES = "heuristic"
    settings.OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT = "span_only"
    scripted.script([{"content": "Set SANDBOX_MEMORY_MB to more.", "drop_after_chunks": 2}] * 2)
    body = {"message": "How do I change the memory?", "use_agent": False, "use_rag": False}
    response = api.post("/chat", data=json.dumps(body), content_type="application/json")
    assert response.status_code >= HTTPStatus.BAD_REQUEST, response.content
    assert otel_flush()

    spans = otel_on.spans()
    root = next(span for span, _ in spans if span.name == "invoke_agent devassist")
    (answer,) = json.loads(attributes(root)["gen_ai.output.messages"])
    assert answer["parts"][0]["content"]  # what it wrote before the stream broke
    assert answer["finish_reason"] == "error"
    (chat,) = [span for span, _ in spans if span.name.startswith("chat")]
    assert chat.status.code == Status.STATUS_CODE_ERROR


def test_each_model_call_goes_out_with_the_messages_it_was_sent(
    otel_on, api, scripted, settings, guide
):
    """The prompts were rebuilt from the trace: no system prompt, no earlier turns, and a
    documentation answer showed the question, not the passages the model was given."""
    settings.CHAT_TITLES = "heuristic"
    settings.OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT = "span_only"
    scripted.script(["Hello.", "Set SANDBOX_MEMORY_MB.", "Each container gets 256 MB [1]."])
    conversation = None
    for message, use_rag in [
        ("Hi!", False),
        ("How do I change the memory?", False),
        ("How much memory does a container get?", True),
    ]:
        body = {"message": message, "use_agent": False, "use_rag": use_rag}
        if conversation is not None:
            body["conversation_id"] = conversation
        response = api.post("/chat", data=json.dumps(body), content_type="application/json")
        assert response.status_code == HTTPStatus.OK, response.content
        conversation = response.json()["conversation_id"]
    assert otel_flush()

    chats = sorted(
        (span for span, _ in otel_on.spans() if span.name.startswith("chat")),
        key=lambda span: span.start_time_unix_nano,
    )
    exported = [json.loads(attributes(chat)["gen_ai.input.messages"]) for chat in chats]
    sent = [request["messages"] for request in scripted.requests]
    assert [[(m["role"], m["parts"][0]["content"]) for m in each] for each in exported] == [
        [(m["role"], m["content"]) for m in each] for each in sent
    ]
    # The second turn's call had the first turn before it; the documentation answer's, the
    # passages it answers from.
    assert [m["role"] for m in sent[1]] == ["system", "user", "assistant", "user"]
    assert "256 MB by default" in sent[2][-1]["content"]


def test_a_request_the_collector_refuses_is_logged_with_where_and_how_many(
    settings, receiver, scripted, user
):
    """The SDK's own line said "405, Method Not Allowed" and no more."""
    port = urlsplit(receiver.base_url).port
    settings.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT = (
        f"http://ops:secret@127.0.0.1:{port}/v1/traces/v1/traces?key=secret"
    )
    with structlog.testing.capture_logs() as logs:
        agent_run(user, scripted)
        otel_flush()

    (dropped,) = [entry for entry in logs if entry["event"] == "otel_export_dropped"]
    assert dropped["endpoint"] == f"http://127.0.0.1:{port}/v1/traces/v1/traces"
    assert (dropped["spans"], dropped["runs"]) == (4, 1)
    assert not receiver.exports


def test_a_failed_tool_call_says_what_failed_as_the_trace_page_does():
    """A run of code that exits with 1 has no error text: its span said only "The tool call
    failed."."""
    from opentelemetry.sdk.resources import Resource

    from agent.otel import Capture, run_spans

    run = AgentRun(id=uuid.uuid4(), trace_id=uuid.uuid4(), input="Run it.")
    now = timezone.now()
    action = Step(
        id=uuid.uuid4(),
        step_type="action",
        name="execute_code",
        started_at=now,
        data={"tool_name": "execute_code", "arguments": {"code": "exit(1)"}},
    )
    result = Step(
        id=uuid.uuid4(),
        parent_id=action.id,
        step_type="result",
        status="failed",
        started_at=now,
        data={"result": {"exit_code": 1}},
        tool_facts={"exit_code": 1},
    )

    spans = run_spans(
        run, [action, result], resource=Resource.create(), capture=Capture(), model={}
    )

    tool = next(span for span in spans if span.name == "execute_tool execute_code")
    assert tool.status.description == "exit code 1"


def test_a_content_setting_it_does_not_know_stops_the_start():
    """``on`` left the content out silently."""
    name = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
    refused = _otlp_setting(name, **{name: "on"})
    assert refused.returncode != 0
    assert f"{name} must be one of no_content, false" in refused.stderr
    for given, kept in [("SPAN_ONLY", "span_only"), ("", "no_content"), ("false", "false")]:
        assert _otlp_setting(name, **{name: given}).stdout.strip() == kept


def test_long_content_is_cut_to_the_standard_limit(otel_on, scripted, user, settings, monkeypatch):
    """Content goes out within the SDK's limit on attribute values, as its own spans do: a
    long run's transcript would otherwise grow every model call's span (a collector's gRPC
    receiver takes 4 MiB a request by default)."""
    monkeypatch.setenv("OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT", "40")
    settings.OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT = "true"
    agent_run(user, scripted, message="What is 6*7? " + "Think hard. " * 20)
    assert otel_flush()
    received = {span.name: span for span, _ in otel_on.spans()}
    chat = next(span for name, span in received.items() if name.startswith("chat"))
    assert len(attributes(chat)["gen_ai.input.messages"]) == 40
    prompt = {e.name: attributes(e) for e in chat.events}["gen_ai.content.prompt"]
    assert len(prompt["gen_ai.prompt"]) == 40
    tool = attributes(received["execute_tool execute_code"])
    assert len(tool["gen_ai.tool.call.result"]) == 40
    # Ids and names are short: they go out whole.
    assert attributes(chat)["gen_ai.request.model"] == "fake-model"


def test_langfuse_and_otlp_exports_work_side_by_side(otel_on, scripted, superuser, settings):
    langfuse_reset()
    with LangfuseReceiver() as langfuse:
        settings.LANGFUSE_PUBLIC_KEY = "pk-lf-otel-side-by-side"
        settings.LANGFUSE_SECRET_KEY = "sk-lf-test"
        settings.LANGFUSE_BASE_URL = langfuse.base_url
        try:
            run = agent_run(superuser, scripted)
            langfuse_wait_for_exports()
            assert otel_flush()
            assert len(langfuse.spans(run.langfuse_trace_id)) == 4
        finally:
            langfuse_reset()
    assert len(otel_on.spans()) == 4
    assert run.trace_id is not None
    # Two records of one run: Langfuse's trace id is derived from the run id, the OTLP one
    # is the DevAssist trace id.
    assert {span.trace_id for span, _ in otel_on.spans()} == {run.trace_id.bytes}


@pytest.mark.parametrize("protocol", ["http/protobuf", "grpc"])
def test_a_collector_that_is_down_fails_no_run(settings, scripted, user, monkeypatch, protocol):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "1")
    settings.OTEL_EXPORTER_OTLP_PROTOCOL = protocol
    settings.OTEL_EXPORTER_OTLP_ENDPOINT = f"http://127.0.0.1:{free_port()}"  # nothing listens
    for _ in range(2):
        run = agent_run(user, scripted)
        assert run.status == RunStatus.COMPLETED
    otel_flush(10_000)  # the exporter gives up; nothing raises


def test_a_collector_that_hangs_holds_up_no_run(settings, scripted, user):
    with OtlpReceiver(hold=True) as hanging:
        settings.OTEL_EXPORTER_OTLP_ENDPOINT = hanging.base_url
        agent_run(user, scripted)
        # The exporter's thread sends the first run and waits on the collector...
        flushing = threading.Thread(target=otel_flush, daemon=True)
        flushing.start()
        assert hanging.arrived.wait(30)
        # ...while the next run is served from start to end all the same.
        second = agent_run(user, scripted)
        assert second.status == RunStatus.COMPLETED
        assert not hanging.exports
        hanging.released.set()
        flushing.join(30)
        assert otel_flush()
        names = [span.name for span, _ in hanging.spans()]
    assert names.count("invoke_agent devassist") == 2


def test_a_run_that_finds_the_queue_full_is_left_out_whole(settings, scripted, user):
    """The SDK's queue drops its oldest span for each new one past its size, which tore the
    runs waiting in it apart, while ``otel_run_queued`` said every span was queued."""
    settings.OTEL_BSP_MAX_QUEUE_SIZE = 6  # room for one run of four spans, not two
    with OtlpReceiver(hold=True) as hanging, structlog.testing.capture_logs() as logs:
        settings.OTEL_EXPORTER_OTLP_ENDPOINT = hanging.base_url
        first = agent_run(user, scripted)
        flushing = threading.Thread(target=otel_flush, daemon=True)
        flushing.start()
        assert hanging.arrived.wait(30)  # the first run left the queue, and waits
        second = agent_run(user, scripted)  # queued
        third = agent_run(user, scripted)  # no room
        assert third.status == RunStatus.COMPLETED
        hanging.released.set()
        flushing.join(30)
        assert otel_flush()
        spans = [span for span, _ in hanging.spans()]

    (dropped,) = [entry for entry in logs if entry["event"] == "otel_run_dropped"]
    assert (dropped["run_id"], dropped["spans"], dropped["queue_size"]) == (str(third.id), 4, 6)
    queued = [entry["run_id"] for entry in logs if entry["event"] == "otel_run_queued"]
    assert queued == [str(first.id), str(second.id)]
    by_run: dict[bytes, int] = {}
    for span in spans:
        by_run[span.trace_id] = by_run.get(span.trace_id, 0) + 1
    assert by_run == {uuid.UUID(str(run.trace_id)).bytes: 4 for run in (first, second)}


def test_a_run_bigger_than_the_queue_says_so(otel_on, scripted, user, settings):
    settings.OTEL_BSP_MAX_QUEUE_SIZE = 3
    with structlog.testing.capture_logs() as logs:
        agent_run(user, scripted)
    (dropped,) = [entry for entry in logs if entry["event"] == "otel_run_dropped"]
    assert dropped["reason"] == (
        "the run has more spans than the export queue holds (OTEL_BSP_MAX_QUEUE_SIZE)"
    )
    assert otel_flush()
    assert not otel_on.exports


def test_a_queue_size_that_is_no_count_of_spans_stops_the_start():
    """The SDK refused it at the first export, in the log alone."""
    name = "OTEL_BSP_MAX_QUEUE_SIZE"
    for given, said in [("0", "must be at least 1, got 0"), ("lots", "must be an integer")]:
        refused = _otlp_setting(name, **{name: given})
        assert refused.returncode != 0
        assert f"{name} {said}" in refused.stderr
    assert _otlp_setting(name, **{name: "100000"}).stdout.strip() == "100000"
    assert _otlp_setting(name).stdout.strip() == "2048"
    refused = _otlp_setting(name, OTEL_BSP_MAX_EXPORT_BATCH_SIZE="-1")
    assert "OTEL_BSP_MAX_EXPORT_BATCH_SIZE must be at least 1, got -1" in refused.stderr


def test_a_batch_is_never_bigger_than_the_queue(settings, receiver):
    """The SDK refused every export when the queue was made smaller than its batch (512)."""
    from agent.otel import OtelConfig

    settings.OTEL_EXPORTER_OTLP_ENDPOINT = receiver.base_url
    settings.OTEL_BSP_MAX_QUEUE_SIZE = 100
    config = OtelConfig.current()
    assert config is not None
    assert (config.queue_size, config.batch_size) == (100, 100)
    settings.OTEL_BSP_MAX_QUEUE_SIZE, settings.OTEL_BSP_MAX_EXPORT_BATCH_SIZE = 2048, 64
    config = OtelConfig.current()
    assert config is not None
    assert (config.queue_size, config.batch_size) == (2048, 64)


def test_the_export_is_off_without_an_endpoint_or_when_disabled(settings, receiver):
    from agent.otel import OtelConfig

    assert OtelConfig.current() is None
    settings.OTEL_EXPORTER_OTLP_ENDPOINT = receiver.base_url + "/"
    config = OtelConfig.current()
    assert config is not None
    assert config.endpoint == receiver.base_url + "/v1/traces"
    settings.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT = "http://collector:4318/custom"
    assert OtelConfig.current().endpoint == "http://collector:4318/custom"  # type: ignore[union-attr]
    settings.OTEL_EXPORTER_OTLP_PROTOCOL = "grpc"
    assert OtelConfig.current().endpoint == "http://collector:4318/custom"  # type: ignore[union-attr]
    settings.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT = ""
    # gRPC names the service in the call: the endpoint is the collector's address as it is.
    settings.OTEL_EXPORTER_OTLP_ENDPOINT = "http://collector:4317"
    config = OtelConfig.current()
    assert config is not None
    assert (config.protocol, config.endpoint) == ("grpc", "http://collector:4317")
    settings.OTEL_SDK_DISABLED = True
    assert OtelConfig.current() is None


def _otlp_setting(
    setting: str = "OTEL_EXPORTER_OTLP_PROTOCOL", **env: str
) -> subprocess.CompletedProcess[str]:
    """What the settings make of ``setting`` given the OTLP variables ``env``, in a process of
    their own."""
    environ = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith("OTEL_EXPORTER_OTLP_")
    }
    return subprocess.run(
        [
            sys.executable,
            "-c",
            "import django; django.setup(); from django.conf import settings; "
            f"print(settings.{setting})",
        ],
        env={**environ, "DJANGO_SETTINGS_MODULE": "devassist.settings", **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_an_otlp_http_endpoint_without_its_scheme_stops_the_start():
    """``collector:4318`` would fail every export with an error in the log alone."""
    given = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}
    kept = _otlp_setting("OTEL_EXPORTER_OTLP_ENDPOINT", **given)
    assert kept.stdout.strip() == "http://collector:4318"
    for name in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        refused = _otlp_setting(name, **{name: "collector:4318"})
        assert refused.returncode != 0
        assert f"{name} must be an http:// or https:// URL, got 'collector:4318'" in (
            refused.stderr
        )
    # gRPC's exporter takes the collector's address as it is.
    grpc = _otlp_setting(
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        OTEL_EXPORTER_OTLP_PROTOCOL="grpc",
        OTEL_EXPORTER_OTLP_ENDPOINT="collector:4317",
    )
    assert grpc.stdout.strip() == "collector:4317"


def test_the_model_provider_s_attributes():
    assert model_attributes(
        {"provider": "openai", "model": "m", "base_url": "https://api.example.com/v1"}
    ) == {
        "gen_ai.provider.name": "openai",
        "gen_ai.system": "openai",
        "server.address": "api.example.com",
        "server.port": 443,
    }
    # The offline provider has no server.
    assert model_attributes({"provider": "offline", "model": "offline"}) == {
        "gen_ai.provider.name": "offline",
        "gen_ai.system": "offline",
    }


def test_the_protocol_comes_from_the_standard_variables():
    assert _otlp_setting().stdout.strip() == "http/protobuf"
    assert _otlp_setting(OTEL_EXPORTER_OTLP_PROTOCOL="GRPC").stdout.strip() == "grpc"
    # The traces' own variable comes first, as the specification has it.
    both = _otlp_setting(
        OTEL_EXPORTER_OTLP_PROTOCOL="grpc", OTEL_EXPORTER_OTLP_TRACES_PROTOCOL="http/protobuf"
    )
    assert both.stdout.strip() == "http/protobuf"
    # ...and only it: the general one may then name a protocol for other signals.
    traces_only = _otlp_setting(
        OTEL_EXPORTER_OTLP_PROTOCOL="http/json", OTEL_EXPORTER_OTLP_TRACES_PROTOCOL="grpc"
    )
    assert traces_only.stdout.strip() == "grpc"
    # The Python SDK has no OTLP/JSON exporter: the start stops, saying so, rather than
    # leaving the export off without a word.
    refused = _otlp_setting(OTEL_EXPORTER_OTLP_PROTOCOL="http/json")
    assert refused.returncode != 0
    assert (
        "OTEL_EXPORTER_OTLP_PROTOCOL must be one of http/protobuf, grpc, got 'http/json'"
        in refused.stderr
    )


def test_the_sampler_variables_choose_the_runs_that_go_out(otel_on, scripted, user, monkeypatch):
    monkeypatch.setenv("OTEL_TRACES_SAMPLER", "always_off")
    agent_run(user, scripted)
    assert otel_flush()
    assert not otel_on.spans()
    otel_reset()
    monkeypatch.setenv("OTEL_TRACES_SAMPLER", "traceidratio")
    monkeypatch.setenv("OTEL_TRACES_SAMPLER_ARG", "1.0")
    run = agent_run(user, scripted)
    assert otel_flush()
    assert run.trace_id is not None
    assert {span.trace_id for span, _ in otel_on.spans()} == {run.trace_id.bytes}


@pytest.mark.parametrize(
    ("env", "service"),
    [
        ({}, "devassist"),
        ({"OTEL_RESOURCE_ATTRIBUTES": "service.name=agents,deployment.environment=prod"}, "agents"),
        (
            {"OTEL_RESOURCE_ATTRIBUTES": "service.name=agents", "OTEL_SERVICE_NAME": "chat"},
            "chat",
        ),
    ],
)
def test_the_service_is_named_as_the_standard_variables_say(
    otel_on, scripted, user, monkeypatch, env, service
):
    for name in ("OTEL_RESOURCE_ATTRIBUTES", "OTEL_SERVICE_NAME"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    agent_run(user, scripted)
    assert otel_flush()
    resources = [resource for _, resource in otel_on.spans()]
    assert {resource["service.name"] for resource in resources} == {service}
    if "deployment.environment" in env.get("OTEL_RESOURCE_ATTRIBUTES", ""):
        assert resources[0]["deployment.environment"] == "prod"


def test_a_chat_span_is_named_after_the_model_asked_for():
    """Not after the model the server says answered (any text, of any length), as the GenAI
    conventions name it; without one asked for, after that one, cut."""
    from opentelemetry.sdk.resources import Resource

    from agent.otel import SPAN_NAME_CHARS, Capture, run_spans
    from traces.models import Step, StepType

    now = timezone.now()
    run = AgentRun(trace_id=uuid.uuid4(), model="fake-model", input="hi")
    said = "evil\n\x1b[31m" + "M" * 20_000
    step = Step(
        step_type=StepType.THOUGHT,
        data={"model": said, "output": "Hello."},
        started_at=now,
        finished_at=now,
    )

    def chat_name() -> str:
        spans = run_spans(run, [step], resource=Resource.create(), capture=Capture.of(""), model={})
        (chat,) = [span for span in spans if span.name.startswith("chat")]
        assert chat.attributes is not None
        assert chat.attributes["gen_ai.response.model"] == said
        return chat.name

    assert chat_name() == "chat fake-model"
    run.model = ""
    assert chat_name() == ("chat " + said)[: SPAN_NAME_CHARS - 1] + "…"


def test_a_run_whose_content_is_past_a_collector_s_message_size_keeps_the_others(
    settings, scripted, user, monkeypatch
):
    """Runs batched together go out in requests the collector takes: a run whose messages
    make a request too big for it fails alone, in a request of its own, and the others
    arrive (the request limit set below the collector's, as ``EXPORT_REQUEST_BYTES`` is
    below grpcio's 4 MiB)."""
    monkeypatch.setattr("agent.otel.EXPORT_REQUEST_BYTES", 48_000)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "2")  # the exporter's retries of those
    settings.OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT = "true"
    with GrpcOtlpReceiver(max_message_bytes=64_000) as receiver:
        settings.OTEL_EXPORTER_OTLP_PROTOCOL = "grpc"
        settings.OTEL_EXPORTER_OTLP_ENDPOINT = receiver.base_url
        small = agent_run(user, scripted)
        huge = agent_run(user, scripted, message="🦜" * 30_000)
        after = agent_run(user, scripted)
        otel_flush()
        received = receiver.spans()

    def names(run: AgentRun) -> list[str]:
        assert run.trace_id is not None
        return sorted(span.name for span, _ in received if span.trace_id == run.trace_id.bytes)

    whole = ["chat fake-model", "chat fake-model", "execute_tool execute_code"]
    assert names(small) == names(after) == [*whole, "invoke_agent devassist"]
    # Its spans that carry the message are past what the collector takes, each alone.
    assert names(huge) == ["execute_tool execute_code"]


def test_a_batch_goes_in_requests_within_the_size_and_in_order():
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
    from opentelemetry.sdk.trace import ReadableSpan
    from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
    from opentelemetry.trace import SpanContext

    from agent.otel import _QueueRoom, _RequestsWithin

    sent: list[list[str]] = []

    class Recorder(SpanExporter):
        def export(self, spans: Any) -> SpanExportResult:
            assert len(spans) == 1 or encode_spans(spans).ByteSize() <= 3_000
            sent.append([span.name for span in spans])
            return SpanExportResult.SUCCESS

    sizes = [100, 100, 5_000, 100, 1_000, 1_000, 1_000, 100]
    spans = [
        ReadableSpan(
            name=f"s{index}",
            context=SpanContext(1, index + 1, is_remote=False),
            attributes={"text": "x" * size},
        )
        for index, size in enumerate(sizes)
    ]
    assert (
        _RequestsWithin(
            Recorder(), 3_000, endpoint="http://collector", room=_QueueRoom(100)
        ).export(spans)
        == SpanExportResult.SUCCESS
    )
    assert [name for request in sent for name in request] == [span.name for span in spans]
    assert ["s2"] in sent
    assert len(sent) < len(spans)


def test_a_stopping_process_gives_a_hanging_collector_five_seconds(settings):
    """At exit the queued spans get ``EXIT_FLUSH_S`` to go out, however many batches wait
    on a collector that never answers (the SDK's own flush would wait out each one's
    timeout, 10 s a batch)."""
    script = (
        "import django; django.setup()\n"
        "from opentelemetry.sdk.trace import ReadableSpan\n"
        "from opentelemetry.trace import SpanContext, TraceFlags\n"
        "from agent.otel import SCOPE, OtelConfig, _pipeline_for\n"
        "pipeline = _pipeline_for(OtelConfig.current())\n"
        "for index in range(4):\n"
        "    context = SpanContext(1, index + 1, False, trace_flags=TraceFlags(1))\n"
        "    span = ReadableSpan(name='s', context=context, resource=pipeline.resource,\n"
        "                        instrumentation_scope=SCOPE, start_time=1, end_time=2)\n"
        "    pipeline.processor.on_end(span)\n"
        "print('queued', flush=True)\n"
    )
    with OtlpReceiver(hold=True) as hanging:
        environ = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "devassist.settings",
            "OTEL_EXPORTER_OTLP_ENDPOINT": hanging.base_url,
            "OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "1",
            "OTEL_BSP_SCHEDULE_DELAY": "60000",
        }
        started = time.monotonic()
        done = subprocess.run(
            [sys.executable, "-c", script],
            env=environ,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        took = time.monotonic() - started
        assert done.returncode == 0, done.stderr
        assert "queued" in done.stdout
        assert hanging.arrived.is_set()
    # The start-up (Django, the SDK) takes a second or two of it.
    assert took < 5 + 8
    assert "otel_exit_flush_timed_out" in done.stdout + done.stderr
