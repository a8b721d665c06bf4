"""DevAssist against a real model server that nobody on the team wrote: SmolLM2-135M-Instruct under
llama-cpp-python's OpenAI-compatible server (``tests/model_server.py``), driven end to end through
the HTTP API as a user would.

A 135M-parameter model writes little of sense, so these tests assert only what its replies cannot
spoil: every run reaches a final status with no 5xx and well-formed SSE frames; every model call
the server answered is a ``thought`` step of the run's trace with the model's raw output, its
finish reason, its usage (``null`` when the server sent none) and ``truncated``; deltas reach the
client while the model is still writing; cancel closes the model's HTTP stream; a killed model
server fails the run with ``llm_unavailable``. Replies are repeatable: temperature 0 and the
server's fixed seed.

The model server is shared by the session, behind a recording proxy (``ModelProxy``) that counts
the model calls and sees when an answer ends or its client hangs up. Most tests run DevAssist in
this process through its ASGI application (``settings.LLM`` pointed at the proxy); the two that
time what a client sees use DevAssist under daphne, since the ASGI test transport hands a
streamed body over only once it has ended.

Without the model server's virtualenv (``make model-venv``) they skip, and fail under CI=true.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

import httpx
import pytest
from asgiref.sync import sync_to_async

from agent.llm import get_llm
from agent.models import RunEvent
from devassist.tokens import api_token_create
from tests.agent.model_proxy import ModelCall, ModelProxy
from tests.conftest import require
from tests.model_server import ModelServer, model_server, model_server_missing
from tests.servers import daphne_server

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _no_lease_expiry(settings: Any) -> None:
    """Runs of this process have no heartbeat in the suite (``RUN_LEASE_KEEPER`` is off), and
    a real model on a busy machine can take longer than a lease: a run must not be failed as
    "worker lost" while its model is still writing."""
    settings.RUN_LEASE_S = 3600


FINAL_STATUSES = {"completed", "failed"}
#: The length of each reply unless a test says otherwise: the model is still writing a second
#: after its first token (it makes about 130 tokens/s on a quiet machine), and agent runs stay
#: short.
MAX_TOKENS = 128
#: A prompt that this model answers at length (at temperature 0, with the server's seed).
LONG_PROMPT = "Write a long story about a robot who learns to paint, in ten paragraphs."
QUESTION = "How much memory does each sandbox container get?"


# -- the model server, the proxy, DevAssist pointed at them ----------------------------------


@pytest.fixture(scope="session")
def real_model() -> Iterator[ModelServer]:
    """The model server the session shares (skipped without it, a failure under CI=true)."""
    missing = model_server_missing()
    require(missing is None, str(missing))
    with model_server() as server:
        yield server


@pytest.fixture(scope="session")
def model_proxy(real_model: ModelServer) -> Iterator[ModelProxy]:
    with ModelProxy(real_model.root) as proxy:
        yield proxy


@pytest.fixture
def model_calls(model_proxy: ModelProxy) -> ModelProxy:
    """The shared proxy with no calls recorded yet."""
    model_proxy.clear()
    return model_proxy


def llm_settings(base_url: str, model: str, **options: Any) -> dict[str, Any]:
    """``settings.LLM`` for an OpenAI-compatible server at ``base_url``, as the environment
    would configure it (no key, temperature 0, no retries unless ``options`` say so)."""
    return {
        "BACKEND": "agent.llm.openai_provider.OpenAIProvider",
        "OPTIONS": {
            "base_url": base_url,
            "api_key": "",
            "model": model,
            "timeout_s": 60,
            "max_retries": 0,
            "temperature": 0.0,
            "max_tokens": MAX_TOKENS,
            **options,
        },
    }


@pytest.fixture
def real_llm(settings: Any, model_calls: ModelProxy, real_model: ModelServer) -> Iterator[Any]:
    """Runs in this process talk to the real model through the proxy; yields a function that
    changes the provider's options (``max_tokens=8``)."""

    def configure(**options: Any) -> None:
        settings.LLM = llm_settings(model_calls.base_url, real_model.model, **options)
        get_llm.cache_clear()

    configure()
    yield configure
    get_llm.cache_clear()


