"""Poison-proof storage: what cannot be stored is refused at the door with its path, what a
program produced is made storable, and no stored row breaks a later read."""

from __future__ import annotations

import json
import uuid
from decimal import Decimal
from http import HTTPStatus
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.contrib.auth.models import User
from django.db.models import F
from django.test import Client

from agent.models import AgentRun, RunEvent
from chat.models import Conversation, Message
from devassist.storable import MAX_INT, MAX_JSON_DEPTH, REPLACED_FLAG, REPLACEMENT
from tests.conftest import token_client
from tests.devassist.test_errors import assert_envelope, error_locations
from tests.traces.factories import add, make_trace, step
from traces.models import Step, Trace, TraceEvent
from traces.selectors import MAX_DEPTH, trace_events_after
from traces.store import StepCreate, get_trace_store


def nested(depth: int, leaf: Any = "leaf") -> Any:
    """``leaf`` inside ``depth`` levels of lists and objects."""
    value = leaf
    for level in range(depth):
        value = [value] if level % 2 else {"k": value}
    return value


#: Text and JSON at the edge of what the door lets in.
WORST_TEXT = f"{REPLACEMENT} 😀 𝄞 \u2028\u2029 </script><!-- ' \" \\ \t\n{'x' * 300}"
WORST: dict[str, Any] = {
    "max": MAX_INT,
    "min": -MAX_INT,
    "huge": 9.2e18,
    "huge_fraction": -9.2e18,
    "precise": 0.1 + 0.2,
    "tiny": 5e-324,
    "negative_zero": -0.0,
    "text": WORST_TEXT,
    "": {"": [None, True, False, []]},
    REPLACED_FLAG: True,
    # A request body is the top level; this object sits one level inside it.
    "deep": nested(MAX_JSON_DEPTH - 3),
}
#: What rows written before the door existed may hold: PostgreSQL stores both, orjson encodes
#: neither.
LEGACY = {"big": 2**70, "negative_big": -(2**80), "deep": nested(300)}


def post_json(client: Client, url: str, body: bytes | str) -> Any:
    return client.post(url, body, content_type="application/json")


def content_of(response: Any) -> bytes:
    """The whole body, streamed (over an async iterator, as under ASGI) or not."""
    if not response.streaming:
        return bytes(response.content)

    async def collect() -> bytes:
        return b"".join([chunk async for chunk in response.streaming_content])

    return async_to_sync(collect)()


def error_ending_with(body: dict[str, Any], name: str) -> bool:
    """Whether some error of a 422 is about field ``name`` (a union body lists each arm)."""
    return any(location[-1] == name for location in error_locations(body))


# --- at the door --------------------------------------------------------------------------------


BAD_VALUES = [
    pytest.param('"a\\u0000b"', "unstorable_text", id="nul"),
    pytest.param('"\\ud800"', "unstorable_text", id="lone-high-surrogate"),
    pytest.param('"x\\udc00"', "unstorable_text", id="lone-low-surrogate"),
    pytest.param(str(2**63), "number_out_of_range", id="int-past-bigint"),
    pytest.param(str(-(2**63)), "number_out_of_range", id="int-below-bigint"),
    pytest.param("Infinity", "number_not_finite", id="infinity"),
    pytest.param("-Infinity", "number_not_finite", id="minus-infinity"),
    pytest.param("NaN", "number_not_finite", id="nan"),
    pytest.param("1e400", "number_not_finite", id="float-overflow"),
    # PostgreSQL would give it back as the integer 100000000000000000000.
    pytest.param("1e20", "number_out_of_range", id="float-past-bigint"),
]


@pytest.mark.django_db
@pytest.mark.parametrize(("raw", "kind"), BAD_VALUES)
def test_unstorable_json_values_are_422_with_their_path(api: Client, raw: str, kind: str) -> None:
    body = f'{{"task": "t", "metadata": {{"a": [1, {{"b": {raw}}}]}}}}'

    response = post_json(api, "/api/traces", body)

    found = assert_envelope(response, HTTPStatus.UNPROCESSABLE_ENTITY, "validation_error")
    assert error_locations(found) == [["body", "metadata", "a", "1", "b"]]
    assert found["error"]["details"]["errors"][0]["type"] == kind
    assert "body.metadata.a.1.b" in found["error"]["message"]
    assert Trace.objects.count() == 0


