"""Agent frameworks that emit the GenAI conventions natively, as they really send them: where
their messages are (span events, log records with Google's or JSON-text bodies), whose usage
restates whose, and how their own operations and parts read.

The attributes, events and bodies below are what the frameworks sent, recorded with the OTel
SDK's in-memory exporters (trimmed to what matters, the strings exact):

- Strands Agents 1.65.0 (``StrandsTelemetry``; its default conventions, and
  ``OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai_latest_experimental``);
- the Microsoft Agent Framework 1.23.0 (``configure_otel_providers``);
- Google's ADK 2.15.0 with ``ADK_TELEMETRY_SCHEMA_VERSION_OPT_IN=1`` (its 1.x schema) and
  ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true``: its log records;
- Google's ADK 2.15.0 with ``ADK_TELEMETRY_SCHEMA_VERSION_OPT_IN=1``: its spans (``call_llm``,
  ``execute_tool`` with ``gcp.vertex.agent.*`` attributes, as ADK 1.x sends them);
- Semantic Kernel 1.45.0 (``SEMANTICKERNEL_EXPERIMENTAL_GENAI_ENABLE_OTEL_DIAGNOSTICS_SENSITIVE``):
  its log records, bodies of JSON text;
- Haystack 3.4.1's own tracer (on with OpenTelemetry set up in the process;
  ``HAYSTACK_CONTENT_TRACING_ENABLED=true``): an ``Agent`` with one tool;
- LiteLLM 1.110.2's own OTel callback (``litellm.callbacks = ["otel"]``): its cost."""

from __future__ import annotations

import json
from decimal import Decimal
from http import HTTPStatus
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.test import AsyncClient
from django.urls import reverse
from opentelemetry import trace as otel_trace
from opentelemetry._logs import Logger
from opentelemetry.trace import SpanKind

from tests.traces.otlp_clients import (
    logs_body,
    partial_success,
    post_otlp,
    protobuf_body,
    sdk_spans,
    sdk_spans_and_logs,
)
from tests.traces.test_otlp_ingest import token_for, trace_of
from traces import selectors
from traces.models import Step, StepType, Trace, TraceStatus

pytestmark = pytest.mark.django_db(transaction=True)

STRANDS = {"gen_ai.system": "strands-agents"}
STRANDS_USE = (
    '[{"toolUse": {"toolUseId": "call_1", "name": "get_weather", "input": {"city": "Paris"}}}]'
)
STRANDS_RESULT = (
    '[{"toolResult": {"toolUseId": "call_1", "status": "success", '
    '"content": [{"text": "rain in Paris"}]}}]'
)


def strands_usage(prompt: int, completion: int) -> dict[str, int]:
    return {
        "gen_ai.usage.prompt_tokens": prompt,
        "gen_ai.usage.input_tokens": prompt,
        "gen_ai.usage.completion_tokens": completion,
        "gen_ai.usage.output_tokens": completion,
        "gen_ai.usage.total_tokens": prompt + completion,
    }


