"""Conversation memory end to end: runs in a conversation through /agent (PostgreSQL, embedded
Chroma in a temporary directory, the offline provider or the scripted model server)."""

from __future__ import annotations

import json
import socket
import uuid
from collections.abc import Iterator
from http import HTTPStatus
from pathlib import Path
from typing import Any

import pytest
from django.db import connection

import chat.memory
from agent.llm import get_llm
from agent.models import AgentRun
from chat.memory import (
    MEMORY_PREFIX,
    ShortTermMemory,
    Turn,
    consolidate,
    extractive_facts,
    memory_config,
    short_term_memory,
)
from chat.models import Conversation, MemorySummary, Message, MessageKind, MessageRole
from chat.services import NewMessage, conversation_create, messages_append
from tests.servers import manage
from traces.models import Step

FACTS = [
    "My name is Ada Lovelace and I maintain the billing service.",
    "The billing service runs on Django 5.2 with PostgreSQL 16.",
    "We deploy every Tuesday with blue-green releases.",
    "Our error budget is ninety nine point nine percent.",
    "I prefer answers with short code examples.",
    "The team writes tests with pytest and factory functions.",
    "Invoices are rendered to PDF with WeasyPrint.",
    "Payments go through Stripe webhooks into a Celery queue.",
]


def post(client: Any, url: str, body: Any) -> Any:
    return client.post(url, data=json.dumps(body), content_type="application/json")


@pytest.fixture
def memory(settings: Any, knowledge: Path) -> Iterator[Any]:
    """Small memory limits (4 turns in the window, a summary per 6 evicted turns), the offline
    provider, Chroma in a temporary directory; caches reset around the test."""
    settings.MEMORY = {**settings.MEMORY, "short_term_turns": 4, "summary_threshold": 6}
    memory_config.cache_clear()
    short_term_memory.cache_clear()
    get_llm.cache_clear()
    yield settings
    memory_config.cache_clear()
    short_term_memory.cache_clear()
    get_llm.cache_clear()


def ask(api: Any, conversation: Conversation, message: str) -> dict[str, Any]:
    response = post(
        api, "/agent", {"message": message, "tools": [], "conversation_id": str(conversation.id)}
    )
    assert response.status_code == HTTPStatus.OK, response.content
    return response.json()


def steps_of(body: dict[str, Any], step_type: str) -> list[Step]:
    return list(Step.objects.filter(trace_id=body["trace_id"], step_type=step_type).order_by("seq"))


# --- short-term ---------------------------------------------------------------------------------


@pytest.mark.django_db
def test_a_run_in_a_conversation_stores_the_message_first_and_the_answer_after(api, user, memory):
    conversation = conversation_create(owner=user)

    body = ask(api, conversation, "Hello there, what can you do?")

    run = AgentRun.objects.get(pk=body["run_id"])
    assert body["conversation_id"] == str(conversation.id)
    assert run.conversation_id == conversation.id
    messages = list(conversation.messages.order_by("sequence"))
    assert [(m.role, m.kind) for m in messages] == [
        (MessageRole.USER, MessageKind.TURN),
        (MessageRole.ASSISTANT, MessageKind.STEP),
        (MessageRole.ASSISTANT, MessageKind.TURN),
    ]
    assert [m.sequence for m in messages] == [1, 2, 3]
    assert all(m.run_id == run.id for m in messages)
    assert messages[0].content == "Hello there, what can you do?"
    assert messages[1].content.startswith("Thought:")
    assert messages[2].content == body["answer"]
    conversation.refresh_from_db()
    assert conversation.title == "Hello there, what can you do?"
    assert conversation.last_sequence == 3


@pytest.mark.django_db
def test_the_window_keeps_the_last_turns_and_evicts_older_ones(api, user, memory, scripted):
    conversation = conversation_create(owner=user)
    scripted.script([f"Thought: ok\nAction: final: answer {n}" for n in range(1, 5)])

    for n in range(1, 5):
        body = ask(api, conversation, f"question {n}")

    sent = scripted.requests[-1]["messages"]
    history = [(m["role"], m["content"]) for m in sent[1:-1]]
    assert history == [
        ("user", "question 2"),
        ("assistant", "answer 2"),
        ("user", "question 3"),
        ("assistant", "answer 3"),
    ]
    assert sent[-1] == {"role": "user", "content": "question 4"}
    (short, _long) = steps_of(body, "memory_read")
    assert short.name == "short-term memory"
    assert short.data["turns"] == 4
    assert short.data["cached"] is True


