"""POST /chat end to end (PostgreSQL, the scripted model server, real Docker for the agent
route) and its bad input; the conversation API."""

from __future__ import annotations

import asyncio
import json
from http import HTTPStatus
from typing import Any

import pytest

from agent.models import AgentRun, RunEvent
from chat.models import Conversation, Message
from chat.services import conversations_purge
from tests.agent.test_agent_api import assert_error, post, sse_events
from tests.chat.conftest import asgi_client, bearer
from traces.models import Step

README_MESSAGE = "写一个 add(a,b) 并用 execute_code 验证"
ADD_ACTION = (
    "Thought: I will write add and check it.\nAction: tool:execute_code\n"
    'args: {"code": "def add(a, b):\\n    return a + b\\nprint(add(2, 3))"}'
)


def stream_types(events: list[tuple[int, dict[str, Any]]]) -> list[str]:
    return [event["type"] for _, event in events]


def deltas(events: list[tuple[int, dict[str, Any]]]) -> str:
    return "".join(event["content"] for _, event in events if event["type"] == "delta")


# --- routes, non-streaming --------------------------------------------------------------------


@pytest.mark.django_db
def test_plain_chat_answers_and_stores_the_turns(api, user, scripted):
    scripted.script(["Hello! How can I help?"])
    response = post(api, "/chat", {"message": "hello there"})
    assert response.status_code == HTTPStatus.OK, response.content
    body = response.json()
    assert (body["route"], body["reply"], body["model"]) == (
        "chat",
        "Hello! How can I help?",
        "fake-model",
    )
    assert body["steps"] == []
    assert body["sources"] == []
    conversation = Conversation.objects.get(pk=body["conversation_id"])
    assert (conversation.owner, conversation.title) == (user, "hello there")
    turns = list(conversation.messages.turns().values_list("role", "content"))
    assert turns == [("user", "hello there"), ("assistant", "Hello! How can I help?")]
    run = AgentRun.objects.get(pk=body["run_id"])
    assert (run.mode, run.status, run.tools) == ("chat", "completed", [])
    types = list(
        Step.objects.filter(trace=run.trace).order_by("seq").values_list("step_type", flat=True)
    )
    assert types == ["goal", "memory_read", "memory_read", "thought", "response"]
    sent = scripted.requests[0]["messages"]
    assert sent[0]["role"] == "system"
    assert sent[-1] == {"role": "user", "content": "hello there"}


@pytest.mark.django_db
def test_a_conversation_remembers_and_ignores_the_sent_history(api, scripted):
    scripted.script(["Nice to meet you, Ada.", "Your name is Ada."])
    first = post(api, "/chat", {"message": "My name is Ada.", "use_agent": False}).json()
    second = post(
        api,
        "/chat",
        {
            "message": "What is my name?",
            "conversation_id": first["conversation_id"],
            "use_agent": False,
            "use_rag": False,
            "history": [{"role": "user", "content": "My name is Bob."}],
        },
    ).json()
    assert second["conversation_id"] == first["conversation_id"]
    sent = [(m["role"], m["content"]) for m in scripted.requests[1]["messages"][1:]]
    assert sent == [
        ("user", "My name is Ada."),
        ("assistant", "Nice to meet you, Ada."),
        ("user", "What is my name?"),
    ]


@pytest.mark.django_db
def test_without_a_conversation_the_sent_history_is_used_and_kept(api, scripted):
    scripted.script(["You said your name is Bob."])
    history = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "My name is Bob."},
        {"role": "assistant", "content": "Hi Bob."},
    ]
    body = post(api, "/chat", {"message": "Who am I", "history": history}).json()
    sent = [(m["role"], m["content"]) for m in scripted.requests[0]["messages"][1:]]
    assert sent == [(m["role"], m["content"]) for m in history] + [("user", "Who am I")]
    conversation = Conversation.objects.get(pk=body["conversation_id"])
    assert conversation.messages.turns().count() == 5
    shown = api.get(f"/chat/conversations/{conversation.id}").json()["messages"]
    assert [m["role"] for m in shown] == ["user", "assistant", "user", "assistant"]


