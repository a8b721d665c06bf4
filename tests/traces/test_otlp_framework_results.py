"""A tool call's result where its framework's instrumentation records the framework's object
(LangChain's ``ToolMessage``, LlamaIndex's ``ToolOutput``) as the TOOL span's output: the step's
result is what the tool returned, the object stays whole as its output, and a failure the
object reports fails the step.

The spans' attributes below are what the instrumentations really sent, recorded with the OTel
SDK's ``InMemorySpanExporter`` (trimmed to the attributes that matter, the strings exact):

- ``LANGCHAIN``: langchain-core 1.8.3, langgraph 1.2.24 (a ``ToolNode`` in a ``StateGraph``, a
  prebuilt ReAct agent with a fake chat model) and openinference-instrumentation-langchain
  0.1.80; ``LANGCHAIN_0_1_61`` and ``LANGCHAIN_0_1_47``: the same tools invoked with a tool
  call under openinference-instrumentation-langchain 0.1.61 and 0.1.47 (langchain-core 1.8.3).
- ``LLAMA_INDEX``: llama-index-core 0.14.25 (``FunctionTool.call`` / ``acall``, a
  ``FunctionAgent`` with ``MockFunctionCallingLLM``) and openinference-instrumentation-llama-index
  4.6.1; ``LLAMA_INDEX_0_12``: llama-index-core 0.12.40 with openinference-instrumentation-
  llama-index 4.3.0."""

from __future__ import annotations

import json
from typing import Any

import pytest
from opentelemetry import trace as otel_trace

from tests.traces.otlp_clients import post_otlp, protobuf_body, sdk_spans
from tests.traces.test_otlp_ingest import step_of, token_for, trace_of
from traces.models import Step, StepStatus, Trace, TraceStatus

pytestmark = pytest.mark.django_db(transaction=True)

JSON_MIME = "application/json"

