"""The agent API end to end: PostgreSQL, real Docker, the offline provider or a scripted model
server speaking the OpenAI protocol."""

from __future__ import annotations

import asyncio
import json
from http import HTTPStatus
from typing import Any

import httpx
import pytest
from asgiref.sync import sync_to_async

from agent.models import AgentRun, RunEvent
from devassist.tokens import api_token_create
from traces.models import Step, Trace

README_MESSAGE = "你必须调用 execute_code 执行：print(1+1)"


def post(client: Any, url: str, body: Any) -> Any:
    return client.post(url, data=json.dumps(body), content_type="application/json")


def assert_error(response: Any, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.content
    body = response.json()
    assert body["error"]["code"] == code
    return body


def sse_events(raw: str) -> list[tuple[int, dict[str, Any]]]:
    events = []
    for block in raw.split("\n\n"):
        lines = [line for line in block.splitlines() if line and not line.startswith(":")]
        if not lines:
            continue
        fields = dict(line.split(": ", 1) for line in lines)
        events.append((int(fields["id"]), json.loads(fields["data"])))
    return events


# --- non-streaming, offline provider ----------------------------------------------------------


@pytest.mark.django_db
def test_offline_agent_runs_code_and_records_the_run(api, user, sandbox_image):
    response = post(api, "/agent", {"message": README_MESSAGE, "tools": ["execute_code"]})
    assert response.status_code == HTTPStatus.OK, response.content
    body = response.json()
    (step,) = body["steps"]
    assert step["tool_name"] == "execute_code"
    assert step["tool_args"]["code"] == "print(1+1)"
    observation = step["observation"]  # the structured result, not the text the model read
    assert observation["stdout"] == "2\n"
    assert step["error"] is None
    assert step["finished_at_ms"] >= step["started_at_ms"]
    assert "2" in body["answer"]

    run = AgentRun.objects.get(pk=body["run_id"])
    assert (run.status, run.model) == ("completed", "offline")
    response = Step.objects.get(parent_id=run.id, step_type="response")
    assert response.data["answer"] == body["answer"]
    assert run.started_at is not None
    assert run.first_output_at is not None
    assert run.finished_at is not None
    trace = Trace.objects.get(pk=body["trace_id"])
    assert trace.status == "completed"
    types = list(
        Step.objects.filter(trace=trace).order_by("seq").values_list("step_type", flat=True)
    )
    assert types == ["goal", "thought", "action", "result", "thought", "response"]
    action = Step.objects.get(trace=trace, step_type="action")
    assert action.data["tool_name"] == "execute_code"
    assert action.parent is not None
    assert action.parent.step_type == "thought"


@pytest.mark.django_db
def test_offline_agent_without_code_says_no_model_is_configured(api):
    body = post(api, "/agent", {"message": "What is a monad?"}).json()
    assert body["steps"] == []
    assert "model" in body["answer"].lower()


@pytest.mark.django_db
@pytest.mark.parametrize("message", ["", "   \n\t"])
def test_empty_message_is_400(api, message):
    assert_error(
        post(api, "/agent", {"message": message}), HTTPStatus.BAD_REQUEST, "agent_input_invalid"
    )
    assert AgentRun.objects.count() == 0


@pytest.mark.django_db
def test_unknown_tool_is_400_listing_the_valid_ones(api):
    body = assert_error(
        post(api, "/agent", {"message": "hi", "tools": ["execute_cod"]}),
        HTTPStatus.BAD_REQUEST,
        "agent_input_invalid",
    )
    assert "execute_code" in body["error"]["details"]["available"]


@pytest.mark.django_db
def test_agent_needs_authentication(client):
    assert_error(
        post(client, "/agent", {"message": "hi"}), HTTPStatus.UNAUTHORIZED, "not_authenticated"
    )


# --- scripted model ---------------------------------------------------------------------------


@pytest.mark.django_db
def test_scripted_model_recovers_from_format_and_tool_errors(api, scripted):
    scripted.script(
        [
            "I think I should just talk.",  # no Action: a parse error
            'Thought: try a tool\nAction: tool:exec_code\nargs: {"code": "print(1)"}',  # unknown
            'Thought: again\nAction: tool:execute_code\nargs: {"timeout_s": 0}',  # bad args
            "Thought: done\nAction: final: 42",
        ]
    )
    body = post(api, "/agent", {"message": "What is 6*7?"}).json()
    assert body["answer"] == "42"
    steps = body["steps"]
    assert [s["tool_name"] for s in steps] == [None, "exec_code", "execute_code"]
    # The observation is the structured result the model's text was made from.
    assert "Action" in steps[0]["observation"]["error"]
    assert "execute_code" in steps[1]["observation"]["suggestion"]  # the nearest valid name
    assert "$" in steps[2]["observation"]["error"]
    requests = scripted.requests
    assert len(requests) == 4
    assert requests[0]["messages"][0]["role"] == "system"
    assert "execute_code" in requests[0]["messages"][0]["content"]
    assert requests[0]["stop"]
    assert requests[1]["messages"][-1]["content"].startswith("Observation:")


@pytest.mark.django_db
def test_iteration_cap_then_one_forced_answer_then_408(api, scripted, settings):
    scripted.script(
        ["Thought: loop\nAction: tool:nope\nargs: {}"] * 10
        + ["Thought: still looping\nAction: tool:nope\nargs: {}"]
    )
    body = assert_error(
        post(api, "/agent", {"message": "loop forever"}),
        HTTPStatus.REQUEST_TIMEOUT,
        "agent_max_iterations",
    )
    run = AgentRun.objects.get(pk=body["error"]["details"]["run_id"])
    assert (run.status, run.error_code) == ("failed", "agent_max_iterations")
    assert Trace.objects.get(pk=str(run.trace_id)).status == "failed"
    assert "answer" in scripted.requests[-1]["messages"][-1]["content"].lower()


@pytest.mark.django_db
def test_iteration_cap_with_a_forced_answer_completes(api, scripted):
    scripted.script(
        ["Thought: loop\nAction: tool:nope\nargs: {}"] * 10
        + ["Thought: ok\nAction: final: best effort"]
    )
    body = post(api, "/agent", {"message": "loop"}).json()
    assert body["answer"] == "best effort"
    assert len(body["steps"]) == 10


@pytest.mark.django_db
def test_model_endpoint_down_is_502_and_the_failure_is_stored(api, scripted):
    scripted.script([{"status": 500}] * 5)
    body = assert_error(
        post(api, "/agent", {"message": "hi"}), HTTPStatus.BAD_GATEWAY, "llm_unavailable"
    )
    run = AgentRun.objects.get(pk=body["error"]["details"]["run_id"])
    assert run.status == "failed"
    assert run.input == "hi"
    goal = Step.objects.get(pk=run.id)
    assert goal.error == body["error"]["message"]
    assert api.get(f"/api/runs/{run.id}").json()["error"] == goal.error
    events = list(RunEvent.objects.filter(run=run).order_by("seq").values_list("type", flat=True))
    assert events[0] == "meta"
    assert events[-2:] == ["error", "done"]


# --- streaming, re-attach, cancel -------------------------------------------------------------


async def _token(user: Any) -> str:
    return (await sync_to_async(api_token_create)(user=user, name="sse"))[1]


def _client(token: str) -> httpx.AsyncClient:
    from devassist.asgi import application

    return httpx.AsyncClient(
        transport=httpx.ASGITransport(app=application),
        base_url="http://127.0.0.1",
        headers={"Authorization": f"Bearer {token}"},
        timeout=30,
    )


@pytest.mark.django_db(transaction=True)
async def test_stream_sends_meta_steps_deltas_and_done(user, sandbox_image):
    async with _client(await _token(user)) as client:
        response = await client.post(
            "/agent?stream=true", json={"message": README_MESSAGE, "tools": ["execute_code"]}
        )
    assert response.status_code == HTTPStatus.OK
    assert response.headers["content-type"].startswith("text/event-stream")
    assert response.headers["x-accel-buffering"] == "no"
    events = sse_events(response.text)
    assert [seq for seq, _ in events] == list(range(1, len(events) + 1))
    types = [event["type"] for _, event in events]
    assert types[0] == "meta"
    assert types[-1] == "done"
    meta = events[0][1]
    assert (meta["agent"], meta["rag"], meta["model"]) == (True, False, "offline")
    steps = [event for _, event in events if event["type"] == "step"]
    assert steps[0]["tool_name"] == "execute_code"
    assert types.index("step") < types.index("delta")
    answer = "".join(event["content"] for _, event in events if event["type"] == "delta")
    assert "2" in answer
    assert events[-1][1]["status"] == "completed"


@pytest.mark.django_db(transaction=True)
async def test_reattach_replays_missed_events_once(user, sandbox_image):
    token = await _token(user)
    async with _client(token) as client:
        full = sse_events(
            (await client.post("/agent?stream=true", json={"message": README_MESSAGE})).text
        )
        run_id = full[0][1]["run_id"]
        after = await client.get(f"/api/runs/{run_id}/events?after_seq=2")
        by_header = await client.get(f"/api/runs/{run_id}/events", headers={"Last-Event-ID": "3"})
        status = (await client.get(f"/api/runs/{run_id}")).json()
    assert sse_events(after.text) == full[2:]
    assert sse_events(by_header.text) == full[3:]
    assert status["status"] == "completed"
    assert status["answer"]


@pytest.mark.django_db(transaction=True)
async def test_cancel_mid_tool_keeps_the_steps_and_removes_the_container(user, sandbox_image):
    from agent.executor import run_start
    from agent.services import run_create

    token = await _token(user)
    run = await run_create(user=user, message="run: import time\ntime.sleep(60)")
    task = run_start(run)
    async with _client(token) as client:
        for _ in range(100):  # wait until the tool is running
            if await Step.objects.filter(trace_id=str(run.trace_id), step_type="action").aexists():
                break
            await asyncio.sleep(0.1)
        cancelled = await client.post(f"/api/runs/{run.id}/cancel")
        assert cancelled.status_code == HTTPStatus.OK
        await asyncio.wait_for(task, timeout=15)
        again = await client.post(f"/api/runs/{run.id}/cancel")
    run = await AgentRun.objects.aget(pk=run.id)
    assert run.status == "cancelled"
    assert run.cancel_requested_at is not None
    assert again.status_code == HTTPStatus.CONFLICT
    trace = await Trace.objects.aget(pk=str(run.trace_id))
    assert trace.status == "cancelled"
    assert await Step.objects.filter(trace=trace, step_type="action").aexists()
    last = await RunEvent.objects.filter(run=run).order_by("-seq").afirst()
    assert last is not None
    assert last.payload == {
        "type": "done",
        "run_id": str(run.id),
        "status": "cancelled",
    }


@pytest.mark.django_db
def test_runs_are_private_and_staff_can_list_them(api, other_api, staff_api, user):
    body = post(api, "/agent", {"message": "hello"}).json()
    run_id = body["run_id"]
    assert api.get(f"/api/runs/{run_id}").json()["status"] == "completed"
    assert_error(other_api.get(f"/api/runs/{run_id}"), HTTPStatus.NOT_FOUND, "run_not_found")
    assert_error(other_api.get("/admin/agent-traces"), HTTPStatus.FORBIDDEN, "forbidden")
    listing = staff_api.get("/admin/agent-traces?limit=5").json()
    assert listing["runs"][0]["run_id"] == run_id
    assert listing["next_offset"] is None
    one = staff_api.get(f"/admin/agent-traces/{run_id}").json()
    assert one["answer"] == body["answer"]
    assert_error(
        staff_api.get("/admin/agent-traces?limit=0"),
        HTTPStatus.UNPROCESSABLE_ENTITY,
        "validation_error",
    )