@pytest.mark.django_db
def test_unstorable_keys_and_raw_surrogate_bytes_are_refused(api: Client) -> None:
    key = assert_envelope(
        post_json(api, "/api/traces", '{"metadata": {"a\\u0000": 1}}'),
        HTTPStatus.UNPROCESSABLE_ENTITY,
        "validation_error",
    )
    assert error_locations(key) == [["body", "metadata", f"a{REPLACEMENT}"]]
    surrogate_key = post_json(api, "/api/traces", '{"metadata": {"\\ud800": 1}, "\\udfff": 2}')
    assert error_locations(
        assert_envelope(surrogate_key, HTTPStatus.UNPROCESSABLE_ENTITY, "validation_error")
    ) == [["body", "metadata", REPLACEMENT], ["body", REPLACEMENT]]
    # UTF-8 bytes of a surrogate, which Python's JSON decoder lets through.
    raw = post_json(api, "/api/traces", b'{"task": "\xed\xa0\x80"}')
    assert error_locations(
        assert_envelope(raw, HTTPStatus.UNPROCESSABLE_ENTITY, "validation_error")
    ) == [["body", "task"]]


@pytest.mark.django_db
def test_json_nested_past_the_limit_is_refused_and_up_to_it_is_stored(api: Client) -> None:
    too_deep = json.dumps({"metadata": nested(MAX_JSON_DEPTH)})
    body = assert_envelope(
        post_json(api, "/api/traces", too_deep), HTTPStatus.UNPROCESSABLE_ENTITY, "validation_error"
    )
    assert body["error"]["details"]["errors"][0]["type"] == "too_deep"

    deepest = json.dumps({"metadata": nested(MAX_JSON_DEPTH - 1)})
    response = post_json(api, "/api/traces", deepest)
    assert response.status_code == HTTPStatus.CREATED
    assert response.json()["metadata"] == nested(MAX_JSON_DEPTH - 1)


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("method", "url", "body", "location"),
    [
        ("post", "/chat", '{"message": "hi \\ud83d"}', ["body", "message"]),
        ("post", "/agent", '{"message": "a\\u0000"}', ["body", "message"]),
        ("post", "/api/sandbox/execute", '{"code": "print(1)\\u0000"}', ["body", "code"]),
        (
            "post",
            "/chat",
            '{"message": "hi", "history": [{"role": "user", "content": "\\udfff"}]}',
            ["body", "history", "0", "content"],
        ),
        (
            "post",
            "/api/traces/{trace}/steps",
            '{"step_type": "goal", "duration_ms": 9223372036854775808}',
            ["body", "duration_ms"],
        ),
        (
            "post",
            "/api/traces/{trace}/steps",
            '[{"step_type": "goal"}, {"step_type": "goal", "data": {"x": NaN}}]',
            ["body", "1", "data", "x"],
        ),
        (
            "patch",
            "/api/traces/{trace}/steps/{step}",
            '{"description": "\\u0000"}',
            ["body", "description"],
        ),
        (
            "post",
            "/api/traces/{trace}/complete",
            '{"total_duration_ms": 99999999999999999999}',
            ["body", "total_duration_ms"],
        ),
        ("patch", "/chat/conversations/{conversation}", '{"title": "t\\u0000"}', ["body", "title"]),
    ],
)
def test_every_write_refuses_unstorable_input(
    api: Client, user: User, method: str, url: str, body: str, location: list[str]
) -> None:
    trace = make_trace(user)
    (root,) = add(trace, step("goal"))
    conversation = Conversation.objects.create(owner=user, title="c")
    target = url.format(trace=trace.id, step=root.id, conversation=conversation.id)

    response = getattr(api, method)(target, body, content_type="application/json")

    found = assert_envelope(response, HTTPStatus.UNPROCESSABLE_ENTITY, "validation_error")
    assert error_locations(found) == [location]
    assert AgentRun.objects.count() == 0
    assert Step.objects.count() == 1


@pytest.mark.django_db
@pytest.mark.parametrize(
    "url",
    [
        "/api/traces?q=a%00b",
        "/api/traces/{trace}/node/root?offset=9223372036854775808",
        "/api/traces/{trace}/events?after_seq=9223372036854775808",
        "/admin/agent-traces?offset=9223372036854775808",
        "/api/runs/{run}/events?after_seq=99999999999999999999999",
        "/chat/conversations?q=%00",
    ],
)
def test_query_values_that_cannot_be_stored_or_compared_are_422(
    staff_api: Client, staff_user: User, url: str
) -> None:
    trace = make_trace(staff_user)
    run = AgentRun.objects.create(user=staff_user, input="x")

    response = staff_api.get(url.format(trace=trace.id, run=run.id))

    body = assert_envelope(response, HTTPStatus.UNPROCESSABLE_ENTITY, "validation_error")
    assert error_locations(body)[0][0] == "query"