def strands_agent(tracer: otel_trace.Tracer) -> None:
    """A Strands agent with one tool call, its default conventions: every message a span
    event (``gen_ai.user.message``, ``gen_ai.choice``...) whose attributes hold the content as
    JSON text of Amazon Bedrock's Converse blocks; the run's totals on its ``invoke_agent``
    span."""
    system = ("gen_ai.system.message", {"content": '[{"text": "Be brief."}]'})
    user = ("gen_ai.user.message", {"content": '[{"text": "Weather in Paris?"}]'})
    with tracer.start_as_current_span(
        "invoke_agent Weather agent",
        attributes={
            **STRANDS,
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": "Weather agent",
            "gen_ai.request.model": "gpt-4o",
            **strands_usage(31, 4),
        },
    ) as run:
        for name, attributes in (system, user):
            run.add_event(name, attributes)
        cycle = {**STRANDS, "gen_ai.operation.name": "execute_event_loop_cycle"}
        with tracer.start_as_current_span("execute_event_loop_cycle", attributes=cycle) as first:
            first.add_event(*user)
            with tracer.start_as_current_span(
                "chat",
                attributes={
                    **STRANDS,
                    "gen_ai.operation.name": "chat",
                    "gen_ai.request.model": "gpt-4o",
                    **strands_usage(14, 1),
                },
            ) as chat:
                chat.add_event(*system)
                chat.add_event(*user)
                chat.add_event(
                    "gen_ai.choice", {"finish_reason": "tool_use", "message": STRANDS_USE}
                )
            with tracer.start_as_current_span(
                "execute_tool get_weather",
                attributes={
                    **STRANDS,
                    "gen_ai.operation.name": "execute_tool",
                    "gen_ai.tool.name": "get_weather",
                    "gen_ai.tool.call.id": "call_1",
                    "gen_ai.tool.status": "success",
                },
            ) as tool:
                tool.add_event(
                    "gen_ai.tool.message",
                    {"role": "tool", "content": '{"city": "Paris"}', "id": "call_1"},
                )
                tool.add_event(
                    "gen_ai.choice", {"message": '[{"text": "rain in Paris"}]', "id": "call_1"}
                )
            first.add_event(
                "gen_ai.choice", {"message": STRANDS_USE, "tool.result": STRANDS_RESULT}
            )
        with (
            tracer.start_as_current_span("execute_event_loop_cycle", attributes=cycle),
            tracer.start_as_current_span(
                "chat",
                attributes={
                    **STRANDS,
                    "gen_ai.operation.name": "chat",
                    "gen_ai.request.model": "gpt-4o",
                    **strands_usage(17, 3),
                },
            ) as chat,
        ):
            chat.add_event(*system)
            chat.add_event(*user)
            chat.add_event("gen_ai.assistant.message", {"content": STRANDS_USE})
            chat.add_event("gen_ai.tool.message", {"content": STRANDS_RESULT})
            chat.add_event(
                "gen_ai.choice",
                {"finish_reason": "end_turn", "message": '[{"text": "Rain in Paris."}]'},
            )
        run.add_event("gen_ai.choice", {"message": "Rain in Paris.\n", "finish_reason": "end_turn"})


@sync_to_async
def steps_of(trace_id: Any) -> tuple[Trace, list[Step]]:
    trace = Trace.objects.get(pk=trace_id)
    return trace, list(Step.objects.filter(trace=trace).order_by("started_at", "seq"))


async def send(spans: list[Any], user: Any) -> tuple[Trace, list[Step]]:
    response = await post_otlp(protobuf_body(spans), token=await token_for(user))
    assert response.status_code == HTTPStatus.OK, response.content
    assert partial_success(response) == (0, "")
    return await steps_of(trace_of(spans))


async def test_a_strands_agent_s_messages_in_span_events_are_its_steps_input_and_output(user):
    trace, steps = await send(sdk_spans(strands_agent), user)
    run, first, chat, tool, _, answer = steps
    assert [s.step_type for s in steps] == [
        StepType.GOAL,
        StepType.THOUGHT,  # an operation of Strands' own, not a tool call
        StepType.THOUGHT,
        StepType.ACTION,
        StepType.THOUGHT,
        StepType.THOUGHT,
    ]
    # Named after what it was asked, from its own user message event.
    assert trace.task == "Weather in Paris?"
    # The model calls' messages, the Converse blocks parsed; the events keep their names.
    assert chat.data["input"] == [
        {"role": "system", "content": [{"text": "Be brief."}]},
        {"role": "user", "content": [{"text": "Weather in Paris?"}]},
    ]
    assert chat.data["output"] == [
        {"role": "assistant", "content": json.loads(STRANDS_USE), "finish_reason": "tool_use"}
    ]
    assert [e["name"] for e in chat.data["events"]] == [
        "gen_ai.system.message",
        "gen_ai.user.message",
        "gen_ai.choice",
    ]
    assert all(e["attributes"] == {} for e in chat.data["events"])
    assert [m["role"] for m in answer.data["input"]] == ["system", "user", "assistant", "tool"]
    # The tool's arguments and result, from its message and its choice.
    assert tool.data["arguments"] == {"city": "Paris"}
    assert tool.data["result"] == [{"text": "rain in Paris"}]
    assert tool.data["input"][0]["id"] == "call_1"
    # What the cycle's choice holds besides its message stays in it.
    assert first.data["output"][0]["tool.result"] == STRANDS_RESULT
    assert run.data["output"] == [
        {"role": "assistant", "content": "Rain in Paris.\n", "finish_reason": "end_turn"}
    ]
    # The run's totals restate its model calls': each token is counted once.
    assert (run.tokens, run.data["usage"]["total_tokens"]) == (0, 35)
    assert trace.total_tokens == 15 + 20 == sum(s.tokens for s in steps)

    # The detail pane reads the Converse blocks: text, calls and answers.
    _, shown = await sync_to_async(selectors.step_detail)(trace=trace, step_id=answer.id)
    asked = {value.key: value for value in shown}["input"].messages or []
    assert [(m.role, m.about, m.text, m.calls) for m in asked] == [
        ("system", "", "Be brief.", []),
        ("user", "", "Weather in Paris?", []),
        ("assistant", "", "", ['get_weather({"city": "Paris"})']),
        ("tool", "call_1", "rain in Paris", []),
    ]
    assert [m.extra for m in asked] == [""] * 4


