"""GET /api/conversations/{id}/debug over real HTTP: who may read it, what a real run recorded
with the scripted model looks like in it (live and finished), and its constant query count."""

from __future__ import annotations

import asyncio
import json
import uuid
from datetime import timedelta
from http import HTTPStatus
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.test import Client
from django.urls import reverse
from django.utils import timezone

import agent.modes
import agent.services
from agent.models import AgentRun
from agent.services import run_cancel
from agent.tools.registry import Tool, ToolContext, ToolRegistry
from chat.debug import (
    MESSAGE_FIELDS,
    RUN_FIELDS,
    STEP_FIELDS,
    conversation_debug,
    debug_view,
    debug_view_json,
)
from chat.models import Conversation, Message
from chat.services import NewMessage, conversation_create, messages_append
from chat.turns import chat_turn_start
from tests.agent.test_agent_api import assert_error, post
from tests.agent.test_recording import EMPTY
from tests.chat.conftest import asgi_client, bearer
from tests.conftest import token_client
from traces.models import Step, Trace

SEARCH = 'Thought: I will look it up.\nAction: tool:search_docs\nargs: {"query": "memory limit"}'
FINAL = "Thought: found it\nAction: final: Set SANDBOX_MEMORY_MB."


def debug_url(conversation_id: Any) -> str:
    return reverse("api:conversation_debug", args=[conversation_id])


def test_the_data_is_at_the_documented_path():
    conversation_id = uuid.uuid4()
    assert debug_url(conversation_id) == f"/api/conversations/{conversation_id}/debug"


# --- who may read it ------------------------------------------------------------------------------


@pytest.mark.django_db
def test_a_user_who_is_not_a_superuser_gets_403(user, staff_user):
    conversation = conversation_create(owner=user)
    messages_append(conversation_id=conversation.id, messages=[NewMessage("user", "hi")])
    assert_error(
        token_client(user).get(debug_url(conversation.id)),
        HTTPStatus.FORBIDDEN,
        "superuser_required",
    )
    session = Client()
    session.force_login(user)
    assert_error(
        session.get(debug_url(conversation.id)), HTTPStatus.FORBIDDEN, "superuser_required"
    )
    staff = conversation_create(owner=staff_user)
    assert_error(
        token_client(staff_user).get(debug_url(staff.id)),
        HTTPStatus.FORBIDDEN,
        "superuser_required",
    )


@pytest.mark.django_db
def test_an_anonymous_request_gets_401():
    response = Client().get(debug_url(uuid.uuid4()))
    assert response.status_code == HTTPStatus.UNAUTHORIZED


@pytest.mark.django_db
def test_another_superusers_conversation_is_404_like_a_missing_one(
    superuser, other_superuser, scripted
):
    scripted.script(["Hello."])
    theirs = post(token_client(other_superuser), "/chat", {"message": "hi", "use_agent": False})
    conversation_id = theirs.json()["conversation_id"]
    api = token_client(superuser)
    foreign = api.get(debug_url(conversation_id))
    missing = api.get(debug_url(uuid.uuid4()))
    for response in (foreign, missing):
        body = assert_error(response, HTTPStatus.NOT_FOUND, "conversation_not_found")
        assert "trace" not in response.content.decode().lower()
        assert body["error"] == {
            "code": "conversation_not_found",
            "message": "Conversation not found.",
            "details": {},
        }
    assert set(foreign.json()) == set(missing.json()) == {"error", "request_id"}


# --- a real run -----------------------------------------------------------------------------------