@pytest.mark.django_db
def test_offsets_at_the_bigint_limit_are_answered(staff_api: Client, staff_user: User) -> None:
    trace = make_trace(staff_user)
    node = staff_api.get(f"/api/traces/{trace.id}/node/root?offset={MAX_INT}")
    assert node.status_code == HTTPStatus.OK
    assert node.json()["children"] == []
    runs = staff_api.get(f"/admin/agent-traces?offset={MAX_INT}")
    assert runs.status_code == HTTPStatus.OK
    assert runs.json()["runs"] == []


@pytest.mark.django_db
def test_null_for_an_optional_field_means_absent(api: Client, user: User) -> None:
    trace = make_trace(user)
    body = {
        "step_type": "goal",
        "error": None,
        "name": None,
        "description": None,
        "status": None,
        "tokens": None,
        "cost": None,
        "data": None,
    }

    response = api.post(f"/api/traces/{trace.id}/steps", body, content_type="application/json")

    assert response.status_code == HTTPStatus.CREATED, response.content
    (stored,) = response.json()["steps"]
    assert (stored["error"], stored["name"], stored["status"]) == ("", "", "completed")
    created = api.post(
        "/api/traces",
        {"task": None, "metadata": None, "mode": None},
        content_type="application/json",
    )
    assert created.status_code == HTTPStatus.CREATED
    assert (created.json()["task"], created.json()["metadata"]) == ("", {})
    # A required field stays required.
    refused = api.post(f"/api/traces/{trace.id}/steps", {"step_type": None}, "application/json")
    assert_envelope(refused, HTTPStatus.UNPROCESSABLE_ENTITY, "validation_error")


@pytest.mark.django_db
def test_costs_past_their_column_are_refused_and_nothing_is_stored(api: Client, user: User) -> None:
    trace = make_trace(user)
    url = f"/api/traces/{trace.id}/steps"
    one = assert_envelope(
        api.post(url, {"step_type": "goal", "cost": 10**12}, content_type="application/json"),
        HTTPStatus.UNPROCESSABLE_ENTITY,
        "validation_error",
    )
    assert error_ending_with(one, "cost")

    half = 6 * 10**11
    batch = [{"step_type": "goal", "cost": half}, {"step_type": "goal", "cost": half}]
    total = api.post(url, batch, content_type="application/json")
    assert_envelope(total, HTTPStatus.UNPROCESSABLE_ENTITY, "cost_out_of_range")
    assert Step.objects.filter(trace=trace).count() == 0

    (first,) = api.post(url, batch[:1], content_type="application/json").json()["steps"]
    (second,) = api.post(url, {"step_type": "goal"}, content_type="application/json").json()[
        "steps"
    ]
    patch = api.patch(f"{url}/{second['step_id']}", {"cost": half}, content_type="application/json")
    assert_envelope(patch, HTTPStatus.UNPROCESSABLE_ENTITY, "cost_out_of_range")
    trace.refresh_from_db()
    assert trace.total_cost == Decimal(half)
    assert first["cost"] == half


@pytest.mark.django_db
@pytest.mark.parametrize("moment", ["0001-01-01T00:00:00+01:00", "9999-12-31T23:59:59-01:00"])
def test_times_outside_what_utc_holds_are_422(api: Client, user: User, moment: str) -> None:
    trace = make_trace(user)

    response = api.post(
        f"/api/traces/{trace.id}/steps",
        {"step_type": "goal", "started_at": moment},
        content_type="application/json",
    )

    body = assert_envelope(response, HTTPStatus.UNPROCESSABLE_ENTITY, "validation_error")
    assert error_ending_with(body, "started_at")


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("content_type", "body"),
    [
        pytest.param("multipart/form-data", b"--x\r\n\r\nhello\r\n--x--\r\n", id="no-boundary"),
        pytest.param("multipart/form-data; boundary=", b"--\r\n", id="empty-boundary"),
        pytest.param("multipart/form-data; boundary=x", b"garbage", id="no-parts"),
        pytest.param(
            "multipart/form-data; boundary=x",
            b'--x\r\nContent-Disposition: form-data; name="files"; filename="a.md"\r\n\r\nhi',
            id="unterminated",
        ),
    ],
)
def test_malformed_multipart_gets_the_envelope(
    staff_api: Client, content_type: str, body: bytes
) -> None:
    response = staff_api.post("/api/collections/docs/documents", body, content_type=content_type)

    assert 400 <= response.status_code < 500
    assert_envelope(response, HTTPStatus(response.status_code), response.json()["error"]["code"])


