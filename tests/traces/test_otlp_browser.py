"""Traces that came in over OTLP in the trace browser (the system Chromium, DevAssist under
daphne): an OpenInference-style and a GenAI-style trace rendered, a model call's messages
from log records, spans that arrive children first moving under their parent live, and a
quiet trace's notice."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

import httpx
import pytest
from django.utils import timezone

from devassist.tokens import api_token_create
from tests.traces.otlp_clients import (
    PROTOBUF,
    logs_body,
    protobuf_body,
    sdk_spans,
    sdk_spans_and_logs,
)
from tests.traces.test_otlp_agent_frameworks import strands_agent
from tests.traces.test_otlp_ingest import genai_agent, openinference_agent, step_of
from tests.traces.test_otlp_logs import legacy_chat, two_tools
from traces.models import Step

pytestmark = pytest.mark.django_db(transaction=True)


def send(app_server: str, token: str, spans: list[Any], *, path: str = "/v1/traces") -> None:
    body = logs_body(spans) if path == "/v1/logs" else protobuf_body(spans)
    response = httpx.post(
        f"{app_server}{path}",
        content=body,
        headers={"Content-Type": PROTOBUF, "Authorization": f"Bearer {token}"},
        timeout=30,
    )
    assert response.status_code == 200, response.text


def send_logs(app_server: str, token: str, records: list[Any]) -> None:
    send(app_server, token, records, path="/v1/logs")


def trace_id(spans: list[Any]) -> uuid.UUID:
    return uuid.UUID(int=spans[0].context.trace_id)


def test_an_openinference_trace_in_the_browser(page, login, screenshot, app_server) -> None:
    user = login("ada")
    _, token = api_token_create(user=user, name="otel")
    spans = sdk_spans(openinference_agent, service="calc-agent")
    send(app_server, token, spans)

    page.goto(f"/traces/{trace_id(spans)}/")
    page.locator("h1").filter(has_text="What is 2+2?").wait_for()
    tree = page.locator("#tree")
    root = tree.locator("li.node.t-goal").first
    assert "agent" in root.locator(":scope > .row .name").inner_text()
    llm = tree.locator("li.node.t-thought").first
    assert "ChatCompletion" in llm.inner_text()
    assert "15 tok" in llm.inner_text()
    tool = tree.locator("li.node.t-action").first
    assert "err" in (tool.get_attribute("class") or "")
    assert tree.locator("li.node.t-memory_read").count() == 1
    page.locator('[data-total="error_count"]').filter(has_text="1").wait_for()
    assert "calc-agent" in page.locator(".totals").inner_text()

    tool.locator(":scope > .row a.name").click()
    detail = page.locator("#detail")
    detail.filter(has_text="the calculator timed out").wait_for()
    assert "tool_name" in detail.inner_text()
    assert "openinference.span.kind" in detail.inner_text()
    screenshot("openinference")


def test_a_genai_trace_in_the_browser(page, login, screenshot, app_server) -> None:
    user = login("ada")
    _, token = api_token_create(user=user, name="otel")
    spans = sdk_spans(genai_agent, service="weather-agent")
    send(app_server, token, spans)

    page.goto(f"/traces/{trace_id(spans)}/")
    chat = page.locator("#tree li.node.t-thought").first
    chat.wait_for()
    assert "chat gpt-4o" in chat.inner_text()
    assert "42 tok" in chat.inner_text()
    tool = page.locator("#tree li.node.t-action").first
    assert "execute_tool get_weather" in tool.inner_text()
    assert "err" in (tool.get_attribute("class") or "")
    page.locator('[data-total="total_tokens"]').filter(has_text="42").wait_for()

    chat.locator(":scope > .row a.name").click()
    page.locator("#detail").filter(has_text="Weather in Paris?").wait_for()
    screenshot("genai")


def test_a_model_call_s_messages_from_log_records_in_the_browser(
    page, login, screenshot, app_server
) -> None:
    """A model call recorded as OpenTelemetry's OpenAI instrumentation records it: its
    messages came as log records, before the spans; the detail pane shows them as a
    conversation, the answer's markup as text."""
    user = login("ada")
    _, token = api_token_create(user=user, name="otel")
    spans, records = sdk_spans_and_logs(legacy_chat, service="weather-agent")
    send_logs(app_server, token, records)
    send(app_server, token, spans)

    page.goto(f"/traces/{trace_id(spans)}/")
    chat = page.locator("#tree li.node.t-thought").first
    chat.locator(":scope > .row a.name").click()
    detail = page.locator("#detail")
    detail.locator(".messages").first.wait_for()
    assert detail.locator(".messages .role").all_inner_texts() == ["system", "user", "assistant"]
    assert "Rain <b>all</b> day." in detail.locator(".messages").last.inner_text()
    assert detail.locator(".messages b").count() == 0
    screenshot("messages")


