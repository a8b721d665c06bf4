"""The admin of runs, conversations and messages, and the trace browser's links from the
trace admin: pages open, untrusted JSON is escaped, lists use constant queries."""

from __future__ import annotations

from http import HTTPStatus

import pytest
from django.contrib.auth.models import User
from django.test import Client

from agent.models import AgentRun, RunEvent
from chat.models import Conversation, Message
from chat.services import NewMessage, conversation_create, messages_append
from tests.traces.admin_pages import change_url, count_queries
from tests.traces.factories import add, make_trace, step
from traces.models import Step, Trace

SCRIPT = "<script>alert(1)</script>"

pytestmark = pytest.mark.django_db


def run_with_messages(user: User, n: int = 2) -> AgentRun:
    """A run with its trace, a conversation and ``n`` messages, one event."""
    trace = make_trace(user, task="question")
    add(trace, step("goal"))
    conversation = conversation_create(owner=user, title="chat")
    run = AgentRun.objects.create(
        user=user, trace=trace, conversation=conversation, input="question", tools=[SCRIPT]
    )
    RunEvent.objects.create(run=run, seq=1, type="meta", payload={"x": SCRIPT})
    messages_append(
        conversation_id=conversation.id,
        messages=[
            NewMessage(role="user", content=f"m{i}", metadata={"m": SCRIPT}) for i in range(n)
        ],
        run_id=run.id,
    )
    return run


@pytest.mark.parametrize(
    "url",
    [
        "/admin/agent/agentrun/",
        "/admin/agent/runevent/",
        "/admin/chat/conversation/",
        "/admin/chat/message/",
    ],
)
def test_changelists_use_constant_queries(
    admin_client: Client, django_user_model: type[User], url: str
) -> None:
    def runs(start: int, stop: int) -> None:
        for i in range(start, stop):
            run_with_messages(django_user_model.objects.create_user(username=f"u{i}"))

    runs(0, 2)
    admin_client.get(url)
    with_two = count_queries(admin_client, url)
    runs(2, 12)
    with_twelve = count_queries(admin_client, url)

    assert with_twelve == with_two


def test_change_pages_link_runs_traces_conversations_and_messages(
    admin_client: Client, user: User
) -> None:
    run = run_with_messages(user)
    conversation = Conversation.objects.get()
    message = Message.objects.first()
    event = RunEvent.objects.get()
    assert message is not None

    run_page = admin_client.get(change_url(run)).content.decode()
    conversation_page = admin_client.get(change_url(conversation)).content.decode()
    message_page = admin_client.get(change_url(message)).content.decode()
    event_page = admin_client.get(change_url(event)).content.decode()

    assert f'href="/traces/{run.trace_id}/"' in run_page
    assert f"/admin/traces/trace/{run.trace_id}/change/" in run_page
    assert f"?run__id__exact={run.id}" in run_page
    assert f"?conversation__id__exact={conversation.id}" in conversation_page
    assert "2 messages" in conversation_page
    assert f'href="/traces/{run.trace_id}/"' in message_page
    for page in (run_page, message_page, event_page):
        assert SCRIPT not in page
        assert "&lt;script&gt;" in page


def test_trace_and_step_admin_link_to_the_trace_browser(admin_client: Client, user: User) -> None:
    run = run_with_messages(user)
    assert run.trace_id is not None
    goal = Step.objects.get(trace_id=run.trace_id)

    trace_list = admin_client.get("/admin/traces/trace/").content.decode()
    step_page = admin_client.get(change_url(goal)).content.decode()

    assert f'href="/traces/{run.trace_id}/"' in trace_list
    assert f'href="/traces/{run.trace_id}/?step={goal.id}"' in step_page


@pytest.mark.parametrize(
    "url",
    ["/admin/agent/agentrun/add/", "/admin/chat/conversation/add/", "/admin/chat/message/add/"],
)
def test_runs_and_messages_cannot_be_added_in_the_admin(admin_client: Client, url: str) -> None:
    assert admin_client.get(url).status_code == HTTPStatus.FORBIDDEN


def test_the_run_list_filters_and_searches(admin_client: Client, user: User) -> None:
    run = run_with_messages(user)
    AgentRun.objects.filter(pk=run.pk).update(status="failed")

    failed = admin_client.get("/admin/agent/agentrun/?status__exact=failed")
    searched = admin_client.get(f"/admin/agent/agentrun/?q={run.trace_id}")
    queued = admin_client.get("/admin/agent/agentrun/?status__exact=queued")

    assert failed.context["cl"].result_count == 1
    assert searched.context["cl"].result_count == 1
    assert queued.context["cl"].result_count == 0


def test_a_run_page_shows_its_answer_and_its_error_from_its_steps(
    admin_client: Client, user: User, other_user: User
) -> None:
    completed = run_with_messages(user)
    assert completed.trace_id is not None
    goal = Step.objects.get(trace_id=completed.trace_id)
    add(
        Trace.objects.get(pk=completed.trace_id),
        step("response", parent=goal, data={"answer": "forty-two"}),
    )
    AgentRun.objects.filter(pk=completed.pk).update(status="completed")
    failed = run_with_messages(other_user)
    Step.objects.filter(trace__run=failed).update(status="failed", error=f"down {SCRIPT}")
    AgentRun.objects.filter(pk=failed.pk).update(status="failed")

    completed_page = admin_client.get(change_url(completed)).content.decode()
    failed_page = admin_client.get(change_url(failed)).content.decode()

    assert "forty-two" in completed_page
    assert SCRIPT not in failed_page
    assert "down &lt;script&gt;alert(1)&lt;/script&gt;" in failed_page