@pytest.mark.django_db
def test_rag_route_answers_with_sources(api, scripted, guide):
    scripted.script(["Set SANDBOX_MEMORY_MB to change it [1]."])
    body = post(api, "/chat", {"message": "How do I change the sandbox memory limit?"}).json()
    assert body["route"] == "rag"
    assert body["reply"].startswith("Set SANDBOX_MEMORY_MB to change it [1].\n\nSources:\n1. ")
    (source,) = body["sources"]
    assert source["number"] == 1
    assert source["source"] == "sandbox.md"
    (step,) = body["steps"]
    assert step["tool_name"] == "search_docs"
    assert step["tool_args"]["query"] == "How do I change the sandbox memory limit?"
    run = AgentRun.objects.get(pk=body["run_id"])
    response_step = Step.objects.get(trace=run.trace, step_type="response")
    assert response_step.data["sources"] == body["sources"]
    answer = Message.objects.get(run=run, role="assistant", kind="turn")
    # Stored once: the answer points at the step that holds them.
    assert answer.step_id == response_step.id
    assert answer.metadata == {}
    assert run.mode == "rag"


@pytest.mark.django_db
def test_offline_chat_runs_the_code_it_is_given(api, sandbox_image):
    response = post(api, "/chat", {"message": "```python\nprint(3 * 3)\n```", "use_agent": False})
    assert response.status_code == HTTPStatus.OK, response.content
    body = response.json()
    assert body["route"] == "chat"
    assert body["model"] == "offline"
    (step,) = body["steps"]
    assert step["tool_name"] == "execute_code"
    assert "9" in body["reply"]


@pytest.mark.django_db
def test_rag_of_a_missing_collection_is_404(api, guide):
    assert_error(
        post(api, "/chat", {"message": "x?", "use_rag": True, "collection_name": "nope"}),
        HTTPStatus.NOT_FOUND,
        "collection_not_found",
    )
    assert AgentRun.objects.count() == 0


@pytest.mark.django_db
def test_rag_when_the_default_collection_does_not_exist_is_404(api, knowledge, settings):
    settings.KNOWLEDGE_DEFAULT_COLLECTION = "never_ingested"
    for stream in ("false", "true"):
        assert_error(
            post(api, f"/chat?stream={stream}", {"message": "what is it?", "use_rag": True}),
            HTTPStatus.NOT_FOUND,
            "collection_not_found",
        )
    assert AgentRun.objects.count() == 0


# --- streaming --------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
async def test_chat_stream_sends_meta_deltas_and_done(user, scripted):
    scripted.script(
        [{"content": "Hello from the model", "chunks": ["Hello ", "from ", "the model"]}]
    )
    async with asgi_client(await bearer(user)) as client:
        response = await client.post("/chat?stream=true", json={"message": "hi"})
    assert response.headers["content-type"].startswith("text/event-stream")
    events = sse_events(response.text)
    assert [seq for seq, _ in events] == list(range(1, len(events) + 1))
    types = stream_types(events)
    assert (types[0], types[-1]) == ("meta", "done")
    meta = events[0][1]
    assert (meta["agent"], meta["rag"], meta["model"]) == (False, False, "fake-model")
    assert meta["conversation_id"]
    assert deltas(events) == "Hello from the model"
    assert events[-1][1]["status"] == "completed"


@pytest.mark.django_db(transaction=True)
async def test_readme_curl_example_streams_an_execute_code_step(user, scripted, sandbox_image):
    scripted.script([ADD_ACTION, "Thought: it printed 5\nAction: final: add(2, 3) returns 5."])
    async with asgi_client(await bearer(user)) as client:
        response = await client.post(
            "/chat?stream=true", json={"message": README_MESSAGE, "use_agent": True}
        )
    events = sse_events(response.text)
    types = stream_types(events)
    assert events[0][1]["agent"] is True
    steps = [event for _, event in events if event["type"] == "step"]
    assert steps[0]["tool_name"] == "execute_code"
    assert steps[0]["observation"]["stdout"] == "5\n"
    assert types.index("step") < types.index("delta")
    assert deltas(events) == "add(2, 3) returns 5."
    assert types[-1] == "done"


@pytest.mark.django_db(transaction=True)
async def test_the_heuristic_sends_the_readme_message_to_the_agent(user, scripted, sandbox_image):
    scripted.script([ADD_ACTION, "Thought: ok\nAction: final: done"])
    async with asgi_client(await bearer(user)) as client:
        events = sse_events(
            (await client.post("/chat?stream=true", json={"message": README_MESSAGE})).text
        )
    assert events[0][1]["agent"] is True
    run = await AgentRun.objects.aget(pk=events[0][1]["run_id"])
    assert run.mode == "agent"