@pytest.mark.django_db
def test_multipart_without_a_boundary_is_400_invalid_multipart(staff_api: Client) -> None:
    response = staff_api.post(
        "/api/collections/docs/documents", b"--x\r\n\r\n--x--", content_type="multipart/form-data"
    )

    assert_envelope(response, HTTPStatus.BAD_REQUEST, "invalid_multipart")


@pytest.mark.django_db
@pytest.mark.parametrize(
    "body", [b"{not json", b"\xff\xfe", b"[" * 100_000, b'{"task": 1' + b"0" * 5000 + b"}"]
)
def test_bodies_that_do_not_parse_are_400_with_the_envelope(api: Client, body: bytes) -> None:
    assert_envelope(post_json(api, "/api/traces", body), HTTPStatus.BAD_REQUEST, "bad_request")


# --- made storable on write -----------------------------------------------------------------------


PROGRAM_DATA: dict[str, Any] = {
    "stdout": "a\x00b",
    "lone": "\ud800x",
    "big": 2**64,
    "nan": float("nan"),
    "huge_float": 1e300,
    "deep": nested(MAX_JSON_DEPTH + 5),
    "ke\x00y": 1,
}


@pytest.mark.django_db
def test_a_programs_values_are_stored_replaced_and_flagged(user: User) -> None:
    trace = make_trace(user)
    store = get_trace_store()
    result = StepCreate(
        step_type="result",
        data=dict(PROGRAM_DATA),
        error="exit \x00 code",
        description="\udc80",
    )

    (stored,) = async_to_sync(store.add_steps)(trace.id, [result]).steps
    async_to_sync(store.complete_trace)(trace.id, status="completed")

    row = Step.objects.get(pk=result.id)
    assert row.data["stdout"] == f"a{REPLACEMENT}b"
    assert row.data["lone"] == f"{REPLACEMENT}x"
    assert row.data["big"] == str(2**64)
    assert row.data["nan"] == "NaN"
    assert row.data["huge_float"] == "1e+300"
    assert row.data[f"ke{REPLACEMENT}y"] == 1
    assert row.data[REPLACED_FLAG] is True
    assert (row.error, row.description) == (f"exit {REPLACEMENT} code", REPLACEMENT)
    # What the store answers and broadcasts is what it stored.
    assert stored.data == row.data
    (added,) = [
        event
        for event in trace_events_after(trace_id=trace.id, after_seq=0)
        if event["event"] == "step_added"
    ]
    assert added["step"]["error"] == row.error
    assert "\x00" not in json.dumps(added)
    trace.refresh_from_db()
    assert trace.status == "completed"


@pytest.mark.django_db
def test_a_too_deep_subtree_is_kept_as_its_json_text(user: User) -> None:
    trace = make_trace(user)
    deep = nested(MAX_JSON_DEPTH + 5)

    (stored,) = add(trace, step("result", data={"deep": deep}))

    kept = stored.data["deep"]
    level = kept
    for _ in range(MAX_JSON_DEPTH - 1):
        level = level["k"] if isinstance(level, dict) else level[0]
    assert isinstance(level, str)
    assert stored.data[REPLACED_FLAG] is True


@pytest.mark.django_db
def test_a_run_event_with_a_nul_is_stored_replaced(user: User) -> None:
    from agent.events import RunEvents

    run = AgentRun.objects.create(user=user, input="x")
    events = RunEvents(run.id)
    row = events._next("delta", {"content": "\x00"})

    events._store_one(row)

    stored = RunEvent.objects.get(run=run)
    assert stored.payload == {"type": "delta", "content": REPLACEMENT, REPLACED_FLAG: True}
    assert row.payload == stored.payload


@pytest.mark.django_db
def test_sandbox_output_with_a_nul_is_kept_and_the_trace_completes(
    api: Client, sandbox_image: str
) -> None:
    response = api.post(
        "/api/sandbox/execute",
        {"code": "import sys\nsys.stdout.write('a\\x00b')"},
        content_type="application/json",
    )

    assert response.status_code == HTTPStatus.OK, response.content
    body = response.json()
    trace = Trace.objects.get(pk=body["trace_id"])
    assert trace.status == "completed"
    result = Step.objects.get(trace=trace, step_type="result")
    assert result.data["stdout"] == f"a{REPLACEMENT}b"
    assert result.data[REPLACED_FLAG] is True


