"""Turns as a tree: regenerate (answers as versions), edit and resend (a fork), choosing the
branch shown, what the model is given on each branch, feedback, titles, and the refusals."""

from __future__ import annotations

import asyncio
from http import HTTPStatus
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.core.management import call_command

from agent.models import AgentRun, RunEvent
from agent.services import run_cancel
from chat.exceptions import ConversationBusy
from chat.models import Conversation, Message, MessageKind, TitleSource
from chat.selectors import display_messages
from chat.services import (
    NewMessage,
    conversation_branch_choose,
    conversation_create,
    conversation_delete,
    messages_append,
    title_from,
)
from chat.turns import chat_turn_regenerate, chat_turn_start
from tests.agent.test_agent_api import assert_error, post
from traces.models import Step

pytestmark = pytest.mark.django_db


def chat(api: Any, message: str, conversation_id: Any = None) -> dict[str, Any]:
    body = {"message": message, "use_agent": False, "use_rag": False}
    if conversation_id is not None:
        body["conversation_id"] = str(conversation_id)
    response = post(api, "/chat", body)
    assert response.status_code == HTTPStatus.OK, response.content
    return response.json()


def shown(api: Any, conversation_id: Any) -> list[tuple[str, str, int, int]]:
    """The branch shown: each turn's role, text, version and number of versions."""
    messages = api.get(f"/chat/conversations/{conversation_id}").json()["messages"]
    return [(m["role"], m["content"], m["version"], len(m["versions"])) for m in messages]


def turn_ids(api: Any, conversation_id: Any) -> list[str]:
    messages = api.get(f"/chat/conversations/{conversation_id}").json()["messages"]
    return [m["id"] for m in messages]


def asked_of(scripted: Any) -> list[str]:
    """The texts of the messages the model was given in its last call."""
    return [m["content"] for m in scripted.requests[-1]["messages"][1:]]


def test_turns_chain_and_each_answer_follows_its_question(api, scripted):
    scripted.script(["A1", "A2"])
    first = chat(api, "Q1")
    chat(api, "Q2", first["conversation_id"])

    turns = list(Message.objects.turns().order_by("sequence"))

    assert [t.content for t in turns] == ["Q1", "A1", "Q2", "A2"]
    assert [t.parent_id for t in turns] == [None, turns[0].id, turns[1].id, turns[2].id]
    assert Conversation.objects.get().current_id == turns[-1].id
    assert asked_of(scripted) == ["Q1", "A1", "Q2"]


def test_regenerating_an_answer_adds_a_version_and_keeps_the_first(api, scripted):
    scripted.script(["A1", "A1 again", "A1 once more"])
    body = chat(api, "Q1")
    conversation_id = body["conversation_id"]
    first_answer = turn_ids(api, conversation_id)[1]

    again = api.post(f"/chat/messages/{first_answer}/regenerate")

    assert again.status_code == HTTPStatus.OK, again.content
    assert again.json()["reply"] == "A1 again"
    assert again.json()["route"] == "chat"  # the regenerated answer's own route
    assert shown(api, conversation_id) == [("user", "Q1", 1, 1), ("assistant", "A1 again", 2, 2)]
    # The model was asked the same message with the same (empty) history.
    assert asked_of(scripted) == ["Q1"]
    # From the user message, with no body at all: a third version.
    question = turn_ids(api, conversation_id)[0]
    assert api.post(f"/chat/messages/{question}/regenerate").status_code == HTTPStatus.OK
    assert shown(api, conversation_id)[1] == ("assistant", "A1 once more", 3, 3)
    assert AgentRun.objects.filter(conversation_id=conversation_id).count() == 3


