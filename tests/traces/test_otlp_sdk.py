"""The real OpenTelemetry SDK exporting to DevAssist under daphne: an agent instrumented with
the SDK is pointed at DevAssist by the two standard variables (``OTEL_EXPORTER_OTLP_ENDPOINT``
and ``OTEL_EXPORTER_OTLP_HEADERS``), through the SDK's ``BatchSpanProcessor`` and OTLP/HTTP
exporter (protobuf, gzip); OTLP/JSON posted by a plain HTTP client; the parts of two traces
sent at once over many connections, as a Collector's parallel exporters send them; an agent
process instrumented by OpenTelemetry's own OpenAI instrumentation, whose prompts and answers
are log records; and a Vercel AI SDK agent (TypeScript, under Node.js) with telemetry on."""

from __future__ import annotations

import gzip
import os
import shutil
import subprocess
import sys
import uuid
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from http import HTTPStatus
from pathlib import Path
from typing import Any

import httpx
import pytest
from opentelemetry.exporter.otlp.proto.common.metrics_encoder import encode_metrics
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceResponse,
)
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader, MetricExportResult
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace import Tracer

from devassist.tokens import api_token_create
from tests.agent.fake_openai import FakeOpenAI
from tests.conftest import require
from tests.traces.otlp_clients import (
    JSON,
    PROTOBUF,
    json_body,
    partial_success,
    protobuf_body,
    sdk_spans,
)
from tests.traces.test_otlp_ingest import genai_agent, openinference_agent
from traces.models import Step, StepType, Trace, TraceStatus
from traces.selectors import step_detail, trace_tree

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


def nested_agent(tracer: Tracer) -> None:
    """An agent of 1 + 4 * (1 + 3 * (1 + 4)) = 65 spans, 4 levels deep, each span named by its
    place."""
    with tracer.start_as_current_span("agent", attributes={"openinference.span.kind": "AGENT"}):
        for a in range(4):
            with tracer.start_as_current_span(f"sub-{a}"):
                for t in range(3):
                    with tracer.start_as_current_span(
                        f"tool-{a}.{t}", attributes={"openinference.span.kind": "TOOL"}
                    ):
                        for c in range(4):
                            with tracer.start_as_current_span(
                                f"llm-{a}.{t}.{c}", attributes={"openinference.span.kind": "LLM"}
                            ):
                                pass


def checked_size(
    node: dict[str, Any],
    parents: dict[str, str | None],
    seen: Counter[str],
    *,
    parent: str | None,
    depth: int,
) -> int:
    """The size of ``node``'s subtree, having checked every node of it against ``parents``
    (span name → its parent's): its place, depth, rollup of steps and count of children."""
    seen[node["name"]] += 1
    assert parents[node["name"]] == parent
    assert node["depth"] == depth
    size = 1 + sum(
        checked_size(child, parents, seen, parent=node["name"], depth=depth + 1)
        for child in node["children"]
    )
    assert (node["subtree_steps"], node["children_count"]) == (size, len(node["children"]))
    return size


def test_parts_of_two_traces_sent_at_once_over_many_connections(app_server, user):
    """Six requests at once, each with a part of both traces (one in the order the spans
    ended, the other reversed): the traces are opened once, nothing deadlocks, and each
    ends as the one tree it was, with its rollups, whatever request came first."""
    _, token = api_token_create(user=user, name="parallel")
    first, second = sdk_spans(nested_agent), sdk_spans(nested_agent)
    parts = 6

    def part(spans: list[Any], index: int) -> list[Any]:
        return spans[index::parts]

    bodies = [protobuf_body([*part(first, i), *part(second[::-1], i)]) for i in range(parts)]

    def post(body: bytes) -> httpx.Response:
        return httpx.post(
            f"{app_server}/v1/traces",
            content=body,
            headers={"Content-Type": PROTOBUF, "x-api-key": token},
            timeout=60,
        )

    with ThreadPoolExecutor(max_workers=parts) as pool:
        responses = list(pool.map(post, bodies))
    assert [r.status_code for r in responses] == [HTTPStatus.OK] * parts
    assert all(partial_success(r) == (0, "") for r in responses)

    for spans in (first, second):
        trace = Trace.objects.get(pk=uuid.UUID(int=spans[0].context.trace_id))
        assert (trace.status, trace.total_steps, trace.root_count) == (
            TraceStatus.COMPLETED,
            65,
            1,
        )
        names = {span.context.span_id: span.name for span in spans}
        parents = {span.name: names[span.parent.span_id] if span.parent else None for span in spans}
        (root,) = trace_tree(trace=trace)
        seen: Counter[str] = Counter()
        assert checked_size(root, parents, seen, parent=None, depth=0) == 65
        assert set(seen.values()) == {1}
        assert not Step.objects.filter(trace=trace, pending_parent_id__isnull=False).exists()