# --- nothing stored breaks a read -----------------------------------------------------------------


def poisoned_world(owner: User) -> dict[str, Any]:
    """A conversation with a finished chat run whose every row holds ``WORST`` (the values
    that pass the door), written through the API, then edited in place through the ORM."""
    client = token_client(owner)
    response = client.post(
        "/chat", {"message": WORST_TEXT, "use_agent": False}, content_type="application/json"
    )
    assert response.status_code == HTTPStatus.OK, response.content
    body = response.json()
    run = AgentRun.objects.get(pk=body["run_id"])
    trace = Trace.objects.get(run=run)
    trace_steps = add_worst_steps(trace)
    Trace.objects.filter(pk=trace.pk).update(metadata=WORST, task=WORST_TEXT)
    Step.objects.filter(trace=trace).update(
        data=WORST, description=WORST_TEXT, error=WORST_TEXT, name=WORST_TEXT[:200]
    )
    TraceEvent.objects.filter(trace=trace).update(payload={"event": "x", "worst": WORST})
    # The run's answer and error are its steps' (the goal's error is set above).
    Step.objects.filter(trace=trace, step_type="response").update(
        data={**WORST, "answer": WORST_TEXT}
    )
    AgentRun.objects.filter(pk=run.pk).update(tools=[WORST_TEXT])
    done = RunEvent.objects.get(run=run, type="done")
    RunEvent.objects.filter(pk=done.pk).update(seq=F("seq") + 1)
    RunEvent.objects.create(run=run, seq=done.seq, type="step", payload=step_event(WORST))
    RunEvent.objects.filter(run=run, type="delta").update(
        payload={"type": "delta", "content": WORST_TEXT, "worst": WORST}
    )
    Message.objects.filter(run=run).update(content=WORST_TEXT, metadata=WORST)
    Conversation.objects.filter(runs=run).update(title=WORST_TEXT[:200])
    return {"run": run, "trace": trace, "conversation_id": run.conversation_id, **trace_steps}


def add_worst_steps(trace: Trace) -> dict[str, Any]:
    """A chain ``MAX_DEPTH`` steps deep under a new root: the deepest tree a read nests."""
    Trace.objects.filter(pk=trace.pk).update(status="running")
    parent = None
    chain = []
    for _ in range(MAX_DEPTH + 1):
        item = step("thought", parent=parent, data=WORST, description=WORST_TEXT)
        chain.append(item)
        parent = item
    add(trace, *chain)
    async_to_sync(get_trace_store().complete_trace)(trace.id, status="completed")
    return {"root_id": chain[0].id}


def step_event(worst: Any) -> dict[str, Any]:
    return {
        "type": "step",
        "step_index": 1,
        "step_id": str(uuid.uuid4()),
        "thought": WORST_TEXT,
        "action_raw": WORST_TEXT,
        "tool_name": "execute_code",
        "tool_args": {"worst": worst},
        "observation": WORST_TEXT,
        "error": None,
        "started_at_ms": MAX_INT,
        "finished_at_ms": MAX_INT,
        "latency_ms": 0,
    }


def read_everything(owner: Client, staff: Client, world: dict[str, Any]) -> list[Any]:
    """Every read path that meets the world's rows, as (name, response)."""
    trace_id, run_id = world["trace"].id, world["run"].id
    conversation_id = world["conversation_id"]
    return [
        ("owner's traces", owner.get("/api/traces")),
        ("owner's filtered traces", owner.get("/api/traces?q=%F0%9F%98%80")),
        ("staff's traces", staff.get("/api/traces?limit=100")),
        ("one trace", owner.get(f"/api/traces/{trace_id}")),
        ("tree", owner.get(f"/api/traces/{trace_id}/tree")),
        ("full tree", owner.get(f"/api/traces/{trace_id}/tree?view=full")),
        ("deep tree", owner.get(f"/api/traces/{trace_id}/tree?view=full&max_depth={MAX_DEPTH}")),
        ("node window", owner.get(f"/api/traces/{trace_id}/node/root?max_depth={MAX_DEPTH}")),
        (
            "expanded node window",
            owner.get(f"/api/traces/{trace_id}/node/{world['root_id']}?expand=true&max_depth=10"),
        ),
        ("trace events", owner.get(f"/api/traces/{trace_id}/events")),
        ("export", owner.get(f"/traces/{trace_id}/export.json")),
        ("trace page", owner.get(f"/traces/{trace_id}/")),
        ("trace list page", owner.get("/traces/")),
        ("staff runs", staff.get("/admin/agent-traces?limit=100")),
        ("staff run", staff.get(f"/admin/agent-traces/{run_id}")),
        ("run", owner.get(f"/api/runs/{run_id}")),
        ("run re-attach", owner.get(f"/api/runs/{run_id}/events")),
        ("conversations", owner.get("/chat/conversations")),
        ("conversation", owner.get(f"/chat/conversations/{conversation_id}")),
    ]


