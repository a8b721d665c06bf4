"""Honest step states in Chromium: a program that raises and code the safety scan refuses show
as failed and blocked in the chat's live cards, on the trace page (where "e" jumps to them), in
the debug panel (under Error) and in the admin's step tree."""

from __future__ import annotations

import json
from typing import Any

import pytest

from agent.models import AgentRun
from tests.chat.test_browser_debug import answered, debug_mode, open_panel, send

pytestmark = pytest.mark.django_db(transaction=True)


def run_code(code: str) -> str:
    return f"Thought: run it\nAction: tool:execute_code\nargs: {json.dumps({'code': code})}"


def colour(locator: Any) -> str:
    return locator.evaluate("node => getComputedStyle(node).color")


def test_failing_programs_show_as_failed_everywhere(
    page, login, live_model, screenshot, sandbox_image
):
    live_model.script(
        [
            run_code("print('about to fail')\n1/0"),
            run_code("import subprocess"),
            run_code("print('fine')"),
            "Thought: done\nAction: final: Two of three failed.",
        ]
    )
    login("root", is_superuser=True, is_staff=True)
    send(page, "run three programs", route="agent")
    answered(page)

    cards = page.locator(".turn.assistant .step")
    assert cards.count() == 3
    texts = [cards.nth(i).locator("summary .outcome").inner_text() for i in range(3)]
    assert [t.split(" ", 1)[1] for t in texts] == [
        "failed · exit code 1",
        "blocked: subprocess",
        "ok",
    ]
    assert texts[0].startswith("✗")
    assert texts[2].startswith("✓")
    failed_colour = colour(cards.nth(0).locator("summary .outcome"))
    assert failed_colour != colour(cards.nth(2).locator("summary .outcome"))
    assert colour(cards.nth(1).locator("summary .outcome")) == failed_colour
    screenshot("chat-cards")

    debug_mode(page, True)
    panel = open_panel(page)
    panel.locator('.dbg-filter[data-filter="error"]').click()
    shown = panel.locator(".dbg-entry:not([hidden]) .dbg-outcome").all_inner_texts()
    assert [text.split(" ", 1)[1] for text in shown] == [
        "failed · exit code 1",
        "blocked: subprocess",
    ]
    screenshot("debug-errors")

    run = AgentRun.objects.order_by("-created_at").first()
    assert run is not None
    page.goto(f"/traces/{run.trace_id}/")
    failing = page.locator(".node.err .outcome", has_text="exit code 1")
    failing.first.wait_for()
    page.keyboard.press("e")
    page.wait_for_function("location.search.includes('step=')")
    selected = page.evaluate("new URLSearchParams(location.search).get('step')")
    assert page.locator(f"#s-{selected}").get_attribute("data-error") == "1"
    screenshot("trace-page")

    page.goto(f"/admin/traces/trace/{run.trace_id}/change/")
    tree = page.locator(".step-tree")
    tree.wait_for()
    # The actions' results are a level below what the page opens: opening one loads them.
    closed = tree.locator("details:not([open]) > summary .step-tree-type").first
    closed.click()
    tree.locator(".step-tree-node[data-id] .outcome", has_text="exit code 1").first.wait_for()
    assert tree.locator(".step-tree-node.err").count() >= 3
    screenshot("admin-tree")