def strands_latest(tracer: otel_trace.Tracer) -> None:
    """The model call of a Strands agent on the latest conventions: its messages and system
    prompt as attributes of ``gen_ai.client.inference.operation.details`` span events, one
    event each."""
    details = "gen_ai.client.inference.operation.details"
    with tracer.start_as_current_span(
        "chat",
        attributes={**STRANDS, "gen_ai.operation.name": "chat", **strands_usage(14, 1)},
    ) as chat:
        chat.add_event(
            details,
            {"gen_ai.system_instructions": '[{"type": "text", "content": "Be brief."}]'},
        )
        chat.add_event(
            details,
            {
                "gen_ai.input.messages": '[{"role": "user", "parts": [{"type": "text", '
                '"content": "Weather in Paris?"}]}]'
            },
        )
        chat.add_event(
            details,
            {
                "gen_ai.output.messages": '[{"role": "assistant", "parts": [{"type": '
                '"text", "content": "Rain in Paris.\\n"}], "finish_reason": "end_turn"}]'
            },
        )


async def test_the_latest_conventions_details_span_events_give_the_messages(user):
    trace, (chat,) = await send(sdk_spans(strands_latest), user)
    assert chat.data["system_instructions"] == [{"type": "text", "content": "Be brief."}]
    assert chat.data["input"][0]["parts"][0]["content"] == "Weather in Paris?"
    assert chat.data["output"][0]["finish_reason"] == "end_turn"
    assert all(e["attributes"] == {} for e in chat.data["events"])
    assert trace.task == "Weather in Paris?"


async def test_a_span_s_own_messages_stand_and_its_events_keep_theirs(user):
    def agent(tracer: otel_trace.Tracer) -> None:
        with tracer.start_as_current_span(
            "chat",
            attributes={"gen_ai.operation.name": "chat", "gen_ai.input.messages": "[]"},
        ) as chat:
            chat.add_event("gen_ai.user.message", {"content": "from the event"})
            chat.add_event("gen_ai.choice", {"message": "the answer"})

    _, (chat,) = await send(sdk_spans(agent), user)
    assert chat.data["input"] == []
    assert chat.data["events"][0]["attributes"] == {"content": "from the event"}
    assert chat.data["output"] == [{"role": "assistant", "content": "the answer"}]


def agent_framework(tracer: otel_trace.Tracer, *, kind: SpanKind = SpanKind.INTERNAL) -> None:
    """A Microsoft Agent Framework agent: its run's totals on its ``invoke_agent`` span."""
    framework = {"gen_ai.provider.name": "microsoft.agent_framework"}
    with tracer.start_as_current_span(
        "invoke_agent WeatherAgent",
        kind=kind,
        attributes={
            **framework,
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": "WeatherAgent",
            "gen_ai.usage.input_tokens": 15,
            "gen_ai.usage.output_tokens": 4,
        },
    ):
        for prompt, completion in ((6, 1), (9, 3)):
            with tracer.start_as_current_span(
                "chat gpt-4o",
                attributes={
                    "gen_ai.operation.name": "chat",
                    "gen_ai.usage.input_tokens": prompt,
                    "gen_ai.usage.output_tokens": completion,
                },
            ):
                pass


async def test_an_agent_run_s_totals_restate_its_model_calls(user):
    trace, (run, *_) = await send(sdk_spans(agent_framework), user)
    assert (run.tokens, run.data["usage"]) == (0, {"prompt_tokens": 15, "completion_tokens": 4})
    assert trace.total_tokens == 19


