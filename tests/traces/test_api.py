from __future__ import annotations

import json
import uuid
from http import HTTPStatus

import pytest

from tests.conftest import token_client
from tests.traces.factories import add, build_tree, make_trace, step
from traces.models import Step, Trace, TraceEvent
from traces.store import TraceSteps, get_trace_store

pytestmark = pytest.mark.django_db


def post(client, url, body):
    return client.post(url, data=json.dumps(body), content_type="application/json")


def patch(client, url, body):
    return client.patch(url, data=json.dumps(body), content_type="application/json")


def assert_error(response, status, code):
    assert response.status_code == status, response.content
    body = response.json()
    assert body["error"]["code"] == code
    assert body["error"]["message"]
    assert "details" in body["error"]
    assert body["request_id"] == response["X-Request-ID"]
    return body


# --- ingestion ----------------------------------------------------------------------------------


def test_ingest_a_whole_trace(api, user):
    created = post(api, "/api/traces", {"task": "写一个 add(a,b)", "agent_type": "my-agent"})
    assert created.status_code == HTTPStatus.CREATED
    trace = created.json()
    assert trace["status"] == "running"
    assert trace["task"] == "写一个 add(a,b)"
    assert "写一个" in created.content.decode()  # non-ASCII kept as is
    trace_id = trace["trace_id"]

    goal, thought = str(uuid.uuid4()), str(uuid.uuid4())
    one = post(api, f"/api/traces/{trace_id}/steps", {"id": goal, "step_type": "goal"})
    assert one.status_code == HTTPStatus.CREATED
    assert one.json()["created"] == 1
    batch = post(
        api,
        f"/api/traces/{trace_id}/steps",
        [
            {
                "id": thought,
                "parent_id": goal,
                "step_type": "thought",
                "tokens": 12,
                "cost": 0.5,
                "status": "running",
                "data": {"thought": "add them"},
            },
            {"parent_id": thought, "step_type": "action", "name": "execute_code"},
        ],
    )
    assert batch.status_code == HTTPStatus.CREATED
    steps = batch.json()["steps"]
    assert [s["seq"] for s in steps] == [2, 3]
    assert steps[0]["data_preview"] == '{"thought":"add them"}'
    assert "data" not in steps[0]

    updated = patch(
        api,
        f"/api/traces/{trace_id}/steps/{thought}",
        {"status": "failed", "error": "model timed out", "duration_ms": 1500},
    )
    assert updated.status_code == HTTPStatus.OK
    assert updated.json()["status"] == "failed"
    assert updated.json()["data"] == {"thought": "add them"}
    assert updated.json()["duration_ms"] == 1500

    done = post(api, f"/api/traces/{trace_id}/complete", {"status": "failed"})
    assert done.status_code == HTTPStatus.OK
    body = done.json()
    assert body["status"] == "failed"
    assert body["total_steps"] == 3
    assert body["total_tokens"] == 12
    assert body["total_cost"] == 0.5
    assert body["error_count"] == 1
    assert body["completed_at"].endswith("Z")


def test_costs_keep_eight_decimal_places(api, user):
    trace = make_trace(user)
    response = post(
        api, f"/api/traces/{trace.id}/steps", {"step_type": "thought", "cost": 0.1 + 0.2}
    )
    assert response.status_code == HTTPStatus.CREATED
    assert response.json()["steps"][0]["cost"] == 0.3
    negative = post(api, f"/api/traces/{trace.id}/steps", {"step_type": "thought", "cost": -1})
    assert_error(negative, HTTPStatus.UNPROCESSABLE_ENTITY, "validation_error")


def test_resending_the_same_step_id_is_idempotent(api, user):
    trace = make_trace(user)
    body = {"id": str(uuid.uuid4()), "step_type": "goal"}
    first = post(api, f"/api/traces/{trace.id}/steps", body)
    second = post(api, f"/api/traces/{trace.id}/steps", body)
    assert first.json()["created"] == 1
    assert second.status_code == HTTPStatus.CREATED
    assert second.json()["created"] == 0
    assert second.json()["existing"] == 1
    assert second.json()["steps"][0]["seq"] == first.json()["steps"][0]["seq"]
    assert Step.objects.filter(trace=trace).count() == 1