def test_choosing_a_version_shows_its_branch_and_later_messages_continue_it(api, scripted):
    scripted.script(["A1", "A1 again", "A2"])
    conversation_id = chat(api, "Q1")["conversation_id"]
    answer = turn_ids(api, conversation_id)[1]
    api.post(f"/chat/messages/{answer}/regenerate")

    chosen = post(api, f"/chat/conversations/{conversation_id}/branch", {"message_id": answer})
    assert chosen.status_code == HTTPStatus.OK
    assert [(m["content"], m["version"]) for m in chosen.json()["messages"]] == [
        ("Q1", 1),
        ("A1", 1),
    ]
    chat(api, "Q2", conversation_id)

    assert asked_of(scripted) == ["Q1", "A1", "Q2"]
    assert [content for _, content, _, _ in shown(api, conversation_id)] == [
        "Q1",
        "A1",
        "Q2",
        "A2",
    ]


def test_editing_a_message_forks_and_the_new_branch_forgets_the_old_one(api, scripted):
    scripted.script(["A1", "A2", "A2 for the edit", "A3"])
    conversation_id = chat(api, "Q1")["conversation_id"]
    chat(api, "Q2 with a typo", conversation_id)
    question = turn_ids(api, conversation_id)[2]

    edited = post(api, f"/chat/messages/{question}/edit", {"message": "Q2", "use_agent": False})

    assert edited.status_code == HTTPStatus.OK, edited.content
    assert asked_of(scripted) == ["Q1", "A1", "Q2"]
    assert shown(api, conversation_id) == [
        ("user", "Q1", 1, 1),
        ("assistant", "A1", 1, 1),
        ("user", "Q2", 2, 2),
        ("assistant", "A2 for the edit", 1, 1),
    ]
    chat(api, "Q3", conversation_id)
    assert asked_of(scripted) == ["Q1", "A1", "Q2", "A2 for the edit", "Q3"]
    # The old branch is still there, whole.
    post(api, f"/chat/conversations/{conversation_id}/branch", {"message_id": question})
    assert [content for _, content, _, _ in shown(api, conversation_id)] == [
        "Q1",
        "A1",
        "Q2 with a typo",
        "A2",
    ]


def test_the_first_message_can_be_edited_too(api, scripted):
    scripted.script(["A1", "B1"])
    conversation_id = chat(api, "Q1")["conversation_id"]
    first = turn_ids(api, conversation_id)[0]

    post(api, f"/chat/messages/{first}/edit", {"message": "Other question"})

    assert shown(api, conversation_id) == [
        ("user", "Other question", 2, 2),
        ("assistant", "B1", 1, 1),
    ]
    assert asked_of(scripted) == ["Other question"]


def test_refusals(api, other_api, scripted):
    scripted.script(["A1", "theirs too"])
    conversation_id = chat(api, "Q1")["conversation_id"]
    question, answer = turn_ids(api, conversation_id)

    assert_error(
        other_api.post(f"/chat/messages/{answer}/regenerate"),
        HTTPStatus.NOT_FOUND,
        "message_not_found",
    )
    assert_error(
        post(api, f"/chat/messages/{answer}/edit", {"message": "x"}),
        HTTPStatus.BAD_REQUEST,
        "message_action_invalid",
    )
    assert_error(
        post(api, f"/chat/messages/{question}/edit", {"message": "  "}),
        HTTPStatus.BAD_REQUEST,
        "chat_input_invalid",
    )
    assert_error(
        post(api, f"/chat/messages/{question}/feedback", {"rating": "up"}),
        HTTPStatus.BAD_REQUEST,
        "message_action_invalid",
    )
    assert_error(
        post(api, f"/chat/messages/{answer}/feedback", {"rating": "meh"}),
        HTTPStatus.UNPROCESSABLE_ENTITY,
        "validation_error",
    )
    assert_error(
        post(api, f"/chat/conversations/{conversation_id}/branch", {"message_id": answer[:-4]}),
        HTTPStatus.UNPROCESSABLE_ENTITY,
        "validation_error",
    )
    other = chat(other_api, "theirs")
    their_answer = turn_ids(other_api, other["conversation_id"])[1]
    assert_error(
        post(api, f"/chat/conversations/{conversation_id}/branch", {"message_id": their_answer}),
        HTTPStatus.NOT_FOUND,
        "message_not_found",
    )