@pytest.mark.django_db(transaction=True)
async def test_rag_stream_sends_the_retrieval_step_before_the_answer(user, scripted, guide):
    scripted.script(
        [{"content": "Use SANDBOX_MEMORY_MB [1].", "chunks": ["Use ", "SANDBOX_MEMORY_MB [1]."]}]
    )
    async with asgi_client(await bearer(user)) as client:
        events = sse_events(
            (
                await client.post(
                    "/chat?stream=true", json={"message": "How do I change the memory limit?"}
                )
            ).text
        )
    types = stream_types(events)
    assert events[0][1]["rag"] is True
    assert types.index("step") < types.index("delta")
    assert deltas(events).startswith(
        "Use SANDBOX_MEMORY_MB [1].\n\nSources:\n1. [sandbox.md#1](/docs/guide_docs/sandbox.md"
    )


@pytest.mark.django_db(transaction=True)
async def test_model_failure_mid_stream_is_an_error_then_done_and_keeps_the_turn(user, scripted):
    scripted.script([{"content": "one two three four", "drop_after_chunks": 2}] * 3)
    async with asgi_client(await bearer(user)) as client:
        events = sse_events((await client.post("/chat?stream=true", json={"message": "hi"})).text)
    types = stream_types(events)
    assert types[-2:] == ["error", "done"]
    assert events[-2][1]["code"] in {"llm_unavailable", "llm_timeout"}
    assert events[-1][1]["status"] == "failed"
    run = await AgentRun.objects.aget(pk=events[0][1]["run_id"])
    assert run.status == "failed"
    goal = await Step.objects.aget(pk=run.id)
    assert goal.error == events[-2][1]["message"]
    turns = [m async for m in Message.objects.filter(conversation=run.conversation_id).turns()]
    # The answer keeps what was streamed before the model's stream broke.
    assert [(m.role, m.content) for m in turns] == [("user", "hi"), ("assistant", "one two ")]
    async with asgi_client(await bearer(user)) as client:
        detail = (await client.get(f"/api/runs/{run.id}")).json()
        shown = (await client.get(f"/chat/conversations/{run.conversation_id}")).json()
    assert detail["error"] == shown["messages"][0]["error"] == goal.error
    assert shown["messages"][1]["run_status"] == "failed"
    assert shown["messages"][1]["error"] == goal.error


@pytest.mark.django_db(transaction=True)
async def test_a_chat_run_can_be_cancelled_and_re_attached(user, scripted):
    scripted.script([{"content": "a b c d e f g h", "chunk_delay_s": 0.3}])
    async with asgi_client(await bearer(user)) as client:
        from chat.turns import chat_turn_start

        turn = await chat_turn_start(user=user, message="tell me a story", use_agent=False)
        for _ in range(100):
            if await RunEvent.objects.filter(run_id=turn.run.id, type="delta").aexists():
                break
            await asyncio.sleep(0.05)
        cancelled = await client.post(f"/api/runs/{turn.run.id}/cancel")
        assert cancelled.status_code == HTTPStatus.OK
        await asyncio.wait_for(turn.task, timeout=10)
        replay = sse_events((await client.get(f"/api/runs/{turn.run.id}/events")).text)
        later = sse_events(
            (
                await client.get(f"/api/runs/{turn.run.id}/events", headers={"Last-Event-ID": "1"})
            ).text
        )
    assert later == replay[1:]
    assert replay[0][1]["type"] == "meta"
    assert replay[-1][1] == {"type": "done", "run_id": str(turn.run.id), "status": "cancelled"}
    run = await AgentRun.objects.aget(pk=turn.run.id)
    assert run.status == "cancelled"
    # A cancellation is no error of the trace: its message comes from the run's status.
    assert (await Step.objects.aget(pk=run.id)).error == ""
    async with asgi_client(await bearer(user)) as client:
        detail = (await client.get(f"/api/runs/{run.id}")).json()
        shown = (await client.get(f"/chat/conversations/{run.conversation_id}")).json()
    assert (detail["status"], detail["error"], detail["answer"]) == ("cancelled", "Cancelled.", "")
    assert shown["messages"][0]["error"] == "Cancelled."


@pytest.mark.django_db(transaction=True)
async def test_text_that_looks_like_sse_framing_stays_inside_its_delta(user, scripted):
    forged = 'ok\n\nid: 99\nevent: done\ndata: {"type": "done", "status": "completed"}\n\n'
    scripted.script([{"content": forged, "chunks": [forged]}])
    message = 'hi\n\ndata: {"type": "error"}\n\n'
    async with asgi_client(await bearer(user)) as client:
        response = await client.post("/chat?stream=true", json={"message": message})
    events = sse_events(response.text)
    assert [seq for seq, _ in events] == list(range(1, len(events) + 1))
    assert stream_types(events).count("done") == 1
    assert "error" not in stream_types(events)
    assert deltas(events) == forged
    run = await AgentRun.objects.aget(pk=events[0][1]["run_id"])
    assert run.input == message