LANGCHAIN = {
    # ``add`` called by a ``ToolNode``: its ``ToolMessage``, as ``message_to_dict`` makes it.
    "add": {
        "openinference.span.kind": "TOOL",
        "tool.name": "add",
        "input.value": '{"a": 40, "b": 2}',
        "input.mime_type": JSON_MIME,
        "output.value": '{"type": "tool", "data": {"content": "42", "additional_kwargs": {}, '
        '"response_metadata": {}, "type": "tool", "name": "add", "id": null, '
        '"tool_call_id": "call_1", "artifact": null, "status": "success"}}',
        "output.mime_type": JSON_MIME,
    },
    # A tool that returns a dict: LangChain makes its content the dict's JSON text.
    "lookup": {
        "openinference.span.kind": "TOOL",
        "tool.name": "lookup",
        "input.value": "Paris",
        "output.value": r'{"type": "tool", "data": {"content": "{\"city\": \"Paris\", '
        r'\"temp\": 21}", "additional_kwargs": {}, "response_metadata": {}, "type": "tool", '
        r'"name": "lookup", "id": null, "tool_call_id": "call_2", "artifact": null, '
        r'"status": "success"}}',
        "output.mime_type": JSON_MIME,
    },
    # A tool that handles its error (``ToolException``, ``handle_tool_error=True``): its span
    # ends OK, its message says it failed.
    "boom2": {
        "openinference.span.kind": "TOOL",
        "tool.name": "boom2",
        "input.value": '{"x": 1}',
        "input.mime_type": JSON_MIME,
        "output.value": '{"type": "tool", "data": {"content": "boom2 failed", '
        '"additional_kwargs": {}, "response_metadata": {}, "type": "tool", "name": "boom2", '
        '"id": null, "tool_call_id": "call_4", "artifact": null, "status": "error"}}',
        "output.mime_type": JSON_MIME,
    },
}
LANGCHAIN_0_1_61 = {
    # The message's fields alone (its ``model_dump()``).
    "add": {
        "openinference.span.kind": "TOOL",
        "tool.name": "add",
        "input.value": '{"a": 1, "b": 2}',
        "input.mime_type": JSON_MIME,
        "output.value": '{"content": "3", "additional_kwargs": {}, "response_metadata": {}, '
        '"type": "tool", "name": "add", "id": null, "tool_call_id": "call_1", '
        '"artifact": null, "status": "success"}',
        "output.mime_type": JSON_MIME,
    },
    "boom2": {
        "openinference.span.kind": "TOOL",
        "tool.name": "boom2",
        "input.value": '{"x": 1}',
        "input.mime_type": JSON_MIME,
        "output.value": '{"content": "boom2 failed", "additional_kwargs": {}, '
        '"response_metadata": {}, "type": "tool", "name": "boom2", "id": null, '
        '"tool_call_id": "call_5", "artifact": null, "status": "error"}',
        "output.mime_type": JSON_MIME,
    },
}
LANGCHAIN_0_1_47 = {
    # The message's ``str()`` under the tool run's ``output``.
    "add": {
        "openinference.span.kind": "TOOL",
        "tool.name": "add",
        "input.value": '{"a": 1, "b": 2}',
        "input.mime_type": JSON_MIME,
        "output.value": """{"output": "content='3' name='add' tool_call_id='call_1'"}""",
        "output.mime_type": JSON_MIME,
    },
    "lookup": {
        "openinference.span.kind": "TOOL",
        "tool.name": "lookup",
        "input.value": "Paris",
        "output.value": r"""{"output": "content='{\"city\": \"Paris\", \"temp\": 21}' """
        r"""name='lookup' tool_call_id='call_2'"}""",
        "output.mime_type": JSON_MIME,
    },
    "boom2": {
        "openinference.span.kind": "TOOL",
        "tool.name": "boom2",
        "input.value": '{"x": 1}',
        "input.mime_type": JSON_MIME,
        "output.value": """{"output": "content='boom2 failed' name='boom2' """
        """tool_call_id='call_5' status='error'"}""",
        "output.mime_type": JSON_MIME,
    },
}
LLAMA_INDEX = {
    # ``FunctionTool.acall`` (a ``FunctionAgent``'s call; ``call`` sends the same).
    "add": {
        "openinference.span.kind": "TOOL",
        "tool.name": "add",
        "input.value": '{"kwargs": {"a": 40, "b": 2}}',
        "input.mime_type": JSON_MIME,
        "output.value": '{"blocks":[{"text":"42"}],"tool_name":"add","raw_input":{"args":[],'
        '"kwargs":{"a":40,"b":2}},"raw_output":42,"is_error":false}',
        "output.mime_type": JSON_MIME,
    },
    # A tool that returns a dict: its text is the dict's Python repr, its raw output the dict.
    "lookup": {
        "openinference.span.kind": "TOOL",
        "tool.name": "lookup",
        "input.value": '{"kwargs": {"city": "Paris"}}',
        "input.mime_type": JSON_MIME,
        "output.value": """{"blocks":[{"text":"{'city': 'Paris', 'temp': 21}"}],"""
        """"tool_name":"lookup","raw_input":{"args":[],"kwargs":{"city":"Paris"}},"""
        """"raw_output":{"city":"Paris","temp":21},"is_error":false}""",
        "output.mime_type": JSON_MIME,
    },
    # A tool whose callback returns its own ``ToolOutput`` with ``is_error=True``.
    "checked": {
        "openinference.span.kind": "TOOL",
        "tool.name": "checked",
        "input.value": '{"kwargs": {"x": 1}}',
        "input.mime_type": JSON_MIME,
        "output.value": '{"blocks":[{"text":"-1 is negative"}],"tool_name":"checked",'
        '"raw_input":{"x":1},"raw_output":-1,"is_error":true}',
        "output.mime_type": JSON_MIME,
    },
}
LLAMA_INDEX_0_12 = {
    # ``content`` where later versions have ``blocks``; ``is_error`` unset, so left out.
    "add": {
        "openinference.span.kind": "TOOL",
        "tool.name": "add",
        "input.value": '{"kwargs": {"a": 40, "b": 2}}',
        "input.mime_type": JSON_MIME,
        "output.value": '{"content":"42","tool_name":"add","raw_input":{"args":[],'
        '"kwargs":{"a":40,"b":2}},"raw_output":42}',
        "output.mime_type": JSON_MIME,
    },
}