REPO_ROOT = Path(__file__).resolve().parents[2]


def run_program(
    command: list[str],
    app_server: str,
    user: Any,
    *,
    replies: list[Any],
    service: str,
    env: dict[str, str] | None = None,
    cwd: Path = REPO_ROOT,
    header: str = "Authorization=Bearer%20{token}",
) -> str:
    """Run an agent's ``command`` in ``cwd``, pointed at the live server by the standard
    variables (``OTEL_EXPORTER_OTLP_HEADERS`` is ``header`` with a new token of ``user``;
    ``env`` added), its model answering ``replies``; its output."""
    _, token = api_token_create(user=user, name="agent")
    with FakeOpenAI() as model:
        model.script(replies)
        agent = subprocess.run(
            command,
            cwd=cwd,
            env={
                **os.environ,
                "OTEL_EXPORTER_OTLP_ENDPOINT": app_server,
                "OTEL_EXPORTER_OTLP_HEADERS": header.format(token=token),
                "OTEL_SERVICE_NAME": service,
                "OPENAI_BASE_URL": model.base_url,
                "OPENAI_API_KEY": "test-key",
                **(env or {}),
            },
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    assert agent.returncode == 0, agent.stderr
    return agent.stdout


def run_agent(
    module: str,
    app_server: str,
    user: Any,
    *,
    replies: list[Any],
    args: tuple[str, ...] = (),
    service: str = "weather-agent",
    env: dict[str, str] | None = None,
    zero_code: bool = False,
) -> str:
    """Run the agent ``python -m <module> <args>`` (``run_program``); its output.
    ``zero_code``: under ``opentelemetry-instrument`` (``--zero-code`` after ``args``), as
    docs/opentelemetry.md sets it up: no metrics; and, this suite's environment holding three
    OpenAI instrumentations of one entry-point name where a user has one, only the agent's
    framework instrumented."""
    command = [sys.executable, "-m", module, *args]
    if zero_code:
        command = [str(Path(sys.executable).with_name("opentelemetry-instrument")), *command]
        command.append("--zero-code")
        env = {
            "OTEL_METRICS_EXPORTER": "none",
            "OTEL_PYTHON_DISABLED_INSTRUMENTATIONS": "openai,openai_agents",
            **(env or {}),
        }
    return run_program(command, app_server, user, replies=replies, service=service, env=env)


def run_openai_agent(
    instrumentation: str, app_server: str, user: Any, env: dict[str, str] | None = None
) -> None:
    """``tests.traces.openai_agent`` with ``instrumentation``, its model answering
    "Rain <b>all</b> day."."""
    run_agent(
        "tests.traces.openai_agent",
        app_server,
        user,
        replies=["Rain <b>all</b> day."],
        args=(instrumentation,),
        env=env,
    )


@pytest.mark.parametrize(
    ("semconv", "capture"), [("", "true"), ("gen_ai_latest_experimental", "event_only")]
)
def test_openai_s_own_instrumentation_shows_what_the_model_was_asked_and_answered(
    app_server, user, client, semconv, capture
):
    """The instrumentation records a model call's messages as log records only (events of the
    conventions up to 1.36 by default; one ``operation.details`` event with the later ones):
    pointed at DevAssist by the standard variables, the call's step shows them."""
    run_openai_agent(
        "otel",
        app_server,
        user,
        {
            "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": capture,
            "OTEL_SEMCONV_STABILITY_OPT_IN": semconv,
        },
    )
    trace = Trace.objects.get(user=user)
    assert (trace.agent_type, trace.status) == ("weather-agent", TraceStatus.COMPLETED)
    (root,) = trace_tree(trace=trace)
    assert root["name"] == "weather agent"
    assert [c["name"] for c in root["children"]] == ["chat gpt-4o"]
    chat = Step.objects.get(trace=trace, name="chat gpt-4o")
    if semconv:
        asked = [part["content"] for m in chat.data["input"] for part in m["parts"]]
        (answer,) = chat.data["output"][0]["parts"]
        answered = answer["content"]
    else:
        asked = [m["content"] for m in chat.data["input"]]
        answered = chat.data["output"][0]["content"]
    assert asked == ["Be brief.", "Weather in Paris?"]
    assert answered == "Rain <b>all</b> day."
    client.force_login(user)
    page = client.get(f"/traces/{trace.id}/steps/{chat.id}/")
    assert page.status_code == HTTPStatus.OK
    assert "Weather in Paris?" in page.content.decode()
    assert "Rain &lt;b&gt;all&lt;/b&gt; day." in page.content.decode()
    assert "<b>all</b>" not in page.content.decode()


VERCEL_AI = Path(__file__).resolve().parent / "vercel_ai"


def run_vercel_ai_agent(app_server: str, user: Any, *, answer: str, **env: str) -> Trace:
    """Run ``tests/traces/vercel_ai/agent.mjs`` (``run_program``, the token as ``x-api-key``;
    ``env`` added), the model calling the weather tool and then answering ``answer``; the
    trace it recorded."""
    require(
        shutil.which("node") is not None and (VERCEL_AI / "node_modules" / ".installed").exists(),
        "no Vercel AI SDK agent (make vercel-ai-agent: Node.js and npm)",
    )
    output = run_program(
        ["node", "agent.mjs"],
        app_server,
        user,
        replies=[{"tool_calls": [{"name": "getWeather", "arguments": {"city": "Paris"}}]}, answer],
        service="vercel-agent",
        env=env,
        cwd=VERCEL_AI,
        header="x-api-key={token}",
    )
    assert output.strip() == answer
    return Trace.objects.get(user=user)


def test_a_vercel_ai_sdk_agent_pointed_at_devassist_is_recorded(app_server, user):
    """The AI SDK's own telemetry (a ``generateText`` call, its two model calls and the tool
    call between them), sent by the OpenTelemetry Node SDK configured by the two variables."""
    trace = run_vercel_ai_agent(app_server, user, answer="Rain.")
    assert (trace.agent_type, trace.status) == ("vercel-agent", TraceStatus.COMPLETED)
    assert trace.task == "Weather in Paris?"  # its prompt
    (root,) = trace_tree(trace=trace)
    assert (root["name"], root["step_type"]) == ("ai.generateText", StepType.GOAL)
    calls = root["children"]
    assert [(c["name"], c["step_type"]) for c in calls] == [
        ("ai.generateText.doGenerate", StepType.THOUGHT),
        ("getWeather", StepType.ACTION),  # the tool's name: its span's says none
        ("ai.generateText.doGenerate", StepType.THOUGHT),
    ]
    # The call's usage restates its model calls': each token counted once.
    assert root["tokens"] == 0
    assert trace.total_tokens == calls[0]["tokens"] + calls[2]["tokens"] > 0
    tool = Step.objects.get(trace=trace, name="getWeather")
    assert tool.data["tool_name"] == "getWeather"
    assert tool.data["arguments"] == {"city": "Paris"}
    assert tool.data["result"] == {"city": "Paris", "sky": "rain"}
    first = Step.objects.get(pk=uuid.UUID(calls[0]["step_id"]))
    assert first.data["input"][0]["role"] == "user"
    assert first.data["output"][0]["toolName"] == "getWeather"


def test_a_vercel_ai_sdk_agent_over_otlp_json_keeps_an_emoji_cut_in_two(app_server, user):
    """The Node SDK's OTLP/JSON exporter with an attribute length limit, as many agents set
    one: a limit that ends inside an emoji leaves half of its surrogate pair, which the
    exporter writes as an escape (``\\ud83d``). The whole batch is stored, U+FFFD in the
    half's place (the exporter would drop a refused batch without a word)."""
    answer = "x" * 63 + "\U0001f600 rain"
    trace = run_vercel_ai_agent(
        app_server,
        user,
        answer=answer,
        OTEL_EXPORTER_OTLP_PROTOCOL="http/json",
        OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT="64",
    )
    assert (trace.status, trace.total_steps) == (TraceStatus.COMPLETED, 4)
    answered = Step.objects.filter(trace=trace, name="ai.generateText.doGenerate").latest("seq")
    assert answered.data["output"] == "x" * 63 + "\ufffd"


def test_openinference_s_instrumentation_of_openai_is_recorded(app_server, user, client):
    """Arize's ``openinference-instrumentation-openai``: an LLM span with the request and
    response as JSON and the messages flattened one attribute per field."""
    run_openai_agent("openinference", app_server, user)
    trace = Trace.objects.get(user=user)
    chat = Step.objects.get(trace=trace, name="ChatCompletion")
    assert (chat.step_type, chat.data["model"]) == (StepType.THOUGHT, "gpt-4o")
    assert chat.tokens == chat.data["usage"]["total_tokens"] == trace.total_tokens > 0
    assert chat.data["input"]["messages"][1] == {"role": "user", "content": "Weather in Paris?"}
    assert chat.data["input_messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather in Paris?"},
    ]
    assert chat.data["output_messages"] == [
        {"role": "assistant", "content": "Rain <b>all</b> day."}
    ]
    (offered,) = chat.data["tools"]
    assert offered["json_schema"]["function"]["name"] == "get_weather"  # the JSON text parsed
    client.force_login(user)
    page = client.get(f"/traces/{trace.id}/steps/{chat.id}/").content.decode()
    assert "Rain &lt;b&gt;all&lt;/b&gt; day." in page