@pytest.mark.django_db
def test_runs_in_other_conversations_and_without_one_remember_nothing(api, user, memory, scripted):
    first, second = conversation_create(owner=user), conversation_create(owner=user)
    scripted.script(["Thought: ok\nAction: final: noted"] * 3)

    ask(api, first, "Remember that the deploy key is in the vault.")
    ask(api, second, "What did I tell you?")
    post(api, "/agent", {"message": "And now?", "tools": []})

    for request in scripted.requests[1:]:
        assert [m["role"] for m in request["messages"]] == ["system", "user"]
    assert AgentRun.objects.filter(conversation__isnull=True).count() == 1


@pytest.mark.django_db
def test_a_foreign_or_unknown_conversation_is_not_found(api, other_user, memory):
    foreign = conversation_create(owner=other_user)

    for conversation_id in (foreign.id, "5a1e4c3e-0000-4000-8000-000000000000"):
        response = post(api, "/agent", {"message": "hi", "conversation_id": str(conversation_id)})
        assert response.status_code == HTTPStatus.NOT_FOUND
        assert response.json()["error"]["code"] == "conversation_not_found"
    assert not Message.objects.exists()
    assert not AgentRun.objects.exists()


@pytest.mark.django_db
def test_a_failed_run_keeps_the_user_message_and_its_transcript(api, user, memory, scripted):
    conversation = conversation_create(owner=user)
    scripted.script([{"status": 500}] * 5)

    response = post(api, "/agent", {"message": "hi", "conversation_id": str(conversation.id)})

    assert response.status_code == HTTPStatus.BAD_GATEWAY
    message, answer = conversation.messages.all()
    assert (message.role, message.content) == (MessageRole.USER, "hi")
    # The run's answer turn, empty: it wrote nothing before it failed.
    assert (answer.role, answer.content, answer.parent_id) == ("assistant", "", message.id)
    run = AgentRun.objects.get(pk=response.json()["error"]["details"]["run_id"])
    assert answer.run_id == run.id
    assert run.status == "failed"
    assert Step.objects.get(pk=run.id).error == response.json()["error"]["message"]


@pytest.mark.django_db
def test_the_cache_extends_its_branch_and_rereads_after_another_write(user):
    conversation = conversation_create(owner=user)
    memory = ShortTermMemory(turns=2, conversations=2)
    stored = messages_append(
        conversation_id=conversation.id,
        messages=[NewMessage(role="user", content=f"m{n}") for n in range(1, 5)],
    )

    turns, cached = memory.window(conversation.id, through_id=stored[-1].id)
    assert ([t.content for t in turns], cached) == (["m2", "m3", "m4"], False)

    more = messages_append(
        conversation_id=conversation.id,
        messages=[
            NewMessage(role="assistant", content="raw", kind=MessageKind.STEP),
            NewMessage(role="assistant", content="m6"),
        ],
    )
    memory.appended(conversation.id, more)
    turns, cached = memory.window(conversation.id, through_id=more[-1].id)
    assert ([t.content for t in turns], cached) == (["m3", "m4", "m6"], True)

    # Another worker wrote m7; this one appends m8, which does not follow the cached window.
    messages_append(conversation_id=conversation.id, messages=[NewMessage("user", "m7")])
    eighth = messages_append(conversation_id=conversation.id, messages=[NewMessage("user", "m8")])
    memory.appended(conversation.id, eighth)
    turns, cached = memory.window(conversation.id, through_id=eighth[0].id)
    assert ([t.content for t in turns], cached) == (["m6", "m7", "m8"], False)


@pytest.mark.django_db
def test_the_window_is_the_branch_of_the_new_message(user):
    """An edited message's window holds the turns before the message it replaces, not what
    followed that message."""
    conversation = conversation_create(owner=user)
    memory = ShortTermMemory(turns=5, conversations=2)
    first = messages_append(
        conversation_id=conversation.id,
        messages=[NewMessage("user", "q1"), NewMessage("assistant", "a1")],
    )
    abandoned = messages_append(
        conversation_id=conversation.id,
        messages=[NewMessage("user", "q2"), NewMessage("assistant", "a2")],
    )
    (edited,) = messages_append(
        conversation_id=conversation.id,
        messages=[NewMessage("user", "q2, edited", parent_id=first[-1].id, follows_tip=False)],
    )
    memory.window(conversation.id, through_id=abandoned[-1].id)

    turns, cached = memory.window(conversation.id, through_id=edited.id)

    assert ([t.content for t in turns], cached) == (["q1", "a1", "q2, edited"], False)