def remote_agent(tracer: otel_trace.Tracer) -> None:
    """An agent invoked on another service (a CLIENT span): its model calls are not here."""
    with (
        tracer.start_as_current_span("handle request", kind=SpanKind.SERVER),
        tracer.start_as_current_span(
            "invoke_agent remote",
            kind=SpanKind.CLIENT,
            attributes={
                "gen_ai.operation.name": "invoke_agent",
                "gen_ai.usage.input_tokens": 15,
                "gen_ai.usage.output_tokens": 4,
            },
        ),
    ):
        pass


async def test_a_remote_agent_s_usage_is_its_own(user):
    trace, (_, remote) = await send(sdk_spans(remote_agent), user)
    assert remote.step_type == StepType.GOAL
    assert (remote.tokens, trace.total_tokens) == (19, 19)


async def test_a_workflow_is_a_goal_and_litellm_s_cost_counts(user):
    def agent(tracer: otel_trace.Tracer) -> None:
        with (
            tracer.start_as_current_span(
                "invoke_workflow weather",
                attributes={"gen_ai.operation.name": "invoke_workflow"},
            ),
            tracer.start_as_current_span(
                "invoke_workflow inner", attributes={"gen_ai.operation.name": "invoke_workflow"}
            ),
            tracer.start_as_current_span(
                "litellm_request",
                attributes={
                    "gen_ai.operation.name": "chat",
                    "gen_ai.usage.total_tokens": 5,
                    "gen_ai.cost.total_cost": 2e-05,
                    "gen_ai.cost.input_cost": 1e-05,
                },
            ),
        ):
            pass

    trace, (_, inner, call) = await send(sdk_spans(agent), user)
    assert inner.step_type == StepType.GOAL
    assert (call.tokens, call.cost) == (5, Decimal("0.00002000"))
    assert trace.total_cost == Decimal("0.00002000")


GEMINI_NULLS = {"function_call": None, "function_response": None, "text": None, "thought": None}


def gemini_part(**given: Any) -> dict[str, Any]:
    return {**GEMINI_NULLS, **given}


def adk_v1(tracer: otel_trace.Tracer, logger: Logger) -> None:
    """Google ADK's 1.x log records: a user message and the model's choice with Google's
    ``Content`` as their content, its parts' other fields null."""
    genai = {"gen_ai.system": "openai"}
    with tracer.start_as_current_span("generate_content gpt-4o"):
        logger.emit(
            event_name="gen_ai.user.message",
            body={"content": {"parts": [gemini_part(text="Weather in Paris?")], "role": "user"}},
            attributes=genai,
        )
        # The model's earlier call, sent as a user message: its Content says who spoke.
        logger.emit(
            event_name="gen_ai.user.message",
            body={"content": {"parts": [gemini_part(text="Thinking.")], "role": "model"}},
            attributes=genai,
        )
        logger.emit(
            event_name="gen_ai.choice",
            body={
                "content": {
                    "parts": [
                        gemini_part(
                            function_call={
                                "id": "call_1",
                                "args": {"city": "Paris"},
                                "name": "get_weather",
                            }
                        )
                    ],
                    "role": "model",
                },
                "index": 0,
                "finish_reason": "STOP",
            },
            attributes=genai,
        )


def adk_content_kept_out(tracer: otel_trace.Tracer, logger: Logger) -> None:
    """Google ADK's run with ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`` unset (its
    default): its model call's messages as records of ``<elided>`` content."""
    genai = {"gen_ai.system": "gemini"}
    with (
        tracer.start_as_current_span(
            "invoke_agent weather_agent", attributes={"gen_ai.operation.name": "invoke_agent"}
        ),
        tracer.start_as_current_span(
            "generate_content gpt-4o", attributes={"gen_ai.operation.name": "generate_content"}
        ),
    ):
        for name in ("gen_ai.system.message", "gen_ai.user.message"):
            logger.emit(event_name=name, body={"content": "<elided>"}, attributes=genai)
        logger.emit(
            event_name="gen_ai.choice",
            body={"content": "<elided>", "index": 0, "finish_reason": "STOP"},
            attributes=genai,
        )


