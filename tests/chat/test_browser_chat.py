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

#: The answer as the server rendered it (the live turn's streamed rendering is
#: ``.markdown.streamed``).
ANSWER = ".turn.assistant .markdown:not(.streamed)"


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

    card = page.locator(".turn.assistant .step:not(.running)").first
    card.wait_for()
    assert page.locator(ANSWER).count() == 0  # the answer is not there yet
    assert "execute_code" in card.locator("summary").inner_text()
    assert not card.locator(".step-stdout").is_visible()
    card.locator("summary").click()
    assert card.locator(".step-stdout").inner_text() == "42\n"
    screenshot("step-expanded")

    page.locator(f"{ANSWER} strong").wait_for()
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
    page.locator(ANSWER).wait_for(timeout=30_000)
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


def test_a_running_program_shows_its_card_and_printed_lines_before_it_ends(
    page, login, live_model, screenshot, sandbox_image
):
    code = "import time\nfor i in range(3):\n    print('line', i, flush=True)\n    time.sleep(1)"
    live_model.script(
        [
            "Thought: count\nAction: tool:execute_code\nargs: " + json.dumps({"code": code}),
            "Thought: done\nAction: final: Counted.",
        ]
    )
    login("ada")
    send(page, "count with python", route="agent")

    card = page.locator(".turn.assistant .step.running")
    card.wait_for()
    assert "execute_code" in card.locator("summary").inner_text()
    # The lines appear one by one while the program still runs (its card is the running one).
    page.wait_for_function(
        "document.querySelector('.step.running .live-stdout')?.textContent === 'line 0\\n'"
    )
    page.wait_for_function(
        "document.querySelector('.step.running .live-stdout')?.textContent.includes('line 1')"
    )
    assert card.locator(".step-elapsed").inner_text().endswith(" s")
    assert card.locator(".live-stderr").is_hidden()  # nothing printed there
    screenshot("running")
    assert page.locator(ANSWER).count() == 0

    # When the tool is done its finished card takes the running card's place.
    page.locator(ANSWER).wait_for(timeout=30_000)
    assert page.locator(".turn.assistant .step").count() == 1
    finished = page.locator(".turn.assistant .step")
    assert "running" not in (finished.get_attribute("class") or "")
    finished.locator("summary").click()
    assert finished.locator(".step-stdout").inner_text() == "line 0\nline 1\nline 2\n"
    screenshot("finished")


def test_stop_while_a_program_runs_leaves_its_card_stopped_with_what_it_printed(
    page, login, live_model, sandbox_image
):
    code = "import time\nfor i in range(30):\n    print('tick', i, flush=True)\n    time.sleep(1)"
    live_model.script(
        ["Thought: tick\nAction: tool:execute_code\nargs: " + json.dumps({"code": code})]
    )
    login("ada")
    send(page, "tick for a while", route="agent")
    page.wait_for_function(
        "document.querySelector('.step.running .live-stdout')?.textContent.includes('tick 0')"
    )
    page.click("#stop-button")
    page.locator(".run-error").wait_for()
    # The run's ``done`` (after its ``run-error``) ends the stream, and the running card stops.
    page.locator(".turn.assistant .step.stopped").wait_for()
    card = page.locator(".turn.assistant .step")
    assert card.get_attribute("class") == "step stopped"
    assert card.locator(".step-stopped").is_visible()
    assert card.locator(".step-elapsed").is_hidden()
    assert card.locator(".live-stdout").inner_text().startswith("tick 0\n")
    assert AgentRun.objects.get().status == "cancelled"


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
    page.locator(ANSWER).wait_for()
    assert page.locator(ANSWER).inner_text().strip() == "Short answer."


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
    page.locator(ANSWER).wait_for(timeout=20_000)
    assert page.locator(".turn.assistant").count() == 1
    assert page.locator(".turn.user").count() == 1
    assert page.locator(ANSWER).inner_text().strip() == "".join(words).strip()
    screenshot("reattached")
    assert AgentRun.objects.get().status == "completed"


