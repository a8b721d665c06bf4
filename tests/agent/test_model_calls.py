"""Every model call of a run is a ``thought`` step of its trace with its raw output, usage
(null when the server sent none), finish reason and ``truncated``; answer text goes out when
the model pauses; the collection a run is given is the one its agent searches. Regression
tests for what a real model server showed (issue 15)."""

from __future__ import annotations

import asyncio
import json
import time
from http import HTTPStatus
from typing import Any

import pytest

from agent.executor import run_start
from agent.models import AgentRun, RunEvent
from agent.services import run_cancel, run_create
from traces.models import Step, Trace

pytestmark = pytest.mark.django_db(transaction=True)


def post(client: Any, url: str, body: Any) -> Any:
    return client.post(url, data=json.dumps(body), content_type="application/json")


async def thoughts_of(run: AgentRun) -> list[Step]:
    rows = Step.objects.filter(trace_id=str(run.trace_id), step_type="thought").order_by("seq")
    return [step async for step in rows]


async def finished(run: AgentRun, task: asyncio.Task[None]) -> AgentRun:
    await asyncio.wait_for(task, timeout=20)
    return await AgentRun.objects.aget(pk=run.id)


async def test_every_model_call_is_a_step_with_its_raw_output_even_the_last_tool_call(
    scripted, user
):
    """The last "answer now" reply was missing from the trace when it called a tool."""
    scripted.script(
        ["Thought: loop\nAction: tool:nope\nargs: {}"] * 10
        + ["Thought: one more\nAction: tool:nope\nargs: {}"]
    )
    run = await run_create(user=user, message="loop")
    run = await finished(run, run_start(run))
    assert run.error_code == "agent_max_iterations"
    thoughts = await thoughts_of(run)
    assert len(thoughts) == len(scripted.requests) == 11
    assert thoughts[-1].data["output"] == "Thought: one more\nAction: tool:nope\nargs: {}"
    assert all(step.data["output"] for step in thoughts)


async def test_usage_is_null_when_the_stream_reports_none_and_counted_when_it_does(scripted, user):
    scripted.script(
        [
            {"content": "Thought: a\nAction: tool:nope\nargs: {}", "usage": None},
            {
                "content": "Thought: b\nAction: final: done",
                "usage": {"prompt_tokens": 30, "completion_tokens": 5, "total_tokens": 35},
            },
        ]
    )
    run = await run_create(user=user, message="count")
    run = await finished(run, run_start(run))
    unknown, counted = await thoughts_of(run)
    assert unknown.data["usage"] is None
    assert unknown.tokens == 0
    assert counted.data["usage"] == {
        "prompt_tokens": 30,
        "completion_tokens": 5,
        "total_tokens": 35,
    }
    assert counted.tokens == 35
    assert scripted.requests[0]["stream_options"] == {"include_usage": True}


async def test_a_reply_cut_at_max_tokens_is_marked_truncated(scripted, user):
    scripted.script([{"content": "Thought: t\nAction: final: cut sho", "finish_reason": "length"}])
    run = await run_create(user=user, message="long answer please")
    run = await finished(run, run_start(run))
    (thought,) = await thoughts_of(run)
    assert thought.data["finish_reason"] == "length"
    assert thought.data["truncated"] is True


async def test_answer_text_is_stored_and_sent_when_the_model_pauses(scripted, user):
    """With the model server frozen mid-answer, the text it already sent reaches the run's
    stream at once (it used to wait for the next token)."""
    scripted.script(
        [{"chunks": ["Thought: x\nAction: final: Hello", " world"], "delays_s": [0, 3.0]}]
    )
    run = await run_create(user=user, message="greet")
    task = run_start(run)
    started = time.monotonic()
    deltas: list[str] = []
    while time.monotonic() - started < 2.5 and not deltas:
        rows = RunEvent.objects.filter(run_id=run.id, type="delta")
        deltas = [event.payload["content"] async for event in rows]
        await asyncio.sleep(0.05)
    assert deltas == ["Hello"], "the text before the pause was held back"
    assert time.monotonic() - started < 2.5
    run = await finished(run, task)
    rows = RunEvent.objects.filter(run_id=run.id, type="delta").order_by("seq")
    assert "".join([event.payload["content"] async for event in rows]) == "Hello world"


async def test_a_chat_run_records_its_model_call(scripted, user):
    scripted.script([{"content": "Hi there.", "usage": None}])
    run = await run_create(user=user, message="hello", mode="chat")
    run = await finished(run, run_start(run))
    (thought,) = await thoughts_of(run)
    assert thought.name == "chat"
    assert thought.data["output"] == "Hi there."
    assert thought.data["usage"] is None


async def test_the_rag_answer_is_a_step_and_a_truncated_answer_says_so_before_its_sources(
    scripted, user, guide
):
    scripted.script(
        [{"content": "Each container gets 256 MB [1] and then it", "finish_reason": "length"}]
    )
    run = await run_create(user=user, message="How much memory does a container get?", mode="rag")
    run = await finished(run, run_start(run))
    assert run.status == "completed"
    (thought,) = await thoughts_of(run)
    assert thought.name == "answer"
    assert thought.data["output"] == "Each container gets 256 MB [1] and then it"
    assert thought.data["truncated"] is True
    response = await Step.objects.aget(trace_id=str(run.trace_id), step_type="response")
    answer = response.data["answer"]
    note = answer.index("cut off")
    assert note < answer.index("Sources:")
    assert answer.startswith("Each container gets 256 MB [1] and then it")


