"""What a chat turn stores, and when: the user's message before the run, the answer (with its
route, model and sources) after it, the error of a failed run on the run; and the pages that
show it render untrusted text inertly."""

from __future__ import annotations

import json
from html.parser import HTMLParser
from http import HTTPStatus

import pytest

from agent.models import AgentRun
from chat.models import Message
from chat.turns import chat_turn_start
from devassist.markdown import render_markdown
from tests.agent.test_agent_api import post
from traces.models import Step


class _Markup(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.found: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in {"script", "iframe", "object", "embed"}:
            self.found.append(tag)
        for name, value in attrs:
            if name.startswith(("on", "hx-", "data-hx")) or (value or "").startswith("javascript:"):
                self.found.append(f"{tag}[{name}]")


def live_markup(html: str) -> list[str]:
    """Elements and attributes in ``html`` that would run something."""
    parser = _Markup()
    parser.feed(html)
    return parser.found


@pytest.mark.django_db(transaction=True)
async def test_the_user_message_is_stored_before_the_run_starts(user, scripted):
    scripted.script([{"content": "later", "delay_s": 0.5}])
    turn = await chat_turn_start(user=user, message="first things first", use_agent=False)
    stored = [m async for m in Message.objects.filter(conversation=turn.run.conversation_id)]
    assert [(m.role, m.content, m.run_id) for m in stored] == [
        ("user", "first things first", turn.run.id)
    ]
    await turn.task
    answer = await Message.objects.aget(run=turn.run, role="assistant", kind="turn")
    assert answer.content == "later"
    response = await Step.objects.aget(trace__run=turn.run, step_type="response")
    assert answer.step_id == response.id
    assert (turn.run.mode, answer.metadata) == ("chat", {})


@pytest.mark.django_db
def test_a_failed_run_keeps_the_user_message_and_stores_its_error(api, client, user, scripted):
    scripted.script([{"status": 500, "message": "boom"}] * 3)
    body = post(api, "/chat", {"message": "hello", "use_agent": False}).json()
    assert body["error"]["code"] == "llm_unavailable"
    run = AgentRun.objects.get(pk=body["error"]["details"]["run_id"])
    assert (run.status, run.mode) == ("failed", "chat")
    goal = Step.objects.get(pk=run.id)
    assert goal.error == body["error"]["message"]
    shown = api.get(f"/chat/conversations/{run.conversation_id}").json()["messages"]
    # The run's answer turn, empty (nothing was written), carries the failure too.
    assert [(m["role"], m["content"], m["run_status"]) for m in shown] == [
        ("user", "hello", "failed"),
        ("assistant", "", "failed"),
    ]
    assert shown[0]["error"] == shown[1]["error"] == goal.error
    assert api.get(f"/api/runs/{run.id}").json()["error"] == goal.error
    client.force_login(user)
    page = client.get(f"/c/{run.conversation_id}/").content.decode()
    answer = client.get(f"/ui/chat/runs/{run.id}/answer").content.decode()
    for html in (page, answer):
        assert f"Failed: {goal.error}" in html


@pytest.mark.parametrize(
    "text",
    [
        "<script>alert(1)</script>",
        '<img src=x onerror="alert(1)">',
        '<div hx-get="/logout/" hx-trigger="load">x</div>',
        "[click](javascript:alert(1))",
        '<a href="#" onclick="alert(1)">x</a>',
    ],
)
def test_markdown_leaves_no_script_handler_or_htmx_attribute(text):
    assert live_markup(render_markdown(text)) == []


def test_markdown_highlights_code_and_offers_run_for_python_only():
    html = render_markdown("```python\nprint('<b>')\n```\n\n```bash\nls\n```")
    assert html.count('class="code-run"') == 1
    assert html.count('class="code-copy"') == 2
    assert "&lt;b&gt;" in html
    assert '<span class="tok-nb">print</span>' in html


@pytest.mark.django_db
def test_the_page_renders_stored_hostile_text_inertly(client, user, scripted):
    """The hostile turn's page has exactly the live markup (the page's own actions) of the
    same turn in plain words."""
    scripted.script(['Here <script>alert(1)</script> <div hx-get="/x">y</div>', "Here y"])
    client.force_login(user)

    def messages_of(message: str) -> tuple[dict[str, str], str]:
        body = client.post(
            "/chat",
            data=json.dumps({"message": message, "use_agent": False}),
            content_type="application/json",
        ).json()
        page = client.get(f"/c/{body['conversation_id']}/")
        assert page.status_code == HTTPStatus.OK
        content = page.content.decode()
        return body, content[content.index('id="messages"') : content.index('id="composer"')]

    body, messages = messages_of('<img src=x onerror="alert(2)">')
    _, plain = messages_of("img src x")
    assert live_markup(messages) == live_markup(plain)
    assert all(
        found.endswith(("[hx-post]", "[hx-target]", "[hx-swap]", "[hx-include]", "[hx-vals]"))
        for found in live_markup(messages)
    )
    assert "&lt;img src=x onerror=&quot;alert(2)&quot;&gt;" in messages
    answer = client.get(f"/ui/chat/runs/{body['run_id']}/answer").content.decode()
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in answer


@pytest.mark.django_db
def test_pages_of_someone_elses_conversation_or_run_are_404(client, other_user, user, scripted):
    scripted.script(["mine"])
    client.force_login(user)
    body = client.post(
        "/chat",
        data=json.dumps({"message": "hi", "use_agent": False}),
        content_type="application/json",
    ).json()
    client.force_login(other_user)
    assert client.get(f"/c/{body['conversation_id']}/").status_code == HTTPStatus.NOT_FOUND
    answer = client.get(f"/ui/chat/runs/{body['run_id']}/answer")
    assert answer.status_code == HTTPStatus.NOT_FOUND
    delete = client.post(f"/ui/chat/conversations/{body['conversation_id']}/delete")
    assert delete.status_code == HTTPStatus.NOT_FOUND


@pytest.mark.django_db
def test_a_rag_answer_shows_its_route_model_and_sources_once(client, user, scripted, guide):
    scripted.script(["Set SANDBOX_MEMORY_MB [1]."])
    client.force_login(user)
    body = client.post(
        "/chat",
        data=json.dumps({"message": "How do I change the sandbox memory limit?"}),
        content_type="application/json",
    ).json()
    assert body["route"] == "rag"
    content = client.get(f"/c/{body['conversation_id']}/").content.decode()
    assert '<span class="badge route-rag">RAG</span>' in content
    assert '<span class="muted model">fake-model</span>' in content
    # Once: in the sources under the answer, a link to the chunk's page.
    assert content.count(">sandbox.md#1<") == 1
    assert content.count('href="/docs/guide_docs/sandbox.md#chunk-1"') == 1
    assert '<div class="sources"><h4>Sources</h4>' in content
    answer = client.get(f"/ui/chat/runs/{body['run_id']}/answer").content.decode()
    assert "Sources:" not in answer
    assert "sandbox.md#" in answer


@pytest.mark.django_db
def test_the_sidebar_list_searches_and_refuses_a_forged_cursor(client, user):
    from chat.services import NewMessage, conversation_create, messages_append

    for text in ("Docker <b>limits</b>", "something else"):
        conversation = conversation_create(owner=user)
        messages_append(conversation_id=conversation.id, messages=[NewMessage("user", text)])
    client.force_login(user)
    found = client.get("/ui/chat/conversations/", {"q": "docker"}).content.decode()
    assert found.count('<li class="conversation') == 1
    assert "Docker &lt;b&gt;limits&lt;/b&gt;" in found
    forged = client.get("/ui/chat/conversations/", {"cursor": "not-a-cursor"})
    assert forged.status_code == HTTPStatus.BAD_REQUEST