@pytest.fixture(scope="module")
def live_devassist(
    django_db_setup: Any,
    django_db_blocker: Any,
    real_model: ModelServer,
    model_proxy: ModelProxy,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[str]:
    """DevAssist under daphne on the test database, its model the real one behind the proxy;
    yields its base URL."""
    from django.db import connection

    with django_db_blocker.unblock():
        database = connection.settings_dict
    var_dir = tmp_path_factory.mktemp("real-model-var")
    env = {
        "DATABASE_URL": (
            f"postgres://{database['USER']}@{database['HOST']}:{database['PORT']}"
            f"/{database['NAME']}"
        ),
        "DEVASSIST_VAR_DIR": str(var_dir),
        "CHROMA_PATH": str(var_dir / "chroma"),
        "LLM_BASE_URL": model_proxy.base_url,
        "LLM_MODEL": real_model.model,
        "LLM_MAX_TOKENS": str(MAX_TOKENS),
        "LLM_MAX_RETRIES": "0",
        "LLM_TEMPERATURE": "0",
        "SANDBOX_WARM_ON_START": "0",
        "SANDBOX_POOL_SIZE": "0",
        "DEBUG": "0",
        "LOG_LEVEL": "WARNING",
        "SECRET_KEY": "real-model-tests-only",
    }
    with daphne_server(env) as base_url:
        yield base_url


# -- driving DevAssist through its API --------------------------------------------------------


@dataclass
class Outcome:
    """What a run left: its SSE events (``(seq, event)``), the run as ``GET /api/runs/{id}``
    shows it, and its trace's steps (flat, in ``seq`` order, with their ``data``)."""

    events: list[tuple[int, dict[str, Any]]]
    run: dict[str, Any]
    steps: list[dict[str, Any]]

    @property
    def thoughts(self) -> list[dict[str, Any]]:
        return [step for step in self.steps if step["step_type"] == "thought"]

    def of_type(self, kind: str) -> list[dict[str, Any]]:
        return [event for _, event in self.events if event["type"] == kind]


def sse_events(body: str) -> list[tuple[int, dict[str, Any]]]:
    """The ``(id, data)`` of each event of an SSE body, checking the framing: every block is a
    comment (a heartbeat) or exactly an ``id: <int>`` line and a ``data: <JSON object>`` line,
    and the ids increase."""
    events: list[tuple[int, dict[str, Any]]] = []
    for block in body.split("\n\n"):
        if not block or block.startswith(":"):
            continue
        id_line, data_line = block.split("\n")
        assert id_line.startswith("id: ")
        assert data_line.startswith("data: ")
        event = json.loads(data_line.removeprefix("data: "))
        assert isinstance(event, dict)
        assert isinstance(event["type"], str)
        events.append((int(id_line.removeprefix("id: ")), event))
    seqs = [seq for seq, _ in events]
    assert seqs == sorted(set(seqs))
    return events


def flatten(nodes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    steps: list[dict[str, Any]] = []
    for node in nodes:
        steps.append(node)
        steps += flatten(node["children"])
    return sorted(steps, key=lambda step: step["seq"])


@asynccontextmanager
async def api_client(user: Any) -> AsyncIterator[httpx.AsyncClient]:
    """A client of DevAssist's ASGI application, signed in as ``user`` with a bearer token."""
    from devassist.asgi import application

    _, token = await sync_to_async(api_token_create)(user=user, name="real-model")
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=application),
        base_url="http://127.0.0.1",
        headers={"Authorization": f"Bearer {token}"},
        timeout=600,
    ) as client:
        yield client