def tool_call(span_name: str, attributes: dict[str, Any], *, alone: bool = False) -> Any:
    """A build for ``sdk_spans``: one span ``span_name`` with ``attributes``, under an agent's
    span unless ``alone`` (a tool invoked by itself, whose span is the root)."""

    def build(tracer: otel_trace.Tracer) -> None:
        if alone:
            tracer.start_span(span_name, attributes=attributes).end()
            return
        with tracer.start_as_current_span("agent"):
            tracer.start_span(span_name, attributes=attributes).end()

    return build


async def tool_step(user: Any, span_name: str, attributes: dict[str, Any]) -> Step:
    """The step stored for a tool call's span posted to /v1/traces."""
    spans = sdk_spans(tool_call(span_name, attributes))
    response = await post_otlp(protobuf_body(spans), token=await token_for(user))
    assert response.status_code == 200
    return await Step.objects.aget(pk=step_of(spans[0]))


@pytest.mark.parametrize(
    ("span_name", "attributes", "result"),
    [
        pytest.param("add", LANGCHAIN["add"], "42", id="langchain-message_to_dict"),
        pytest.param(
            "lookup", LANGCHAIN["lookup"], '{"city": "Paris", "temp": 21}', id="langchain-json"
        ),
        pytest.param("add", LANGCHAIN_0_1_61["add"], "3", id="langchain-0.1.61-fields"),
        pytest.param("add", LANGCHAIN_0_1_47["add"], "3", id="langchain-0.1.47-str"),
        pytest.param(
            "lookup",
            LANGCHAIN_0_1_47["lookup"],
            '{"city": "Paris", "temp": 21}',
            id="langchain-0.1.47-str-quotes",
        ),
        pytest.param("FunctionTool.acall", LLAMA_INDEX["add"], 42, id="llama-index-blocks"),
        pytest.param(
            "FunctionTool.call",
            LLAMA_INDEX["lookup"],
            {"city": "Paris", "temp": 21},
            id="llama-index-dict",
        ),
        pytest.param("FunctionTool.call", LLAMA_INDEX_0_12["add"], 42, id="llama-index-0.12"),
    ],
)
async def test_a_framework_s_tool_result_is_what_the_tool_returned(
    user, span_name, attributes, result
):
    tool = await tool_step(user, span_name, attributes)
    assert tool.status == StepStatus.COMPLETED
    assert tool.error == ""
    assert tool.data["result"] == result
    # The framework's object stays whole beside it, and the other attributes as they were.
    assert tool.data["output"] == json.loads(attributes["output.value"])
    assert tool.data["attributes"]["tool.name"] == attributes["tool.name"]
    assert tool.data["tool_name"] == attributes["tool.name"]


@pytest.mark.parametrize(
    ("span_name", "attributes", "result", "error"),
    [
        pytest.param("boom2", LANGCHAIN["boom2"], "boom2 failed", "boom2 failed", id="langchain"),
        pytest.param(
            "boom2",
            LANGCHAIN_0_1_61["boom2"],
            "boom2 failed",
            "boom2 failed",
            id="langchain-0.1.61",
        ),
        pytest.param(
            "boom2",
            LANGCHAIN_0_1_47["boom2"],
            "boom2 failed",
            "boom2 failed",
            id="langchain-0.1.47",
        ),
        pytest.param(
            "FunctionTool.call", LLAMA_INDEX["checked"], -1, "-1 is negative", id="llama-index"
        ),
    ],
)
async def test_a_tool_call_its_framework_says_failed_fails_its_step(
    user, span_name, attributes, result, error
):
    """The span ended OK (the framework handled the tool's error and gave the model its
    message); the framework's object says the call failed, and so does the step."""
    tool = await tool_step(user, span_name, attributes)
    assert (tool.status, tool.error) == (StepStatus.FAILED, error)
    assert tool.data["result"] == result
    assert tool.data["output"] == json.loads(attributes["output.value"])


