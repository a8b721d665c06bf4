"""The debug panel in the system Chromium, against DevAssist under daphne and the scripted model:
the entry only for a superuser in debug mode, the panel closing when debug mode goes off, the
timeline's range filtering the list, JSON trees, copying JSON (with and without the Clipboard
API), live refreshes during a run, Langfuse's answer shown plainly, hostile text inert."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest

from agent.models import AgentRun
from tests.agent.test_langfuse import LangfuseReceiver
from tests.browser import PASSWORD, browser_user, live_server_env
from tests.servers import daphne_server

pytestmark = pytest.mark.django_db(transaction=True)

AGENT_TURN = [
    {
        "content": "Thought: look it up\nAction: tool:search_docs\n"
        'args: {"query": "sandbox memory"}',
        "delay_s": 1.5,
    },
    {"content": "Thought: done\nAction: final: The sandbox has 256 MB.", "delay_s": 1.5},
]
HOSTILE_TURN = [
    'Thought: look\nAction: tool:search_docs\nargs: {"query": "x", '
    '"collection_name": "\\"></pre><img src=x onerror=\\"window.pwned = 1\\">"}',
    "Thought: done\nAction: final: <script>window.pwned = 2</script> "
    '<div hx-get="/logout/" hx-trigger="load">x</div>',
]


def send(page: Any, text: str, route: str = "auto") -> None:
    page.select_option("#route-select", route)
    page.fill("#composer-input", text)
    page.press("#composer-input", "Enter")


def answered(page: Any, count: int = 1) -> None:
    page.wait_for_function(
        "document.querySelectorAll('.turn.assistant .answer-body .markdown:not(.streamed)')"
        f".length >= {count}"
    )


def debug_mode(page: Any, on: bool) -> None:
    switch = page.locator("#debug-mode-switch")
    if (switch.get_attribute("aria-checked") == "true") != on:
        switch.click()
    page.wait_for_function(
        "on => document.querySelector('#debug-mode-switch')"
        ".getAttribute('aria-checked') === String(on)",
        arg=on,
    )


def open_panel(page: Any) -> Any:
    page.click("#debug-open")
    panel = page.locator("#debug-panel .dbg")
    panel.wait_for()
    return panel


def panel_after_one_turn(
    page: Any, login: Any, live_model: Any, script: list[Any], message: str, route: str
) -> Any:
    """A superuser in debug mode, one answered turn (the model replying with ``script``) and
    the panel open on it."""
    live_model.script(script)
    login("root", is_superuser=True, is_staff=True)
    send(page, message, route=route)
    answered(page)
    debug_mode(page, True)
    return open_panel(page)


def conversation_of(page: Any) -> str:
    found = re.search(r"/c/([0-9a-f-]{36})/$", page.url)
    assert found, page.url
    return found.group(1)


def visible_keys(page: Any) -> list[str]:
    return page.eval_on_selector_all(
        ".dbg-entry", "rows => rows.filter(r => !r.hidden).map(r => r.dataset.key)"
    )


def test_the_entry_is_not_offered_to_a_normal_user(page, login, live_model):
    live_model.script(["Hello."])
    login("ada")
    send(page, "hello", route="chat")
    answered(page)
    assert page.locator("#debug-mode-switch, #debug-open, #debug-panel").count() == 0
    conversation = conversation_of(page)
    refused = page.request.get(f"/ui/chat/conversations/{conversation}/debug")
    assert refused.status == 403
    assert page.request.post("/ui/chat/debug-mode", form={"on": "1"}).status == 403


def test_the_entry_appears_in_debug_mode_and_goes_with_the_panel_when_it_is_off(
    page, login, live_model, screenshot
):
    live_model.script(AGENT_TURN)
    login("root", is_superuser=True, is_staff=True)
    send(page, "how much memory does the sandbox get?", route="agent")
    answered(page)
    assert page.locator("#debug-mode-switch").get_attribute("aria-checked") == "false"
    assert page.locator("#debug-open").count() == 0

    page.evaluate("window.sameDocument = true")  # gone if anything reloads the page
    debug_mode(page, True)
    page.locator("#debug-open").wait_for()
    panel = open_panel(page)
    assert page.locator("#debug-open").get_attribute("aria-expanded") == "true"
    assert panel.locator(".dbg-group").count() == 1
    labels = panel.locator(".dbg-entry .dbg-label").all_inner_texts()
    assert labels[0] == "User"
    assert "Tool · search_docs" in labels
    assert panel.locator(".dbg-group-head .dbg-status-badge").inner_text() == "completed"
    screenshot("panel")

    debug_mode(page, False)
    page.locator("#debug-panel .dbg").wait_for(state="detached")
    assert page.locator("#debug-open").count() == 0
    assert page.evaluate("window.sameDocument") is True
    # The panel's view refuses too, whatever a page still holds.
    conversation = conversation_of(page)
    assert page.request.get(f"/ui/chat/conversations/{conversation}/debug").status == 403


def test_a_refresh_after_debug_mode_went_off_elsewhere_closes_the_panel(page, login, live_model):
    panel = panel_after_one_turn(page, login, live_model, ["Hello."], "hello", "chat")
    # Another tab of the same session switches debug mode off.
    other = page.context.new_page()
    other.goto(page.url)
    debug_mode(other, False)
    other.close()
    panel.locator(".dbg-refresh").click()
    page.locator("#debug-panel .dbg").wait_for(state="detached")
    assert page.locator("#debug-open").count() == 0


def test_a_timeline_range_filters_the_list(page, login, live_model, screenshot):
    live_model.script([*AGENT_TURN, {"content": "A slow second answer.", "delay_s": 2.5}])
    login("root", is_superuser=True, is_staff=True)
    send(page, "how much memory does the sandbox get?", route="agent")
    answered(page)
    send(page, "and then?", route="chat")
    answered(page, 2)
    debug_mode(page, True)
    panel = open_panel(page)

    groups = panel.locator(".dbg-group")
    assert groups.count() == 2
    first_keys = groups.nth(0).locator(".dbg-entry").evaluate_all("r => r.map(x => x.dataset.key)")
    second_keys = groups.nth(1).locator(".dbg-entry").evaluate_all("r => r.map(x => x.dataset.key)")
    assert visible_keys(page) == first_keys + second_keys
    # The first run's segment is at least 2 s long: drag across it, from its start to its end.
    total = float(panel.get_attribute("data-total-s"))
    first_end = float(groups.nth(0).get_attribute("data-t1"))
    assert first_end >= 2
    track = panel.locator(".dbg-track").bounding_box()
    y = track["y"] + track["height"] / 2
    page.mouse.move(track["x"] + 1, y)
    page.mouse.down()
    page.mouse.move(track["x"] + track["width"] * first_end / total - 3, y, steps=5)
    page.mouse.up()

    assert visible_keys(page) == first_keys
    assert groups.nth(1).is_hidden()
    assert panel.locator(".dbg-range").is_visible()
    dimmed = panel.locator(".dbg-bar.dim").evaluate_all("b => b.map(x => x.dataset.key)")
    assert dimmed == second_keys
    screenshot("range")

    panel.locator(".dbg-range-reset").click()
    assert visible_keys(page) == first_keys + second_keys
    assert panel.locator(".dbg-range").is_hidden()

    # A click selects 2 s around it: at the far end, only entries of the last run overlap.
    page.mouse.click(track["x"] + track["width"] - 2, y)
    assert visible_keys(page)
    assert set(visible_keys(page)) <= set(second_keys)
    page.keyboard.press("Escape")
    assert visible_keys(page) == first_keys + second_keys
    assert AgentRun.objects.filter(status="completed").count() == 2  # Esc stopped nothing


def test_filters_search_and_the_json_tree(page, login, live_model, screenshot):
    panel = panel_after_one_turn(
        page, login, live_model, AGENT_TURN, "how much memory does the sandbox get?", "agent"
    )

    tool_count = int(panel.locator('.dbg-filter[data-filter="tool"] .dbg-count').inner_text())
    panel.locator('.dbg-filter[data-filter="tool"]').click()
    assert panel.locator('.dbg-filter[data-filter="tool"]').get_attribute("aria-pressed") == "true"
    shown = panel.locator(".dbg-entry:not([hidden]) .dbg-label").all_inner_texts()
    assert shown == ["Tool · search_docs"] * tool_count
    panel.locator('.dbg-filter[data-filter="all"]').click()
    # The search looks through each entry's data, its raw stored rows included.
    embedded = json.loads(panel.locator("#dbg-data").text_content())
    every = [e for g in embedded["groups"] for e in g["entries"]]
    matching = [
        e["key"] for e in every if "sandbox has 256" in json.dumps(e, ensure_ascii=False).lower()
    ]
    assert 0 < len(matching) < len(every)
    panel.locator(".dbg-search").fill("Sandbox has 256")
    page.wait_for_function(
        f"document.querySelectorAll('.dbg-entry:not([hidden])').length === {len(matching)}"
    )
    assert visible_keys(page) == matching
    panel.locator(".dbg-search").fill("")
    page.wait_for_function(
        f"document.querySelectorAll('.dbg-entry:not([hidden])').length === {len(every)}"
    )

    row = panel.locator(".dbg-entry", has=page.locator(".dbg-label", has_text="Tool ·")).first
    row.locator(".dbg-expand").click()
    assert row.locator(".dbg-expand").get_attribute("aria-expanded") == "true"
    tree = row.locator(".jt")
    tree.wait_for()
    # Keys and strings are shown as JSON.
    keys = tree.locator(".jt-key").all_inner_texts()
    assert keys
    assert all(k.startswith('"') and k.endswith('"') for k in keys)
    assert '"search_docs"' in tree.locator(".jt-str").all_inner_texts()
    screenshot("json-tree")
    row.locator(".dbg-expand").press("Enter")  # a button: the keyboard folds it too
    assert row.locator(".dbg-detail").is_hidden()


def test_copy_all_puts_valid_json_on_the_clipboard(page, login, live_model):
    page.context.grant_permissions(["clipboard-read", "clipboard-write"])
    panel = panel_after_one_turn(
        page, login, live_model, AGENT_TURN, "how much memory does the sandbox get?", "agent"
    )
    embedded = json.loads(panel.locator("#dbg-data").text_content())

    panel.locator(".dbg-copy-all").click()
    panel.locator(".dbg-status", has_text="Copied").wait_for()
    text = page.evaluate("navigator.clipboard.readText()")
    assert json.loads(text) == embedded
    assert text.startswith('{\n  "conversation_id": ')  # pretty, indented by two spaces

    panel.locator(".dbg-copy-group").first.click()
    assert json.loads(page.evaluate("navigator.clipboard.readText()")) == embedded["groups"][0]
    panel.locator(".dbg-copy-entry").nth(1).click()
    entry = json.loads(page.evaluate("navigator.clipboard.readText()"))
    assert entry == embedded["groups"][0]["entries"][1]


def test_copy_falls_back_where_the_clipboard_api_is_missing(page, login, live_model):
    page.context.grant_permissions(["clipboard-read", "clipboard-write"])
    # As on a plain-HTTP page: no navigator.clipboard for the app (the test keeps a handle).
    page.add_init_script(
        "window.testClipboard = navigator.clipboard;"
        "Object.defineProperty(Navigator.prototype, 'clipboard', {get: () => undefined});"
    )
    panel = panel_after_one_turn(page, login, live_model, ["Hello."], "hello", "chat")
    assert page.evaluate("navigator.clipboard") is None

    panel.locator(".dbg-copy-all").click()
    panel.locator(".dbg-status", has_text="Copied").wait_for()
    copied = json.loads(page.evaluate("window.testClipboard.readText()"))
    assert copied == json.loads(panel.locator("#dbg-data").text_content())

    # Where the browser will not copy at all, the JSON is offered selected in a dialog.
    page.evaluate("document.execCommand = () => false")
    panel.locator(".dbg-copy-group").first.click()
    dialog = page.locator("dialog.dbg-copy-dialog")
    dialog.wait_for()
    area = dialog.locator("textarea")
    assert json.loads(area.input_value())["key"] == copied["groups"][0]["key"]
    assert page.evaluate("document.activeElement.tagName") == "TEXTAREA"
    page.keyboard.press("Escape")
    dialog.wait_for(state="detached")


def test_the_panel_is_live_while_a_run_is_in_progress(page, login, live_model, screenshot):
    live_model.script(
        [
            "First.",
            {
                "content": 'Thought: wait\nAction: tool:search_docs\nargs: {"query": "x"}',
                "delay_s": 1,
            },
            {"content": "Thought: done\nAction: final: Finished.", "delay_s": 6},
        ]
    )
    login("root", is_superuser=True, is_staff=True)
    send(page, "hello", route="chat")
    answered(page)
    debug_mode(page, True)
    panel = open_panel(page)
    assert panel.locator(".dbg-live").count() == 0
    assert panel.get_attribute("hx-trigger") == "debug-refresh"

    send(page, "look something up", route="agent")
    # The panel refreshes when the run starts, then polls: the tool call appears mid-run.
    page.locator("#debug-panel .dbg-live").wait_for()
    page.locator("#debug-panel .dbg-entry .dbg-label", has_text="Tool · search_docs").wait_for()
    assert page.locator("#debug-panel .dbg").get_attribute("hx-trigger") == (
        "debug-refresh, every 2s"
    )
    screenshot("live")
    answered(page, 2)
    page.locator("#debug-panel .dbg-live").wait_for(state="detached")
    assert page.locator("#debug-panel .dbg").get_attribute("hx-trigger") == "debug-refresh"
    statuses = page.locator("#debug-panel .dbg-status-badge").all_inner_texts()
    assert statuses == ["completed", "completed"]


def test_langfuse_says_plainly_when_it_is_unavailable(page, login, live_model):
    panel = panel_after_one_turn(page, login, live_model, ["Hello."], "hello", "chat")
    popups: list[Any] = []
    page.context.on("page", lambda popup: popups.append(popup))
    panel.locator(".dbg-langfuse").click()
    note = panel.locator(".dbg-note")
    note.wait_for()
    page.wait_for_function("!document.querySelector('.dbg-note').textContent.startsWith('Looking')")
    assert note.inner_text() == (
        "Langfuse is unavailable: it is not configured, or its address is not valid."
    )
    assert popups == []


def test_hostile_text_stays_inert_in_the_panel(page, login, live_model, screenshot):
    live_model.script(HOSTILE_TURN)
    login("root", is_superuser=True, is_staff=True)
    send(page, "look", route="agent")
    page.locator(".turn.assistant .answer-body .markdown").wait_for()
    debug_mode(page, True)
    panel = open_panel(page)
    for button in panel.locator(".dbg-expand").all():
        button.click()
    panel.locator(".jt").first.wait_for()
    assert panel.locator("img, [onerror], [hx-trigger='load']").count() == 0
    assert panel.locator("script").count() == 1  # the JSON data, never run
    assert page.evaluate("window.pwned") is None
    answer = panel.locator(".dbg-summary").all_inner_texts()[-1]
    assert "<script>window.pwned = 2</script>" in answer
    strings = panel.locator(".jt-str").all_inner_texts()
    assert any('\\"></pre><img src=x onerror=' in s for s in strings)
    screenshot("hostile")
    assert "/login/" not in page.request.get("/").url  # no hx-get fired: still signed in


def test_on_a_narrow_screen_the_panel_overlays_the_chat_and_closes(
    page, login, live_model, screenshot
):
    live_model.script(["Hello."])
    login("root", is_superuser=True, is_staff=True)
    page.set_viewport_size({"width": 390, "height": 780})
    send(page, "hello", route="chat")
    answered(page)
    debug_mode(page, True)
    panel = open_panel(page)
    box = page.locator("#debug-panel").bounding_box()
    assert (box["x"], box["width"]) == (0, 390)
    assert page.locator("#debug-panel").evaluate("e => getComputedStyle(e).position") == "fixed"
    screenshot("phone")
    panel.locator(".dbg-close").press("Enter")
    page.locator("#debug-panel .dbg").wait_for(state="detached")
    assert page.locator("#debug-open").get_attribute("aria-expanded") == "false"
    # The panel stays closed on the next page, and opens again there once it was left open.
    page.reload()
    page.wait_for_load_state("networkidle")
    assert page.locator("#debug-panel .dbg").count() == 0
    open_panel(page)
    page.reload()
    page.locator("#debug-panel .dbg").wait_for()


@pytest.fixture(scope="module")
def langfuse_app(
    django_db_setup: Any,
    django_db_blocker: Any,
    live_model: Any,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[str, LangfuseReceiver]]:
    """A second DevAssist server, with Langfuse on, exporting to a local receiver standing in
    for Langfuse (its OTLP endpoint and projects API); yields both base URLs."""
    with LangfuseReceiver() as receiver:
        env = {
            **live_server_env(django_db_blocker, live_model, tmp_path_factory.mktemp("lf-var")),
            "LANGFUSE_PUBLIC_KEY": "pk-lf-browser",
            "LANGFUSE_SECRET_KEY": "sk-lf-browser",
            "LANGFUSE_BASE_URL": receiver.base_url,
        }
        with daphne_server(env) as base_url:
            yield base_url, receiver


def test_langfuse_opens_the_trace_in_a_new_tab_without_an_opener(
    chromium, langfuse_app, live_model, django_user_model
):
    base_url, receiver = langfuse_app
    context = chromium.new_context(base_url=base_url, viewport={"width": 1280, "height": 800})
    context.set_default_timeout(15_000)
    try:
        page = context.new_page()
        browser_user(django_user_model, "root", is_superuser=True, is_staff=True)
        page.goto("/login/")
        page.fill("input[name=username]", "root")
        page.fill("input[name=password]", PASSWORD)
        page.click("button[type=submit]")
        page.wait_for_url(re.compile(r"^(?!.*/login/).*$"))
        live_model.script(["Hello.", {"content": "Slowly.", "delay_s": 6}])
        send(page, "hello", route="chat")
        answered(page)
        debug_mode(page, True)
        panel = open_panel(page)

        run = AgentRun.objects.get()
        link = page.request.get(f"/api/runs/{run.id}/langfuse").json()
        assert link["available"] is True
        assert link["url"].startswith(receiver.base_url + "/")
        with context.expect_page() as opened:
            panel.locator(".dbg-langfuse").click()
        popup = opened.value
        popup.wait_for_load_state()
        assert popup.url == link["url"]
        assert popup.evaluate("window.opener") is None
        assert popup.evaluate("document.referrer") == ""
        popup.close()
        note = page.locator("#debug-panel .dbg-note").first
        assert note.inner_text().startswith("Opened the Langfuse trace in a new tab.")
        assert note.locator("a").get_attribute("href") == link["url"]

        # A run still going has no trace to show yet: said plainly, nothing opens.
        send(page, "again", route="chat")
        page.locator("#debug-panel .dbg-live").wait_for()
        page.locator("#debug-panel .dbg-group").nth(1).wait_for()
        page.locator("#debug-panel .dbg-group").nth(1).locator(".dbg-langfuse").click()
        second = page.locator("#debug-panel .dbg-group").nth(1).locator(".dbg-note")
        second.filter(has_text="There is no Langfuse trace for this run").wait_for()
        # The live panel is reloaded by its next poll, and the note is still there.
        page.evaluate("document.querySelector('#debug-panel .dbg').dataset.seen = 'yes'")
        page.wait_for_function(
            "(panel => panel && !panel.dataset.seen)(document.querySelector('#debug-panel .dbg'))"
        )
        assert second.inner_text().startswith("There is no Langfuse trace for this run")
        assert len(context.pages) == 1
        answered(page, 2)
    finally:
        context.close()
