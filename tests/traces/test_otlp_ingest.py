"""OTLP/HTTP ingestion at /v1/traces through the ASGI application: spans made by the real
OpenTelemetry SDK, encoded by its OTLP encoder (protobuf) or as OTLP/JSON, become traces and
steps; out-of-order batches, re-sends, errors, token usage, the live watch."""

from __future__ import annotations

import asyncio
import json
import re
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from decimal import Decimal
from http import HTTPStatus
from typing import Any

import httpx
import pytest
from asgiref.sync import sync_to_async
from django.test import AsyncClient
from django.utils import timezone
from google.protobuf import json_format
from opentelemetry import trace as otel_trace
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.trace import SpanKind, Status, StatusCode

from devassist.asgi import application
from devassist.tokens import api_token_create
from tests.agent.test_live_events import QUIET_S
from tests.conftest import post_as
from tests.traces.otlp_clients import (
    JSON,
    PROTOBUF,
    export_request,
    gzipped,
    json_body,
    partial_success,
    post_otlp,
    protobuf_body,
    recording_provider,
    request_body,
    sdk_spans,
    watching,
)
from traces.models import Step, StepStatus, StepType, Trace, TraceStatus
from traces.otlp import span_step_id
from traces.selectors import trace_tree

pytestmark = pytest.mark.django_db(transaction=True)

GZIP = {"Content-Encoding": "gzip"}


async def token_for(user: Any) -> str:
    _, raw = await sync_to_async(api_token_create)(user=user, name="otlp")
    return raw


def openinference_agent(tracer: otel_trace.Tracer) -> None:
    """An OpenInference-instrumented agent: an AGENT span over an LLM call, a TOOL call that
    fails and a RETRIEVER."""
    with tracer.start_as_current_span(
        "agent",
        attributes={
            "openinference.span.kind": "AGENT",
            "input.value": "What is 2+2?",
            "output.value": "4",
            # The run's totals, as smolagents records them: its model calls' usage again.
            "llm.token_count.prompt": 10,
            "llm.token_count.completion": 5,
            "llm.token_count.total": 15,
        },
    ):
        with tracer.start_as_current_span(
            "ChatCompletion",
            kind=SpanKind.CLIENT,
            attributes={
                "openinference.span.kind": "LLM",
                "llm.model_name": "gpt-4o-mini",
                "llm.token_count.prompt": 10,
                "llm.token_count.completion": 5,
                "llm.token_count.total": 15,
                "input.value": '{"messages": [{"role": "user", "content": "2+2"}]}',
                "input.mime_type": "application/json",
                "output.value": "call the calculator",
                # The same messages flattened, as OpenInference writes them too.
                "llm.input_messages.0.message.role": "user",
                "llm.input_messages.0.message.content": "2+2",
                "llm.output_messages.0.message.role": "assistant",
                "llm.output_messages.0.message.tool_calls.0.tool_call.function.name": "calculator",
            },
        ):
            pass
        with tracer.start_as_current_span(
            "calculator",
            attributes={
                "openinference.span.kind": "TOOL",
                "tool.name": "calculator",
                "tool.parameters": '{"type": "object", "properties": {"expression": {}}}',
                "input.value": '{"expression": "2+2"}',
                "input.mime_type": "application/json",
                "output.value": "4",
            },
        ) as tool:
            tool.add_event("retry", {"attempt": 2})
            tool.set_status(Status(StatusCode.ERROR, "the calculator timed out"))
        with tracer.start_as_current_span(
            "retrieve",
            attributes={
                "openinference.span.kind": "RETRIEVER",
                "input.value": "addition",
                "retrieval.documents.0.document.id": "math.md#1",
                "retrieval.documents.0.document.content": "2+2 is 4.",
                "retrieval.documents.0.document.score": 0.9,
                "retrieval.documents.0.document.metadata": '{"source": "math.md"}',
                "retrieval.documents.1.document.id": "math.md#2",
                "retrieval.documents.1.document.score": 0.4,
            },
        ):
            pass