@pytest.mark.parametrize("records_first", [True, False])
async def test_a_run_whose_content_was_kept_out_is_named_after_its_root(user, records_first):
    """Not ``<elided>``, what ADK records in place of every message without content capture."""
    spans, records = sdk_spans_and_logs(adk_content_kept_out)
    token = await token_for(user)
    sends = [(protobuf_body(spans), "/v1/traces"), (logs_body(records), "/v1/logs")]
    for body, path in sends[::-1] if records_first else sends:
        response = await post_otlp(body, token=token, path=path)
        assert response.status_code == HTTPStatus.OK, response.content
    trace, (_, call) = await steps_of(trace_of(spans))
    assert call.data["input"][1] == {"role": "user", "content": "<elided>"}  # as recorded
    assert trace.task == "invoke_agent weather_agent"


def semantic_kernel(tracer: otel_trace.Tracer, logger: Logger) -> None:
    """Semantic Kernel's log records: bodies of JSON text, named by ``event.name``."""
    with tracer.start_as_current_span("chat gpt-4o"):
        logger.emit(
            body='{"role": "user", "content": "Weather in Paris?"}',
            attributes={"event.name": "gen_ai.user.message", "gen_ai.system": "openai"},
        )
        logger.emit(
            body='{"message": {"role": "assistant", "tool_calls": [{"id": "call_1", "type": '
            '"function", "function": {"name": "get_weather", "arguments": '
            '"{\\"city\\": \\"Paris\\"}"}}]}, "finish_reason": "tool_calls"}',
            attributes={"event.name": "gen_ai.choice", "gen_ai.system": "openai"},
        )
        logger.emit(body="processing 1 tool calls in parallel.")


@pytest.mark.parametrize("framework", [adk_v1, semantic_kernel])
async def test_log_records_of_google_s_content_or_json_text_give_their_messages(user, framework):
    spans, records = sdk_spans_and_logs(framework)
    token = await token_for(user)
    for body, path in ((logs_body(records), "/v1/logs"), (protobuf_body(spans), "/v1/traces")):
        response = await post_otlp(body, token=token, path=path)
        assert response.status_code == HTTPStatus.OK, response.content
    trace, (chat,) = await steps_of(trace_of(spans))
    asked, *earlier = chat.data["input"]
    (answer,) = chat.data["output"]
    assert asked["role"] == "user"
    assert [m["role"] for m in earlier] == (["model"] if framework is adk_v1 else [])
    assert answer["finish_reason"] in ("STOP", "tool_calls")
    assert trace.task == "Weather in Paris?"

    _, shown = await sync_to_async(selectors.step_detail)(trace=trace, step_id=chat.id)
    values = {value.key: value for value in shown}
    question, *_ = values["input"].messages or []
    (reply,) = values["output"].messages or []
    assert (question.role, question.text, question.extra) == ("user", "Weather in Paris?", "")
    assert reply.calls == ['get_weather({"city": "Paris"})']


def semantic_kernel_agent(
    tracer: otel_trace.Tracer, logger: Logger | None = None, *, asked: bool = True
) -> None:
    """Semantic Kernel's agent: its run's input an empty list of messages; its model call's
    messages here, or (``asked=False``) in log records, which its process flushes after its
    spans (emitted to ``logger``, when given)."""
    with tracer.start_as_current_span(
        "invoke_agent WeatherAgent",
        attributes={
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.input.messages": "[]",
            "gen_ai.output.messages": '[{"role": "assistant", "content": "Rain in Paris.", '
            '"name": "WeatherAgent"}]',
        },
    ):
        question = '[{"role": "user", "content": "Weather in Paris?"}]'
        with tracer.start_as_current_span(
            "chat gpt-4o",
            attributes={
                "gen_ai.operation.name": "chat",
                **({"gen_ai.input.messages": question} if asked else {}),
            },
        ):
            if logger is not None:
                logger.emit(
                    body='{"role": "user", "content": "Weather in Paris?"}',
                    attributes={"event.name": "gen_ai.user.message", "gen_ai.system": "openai"},
                )


@pytest.mark.parametrize(
    ("asked", "task"), [(True, "Weather in Paris?"), (False, "invoke_agent WeatherAgent")]
)
async def test_an_agent_run_that_asks_nothing_is_named_after_its_model_call(user, asked, task):
    """Named after what its model call was asked, else after itself: never "[]"."""
    spans = sdk_spans(lambda tracer: semantic_kernel_agent(tracer, asked=asked))
    trace, _ = await send(spans, user)
    assert trace.task == task