async def test_a_rag_answers_deltas_add_up_to_the_answer_when_the_model_lists_its_own_sources(
    scripted, user, guide
):
    """The model's own ``Sources:`` list, which the answer's replaces, never streams: the
    deltas used to carry it and then the whole answer again."""
    scripted.script(
        ["Each container gets 256 MB [1].\n\n**Sources:**\n1. made-up.md\n2. other.md\n"]
    )
    run = await run_create(user=user, message="How much memory does a container get?", mode="rag")
    run = await finished(run, run_start(run))
    assert run.status == "completed"
    deltas = [
        event.payload["content"]
        async for event in RunEvent.objects.filter(run=run, type="delta").order_by("seq")
    ]
    response = await Step.objects.aget(trace_id=str(run.trace_id), step_type="response")
    answer = response.data["answer"]
    assert "".join(deltas) == answer
    assert "made-up.md" not in answer
    assert answer.startswith("Each container gets 256 MB [1].\n\nSources:")


# -- a call that never replies ---------------------------------------------------------------


async def test_a_failed_model_call_is_a_failed_step_with_the_runs_error(scripted, user):
    """The trace showed the calls that replied and the run's error, but not the call that
    failed (so the OTel export had no failed ``chat`` span either)."""
    scripted.script(["Thought: look\nAction: tool:nope\nargs: {}"] + [{"status": 500}] * 2)
    run = await run_create(user=user, message="hi")
    run = await finished(run, run_start(run))
    assert (run.status, run.error_code) == ("failed", "llm_unavailable")
    replied, failed = await thoughts_of(run)
    assert (replied.name, replied.status) == ("iteration 1", "completed")
    assert (failed.name, failed.status) == ("iteration 2", "failed")
    goal = await Step.objects.aget(pk=run.id)
    assert failed.error == goal.error
    assert "500" in failed.error
    assert failed.data == {"model": "fake-model", "error_code": "llm_unavailable"}
    assert failed.parent_id == run.id
    assert failed.started_at is not None
    assert replied.started_at is not None
    assert failed.finished_at is not None
    assert replied.started_at <= failed.started_at <= failed.finished_at
    assert failed.duration_ms is not None


@pytest.mark.parametrize(("mode", "name"), [("chat", "chat"), ("rag", "answer")])
async def test_each_modes_failed_model_call_is_a_step(scripted, user, guide, mode, name):
    scripted.script([{"status": 500, "message": "the model is down"}] * 2)
    run = await run_create(user=user, message="How much memory does a container get?", mode=mode)
    run = await finished(run, run_start(run))
    assert run.status == "failed"
    (failed,) = await thoughts_of(run)
    assert (failed.name, failed.status) == (name, "failed")
    assert "the model is down" in failed.error
    if mode == "rag":  # after the search it answers from
        search = await Step.objects.aget(trace_id=str(run.trace_id), step_type="action")
        assert search.seq < failed.seq


async def test_a_rag_run_with_nothing_found_calls_no_model_and_records_none(scripted, user, guide):
    run = await run_create(user=user, message="zyxwvut qqqq", mode="rag")
    run = await finished(run, run_start(run))
    assert run.status == "completed"
    assert await thoughts_of(run) == []
    assert scripted.requests == []


async def test_a_model_call_stopped_by_the_user_is_a_skipped_step(scripted, user):
    scripted.script([{"content": "Thought: slow\nAction: final: late", "delay_s": 10}])
    run = await run_create(user=user, message="take your time")
    task = run_start(run)
    await scripted.wait_for_request()  # the model call is under way
    await run_cancel(user=user, run=run)
    run = await finished(run, task)
    assert run.status == "cancelled"
    (stopped,) = await thoughts_of(run)
    assert (stopped.name, stopped.status, stopped.error) == ("iteration 1", "skipped", "")
    assert stopped.data == {"model": "fake-model"}
    trace = await Trace.objects.aget(pk=str(run.trace_id))
    assert trace.error_count == 0


# -- collections ------------------------------------------------------------------------------


def search_call(query: str) -> str:
    return f'Thought: look\nAction: tool:search_docs\nargs: {{"query": "{query}"}}'


def test_post_agent_searches_the_collection_it_is_given(api, scripted, guide, settings):
    """``collection_name`` on ``POST /agent`` is the collection ``search_docs`` searches when
    the model does not name one (it used to search the default one)."""
    settings.KNOWLEDGE_DEFAULT_COLLECTION = "devassist_docs"
    scripted.script([search_call("container memory"), "Thought: ok\nAction: final: 256 MB"])
    response = post(
        api,
        "/agent",
        {"message": "memory?", "tools": ["search_docs"], "collection_name": guide},
    )
    assert response.status_code == HTTPStatus.OK, response.content
    (step,) = response.json()["steps"]
    sources = {hit["source"] for hit in step["observation"]["results"]}
    assert "sandbox.md" in sources


def test_the_agent_route_of_chat_searches_the_collection_it_is_given(
    api, scripted, guide, settings
):
    settings.KNOWLEDGE_DEFAULT_COLLECTION = "devassist_docs"
    scripted.script([search_call("real model"), "Thought: ok\nAction: final: set it"])
    response = post(
        api,
        "/chat",
        {"message": "find it", "use_agent": True, "collection_name": guide},
    )
    assert response.status_code == HTTPStatus.OK, response.content
    observation = scripted.requests[1]["messages"][-1]["content"]
    assert "models.md" in observation


def test_a_missing_collection_is_404_before_any_run(api, scripted):
    response = post(api, "/agent", {"message": "x", "collection_name": "no_such_docs"})
    assert response.status_code == HTTPStatus.NOT_FOUND, response.content
    assert response.json()["error"]["code"] == "collection_not_found"
    assert not scripted.requests
    assert not AgentRun.objects.exists()