@pytest.mark.django_db(transaction=True)
async def test_a_conversation_with_a_run_going_refuses_to_change_its_branch(user, scripted):
    scripted.script(["A1", {"content": "slow", "delay_s": 2}])
    done = await chat_turn_start(user=user, message="Q1", use_agent=False, use_rag=False)
    await done.task
    going = await chat_turn_start(
        user=user,
        message="Q2",
        conversation_id=done.run.conversation_id,
        use_agent=False,
        use_rag=False,
    )
    conversation = await Conversation.objects.aget(runs=done.run)
    first_answer = await Message.objects.aget(run=done.run, role="assistant")
    choose = sync_to_async(conversation_branch_choose)

    with pytest.raises(ConversationBusy):
        await choose(conversation=conversation, message_id=first_answer.id)
    with pytest.raises(ConversationBusy):
        await chat_turn_regenerate(user=user, message_id=first_answer.id)
    await going.task
    await choose(conversation=conversation, message_id=first_answer.id)
    # The branch through it, to its newest turn: the answer that was going.
    slow = await Message.objects.aget(run=going.run, role="assistant")
    assert (conversation.current_id, slow.content) == (slow.id, "slow")


def test_feedback_is_recorded_on_the_trace_and_the_newest_counts(api, user, scripted):
    scripted.script(["A1"])
    body = chat(api, "Q1")
    answer = turn_ids(api, body["conversation_id"])[1]

    first = post(api, f"/chat/messages/{answer}/feedback", {"rating": "up"})
    second = post(
        api, f"/chat/messages/{answer}/feedback", {"rating": "down", "comment": "  Wrong.  "}
    )

    assert first.status_code == second.status_code == HTTPStatus.OK
    assert second.json()["comment"] == "Wrong."
    steps = Step.objects.filter(trace_id=body["trace_id"], step_type="feedback").order_by("seq")
    assert [(s.data["rating"], s.data["comment"], s.parent_id) for s in steps] == [
        ("up", "", AgentRun.objects.get().id),
        ("down", "Wrong.", AgentRun.objects.get().id),
    ]
    shown_answer = api.get(f"/chat/conversations/{body['conversation_id']}").json()["messages"][1]
    assert (shown_answer["feedback"]["rating"], shown_answer["feedback"]["comment"]) == (
        "down",
        "Wrong.",
    )
    trace = api.get(f"/api/traces/{body['trace_id']}").json()
    assert trace["status"] == "completed"  # feedback comes after the fact
    assert trace["total_steps"] == Step.objects.filter(trace_id=body["trace_id"]).count()


def test_the_branch_shown_is_read_in_four_queries(api, scripted, django_assert_num_queries):
    scripted.script(["A1", {"status": 500}, {"status": 500}, "A3"])
    conversation_id = chat(api, "Q1")["conversation_id"]
    failed = post(
        api,
        "/chat",
        {"message": "Q2", "conversation_id": conversation_id, "use_agent": False},
    )
    assert failed.status_code == HTTPStatus.BAD_GATEWAY
    chat(api, "Q3", conversation_id)
    answer = Message.objects.get(content="A1")
    post(api, f"/chat/messages/{answer.id}/feedback", {"rating": "up"})
    conversation = Conversation.objects.get()

    # The turns (with runs and steps), their files, the failed run's error, the feedback.
    with django_assert_num_queries(4):
        messages = display_messages(conversation=conversation)

    assert [(m.role, m.content, m.run_status) for m in messages] == [
        ("user", "Q1", "completed"),
        ("assistant", "A1", "completed"),
        ("user", "Q2", "failed"),
        ("assistant", "", "failed"),
        ("user", "Q3", "completed"),
        ("assistant", "A3", "completed"),
    ]
    assert messages[3].error.startswith("The model endpoint")
    assert messages[1].feedback is not None
    # The failed turn's empty answer is not history: the model saw Q1, A1, Q2, Q3.
    assert asked_of(scripted) == ["Q1", "A1", "Q2", "Q3"]