async def run_through_api(user: Any, path: str, payload: dict[str, Any]) -> Outcome:
    """POST ``payload`` to ``path`` (a streamed run: ``/chat?stream=true``,
    ``/agent?stream=true``), then read the run and its trace back. Every answer must be 200
    and the stream must go from ``meta`` to exactly one ``done``."""
    async with api_client(user) as client:
        response = await client.post(path, json=payload)
        assert response.status_code == HTTPStatus.OK, response.text
        events = sse_events(response.text)
        kinds = [event["type"] for _, event in events]
        assert kinds[0] == "meta"
        assert kinds[-1] == "done"
        assert kinds.count("done") == 1
        meta = events[0][1]
        run = await client.get(f"/api/runs/{meta['run_id']}")
        assert run.status_code == HTTPStatus.OK
        tree = await client.get(f"/api/traces/{meta['trace_id']}/tree?view=full")
        assert tree.status_code == HTTPStatus.OK
    return Outcome(events, run.json(), flatten(tree.json()["root_steps"]))


def assert_ended(outcome: Outcome) -> None:
    """The run reached a final status, which its ``done`` reports; an ``error`` event, if
    any, comes right before ``done`` and names its code."""
    assert outcome.run["status"] in FINAL_STATUSES
    assert outcome.events[-1][1]["status"] == outcome.run["status"]
    errors = outcome.of_type("error")
    if outcome.run["status"] == "failed":
        assert [event["code"] for event in errors] == [outcome.run["error_code"]]
        assert outcome.events[-2][1]["type"] == "error"
    else:
        assert errors == []


def usage_of(call: ModelCall) -> dict[str, int] | None:
    if call.usage is None:
        return None
    return {key: call.usage[key] for key in ("prompt_tokens", "completion_tokens", "total_tokens")}


def assert_every_model_call_is_a_thought(outcome: Outcome, calls: list[ModelCall]) -> None:
    """Each model call the server answered is, in order, a ``thought`` step whose ``data``
    holds the raw reply (what the server sent, up to a stop sequence), the model, the finish
    reason, the usage the server reported (``None`` for none) and ``truncated``."""
    answered = [call for call in calls if call.is_completion and call.status == HTTPStatus.OK]
    assert len(outcome.thoughts) == len(answered)
    for step, call in zip(outcome.thoughts, answered, strict=True):
        data = step["data"]
        assert isinstance(data["output"], str)
        assert call.content.startswith(data["output"])
        assert data["model"]
        assert data["finish_reason"] in {"stop", "length", "tool_calls"}
        assert data["truncated"] == (data["finish_reason"] == "length")
        assert data["usage"] == usage_of(call)


# -- the routes --------------------------------------------------------------------------------


async def test_a_plain_chat_run_ends_with_its_model_call_in_the_trace(user, real_llm, model_calls):
    outcome = await run_through_api(
        user,
        "/chat?stream=true",
        {"message": "What is a Python list?", "use_agent": False, "use_rag": False},
    )

    assert_ended(outcome)
    assert outcome.run["status"] == "completed"
    streamed = "".join(event["content"] for event in outcome.of_type("delta"))
    assert streamed == outcome.run["answer"]
    assert_every_model_call_is_a_thought(outcome, model_calls.calls)


async def test_a_rag_run_ends_with_its_answers_model_call_in_the_trace(
    user, real_llm, model_calls, guide
):
    outcome = await run_through_api(
        user,
        "/chat?stream=true",
        {"message": QUESTION, "use_agent": False, "use_rag": True, "collection_name": guide},
    )

    assert_ended(outcome)
    assert outcome.run["status"] == "completed"
    assert [step["tool_name"] for step in outcome.of_type("step")] == ["search_docs"]
    assert len(model_calls.completions) == 1
    assert_every_model_call_is_a_thought(outcome, model_calls.calls)