@pytest.mark.django_db
def test_the_cache_holds_at_most_its_capacity_of_conversations(user):
    memory = ShortTermMemory(turns=1, conversations=2)
    conversations = [conversation_create(owner=user) for _ in range(3)]
    firsts = []
    for conversation in conversations:
        firsts += messages_append(
            conversation_id=conversation.id, messages=[NewMessage("user", "hi")]
        )
        memory.window(conversation.id, through_id=firsts[-1].id)

    assert len(memory) == 2
    assert memory.window(conversations[0].id, through_id=firsts[0].id)[1] is False
    assert memory.window(conversations[2].id, through_id=firsts[2].id)[1] is True


@pytest.mark.django_db
def test_the_cache_knows_when_it_holds_a_whole_branch(user):
    memory = ShortTermMemory(turns=2, conversations=2)
    conversation = conversation_create(owner=user)
    (first,) = messages_append(conversation_id=conversation.id, messages=[NewMessage("user", "m1")])
    assert not memory.holds_whole(conversation.id, through_id=first.id)  # nothing cached
    memory.window(conversation.id, through_id=first.id)
    assert memory.holds_whole(conversation.id, through_id=first.id)
    assert not memory.holds_whole(conversation.id, through_id=uuid.uuid4())  # another branch

    more = messages_append(
        conversation_id=conversation.id,
        messages=[NewMessage("assistant", "m2"), NewMessage("user", "m3")],
    )
    memory.appended(conversation.id, more)
    # Three turns fill the window (2 + the newest): older turns may exist beyond it.
    assert not memory.holds_whole(conversation.id, through_id=more[-1].id)


async def test_consolidation_asks_the_database_only_when_turns_may_have_left_the_window(
    monkeypatch: pytest.MonkeyPatch, memory: Any
) -> None:
    asked: list[uuid.UUID] = []

    def pending(conversation_id: uuid.UUID, through_id: Any, config: Any) -> list[Turn]:
        asked.append(conversation_id)
        return []

    monkeypatch.setattr(chat.memory, "_pending_turns", pending)
    cache = short_term_memory()
    whole, full = uuid.uuid4(), uuid.uuid4()
    monkeypatch.setattr(
        cache, "holds_whole", lambda conversation_id, *, through_id: conversation_id == whole
    )
    llm = get_llm()

    assert await consolidate(conversation_id=whole, llm=llm, through_id=uuid.uuid4()) is None
    assert asked == []
    assert await consolidate(conversation_id=full, llm=llm, through_id=uuid.uuid4()) is None
    assert await consolidate(conversation_id=whole, llm=llm) is None
    assert asked == [full, whole]  # without a turn the cache cannot vouch for anything


# --- long-term ----------------------------------------------------------------------------------


def fill(api: Any, conversation: Conversation, facts: list[str]) -> list[dict[str, Any]]:
    return [ask(api, conversation, fact) for fact in facts]


@pytest.mark.django_db
def test_evicted_turns_are_summarised_into_facts_once_enough_accumulate(api, user, memory):
    conversation = conversation_create(owner=user)

    bodies = fill(api, conversation, FACTS[:4])

    # 8 turns, 4 in the window: 4 evicted, below the threshold of 6.
    assert not MemorySummary.objects.exists()
    assert all(not steps_of(body, "memory_write") for body in bodies)

    body = ask(api, conversation, FACTS[4])

    # 10 turns: the 6 before the window are summarised, offline, from the user's statements.
    (summary,) = MemorySummary.objects.filter(conversation=conversation)
    assert (summary.from_sequence, summary.model) == (1, "offline")
    assert summary.facts[:3] == [f"User: {fact}" for fact in FACTS[:3]]
    assert len(summary.facts) <= memory.MEMORY["max_facts"]
    (write,) = steps_of(body, "memory_write")
    assert write.status == "completed"
    assert write.data["facts"] == summary.facts
    assert write.data["summary_id"] == str(summary.id)