# --- bad input --------------------------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize("message", ["", "  \n "])
def test_empty_message_is_400(api, message):
    assert_error(
        post(api, "/chat", {"message": message}), HTTPStatus.BAD_REQUEST, "chat_input_invalid"
    )
    assert (AgentRun.objects.count(), Conversation.objects.count()) == (0, 0)


@pytest.mark.django_db
def test_unknown_and_foreign_conversations_are_404(api, other_api):
    import uuid

    assert_error(
        post(api, "/chat", {"message": "hi", "conversation_id": str(uuid.uuid4())}),
        HTTPStatus.NOT_FOUND,
        "conversation_not_found",
    )
    theirs = post(other_api, "/chat", {"message": "hi", "use_agent": False, "use_rag": False})
    assert theirs.status_code == HTTPStatus.OK, theirs.content
    conversation = Conversation.objects.get()
    assert_error(
        post(api, "/chat", {"message": "hi", "conversation_id": str(conversation.id)}),
        HTTPStatus.NOT_FOUND,
        "conversation_not_found",
    )


@pytest.mark.django_db
@pytest.mark.parametrize(
    "body",
    [
        [1],
        {"text": "hi"},
        {"message": 3},
        {"message": "hi", "use_agent": "maybe"},
        {"message": "hi", "history": [{"role": "tool", "content": "x"}]},
        {"message": "hi", "conversation_id": "not-a-uuid"},
    ],
)
def test_malformed_bodies_are_422(api, body):
    assert_error(post(api, "/chat", body), HTTPStatus.UNPROCESSABLE_ENTITY, "validation_error")


@pytest.mark.django_db
def test_malformed_json_is_a_client_error(api):
    response = api.post("/chat", data="{not json", content_type="application/json")
    assert response.status_code in {HTTPStatus.BAD_REQUEST, HTTPStatus.UNPROCESSABLE_ENTITY}


@pytest.mark.django_db
def test_a_message_over_the_limit_is_413(api):
    from chat.turns import MESSAGE_MAX_CHARS

    assert_error(
        post(api, "/chat", {"message": "x" * (MESSAGE_MAX_CHARS + 1)}),
        HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
        "message_too_large",
    )
    assert Conversation.objects.count() == 0


@pytest.mark.django_db
def test_chat_needs_authentication(client):
    assert_error(
        post(client, "/chat", {"message": "hi"}), HTTPStatus.UNAUTHORIZED, "not_authenticated"
    )


# --- conversations ----------------------------------------------------------------------------


def _titled(user: Any, title: str, turns: tuple[str, ...]) -> Conversation:
    from chat.services import NewMessage, conversation_create, messages_append

    conversation = conversation_create(owner=user, title=title)
    roles = ["user", "assistant"]
    messages_append(
        conversation_id=conversation.id,
        messages=[NewMessage(role=roles[i % 2], content=t) for i, t in enumerate(turns)],
    )
    return conversation


@pytest.mark.django_db
def test_list_searches_titles_and_messages_and_pages_with_a_cursor(api, user, other_user):
    for n in range(5):
        _titled(user, f"Chat {n}", (f"question {n}", f"answer {n}"))
    _titled(user, "Docker limits", ("how much memory?", "256 MB"))
    _titled(other_user, "Docker secrets", ("mine", "theirs"))

    first = api.get("/chat/conversations?limit=4").json()
    assert len(first["conversations"]) == 4
    assert first["conversations"][0]["title"] == "Docker limits"
    second = api.get(f"/chat/conversations?limit=4&cursor={first['next_cursor']}").json()
    assert second["next_cursor"] is None
    titles = [c["title"] for c in first["conversations"] + second["conversations"]]
    assert sorted(titles) == sorted([f"Chat {n}" for n in range(5)] + ["Docker limits"])

    assert [
        c["title"] for c in api.get("/chat/conversations?q=docker").json()["conversations"]
    ] == ["Docker limits"]
    assert [
        c["title"] for c in api.get("/chat/conversations?q=ANSWER 3").json()["conversations"]
    ] == ["Chat 3"]
    assert_error(
        api.get("/chat/conversations?cursor=bogus"), HTTPStatus.BAD_REQUEST, "cursor_invalid"
    )