@pytest.mark.django_db
def test_a_recorded_agent_run_reads_as_its_steps_with_their_messages(superuser, scripted, guide):
    scripted.script([SEARCH, FINAL])
    api = token_client(superuser)
    answer = post(
        api,
        "/chat",
        {"message": "How do I change the memory limit?", "use_agent": True},
    )
    assert answer.status_code == HTTPStatus.OK, answer.content
    result = answer.json()
    response = api.get(debug_url(result["conversation_id"]))
    assert response.status_code == HTTPStatus.OK
    body = response.json()
    run = AgentRun.objects.get(pk=result["run_id"])
    assert set(body) == {"conversation_id", "title", "live", "counts", "groups"}
    assert (body["conversation_id"], body["live"]) == (result["conversation_id"], False)
    assert body["title"] == "How do I change the memory limit?"
    (group,) = body["groups"]
    assert (group["key"], group["run_id"], group["status"], group["mode"], group["trace_id"]) == (
        f"run:{run.id}",
        str(run.id),
        "completed",
        "agent",
        str(run.trace_id),
    )
    assert group["started_at"].endswith("Z")
    assert [e["label"] for e in group["entries"]] == [
        "User",
        "Memory · short-term memory",
        "Memory · long-term memory",
        "Model · Tools",
        "Tool · search_docs",
        "Model",
        "Answer",
    ]
    stored = list(
        Message.objects.filter(conversation=result["conversation_id"]).order_by("sequence")
    )
    # Every message the run stored points at its step, and is joined to it.
    assert all(m.step_id is not None for m in stored)
    assert "step_id" not in json.dumps([m.metadata for m in stored])
    assert [e["sequence"] for e in group["entries"] if e["sequence"]] == [
        m.sequence for m in stored
    ]
    for entry in group["entries"]:
        assert set(entry) == {
            "key",
            "id",
            "run_id",
            "role",
            "kind",
            "filters",
            "label",
            "summary",
            "model",
            "usage",
            "created_at",
            "started_at",
            "finished_at",
            "duration_ms",
            "sequence",
            "step_seq",
            "status",
            "outcome",
            "timed",
            "raw",
        }
        assert entry["run_id"] == str(run.id)
        assert entry["created_at"].endswith("Z")
        assert entry["key"] == f"step:{entry['id']}"
    user, _, _, model_call, tool_call, final_call, reply = group["entries"]
    # The request is the goal step, whose id is the run's.
    assert (user["id"], user["summary"], user["raw"]["message"]["id"]) == (
        str(run.id),
        "How do I change the memory limit?",
        str(stored[0].id),
    )
    # The model call is the iteration's thought step, the step the stream reported.
    thought = Step.objects.get(pk=result["steps"][0]["step_id"])
    assert model_call["id"] == str(thought.id)
    assert model_call["summary"] == " ".join(SEARCH.split())
    assert model_call["model"] == "fake-model"
    assert model_call["usage"]["total_tokens"] == thought.tokens > 0
    assert model_call["duration_ms"] == thought.duration_ms
    assert model_call["started_at"].endswith("Z")
    assert set(model_call["raw"]) == {"message", "step"}
    assert model_call["raw"]["message"]["id"] == str(stored[1].id)
    action = Step.objects.get(parent=thought, step_type="action")
    assert (tool_call["id"], tool_call["status"], tool_call["duration_ms"]) == (
        str(action.id),
        "completed",
        action.duration_ms,
    )
    assert set(tool_call["raw"]) == {"message", "action", "result"}
    assert tool_call["raw"]["message"]["step_id"] == tool_call["raw"]["result"]["id"]
    assert tool_call["raw"]["action"]["data"]["arguments"] == {"query": "memory limit"}
    assert final_call["label"] == "Model"
    assert (reply["summary"], reply["model"]) == ("Set SANDBOX_MEMORY_MB.", "fake-model")
    assert reply["raw"]["step"]["step_type"] == "response"
    assert body["counts"] == {"all": 7, "user": 1, "model": 3, "tool": 1, "error": 0, "system": 2}
    # The panel's session reads the same.
    session = Client()
    session.force_login(superuser)
    assert session.get(debug_url(result["conversation_id"])).json()["groups"] == body["groups"]


async def wait_for(condition: Any) -> None:
    """Wait until ``condition()`` (async) holds, at most about 15 s."""
    for _ in range(300):
        if await condition():
            return
        await asyncio.sleep(0.05)
    raise AssertionError("the run never got there")