def test_a_strands_agent_s_model_call_in_the_browser(page, login, screenshot, app_server) -> None:
    """A Strands agent (its messages as span events of Amazon Bedrock's Converse blocks): the
    second model call's conversation shows its text, the tool call and the tool's answer; the
    trace counts the run's tokens once."""
    user = login("ada")
    _, token = api_token_create(user=user, name="otel")
    spans = sdk_spans(strands_agent, service="strands-agent")
    send(app_server, token, spans)

    (second_call,) = [s for s in spans if s.name == "chat"][1:]
    page.goto(f"/traces/{trace_id(spans)}/?step={step_of(second_call)}")
    page.locator("h1").filter(has_text="Weather in Paris?").wait_for()
    assert page.locator('[data-total="total_tokens"]').inner_text() == "35"
    detail = page.locator("#detail")
    detail.locator(".messages").first.wait_for()
    asked = detail.locator(".messages").first
    assert asked.locator(".role").all_inner_texts() == ["system", "user", "assistant", "tool"]
    assert asked.locator(".calls code").inner_text() == 'get_weather({"city": "Paris"})'
    assert "rain in Paris" in asked.locator(".message").last.inner_text()
    assert "Rain in Paris." in detail.locator(".messages").last.inner_text()
    screenshot("strands")


def test_log_records_waiting_for_their_spans_in_the_browser(
    page, login, screenshot, app_server
) -> None:
    """Records whose spans have not arrived are listed above the tree; a span's go from the
    list as it arrives, and once the trace ends the rest are said never to have come."""
    user = login("ada")
    _, token = api_token_create(user=user, name="otel")
    spans, records = sdk_spans_and_logs(two_tools, service="tool-agent")
    search, fetch, root = spans
    send_logs(app_server, token, records)

    page.goto(f"/traces/{trace_id(spans)}/")
    page.locator("#live-state").filter(has_text="live").wait_for()
    waiting = page.locator("#waiting-logs")
    waiting.locator("summary").click()
    assert waiting.locator(".waiting-span").count() == 2
    assert "fetch: <script>alert(1)</script>" in waiting.inner_text()
    assert waiting.locator("script").count() == 0
    screenshot("waiting")

    send(app_server, token, [search])
    page.locator(f'[data-waiting-step="{step_of(search)}"]').wait_for(state="detached")
    assert "wait for 1 span that has not arrived" in waiting.locator("summary").inner_text()
    send(app_server, token, [root])
    page.locator("#trace-status").filter(has_text="completed").wait_for()
    waiting.locator("summary").filter(has_text="1 span that never arrived").wait_for()
    assert waiting.locator(f'[data-waiting-step="{step_of(fetch)}"]').count() == 1