def test_openllmetry_s_instrumentation_of_openai_is_recorded(app_server, user):
    """Traceloop's ``opentelemetry-instrumentation-openai`` (OpenLLMetry): a ``chat`` span with
    the GenAI conventions' messages as JSON text."""
    run_openai_agent("openllmetry", app_server, user, {"TRACELOOP_TRACE_CONTENT": "true"})
    trace = Trace.objects.get(user=user)
    chat = Step.objects.get(trace=trace, name="openai.chat")
    assert (chat.step_type, chat.data["model"]) == (StepType.THOUGHT, "gpt-4o")
    assert chat.tokens == chat.data["usage"]["total_tokens"] == trace.total_tokens > 0
    asked = [part["content"] for m in chat.data["input"] for part in m["parts"]]
    assert asked == ["Be brief.", "Weather in Paris?"]
    assert chat.data["output"][0]["parts"][0]["content"] == "Rain <b>all</b> day."


#: The model's answers to the agents with a ``get_weather`` tool: call it, then answer.
WEATHER_TOOL_REPLIES: list[Any] = [
    {"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}]},
    "Rain.",
]


def run_weather_agent(
    module: str, app_server: str, user: Any, *, service: str, **options: Any
) -> Trace:
    """Run the agent ``module`` (``run_agent``'s ``options``), which asks for the weather in
    Paris, its model calling the ``get_weather`` tool and then answering "Rain."; its trace,
    completed, named after ``service``."""
    output = run_agent(
        module, app_server, user, replies=WEATHER_TOOL_REPLIES, service=service, **options
    )
    assert output.strip() == "Rain."
    trace = Trace.objects.get(user=user)
    assert (trace.agent_type, trace.status) == (service, TraceStatus.COMPLETED)
    return trace


def test_a_pydantic_ai_agent_is_recorded(app_server, user, client):
    """Pydantic AI's instrumentation (the GenAI conventions: ``invoke_agent``, ``chat`` and
    ``execute_tool`` spans, messages as JSON text, its ``operation.cost``)."""
    trace = run_weather_agent(
        "tests.traces.pydantic_ai_agent", app_server, user, service="pydantic-agent"
    )
    (root,) = trace_tree(trace=trace)
    assert (root["name"], root["step_type"]) == ("invoke_agent agent", StepType.GOAL)
    assert [(c["name"], c["step_type"]) for c in root["children"]] == [
        ("chat gpt-4o", StepType.THOUGHT),
        ("execute_tool get_weather", StepType.ACTION),
        ("chat gpt-4o", StepType.THOUGHT),
    ]
    tool = Step.objects.get(trace=trace, name="execute_tool get_weather")
    assert tool.data["tool_name"] == "get_weather"
    assert tool.data["arguments"] == {"city": "Paris"}
    assert tool.data["result"] == "rain in Paris"
    first, _, last = root["children"]
    assert trace.total_tokens == first["tokens"] + last["tokens"] > 0
    assert trace.total_cost > 0  # its operation.cost, on the model calls
    answer = Step.objects.get(pk=uuid.UUID(last["step_id"]))
    assert answer.data["output"][0]["parts"][0]["content"] == "Rain."
    # The tools the model was offered, parsed; the run's answer and its whole conversation.
    assert [tool["name"] for tool in answer.data["tools"]] == ["get_weather"]
    run = Step.objects.get(pk=uuid.UUID(root["step_id"]))
    assert run.data["output"] == "Rain."
    assert [m["role"] for m in run.data["messages"]] == [
        "system",
        "user",
        "assistant",
        "user",
        "assistant",
    ]
    assert trace.task == "Weather in Paris?"


def test_an_openai_agents_sdk_agent_is_recorded(app_server, user, client):
    """The OpenAI Agents SDK traced by OpenInference: the workflow, the agent, its model
    calls and its tool."""
    trace = run_weather_agent(
        "tests.traces.openai_agents_agent", app_server, user, service="agents-sdk"
    )
    # The workflow's root span has no input: the trace is named after what the model was asked.
    assert trace.task == "Weather in Paris?"

    def shape(node: dict[str, Any]) -> tuple[Any, ...]:
        return (node["name"], node["step_type"], [shape(c) for c in node["children"]])

    (root,) = trace_tree(trace=trace)
    generation: tuple[Any, ...] = ("generation", StepType.THOUGHT, [])
    assert shape(root) == (
        "Agent workflow",
        StepType.GOAL,
        [
            (
                "Agent workflow",
                StepType.THOUGHT,
                [
                    (
                        "Weather agent",
                        StepType.GOAL,
                        [
                            ("turn", StepType.THOUGHT, [generation, ("get_weather", "action", [])]),
                            ("turn", StepType.THOUGHT, [generation]),
                        ],
                    )
                ],
            )
        ],
    )
    tool = Step.objects.get(trace=trace, name="get_weather")
    assert tool.data["tool_name"] == "get_weather"
    assert tool.data["arguments"] == {"city": "Paris"}
    assert tool.data["result"] == "rain in Paris"
    assert '"required": ["city"]' in tool.data["attributes"]["tool.parameters"]  # its schema
    first, last = Step.objects.filter(trace=trace, name="generation").order_by("started_at")
    assert first.data["output"][0]["tool_calls"][0]["function"]["name"] == "get_weather"
    assert last.data["input"][-1] == {
        "role": "tool",
        "content": "rain in Paris",
        "tool_call_id": "call_1",
    }
    assert last.data["output"][0]["content"] == "Rain."
    assert trace.total_tokens == first.tokens + last.tokens > 0


def test_an_agents_sdk_agent_with_its_openai_client_instrumented_too_counts_each_call_once(
    app_server, user, client
):
    """The OpenAI Agents SDK's and the OpenAI client's instrumentations both on: each model
    call is a ``generation`` step over a ``ChatCompletion`` one, both with the call's tokens;
    the trace counts them once, on the inner one (it counted each twice)."""
    trace = run_weather_agent(
        "tests.traces.openai_agents_agent",
        app_server,
        user,
        service="agents-sdk",
        args=("--with-openai",),
    )
    calls = list(Step.objects.filter(trace=trace, name="generation").order_by("started_at"))
    inner = [Step.objects.get(parent_id=call.id) for call in calls]
    assert [step.name for step in inner] == ["ChatCompletion", "ChatCompletion"]
    assert {step.step_type for step in calls + inner} == {StepType.THOUGHT}
    assert [call.tokens for call in calls] == [step.tokens for step in inner]
    assert all(call.tokens > 0 and call.tokens_counted_below for call in calls)
    assert not any(step.tokens_counted_below for step in inner)
    assert trace.total_tokens == sum(step.tokens for step in inner)
    (root,) = trace_tree(trace=trace)
    assert root["subtree_tokens"] == trace.total_tokens


def test_a_langchain_agent_is_recorded(app_server, user, client):
    """LangChain traced by OpenInference: the agent's runnable over its model calls (the
    messages flattened beside LangChain's own serialisation of them) and its tool."""
    trace = run_weather_agent(
        "tests.traces.langchain_agent", app_server, user, service="langchain-agent"
    )
    check_langchain_trace(trace)


def test_a_zero_code_agent_over_http_is_recorded(app_server, user, client):
    """The LangChain agent with no OTel code, run under ``opentelemetry-instrument`` (which
    instruments it with OpenInference's instrumentation and exports by the standard
    variables), set to OTLP/HTTP."""
    trace = run_weather_agent(
        "tests.traces.langchain_agent",
        app_server,
        user,
        service="langchain-agent",
        zero_code=True,
        env={"OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"},
    )
    check_langchain_trace(trace)


def check_langchain_trace(trace: Trace) -> None:
    """``tests.traces.langchain_agent``'s trace: named after the question; the agent over its
    two model calls and its tool between them, each with what it was given and gave."""
    assert trace.task == "Weather in Paris?"
    (root,) = trace_tree(trace=trace)
    assert (root["name"], root["step_type"]) == ("weather agent", StepType.GOAL)
    assert [(c["name"], c["step_type"]) for c in root["children"]] == [
        ("ChatOpenAI", StepType.THOUGHT),
        ("get_weather", StepType.ACTION),
        ("ChatOpenAI", StepType.THOUGHT),
    ]
    tool = Step.objects.get(trace=trace, name="get_weather")
    assert (tool.data["tool_name"], tool.data["result"]) == ("get_weather", "rain in Paris")
    first, last = Step.objects.filter(trace=trace, name="ChatOpenAI").order_by("started_at")
    assert first.data["input_messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather in Paris?"},
    ]
    (call,) = first.data["output_messages"][0]["tool_calls"]
    assert call["function"]["name"] == "get_weather"
    assert last.data["input_messages"][-1]["role"] == "tool"
    assert last.data["output_messages"] == [{"role": "assistant", "content": "Rain."}]
    assert trace.total_tokens == first.tokens + last.tokens > 0
    # The step's page shows the conversation once, the model's tool call as one: LangChain's
    # own serialisation of the same messages (its input) is folded away.
    _, shown = step_detail(trace=trace, step_id=last.id)
    values = {value.key: value for value in shown}
    assert (values["input"].messages, values["input"].folded) == (None, True)
    asked = values["input_messages"].messages
    assert asked is not None
    assert [message.role for message in asked] == ["system", "user", "assistant", "tool"]
    assert asked[1].text == "Weather in Paris?"
    (call,) = asked[2].calls
    assert call.startswith("get_weather(")
    assert "Paris" in call
    assert asked[3].text == "rain in Paris"


