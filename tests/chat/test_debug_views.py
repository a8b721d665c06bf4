"""The debug mode switch and the debug panel's view over the Django test client, on runs recorded
through POST /chat with the scripted model: who gets the switch, the entry and the panel (403,
404, debug mode off), what the panel shows, and hostile stored text rendered inert."""

from __future__ import annotations

import json
from html.parser import HTMLParser
from http import HTTPStatus
from pathlib import Path
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.test import Client
from django.urls import reverse

from agent.knowledge.ingest import ingest_paths
from agent.models import AgentRun
from agent.services import run_create
from chat.models import Conversation
from chat.views import DEBUG_MODE_SESSION_KEY
from tests.agent.test_agent_api import post
from tests.conftest import token_client

pytestmark = pytest.mark.django_db

HTMX = {"HX-Request": "true"}
HOSTILE_ANSWER = (
    'Done: <script>window.pwned = 1</script> <div hx-get="/logout/" hx-trigger="load">x</div>'
)
HOSTILE_DOC = '# Notes\n\nThe marker "></pre><img src=x onerror="window.pwned = 2"> ends here.\n'


def browser_as(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def switch(client: Client, on: bool, **headers: str) -> Any:
    return client.post(reverse("chat:debug_mode"), {"on": "1" if on else "0"}, headers=headers)


def chat(user: Any, message: str, **options: Any) -> dict[str, Any]:
    """One turn through POST /chat (not streamed), as ``user``; returns the answer."""
    response = post(token_client(user), "/chat", {"message": message, **options})
    assert response.status_code == HTTPStatus.OK, response.content
    return response.json()


def panel_url(conversation_id: Any) -> str:
    return reverse("chat:debug_panel", args=[conversation_id])


class Elements(HTMLParser):
    """Every start tag of a document with its attributes (an attribute without a value: "")."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, {name: value or "" for name, value in attrs}))


def elements(html: str) -> list[tuple[str, dict[str, str]]]:
    parser = Elements()
    parser.feed(html)
    return parser.tags


def embedded_data(html: str) -> dict[str, Any]:
    start = html.index('<script id="dbg-data" type="application/json">')
    body = html[html.index(">", start) + 1 : html.index("</script>", start)]
    return json.loads(body)


# --- the switch -------------------------------------------------------------------------------


def test_only_superusers_can_switch_debug_mode(user, superuser):
    normal = browser_as(user)
    response = switch(normal, True, **HTMX)
    assert response.status_code == HTTPStatus.FORBIDDEN
    assert DEBUG_MODE_SESSION_KEY not in normal.session

    admin = browser_as(superuser)
    on = switch(admin, True, **HTMX)
    assert on.status_code == HTTPStatus.OK
    assert admin.session[DEBUG_MODE_SESSION_KEY] is True
    html = on.content.decode()
    assert 'aria-checked="true"' in html
    assert 'id="debug-open"' in html
    assert "hx-swap-oob" not in html

    off = switch(admin, False, **HTMX)
    assert admin.session[DEBUG_MODE_SESSION_KEY] is False
    html = off.content.decode()
    assert 'aria-checked="false"' in html
    assert 'id="debug-open"' not in html
    # An open panel is emptied out of band.
    assert ("aside", {"id": "debug-panel", "hx-swap-oob": "innerHTML"}) in elements(html)


def test_the_switch_without_javascript_goes_back_to_a_local_page(superuser):
    admin = browser_as(superuser)
    back = admin.post(reverse("chat:debug_mode"), {"on": "1", "next": "/traces/"})
    assert (back.status_code, back["Location"]) == (HTTPStatus.FOUND, "/traces/")
    away = admin.post(reverse("chat:debug_mode"), {"on": "0", "next": "https://evil.example/"})
    assert (away.status_code, away["Location"]) == (HTTPStatus.FOUND, "/")
    assert admin.get(reverse("chat:debug_mode")).status_code == HTTPStatus.METHOD_NOT_ALLOWED


def test_the_chat_header_offers_the_entry_only_to_a_superuser_in_debug_mode(user, superuser):
    page = browser_as(user).get("/").content.decode()
    assert "debug-mode-switch" not in page
    assert "debug-open" not in page
    assert "debug.js" not in page

    admin = browser_as(superuser)
    page = admin.get("/").content.decode()
    assert 'id="debug-mode-switch"' in page
    assert 'aria-checked="false"' in page
    assert 'id="debug-open"' not in page

    switch(admin, True)
    page = admin.get("/").content.decode()
    assert 'aria-checked="true"' in page
    assert 'id="debug-open"' in page
    assert 'id="debug-panel"' in page


# --- who gets the panel -----------------------------------------------------------------------


def test_the_panel_is_refused_unless_a_superuser_in_debug_mode_owns_the_conversation(
    user, superuser, other_superuser, scripted
):
    scripted.script(["Hi superuser.", "Hi toor.", "Hi alice."])
    mine = chat(superuser, "hello", use_agent=False)["conversation_id"]
    theirs = chat(other_superuser, "hello", use_agent=False)["conversation_id"]
    alices = chat(user, "hello", use_agent=False)["conversation_id"]

    normal = browser_as(user)
    normal.session[DEBUG_MODE_SESSION_KEY] = True  # a flag alone is not enough
    for conversation in (alices, mine):
        refused = normal.get(panel_url(conversation), headers=HTMX)
        assert refused.status_code == HTTPStatus.FORBIDDEN
        assert json.loads(refused["HX-Trigger"]) == {"debug-panel-closed": {"status": 403}}

    admin = browser_as(superuser)
    off = admin.get(panel_url(mine), headers=HTMX)
    assert off.status_code == HTTPStatus.FORBIDDEN
    assert off.content == b"Debug mode is off."
    assert "debug-panel-closed" in off["HX-Trigger"]

    switch(admin, True)
    assert admin.get(panel_url(mine), headers=HTMX).status_code == HTTPStatus.OK
    foreign = admin.get(panel_url(theirs), headers=HTMX)
    missing = admin.get(panel_url("00000000-0000-4000-8000-000000000000"), headers=HTMX)
    assert foreign.status_code == missing.status_code == HTTPStatus.NOT_FOUND
    assert foreign.content == missing.content
    assert foreign["HX-Trigger"] == missing["HX-Trigger"]

    # Losing superuser status closes the panel at its next refresh, debug mode or not.
    superuser.is_superuser = False
    superuser.save(update_fields=["is_superuser"])
    assert admin.get(panel_url(mine), headers=HTMX).status_code == HTTPStatus.FORBIDDEN


# --- what the panel shows ---------------------------------------------------------------------


def test_the_panel_lists_the_runs_with_counts_timeline_and_the_data(superuser, scripted):
    scripted.script(["First answer.", "Second answer."])
    first = chat(superuser, "first question", use_agent=False)
    chat(superuser, "second question", use_agent=False, conversation_id=first["conversation_id"])
    admin = browser_as(superuser)
    switch(admin, True)

    response = admin.get(panel_url(first["conversation_id"]), headers=HTMX)
    assert response.status_code == HTTPStatus.OK
    html = response.content.decode()
    data = embedded_data(html)
    runs = list(AgentRun.objects.order_by("created_at").values_list("id", flat=True))
    assert [group["run_id"] for group in data["groups"]] == [str(run) for run in runs]
    assert data["live"] is False

    tags = elements(html)
    panel = next(attrs for tag, attrs in tags if attrs.get("id") == "dbg")
    assert panel["hx-trigger"] == "debug-refresh"  # no polling once nothing runs
    assert panel["hx-get"] == panel_url(first["conversation_id"])
    groups = [attrs for _, attrs in tags if attrs.get("class") == "dbg-group"]
    assert [g["data-group-key"] for g in groups] == [g["key"] for g in data["groups"]]
    rows = [attrs for _, attrs in tags if attrs.get("class", "").startswith("dbg-entry")]
    keys = [entry["key"] for group in data["groups"] for entry in group["entries"]]
    assert [row["data-key"] for row in rows] == keys
    bars = [attrs["data-key"] for _, attrs in tags if "dbg-bar" in attrs.get("class", "")]
    assert bars == keys
    # Runs laid end to end: each group starts where the one before ended.
    spans = [(float(g["data-t0"]), float(g["data-t1"])) for g in groups]
    assert spans[0][0] == 0
    assert spans[0][1] == spans[1][0]
    for row in rows:
        assert 0 <= float(row["data-t0"]) <= float(row["data-t1"]) <= spans[-1][1]

    filters = {a["data-filter"]: a for _, a in tags if a.get("class") == "dbg-filter"}
    assert list(filters) == ["all", "user", "model", "tool", "error", "system"]
    for name, count in data["counts"].items():
        assert f'data-filter="{name}" aria-pressed' in html
        assert f'<span class="dbg-count">{count}</span>' in html
    assert 'class="secondary small dbg-langfuse"' in html
    assert reverse("api:run_langfuse", args=[runs[0]]) in html


def test_a_live_run_makes_the_panel_poll(superuser, scripted):
    scripted.script(["An answer."])
    answer = chat(superuser, "hello", use_agent=False)
    conversation = Conversation.objects.get(pk=answer["conversation_id"])
    admin = browser_as(superuser)
    switch(admin, True)
    # A second request queued (created, not started): the conversation is live until it ends.
    async_to_sync(run_create)(
        user=superuser, message="queued question", mode="chat", conversation_id=conversation.id
    )
    html = admin.get(panel_url(conversation.id), headers=HTMX).content.decode()
    panel = next(attrs for _, attrs in elements(html) if attrs.get("id") == "dbg")
    assert panel["hx-trigger"] == "debug-refresh, every 2s"
    assert "data-live" in panel
    assert embedded_data(html)["live"] is True


@pytest.fixture
def hostile_docs(knowledge: Path, tmp_path: Path, settings: Any) -> str:
    superuser = tmp_path / "hostile"
    superuser.mkdir()
    (superuser / "notes.md").write_text(HOSTILE_DOC)
    ingest_paths(paths=[superuser], collection="hostile_docs")
    settings.KNOWLEDGE_DEFAULT_COLLECTION = "hostile_docs"
    return "hostile_docs"


def test_hostile_stored_text_renders_inert(superuser, scripted, hostile_docs):
    scripted.script(
        [
            'Thought: look it up\nAction: tool:search_docs\nargs: {"query": "marker notes"}',
            f"Thought: done\nAction: final: {HOSTILE_ANSWER}",
        ]
    )
    answer = chat(superuser, "find the marker", use_agent=True)
    admin = browser_as(superuser)
    switch(admin, True)
    html = admin.get(panel_url(answer["conversation_id"]), headers=HTMX).content.decode()

    tags = elements(html)
    scripts = [attrs for tag, attrs in tags if tag == "script"]
    assert scripts == [{"id": "dbg-data", "type": "application/json"}]
    assert not [attrs for tag, attrs in tags if tag == "img" or "onerror" in attrs]
    hx_gets = {attrs["hx-get"] for _, attrs in tags if "hx-get" in attrs}
    assert hx_gets == {panel_url(answer["conversation_id"])}
    assert "&lt;script&gt;window.pwned = 1&lt;/script&gt;" in html  # the answer's summary
    assert "&quot;&gt;&lt;/pre&gt;&lt;img src=x onerror=" in html  # the tool's output
    # The embedded data keeps the text exactly, and cannot end its script element.
    data = embedded_data(html)
    text = json.dumps(data, ensure_ascii=False)
    assert "<script>window.pwned = 1</script>" in text
    tools = [e for g in data["groups"] for e in g["entries"] if e["kind"] == "tool"]
    assert '"></pre><img src=x onerror=' in tools[0]["summary"]