def genai_agent(tracer: otel_trace.Tracer) -> None:
    """An agent instrumented after the OTel GenAI semantic conventions."""
    with tracer.start_as_current_span(
        "invoke_agent weather",
        attributes={"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "weather"},
    ):
        with tracer.start_as_current_span(
            "chat gpt-4o",
            kind=SpanKind.CLIENT,
            attributes={
                "gen_ai.operation.name": "chat",
                "gen_ai.request.model": "gpt-4o",
                "gen_ai.usage.input_tokens": 30,
                "gen_ai.usage.output_tokens": 12,
                "gen_ai.usage.cost": 0.0021,
                "gen_ai.input.messages": json.dumps(
                    [{"role": "user", "parts": [{"type": "text", "content": "Paris?"}]}]
                ),
                "gen_ai.system_instructions": json.dumps([{"type": "text", "content": "Brief."}]),
                "gen_ai.output.messages": json.dumps(
                    [
                        {
                            "role": "assistant",
                            "parts": [{"type": "text", "content": "Rain."}],
                            "finish_reason": "stop",
                        }
                    ]
                ),
            },
        ) as chat:
            chat.add_event("gen_ai.content.prompt", {"gen_ai.prompt": "Weather in Paris?"})
        with tracer.start_as_current_span(
            "execute_tool get_weather",
            attributes={"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "get_weather"},
        ) as tool:
            try:
                raise TimeoutError("weather service down")
            except TimeoutError as exc:
                tool.record_exception(exc)
                tool.set_status(Status(StatusCode.ERROR))


def openllmetry_agent(tracer: otel_trace.Tracer) -> None:
    """An agent instrumented by OpenLLMetry (Traceloop's decorators and instrumentations):
    entity inputs and outputs as JSON text, tools named by ``traceloop.entity.name``."""
    with tracer.start_as_current_span(
        "answer.workflow",
        attributes={
            "traceloop.span.kind": "workflow",
            "traceloop.entity.name": "answer",
            "traceloop.entity.input": '{"args": ["Weather in Paris?"], "kwargs": {}}',
            "traceloop.entity.output": '"Rainy, 14 C"',
        },
    ):
        with tracer.start_as_current_span(
            "plan.task",
            attributes={"traceloop.span.kind": "task", "traceloop.entity.name": "plan"},
        ):
            with tracer.start_as_current_span(
                "openai.chat",
                kind=SpanKind.CLIENT,
                attributes={
                    "llm.request.type": "chat",
                    "gen_ai.system": "openai",
                    "gen_ai.request.model": "gpt-4o-mini",
                    "gen_ai.usage.prompt_tokens": 20,
                    "gen_ai.usage.completion_tokens": 7,
                    "llm.usage.total_tokens": 27,
                    # OpenLLMetry flattens the messages into one attribute per field.
                    "gen_ai.prompt.0.role": "system",
                    "gen_ai.prompt.0.content": "You plan.",
                    "gen_ai.prompt.1.role": "user",
                    "gen_ai.prompt.1.content": "Weather in Paris?",
                    "gen_ai.completion.0.role": "assistant",
                    "gen_ai.completion.0.finish_reason": "tool_calls",
                    "gen_ai.completion.0.tool_calls.0.name": "get_weather",
                    "gen_ai.completion.0.tool_calls.0.arguments": '{"city": "Paris"}',
                    "llm.request.functions.0.name": "get_weather",
                    "llm.request.functions.0.parameters": '{"type": "object"}',
                },
            ):
                pass
            with tracer.start_as_current_span(
                "openai.embeddings",
                kind=SpanKind.CLIENT,
                attributes={"llm.request.type": "embedding", "gen_ai.usage.prompt_tokens": 4},
            ):
                pass
        with tracer.start_as_current_span(
            "get_weather.tool",
            attributes={
                "traceloop.span.kind": "tool",
                "traceloop.entity.name": "get_weather",
                "traceloop.entity.input": '{"args": [], "kwargs": {"city": "Paris"}}',
                "traceloop.entity.output": '{"sky": "rain", "celsius": 14}',
            },
        ):
            pass


def vercel_ai_agent(tracer: otel_trace.Tracer) -> None:
    """A ``generateText`` call of the Vercel AI SDK with telemetry on: the call, its two model
    calls (``doGenerate``) and the tool call between them, its prompts, responses and tool
    calls as JSON text, its usage on the call too (the sum of its model calls')."""
    with tracer.start_as_current_span(
        "ai.generateText",
        attributes={
            "ai.operationId": "ai.generateText",
            "operation.name": "ai.generateText weather",
            "ai.model.id": "gpt-4o",
            "ai.prompt": '{"prompt":"Weather in Paris?"}',
            "ai.response.text": "Rain all day.",
            "ai.usage.inputTokens": 30,
            "ai.usage.outputTokens": 9,
        },
    ):
        with tracer.start_as_current_span(
            "ai.generateText.doGenerate",
            attributes={
                "ai.operationId": "ai.generateText.doGenerate",
                "ai.model.id": "gpt-4o",
                "gen_ai.system": "openai.chat",
                "gen_ai.request.model": "gpt-4o",
                "ai.prompt.messages": (
                    '[{"role":"user","content":[{"type":"text","text":"Weather in Paris?"}]}]'
                ),
                "ai.response.toolCalls": (
                    '[{"toolCallId":"call-1","toolName":"getWeather","input":"{\\"city\\":'
                    '\\"Paris\\"}"}]'
                ),
                "ai.usage.inputTokens": 20,
                "ai.usage.outputTokens": 5,
            },
        ):
            pass
        with tracer.start_as_current_span(
            "ai.toolCall",
            attributes={
                "ai.operationId": "ai.toolCall",
                "ai.toolCall.name": "getWeather",
                "ai.toolCall.id": "call-1",
                "ai.toolCall.input": '{"city":"Paris"}',
                "ai.toolCall.output": '{"sky":"rain"}',
            },
        ):
            pass
        with tracer.start_as_current_span(
            "ai.generateText.doGenerate",
            attributes={
                "ai.operationId": "ai.generateText.doGenerate",
                "ai.model.id": "gpt-4o",
                "ai.response.text": "Rain all day.",
                "ai.usage.promptTokens": 10,
                "ai.usage.completionTokens": 4,
            },
        ):
            pass


def trace_of(spans: list[Any]) -> uuid.UUID:
    return uuid.UUID(int=spans[0].context.trace_id)


def step_of(span: Any) -> uuid.UUID:
    return span_step_id(
        span.context.trace_id.to_bytes(16, "big"), span.context.span_id.to_bytes(8, "big")
    )


@sync_to_async
def stored(trace_id: uuid.UUID) -> tuple[Trace, dict[str, Step], list[dict[str, Any]]]:
    trace = Trace.objects.select_related("user").get(pk=trace_id)
    steps = {s.name: s for s in Step.objects.filter(trace=trace)}
    return trace, steps, trace_tree(trace=trace)


@pytest.mark.parametrize("encoding", [PROTOBUF, JSON])
async def test_an_openinference_trace_becomes_a_tree_of_steps(user, encoding):
    spans = sdk_spans(openinference_agent, service="calc-agent")
    body = protobuf_body(spans) if encoding == PROTOBUF else json_body(spans)
    response = await post_otlp(body, token=await token_for(user), content_type=encoding)
    assert response.status_code == HTTPStatus.OK, response.content
    assert response.headers["content-type"] == encoding
    assert partial_success(response) == (0, "")

    trace, steps, tree = await stored(trace_of(spans))
    assert trace.user_id == user.id
    assert trace.agent_type == "calc-agent"
    assert trace.status == TraceStatus.COMPLETED  # the root span ended without an error
    assert trace.task == "What is 2+2?"
    assert trace.metadata["otel"]["trace_id"] == trace_of(spans).hex
    assert (trace.total_steps, trace.root_count, trace.total_tokens, trace.error_count) == (
        4,
        1,
        15,
        1,
    )
    (root,) = tree
    assert root["name"] == "agent"
    assert root["step_type"] == StepType.GOAL
    # The agent's usage restates its model call's: each token counted once, on the call.
    assert steps["agent"].tokens == 0
    assert steps["agent"].data["usage"]["total_tokens"] == 15
    assert [c["name"] for c in root["children"]] == ["ChatCompletion", "calculator", "retrieve"]
    assert [c["step_type"] for c in root["children"]] == ["thought", "action", "memory_read"]
    assert root["subtree_error_count"] == 1
    assert root["subtree_tokens"] == 15

    llm = steps["ChatCompletion"]
    assert llm.id == step_of(next(s for s in spans if s.name == "ChatCompletion"))
    assert llm.parent_id == steps["agent"].id
    assert llm.tokens == 15
    assert llm.data["model"] == "gpt-4o-mini"
    assert llm.data["usage"] == {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
    assert llm.data["input"] == {"messages": [{"role": "user", "content": "2+2"}]}
    assert llm.data["output"] == "call the calculator"
    assert llm.data["input_messages"] == [{"role": "user", "content": "2+2"}]
    assert llm.data["output_messages"] == [
        {
            "role": "assistant",
            "tool_calls": [{"function": {"name": "calculator"}}],
        }
    ]
    assert not [k for k in llm.data["attributes"] if k.startswith("llm.input_messages")]
    assert "input.value" not in llm.data["attributes"]
    assert llm.data["attributes"]["openinference.span.kind"] == "LLM"
    assert llm.data["otel_span"]["kind"] == "client"
    assert llm.duration_ms is not None

    tool = steps["calculator"]
    assert tool.status == StepStatus.FAILED
    assert tool.error == "the calculator timed out"
    assert tool.data["tool_name"] == "calculator"
    assert tool.data["arguments"] == {"expression": "2+2"}
    assert tool.data["result"] == "4"
    # The tool's parameters' definition is no call's arguments.
    assert tool.data["attributes"]["tool.parameters"].startswith('{"type": "object"')
    retrieve = steps["retrieve"]
    assert retrieve.data["input"] == "addition"
    assert retrieve.data["documents"] == [
        # Its metadata, JSON text, parsed.
        {
            "id": "math.md#1",
            "content": "2+2 is 4.",
            "score": 0.9,
            "metadata": {"source": "math.md"},
        },
        {"id": "math.md#2", "score": 0.4},
    ]
    assert retrieve.data["attributes"] == {"openinference.span.kind": "RETRIEVER"}
    assert tool.data["events"][0]["name"] == "retry"
    assert tool.data["events"][0]["attributes"] == {"attempt": 2}
    assert tool.started_at is not None
    assert tool.finished_at is not None


async def test_a_genai_trace_maps_operations_usage_cost_and_exceptions(user):
    spans = sdk_spans(genai_agent)
    response = await post_otlp(
        gzipped(protobuf_body(spans)),
        token=await token_for(user),
        headers={"Content-Encoding": "gzip"},
    )
    assert response.status_code == HTTPStatus.OK, response.content
    trace, steps, _ = await stored(trace_of(spans))
    assert steps["invoke_agent weather"].step_type == StepType.GOAL
    chat = steps["chat gpt-4o"]
    assert chat.step_type == StepType.THOUGHT
    assert chat.tokens == 42
    assert chat.cost == Decimal("0.00210000")
    assert chat.data["model"] == "gpt-4o"
    assert chat.data["events"][0]["attributes"] == {"gen_ai.prompt": "Weather in Paris?"}
    assert chat.data["input"][0]["parts"][0]["content"] == "Paris?"
    assert chat.data["output"][0]["finish_reason"] == "stop"
    assert "gen_ai.input.messages" not in chat.data["attributes"]
    # The system prompt the conventions keep apart from the messages, parsed.
    assert chat.data["system_instructions"] == [{"type": "text", "content": "Brief."}]
    assert "gen_ai.system_instructions" not in chat.data["attributes"]
    tool = steps["execute_tool get_weather"]
    assert tool.step_type == StepType.ACTION
    assert tool.data["tool_name"] == "get_weather"
    assert tool.status == StepStatus.FAILED
    assert tool.error == "TimeoutError: weather service down"
    assert (trace.total_tokens, trace.total_cost, trace.error_count) == (
        42,
        Decimal("0.00210000"),
        1,
    )


#: What Pydantic AI 2.78's instrumentation sent for an agent run with one tool call (recorded
#: with the OTel SDK's ``InMemorySpanExporter``; trimmed to what matters, the strings exact).
#: It writes its spans as Logfire's SDK does: structured values as JSON text, declared in
#: ``logfire.json_schema``.
PYDANTIC_AI_MESSAGES = (
    '[{"role":"system","parts":[{"type":"text","content":"Be brief."}]},'
    '{"role":"user","parts":[{"type":"text","content":"Weather in Paris?"}]},'
    '{"role":"assistant","parts":[{"type":"tool_call","id":"call_1","name":"get_weather",'
    '"arguments":"{\\"city\\": \\"Paris\\"}"}],"finish_reason":"tool_call"},'
    '{"role":"user","parts":[{"type":"tool_call_response","id":"call_1",'
    '"name":"get_weather","result":"rain in Paris"}]},'
    '{"role":"assistant","parts":[{"type":"text","content":"Rain."}],"finish_reason":"stop"}]'
)
PYDANTIC_AI_TOOLS = (
    '[{"type":"function","name":"get_weather","description":"The weather in a city.",'
    '"parameters":{"additionalProperties":false,"properties":{"city":{"type":"string"}},'
    '"required":["city"],"type":"object"}}]'
)


def pydantic_ai_agent(tracer: otel_trace.Tracer, *, final_result: str = "Rain.") -> None:
    with (
        tracer.start_as_current_span(
            "invoke_agent agent",
            attributes={
                "gen_ai.operation.name": "invoke_agent",
                "gen_ai.agent.name": "agent",
                "final_result": final_result,
                "gen_ai.aggregated_usage.input_tokens": 16,
                "gen_ai.aggregated_usage.output_tokens": 2,
                "pydantic_ai.all_messages": PYDANTIC_AI_MESSAGES,
                "metadata": '{"ticket": 7}',
                "logfire.json_schema": '{"type":"object","properties":{"pydantic_ai.all_messages":'
                '{"type":"array"},"metadata":{"type":"array"},"final_result":{"type":"object"}}}',
            },
        ),
        tracer.start_as_current_span(
            "chat gpt-4o",
            kind=SpanKind.CLIENT,
            attributes={
                "gen_ai.operation.name": "chat",
                "gen_ai.request.model": "gpt-4o",
                "model_request_parameters": '{"function_tools":[{"name":"get_weather"}],'
                '"allow_text_output":true}',
                "gen_ai.tool.definitions": PYDANTIC_AI_TOOLS,
                "gen_ai.input.messages": '[{"role":"user","parts":[{"type":"text",'
                '"content":"Weather in Paris?"}]}]',
                "logfire.json_schema": '{"type":"object","properties":{"gen_ai.input.messages":'
                '{"type":"array"},"gen_ai.output.messages":{"type":"array"},'
                '"model_request_parameters":{"type":"object"}}}',
                "gen_ai.usage.input_tokens": 6,
                "gen_ai.usage.output_tokens": 1,
            },
        ),
    ):
        pass


async def test_a_pydantic_ai_run_shows_its_conversation_answer_and_tools(user):
    """Pydantic AI's agent run has no input or output attributes: its conversation is
    ``pydantic_ai.all_messages`` (the step's ``messages``) and its answer ``final_result``
    (its ``output``); the attributes Logfire's ``logfire.json_schema`` declares JSON come
    parsed, and the tools offered to a model (``gen_ai.tool.definitions``) are its ``tools``.
    The run's aggregated usage restates its model calls': the trace counts each token once."""
    spans = sdk_spans(pydantic_ai_agent)
    response = await post_otlp(protobuf_body(spans), token=await token_for(user))
    assert response.status_code == HTTPStatus.OK, response.content
    trace, steps, _ = await stored(trace_of(spans))
    run = steps["invoke_agent agent"]
    assert run.data["output"] == "Rain."
    assert [m["role"] for m in run.data["messages"]] == [
        "system",
        "user",
        "assistant",
        "user",
        "assistant",
    ]
    assert run.data["messages"][3]["parts"][0]["result"] == "rain in Paris"
    assert run.data["attributes"]["metadata"] == {"ticket": 7}
    assert "pydantic_ai.all_messages" not in run.data["attributes"]
    assert "final_result" not in run.data["attributes"]
    chat = steps["chat gpt-4o"]
    assert chat.data["tools"] == json.loads(PYDANTIC_AI_TOOLS)
    assert chat.data["attributes"]["model_request_parameters"] == {
        "function_tools": [{"name": "get_weather"}],
        "allow_text_output": True,
    }
    assert "gen_ai.tool.definitions" not in chat.data["attributes"]
    assert (run.tokens, chat.tokens, trace.total_tokens) == (0, 7, 7)
    # Named after what its model was asked (the run itself records no input).
    assert trace.task == "Weather in Paris?"


@pytest.mark.parametrize(
    ("schema", "value", "kept"),
    [
        # A plain answer under a declared object: not JSON, kept as it came.
        ('{"properties": {"final_result": {"type": "object"}}}', "Rain.", "Rain."),
        # JSON text of a number or a string is the answer as it came, not a parsed scalar.
        ('{"properties": {"final_result": {"type": "object"}}}', "42", "42"),
        ('{"properties": {"final_result": {"type": "object"}}}', '"quoted"', '"quoted"'),
        # An attribute the schema does not declare structured stays text.
        ('{"properties": {"final_result": {}}}', '{"a": 1}', '{"a": 1}'),
        # A schema that is not one (not JSON, no properties, properties not an object).
        ("not json", '{"a": 1}', '{"a": 1}'),
        ('{"type": "object"}', '{"a": 1}', '{"a": 1}'),
        ('{"properties": ["final_result"]}', '{"a": 1}', '{"a": 1}'),
        ('{"properties": {"final_result": "object"}}', '{"a": 1}', '{"a": 1}'),
        # Declared and JSON: parsed.
        ('{"properties": {"final_result": {"type": "object"}}}', '{"a": 1}', {"a": 1}),
    ],
)
async def test_only_what_logfire_s_schema_declares_json_is_parsed(user, schema, value, kept):
    def agent(tracer: otel_trace.Tracer) -> None:
        with tracer.start_as_current_span(
            "agent run",
            attributes={
                "gen_ai.operation.name": "invoke_agent",
                "final_result": value,
                "logfire.json_schema": schema,
            },
        ):
            pass

    spans = sdk_spans(agent)
    response = await post_otlp(protobuf_body(spans), token=await token_for(user))
    assert response.status_code == HTTPStatus.OK, response.content
    _, steps, _ = await stored(trace_of(spans))
    assert steps["agent run"].data["output"] == kept


async def test_an_openllmetry_trace_maps_entities_tools_and_usage(user):
    spans = sdk_spans(openllmetry_agent)
    response = await post_otlp(json_body(spans), token=await token_for(user), content_type=JSON)
    assert response.status_code == HTTPStatus.OK, response.content

    trace, steps, tree = await stored(trace_of(spans))
    assert trace.status == TraceStatus.COMPLETED
    assert trace.task == "Weather in Paris?"  # the workflow's one argument
    (root,) = tree
    assert (root["name"], root["step_type"]) == ("answer.workflow", StepType.GOAL)
    assert [(c["name"], c["step_type"]) for c in root["children"]] == [
        ("plan.task", StepType.THOUGHT),
        ("get_weather.tool", StepType.ACTION),
    ]
    plan = root["children"][0]
    assert [(c["name"], c["step_type"]) for c in plan["children"]] == [
        ("openai.chat", StepType.THOUGHT),
        ("openai.embeddings", StepType.MEMORY_READ),
    ]
    workflow = steps["answer.workflow"]
    assert workflow.data["input"] == {"args": ["Weather in Paris?"], "kwargs": {}}
    assert workflow.data["output"] == "Rainy, 14 C"
    chat = steps["openai.chat"]
    assert chat.tokens == 27
    assert chat.data["model"] == "gpt-4o-mini"
    assert chat.data["usage"] == {"prompt_tokens": 20, "completion_tokens": 7, "total_tokens": 27}
    # The flattened messages put back together: the call's input and output.
    assert chat.data["input"] == [
        {"role": "system", "content": "You plan."},
        {"role": "user", "content": "Weather in Paris?"},
    ]
    assert chat.data["output"] == [
        {
            "role": "assistant",
            "finish_reason": "tool_calls",
            "tool_calls": [{"name": "get_weather", "arguments": '{"city": "Paris"}'}],
        }
    ]
    assert not [k for k in chat.data["attributes"] if k.startswith("gen_ai.prompt")]
    assert chat.data["tools"] == [{"name": "get_weather", "parameters": {"type": "object"}}]
    assert steps["openai.embeddings"].tokens == 4
    tool = steps["get_weather.tool"]
    assert tool.data["tool_name"] == "get_weather"
    assert tool.data["arguments"] == {"city": "Paris"}
    assert tool.data["input"] == {"args": [], "kwargs": {"city": "Paris"}}
    assert tool.data["result"] == {"sky": "rain", "celsius": 14}
    assert "traceloop.entity.input" not in tool.data["attributes"]
    assert (trace.total_tokens, root["subtree_tokens"]) == (31, 31)


async def test_a_vercel_ai_sdk_call_maps_its_model_and_tool_calls_and_counts_tokens_once(user):
    spans = sdk_spans(vercel_ai_agent)
    response = await post_otlp(protobuf_body(spans), token=await token_for(user))
    assert response.status_code == HTTPStatus.OK

    trace, _, tree = await stored(trace_of(spans))
    assert trace.task == "Weather in Paris?"  # the AI SDK's prompt
    (root,) = tree
    assert (root["name"], root["step_type"]) == ("ai.generateText", StepType.GOAL)
    assert [(c["name"], c["step_type"]) for c in root["children"]] == [
        ("ai.generateText.doGenerate", StepType.THOUGHT),
        ("getWeather", StepType.ACTION),  # the tool's name: its span's says none
        ("ai.generateText.doGenerate", StepType.THOUGHT),
    ]
    # The call's usage restates its model calls': counted once, on them.
    assert [c["tokens"] for c in root["children"]] == [25, 0, 14]
    assert (root["tokens"], trace.total_tokens, root["subtree_tokens"]) == (0, 39, 39)
    steps = {s.id: s async for s in Step.objects.filter(trace=trace)}
    call = steps[step_of(spans[-1])]
    assert call.data["input"] == {"prompt": "Weather in Paris?"}
    assert call.data["output"] == "Rain all day."
    # The counts it gave: no total (a null there read as one).
    assert call.data["usage"] == {"prompt_tokens": 30, "completion_tokens": 9}
    first, tool, second = (steps[step_of(s)] for s in spans[:3])
    assert first.data["model"] == "gpt-4o"
    assert first.data["input"] == [
        {"role": "user", "content": [{"type": "text", "text": "Weather in Paris?"}]}
    ]
    assert first.data["output"][0]["toolName"] == "getWeather"
    assert (tool.data["tool_name"], tool.data["arguments"], tool.data["result"]) == (
        "getWeather",
        {"city": "Paris"},
        {"sky": "rain"},
    )
    assert second.data["output"] == "Rain all day."


async def test_flattened_messages_keep_their_order_and_lose_nothing(user):
    def chat(tracer: otel_trace.Tracer) -> None:
        attributes: dict[str, Any] = {
            f"gen_ai.prompt.{i}.content": f"message {i}" for i in range(12)
        }
        attributes["gen_ai.prompt.template"] = "not a message"  # not numbered: stays
        attributes["gen_ai.completion.0.content"] = "four"
        attributes["gen_ai.completion.0.content.0.text"] = "clashes with a value: stays"
        # The same clash the other way round.
        attributes["gen_ai.completion.1.content.0.text"] = "five"
        attributes["gen_ai.completion.1.content"] = "clashes with fields: stays"
        tracer.start_span(
            "openai.chat", attributes={"llm.request.type": "chat", **attributes}
        ).end()

    spans = sdk_spans(chat)
    assert (await post_otlp(protobuf_body(spans), token=await token_for(user))).status_code == 200
    _, steps, _ = await stored(trace_of(spans))
    data = steps["openai.chat"].data
    assert [m["content"] for m in data["input"]] == [f"message {i}" for i in range(12)]
    # An answer without a role is the assistant's (as LiteLLM sends a call of a tool).
    assert data["output"] == [
        {"content": "four", "role": "assistant"},
        {"content": [{"text": "five"}], "role": "assistant"},
    ]
    assert data["attributes"]["gen_ai.prompt.template"] == "not a message"
    assert data["attributes"]["gen_ai.completion.0.content.0.text"] == (
        "clashes with a value: stays"
    )
    assert data["attributes"]["gen_ai.completion.1.content"] == "clashes with fields: stays"


async def test_openinference_s_tool_calls_in_a_message_are_a_list_of_calls(user):
    """OpenInference writes a message's tool calls as ``tool_calls.<j>.tool_call.<field>``:
    each call is its fields, without the ``tool_call`` level."""
    prefix = "llm.output_messages.0.message"
    attributes = {
        "openinference.span.kind": "LLM",
        f"{prefix}.role": "assistant",
        f"{prefix}.tool_calls.0.tool_call.id": "call_1",
        f"{prefix}.tool_calls.0.tool_call.function.name": "get_weather",
        f"{prefix}.tool_calls.0.tool_call.function.arguments": '{"city": "Paris"}',
        f"{prefix}.tool_calls.1.tool_call.function.name": "get_time",
    }
    spans = sdk_spans(lambda tracer: tracer.start_span("llm", attributes=attributes).end())
    assert (await post_otlp(protobuf_body(spans), token=await token_for(user))).status_code == 200
    _, steps, _ = await stored(trace_of(spans))
    assert steps["llm"].data["output"] == [
        {
            "role": "assistant",
            "tool_calls": [
                {
                    "id": "call_1",
                    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                },
                {"function": {"name": "get_time"}},
            ],
        }
    ]


async def test_children_sent_before_their_parents_are_kept_then_attached(user):
    spans = sdk_spans(openinference_agent)  # in the order they ended: children first
    token = await token_for(user)
    root = spans[-1]
    for span in spans[:-1]:
        assert (await post_otlp(protobuf_body([span]), token=token)).status_code == HTTPStatus.OK
    trace, steps, tree = await stored(trace_of(spans))
    assert trace.status == TraceStatus.RUNNING  # until its root span ends
    assert trace.root_count == 3
    assert all(s.pending_parent_id == step_of(root) for s in steps.values())
    assert len(tree) == 3

    assert (await post_otlp(protobuf_body([root]), token=token)).status_code == HTTPStatus.OK
    trace, steps, tree = await stored(trace_of(spans))
    assert trace.status == TraceStatus.COMPLETED
    assert trace.root_count == 1
    (top,) = tree
    # Siblings keep the order they arrived in (the seqs they were given).
    assert [c["name"] for c in top["children"]] == ["ChatCompletion", "calculator", "retrieve"]
    assert top["subtree_steps"] == 4
    assert top["subtree_tokens"] == 15
    assert top["subtree_error_count"] == 1
    assert all(c["depth"] == 1 for c in top["children"])


async def test_steps_waiting_for_their_parent_are_listed_until_it_comes(user, other_user):
    """The children that came before their root wait for it at the top level: the API and the
    trace page list them with the span they wait for (as still to come while the trace runs,
    as never come once it ends), and none once the root arrives."""
    spans = sdk_spans(openinference_agent)
    token = await token_for(user)
    children, root = spans[:-1], spans[-1]
    assert (await post_otlp(protobuf_body(children), token=token)).status_code == HTTPStatus.OK
    owner, other = AsyncClient(), AsyncClient()
    await owner.aforce_login(user)
    await other.aforce_login(other_user)
    api = f"/api/traces/{trace_of(spans)}/waiting-steps"

    first = (await owner.get(api, {"limit": 2})).json()
    assert (first["total_steps"], first["next_offset"]) == (3, 2)
    assert [s["name"] for s in first["steps"]] == ["ChatCompletion", "calculator"]
    assert {s["parent_span_id"] for s in first["steps"]} == {
        root.context.span_id.to_bytes(8, "big").hex()
    }
    assert all(s["parent_id"] is None and s["depth"] == 0 for s in first["steps"])
    rest = (await owner.get(api, {"offset": 2})).json()
    assert ([s["name"] for s in rest["steps"]], rest["next_offset"]) == (["retrieve"], None)
    bad = await owner.get(api, {"limit": 0})
    assert bad.status_code == HTTPStatus.UNPROCESSABLE_ENTITY
    assert bad.json()["error"]["code"] == "validation_error"
    assert (await other.get(api)).status_code == HTTPStatus.NOT_FOUND
    page = (await owner.get(f"/traces/{trace_of(spans)}/")).content.decode()
    assert "3 steps wait at the top level for their parent spans, which have not arrived." in page

    ended = await post_as(user, f"/api/traces/{trace_of(spans)}/complete", {"status": "cancelled"})
    assert ended.status_code == HTTPStatus.OK
    page = (await owner.get(f"/traces/{trace_of(spans)}/")).content.decode()
    assert "3 steps stay at the top level: their parent spans never arrived." in page

    assert (await post_otlp(protobuf_body([root]), token=token)).status_code == HTTPStatus.OK
    assert (await owner.get(api)).json() == {"steps": [], "total_steps": 0, "next_offset": None}
    page = (await owner.get(f"/traces/{trace_of(spans)}/")).content.decode()
    assert '<div id="waiting-steps"></div>' in page


async def test_a_root_with_text_postgresql_cannot_hold_ends_its_trace(user):
    """The root span comes last, to a trace its children opened, with NUL in its input and
    in its service's name (what the trace's task and agent type are taken from): the trace
    takes both, U+FFFD in the NUL's place, and ends."""

    def agent(tracer: otel_trace.Tracer) -> None:
        with tracer.start_as_current_span("agent", attributes={"input.value": "a\x00b"}):
            tracer.start_span("tool").end()

    spans = sdk_spans(agent, service="svc\x00")
    token = await token_for(user)
    for span in spans:  # the child first: the root's request finds the trace stored
        assert (await post_otlp(protobuf_body([span]), token=token)).status_code == HTTPStatus.OK
    trace, steps, _ = await stored(trace_of(spans))
    assert (trace.status, trace.task, trace.agent_type) == (
        TraceStatus.COMPLETED,
        "a\ufffdb",
        "svc\ufffd",
    )
    assert sorted(steps) == ["agent", "tool"]


async def test_a_trace_of_two_services_names_each_span_s_service_and_its_entry_point(user):
    """A distributed trace: a web service's request span calls an agent service (the trace
    context goes with the call). The agent's spans come first, in a request of their own;
    the trace is named after the root's service once it arrives, and each step keeps its
    span's service."""
    (web_provider, web), (agent_provider, agent) = (
        recording_provider("web"),
        recording_provider("agent-worker"),
    )
    web_tracer, agent_tracer = web_provider.get_tracer("app"), agent_provider.get_tracer("app")
    # The agent service continues the trace it was called with (the current context).
    with (
        web_tracer.start_as_current_span(
            "POST /ask", kind=SpanKind.SERVER, attributes={"input.value": "Why is the build red?"}
        ),
        agent_tracer.start_as_current_span(
            "agent", attributes={"openinference.span.kind": "AGENT"}
        ),
        agent_tracer.start_as_current_span(
            "ChatCompletion", attributes={"openinference.span.kind": "LLM"}
        ),
    ):
        pass
    web_provider.shutdown()
    agent_provider.shutdown()
    token = await token_for(user)
    agent_spans, web_spans = list(agent.get_finished_spans()), list(web.get_finished_spans())

    assert (await post_otlp(protobuf_body(agent_spans), token=token)).status_code == 200
    trace, steps, _ = await stored(trace_of(agent_spans))
    assert (trace.status, trace.agent_type) == (TraceStatus.RUNNING, "agent-worker")

    assert (await post_otlp(protobuf_body(web_spans), token=token)).status_code == 200
    trace, steps, tree = await stored(trace_of(agent_spans))
    assert (trace.status, trace.agent_type) == (TraceStatus.COMPLETED, "web")
    assert trace.task == "Why is the build red?"
    assert {name: step.data["otel_span"]["service"] for name, step in steps.items()} == {
        "POST /ask": "web",
        "agent": "agent-worker",
        "ChatCompletion": "agent-worker",
    }
    (root,) = tree
    assert root["name"] == "POST /ask"
    assert root["subtree_steps"] == 3


def workflow_agent(tracer: otel_trace.Tracer) -> None:
    """A workflow span without an input around an agent whose model calls (OpenInference's
    flattened messages beside the request) were asked a question, then another."""
    with (
        tracer.start_as_current_span("workflow", attributes={"openinference.span.kind": "CHAIN"}),
        tracer.start_as_current_span("agent", attributes={"openinference.span.kind": "AGENT"}),
    ):
        for question in ("Why is the build red?", "And the deploy?"):
            with tracer.start_as_current_span(
                "ChatCompletion",
                attributes={
                    "openinference.span.kind": "LLM",
                    "input.value": json.dumps({"model": "gpt-4o"}),
                    "input.mime_type": "application/json",
                    "llm.input_messages.0.message.role": "system",
                    "llm.input_messages.0.message.content": "Be brief.",
                    "llm.input_messages.1.message.role": "user",
                    "llm.input_messages.1.message.content": question,
                },
            ):
                pass


async def test_a_root_without_input_is_named_after_the_first_question(user):
    """A root span without an input (an Agents SDK workflow's) names its trace after what the
    trace's first model call was asked, stored in an earlier request or in the root's."""
    spans = sdk_spans(workflow_agent)
    token = await token_for(user)
    first_call, rest = spans[:1], spans[1:]
    assert (await post_otlp(protobuf_body(first_call), token=token)).status_code == 200
    assert (await post_otlp(protobuf_body(rest), token=token)).status_code == 200
    assert (await Trace.objects.aget(pk=trace_of(spans))).task == "Why is the build red?"

    together = sdk_spans(workflow_agent)
    assert (await post_otlp(protobuf_body(together), token=token)).status_code == 200
    assert (await Trace.objects.aget(pk=trace_of(together))).task == "Why is the build red?"

    # No model call asked anything: the root's name.
    def nightly_job(tracer: otel_trace.Tracer) -> None:
        with tracer.start_as_current_span("nightly job"):
            pass

    quiet = sdk_spans(nightly_job)
    assert (await post_otlp(protobuf_body(quiet), token=token)).status_code == 200
    assert (await Trace.objects.aget(pk=trace_of(quiet))).task == "nightly job"


def content_events_chat(tracer: otel_trace.Tracer) -> None:
    """A model call whose prompt and completion are span events, as the GenAI conventions
    before 1.28 put them (DevAssist's own export with ``event_only``, plain SDK code)."""
    with tracer.start_as_current_span(
        "chat gpt-4o", attributes={"gen_ai.operation.name": "chat"}
    ) as chat:
        chat.add_event("gen_ai.content.prompt", {"gen_ai.prompt": "Weather in Paris?"})
        answer = [{"role": "assistant", "content": "Rain."}]
        chat.add_event("gen_ai.content.completion", {"gen_ai.completion": json.dumps(answer)})


async def test_a_model_call_s_content_events_are_its_input_and_output(user):
    spans = sdk_spans(content_events_chat)
    token = await token_for(user)
    assert (await post_otlp(protobuf_body(spans), token=token)).status_code == 200
    step = await Step.objects.aget(pk=step_of(spans[0]))
    assert step.data["input"] == "Weather in Paris?"
    assert step.data["output"] == [{"role": "assistant", "content": "Rain."}]
    # Stored once: the events keep their names and times, without the content.
    assert [(e["name"], e["attributes"]) for e in step.data["events"]] == [
        ("gen_ai.content.prompt", {}),
        ("gen_ai.content.completion", {}),
    ]
    assert "Weather in Paris?" in step.data_preview
    # A span's own input stands, and its event keeps the content (the GenAI agent's chat).
    genai = sdk_spans(genai_agent)
    assert (await post_otlp(protobuf_body(genai), token=token)).status_code == 200
    chat = await Step.objects.aget(pk=step_of(next(s for s in genai if s.name == "chat gpt-4o")))
    assert chat.data["input"][0]["parts"][0]["content"] == "Paris?"
    (event,) = chat.data["events"]
    assert event["attributes"] == {"gen_ai.prompt": "Weather in Paris?"}


@pytest.mark.parametrize(
    ("span_name", "attributes", "name"),
    [
        # smolagents' and LlamaIndex's tool spans are named after the tool's class or method.
        (
            "SimpleTool",
            {"openinference.span.kind": "TOOL", "tool.name": "get_weather"},
            "get_weather",
        ),
        (
            "FunctionTool.acall",
            {"openinference.span.kind": "TOOL", "tool.name": "get_weather"},
            "get_weather",
        ),
        # DSPy's: the tool's name with the method called, and no tool name attribute.
        ("get_weather.__call__", {"openinference.span.kind": "TOOL"}, "get_weather"),
        ("get_weather.__acall__", {"openinference.span.kind": "TOOL"}, "get_weather"),
        # A span named after its tool keeps its name.
        (
            "get_weather",
            {"openinference.span.kind": "TOOL", "tool.name": "get_weather"},
            "get_weather",
        ),
        (
            "execute_tool get_weather",
            {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "get_weather"},
            "execute_tool get_weather",
        ),
    ],
)
async def test_a_tool_call_is_named_after_its_tool(user, span_name, attributes, name):
    def run(tracer: otel_trace.Tracer) -> None:
        with (
            tracer.start_as_current_span("agent"),
            tracer.start_as_current_span(span_name, attributes=attributes),
        ):
            pass

    spans = sdk_spans(run)
    token = await token_for(user)
    assert (await post_otlp(protobuf_body(spans), token=token)).status_code == 200
    tool = await Step.objects.aget(pk=step_of(spans[0]))
    assert (tool.name, tool.step_type, tool.data["tool_name"]) == (
        name,
        StepType.ACTION,
        "get_weather",
    )
    # The span's own name stays findable where the step is named otherwise.
    assert tool.data["otel_span"].get("name") == (None if name == span_name else span_name)


async def test_a_trace_started_when_its_first_span_did_not_when_its_spans_arrived(user):
    """An agent's spans delivered two days late (a collector's queue after an outage, a
    backfill): the trace started when they ran, in the list's order and its date filters;
    spans stamped ahead of the server's clock start it now."""
    ran = time.time_ns() - 2 * 86_400 * 10**9

    def late(tracer: otel_trace.Tracer) -> None:
        with tracer.start_as_current_span("agent", start_time=ran, end_on_exit=False) as root:
            tracer.start_span("llm", start_time=ran + 10**9).end(end_time=ran + 3 * 10**9)
        root.end(end_time=ran + 4 * 10**9)

    def ahead(tracer: otel_trace.Tracer) -> None:
        tracer.start_span("skewed", start_time=time.time_ns() + 3_600 * 10**9).end()

    token = await token_for(user)
    for build in (late, ahead):
        assert (await post_otlp(protobuf_body(sdk_spans(build)), token=token)).status_code == 200
    skewed, old = [t async for t in Trace.objects.order_by("-created_at")]
    assert old.created_at == datetime.fromtimestamp(ran / 1e9, tz=UTC).replace(
        microsecond=ran // 1000 % 1_000_000
    )
    assert old.total_duration_ms == 4_000
    assert (timezone.now() - skewed.created_at).total_seconds() < 60


async def test_a_long_span_name_names_its_step_to_200_characters_and_stays_whole(user):
    """The step's name holds 200 characters of its span's (its column's size; a refusal's
    reason, which shows 100, had cut it to 100); the span's whole name stays in its data."""
    long_name = "step " + "n" * 300
    spans = sdk_spans(lambda tracer: tracer.start_span(long_name).end())
    token = await token_for(user)
    assert (await post_otlp(protobuf_body(spans), token=token)).status_code == 200
    stored = await Step.objects.aget(pk=step_of(spans[0]))
    assert stored.name == long_name[:200]
    assert stored.data["otel_span"]["name"] == long_name


async def test_an_embedding_call_keeps_its_model_and_its_texts_with_their_vectors(user):
    """OpenInference's embedding span (LlamaIndex's ``OpenAIEmbedding``): the model, and each
    text with its vector as one item, not a flat attribute per text and per vector."""

    def embed(tracer: otel_trace.Tracer) -> None:
        with tracer.start_as_current_span(
            "OpenAIEmbedding",
            attributes={
                "openinference.span.kind": "EMBEDDING",
                "embedding.model_name": "text-embedding-3-small",
                "embedding.embeddings.0.embedding.text": "rain in Paris",
                "embedding.embeddings.0.embedding.vector": [0.1, 0.2, 0.3],
                "embedding.embeddings.1.embedding.text": "sun in Rome",
                "embedding.embeddings.1.embedding.vector": [0.3, 0.2, 0.1],
            },
        ):
            pass

    spans = sdk_spans(embed)
    token = await token_for(user)
    assert (await post_otlp(protobuf_body(spans), token=token)).status_code == 200
    step = await Step.objects.aget(pk=step_of(spans[0]))
    assert step.step_type == StepType.MEMORY_READ
    assert step.data["model"] == "text-embedding-3-small"
    assert step.data["embeddings"] == [
        {"text": "rain in Paris", "vector": [0.1, 0.2, 0.3]},
        {"text": "sun in Rome", "vector": [0.3, 0.2, 0.1]},
    ]
    assert not [key for key in step.data["attributes"] if key.startswith("embedding.embeddings")]


@pytest.mark.parametrize(
    ("given", "arguments"),
    [
        # smolagents' tool input: JSON text of an object, without a JSON mime type; the
        # named arguments of a Python call.
        ('{"args": [], "kwargs": {"city": "Paris"}}', {"city": "Paris"}),
        ('{"city": "Paris"}', {"city": "Paris"}),
        # Text that is no object stays as it came.
        ("Paris", "Paris"),
        ("[1, 2]", "[1, 2]"),
        ('{"city": ', '{"city": '),
    ],
)
async def test_a_tool_s_input_text_that_is_an_object_is_its_arguments(user, given, arguments):
    def run(tracer: otel_trace.Tracer) -> None:
        with (
            tracer.start_as_current_span("agent"),
            tracer.start_as_current_span(
                "get_weather",
                attributes={"openinference.span.kind": "TOOL", "input.value": given},
            ),
        ):
            pass

    spans = sdk_spans(run)
    token = await token_for(user)
    assert (await post_otlp(protobuf_body(spans), token=token)).status_code == 200
    tool = await Step.objects.aget(pk=step_of(spans[0]))
    assert tool.data["arguments"] == arguments


def framework_agent(
    root_input: Any, mime_type: str | None = "application/json"
) -> Callable[[otel_trace.Tracer], None]:
    """An agent framework's run: a root span whose input is the framework's own structure
    (``root_input``, JSON text with ``mime_type``), over a model call asked a question."""
    attributes = {"openinference.span.kind": "CHAIN", "input.value": json.dumps(root_input)}
    if mime_type:
        attributes["input.mime_type"] = mime_type

    def run(tracer: otel_trace.Tracer) -> None:
        with (
            tracer.start_as_current_span("Workflow.run", attributes=attributes),
            tracer.start_as_current_span(
                "ChatCompletion",
                attributes={
                    "openinference.span.kind": "LLM",
                    "llm.input_messages.0.message.role": "user",
                    "llm.input_messages.0.message.content": "What does the model say?",
                },
            ),
        ):
            pass

    return run


@pytest.mark.parametrize(
    ("root_input", "task"),
    [
        # LangGraph's state: LangChain's own serialisation of the messages.
        (
            {
                "messages": [
                    {"type": "human", "data": {"content": "Weather in Paris?", "id": None}}
                ],
                "notes": "",
            },
            "Weather in Paris?",
        ),
        # smolagents' and AutoGen's run arguments.
        ({"task": "Weather in Paris?", "stream": False, "reset": True}, "Weather in Paris?"),
        # DSPy's and Haystack's, a level or two down.
        ({"input_args": {"question": "Weather in Paris?"}}, "Weather in Paris?"),
        (
            {"data": {"retriever": {"query": "Weather in Paris?"}, "prompt": {"x": 1}}},
            "Weather in Paris?",
        ),
        # A workflow's configuration asks nothing: the first model call's question.
        (
            {"init_state": {"is_running": False, "config": {"steps": {}}}},
            "What does the model say?",
        ),
        # Messages without their content (an instrumentation that does not capture it).
        ([{"role": "system"}, {"role": "user"}], "What does the model say?"),
    ],
)
@pytest.mark.parametrize("mime_type", ["application/json", None])
async def test_a_framework_s_structured_input_names_its_trace_by_what_it_asks(
    user, root_input, task, mime_type
):
    """With or without a JSON mime type (smolagents and AutoGen send none)."""
    spans = sdk_spans(framework_agent(root_input, mime_type))
    token = await token_for(user)
    assert (await post_otlp(protobuf_body(spans), token=token)).status_code == 200
    assert (await Trace.objects.aget(pk=trace_of(spans))).task == task


async def test_an_agent_at_work_is_named_after_its_first_question_until_its_root_comes(user):
    """While an agent works its root span has not ended, so it has not come: its trace is
    named after what its model calls were asked (it was "(no task)" for the whole run), and
    the root names it when it comes."""
    token = await token_for(user)
    spans = sdk_spans(openinference_agent)
    calls_first = [s for s in spans if s.name != "agent"]
    assert (await post_otlp(protobuf_body(calls_first), token=token)).status_code == 200
    trace = await Trace.objects.aget(pk=trace_of(spans))
    assert (trace.status, trace.task) == (TraceStatus.RUNNING, "2+2")
    root = [s for s in spans if s.name == "agent"]
    assert (await post_otlp(protobuf_body(root), token=token)).status_code == 200
    assert (await Trace.objects.aget(pk=trace.pk)).task == "What is 2+2?"  # the root's input

    # Named once: a later model call does not rename it.
    workflow = sdk_spans(workflow_agent)
    for part in ([workflow[0]], [workflow[1]]):
        assert (await post_otlp(protobuf_body(part), token=token)).status_code == 200
        assert (await Trace.objects.aget(pk=trace_of(workflow))).task == "Why is the build red?"


async def test_a_langgraph_agent_at_work_is_named_after_its_question_not_a_subgraph_s(user):
    """A LangGraph node's state holds the user's question; the model call of its subgraph,
    which starts after it, is asked to work on it: the trace is named after the question."""

    def langgraph(tracer: otel_trace.Tracer) -> None:
        state = {"messages": [{"type": "human", "data": {"content": "Weather in Paris?"}}]}
        with (
            tracer.start_as_current_span(
                "LangGraph", attributes={"openinference.span.kind": "CHAIN"}
            ),
            tracer.start_as_current_span(
                "researcher",
                attributes={"openinference.span.kind": "CHAIN", "input.value": json.dumps(state)},
            ),
        ):
            with tracer.start_as_current_span(
                "lookup", attributes={"openinference.span.kind": "TOOL", "tool.name": "lookup"}
            ):
                pass
            with tracer.start_as_current_span(
                "ChatOpenAI",
                attributes={
                    "openinference.span.kind": "LLM",
                    "llm.input_messages.0.message.role": "user",
                    "llm.input_messages.0.message.content": "Summarise: Weather in Paris?",
                },
            ):
                pass

    spans = sdk_spans(langgraph)
    token = await token_for(user)
    at_work = [s for s in spans if s.name != "LangGraph"]  # its root has not ended
    assert (await post_otlp(protobuf_body(at_work), token=token)).status_code == 200
    assert (await Trace.objects.aget(pk=trace_of(spans))).task == "Weather in Paris?"

    # A node's span that comes alone into a stored trace that has no name yet (its first
    # request held a tool call that asks nothing) names it too.
    again = sdk_spans(langgraph)
    tool, node = (next(s for s in again if s.name == name) for name in ("lookup", "researcher"))
    assert (await post_otlp(protobuf_body([tool]), token=token)).status_code == 200
    assert (await Trace.objects.aget(pk=trace_of(again))).task == ""
    assert (await post_otlp(protobuf_body([node]), token=token)).status_code == 200
    assert (await Trace.objects.aget(pk=trace_of(again))).task == "Weather in Paris?"


async def test_a_trace_whose_root_never_came_is_ended_by_its_owner(user):
    """An agent stopped before it ended its root span leaves its trace running; its owner
    ends it through the API, and spans that still come are stored as late ones."""
    spans = sdk_spans(openinference_agent)
    token = await token_for(user)
    children, root = spans[:-1], spans[-1]
    assert (await post_otlp(protobuf_body(children), token=token)).status_code == 200
    ended = await post_as(user, f"/api/traces/{trace_of(spans)}/complete", {"status": "cancelled"})
    assert ended.status_code == HTTPStatus.OK, ended.text
    assert ended.json()["status"] == TraceStatus.CANCELLED

    late = await post_otlp(protobuf_body([root]), token=token)
    assert late.status_code == HTTPStatus.OK
    trace, _, tree = await stored(trace_of(spans))
    assert (trace.status, trace.total_steps, trace.root_count) == (TraceStatus.CANCELLED, 4, 1)
    assert tree[0]["subtree_steps"] == 4


async def test_re_sent_spans_are_idempotent(user):
    spans = sdk_spans(genai_agent)
    token = await token_for(user)
    body = protobuf_body(spans)
    assert (await post_otlp(body, token=token)).status_code == HTTPStatus.OK
    before = await stored(trace_of(spans))
    again = await post_otlp(body, token=token)
    assert again.status_code == HTTPStatus.OK
    assert partial_success(again) == (0, "")
    after = await stored(trace_of(spans))
    assert after[0].total_steps == before[0].total_steps == 3
    assert after[0].last_seq == before[0].last_seq
    assert after[2] == before[2]


async def test_the_api_token_is_taken_as_x_api_key_too(user):
    spans = sdk_spans(genai_agent)
    response = await post_otlp(
        protobuf_body(spans), token=await token_for(user), header="x-api-key"
    )
    assert response.status_code == HTTPStatus.OK
    assert (await stored(trace_of(spans)))[0].user_id == user.id


async def test_the_live_watch_shows_spans_as_they_arrive(user, layer):
    """On both channel layers, and after the agent was quiet longer than every default
    timeout (a model call or a tool can take minutes) before its root span came."""
    spans = sdk_spans(openinference_agent)
    token = await token_for(user)
    first, rest, root = spans[0], spans[1:-1], spans[-1]
    assert (await post_otlp(protobuf_body([first]), token=token)).status_code == HTTPStatus.OK
    async with watching(trace_of(spans), token) as watcher:
        await post_otlp(protobuf_body(rest), token=token)
        for span in rest:
            message = await watcher.receive_json_from(timeout=10)
            assert message["event"] == "step_added"
            assert message["step"]["name"] == span.name
        await asyncio.sleep(QUIET_S)
        await post_otlp(protobuf_body([root]), token=token)
        added = await watcher.receive_json_from(timeout=10)
        assert added["event"] == "step_added"
        assert added["step"]["name"] == "agent"
        assert added["step"]["subtree_steps"] == 4
        moved = [await watcher.receive_json_from(timeout=10) for _ in spans[:-1]]
        assert {m["event"] for m in moved} == {"step_updated"}
        assert {m["step_id"] for m in moved} == {str(step_of(s)) for s in spans[:-1]}
        assert {m["updates"]["parent_id"] for m in moved} == {str(step_of(root))}
        done = await watcher.receive_json_from(timeout=10)
        assert done["event"] == "trace_completed"
        assert done["trace"]["status"] == "completed"


async def test_one_request_to_many_watched_traces_reaches_each_watcher(user, layer):
    """A request holding the spans of several stored traces (written together) tells each
    trace's watchers its own events, and no one else's, on both channel layers."""
    spans = sdk_spans(lambda tracer: service_requests(tracer, count=2))
    token = await token_for(user)
    chats = [span for span in spans if span.name == "chat"]
    assert (await post_otlp(protobuf_body(chats), token=token)).status_code == HTTPStatus.OK
    rest = [span for span in spans if span.name != "chat"]
    trace_ids = sorted({trace_of([span]) for span in spans})
    async with watching(trace_ids[0], token) as first, watching(trace_ids[1], token) as second:
        assert (await post_otlp(protobuf_body(rest), token=token)).status_code == HTTPStatus.OK
        for trace_id, watcher in zip(trace_ids, (first, second), strict=True):
            mine = {str(step_of(span)) for span in spans if trace_of([span]) == trace_id}
            events = [await watcher.receive_json_from(timeout=10)]
            while events[-1]["event"] != "trace_completed":
                events.append(await watcher.receive_json_from(timeout=10))
            assert [e["event"] for e in events] == [
                "step_added",
                "step_added",
                "step_updated",
                "trace_completed",
            ]
            assert {e["step"]["step_id"] for e in events[:2]} | {events[2]["step_id"]} == mine
            assert events[3]["trace"]["trace_id"] == str(trace_id)
            assert await watcher.receive_nothing(timeout=0.5)


# --- bad input ----------------------------------------------------------------------------------


def rpc_status(response: Any) -> tuple[int, str]:
    """``(code, message)`` of a ``google.rpc.Status`` answer, in either encoding."""
    from google.rpc import status_pb2

    if response.headers["content-type"].startswith(JSON):
        body = response.json()
        return body["code"], body["message"]
    status = status_pb2.Status()
    status.ParseFromString(response.content)
    return status.code, status.message


async def nothing_stored() -> bool:
    return not await Trace.objects.aexists()


async def test_no_token_or_a_wrong_one_is_401(user):
    body = protobuf_body(sdk_spans(genai_agent))
    for token in (None, "da_not-a-token"):
        response = await post_otlp(body, token=token)
        assert response.status_code == HTTPStatus.UNAUTHORIZED
        code, message = rpc_status(response)
        assert code == 16  # UNAUTHENTICATED
        assert "x-api-key" in message
    assert await nothing_stored()


@pytest.mark.parametrize(
    ("content_type", "headers"),
    [("text/plain", {}), (PROTOBUF, {"Content-Encoding": "br"})],
)
async def test_a_client_without_a_good_token_is_told_so_whatever_its_body(
    user, content_type, headers
):
    """401 before 415 (or 400, 413): what a client must fix first is its token, and a body
    says nothing to a client the server does not know."""
    for token in (None, "da_not-a-token"):
        response = await post_otlp(b"x", token=token, content_type=content_type, headers=headers)
        assert response.status_code == HTTPStatus.UNAUTHORIZED
        assert rpc_status(response)[0] == 16  # UNAUTHENTICATED
    assert await nothing_stored()


async def test_the_paths_with_a_trailing_slash_take_exports_too(user):
    """OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is used as written: ``.../v1/traces/`` is the same
    endpoint (APPEND_SLASH redirects no POST; the answer was Django's 404 page)."""
    token = await token_for(user)
    response = await post_otlp(
        protobuf_body(sdk_spans(genai_agent)), token=token, path="/v1/traces/"
    )
    assert response.status_code == HTTPStatus.OK
    assert await Trace.objects.acount() == 1
    metrics = await post_otlp(b"", token=token, path="/v1/metrics/")
    assert metrics.status_code == HTTPStatus.OK


@pytest.mark.parametrize(
    ("body", "content_type", "headers", "status", "words"),
    [
        (b"\xff\xff\xff\xff", PROTOBUF, {}, HTTPStatus.BAD_REQUEST, "Malformed protobuf"),
        (b'{"resourceSpans": [', JSON, {}, HTTPStatus.BAD_REQUEST, "Malformed JSON"),
        (b'{"resourceSpans": NaN}', JSON, {}, HTTPStatus.BAD_REQUEST, "NaN is not JSON"),
        (b'{"resourceSpans": "\xff"}', JSON, {}, HTTPStatus.BAD_REQUEST, "Malformed JSON"),
        (b'{"resourceSpans": 3}', JSON, {}, HTTPStatus.BAD_REQUEST, "Invalid OTLP JSON"),
        (b"[]", JSON, {}, HTTPStatus.BAD_REQUEST, "must be an object"),
        (b"x", "text/plain", {}, HTTPStatus.UNSUPPORTED_MEDIA_TYPE, "Content-Type"),
        (b"x", PROTOBUF, {"Content-Encoding": "br"}, HTTPStatus.UNSUPPORTED_MEDIA_TYPE, "br"),
        (b"not gzip", PROTOBUF, {"Content-Encoding": "gzip"}, HTTPStatus.BAD_REQUEST, "gzip"),
    ],
)
async def test_bodies_that_do_not_decode_are_refused_whole(
    user, body, content_type, headers, status, words
):
    response = await post_otlp(
        body, token=await token_for(user), content_type=content_type, headers=headers
    )
    assert response.status_code == status
    code, message = rpc_status(response)
    assert code == 3  # INVALID_ARGUMENT
    assert words in message
    assert await nothing_stored()
    # In the request's encoding; JSON, readable, for one it does not take.
    expected = content_type if content_type in (PROTOBUF, JSON) else JSON
    assert response.headers["content-type"] == expected


def without_the_storable_check(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The spans of a trace named with NUL, the trace store's storable check switched off:
    what PostgreSQL refuses reaches it, as a mapping that missed such a value would let it."""
    monkeypatch.setattr("traces.store.make_storable", lambda instance: None)
    return sdk_spans(lambda tracer: tracer.start_span("a\x00b").end())


async def test_what_the_database_refuses_is_400_not_unavailable(user, monkeypatch):
    """Not 503: an exporter retries that, and the same spans would fail again."""
    spans = without_the_storable_check(monkeypatch)
    response = await post_otlp(protobuf_body(spans), token=await token_for(user))
    assert response.status_code == HTTPStatus.BAD_REQUEST
    code, message = rpc_status(response)
    assert code == 3  # INVALID_ARGUMENT
    assert message.startswith("The database refused the spans: ")
    assert "NUL" in message
    assert await nothing_stored()


async def test_bodies_over_the_size_limit_are_413(user, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 50_000
    token = await token_for(user)
    big = protobuf_body(
        sdk_spans(lambda t: t.start_span("x", attributes={"blob": "a" * 60_000}).end())
    )
    plain = await post_otlp(big, token=token)
    assert plain.status_code == HTTPStatus.REQUEST_ENTITY_TOO_LARGE
    # A small gzip body that inflates past the limit (a "zip bomb") is refused as it inflates.
    bomb = await post_otlp(gzipped(big), token=token, headers={"Content-Encoding": "gzip"})
    assert bomb.status_code == HTTPStatus.REQUEST_ENTITY_TOO_LARGE
    assert rpc_status(bomb)[0] == 8  # RESOURCE_EXHAUSTED
    assert await nothing_stored()


async def test_more_spans_than_a_request_may_hold_is_413(user, settings):
    settings.OTLP_MAX_SPANS = 5

    def many(tracer: otel_trace.Tracer) -> None:
        for index in range(6):
            tracer.start_span(f"s{index}").end()

    response = await post_otlp(protobuf_body(sdk_spans(many)), token=await token_for(user))
    assert response.status_code == HTTPStatus.REQUEST_ENTITY_TOO_LARGE
    assert "6 spans" in rpc_status(response)[1]
    assert await nothing_stored()


def siblings(tracer: otel_trace.Tracer) -> None:
    """Three spans of one trace, under a parent that is never sent."""
    parent = otel_trace.set_span_in_context(tracer.start_span("never ended"))
    for index in range(3):
        tracer.start_span(f"s{index}", context=parent).end()


def damaged(spans: list[Any], damage: Any) -> bytes:
    """The protobuf body of ``spans`` with ``damage(span)`` applied to the last one's proto."""
    from tests.traces.otlp_clients import export_request

    request = export_request(spans)
    damage(request.resource_spans[0].scope_spans[0].spans[-1])
    return request.SerializeToString()


def _zero_trace_id(span: Any) -> None:
    span.trace_id = b"\x00" * 16


def _short_span_id(span: Any) -> None:
    span.span_id = b"\x01\x02\x03\x04\x05"


def _own_parent(span: Any) -> None:
    span.parent_span_id = span.span_id


def _far_future(span: Any) -> None:
    span.end_time_unix_nano = 2**63


def _no_start(span: Any) -> None:
    span.start_time_unix_nano = 0


def _many_attributes(span: Any) -> None:
    for index in range(100_000):
        attribute = span.attributes.add()
        attribute.key = f"k{index}"
        attribute.value.int_value = index


def _huge_value(span: Any) -> None:
    attribute = span.attributes.add()
    attribute.key = "prompt"
    attribute.value.string_value = "x" * 2_000_000


def _huge_name(span: Any) -> None:
    span.name = "n" * 2_000_000


def _huge_status_message(span: Any) -> None:
    span.status.code = 2
    span.status.message = "e" * 2_000_000


def _huge_event_name(span: Any) -> None:
    span.events.add(name="v" * 2_000_000, time_unix_nano=span.start_time_unix_nano)


@pytest.mark.parametrize(
    ("damage", "words"),
    [
        (_zero_trace_id, "trace id is all zeros"),
        (_short_span_id, "span id must be 8 bytes, got 5"),
        (_own_parent, "its own parent"),
        (_far_future, "in the future"),
        (_no_start, "no start time"),
        (_many_attributes, "100000 attributes"),
        (_huge_value, "2000000 characters"),
        (_huge_name, "a name of 2000000 characters"),
        (_huge_status_message, "a status message of 2000000 characters"),
        (_huge_event_name, "an event name of 2000000 characters"),
    ],
)
async def test_a_bad_span_is_rejected_and_the_others_are_stored(user, damage, words):
    spans = sdk_spans(siblings)
    response = await post_otlp(damaged(spans, damage), token=await token_for(user))
    assert response.status_code == HTTPStatus.OK, response.content
    rejected, message = partial_success(response)
    assert rejected == 1
    assert words in message
    assert len(message) < 400  # the span's name is cut in it
    _, steps, _ = await stored(trace_of(spans))
    assert sorted(steps) == ["s0", "s1"]


async def test_attributes_of_unexpected_types_keep_their_span(user):
    """Where the mapping looks for a string or a number (the kind of span, the model, the
    tool's name, tokens, cost), a span may hold a map or a list, and where it reads an item's
    number (``gen_ai.prompt.<i>.content``) a digit that ``int()`` cannot read: the span is
    stored, as an action, with those values among its attributes."""
    from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

    spans = sdk_spans(siblings)
    request = export_request(spans)
    odd = request.resource_spans[0].scope_spans[0].spans[0]
    keys = [
        "ai.operationId",
        "openinference.span.kind",
        "gen_ai.operation.name",
        "gen_ai.request.model",
        "tool.name",
        "llm.token_count.total",
        "llm.cost.total",
        "input.mime_type",
        "gen_ai.prompt.\u00b2.content",  # a digit to str.isdigit, not to int()
    ]
    for index, key in enumerate(keys):
        value = AnyValue()
        if index % 2:
            value.array_value.values.add(string_value="LLM")
        else:
            value.kvlist_value.values.add(key="k", value=AnyValue(int_value=1))
        odd.attributes.append(KeyValue(key=key, value=value))

    response = await post_otlp(request.SerializeToString(), token=await token_for(user))

    assert response.status_code == HTTPStatus.OK
    assert partial_success(response) == (0, "")
    _, steps, _ = await stored(trace_of(spans))
    step = steps[odd.name]
    assert (step.step_type, step.tokens, step.cost) == (StepType.ACTION, 0, Decimal(0))
    assert step.data["tool_name"] == odd.name
    assert step.data["attributes"]["ai.operationId"] == {"k": 1}
    assert step.data["attributes"]["gen_ai.prompt.\u00b2.content"] == {"k": 1}


@pytest.mark.parametrize("encoding", [PROTOBUF, JSON])
async def test_a_parent_id_of_all_zeros_makes_a_root(user, encoding):
    """OTel reads an all-zero span id as no span at all: a span naming it as its parent is a
    root (converters from Zipkin and Jaeger write their roots so)."""
    spans = sdk_spans(openinference_agent, service="calc-agent")
    request = export_request(spans)
    (root,) = [s for s in request.resource_spans[0].scope_spans[0].spans if not s.parent_span_id]
    root.parent_span_id = bytes(8)
    body = request_body(request, encoding)

    response = await post_otlp(body, token=await token_for(user), content_type=encoding)

    assert response.status_code == HTTPStatus.OK, response.content
    assert partial_success(response) == (0, "")
    trace, steps, tree = await stored(trace_of(spans))
    assert (trace.status, trace.root_count, trace.task) == (
        TraceStatus.COMPLETED,
        1,
        "What is 2+2?",
    )
    assert [node["name"] for node in tree] == ["agent"]
    assert len(tree[0]["children"]) == 3
    agent = steps["agent"]
    assert (agent.parent_id, agent.pending_parent_id, agent.step_type) == (None, None, "goal")
    assert "parent_span_id" not in agent.data["otel_span"]


async def test_a_request_whose_every_span_is_bad_is_400(user):
    spans = sdk_spans(lambda t: t.start_span("only").end())
    response = await post_otlp(damaged(spans, _no_start), token=await token_for(user))
    assert response.status_code == HTTPStatus.BAD_REQUEST
    assert "1 span(s) rejected" in rpc_status(response)[1]
    assert await nothing_stored()


async def test_json_ids_that_are_not_ids_reject_their_span(user):
    spans = sdk_spans(siblings)
    document = json.loads(json_body(spans))
    document["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["spanId"] = "not-an-id!"
    response = await post_otlp(
        json.dumps(document).encode(), token=await token_for(user), content_type=JSON
    )
    assert response.status_code == HTTPStatus.OK
    assert partial_success(response)[0] == 1


async def test_half_a_surrogate_pair_in_json_keeps_its_span(user):
    """JavaScript's OTLP/JSON exporter writes half of a surrogate pair as an escape when an
    attribute length limit cuts an emoji in two (``"ab\\ud83d"``): valid JSON that a
    protobuf string cannot hold. The spans are stored, U+FFFD in the half's place."""
    spans = sdk_spans(siblings)
    document = json.loads(json_body(spans))
    cut = document["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    cut["name"] = "s0 \ud83d"
    cut["attributes"] = [{"key": "note", "value": {"stringValue": "ab\ud83d"}}]
    body = json.dumps(document).encode()
    assert b'"ab\\ud83d"' in body

    response = await post_otlp(body, token=await token_for(user), content_type=JSON)

    assert response.status_code == HTTPStatus.OK
    assert partial_success(response) == (0, "")
    _, steps, _ = await stored(trace_of(spans))
    assert sorted(steps) == ["s0 \ufffd", "s1", "s2"]
    assert steps["s0 \ufffd"].data["attributes"] == {"note": "ab\ufffd"}


async def test_a_lone_surrogate_in_a_json_field_name_is_an_unknown_field(user):
    spans = sdk_spans(siblings)
    document = json.loads(json_body(spans))
    document["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["\ud800"] = 1
    document["\udfff"] = {}
    response = await post_otlp(
        json.dumps(document).encode(), token=await token_for(user), content_type=JSON
    )
    assert response.status_code == HTTPStatus.OK, response.content
    _, steps, _ = await stored(trace_of(spans))
    assert sorted(steps) == ["s0", "s1", "s2"]


async def test_json_text_nested_past_what_a_step_holds_stays_text(user):
    """JSON text attributes that DevAssist parses (an input whose mime type says JSON, a
    tool's arguments) nested 1,000 levels deep are kept as the text they came as; 50 levels
    deep they are parsed."""
    deep, fifty = "[" * 1000 + "]" * 1000, "[" * 50 + "]" * 50

    def tools(tracer: otel_trace.Tracer) -> None:
        with tracer.start_as_current_span("agent"):
            for name, text in (("deep", deep), ("fifty", fifty)):
                attributes = {
                    "openinference.span.kind": "TOOL",
                    "input.value": text,
                    "input.mime_type": "application/json",
                    "gen_ai.tool.call.arguments": text,
                }
                tracer.start_span(name, attributes=attributes).end()

    spans = sdk_spans(tools)
    response = await post_otlp(protobuf_body(spans), token=await token_for(user))
    assert response.status_code == HTTPStatus.OK, response.content
    _, steps, _ = await stored(trace_of(spans))
    assert (steps["deep"].data["arguments"], steps["deep"].data["input"]) == (deep, deep)
    parsed = json.loads(fifty)
    assert (steps["fifty"].data["arguments"], steps["fifty"].data["input"]) == (parsed, parsed)


async def test_a_flattened_key_of_too_many_parts_stays_an_attribute(user):
    key = "gen_ai.prompt.0." + "x." * 600 + "content"
    spans = sdk_spans(lambda tracer: tracer.start_span("chat", attributes={key: "hi"}).end())
    response = await post_otlp(protobuf_body(spans), token=await token_for(user))
    assert response.status_code == HTTPStatus.OK, response.content
    _, steps, _ = await stored(trace_of(spans))
    assert steps["chat"].data["attributes"][key] == "hi"


async def test_a_gzip_body_of_several_members_is_read_whole(user):
    """As ``cat a.gz b.gz`` makes it: every member is read (two halves of one request's
    protobuf); bytes after the last member that are not one are refused."""
    spans = sdk_spans(siblings)
    body = protobuf_body(spans)
    half = len(body) // 2
    members = gzipped(body[:half]) + gzipped(body[half:])
    token = await token_for(user)

    garbage = await post_otlp(members + b"garbage", token=token, headers=GZIP)
    assert garbage.status_code == HTTPStatus.BAD_REQUEST
    assert "Malformed gzip body" in rpc_status(garbage)[1]
    assert await nothing_stored()

    response = await post_otlp(members, token=token, headers=GZIP)
    assert response.status_code == HTTPStatus.OK, response.content
    _, steps, _ = await stored(trace_of(spans))
    assert sorted(steps) == ["s0", "s1", "s2"]


async def test_a_root_stored_running_then_sent_ended_ends_nothing(user):
    """A re-sent span changes nothing, the root's too: sent first without an end (a running
    step), then ended, its trace stays running with it rather than end over a running root."""
    spans = sdk_spans(genai_agent)
    request = export_request(spans)
    root = next(s for s in request.resource_spans[0].scope_spans[0].spans if not s.parent_span_id)
    ended = request.SerializeToString()
    root.end_time_unix_nano = 0
    token = await token_for(user)
    assert (await post_otlp(request.SerializeToString(), token=token)).status_code == 200
    assert (await post_otlp(ended, token=token)).status_code == 200
    trace, steps, _ = await stored(trace_of(spans))
    assert trace.status == TraceStatus.RUNNING
    assert steps[root.name].status == StepStatus.RUNNING
    assert trace.total_steps == 3


async def test_another_users_trace_is_refused_and_left_untouched(user, other_user):
    spans = sdk_spans(openinference_agent)
    mine = await post_otlp(protobuf_body(spans[:2]), token=await token_for(user))
    assert mine.status_code == HTTPStatus.OK
    before = await stored(trace_of(spans))

    intruder = await token_for(other_user)
    theirs = await post_otlp(protobuf_body(spans[2:]), token=intruder)
    assert theirs.status_code == HTTPStatus.FORBIDDEN
    assert rpc_status(theirs)[0] == 7  # PERMISSION_DENIED
    after = await stored(trace_of(spans))
    assert after[0].last_seq == before[0].last_seq
    assert after[2] == before[2]
    assert after[0].status == TraceStatus.RUNNING

    # With a trace of its own in the same request, that one is stored: partial success.
    own = sdk_spans(genai_agent)
    mixed = await post_otlp(protobuf_body([*spans[2:], *own]), token=intruder)
    assert mixed.status_code == HTTPStatus.OK
    rejected, message = partial_success(mixed)
    assert rejected == len(spans) - 2
    assert "another user" in message
    assert (await stored(trace_of(own)))[0].user_id == other_user.id


async def test_a_trace_recorded_another_way_takes_no_otlp_spans(user):
    spans = sdk_spans(genai_agent)
    await sync_to_async(Trace.objects.create)(id=trace_of(spans), user=user, task="API trace")
    response = await post_otlp(protobuf_body(spans), token=await token_for(user))
    assert response.status_code == HTTPStatus.BAD_REQUEST
    assert "not recorded over OTLP" in rpc_status(response)[1]
    assert not await Step.objects.aexists()


async def test_a_trace_the_store_refuses_is_stored_not_at_all(user):
    """Two spans whose costs together pass what the trace's total may hold: the trace's
    spans are all rejected, none of them half stored."""

    def costly(tracer: otel_trace.Tracer) -> None:
        with tracer.start_as_current_span("root", attributes={"gen_ai.usage.cost": 6e11}):
            tracer.start_span("child", attributes={"gen_ai.usage.cost": 6e11}).end()

    response = await post_otlp(protobuf_body(sdk_spans(costly)), token=await token_for(user))
    assert response.status_code == HTTPStatus.BAD_REQUEST
    assert "cost" in rpc_status(response)[1]
    assert await nothing_stored()


def service_requests(tracer: otel_trace.Tracer, *, count: int, costly: int | None = None) -> None:
    """A plain OTel-instrumented service: each of its ``count`` requests a trace of its own, a
    server span over a model call and a database call that fails; request ``costly`` costs
    more than a trace may hold (its two spans' costs together)."""
    for index in range(count):
        cost = 6e11 if index == costly else 0.001
        with tracer.start_as_current_span(
            f"POST /ask/{index}",
            kind=SpanKind.SERVER,
            attributes={"gen_ai.usage.cost": cost} if index == costly else {},
        ):
            with tracer.start_as_current_span(
                "chat",
                attributes={"gen_ai.operation.name": "chat", "gen_ai.usage.cost": cost},
            ):
                pass
            with tracer.start_as_current_span("SELECT answers") as query:
                query.set_status(Status(StatusCode.ERROR, "relation does not exist"))


async def test_a_request_of_many_new_traces_stores_each_whole_and_refuses_one_alone(user):
    """20 new traces in one request (opened together): each stored with its tree, totals
    and end; the one whose cost passes the limit refused whole, as partial success."""
    spans = sdk_spans(lambda tracer: service_requests(tracer, count=20, costly=7))
    response = await post_otlp(protobuf_body(spans), token=await token_for(user))
    assert response.status_code == HTTPStatus.OK
    rejected, message = partial_success(response)
    assert rejected == 3
    assert "cost" in message
    traces = [trace async for trace in Trace.objects.filter(user=user).order_by("task")]
    assert len(traces) == 19
    assert "POST /ask/7" not in {trace.task for trace in traces}
    for trace in traces:
        assert (trace.status, trace.total_steps, trace.root_count, trace.error_count) == (
            TraceStatus.COMPLETED,
            3,
            1,
            1,
        )
        assert trace.total_cost == Decimal("0.00100000")
        assert trace.completed_at is not None
        (root,) = await sync_to_async(trace_tree)(trace=trace)
        assert root["name"] == trace.task
        assert sorted(child["name"] for child in root["children"]) == ["SELECT answers", "chat"]
        # Its end is in its log, for a watcher that comes later.
        events = [e async for e in trace.events.values_list("event", flat=True)]
        assert events == ["trace_completed"]


def one_waits_on_the_other(first: Callable[[], Any], second: Callable[[], Any]) -> list[Any]:
    """Run ``first`` in a transaction of its own, in a thread, and once it has run, ``second``
    in another thread; ``first``'s transaction commits only once ``second`` waits on a lock
    (which this confirms in ``pg_stat_activity``). Returns what each returned."""
    import threading

    from django.db import connection, transaction

    done = threading.Event()
    results: dict[str, Any] = {}

    def lock_waits() -> int:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity "
                "WHERE wait_event_type = 'Lock' AND datname = current_database()"
            )
            return cursor.fetchone()[0]

    def run_first() -> None:
        try:
            with transaction.atomic():  # holds its rows until the second waits on them
                results["first"] = first()
                done.set()
                for _ in range(200):
                    if lock_waits():
                        break
                    threading.Event().wait(0.05)
                else:
                    results["error"] = "the second never waited for the first"
        finally:
            connection.close()

    def run_second() -> None:
        try:
            assert done.wait(10)
            results["second"] = second()
        finally:
            connection.close()

    threads = [threading.Thread(target=run_first), threading.Thread(target=run_second)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert "error" not in results
    return [results["first"], results["second"]]


def ingest_spans(user: Any, spans: list[Any]) -> Any:
    from traces.otlp import Limits, request_spans
    from traces.services import otlp_spans_ingest

    batch = request_spans(export_request(spans), limits=Limits.current())
    return otlp_spans_ingest(user=user, batch=batch)


def test_two_requests_opening_one_trace_at_once_store_all_its_spans(user):
    """Two requests with spans of a trace that is not stored: the second finds no trace,
    then waits to open it behind the first, which has opened it meanwhile; it looks again
    and adds its spans to that trace, and neither request loses any."""
    spans = sdk_spans(openinference_agent)
    first, second = one_waits_on_the_other(
        lambda: ingest_spans(user, spans[:2]), lambda: ingest_spans(user, spans[2:])
    )
    assert (first.accepted, second.accepted) == (2, len(spans) - 2)
    assert (first.rejected, second.rejected) == (0, 0)
    trace = Trace.objects.get()
    assert (trace.total_steps, trace.root_count, trace.status) == (
        len(spans),
        1,
        TraceStatus.COMPLETED,
    )
    assert trace.task == "What is 2+2?"


def test_spans_of_a_trace_deleted_meanwhile_open_it_again(user):
    """A trace deleted (by its owner or the admin) while a request of its spans runs: the
    request finds it stored, then waits to lock it behind the delete and misses it; it looks
    again and opens it with its spans."""
    spans = sdk_spans(openinference_agent)
    ingest_spans(user, spans[:2])
    trace_id = trace_of(spans)
    first, second = one_waits_on_the_other(
        lambda: Trace.objects.filter(pk=trace_id).delete(), lambda: ingest_spans(user, spans[2:])
    )
    assert first[0] > 0
    assert (second.accepted, second.rejected) == (len(spans) - 2, 0)
    trace = Trace.objects.get()
    assert (trace.total_steps, trace.status) == (len(spans) - 2, TraceStatus.COMPLETED)


def test_a_trace_whose_span_s_step_id_is_taken_is_refused_alone(user):
    """A span whose step id a step of another trace has (clients of the REST API choose
    their step ids): its trace is refused, as partial success, and the request's other new
    traces are stored."""
    from traces.store import OrmTraceStore, StepCreate

    spans = sdk_spans(lambda tracer: service_requests(tracer, count=3))
    (victim,) = [span for span in spans if span.name == "POST /ask/1"]
    OrmTraceStore().open_trace_sync(
        Trace(user=user, task="recorded through the API"),
        [StepCreate(step_type="action", id=step_of(victim))],
    )
    outcome = ingest_spans(user, spans)
    assert (outcome.accepted, outcome.rejected) == (6, 3)
    assert f"trace {trace_of([victim]).hex}: The spans cannot be stored" in outcome.message
    assert not Trace.objects.filter(pk=trace_of([victim])).exists()
    assert sorted(Trace.objects.values_list("task", "total_steps")) == [
        ("POST /ask/0", 3),
        ("POST /ask/2", 3),
        ("recorded through the API", 1),
    ]


async def test_get_is_405(user):
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=application), base_url="http://127.0.0.1"
    ) as client:
        response = await client.get("/v1/traces")
    assert response.status_code == HTTPStatus.METHOD_NOT_ALLOWED
    assert response.headers["allow"] == "POST"


@pytest.mark.parametrize("encoding", [PROTOBUF, JSON])
@pytest.mark.parametrize(
    ("path", "opening", "says"),
    [
        # An endpoint variable given the signal's path as well (the exporter adds it again).
        (
            "/v1/traces/v1/traces",
            "No OTLP endpoint at /v1/traces/v1/traces: ",
            "OTEL_EXPORTER_OTLP_ENDPOINT is the server's base URL",
        ),
    ],
)
async def test_other_paths_say_where_otlp_goes(user, encoding, path, opening, says):
    response = await post_otlp(
        b"{}" if encoding == JSON else b"",
        token=await token_for(user),
        content_type=encoding,
        path=path,
    )
    assert response.status_code == HTTPStatus.NOT_FOUND
    assert response.headers["content-type"].startswith(encoding)
    code, message = rpc_status(response)
    assert code == 12  # UNIMPLEMENTED
    assert message.startswith(opening)
    assert says in message


async def test_a_chain_of_spans_deeper_than_a_step_may_be_is_refused(user):
    """10,000 spans each the parent of the next, in one small request, took 105 s and 162 MB
    of paths to store: spans nested past ``MAX_STEP_DEPTH`` refuse their trace's write."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    from traces.store import MAX_STEP_DEPTH

    request = ExportTraceServiceRequest()
    spans = request.resource_spans.add().scope_spans.add().spans
    trace_id, now = uuid.uuid4().bytes, 1_700_000_000 * 10**9
    ids = [(index + 1).to_bytes(8, "big") for index in range(MAX_STEP_DEPTH + 2)]
    for index, span_id in enumerate(ids):
        span = spans.add(trace_id=trace_id, span_id=span_id, name=f"level {index}")
        span.start_time_unix_nano, span.end_time_unix_nano = now, now + 1000
        if index:
            span.parent_span_id = ids[index - 1]
    response = await post_otlp(request.SerializeToString(), token=await token_for(user))
    assert response.status_code == HTTPStatus.BAD_REQUEST
    assert f"at most {MAX_STEP_DEPTH} levels below the top" in rpc_status(response)[1]
    assert await nothing_stored()


async def test_the_timeline_of_spans_sent_children_first_is_in_the_tree_s_order(user):
    spans = sdk_spans(genai_agent)
    token = await token_for(user)
    for batch in (spans[:-1], spans[-1:]):  # the root ends, and is sent, last
        assert (await post_otlp(protobuf_body(batch), token=token)).status_code == 200
    browser = AsyncClient()
    await browser.aforce_login(user)
    page = await browser.get(f"/traces/{trace_of(spans)}/timeline/")
    assert page.status_code == HTTPStatus.OK
    labels = re.findall(r'class="wf-label"[^>]*>([^<]*)<', page.content.decode())
    assert [label.split()[-1] for label in labels] == ["weather", "gpt-4o", "get_weather"]


@pytest.mark.parametrize("encoding", [PROTOBUF, JSON])
async def test_metrics_are_taken_to_be_refused_saying_how_to_stop_sending_them(user, encoding):
    """Every data point refused as OTLP's partial success says, in the request's encoding; a
    body that does not decode is a 400, as for traces."""
    points = {"asInt": "1", "timeUnixNano": "1"}
    document = {
        "resourceMetrics": [
            {
                "scopeMetrics": [
                    {
                        "metrics": [
                            {"name": "calls", "sum": {"dataPoints": [points, points]}},
                            {"name": "queue", "gauge": {"dataPoints": [points]}},
                        ]
                    }
                ]
            }
        ]
    }
    request = ExportMetricsServiceRequest()
    json_format.ParseDict(document, request)
    body = json.dumps(document).encode() if encoding == JSON else request.SerializeToString()
    token = await token_for(user)
    response = await post_otlp(body, token=token, content_type=encoding, path="/v1/metrics")
    assert response.status_code == HTTPStatus.OK
    assert response.headers["content-type"].startswith(encoding)
    answer = ExportMetricsServiceResponse()
    if encoding == JSON:
        json_format.ParseDict(response.json(), answer)
    else:
        answer.ParseFromString(response.content)
    assert answer.partial_success.rejected_data_points == 3
    assert answer.partial_success.error_message.startswith("DevAssist keeps traces and logs")
    assert await Trace.objects.acount() == 0

    bad = await post_otlp(b"\xff\xff", token=token, content_type=PROTOBUF, path="/v1/metrics")
    assert bad.status_code == HTTPStatus.BAD_REQUEST


async def test_a_metrics_body_inflating_past_the_limit_is_told_to_send_no_metrics(user, settings):
    """Told to send none, not to send smaller batches: there is no batch DevAssist takes."""
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1000
    request = ExportMetricsServiceRequest()
    request.resource_metrics.add().scope_metrics.add().metrics.add(name="x" * 2000)
    response = await post_otlp(
        gzipped(request.SerializeToString()),
        token=await token_for(user),
        headers={"Content-Encoding": "gzip"},
        path="/v1/metrics",
    )
    assert response.status_code == HTTPStatus.REQUEST_ENTITY_TOO_LARGE
    _, message = rpc_status(response)
    assert "(decompressed): DevAssist keeps traces and logs, not metrics" in message
    assert "set OTEL_METRICS_EXPORTER=none" in message