@pytest.mark.django_db(transaction=True)
async def test_a_run_in_progress_shows_its_steps_then_the_same_entries_with_their_messages(
    superuser, scripted, guide
):
    scripted.script([SEARCH, {"content": FINAL, "delay_s": 30}])
    turn = await chat_turn_start(user=superuser, message="memory limit?", use_agent=True)
    run_id = turn.run.id
    assert turn.run.trace_id is not None
    await wait_for(Step.objects.filter(trace_id=turn.run.trace_id, step_type="result").aexists)
    async with asgi_client(await bearer(superuser)) as client:
        live = (await client.get(debug_url(turn.run.conversation_id))).json()
        cancelled = await client.post(f"/api/runs/{run_id}/cancel")
        assert cancelled.status_code == HTTPStatus.OK
        await asyncio.wait_for(turn.task, timeout=15)
        finished = (await client.get(debug_url(turn.run.conversation_id))).json()
    assert live["live"] is True
    (group,) = live["groups"]
    assert group["status"] == "running"
    assert [e["label"] for e in group["entries"]] == [
        "User",
        "Memory · short-term memory",
        "Memory · long-term memory",
        "Model · Tools",
        "Tool · search_docs",
    ]
    model_call, tool_call = group["entries"][3:]
    # Not stored as messages yet: the steps alone.
    assert (model_call["sequence"], set(model_call["raw"])) == (None, {"step"})
    assert (tool_call["sequence"], set(tool_call["raw"])) == (None, {"action", "result"})
    assert model_call["summary"] == "I will look it up."  # the step's thought
    assert finished["live"] is False
    (done,) = finished["groups"]
    assert (done["key"], done["status"]) == (group["key"], "cancelled")
    assert [e["label"] for e in done["entries"]][3:] == [
        "Model · Tools",
        "Tool · search_docs",
        "Model",  # the call the user stopped
        "Error",
    ]
    assert done["entries"][5]["status"] == "skipped"
    # The same entries, now with their stored messages.
    assert [e["key"] for e in done["entries"][:5]] == [e["key"] for e in group["entries"]]
    assert set(done["entries"][3]["raw"]) == {"message", "step"}
    assert done["entries"][3]["summary"] == " ".join(SEARCH.split())
    assert set(done["entries"][4]["raw"]) == {"message", "action", "result"}
    assert (done["entries"][-1]["summary"], done["entries"][-1]["status"]) == (
        "Cancelled.",
        "cancelled",
    )


@pytest.mark.django_db(transaction=True)
async def test_a_run_cancelled_in_a_tool_call_keeps_its_model_output_joined_to_its_step(
    superuser, scripted, monkeypatch
):
    # The thought and the running action are stored when they happen, before the transcript
    # that points at the thought; the action cut short ends skipped.
    registry = ToolRegistry(
        [Tool(name="wait", description="Waits.", parameters=EMPTY, handler=until_cancelled)]
    )
    monkeypatch.setattr(agent.modes, "default_registry", lambda: registry)
    monkeypatch.setattr(agent.services, "default_registry", lambda: registry)
    scripted.script(["Thought: wait\nAction: tool:wait\nargs: {}"])
    turn = await chat_turn_start(user=superuser, message="wait a bit", use_agent=True)
    run, task = turn.run, turn.task
    assert run.trace_id is not None
    assert run.conversation_id is not None

    await scripted.wait_for_request()
    await asyncio.sleep(0.3)  # the tool is waiting
    await run_cancel(user=superuser, run=run)
    await asyncio.wait_for(task, timeout=15)
    action = await Step.objects.aget(trace_id=run.trace_id, step_type="action")
    assert action.status == "skipped"

    model_output = await Message.objects.aget(conversation_id=run.conversation_id, kind="step")
    assert model_output.step_id is not None
    thought = await Step.objects.aget(pk=model_output.step_id)
    assert thought.step_type == "thought"
    view = await sync_to_async(conversation_debug)(
        user=superuser, conversation_id=run.conversation_id
    )
    (group,) = view.groups
    assert [e.label for e in group.entries][3:] == ["Model · Tools", "Tool · wait", "Error"]
    assert group.entries[3].raw["message"]["id"] == str(model_output.id)


async def until_cancelled(args: dict[str, Any], context: ToolContext) -> dict[str, Any]:
    """A tool that works until the run is cancelled (its task is)."""
    await asyncio.sleep(15)
    raise RuntimeError("not cancelled")


@pytest.mark.django_db(transaction=True)
async def test_a_queued_run_is_its_group_with_its_request(superuser):
    # DevAssist starts its runs as it creates them; a queued run is one that another worker
    # has taken but not started yet: its message stored, nothing else.
    conversation = await sync_to_async(conversation_create)(owner=superuser)
    run = await AgentRun.objects.acreate(
        user=superuser,
        conversation=conversation,
        request_id="req-1",
        status="queued",
        input="queued question",
        model="fake-model",
    )
    (message,) = await sync_to_async(messages_append)(
        conversation_id=conversation.id,
        messages=[NewMessage("user", "queued question")],
        run_id=run.id,
        request_id="req-1",
    )
    async with asgi_client(await bearer(superuser)) as client:
        body = (await client.get(debug_url(conversation.id))).json()
    assert body["live"] is True
    (group,) = body["groups"]
    assert (group["key"], group["run_id"], group["status"], group["request_id"]) == (
        f"run:{run.id}",
        str(run.id),
        "queued",
        "req-1",
    )
    (request,) = group["entries"]
    assert (request["key"], request["label"], request["summary"]) == (
        f"message:{message.id}",
        "User",
        "queued question",
    )
    assert set(request["raw"]) == {"message"}