def agent_metrics() -> Any:
    """What an agent's SDK exports as metrics (a counter of two series, a histogram), read by
    an in-memory reader: what its periodic reader hands the exporter every minute."""
    reader = InMemoryMetricReader()
    meters = MeterProvider(metric_readers=[reader], shutdown_on_exit=False)
    meter = meters.get_meter("my.agent")
    calls = meter.create_counter("gen_ai.client.calls")
    calls.add(1, {"model": "gpt-4o"})
    calls.add(2, {"model": "gpt-4o-mini"})
    meter.create_histogram("gen_ai.client.operation.duration").record(0.4)
    data = reader.get_metrics_data()
    meters.shutdown()
    return data


def test_metrics_an_agent_exports_beside_its_traces_are_refused_without_a_failure(
    app_server, monkeypatch, user
):
    """Google's ADK and the Microsoft Agent Framework export metrics to
    OTEL_EXPORTER_OTLP_ENDPOINT whatever OTEL_METRICS_EXPORTER says, and a 404 made their
    exporters log a failure every minute: the export succeeds, its three data points refused
    (OTLP's partial success, which is not retried) with how to stop sending them."""
    _, token = api_token_create(user=user, name="sdk")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", app_server)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", f"x-api-key={token}")
    data = agent_metrics()
    assert OTLPMetricExporter().export(data) == MetricExportResult.SUCCESS

    body = encode_metrics(data).SerializeToString()
    for sent in (body, gzip.compress(body)):
        response = httpx.post(
            f"{app_server}/v1/metrics",
            content=sent,
            headers={
                "Content-Type": PROTOBUF,
                "x-api-key": token,
                **({"Content-Encoding": "gzip"} if sent is not body else {}),
            },
        )
        assert response.status_code == HTTPStatus.OK
        answer = ExportMetricsServiceResponse.FromString(response.content)
        assert answer.partial_success.rejected_data_points == 3
        assert "OTEL_METRICS_EXPORTER=none" in answer.partial_success.error_message
    # Without a token, as for traces.
    refused = httpx.post(
        f"{app_server}/v1/metrics", content=body, headers={"Content-Type": PROTOBUF}
    )
    assert refused.status_code == HTTPStatus.UNAUTHORIZED