async def test_an_agent_run_ends_with_every_model_call_in_the_trace(
    user, real_llm, model_calls, guide
):
    outcome = await run_through_api(
        user, "/agent?stream=true", {"message": QUESTION, "tools": ["search_docs"]}
    )

    assert_ended(outcome)
    assert model_calls.completions
    assert_every_model_call_is_a_thought(outcome, model_calls.calls)


async def test_native_tool_calling_runs_against_the_servers_function_calling_format(
    user, settings, guide
):
    """``AGENT_PROTOCOL=tools`` against llama-cpp-python's ``chatml-function-calling`` chat
    format: the tools go as the request's ``tools``, and whatever the tiny model makes of them
    (an answer, or calls with whatever arguments), the run ends with every model call in its
    trace."""
    missing = model_server_missing()
    require(missing is None, str(missing))
    with (
        model_server(chat_format="chatml-function-calling") as server,
        ModelProxy(server.root) as proxy,
    ):
        settings.AGENT_PROTOCOL = "tools"
        settings.LLM = llm_settings(proxy.base_url, server.model)
        get_llm.cache_clear()
        try:
            outcome = await run_through_api(
                user,
                "/agent?stream=true",
                {"message": "Search the docs: " + QUESTION, "tools": ["search_docs"]},
            )
        finally:
            get_llm.cache_clear()
        calls = proxy.calls

    assert_ended(outcome)
    completions = [call for call in calls if call.is_completion]
    assert completions
    assert all(
        [tool["function"]["name"] for tool in call.body["tools"]] == ["search_docs"]
        for call in completions
    )
    assert all("stop" not in call.body for call in completions)
    assert len(outcome.thoughts) == len(completions)
    for step in outcome.thoughts:
        assert isinstance(step["data"]["output"], str)
        assert step["data"]["finish_reason"] in {"stop", "length", "tool_calls"}


# -- what the trace says about each call ------------------------------------------------------


async def test_a_server_that_streams_no_usage_leaves_the_usage_null(user, real_llm, model_calls):
    outcome = await run_through_api(
        user, "/chat?stream=true", {"message": "Say hello.", "use_agent": False, "use_rag": False}
    )

    [call] = model_calls.completions
    assert call.body["stream"] is True
    assert call.usage is None  # what llama-cpp-python's server does
    [thought] = outcome.thoughts
    assert thought["data"]["usage"] is None


async def test_a_server_that_reports_usage_has_it_counted(user, scripted):
    usage = {"prompt_tokens": 31, "completion_tokens": 4, "total_tokens": 35}
    scripted.script([{"content": "Hello, how are you?", "usage": usage}])

    outcome = await run_through_api(
        user, "/chat?stream=true", {"message": "Say hello.", "use_agent": False, "use_rag": False}
    )

    [thought] = outcome.thoughts
    assert thought["data"]["usage"] == usage
    assert thought["data"]["truncated"] is False


async def test_a_reply_cut_at_max_tokens_is_recorded_as_truncated(user, real_llm, model_calls):
    real_llm(max_tokens=8)

    outcome = await run_through_api(
        user,
        "/chat?stream=true",
        {"message": LONG_PROMPT, "use_agent": False, "use_rag": False},
    )

    assert_ended(outcome)
    [call] = model_calls.completions
    assert call.finish_reason == "length"
    [thought] = outcome.thoughts
    assert thought["data"]["finish_reason"] == "length"
    assert thought["data"]["truncated"] is True
    assert thought["data"]["output"] == call.content


# -- a model server that dies -----------------------------------------------------------------


async def first_delta_stored(*, timeout_s: float) -> None:
    """Until a run has stored a ``delta`` event (its model is writing)."""
    deadline = time.monotonic() + timeout_s
    while not await RunEvent.objects.filter(type="delta").aexists():
        if time.monotonic() > deadline:
            raise AssertionError(f"no delta within {timeout_s} s")
        await asyncio.sleep(0.01)