# --- cost -----------------------------------------------------------------------------------------


def add_run(conversation: Conversation, *, iterations: int, status: str = "completed") -> AgentRun:
    """A run with ``iterations`` ReAct iterations: its steps, transcript and answer (the
    transcript only once finished), each message pointing at its step."""
    trace = Trace.objects.create(user=conversation.owner, task="q")
    run = AgentRun.objects.create(
        user=conversation.owner,
        conversation=conversation,
        trace=trace,
        request_id=uuid.uuid4().hex,
        status=status,
        input="q",
        model="fake-model",
    )
    goal = Step(id=run.id, trace=trace, seq=1, step_type="goal", description="q")
    messages = [NewMessage(role="user", content="q", step_id=goal.id)]
    steps = [goal]
    now = timezone.now()
    for index in range(iterations):
        thought = Step(trace=trace, parent=goal, seq=3 * index + 2, step_type="thought")
        action = Step(
            trace=trace,
            parent=thought,
            seq=3 * index + 3,
            step_type="action",
            data={"tool_name": "search_docs", "arguments": {}},
            started_at=now + timedelta(seconds=index),
            duration_ms=5,
        )
        result = Step(
            trace=trace,
            parent=action,
            seq=3 * index + 4,
            step_type="result",
            data={"observation": "o"},
        )
        steps += [thought, action, result]
        messages += [
            NewMessage(role="assistant", content="a", kind="step", step_id=thought.id),
            NewMessage(role="tool", content="o", kind="step", step_id=result.id),
        ]
    response = Step(trace=trace, parent=goal, seq=3 * iterations + 2, step_type="response")
    Step.objects.bulk_create([*steps, response] if status != "queued" else [])
    if status == "queued":
        messages = [NewMessage(role="user", content="q")]
    elif status == "running":
        messages = messages[:1]
    else:
        messages.append(NewMessage(role="assistant", content="answer", step_id=response.id))
    messages_append(conversation_id=conversation.id, messages=messages, run_id=run.id)
    return run


@pytest.mark.django_db
@pytest.mark.parametrize(("runs", "iterations"), [(1, 1), (6, 40)])
def test_the_view_reads_in_four_queries_whatever_its_size(
    superuser, django_assert_num_queries, runs, iterations
):
    conversation = Conversation.objects.create(owner=superuser)
    for _ in range(runs):
        add_run(conversation, iterations=iterations)
    add_run(conversation, iterations=iterations, status="running")
    add_run(conversation, iterations=0, status="queued")
    messages_append(conversation_id=conversation.id, messages=[NewMessage("system", "a note")])
    with django_assert_num_queries(4):
        view = conversation_debug(user=superuser, conversation_id=conversation.id)
    assert view.live
    assert view.counts["tool"] == (runs + 1) * iterations
    assert len(view.groups) == runs + 3
    assert view.groups[-1].key.startswith("unlinked:")


@pytest.mark.django_db
def test_the_view_read_is_debug_view_on_the_stored_rows(superuser):
    """``conversation_debug`` reads each row straight into its record (ids as text); the view is
    the one ``debug_view`` makes of the same rows read with ``values()``."""
    conversation = Conversation.objects.create(owner=superuser)
    add_run(conversation, iterations=3)
    add_run(conversation, iterations=2, status="running")
    messages_append(conversation_id=conversation.id, messages=[NewMessage("system", "a note")])
    runs = AgentRun.objects.filter(conversation=conversation)

    view = conversation_debug(user=superuser, conversation_id=conversation.id)

    conversation.refresh_from_db()
    assert debug_view_json(view) == debug_view_json(
        debug_view(
            conversation_id=conversation.id,
            title=conversation.title,
            runs=runs.values(*RUN_FIELDS),
            steps=Step.objects.filter(trace__in=runs.values("trace")).values(*STEP_FIELDS),
            messages=Message.objects.filter(conversation=conversation).values(*MESSAGE_FIELDS),
        )
    )
    assert view.groups[0].entries[0].id == str(runs.order_by("created_at")[0].id)