def assert_all_read(responses: list[Any]) -> dict[str, bytes]:
    """Each response is a 200 whose whole body arrives (and parses, when JSON); the bodies."""
    failed = [(name, r.status_code) for name, r in responses if r.status_code != HTTPStatus.OK]
    assert failed == []
    bodies = {}
    for name, response in responses:
        bodies[name] = content_of(response)
        if response["Content-Type"].startswith("application/json"):
            assert json.loads(bodies[name]) is not None, name
        else:
            assert bodies[name], name
    return bodies


@pytest.mark.django_db
def test_rows_holding_the_worst_accepted_values_break_no_read(user: User, staff_user: User) -> None:
    world = poisoned_world(user)
    owner = Client()
    owner.force_login(user)
    staff = Client()
    staff.force_login(staff_user)

    responses = read_everything(owner, staff, world)

    bodies = assert_all_read(responses)
    events = [
        json.loads(line.removeprefix("data: "))
        for line in bodies["run re-attach"].decode().split("\n")
        if line.startswith("data: ")
    ]
    assert [event["type"] for event in events][-1] == "done"
    (step_event,) = [event for event in events if event["type"] == "step"]
    assert step_event["tool_args"] == {"worst": WORST}
    assert json.loads(bodies["run"])["answer"] == WORST_TEXT  # the response step's


@pytest.mark.django_db
def test_the_debug_panel_reads_the_worst_accepted_values(superuser: User) -> None:
    world = poisoned_world(superuser)

    response = token_client(superuser).get(f"/api/conversations/{world['conversation_id']}/debug")

    assert response.status_code == HTTPStatus.OK, response.content
    assert WORST_TEXT in set(strings_in(response.json()))


def strings_in(value: Any) -> Any:
    """Every string inside decoded JSON."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from strings_in(item)
    elif isinstance(value, list):
        for item in value:
            yield from strings_in(item)


@pytest.mark.django_db
def test_rows_written_before_the_door_still_read(user: User, staff_user: User) -> None:
    trace = make_trace(user)
    (root,) = add(trace, step("goal"))
    Trace.objects.filter(pk=trace.pk).update(metadata=LEGACY)
    Step.objects.filter(pk=root.id).update(data=LEGACY)
    owner = token_client(user)
    staff = token_client(staff_user)

    reads = {
        "owner's traces": owner.get("/api/traces"),
        "staff's traces": staff.get("/api/traces"),
        "full tree": owner.get(f"/api/traces/{trace.id}/tree?view=full"),
        "expanded node": owner.get(f"/api/traces/{trace.id}/node/root?expand=true"),
        "step": owner.get(f"/api/traces/{trace.id}/steps/{root.id}"),
    }

    assert {name: r.status_code for name, r in reads.items()} == dict.fromkeys(reads, 200)
    (listed,) = reads["owner's traces"].json()["traces"]
    assert listed["metadata"]["big"] == str(2**70)
    assert reads["step"].json()["data"]["negative_big"] == str(-(2**80))
    session = Client()
    session.force_login(user)
    export = session.get(f"/traces/{trace.id}/export.json")
    document = json.loads(content_of(export))
    assert document["trace"]["metadata"]["big"] == str(2**70)


# --- limits agree ---------------------------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize("endpoint", ["tree", "node/root"])
def test_tree_and_node_take_the_same_max_depth(api: Client, user: User, endpoint: str) -> None:
    trace = make_trace(user)
    url = f"/api/traces/{trace.id}/{endpoint}?max_depth="

    assert api.get(f"{url}{MAX_DEPTH}").status_code == HTTPStatus.OK
    body = assert_envelope(
        api.get(f"{url}{MAX_DEPTH + 1}"), HTTPStatus.UNPROCESSABLE_ENTITY, "validation_error"
    )
    assert error_locations(body) == [["query", "max_depth"]]