async def test_an_agent_run_is_named_by_its_model_call_s_records_sent_after_its_spans(user):
    spans, records = sdk_spans_and_logs(
        lambda tracer, logger: semantic_kernel_agent(tracer, logger, asked=False)
    )
    trace, _ = await send(spans, user)
    assert trace.task == "invoke_agent WeatherAgent"
    response = await post_otlp(logs_body(records), token=await token_for(user), path="/v1/logs")
    assert response.status_code == HTTPStatus.OK, response.content
    trace, (_, chat) = await steps_of(trace.id)
    assert chat.data["input"] == [{"role": "user", "content": "Weather in Paris?"}]
    assert (trace.status, trace.task) == (TraceStatus.COMPLETED, "Weather in Paris?")


ADK_REQUEST = {
    "model": "openai/gpt-4o",
    "config": {"system_instruction": "Be brief."},
    "contents": [{"parts": [{"text": "Weather in Paris?"}], "role": "user"}],
}
ADK_RESPONSE = {
    "model_version": "gpt-4o",
    "content": {
        "parts": [
            {"function_call": {"id": "call_1", "args": {"city": "Paris"}, "name": "get_weather"}}
        ],
        "role": "model",
    },
    "partial": False,
    "finish_reason": "STOP",
}


def adk_v1_agent(tracer: otel_trace.Tracer) -> None:
    """Google ADK's 1.x schema: a model call (``call_llm``) with its request and response as
    JSON text, a tool call with its arguments and response as JSON text."""
    vertex = {"gen_ai.system": "gcp.vertex.agent"}
    with (
        tracer.start_as_current_span("invocation"),
        tracer.start_as_current_span(
            "invoke_agent weather_agent", attributes={"gen_ai.operation.name": "invoke_agent"}
        ),
    ):
        with tracer.start_as_current_span(
            "call_llm",
            attributes={
                **vertex,
                "gen_ai.request.model": "openai/gpt-4o",
                "gcp.vertex.agent.llm_request": json.dumps(ADK_REQUEST),
                "gcp.vertex.agent.llm_response": json.dumps(ADK_RESPONSE),
                "gen_ai.usage.input_tokens": 21,
                "gen_ai.usage.output_tokens": 1,
            },
        ):
            pass
        with tracer.start_as_current_span(
            "execute_tool get_weather",
            attributes={
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": "get_weather",
                "gcp.vertex.agent.llm_request": "{}",
                "gcp.vertex.agent.llm_response": "{}",
                "gcp.vertex.agent.tool_call_args": '{"city": "Paris"}',
                "gcp.vertex.agent.tool_response": '{"result": "rain in Paris"}',
            },
        ):
            pass


async def test_google_adk_1_model_and_tool_calls(user):
    trace, (_, _, model, tool) = await send(sdk_spans(adk_v1_agent), user)
    assert (model.step_type, model.tokens) == (StepType.THOUGHT, 22)
    assert (model.data["input"], model.data["output"]) == (ADK_REQUEST, ADK_RESPONSE)
    assert (tool.data["arguments"], tool.data["result"]) == (
        {"city": "Paris"},
        {"result": "rain in Paris"},
    )
    # ADK's "{}" request and response on a tool span, where they do not apply, are not kept.
    assert "input" not in tool.data
    assert "output" not in tool.data
    assert not any(key.startswith("gcp.vertex.agent.llm") for key in tool.data["attributes"])

    # The request's contents and the response's content show as messages.
    _, shown = await sync_to_async(selectors.step_detail)(trace=trace, step_id=model.id)
    values = {value.key: value for value in shown}
    (asked,) = values["input"].messages or []
    (answer,) = values["output"].messages or []
    assert (asked.role, asked.text) == ("user", "Weather in Paris?")
    assert (answer.role, answer.about, answer.calls) == (
        "model",
        "STOP",
        ['get_weather({"city": "Paris"})'],
    )
    assert json.loads(values["input"].besides)["config"] == {"system_instruction": "Be brief."}