def test_spans_sent_before_their_parent_move_under_it_live(
    page, login, screenshot, app_server
) -> None:
    user = login("ada")
    _, token = api_token_create(user=user, name="otel")
    spans = sdk_spans(openinference_agent)
    children, root = spans[:-1], spans[-1]
    send(app_server, token, children)

    page.goto(f"/traces/{trace_id(spans)}/")
    page.locator("#live-state").filter(has_text="live").wait_for()
    top = page.locator("#tree > ul.tree > li.node")
    assert top.count() == 3
    # Its root has not come: named after its model call's question until it does.
    assert page.locator("#trace-task").inner_text() == "2+2"
    screenshot("waiting")

    send(app_server, token, [root])
    page.wait_for_function("document.querySelectorAll('#tree > ul.tree > li.node').length === 1")
    agent = top.first
    assert "agent" in agent.locator(":scope > .row .name").inner_text()
    agent.locator("li.node.t-action").wait_for()
    assert agent.locator("li.node").count() == 3
    assert page.locator("#tree li.node").count() == 4
    page.locator("#trace-status").filter(has_text="completed").wait_for()
    # The task came with the root span: the header shows it without a reload.
    page.locator("#trace-task").filter(has_text="What is 2+2?").wait_for()
    assert page.title().startswith("What is 2+2? · ")
    screenshot("attached")


def test_steps_waiting_for_their_parent_are_listed_live(
    page, login, screenshot, app_server
) -> None:
    """Spans sent before their parent are listed above the tree with the span they wait for;
    the list follows as more come and empties when the parent arrives; an entry opens its
    step in the tree."""
    user = login("ada")
    _, token = api_token_create(user=user, name="otel")
    spans = sdk_spans(openinference_agent)
    children, root = spans[:-1], spans[-1]
    send(app_server, token, children[:2])

    page.goto(f"/traces/{trace_id(spans)}/")
    page.locator("#live-state").filter(has_text="live").wait_for()
    waiting = page.locator("#waiting-steps")
    summary = waiting.locator("summary")
    assert "2 steps wait at the top level" in summary.inner_text()
    summary.click()
    parent = f"{root.context.span_id:016x}"
    assert waiting.locator(".waiting-list li").count() == 2
    assert f"waits for span {parent}" in waiting.inner_text()

    send(app_server, token, children[2:])  # another top-level step: the list reads anew
    summary.filter(has_text="3 steps wait at the top level").wait_for()
    page.wait_for_function("document.querySelector('#waiting-steps details').open")  # left open
    waiting.get_by_role("link", name="calculator").click()
    calculator = next(span for span in children if span.name == "calculator")
    page.locator(f"#s-{step_of(calculator)}.selected").wait_for()
    screenshot("waiting-steps")

    send(app_server, token, [root])  # they move under it: none waits
    waiting.locator("details").wait_for(state="detached")
    page.locator("#trace-status").filter(has_text="completed").wait_for()
    assert page.locator("#tree > ul.tree > li.node").count() == 1
    # The selected step stays selected where it moved, its detail shown.
    page.locator(f"#tree > ul.tree > li.node li#s-{step_of(calculator)}.selected").wait_for()
    assert page.locator("#tree li.node.selected").count() == 1
    assert "calculator" in page.locator("#detail").inner_text()


def test_a_quiet_trace_says_so_until_a_span_arrives(page, login, app_server) -> None:
    """A running trace with no new span for a while says its root span may never come;
    the notice goes as soon as one arrives."""
    user = login("ada")
    _, token = api_token_create(user=user, name="otel")
    spans = sdk_spans(openinference_agent)
    first, second, rest = spans[:1], spans[1:2], spans[2:-1]

    def quiet_for_20_minutes() -> None:
        Step.objects.filter(trace_id=trace_id(spans)).update(
            created_at=timezone.now() - timedelta(minutes=20)
        )

    send(app_server, token, first)
    quiet_for_20_minutes()
    # The list marks the trace's row, and unmarks it when a span arrives.
    page.goto("/traces/")
    mark = page.locator(f"#t-{trace_id(spans)} .quiet-mark")
    assert "no span for 20" in mark.inner_text()
    # Sent before or after the row's watch connects: it replays from the row's last seq.
    send(app_server, token, second)
    mark.wait_for(state="detached")
    quiet_for_20_minutes()

    page.goto(f"/traces/{trace_id(spans)}/")
    page.locator("#live-state").filter(has_text="live").wait_for()
    assert "No span has arrived for 20" in page.locator("#trace-quiet").inner_text()

    send(app_server, token, rest)
    page.locator("#trace-quiet").wait_for(state="detached")
    page.wait_for_function("document.querySelectorAll('#tree li.node').length === 3")


