"""Property test over the JSON inputs of every write endpoint: whatever a client sends (huge
and tiny numbers, NaN, NUL, lone surrogates, deep nesting), the answer is never a 5xx, every
4xx is the error envelope, and every row written can be read back by every read path."""

from __future__ import annotations

import json
import uuid
from http import HTTPStatus
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent.models import AgentRun
from chat.models import Conversation
from devassist.storable import MAX_INT, MAX_JSON_DEPTH
from tests.conftest import token_client
from tests.devassist.test_poison import content_of, nested
from tests.traces.factories import add, make_trace, step

PROPERTY = settings(
    max_examples=30,
    deadline=None,
    database=None,
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
    ],
)

POISON_TEXT = ["\x00", "\ud800", "\udfff", "a\x00b", "\ufffd", "😀", "\u2028"]
EDGE_NUMBERS = [
    0,
    -0.0,
    MAX_INT,
    -MAX_INT,
    MAX_INT + 1,
    -MAX_INT - 1,
    2**64,
    -(2**70),
    10**30,
    1e20,
    9.2e18,
    5e-324,
    1e-300,
    1.7976931348623157e308,
    float("inf"),
    float("-inf"),
    float("nan"),
]

texts = st.one_of(
    st.text(st.characters(exclude_categories=()), max_size=40),
    st.sampled_from(POISON_TEXT),
    st.builds(
        lambda a, p, b: a + p + b,
        st.text(max_size=10),
        st.sampled_from(POISON_TEXT),
        st.text(max_size=10),
    ),
)
numbers = st.one_of(
    st.sampled_from(EDGE_NUMBERS),
    st.integers(min_value=-(2**80), max_value=2**80),
    st.floats(allow_nan=True, allow_infinity=True),
)
scalars = st.one_of(st.none(), st.booleans(), numbers, texts)
json_values = st.one_of(
    st.recursive(
        scalars,
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(texts, inner, max_size=3),
        max_leaves=12,
    ),
    st.integers(min_value=MAX_JSON_DEPTH - 3, max_value=MAX_JSON_DEPTH + 20).map(nested),
)
times = st.one_of(
    st.sampled_from(
        ["2026-01-01T00:00:00Z", "0001-01-01T00:00:00+05:00", "9999-12-31T23:59:59-05:00"]
    ),
    texts,
    numbers,
)


def fields(**strategies: Any) -> Any:
    """A JSON object holding some of these fields."""
    return st.fixed_dictionaries({}, optional=strategies)


def encoded(value: Any) -> bytes:
    """``value`` as a client would send it: surrogates escaped, NaN and Infinity as the bare
    words Python writes, integers of any size."""
    return json.dumps(value, ensure_ascii=True, allow_nan=True).encode()


# --- what each write reads back through ---------------------------------------------------------


def assert_answered(response: Any) -> None:
    assert response.status_code < HTTPStatus.INTERNAL_SERVER_ERROR, response.content
    if response.status_code >= HTTPStatus.BAD_REQUEST:
        body = response.json()
        assert set(body) == {"error", "request_id"}
        assert body["error"]["code"]


def assert_readable(client: Client, staff: Client, *urls: str) -> None:
    for url in urls:
        response = client.get(url)
        assert response.status_code == HTTPStatus.OK, (url, response.content[:500])
        body = content_of(response)
        if response["Content-Type"].startswith("application/json"):
            json.loads(body)
    for url in ("/api/traces?limit=100", "/admin/agent-traces?limit=100"):
        response = staff.get(url)
        assert response.status_code == HTTPStatus.OK, (url, response.content[:500])


def trace_reads(trace_id: Any) -> list[str]:
    return [
        "/api/traces?limit=100",
        f"/api/traces/{trace_id}",
        f"/api/traces/{trace_id}/tree?view=full",
        f"/api/traces/{trace_id}/node/root?expand=true&max_depth=10",
        f"/api/traces/{trace_id}/events",
        f"/traces/{trace_id}/export.json",
    ]


def conversation_reads(user: User) -> list[str]:
    urls = ["/chat/conversations?limit=100"]
    for conversation in Conversation.objects.filter(owner=user):
        urls.append(f"/chat/conversations/{conversation.id}")
    for run in AgentRun.objects.filter(user=user, status__in=["completed", "failed"]):
        urls += [f"/api/runs/{run.id}", f"/api/runs/{run.id}/events"]
        if run.trace_id:
            urls += trace_reads(run.trace_id)
    return urls


@pytest.fixture
def clients(user: User, staff_user: User) -> tuple[Client, Client]:
    session = Client()
    session.force_login(user)
    return session, token_client(staff_user)


# --- the traces API -----------------------------------------------------------------------------


@pytest.mark.django_db
@PROPERTY
@given(body=fields(task=texts, metadata=json_values, agent_type=texts, mode=json_values))
def test_create_trace_input(user: User, clients: tuple[Client, Client], body: Any) -> None:
    owner, staff = clients

    response = owner.post("/api/traces", encoded(body), content_type="application/json")

    assert_answered(response)
    if response.status_code == HTTPStatus.CREATED:
        assert_readable(owner, staff, *trace_reads(response.json()["trace_id"]))