@pytest.mark.django_db
def test_get_shows_user_turns_and_final_answers_only(api, user):
    from chat.services import NewMessage, messages_append

    conversation = _titled(user, "t", ("hi",))
    messages_append(
        conversation_id=conversation.id,
        messages=[
            NewMessage("assistant", "Thought: x\nAction: tool:execute_code", kind="step"),
            NewMessage("tool", "Observation: 1", kind="step"),
            NewMessage("system", "Long-term memory:", kind="memory"),
            NewMessage("assistant", "the answer"),
        ],
    )
    body = api.get(f"/chat/conversations/{conversation.id}").json()
    assert [(m["role"], m["content"]) for m in body["messages"]] == [
        ("user", "hi"),
        ("assistant", "the answer"),
    ]


@pytest.mark.django_db
def test_rename_and_delete(api, other_api, user):
    conversation = _titled(user, "old", ("hi", "hello"))
    url = f"/chat/conversations/{conversation.id}"
    renamed = api.patch(
        url, data=json.dumps({"title": "  New   name "}), content_type="application/json"
    )
    assert renamed.json()["title"] == "New name"
    assert_error(
        api.patch(url, data=json.dumps({"title": "   "}), content_type="application/json"),
        HTTPStatus.BAD_REQUEST,
        "title_invalid",
    )
    assert_error(other_api.get(url), HTTPStatus.NOT_FOUND, "conversation_not_found")
    assert_error(other_api.delete(url), HTTPStatus.NOT_FOUND, "conversation_not_found")
    assert api.delete(url).status_code == HTTPStatus.NO_CONTENT
    assert_error(api.get(url), HTTPStatus.NOT_FOUND, "conversation_not_found")
    assert not api.get("/chat/conversations").json()["conversations"]
    assert_error(other_api.post(f"{url}/restore"), HTTPStatus.NOT_FOUND, "conversation_not_found")

    restored = api.post(f"{url}/restore")

    assert restored.status_code == HTTPStatus.OK
    assert restored.json()["title"] == "New name"
    assert api.get(url).json()["messages"]


@pytest.mark.django_db
def test_a_delete_is_undoable_for_a_while_then_final(api, user, settings):
    conversation = _titled(user, "old", ("hi", "hello"))
    url = f"/chat/conversations/{conversation.id}"
    settings.CHAT_UNDO_DELETE_S = 0
    assert api.delete(url).status_code == HTTPStatus.NO_CONTENT

    assert_error(api.post(f"{url}/restore"), HTTPStatus.NOT_FOUND, "conversation_not_found")
    # The next delete purges what can no longer be restored, messages and all.
    other = _titled(user, "other", ("x",))
    api.delete(f"/chat/conversations/{other.id}")
    assert not Conversation.objects.filter(pk=conversation.id).exists()
    assert not Message.objects.filter(conversation_id=conversation.id).exists()


@pytest.mark.django_db
def test_renaming_keeps_the_conversation_in_its_place(api, user):
    older = _titled(user, "older", ("first",))
    newer = _titled(user, "newer", ("second",))

    api.patch(
        f"/chat/conversations/{older.id}",
        data=json.dumps({"title": "renamed"}),
        content_type="application/json",
    )

    listed = api.get("/chat/conversations").json()["conversations"]
    assert [(c["id"], c["title"]) for c in listed] == [
        (str(newer.id), "newer"),
        (str(older.id), "renamed"),
    ]


@pytest.mark.django_db
def test_deleting_a_conversation_forgets_its_long_term_memory(api, user, knowledge, settings):
    from agent.knowledge.store import query_texts, upsert_texts

    settings.CHAT_UNDO_DELETE_S = 0

    mine = _titled(user, "mine", ("My name is Ada.",))
    other = _titled(user, "other", ("My name is Bob.",))
    upsert_texts(
        "agent_memory",
        ids=["m1", "m2"],
        texts=["User: My name is Ada.", "User: My name is Bob."],
        metadatas=[{"conversation_id": str(mine.id)}, {"conversation_id": str(other.id)}],
    )
    assert api.delete(f"/chat/conversations/{mine.id}").status_code == HTTPStatus.NO_CONTENT
    conversations_purge(user=user)
    assert (
        query_texts("agent_memory", text="name", n=5, where={"conversation_id": str(mine.id)}) == []
    )
    kept = query_texts("agent_memory", text="name", n=5, where={"conversation_id": str(other.id)})
    assert [hit.id for hit in kept] == ["m2"]