def many_tools(tracer: Any) -> None:
    """An agent over 30 sub-agents of 4 tool calls each: every span but the root's ends
    before it, so sent as they end they wait at the top level, more than a window of them."""
    with tracer.start_as_current_span("agent", attributes={"openinference.span.kind": "AGENT"}):
        for task in range(30):
            with tracer.start_as_current_span(
                f"task {task}", attributes={"openinference.span.kind": "CHAIN"}
            ):
                for call in range(4):
                    with tracer.start_as_current_span(
                        f"tool {task}.{call}", attributes={"openinference.span.kind": "TOOL"}
                    ):
                        pass


def test_a_burst_moving_more_than_a_window_ends_as_the_tree_a_reload_shows(
    page, login, screenshot, app_server
) -> None:
    """The page opens while 60 spans wait at the top level (a window of 50 and "show 10
    more"). 60 more come that it cannot show (they would follow the window's link): it does
    not ask for them. Then their parents, the root last: rows move away from under the
    link, the top level is loaded again, and the page ends with the one tree (it ended with
    a stale "show more" and nothing above it)."""
    user = login("ada")
    _, token = api_token_create(user=user, name="otel")
    spans = sdk_spans(many_tools)
    tools = [s for s in spans if s.name.startswith("tool")]
    parents = [s for s in spans if not s.name.startswith("tool")]
    assert (len(tools), len(parents)) == (120, 31)
    send(app_server, token, tools[:60])

    page.goto(f"/traces/{trace_id(spans)}/")
    page.locator("#live-state").filter(has_text="live").wait_for()
    top = page.locator("#tree > ul.tree > li.node")
    assert top.count() == 50
    assert page.locator("#tree > ul.tree > li.more").inner_text() == "show 10 more"

    send(app_server, token, tools[60:])
    page.locator('[data-total="total_steps"]').filter(has_text="120").wait_for()
    page.wait_for_timeout(500)  # a flush's time and more
    asked = page.evaluate(
        """performance.getEntriesByType("resource")
            .filter((e) => e.name.includes("/rows/?ids="))
            .reduce((n, e) => n + new URL(e.name).searchParams.get("ids").split(",").length, 0)"""
    )
    assert asked == 0
    assert top.count() == 50

    for part in range(0, len(parents), 10):
        send(app_server, token, parents[part : part + 10])
    page.locator("#trace-status").filter(has_text="completed").wait_for()
    # The end, not a moment on the way: while the rows leave, the top level passes through
    # one row above the stale link, until the flush's reload of it is in.
    page.wait_for_function(
        "document.querySelectorAll('#tree > ul.tree > li.node').length === 1"
        " && !document.querySelector('#tree > ul.tree > li.more')"
    )
    assert page.locator("#tree > ul.tree > li.more").count() == 0
    agent = top.first
    assert agent.locator(":scope > .row .name").inner_text() == "agent"
    tasks = agent.locator(":scope > ul.children > li.node")
    tasks.nth(29).wait_for()
    assert tasks.count() == 30
    assert tasks.first.locator(":scope > .row .name").inner_text() == "task 0"
    screenshot("burst")
    page.reload()
    assert page.locator("#tree > ul.tree > li.node").count() == 1
    assert page.locator("#tree > ul.tree > li.node > ul.children > li.node").count() == 30
