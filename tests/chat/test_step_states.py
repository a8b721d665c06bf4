"""Honest step states end to end: programs that raise, are refused by the safety scan or time
out, run through the agent on the real sandbox, show as such in the chat's step cards, the
trace page and the debug panel, and "next error" and the Error filter find them."""

from __future__ import annotations

import asyncio
import json
import re
import uuid
from http import HTTPStatus
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.test import Client

from agent.models import AgentRun
from agent.services import run_cancel
from chat.models import Conversation
from chat.turns import chat_turn_start
from tests.chat.test_debug_views import browser_as, chat, embedded_data, panel_url, switch
from traces.models import Step, Trace

pytestmark = pytest.mark.django_db(transaction=True)


def run_code(code: str, **args: Any) -> str:
    arguments = json.dumps({"code": code, **args})
    return f"Thought: run it\nAction: tool:execute_code\nargs: {arguments}"


SCRIPT = [
    run_code("print('before')\n1/0"),
    run_code("import subprocess"),
    run_code("import time\ntime.sleep(30)", timeout_s=1),
    "Thought: enough\nAction: final: Three programs, none of them worked.",
]

#: The outcome each program's step shows: (kind, the words on its collapsed line).
EXPECTED = [
    ("failed", "failed · exit code 1"),
    ("blocked", "blocked: subprocess"),
    ("timed_out", "timed out after 1 s"),
]


@pytest.fixture
def failing_run(superuser: Any, scripted: Any, sandbox_image: str) -> dict[str, Any]:
    """A superuser's agent turn whose three programs all fail, each its own way."""
    scripted.script(SCRIPT)
    body = chat(superuser, "run these programs", use_agent=True)
    assert [step["outcome"]["kind"] for step in body["steps"]] == [k for k, _ in EXPECTED]
    return body


def trace_of(body: dict[str, Any]) -> uuid.UUID:
    trace_id = AgentRun.objects.get(pk=body["run_id"]).trace_id
    assert trace_id is not None
    return trace_id


def outcomes_in(html: str) -> list[tuple[str, str]]:
    """The (kind, summary) of each outcome badge in ``html``, in order."""
    found = re.findall(
        r'<span class="outcome st-([a-z_]+)"[^>]*>.*?<span class="outcome-text">([^<]*)</span>',
        html,
    )
    return [(kind, text.replace("&#x27;", "'")) for kind, text in found]


def test_failing_programs_are_failed_steps_and_trace_errors(failing_run: dict[str, Any]) -> None:
    trace_id = trace_of(failing_run)
    results = Step.objects.filter(trace_id=trace_id, step_type="result").order_by("seq")
    actions = Step.objects.filter(trace_id=trace_id, step_type="action").order_by("seq")

    assert [r.status for r in results] == ["failed"] * 3
    assert [a.status for a in actions] == ["failed"] * 3
    assert [r.error for r in results] == [""] * 3  # the tool ran; its verdict is in its data
    assert results[0].data["result"]["exit_code"] == 1
    trace = Trace.objects.get(pk=trace_id)
    assert trace.error_count == 6  # three actions, three results
    assert trace.status == "completed"


def test_the_chat_cards_show_each_failure_with_its_reason(
    superuser: Any, failing_run: dict[str, Any]
) -> None:
    client = browser_as(superuser)

    page = client.get(f"/c/{failing_run['conversation_id']}/").content.decode()

    cards = re.findall(r'<details class="step[^"]*">\s*<summary>.*?</summary>', page, re.S)
    assert len(cards) == 3
    assert [outcomes_in(card)[0] for card in cards] == EXPECTED
    assert all('class="step error"' in card for card in cards)
    assert "✓" not in "".join(cards)


def test_the_trace_page_marks_them_and_next_error_finds_them(
    superuser: Any, failing_run: dict[str, Any]
) -> None:
    trace_id = trace_of(failing_run)
    client = browser_as(superuser)
    failed = list(
        Step.objects.filter(trace_id=trace_id, status="failed").order_by("seq").values("id")
    )

    page = client.get(f"/traces/{trace_id}/").content.decode()
    jump = client.get(f"/traces/{trace_id}/next/?kind=error&after=0").json()

    shown = outcomes_in(page)
    for expected in EXPECTED:
        assert expected in shown
    for step in failed:
        node = page[page.index(f'id="s-{step["id"]}"') :]
        assert 'data-error="1"' in node[: node.index(">")]
    assert jump["step_id"] == str(failed[0]["id"])


def test_the_debug_panel_shows_them_under_error(
    superuser: Any, failing_run: dict[str, Any]
) -> None:
    client = browser_as(superuser)
    switch(client, on=True)

    response = client.get(panel_url(failing_run["conversation_id"]))

    assert response.status_code == HTTPStatus.OK
    html = response.content.decode()
    view = embedded_data(html)
    tools = [e for g in view["groups"] for e in g["entries"] if e["kind"] == "tool"]
    assert [(e["outcome"]["kind"], e["outcome"]["summary"]) for e in tools] == EXPECTED
    assert all("error" in e["filters"] for e in tools)
    assert view["counts"]["error"] == 3
    assert [o for o in outcomes_in(html) if o in EXPECTED] == EXPECTED


def test_a_program_that_exits_0_stays_ok_everywhere(
    superuser: Any, scripted: Any, sandbox_image: str
) -> None:
    scripted.script([run_code("print(6 * 7)"), "Thought: 42\nAction: final: 42"])
    body = chat(superuser, "run it", use_agent=True)
    client: Client = browser_as(superuser)
    switch(client, on=True)
    conversation = Conversation.objects.get(pk=body["conversation_id"])

    page = client.get(f"/c/{conversation.id}/").content.decode()
    view = embedded_data(client.get(panel_url(conversation.id)).content.decode())

    card = re.search(r'<details class="step[^"]*">\s*<summary>.*?</summary>', page, re.S)
    assert card is not None
    assert outcomes_in(card.group(0)) == [("ok", "ok")]
    assert view["counts"]["error"] == 0


async def test_a_tool_call_cut_short_by_stop_reads_cancelled(
    superuser: Any, scripted: Any, sandbox_image: str
) -> None:
    scripted.script([run_code("import time\ntime.sleep(60)", timeout_s=60)])
    turn = await chat_turn_start(user=superuser, message="sleep a minute", use_agent=True)
    trace_id = turn.run.trace_id
    assert trace_id is not None
    for _ in range(100):  # until the tool runs
        if await Step.objects.filter(trace_id=trace_id, step_type="action").aexists():
            break
        await asyncio.sleep(0.1)
    await run_cancel(user=superuser, run=turn.run)
    await asyncio.wait_for(turn.task, timeout=15)
    client = await sync_to_async(browser_as)(superuser)

    page = (await sync_to_async(client.get)(f"/c/{turn.run.conversation_id}/")).content.decode()
    tree = (await sync_to_async(client.get)(f"/traces/{trace_id}/")).content.decode()

    action = await Step.objects.aget(trace_id=trace_id, step_type="action")
    assert action.status == "skipped"
    cards = re.findall(r'<details class="step[^"]*">\s*<summary>.*?</summary>', page, re.S)
    assert [outcomes_in(card)[0] for card in cards] == [("cancelled", "cancelled")]
    row = tree[tree.index(f'id="s-{action.id}"') :]
    assert outcomes_in(row)[0] == ("cancelled", "cancelled")
    assert 'data-error="1"' not in row[: row.index(">")]