def adk_2_on_its_1_schema(tracer: otel_trace.Tracer) -> None:
    """Google ADK 2 with ``ADK_TELEMETRY_SCHEMA_VERSION_OPT_IN=1``: its 1.x ``call_llm``, with
    the call's usage, over its own ``generate_content`` span with the same usage."""
    usage = {"gen_ai.usage.input_tokens": 21, "gen_ai.usage.output_tokens": 1}
    with (
        tracer.start_as_current_span(
            "invoke_agent weather_agent", attributes={"gen_ai.operation.name": "invoke_agent"}
        ),
        tracer.start_as_current_span(
            "call_llm",
            attributes={
                "gen_ai.system": "gcp.vertex.agent",
                "gen_ai.request.model": "openai/gpt-4o",
                "gcp.vertex.agent.llm_request": json.dumps(ADK_REQUEST),
                "gcp.vertex.agent.llm_response": json.dumps(ADK_RESPONSE),
                **usage,
            },
        ),
        tracer.start_as_current_span(
            "generate_content openai/gpt-4o",
            attributes={"gen_ai.operation.name": "generate_content", **usage},
        ),
    ):
        pass


async def test_google_adk_2_on_its_1_schema_counts_a_model_call_once(user):
    """Both spans show the call's 22 tokens; the trace counts them once, on the inner one."""
    trace, (_, call_llm, generate) = await send(sdk_spans(adk_2_on_its_1_schema), user)
    assert [s.step_type for s in (call_llm, generate)] == [StepType.THOUGHT, StepType.THOUGHT]
    assert (call_llm.tokens, generate.tokens, trace.total_tokens) == (22, 22, 22)
    assert call_llm.tokens_counted_below
    assert not generate.tokens_counted_below
    # The step pane and the API's step say where its tokens are counted.
    client = AsyncClient()
    await client.aforce_login(user)
    pane = await client.get(reverse("traces:step", args=[trace.id, call_llm.id]))
    assert "(counted in the model call below)" in pane.content.decode()
    step = (await client.get(f"/api/traces/{trace.id}/steps/{call_llm.id}")).json()
    assert (step["tokens"], step["tokens_counted_below"], step["cost_counted_below"]) == (
        22,
        True,
        False,
    )


def litellm_call(tracer: otel_trace.Tracer) -> None:
    """LiteLLM's own OTel callback: a model call that calls a tool, the call only in the
    flattened ``gen_ai.completion.0.function_call.*`` (no role), its answer's text empty."""
    with tracer.start_as_current_span(
        "litellm_request",
        attributes={
            "gen_ai.operation.name": "chat",
            "llm.request.type": "completion",
            "gen_ai.request.model": "gpt-4o",
            "gen_ai.input.messages": '[{"role": "user", "parts": [{"type": "text", '
            '"content": "Weather in Paris?"}]}]',
            "gen_ai.output.messages": '[{"role": "assistant", "parts": [{"type": "text", '
            '"content": ""}], "finish_reason": "tool_calls"}]',
            "gen_ai.completion.0.function_call.arguments": '{"city": "Paris"}',
            "gen_ai.completion.0.function_call.name": "get_weather",
            "gen_ai.usage.input_tokens": 4,
            "gen_ai.usage.output_tokens": 1,
            "gen_ai.cost.total_cost": 2e-05,
        },
    ):
        pass


async def test_litellm_s_call_of_a_tool_shows_as_the_assistant_s(user):
    trace, (call,) = await send(sdk_spans(litellm_call), user)
    assert call.data["output_messages"] == [
        {
            "role": "assistant",
            "function_call": {"arguments": '{"city": "Paris"}', "name": "get_weather"},
        }
    ]
    assert call.cost == Decimal("0.00002000")
    _, shown = await sync_to_async(selectors.step_detail)(trace=trace, step_id=call.id)
    (answer,) = {value.key: value for value in shown}["output_messages"].messages or []
    assert (answer.role, answer.calls, answer.extra) == (
        "assistant",
        ['get_weather({"city": "Paris"})'],
        "",
    )


HAYSTACK_USER: dict[str, Any] = {
    "role": "user",
    "meta": {},
    "name": None,
    "content": [{"text": "Weather in Paris?"}],
}
HAYSTACK_CALL: dict[str, Any] = {
    "role": "assistant",
    "meta": {
        "model": "gpt-4o",
        "index": 0,
        "finish_reason": "tool_calls",
        "usage": {"completion_tokens": 1, "prompt_tokens": 6, "total_tokens": 7},
    },
    "name": None,
    "content": [
        {"text": ""},
        {
            "tool_call": {
                "tool_name": "get_weather",
                "arguments": {"city": "Paris"},
                "id": "call_1",
                "extra": None,
            }
        },
    ],
}
HAYSTACK_RESULT: dict[str, Any] = {
    "role": "tool",
    "meta": {},
    "name": None,
    "content": [
        {
            "tool_call_result": {
                "result": "rain in Paris",
                "origin": {
                    "tool_name": "get_weather",
                    "arguments": {"city": "Paris"},
                    "id": "call_1",
                },
                "error": False,
            }
        }
    ],
}