STEP_FIELDS = {
    "name": texts,
    "description": texts,
    "error": st.one_of(st.none(), texts),
    "data": json_values,
    "duration_ms": numbers,
    "tokens": numbers,
    "cost": numbers,
    "started_at": times,
    "finished_at": times,
    "status": st.sampled_from(["completed", "failed", "running", None]),
}


@pytest.mark.django_db
@PROPERTY
@given(
    batch=st.lists(
        st.fixed_dictionaries(
            {"step_type": st.sampled_from(["goal", "result"])}, optional=STEP_FIELDS
        ),
        min_size=1,
        max_size=3,
    )
)
def test_add_steps_input(user: User, clients: tuple[Client, Client], batch: Any) -> None:
    owner, staff = clients
    trace = make_trace(user)

    response = owner.post(
        f"/api/traces/{trace.id}/steps", encoded(batch), content_type="application/json"
    )

    assert_answered(response)
    assert_readable(owner, staff, *trace_reads(trace.id))


@pytest.mark.django_db
@PROPERTY
@given(patch=fields(**STEP_FIELDS))
def test_update_step_input(user: User, clients: tuple[Client, Client], patch: Any) -> None:
    owner, staff = clients
    trace = make_trace(user)
    (root,) = add(trace, step("goal", status="running"))

    response = owner.patch(
        f"/api/traces/{trace.id}/steps/{root.id}", encoded(patch), content_type="application/json"
    )

    assert_answered(response)
    assert_readable(owner, staff, *trace_reads(trace.id))


@pytest.mark.django_db
@PROPERTY
@given(
    body=fields(status=st.sampled_from(["completed", "failed", None]), total_duration_ms=numbers)
)
def test_complete_trace_input(user: User, clients: tuple[Client, Client], body: Any) -> None:
    owner, staff = clients
    trace = make_trace(user)

    response = owner.post(
        f"/api/traces/{trace.id}/complete", encoded(body), content_type="application/json"
    )

    assert_answered(response)
    assert_readable(owner, staff, *trace_reads(trace.id))


# --- chat, the agent, conversations, the sandbox --------------------------------------------------


chat_bodies = st.fixed_dictionaries(
    {"message": texts, "use_agent": st.just(False), "use_rag": st.just(False)},
    optional={
        "history": st.lists(
            st.fixed_dictionaries(
                {"role": st.sampled_from(["user", "assistant"]), "content": texts}
            ),
            max_size=2,
        ),
        "collection_name": st.one_of(st.none(), texts),
    },
)


@pytest.mark.django_db
@settings(PROPERTY, max_examples=25)
@given(body=chat_bodies)
def test_chat_input(user: User, clients: tuple[Client, Client], body: Any) -> None:
    owner, staff = clients

    response = owner.post("/chat", encoded(body), content_type="application/json")

    assert_answered(response)
    assert_readable(owner, staff, *conversation_reads(user))


@pytest.mark.django_db
@settings(PROPERTY, max_examples=15)
@given(body=st.fixed_dictionaries({"message": texts, "tools": st.just([])}))
def test_agent_input(user: User, clients: tuple[Client, Client], body: Any) -> None:
    owner, staff = clients

    response = owner.post("/agent", encoded(body), content_type="application/json")

    assert_answered(response)
    assert_readable(owner, staff, *conversation_reads(user))


@pytest.mark.django_db
@PROPERTY
@given(body=fields(title=texts))
def test_rename_conversation_input(user: User, clients: tuple[Client, Client], body: Any) -> None:
    owner, staff = clients
    conversation = Conversation.objects.create(owner=user, title="before")

    response = owner.patch(
        f"/chat/conversations/{conversation.id}", encoded(body), content_type="application/json"
    )

    assert_answered(response)
    assert_readable(owner, staff, *conversation_reads(user))


poisoned_code = st.builds(
    lambda before, poison, after: f"print(1)\n{before}{poison}{after}",
    st.text(max_size=20),
    st.sampled_from(["\x00", "\ud800", "\udc00"]),
    st.text(max_size=20),
)


@pytest.mark.django_db
@PROPERTY
@given(code=poisoned_code, timeout_s=st.one_of(st.none(), numbers))
def test_sandbox_code_that_cannot_be_stored_is_refused_before_it_runs(
    api: Client, code: str, timeout_s: Any
) -> None:
    """Only code that cannot be stored: code that can would run in a container each time."""
    body = {"code": code} if timeout_s is None else {"code": code, "timeout_s": timeout_s}

    response = api.post("/api/sandbox/execute", encoded(body), content_type="application/json")

    assert response.status_code == HTTPStatus.UNPROCESSABLE_ENTITY
    assert response.json()["error"]["code"] == "validation_error"


@pytest.mark.django_db
@PROPERTY
@given(
    query=st.dictionaries(
        st.sampled_from(["q", "limit", "offset", "cursor", "after_seq"]),
        # A URL cannot carry a lone surrogate (it is not UTF-8): query values leave them out.
        st.text(st.characters(exclude_categories=["Cs"]), max_size=30) | numbers.map(str),
        max_size=3,
    )
)
def test_query_strings_of_the_reads(user: User, api: Client, query: dict[str, str]) -> None:
    trace = make_trace(user)
    run_id = uuid.uuid4()
    for url in (
        "/api/traces",
        f"/api/traces/{trace.id}/node/root",
        f"/api/traces/{trace.id}/events",
        "/chat/conversations",
        f"/api/runs/{run_id}",
    ):
        assert_answered(api.get(url, query))