def test_batch_over_1000_steps_is_413_and_writes_nothing(api, user):
    trace = make_trace(user)
    response = post(api, f"/api/traces/{trace.id}/steps", [{"step_type": "goal"}] * 1001)
    assert_error(response, HTTPStatus.REQUEST_ENTITY_TOO_LARGE, "batch_too_large")
    assert Step.objects.filter(trace=trace).count() == 0


def test_body_over_the_size_limit_is_413(api, user, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 2000
    trace = make_trace(user)
    response = post(
        api, f"/api/traces/{trace.id}/steps", {"step_type": "goal", "description": "x" * 5000}
    )
    assert_error(response, HTTPStatus.REQUEST_ENTITY_TOO_LARGE, "payload_too_large")


def test_bad_parents_are_400_and_nothing_is_written(api, user, other_user):
    trace = make_trace(user)
    other = make_trace(other_user)
    foreign = add(other, step("goal"))[0]
    root = add(trace, step("goal"))[0]
    for parent in (str(uuid.uuid4()), str(foreign.id)):
        response = post(
            api,
            f"/api/traces/{trace.id}/steps",
            [
                {"parent_id": str(root.id), "step_type": "thought"},
                {"parent_id": parent, "step_type": "thought"},
            ],
        )
        body = assert_error(response, HTTPStatus.BAD_REQUEST, "invalid_parent")
        assert body["error"]["details"]["index"] == 1
    assert Step.objects.filter(trace=trace).count() == 1


def test_changes_to_a_completed_trace_are_409(api, user):
    trace = make_trace(user)
    root = add(trace, step("goal"))[0]
    assert post(api, f"/api/traces/{trace.id}/complete", {}).status_code == HTTPStatus.OK
    assert_error(
        post(api, f"/api/traces/{trace.id}/complete", {}), HTTPStatus.CONFLICT, "trace_not_running"
    )
    assert_error(
        post(api, f"/api/traces/{trace.id}/steps", {"step_type": "thought"}),
        HTTPStatus.CONFLICT,
        "trace_not_running",
    )
    assert_error(
        patch(api, f"/api/traces/{trace.id}/steps/{root.id}", {"name": "x"}),
        HTTPStatus.CONFLICT,
        "trace_not_running",
    )


@pytest.mark.parametrize(
    "body",
    [
        {"step_type": "nonsense"},
        {"step_type": "goal", "status": "done"},
        {"step_type": "goal", "tokens": -1},
        {"step_type": "goal", "parent_id": "not-a-uuid"},
        {"step_type": "goal", "name": "x" * 201},
    ],
)
def test_invalid_step_bodies_are_422(api, user, body):
    trace = make_trace(user)
    response = post(api, f"/api/traces/{trace.id}/steps", body)
    assert_error(response, HTTPStatus.UNPROCESSABLE_ENTITY, "validation_error")


def test_invalid_complete_status_and_empty_patch(api, user):
    trace = make_trace(user)
    root = add(trace, step("goal"))[0]
    assert_error(
        post(api, f"/api/traces/{trace.id}/complete", {"status": "running"}),
        HTTPStatus.UNPROCESSABLE_ENTITY,
        "validation_error",
    )
    assert_error(
        patch(api, f"/api/traces/{trace.id}/steps/{root.id}", {}),
        HTTPStatus.BAD_REQUEST,
        "invalid_step",
    )


def test_unknown_trace_and_step_are_404(api, user):
    trace = make_trace(user)
    missing = uuid.uuid4()
    assert_error(api.get(f"/api/traces/{missing}"), HTTPStatus.NOT_FOUND, "trace_not_found")
    assert_error(
        post(api, f"/api/traces/{missing}/steps", {"step_type": "goal"}),
        HTTPStatus.NOT_FOUND,
        "trace_not_found",
    )
    assert_error(
        api.get(f"/api/traces/{trace.id}/steps/{missing}"), HTTPStatus.NOT_FOUND, "step_not_found"
    )
    assert_error(
        api.get(f"/api/traces/{trace.id}/node/{missing}"), HTTPStatus.NOT_FOUND, "step_not_found"
    )
    assert_error(
        patch(api, f"/api/traces/{trace.id}/steps/{missing}", {"name": "x"}),
        HTTPStatus.NOT_FOUND,
        "step_not_found",
    )


@pytest.mark.parametrize(
    "url",
    [
        "/api/traces/nope",
        "/api/traces/{trace}/steps/nope",
        "/api/traces/{trace}/node/nope",
        "/api/traces?limit=0",
        "/api/traces?limit=101",
        "/api/traces?status=sleeping",
        "/api/traces?cursor=%%%",
        "/api/traces/{trace}/tree?view=huge",
        "/api/traces/{trace}/tree?max_depth=0",
        "/api/traces/{trace}/node/root?max_depth=11",
        "/api/traces/{trace}/node/root?limit=501",
        "/api/traces/{trace}/node/root?offset=-1",
        "/api/traces/{trace}/events?after_seq=-1",
    ],
)
def test_malformed_ids_and_out_of_range_parameters_are_422(api, user, url):
    trace = make_trace(user)
    response = api.get(url.format(trace=trace.id))
    body = assert_error(response, HTTPStatus.UNPROCESSABLE_ENTITY, "validation_error")
    assert body["error"]["details"]["errors"]


# --- access -------------------------------------------------------------------------------------


def test_users_see_their_own_traces_and_staff_see_all(api, other_api, staff_api, user, other_user):
    mine = make_trace(user, task="mine")
    theirs = make_trace(other_user, task="theirs")

    assert [t["task"] for t in api.get("/api/traces").json()["traces"]] == ["mine"]
    assert_error(api.get(f"/api/traces/{theirs.id}"), HTTPStatus.NOT_FOUND, "trace_not_found")
    assert_error(api.get(f"/api/traces/{theirs.id}/tree"), HTTPStatus.NOT_FOUND, "trace_not_found")
    assert_error(
        api.get(f"/api/traces/{theirs.id}/events"), HTTPStatus.NOT_FOUND, "trace_not_found"
    )
    their_root = add(theirs, step("goal"))[0]
    for url in (
        f"/api/traces/{theirs.id}/node/root",
        f"/api/traces/{theirs.id}/node/{their_root.id}",
    ):
        assert_error(api.get(url), HTTPStatus.NOT_FOUND, "trace_not_found")
    assert staff_api.get(f"/api/traces/{theirs.id}/node/{their_root.id}").status_code == 200
    assert_error(
        post(api, f"/api/traces/{theirs.id}/steps", {"step_type": "goal"}),
        HTTPStatus.NOT_FOUND,
        "trace_not_found",
    )

    staff_tasks = {t["task"] for t in staff_api.get("/api/traces").json()["traces"]}
    assert staff_tasks == {"mine", "theirs"}
    assert staff_api.get(f"/api/traces/{mine.id}").json()["user"] == "alice"
    # Staff read everyone's traces but record only into their own.
    assert_error(
        post(staff_api, f"/api/traces/{mine.id}/steps", {"step_type": "goal"}),
        HTTPStatus.FORBIDDEN,
        "forbidden",
    )


def test_anonymous_is_401_everywhere(client, user):
    trace = make_trace(user)
    for url in [
        "/api/traces",
        f"/api/traces/{trace.id}",
        f"/api/traces/{trace.id}/tree",
        f"/api/traces/{trace.id}/node/root",
        f"/api/traces/{trace.id}/events",
    ]:
        assert_error(client.get(url), HTTPStatus.UNAUTHORIZED, "not_authenticated")
    assert_error(post(client, "/api/traces", {}), HTTPStatus.UNAUTHORIZED, "not_authenticated")


# --- reads --------------------------------------------------------------------------------------


def test_list_filters_and_cursor_pagination(api, user):
    for i in range(5):
        make_trace(
            user,
            task=f"fix bug {i}" if i % 2 else f"write docs {i}",
            mode="call" if i < 2 else "agent",
        )
    first = api.get("/api/traces?limit=2").json()
    assert [t["task"] for t in first["traces"]] == ["write docs 4", "fix bug 3"]
    second = api.get(f"/api/traces?limit=2&cursor={first['next_cursor']}").json()
    third = api.get(f"/api/traces?limit=2&cursor={second['next_cursor']}").json()
    assert [t["task"] for t in second["traces"] + third["traces"]] == [
        "write docs 2",
        "fix bug 1",
        "write docs 0",
    ]
    assert third["next_cursor"] is None
    assert {t["task"] for t in api.get("/api/traces?q=BUG").json()["traces"]} == {
        "fix bug 1",
        "fix bug 3",
    }
    assert len(api.get("/api/traces?mode=call").json()["traces"]) == 2
    assert api.get("/api/traces?status=completed").json()["traces"] == []
    assert len(api.get("/api/traces?agent_type=devassist").json()["traces"]) == 5
    keys = set(first["traces"][0])
    assert {
        "trace_id",
        "mode",
        "task",
        "agent_type",
        "status",
        "total_steps",
        "total_tokens",
        "total_cost",
        "total_duration_ms",
        "error_count",
        "created_at",
        "completed_at",
    } <= keys


def test_tree_compact_and_full(api, user):
    trace = make_trace(user)
    build_tree(trace, depth=2, fanout=2)
    compact = api.get(f"/api/traces/{trace.id}/tree").json()
    assert compact["trace"]["trace_id"] == str(trace.id)
    (root,) = compact["root_steps"]
    assert root["has_children"] is True
    assert root["children_count"] == 2
    assert root["subtree_steps"] == 7
    assert "data" not in root
    assert len(root["children"][0]["children"]) == 2
    leaf = root["children"][0]["children"][0]
    assert leaf["has_children"] is False
    assert leaf["children"] == []

    full = api.get(f"/api/traces/{trace.id}/tree?view=full").json()
    assert full["root_steps"][0]["data"] == {}
    shallow = api.get(f"/api/traces/{trace.id}/tree?max_depth=1").json()
    assert shallow["root_steps"][0]["children"] == []
    assert shallow["root_steps"][0]["has_children"] is True


def test_node_windows_children(api, user):
    trace = make_trace(user)
    build_tree(trace, depth=2, fanout=5)
    top = api.get(f"/api/traces/{trace.id}/node/root").json()
    assert top["step"] is None
    assert top["total_children"] == 1
    root_id = top["children"][0]["step_id"]
    assert top == api.get(f"/api/traces/{trace.id}/node/null").json()

    window = api.get(f"/api/traces/{trace.id}/node/{root_id}?offset=2&limit=2&max_depth=2").json()
    assert window["step"]["step_id"] == root_id
    assert [c["name"] for c in window["children"]] == ["n2", "n3"]
    assert window["total_children"] == 5
    assert window["next_offset"] == 4
    assert [len(c["children"]) for c in window["children"]] == [2, 2]
    last = api.get(f"/api/traces/{trace.id}/node/{root_id}?offset=4&limit=2").json()
    assert last["next_offset"] is None
    assert last["children"][0]["children"] == []
    expanded = api.get(f"/api/traces/{trace.id}/node/{root_id}?expand=true&limit=1").json()
    assert expanded["children"][0]["data"] == {}


def test_get_step_returns_full_data(api, user):
    trace = make_trace(user)
    big = {"output": "x" * 5000, "nested": {"k": [1, 2, 3]}}
    stored = add(trace, step("result", data=big, description="d" * 300))[0]
    body = api.get(f"/api/traces/{trace.id}/steps/{stored.id}").json()
    assert body["data"] == big
    assert body["description"] == "d" * 300
    assert body["data_bytes"] > 5000
    compact = api.get(f"/api/traces/{trace.id}/tree").json()["root_steps"][0]
    assert len(compact["data_preview"]) == 200
    assert len(compact["description"]) == 200


def test_events_after_seq(api, user):
    trace = make_trace(user)
    add(trace, step("goal"), step("goal"), step("goal"))
    body = api.get(f"/api/traces/{trace.id}/events?after_seq=1").json()
    assert [e["seq"] for e in body["events"]] == [2, 3]
    assert body["last_seq"] == 3
    assert body["has_more"] is False
    paged = api.get(f"/api/traces/{trace.id}/events?after_seq=0&limit=2").json()
    assert [e["seq"] for e in paged["events"]] == [1, 2]
    assert paged["has_more"] is True


def test_a_finished_traces_events_end_at_trace_completed_after_late_steps(api, user):
    trace = make_trace(user)
    root = add(trace, step("goal"))[0]
    post(api, f"/api/traces/{trace.id}/complete", {})  # seq 2
    store = get_trace_store()
    store.add_feedback_sync(trace.id, step("feedback", parent=root))  # seq 3: no event

    def page(after_seq: int, limit: int = 100) -> dict:
        url = f"/api/traces/{trace.id}/events?after_seq={after_seq}&limit={limit}"
        return api.get(url).json()

    assert [e["seq"] for e in page(0, limit=1)["events"]] == [1]
    assert page(0, limit=1)["has_more"] is True
    everything = page(0)
    assert [e["event"] for e in everything["events"]] == ["step_added", "trace_completed"]
    assert (everything["last_seq"], everything["has_more"]) == (3, False)
    # A client that pages on from the end is told there is nothing more.
    assert page(2) == {"events": [], "last_seq": 3, "has_more": False}


# --- query counts -------------------------------------------------------------------------------

# Token auth costs one query (the token with its user), plus one for the trace.


def _warm(client):
    """The first request of a token also stamps last_used_at; measure the steady state."""
    client.get("/api/traces?limit=1")


@pytest.mark.parametrize("size", [(1, 2), (3, 4)])
def test_tree_endpoint_uses_constant_queries(user, size, django_assert_num_queries):
    trace = make_trace(user)
    build_tree(trace, depth=size[0], fanout=size[1])
    client = token_client(user)
    _warm(client)
    with django_assert_num_queries(3):
        assert client.get(f"/api/traces/{trace.id}/tree").status_code == HTTPStatus.OK
    with django_assert_num_queries(3):
        assert client.get(f"/api/traces/{trace.id}/tree?view=full").status_code == HTTPStatus.OK


# --- kept trees ---------------------------------------------------------------------------------


@pytest.fixture
def keep_small_trees(settings):
    """Trees of 3 steps and more are kept once their trace is finished."""
    settings.TRACE_TREE_CACHE_MIN_STEPS = 3


def _finished_tree(user, *, depth: int = 2, fanout: int = 2):
    trace = make_trace(user)
    steps = build_tree(trace, depth=depth, fanout=fanout)
    get_trace_store().complete_trace_sync(trace.id)
    return trace, steps


def test_a_finished_traces_tree_is_read_once_then_kept(
    user, keep_small_trees, django_assert_num_queries
):
    trace, _ = _finished_tree(user)
    client = token_client(user)
    _warm(client)
    with django_assert_num_queries(3):  # the token, the trace, its steps
        first = client.get(f"/api/traces/{trace.id}/tree")
    with django_assert_num_queries(2):  # the token, the trace: the tree is kept
        again = client.get(f"/api/traces/{trace.id}/tree")
    assert again.status_code == HTTPStatus.OK
    assert again.json() == first.json()
    assert again.json()["root_steps"][0]["subtree_steps"] == 7
    assert again.json()["trace"]["status"] == "completed"


def test_a_kept_tree_is_not_read_after_the_trace_changes(
    user, keep_small_trees, django_assert_num_queries
):
    trace, steps = _finished_tree(user)
    client = token_client(user)
    _warm(client)
    client.get(f"/api/traces/{trace.id}/tree")
    # A late step into the finished trace (feedback here; OTLP spans that end after the root).
    get_trace_store().add_feedback_sync(trace.id, step("feedback", parent=steps[0], name="late"))
    with django_assert_num_queries(3):
        body = client.get(f"/api/traces/{trace.id}/tree").json()
    (root,) = body["root_steps"]
    assert root["subtree_steps"] == 8
    assert [child["name"] for child in root["children"]] == ["n0", "n1", "late"]
    assert body["trace"]["total_steps"] == 8


def test_a_kept_tree_is_not_read_after_a_change_to_a_finished_trace(user, keep_small_trees):
    """A finished trace's steps still change (OTLP log records that come after the root span
    ended join their span's step): the change moves ``last_seq`` without an event."""
    trace, steps = _finished_tree(user)
    client = token_client(user)
    assert (
        client.get(f"/api/traces/{trace.id}/tree").json()["root_steps"][0]["data_preview"] == "{}"
    )
    trace.refresh_from_db()
    get_trace_store().add_to_traces_sync(
        [TraceSteps(trace=trace, steps=[], updates={steps[0].id: {"data": {"log": "late"}}})]
    )
    body = client.get(f"/api/traces/{trace.id}/tree").json()
    assert body["root_steps"][0]["data_preview"] == '{"log":"late"}'
    assert body["trace"]["last_seq"] == trace.last_seq + 1
    assert not TraceEvent.objects.filter(trace=trace, seq__gt=trace.last_seq).exists()


def test_running_and_small_traces_are_read_every_time(
    user, keep_small_trees, settings, django_assert_num_queries
):
    running = make_trace(user)
    build_tree(running, depth=2, fanout=2)
    client = token_client(user)
    _warm(client)
    for _ in range(2):
        with django_assert_num_queries(3):
            client.get(f"/api/traces/{running.id}/tree")
    add(running, step("thought", name="next"))
    assert len(client.get(f"/api/traces/{running.id}/tree").json()["root_steps"]) == 2

    settings.TRACE_TREE_CACHE_MIN_STEPS = 8
    small, _ = _finished_tree(user)  # 7 steps
    for _ in range(2):
        with django_assert_num_queries(3):
            client.get(f"/api/traces/{small.id}/tree")


def test_kept_trees_are_per_depth_and_the_full_view_is_never_kept(
    user, keep_small_trees, django_assert_num_queries
):
    trace, _ = _finished_tree(user)
    client = token_client(user)
    _warm(client)
    whole = client.get(f"/api/traces/{trace.id}/tree").json()
    shallow = client.get(f"/api/traces/{trace.id}/tree?max_depth=1").json()
    assert len(whole["root_steps"][0]["children"]) == 2
    assert shallow["root_steps"][0]["children"] == []
    assert client.get(f"/api/traces/{trace.id}/tree?max_depth=1").json() == shallow
    for _ in range(2):
        with django_assert_num_queries(3):
            full = client.get(f"/api/traces/{trace.id}/tree?view=full").json()
        assert full["root_steps"][0]["data"] == {}


def test_a_kept_tree_is_still_only_its_owners(user, other_user, keep_small_trees):
    trace, _ = _finished_tree(user)
    assert token_client(user).get(f"/api/traces/{trace.id}/tree").status_code == HTTPStatus.OK
    response = token_client(other_user).get(f"/api/traces/{trace.id}/tree")
    assert_error(response, HTTPStatus.NOT_FOUND, "trace_not_found")


def test_a_trace_stored_again_under_its_id_is_not_read_from_the_old_ones_kept_tree(
    user, keep_small_trees
):
    """A deleted trace sent again with the same id (OTLP trace ids are the sender's) and as
    many events: its own tree, not the one kept for the trace before it."""
    store = get_trace_store()
    trace_id = uuid.uuid4()
    client = token_client(user)

    def stored(names):
        store.open_trace_sync(
            Trace(id=trace_id, user=user, task="t"), [step("goal", name=n) for n in names]
        )
        store.complete_trace_sync(trace_id)
        return client.get(f"/api/traces/{trace_id}/tree").json()

    before = stored(["a", "b", "c"])
    Trace.objects.filter(pk=trace_id).delete()
    after = stored(["x", "y", "z"])
    assert after["trace"]["last_seq"] == before["trace"]["last_seq"]
    assert [root["name"] for root in after["root_steps"]] == ["x", "y", "z"]


@pytest.mark.parametrize("size", [(1, 2), (3, 4)])
def test_events_endpoint_uses_constant_queries(user, size, django_assert_num_queries):
    trace = make_trace(user)
    build_tree(trace, depth=size[0], fanout=size[1])
    post(token_client(user), f"/api/traces/{trace.id}/complete", {})
    client = token_client(user)
    _warm(client)
    # The token, the trace, its logged events, its steps (each its own step_added).
    with django_assert_num_queries(4):
        body = client.get(f"/api/traces/{trace.id}/events?after_seq=0").json()
    assert body["events"][-1]["event"] == "trace_completed"
    assert body["has_more"] is False


@pytest.mark.parametrize("traces", [1, 8])
def test_list_endpoint_uses_constant_queries(user, traces, django_assert_num_queries):
    for _ in range(traces):
        make_trace(user)
    client = token_client(user)
    _warm(client)
    with django_assert_num_queries(2):
        assert len(client.get("/api/traces").json()["traces"]) == traces


@pytest.mark.parametrize("depth", [1, 3])
def test_node_endpoint_uses_one_query_per_level(user, depth, django_assert_num_queries):
    trace = make_trace(user)
    build_tree(trace, depth=4, fanout=3)
    root = Step.objects.get(trace=trace, depth=0)
    client = token_client(user)
    _warm(client)
    # auth + the node (with the access check) + one per level
    with django_assert_num_queries(2 + depth):
        body = client.get(f"/api/traces/{trace.id}/node/{root.id}?max_depth={depth}").json()
    assert len(body["children"]) == 3
    # auth + the trace's root count (with the access check) + one per level
    with django_assert_num_queries(2 + depth):
        client.get(f"/api/traces/{trace.id}/node/root?max_depth={depth}")


def test_event_log_has_one_event_per_change_and_stores_no_copy_of_a_step(api, user):
    trace = make_trace(user)
    root = add(trace, step("goal"))[0]
    patch(api, f"/api/traces/{trace.id}/steps/{root.id}", {"tokens": 3})
    post(api, f"/api/traces/{trace.id}/complete", {})
    log = api.get(f"/api/traces/{trace.id}/events?after_seq=0").json()
    assert [(e["event"], e["seq"]) for e in log["events"]] == [
        ("step_added", 1),
        ("step_updated", 2),
        ("trace_completed", 3),
    ]
    # The step is its own step_added: read from the steps, with the totals as they stand.
    assert log["events"][0]["step"]["tokens"] == 3
    assert log["events"][0]["totals"]["total_tokens"] == 3
    assert list(TraceEvent.objects.filter(trace=trace).values_list("event", flat=True)) == [
        "step_updated",
        "trace_completed",
    ]


def test_api_docs_need_a_login(client, user):
    assert client.get("/api/docs").status_code == HTTPStatus.FOUND
    assert client.get("/api/openapi.json").status_code == HTTPStatus.FOUND
    client.force_login(user)
    schema = client.get("/api/openapi.json").json()
    assert "/api/traces/{trace_id}/tree" in schema["paths"]
    assert client.get("/api/docs").status_code == HTTPStatus.OK


def test_api_docs_load_nothing_from_a_cdn(client, user):
    client.force_login(user)
    page = client.get("/api/docs").content.decode()
    assert "cdn" not in page.lower()
    assert "/static/ninja/swagger-ui-bundle.js" in page


@pytest.mark.parametrize("body", [[1], "x", 3, {"task": "t", "unknown_field": 1}])
def test_create_trace_needs_a_json_object_of_known_fields(api, body):
    response = post(api, "/api/traces", body)
    assert_error(response, HTTPStatus.UNPROCESSABLE_ENTITY, "validation_error")


def test_steps_body_must_be_objects(api, user):
    trace = make_trace(user)
    for body in ([1], "goal", [{"step_type": "goal", "sttus": "done"}]):
        response = post(api, f"/api/traces/{trace.id}/steps", body)
        assert_error(response, HTTPStatus.UNPROCESSABLE_ENTITY, "validation_error")
    assert Step.objects.filter(trace=trace).count() == 0


def test_tree_nodes_and_single_steps_share_one_format(api, user):
    """Tree rows are formatted by the database, single steps in Python: they must agree."""
    trace = make_trace(user)
    root = step("goal", cost="0.12345678", description="d" * 250, error="boom")
    add(trace, root, step("thought", parent=root, tokens=3))
    tree_root = api.get(f"/api/traces/{trace.id}/tree").json()["root_steps"][0]
    single = api.get(f"/api/traces/{trace.id}/steps/{root.id}").json()
    event = api.get(f"/api/traces/{trace.id}/events").json()["events"][0]["step"]
    window = api.get(f"/api/traces/{trace.id}/node/{root.id}").json()["step"]
    for key in (
        "step_id",
        "trace_id",
        "parent_id",
        "seq",
        "started_at",
        "finished_at",
        "cost",
        "subtree_cost",
        "subtree_tokens",
        "children_count",
        "data_preview",
    ):
        assert tree_root[key] == single[key] == event[key] == window[key], key
    assert tree_root["started_at"].endswith("Z")
    assert len(tree_root["started_at"]) == len("2026-01-01T00:00:00.000000Z")
    assert tree_root["description"] == event["description"] == "d" * 199 + "…"
    assert single["description"] == "d" * 250


def test_tree_past_the_step_cap_asks_for_the_node_endpoint(api, user, monkeypatch):
    monkeypatch.setattr("traces.api.TREE_MAX_STEPS", 5)
    trace = make_trace(user)
    build_tree(trace, depth=1, fanout=5)
    body = assert_error(
        api.get(f"/api/traces/{trace.id}/tree"),
        HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
        "tree_too_large",
    )
    assert "node endpoint" in body["error"]["message"]
    assert api.get(f"/api/traces/{trace.id}/tree?max_depth=1").status_code == HTTPStatus.OK


@pytest.mark.parametrize("field", ["tokens", "cost", "status", "data"])
def test_nulling_a_required_step_field_is_400(api, user, field):
    trace = make_trace(user)
    root = add(trace, step("goal"))[0]
    response = patch(api, f"/api/traces/{trace.id}/steps/{root.id}", {field: None})
    assert_error(response, HTTPStatus.BAD_REQUEST, "invalid_step")


def test_null_texts_and_data_are_empty(api, user):
    trace = make_trace(user)
    created = post(api, f"/api/traces/{trace.id}/steps", {"step_type": "goal", "data": None})
    step_id = created.json()["steps"][0]["step_id"]
    assert api.get(f"/api/traces/{trace.id}/steps/{step_id}").json()["data"] == {}
    cleared = patch(api, f"/api/traces/{trace.id}/steps/{step_id}", {"error": None, "name": None})
    assert cleared.status_code == HTTPStatus.OK
    assert (cleared.json()["error"], cleared.json()["name"]) == ("", "")


def test_the_node_endpoint_reads_the_browsers_window_by_default(api, user):
    from traces.selectors import CHILD_WINDOW

    trace = make_trace(user)
    root = step("goal")
    add(trace, root, *[step("thought", parent=root) for _ in range(CHILD_WINDOW + 10)])

    body = api.get(f"/api/traces/{trace.id}/node/{root.id}").json()

    assert len(body["children"]) == CHILD_WINDOW
    assert body["next_offset"] == CHILD_WINDOW