async def test_a_killed_model_server_fails_the_run_with_llm_unavailable(user, settings):
    missing = model_server_missing()
    require(missing is None, str(missing))
    chat = {"message": LONG_PROMPT, "use_agent": False, "use_rag": False}
    with model_server() as doomed:  # its own, so that the shared one lives on
        settings.LLM = llm_settings(doomed.base_url, doomed.model)
        get_llm.cache_clear()
        writing = asyncio.ensure_future(run_through_api(user, "/chat?stream=true", chat))
        await first_delta_stored(timeout_s=60)
        doomed.process.kill()
        killed_mid_answer = await writing
    get_llm.cache_clear()
    refused = await run_through_api(user, "/chat?stream=true", chat)

    for outcome in (killed_mid_answer, refused):
        assert_ended(outcome)
        assert outcome.run["status"] == "failed"
        assert outcome.run["error_code"] == "llm_unavailable"
    assert killed_mid_answer.of_type("delta")


# -- what a client of a live server sees ------------------------------------------------------


def live_events(
    response: httpx.Response,
) -> Iterator[tuple[int, dict[str, Any], float]]:
    """The ``(id, data, time.monotonic() at arrival)`` of each event of a live SSE response,
    as its lines arrive."""
    seq = 0
    for line in response.iter_lines():
        if line.startswith("id: "):
            seq = int(line.removeprefix("id: "))
        elif line.startswith("data: "):
            yield seq, json.loads(line.removeprefix("data: ")), time.monotonic()


def live_client(base_url: str, user: Any) -> httpx.Client:
    _, token = api_token_create(user=user, name="real-model-live")
    return httpx.Client(
        base_url=base_url, headers={"Authorization": f"Bearer {token}"}, timeout=120
    )


def test_deltas_reach_the_client_while_the_model_is_still_writing(
    user, live_devassist, model_calls
):
    first_delta = done = None
    with (
        live_client(live_devassist, user) as client,
        client.stream(
            "POST",
            "/chat?stream=true",
            json={"message": LONG_PROMPT, "use_agent": False, "use_rag": False},
        ) as response,
    ):
        assert response.status_code == HTTPStatus.OK
        for _, event, arrived in live_events(response):
            if event["type"] == "delta" and first_delta is None:
                first_delta = arrived
            if event["type"] == "done":
                done = event
                break

    assert done is not None
    assert done["status"] == "completed"
    [call] = model_calls.completions
    assert call.ended_at is not None
    assert first_delta is not None
    assert first_delta < call.ended_at


def test_cancel_closes_the_models_http_stream_within_a_second(user, live_devassist, model_calls):
    cancelled_at = None
    run_id = ""
    statuses = []
    with (
        live_client(live_devassist, user) as client,
        client.stream(
            "POST",
            "/chat?stream=true",
            json={"message": LONG_PROMPT, "use_agent": False, "use_rag": False},
        ) as response,
    ):
        assert response.status_code == HTTPStatus.OK
        for _, event, _ in live_events(response):
            if event["type"] == "meta":
                run_id = event["run_id"]
            if event["type"] == "delta" and cancelled_at is None:
                cancelled_at = time.monotonic()
                cancel = client.post(f"/api/runs/{run_id}/cancel")
                assert cancel.status_code == HTTPStatus.OK
                statuses.append(cancel.json()["status"])
            if event["type"] == "done":
                statuses.append(event["status"])
                break
        run = client.get(f"/api/runs/{run_id}").json()

    assert statuses == ["cancelled", "cancelled"]
    assert run["status"] == "cancelled"
    [call] = model_calls.completions
    model_calls.wait_for(lambda: call.client_gone_at is not None or call.ended_at is not None)
    assert call.ended_at is None  # the model was still writing: DevAssist hung up on it
    assert cancelled_at is not None
    assert call.client_gone_at is not None
    assert call.client_gone_at - cancelled_at < 1.0