def test_sidebar_searches_renames_and_deletes(page, login, live_model):
    live_model.script(["First answer.", "Second answer."])
    login("ada")
    send(page, "alpha question", route="chat")
    page.locator(ANSWER).wait_for()
    page.goto("/")
    send(page, "beta question", route="chat")
    page.locator(ANSWER).wait_for()
    page.locator(".conversation", has_text="alpha question").wait_for()

    page.fill("#conversation-search", "alpha")
    page.wait_for_function("document.querySelectorAll('.conversation').length === 1")
    row = page.locator(".conversation").first
    row.hover()
    row.locator(".rename").click()
    page.get_by_label("Title").fill("Renamed chat")
    page.get_by_role("button", name="Save").click()
    page.locator(".conversation", has_text="Renamed chat").wait_for()
    page.locator(".conversation", has_text="Renamed chat").hover()
    page.locator(".conversation", has_text="Renamed chat").locator(".delete").click()
    page.wait_for_function("document.querySelectorAll('.conversation').length === 0")
    page.locator(".toast", has_text="Renamed chat").wait_for()
    from chat.models import Conversation

    shown = Conversation.objects.filter(deleted_at__isnull=True)
    assert list(shown.values_list("title", flat=True)) == ["beta question"]


def test_phone_layout_and_shortcuts_help(page, login, screenshot):
    login("ada")
    page.set_viewport_size({"width": 390, "height": 780})
    page.goto("/")
    page.keyboard.press("?")
    assert page.locator("#shortcuts").is_visible()
    screenshot("phone-help")
    page.keyboard.press("Escape")
    assert page.locator("#shortcuts").is_hidden()


def words(count: int, prefix: str = "word") -> str:
    return " ".join(f"{prefix}{i}" for i in range(count))


def test_the_answer_renders_as_markdown_while_it_streams(page, login, live_model, screenshot):
    text = (
        "## The plan\n\nThis is **bold** text.\n\n```python\nprint(6 * 7)\n```\n\n"
        + words(40, "tail")
        + "\n"
    )
    live_model.script([{"content": text, "chunk_delay_s": 0.05}])
    login("ada")
    page.evaluate(
        """document.addEventListener("htmx:sseBeforeMessage", (event) => {
          if (event.detail.type !== "done") return;
          window.streamedHeight = event.target.getBoundingClientRect().height;
        })"""
    )
    send(page, "plan it", route="chat")

    streamed = page.locator(".turn.assistant.live .markdown.streamed")
    for selector in ("h2", "strong", ".codeblock pre"):
        streamed.locator(selector).wait_for()
    page.evaluate("window.heading = document.querySelector('.markdown.streamed h2')")
    page.wait_for_function("document.querySelector('.streaming').textContent.includes('tail5')")
    assert page.locator(".turn.assistant.live").count() == 1  # before the stream's done
    assert "**" not in streamed.inner_text()
    assert "##" not in streamed.inner_text()
    # Completed blocks keep their nodes while the text after them grows.
    assert page.evaluate("document.querySelector('.markdown.streamed h2') === window.heading")
    assert streamed.locator(".code-run").is_disabled()
    screenshot("mid-stream")

    page.locator(ANSWER).wait_for()
    final = page.locator(ANSWER)
    assert final.locator("h2").inner_text() == "The plan"
    assert final.locator(".codeblock .tok-nb").first.inner_text() == "print"  # the server's
    assert final.locator(".code-run").is_enabled()
    # The server's rendering takes the streamed one's place without moving anything.
    height = page.locator(".turn.assistant .answer-body").bounding_box()["height"]
    assert abs(height - page.evaluate("window.streamedHeight")) < 1