@pytest.mark.parametrize(
    ("text", "title"),
    [
        ("```python\nprint(1)\n```", "print(1)"),
        ("## How do I **configure** the `sandbox`?", "How do I configure the sandbox?"),
        ("> quoted\n\nreal question", "quoted"),
        ("- [the docs](http://x) say", "the docs say"),
        ("```\n\n```\n\n   ", ""),
        ("  How do I configure\nthe sandbox?", "How do I configure"),
    ],
)
def test_titles_from_a_message_carry_no_markdown(text, title):
    assert title_from(text) == title


def test_a_model_titles_the_first_exchange_and_the_call_is_a_step(api, scripted, settings):
    settings.CHAT_TITLES = "model"
    scripted.script(["Use SANDBOX_MEMORY_MB.", '"Sandbox memory limit."', "A2"])

    body = chat(api, "## How do I *change* the memory?")

    conversation = Conversation.objects.get()
    assert (conversation.title, conversation.title_source) == (
        "Sandbox memory limit",
        TitleSource.MODEL,
    )
    step = Step.objects.get(trace_id=body["trace_id"], step_type="thought", name="title")
    assert step.data["output"] == '"Sandbox memory limit."'
    assert "How do I *change* the memory?" in str(scripted.requests[1]["messages"])
    # Later exchanges keep it.
    chat(api, "and the CPU?", conversation.id)
    assert Conversation.objects.get().title == "Sandbox memory limit"
    assert len(scripted.requests) == 3


def test_a_title_the_user_set_is_never_replaced(api, user, scripted, settings):
    settings.CHAT_TITLES = "model"
    scripted.script(["A1", "A model title"])
    conversation = conversation_create(owner=user)
    api.patch(
        f"/chat/conversations/{conversation.id}",
        data='{"title": "Mine"}',
        content_type="application/json",
    )

    chat(api, "Q1", conversation.id)

    assert Conversation.objects.get().title == "Mine"
    assert len(scripted.requests) == 1  # no title call at all


def test_a_failing_title_call_fails_only_its_step(api, scripted, settings):
    settings.CHAT_TITLES = "model"
    scripted.script(["A1", {"status": 500}, {"status": 500}])

    body = chat(api, "## Q1 here")

    assert body["reply"] == "A1"
    assert Conversation.objects.get().title == "Q1 here"
    step = Step.objects.get(trace_id=body["trace_id"], name="title")
    assert step.status == "failed"
    assert AgentRun.objects.get().status == "completed"


def test_purge_command_deletes_what_can_no_longer_be_restored(user, settings):
    kept = conversation_create(owner=user, title="kept")
    gone = conversation_create(owner=user, title="gone")
    messages_append(conversation_id=gone.id, messages=[NewMessage("user", "bye")])
    conversation_delete(conversation=gone)
    settings.CHAT_UNDO_DELETE_S = 3600
    call_command("purge_conversations")
    assert Conversation.objects.count() == 2

    settings.CHAT_UNDO_DELETE_S = 0
    call_command("purge_conversations")

    assert list(Conversation.objects.values_list("title", flat=True)) == ["kept"]
    assert not Message.objects.filter(kind=MessageKind.TURN, content="bye").exists()
    assert kept.title == "kept"


@pytest.mark.django_db(transaction=True)
async def test_a_stopped_answer_keeps_what_was_streamed_in_its_turn_and_trace(user, scripted):
    scripted.script([{"content": "one two three four five six", "chunk_delay_s": 0.3}])
    turn = await chat_turn_start(user=user, message="count", use_agent=False, use_rag=False)
    await scripted.wait_for_request()
    await asyncio.sleep(1.0)  # two or three pieces streamed
    assert await RunEvent.objects.filter(run=turn.run, type="delta").aexists()

    await run_cancel(user=user, run=turn.run)
    await asyncio.wait([turn.task])

    answer = await Message.objects.select_related("step").aget(run=turn.run, role="assistant")
    assert answer.content.startswith("one two")
    assert "six" not in answer.content
    assert answer.step is not None
    assert (answer.step.step_type, answer.step.status) == ("response", "skipped")
    assert answer.step.data == {
        "answer": answer.content,
        "partial": True,
        "run_status": "cancelled",
    }
    run = await AgentRun.objects.aget(pk=turn.run.id)
    assert run.status == "cancelled"
