"""The chat UI in the system Chromium against DevAssist under daphne and the scripted model:
live step cards over one HTML stream, Stop, Run on code blocks, re-attaching after a reload,
refused messages, inert untrusted text."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from agent.models import AgentRun

pytestmark = pytest.mark.django_db(transaction=True)

HOSTILE = (
    'Look: <script>window.pwned = 1</script> <img src=x onerror="window.pwned = 2"> '
    '<div hx-get="/logout/" hx-trigger="load">hx</div>\n\n'
    "```python\nprint('<script>window.pwned = 3</script>')\n"
    'print(\'<div hx-get="/logout/" hx-trigger="load">x</div>\')\n```\n'
)


def send(page: Any, text: str, route: str = "auto") -> None:
    page.select_option("#route-select", route)
    page.fill("#composer-input", text)
    page.press("#composer-input", "Enter")


def test_a_step_card_appears_before_the_answer_and_expands(
    page, login, live_model, screenshot, sandbox_image
):
    live_model.script(
        [
            'Thought: run it\nAction: tool:execute_code\nargs: {"code": "print(6 * 7)"}',
            {"content": "Thought: done\nAction: final: The answer is **42**.", "delay_s": 2},
        ]
    )
    login("ada")
    requests: list[str] = []
    page.on("request", lambda request: requests.append(request.url))
    send(page, "compute 6*7 with python", route="agent")

    card = page.locator(".turn.assistant .step").first
    card.wait_for()
    assert page.locator(".turn.assistant .markdown").count() == 0  # the answer is not there yet
    assert "execute_code" in card.locator("summary").inner_text()
    assert not card.locator(".step-stdout").is_visible()
    card.locator("summary").click()
    assert card.locator(".step-stdout").inner_text() == "42\n"
    screenshot("step-expanded")

    page.locator(".turn.assistant .markdown strong").wait_for()
    assert page.locator(".turn.assistant .badge").inner_text() == "Agent"
    assert page.locator(".turn.assistant .model").inner_text() == "fake-model"
    assert re.search(r"/c/[0-9a-f-]{36}/$", page.url)
    page.locator(".conversation.current").wait_for()
    screenshot("answered")
    # One client follows the run: the page's HTML stream, not the JSON API's.
    assert (
        len([url for url in requests if re.search(r"/ui/chat/runs/[0-9a-f-]{36}/stream", url)]) == 1
    )
    assert not [url for url in requests if "/chat?stream" in url or "/events" in url]
    assert page.evaluate("sessionStorage.getItem('htmx-history-cache')") is None


def test_a_steps_hostile_output_stays_inert_live_and_after_a_reload(
    page, login, live_model, sandbox_image
):
    code = "print('<script>window.pwned = 4</script><img src=x onerror=\"window.pwned = 5\">')"
    live_model.script(
        [
            "Thought: <b>show</b> it\nAction: tool:execute_code\nargs: "
            + json.dumps({"code": code}),
            "Thought: done\nAction: final: Printed.",
        ]
    )
    login("ada")
    send(page, "print some html", route="agent")
    page.locator(".turn.assistant .markdown").wait_for(timeout=30_000)
    for _ in range(2):
        card = page.locator(".turn.assistant .step").first
        card.locator("summary").click()
        assert (
            card.locator(".step-stdout")
            .inner_text()
            .startswith("<script>window.pwned = 4</script><img")
        )
        assert card.locator(".step-thought").inner_text() == "<b>show</b> it"
        assert page.locator("#messages script, #messages img, #messages [onerror]").count() == 0
        assert page.evaluate("window.pwned") is None
        page.reload()


def test_a_refused_message_shows_as_a_failed_turn_and_the_composer_stays_usable(
    page, login, live_model
):
    live_model.script(["Short answer."])
    login("ada")
    send(page, "x" * 32_001, route="chat")
    page.locator(".turn.assistant.failed .run-error").wait_for()
    assert "longer than 32000 characters" in page.locator(".run-error").inner_text()
    assert page.locator("#stop-button").is_hidden()
    send(page, "a short one", route="chat")
    page.locator(".turn.assistant .markdown").wait_for()
    assert page.locator(".turn.assistant .markdown").inner_text().strip() == "Short answer."


def test_stop_cancels_the_run_on_the_server(page, login, live_model, screenshot):
    live_model.script([{"content": " ".join(f"word{i}" for i in range(60)), "chunk_delay_s": 0.2}])
    login("ada")
    send(page, "tell me a long story", route="chat")
    page.wait_for_function("document.querySelector('.streaming')?.textContent.length > 0")
    page.click("#stop-button")
    page.locator(".run-error").wait_for()
    assert page.locator(".run-error").inner_text() == "Stopped."
    screenshot("stopped")
    run = AgentRun.objects.get()
    assert run.status == "cancelled"
    assert page.locator("#stop-button").is_hidden()


def test_stop_before_the_first_token_cancels_the_model_call(page, login, live_model):
    live_model.script([{"content": "too late", "delay_s": 8}])
    login("ada")
    send(page, "think hard", route="chat")
    page.locator(".turn.assistant .badge.route-chat").wait_for()  # the run has an id
    page.keyboard.press("Escape")
    page.locator(".run-error").wait_for()
    assert page.locator(".run-error").inner_text() == "Stopped."
    assert AgentRun.objects.get().status == "cancelled"
    assert page.locator(".turn.assistant .answer-body").inner_text() == "Stopped."


def test_a_code_block_runs_in_the_sandbox_and_hostile_text_stays_inert(
    page, login, live_model, screenshot, sandbox_image
):
    live_model.script([HOSTILE])
    login("ada")
    send(page, "show me something", route="chat")
    page.locator(".turn.assistant .codeblock").wait_for()

    run = page.locator(".codeblock .code-run")
    run.click()
    run.click()  # ignored while the first run is going
    page.locator(".code-output .out-stdout").wait_for(timeout=30_000)
    stdout = page.locator(".code-output .out-stdout").inner_text()
    assert stdout.startswith("<script>window.pwned = 3</script>")
    assert page.locator(".code-output .out-stdout").count() == 1
    assert "exit code 0" in page.locator(".code-output .out-status").first.inner_text()
    screenshot("code-run")

    messages = page.locator("#messages")
    assert messages.locator("script").count() == 0
    assert messages.locator("[hx-get], [onerror]").count() == 0
    assert page.evaluate("window.pwned") is None
    assert "<script>window.pwned = 1</script>" in messages.inner_text()
    page.reload()  # the stored answer renders as inertly from the server
    page.locator(".turn.assistant .codeblock").wait_for()
    assert page.locator("#messages script, #messages [hx-get], #messages [onerror]").count() == 0
    assert page.evaluate("window.pwned") is None


def test_a_reload_mid_run_re_attaches_without_duplicates(page, login, live_model, screenshot):
    words = [f"w{i} " for i in range(30)]
    live_model.script([{"content": "".join(words), "chunks": words, "chunk_delay_s": 0.1}])
    login("ada")
    send(page, "count slowly", route="chat")
    page.wait_for_function("document.querySelector('.streaming')?.textContent.includes('w3')")
    page.reload()
    page.locator(".turn.assistant .markdown").wait_for(timeout=20_000)
    assert page.locator(".turn.assistant").count() == 1
    assert page.locator(".turn.user").count() == 1
    assert page.locator(".turn.assistant .markdown").inner_text().strip() == "".join(words).strip()
    screenshot("reattached")
    assert AgentRun.objects.get().status == "completed"


def test_sidebar_searches_renames_and_deletes(page, login, live_model):
    live_model.script(["First answer.", "Second answer."])
    login("ada")
    send(page, "alpha question", route="chat")
    page.locator(".turn.assistant .markdown").wait_for()
    page.goto("/")
    send(page, "beta question", route="chat")
    page.locator(".turn.assistant .markdown").wait_for()
    page.locator(".conversation", has_text="alpha question").wait_for()

    page.fill("#conversation-search", "alpha")
    page.wait_for_function("document.querySelectorAll('.conversation').length === 1")
    row = page.locator(".conversation").first
    page.once("dialog", lambda dialog: dialog.accept("Renamed chat"))
    row.hover()
    row.locator(".rename").click()
    page.locator(".conversation", has_text="Renamed chat").wait_for()
    page.once("dialog", lambda dialog: dialog.accept())
    page.locator(".conversation", has_text="Renamed chat").hover()
    page.locator(".conversation", has_text="Renamed chat").locator(".delete").click()
    page.wait_for_function("document.querySelectorAll('.conversation').length === 0")
    from chat.models import Conversation

    assert list(Conversation.objects.values_list("title", flat=True)) == ["beta question"]


def test_phone_layout_and_shortcuts_help(page, login, screenshot):
    login("ada")
    page.set_viewport_size({"width": 390, "height": 780})
    page.goto("/")
    page.keyboard.press("?")
    assert page.locator("#shortcuts").is_visible()
    screenshot("phone-help")
    page.keyboard.press("Escape")
    assert page.locator("#shortcuts").is_hidden()