@pytest.mark.django_db
def test_recalled_facts_reach_the_model_as_one_long_term_memory_message(
    api, user, memory, scripted, settings
):
    conversation = conversation_create(owner=user)
    settings.LLM = {"BACKEND": "agent.llm.offline.OfflineProvider", "OPTIONS": {}}
    get_llm.cache_clear()
    fill(api, conversation, FACTS[:5])
    summary = MemorySummary.objects.get(conversation=conversation)
    settings.LLM = {
        "BACKEND": "agent.llm.openai_provider.OpenAIProvider",
        "OPTIONS": {"base_url": scripted.base_url, "api_key": "k", "model": "fake-model"},
    }
    get_llm.cache_clear()
    scripted.script(["Thought: I know.\nAction: final: You are Ada."])

    body = ask(api, conversation, "Who maintains the billing service?")

    sent = scripted.requests[0]["messages"]
    memory_message = sent[1]
    assert memory_message["role"] == "system"
    lines = memory_message["content"].splitlines()
    assert lines[0] == MEMORY_PREFIX
    assert lines[1:] == [f"- {fact}" for fact in summary.facts]
    assert [m["role"] for m in sent[2:]] == ["user", "assistant"] * 2 + ["user"]
    (_short, long_term) = steps_of(body, "memory_read")
    assert long_term.status == "completed"
    assert long_term.data["facts"] == summary.facts
    stored = Message.objects.get(run_id=body["run_id"], kind=MessageKind.MEMORY)
    assert stored.content == memory_message["content"]


@pytest.mark.django_db
def test_the_model_writes_the_summary_when_one_is_configured(api, user, memory, scripted):
    conversation = conversation_create(owner=user)
    answers = [f"Thought: ok\nAction: final: noted {n}" for n in range(5)]
    scripted.script([*answers[:4], answers[4], "- Ada maintains billing.\n- Deploys on Tuesday."])

    bodies = fill(api, conversation, FACTS[:5])

    summary = MemorySummary.objects.get(conversation=conversation)
    assert summary.facts == ["Ada maintains billing.", "Deploys on Tuesday."]
    assert summary.model == "fake-model"
    summary_request = scripted.requests[-1]["messages"]
    assert "at most 8 short, stable facts" in summary_request[0]["content"]
    assert f"user: {FACTS[0]}" in summary_request[1]["content"]
    # The call is a step of the run's trace, under the memory write: its tokens count, and
    # the trace (and the OTel export) show what it was asked and what it answered.
    (write,) = steps_of(bodies[-1], "memory_write")
    call = Step.objects.get(trace_id=bodies[-1]["trace_id"], step_type="thought", name="summary")
    assert (call.parent_id, call.status) == (write.id, "completed")
    assert call.data["input"] == summary_request
    assert call.data["output"] == "- Ada maintains billing.\n- Deploys on Tuesday."
    assert call.data["model"] == "fake-model"
    assert call.tokens > 0


@pytest.mark.django_db
def test_a_summary_the_model_fails_is_a_failed_step_and_the_turns_wait(api, user, memory, scripted):
    conversation = conversation_create(owner=user)
    answers = [f"Thought: ok\nAction: final: noted {n}" for n in range(5)]
    scripted.script([*answers, {"status": 500}, {"status": 500}])

    bodies = fill(api, conversation, FACTS[:5])

    assert not MemorySummary.objects.exists()
    (write,) = steps_of(bodies[-1], "memory_write")
    call = Step.objects.get(trace_id=bodies[-1]["trace_id"], name="summary")
    assert (write.status, call.status, call.parent_id) == ("failed", "failed", write.id)
    assert call.error == write.error
    assert "500" in call.error
    assert call.data["input"] == scripted.requests[-1]["messages"]
    assert "output" not in call.data
    assert AgentRun.objects.get(pk=bodies[-1]["run_id"]).status == "completed"


@pytest.mark.django_db
def test_memories_never_cross_conversations(api, user, other_user, other_api, memory):
    mine = conversation_create(owner=user)
    fill(api, mine, FACTS[:5])
    theirs = conversation_create(owner=other_user)

    body = ask(other_api, theirs, "Who maintains the billing service?")

    (_short, long_term) = steps_of(body, "memory_read")
    assert long_term.data["facts"] == []
    assert not Message.objects.filter(conversation=theirs, kind=MessageKind.MEMORY).exists()


@pytest.mark.django_db
def test_a_forked_branch_recalls_nothing_the_abandoned_branch_said(api, user, memory):
    conversation = conversation_create(owner=user)
    fill(api, conversation, FACTS[:5])
    assert MemorySummary.objects.filter(conversation=conversation).exists()
    first = Message.objects.filter(conversation=conversation, role="user").earliest("sequence")

    edited = post(
        api,
        f"/chat/messages/{first.id}/edit",
        {"message": "Let us talk about something else.", "use_agent": True},
    )
    assert edited.status_code == HTTPStatus.OK, edited.content
    bodies = fill(api, conversation, ["It is sunny today.", "Who maintains the billing service?"])

    # The new branch is longer than the window, so the store is asked; the summary of the
    # other branch is not recalled.
    (short, long_term) = steps_of(bodies[-1], "memory_read")
    assert short.data["turns"] == 4
    assert long_term.data["searched"] is True
    assert long_term.data["facts"] == []
    assert not Message.objects.filter(run_id=bodies[-1]["run_id"], kind=MessageKind.MEMORY).exists()