async def test_a_failed_tool_call_that_is_its_trace_s_root_fails_its_trace(user):
    """A LangChain tool invoked by itself with a tool call: its span is the root."""
    spans = sdk_spans(tool_call("boom2", LANGCHAIN["boom2"], alone=True))
    assert (await post_otlp(protobuf_body(spans), token=await token_for(user))).status_code == 200
    trace = await Trace.objects.aget(pk=trace_of(spans))
    assert trace.status == TraceStatus.FAILED


@pytest.mark.parametrize(
    "output",
    [
        # A tool's own result with a ``content`` key (a file reader's) is no framework's object.
        {"content": "# Notes", "path": "notes.md"},
        # Nor is one with some of a ``ToolMessage``'s fields, or of a ``ToolOutput``'s.
        {"type": "tool", "content": "42"},
        {"content": "42", "tool_call_id": "call_1"},
        {"type": "tool", "data": {"content": "42"}},
        {"content": "42", "tool_name": "add"},
        {"blocks": [{"text": "42"}], "tool_name": "add", "raw_output": 42},
        {"output": "content='42' name='add'"},
    ],
)
async def test_a_tool_result_that_only_looks_like_a_framework_s_object_stays_as_it_was(
    user, output
):
    attributes = {
        "openinference.span.kind": "TOOL",
        "tool.name": "read_file",
        "output.value": json.dumps(output),
        "output.mime_type": JSON_MIME,
    }
    tool = await tool_step(user, "read_file", attributes)
    assert tool.status == StepStatus.COMPLETED
    assert tool.data["result"] == output
    assert "output" not in tool.data


@pytest.mark.parametrize(
    ("span_name", "attributes", "arguments"),
    [
        pytest.param("FunctionTool.acall", LLAMA_INDEX["add"], {"a": 40, "b": 2}, id="llama-index"),
        pytest.param(
            "get_weather.tool",
            {
                "traceloop.span.kind": "tool",
                "traceloop.entity.name": "get_weather",
                "traceloop.entity.input": '{"args": [], "kwargs": {"city": "Paris"}}',
            },
            {"city": "Paris"},
            id="openllmetry",
        ),
        pytest.param(
            "get_weather",
            {
                # smolagents 1.26 with openinference-instrumentation-smolagents 0.1.43.
                "openinference.span.kind": "TOOL",
                "tool.name": "get_weather",
                "input.value": json.dumps(
                    {"args": [], "sanitize_inputs_outputs": True, "kwargs": {"city": "Paris"}}
                ),
            },
            {"city": "Paris"},
            id="smolagents",
        ),
    ],
)
async def test_a_python_call_s_named_arguments_are_the_tool_s_arguments(
    user, span_name, attributes, arguments
):
    """LlamaIndex's ``{"kwargs": {...}}`` (OpenLLMetry's with empty ``args``) was stored, and
    shown, as the call's arguments; they are what it holds, and the input stays whole."""
    tool = await tool_step(user, span_name, attributes)
    assert tool.data["arguments"] == arguments
    given = attributes.get("input.value") or attributes["traceloop.entity.input"]
    assert tool.data["input"] == json.loads(given)


@pytest.mark.parametrize(
    "inputs",
    [
        {"args": [1, 2], "kwargs": {}},  # positional arguments: no names to show them by
        {"kwargs": {"a": 1}, "verbose": True},  # a tool's own argument named kwargs
        {"kwargs": "a=1"},
        {"query": "memory"},
    ],
)
async def test_any_other_tool_input_is_its_arguments_as_it_came(user, inputs):
    attributes = {
        "openinference.span.kind": "TOOL",
        "tool.name": "lookup",
        "input.value": json.dumps(inputs),
        "input.mime_type": JSON_MIME,
    }
    tool = await tool_step(user, "lookup", attributes)
    assert tool.data["arguments"] == inputs
    assert "input" not in tool.data