def test_hostile_text_mid_stream_runs_no_script_and_links_nowhere(page, login, live_model):
    hostile = (
        'Look <img src=x onerror="window.pwned = 1"> <script>window.pwned = 2</script> '
        "[x](javascript:window.pwned=3) <javascript:window.pwned=4> "
        "![y](javascript:window.pwned=5) [ok](https://example.com/)\n\n"
    )
    live_model.script([{"content": hostile + words(30, "tail"), "chunk_delay_s": 0.05}])
    login("ada")
    send(page, "say something odd", route="chat")

    page.wait_for_function("document.querySelector('.streaming')?.textContent.includes('tail3')")
    streamed = page.locator(".turn.assistant.live .markdown.streamed")
    assert "<img src=x" in streamed.inner_text()
    assert streamed.locator("a[href='https://example.com/']").count() == 1
    for _ in range(2):  # mid-stream, then the final rendering
        assert page.locator("#messages script, #messages img, #messages [onerror]").count() == 0
        assert page.locator("#messages [href^='javascript' i], #messages [src]").count() == 0
        assert page.evaluate("window.pwned") is None
        page.locator(ANSWER).wait_for()


#: What scrolls the messages: the messages themselves on a desktop, the page on a phone.
SCROLLER = (
    "(() => { const m = document.querySelector('#messages');"
    " return m.scrollHeight > m.clientHeight ? m : document.scrollingElement; })()"
)
DISTANCE = f"(s => s.scrollHeight - s.scrollTop - s.clientHeight)({SCROLLER})"
STREAMED_LENGTH = "document.querySelector('.streaming').textContent.length"


@pytest.mark.parametrize(("width", "height"), [(1280, 600), (390, 844)], ids=["desktop", "phone"])
def test_scrolling_up_holds_the_position_and_jump_to_latest_follows_again(
    page, login, live_model, screenshot, width, height
):
    lines = [f"Line {i} of a long answer.\n\n" for i in range(160)]
    live_model.script([{"content": "".join(lines), "chunks": lines, "chunk_delay_s": 0.05}])
    page.set_viewport_size({"width": width, "height": height})
    login("ada")
    send(page, "a long one", route="chat")
    page.wait_for_function(f"{SCROLLER}.scrollTop > 400")
    assert page.evaluate(DISTANCE) < 30  # following

    page.mouse.move(width / 2, height / 2)
    page.mouse.wheel(0, -300)
    page.wait_for_function(f"{DISTANCE} > 200")
    page.wait_for_timeout(300)  # the wheel's smooth scroll settles
    held = page.evaluate(f"{SCROLLER}.scrollTop")
    length = page.evaluate(STREAMED_LENGTH)
    page.wait_for_function(f"{STREAMED_LENGTH} > {length} + 200")
    page.wait_for_timeout(100)
    assert page.evaluate(f"{SCROLLER}.scrollTop") == held
    jump = page.locator("#jump-latest")
    assert jump.is_visible()
    screenshot("held")

    jump.focus()
    page.keyboard.press("Enter")
    page.wait_for_function(f"{DISTANCE} < 2")
    assert jump.is_hidden()
    assert page.evaluate("document.activeElement.id") == "composer-input"
    length = page.evaluate(STREAMED_LENGTH)
    page.wait_for_function(f"{STREAMED_LENGTH} > {length} + 200")
    page.wait_for_timeout(100)
    assert page.evaluate(DISTANCE) < 2  # following again
    page.locator(ANSWER).wait_for(timeout=20_000)
    page.wait_for_timeout(100)
    assert page.evaluate(DISTANCE) < 2


def test_output_blocks_have_no_run_button_and_code_arguments_are_highlighted(
    page, login, live_model, screenshot, sandbox_image
):
    live_model.script(
        [
            'Thought: run it\nAction: tool:execute_code\nargs: {"code": "print(6 * 7)"}',
            "Thought: done\nAction: final: It printed:\n\n```\n42\n```\n\n"
            "from:\n\n```python\nprint(6 * 7)\n```",
        ]
    )
    login("ada")
    send(page, "compute 6*7 with python", route="agent")
    answer = page.locator(ANSWER)
    answer.wait_for(timeout=30_000)
    output, code = answer.locator(".codeblock").all()
    assert output.locator(".code-run").count() == 0
    assert output.locator(".code-copy").count() == 1
    assert code.locator(".code-run").count() == 1

    card = page.locator(".turn.assistant .step").first
    card.locator("summary").click()
    assert card.locator(".step-args-code .tok-nb").inner_text() == "print"
    assert card.locator(".step-args-code").inner_text().strip() == "print(6 * 7)"
    screenshot("highlighted-arguments")