@pytest.mark.django_db(transaction=True)
def test_long_term_memory_survives_a_process_restart(api, user, memory, knowledge):
    conversation = conversation_create(owner=user)
    fill(api, conversation, FACTS[:5])
    facts = MemorySummary.objects.get(conversation=conversation).facts
    database = connection.settings_dict

    code = (
        "import asyncio, uuid\n"
        "from chat.memory import recall\n"
        "from chat.services import NewMessage, messages_append\n"
        f"c = uuid.UUID('{conversation.id}')\n"
        "(m,) = messages_append(conversation_id=c, messages=[NewMessage('user', 'Billing?')])\n"
        "r = asyncio.run(recall(conversation_id=c, asked_id=m.id, query='billing service'))\n"
        "print('\\n'.join(r.facts))\n"
    )
    output = manage(
        {
            "DATABASE_URL": (
                f"postgres://{database['USER']}@{database['HOST']}:{database['PORT']}"
                f"/{database['NAME']}"
            ),
            "CHROMA_PATH": str(knowledge),
            "LOG_LEVEL": "WARNING",
            # The same window as the process that wrote the memory (the ``memory`` fixture).
            "MEMORY_SHORT_TERM_TURNS": str(memory.MEMORY["short_term_turns"]),
            "MEMORY_SUMMARY_THRESHOLD": str(memory.MEMORY["summary_threshold"]),
        },
        "shell",
        "--no-imports",
        "-c",
        code,
    )

    assert output.splitlines() == facts


@pytest.mark.django_db
def test_a_failing_long_term_store_never_fails_the_run(api, user, memory, settings):
    conversation = conversation_create(owner=user)
    fill(api, conversation, FACTS[:4])
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed_port = probe.getsockname()[1]
    settings.CHROMA_URL = f"http://127.0.0.1:{closed_port}"

    body = ask(api, conversation, FACTS[4])

    assert body["answer"]
    (_short, long_term) = steps_of(body, "memory_read")
    assert long_term.status == "failed"
    assert long_term.error
    (write,) = steps_of(body, "memory_write")
    assert write.status == "failed"
    assert write.error
    # Nothing was summarised: the turns stay pending for the next time.
    assert not MemorySummary.objects.exists()
    assert AgentRun.objects.get(pk=body["run_id"]).status == "completed"


@pytest.mark.django_db
def test_the_long_term_store_is_asked_only_once_a_turn_has_left_the_window(
    api, user, memory, settings
):
    # A long-term store that cannot be reached: asking it shows as a failed memory_read.
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed_port = probe.getsockname()[1]
    settings.CHROMA_URL = f"http://127.0.0.1:{closed_port}"
    conversation = conversation_create(owner=user)

    # The window holds 4 earlier turns and the new one: the first two questions see every
    # turn so far; with the third the window is full, and older turns may have left it.
    first = ask(api, conversation, FACTS[0])
    (_short, long_term) = steps_of(first, "memory_read")
    assert long_term.status == "completed"
    assert long_term.data["searched"] is False
    ask(api, conversation, FACTS[1])
    third = ask(api, conversation, FACTS[2])
    (_short, long_term) = steps_of(third, "memory_read")
    assert long_term.data["searched"] is True
    assert long_term.status == "failed"


def test_extractive_facts_keep_statements_and_leave_questions_out():
    turns = [
        Turn("user", "Hi. My project is called Atlas and it uses FastAPI. Can you help?", 1),
        Turn("assistant", "Sure. Atlas can move to Django with a thin adapter layer.", 2),
        Turn("user", "我们的团队在上海，每周五发布新版本。", 3),
        Turn("user", "My project is called Atlas and it uses FastAPI.", 4),
    ]

    facts = extractive_facts(turns, max_facts=8)

    assert facts == [
        "User: My project is called Atlas and it uses FastAPI.",
        "User: 我们的团队在上海，每周五发布新版本。",
        "Assistant: Atlas can move to Django with a thin adapter layer.",
    ]
    assert len(extractive_facts(turns * 5, max_facts=2)) == 2