STEP = "haystack.agent.step"


def haystack_agent(tracer: otel_trace.Tracer, *, failed: bool = False) -> None:
    """Haystack's ``Agent`` traced by Haystack itself: its spans named for what they are,
    their content as JSON text of Haystack's own ``ChatMessage``s."""
    answer = {
        "role": "assistant",
        "meta": {"usage": {"completion_tokens": 3, "prompt_tokens": 9, "total_tokens": 12}},
        "content": [{"text": "Rain in Paris."}],
    }
    with tracer.start_as_current_span(
        "haystack.agent.run",
        attributes={
            "haystack.agent.max_steps": 100,
            "haystack.agent.input": json.dumps(
                {"messages": [HAYSTACK_USER], "streaming_callback": None}
            ),
            "haystack.agent.output": json.dumps({"messages": [HAYSTACK_USER, answer]}),
            "haystack.agent.steps_taken": 2,
        },
    ):
        with (
            tracer.start_as_current_span(
                "haystack.agent.step", attributes={"haystack.agent.step": 0}
            ),
        ):
            with tracer.start_as_current_span(
                "haystack.agent.step.llm",
                attributes={
                    "haystack.agent.step.llm.input": json.dumps({"messages": [HAYSTACK_USER]}),
                    "haystack.agent.step.llm.output": json.dumps({"replies": [HAYSTACK_CALL]}),
                },
            ):
                pass
            with tracer.start_as_current_span(
                "haystack.agent.step.tool",
                attributes={
                    "haystack.tool.name": "get_weather",
                    "haystack.agent.step.tool.input": '{"city": "Paris"}',
                    "haystack.agent.step.tool.output": (
                        "weather service down" if failed else "rain in Paris"
                    ),
                    **({"haystack.tool.error": True} if failed else {}),
                },
            ):
                pass
        with (
            tracer.start_as_current_span(
                "haystack.agent.step", attributes={"haystack.agent.step": 1}
            ),
            tracer.start_as_current_span(
                "haystack.agent.step.llm",
                attributes={
                    "haystack.agent.step.llm.input": json.dumps(
                        {"messages": [HAYSTACK_USER, HAYSTACK_CALL, HAYSTACK_RESULT]}
                    ),
                    "haystack.agent.step.llm.output": json.dumps({"replies": [answer]}),
                },
            ),
        ):
            pass


async def test_haystack_s_own_spans_are_its_agent_s_steps(user):
    trace, steps = await send(sdk_spans(haystack_agent), user)
    run, _, call, tool, _, answer = steps
    assert [s.step_type for s in steps] == [
        StepType.GOAL,
        StepType.THOUGHT,
        StepType.THOUGHT,
        StepType.ACTION,
        StepType.THOUGHT,
        StepType.THOUGHT,
    ]
    assert trace.task == "Weather in Paris?"
    assert (tool.data["tool_name"], tool.data["arguments"], tool.data["result"]) == (
        "get_weather",
        {"city": "Paris"},
        "rain in Paris",
    )
    # Its model calls' usage and model, from their replies.
    assert (call.tokens, answer.tokens, run.tokens, trace.total_tokens) == (7, 12, 0, 19)
    assert (call.data["model"], "model" in answer.data) == ("gpt-4o", False)

    _, shown = await sync_to_async(selectors.step_detail)(trace=trace, step_id=answer.id)
    values = {value.key: value for value in shown}
    asked = values["input"].messages or []
    assert [(m.role, m.text, m.calls) for m in asked] == [
        ("user", "Weather in Paris?", []),
        ("assistant", "", ['get_weather({"city": "Paris"})']),
        ("tool", "rain in Paris", []),
    ]
    (reply,) = values["output"].messages or []
    assert reply.text == "Rain in Paris."


async def test_haystack_s_failed_tool_call_fails_its_step(user):
    trace, steps = await send(sdk_spans(lambda t: haystack_agent(t, failed=True)), user)
    (tool,) = [s for s in steps if s.step_type == StepType.ACTION]
    assert (tool.status, tool.error) == ("failed", "weather service down")
    assert trace.error_count == 1
