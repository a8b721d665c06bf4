from __future__ import annotations

import threading
import uuid
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.contrib.auth.models import Group
from django.db import connection, transaction

from devassist.exceptions import InvalidInput
from tests.traces.factories import add, build_tree, make_trace, step
from traces import selectors
from traces.exceptions import (
    BatchTooLarge,
    InvalidCursor,
    InvalidParent,
    InvalidStep,
    StepIdConflict,
    StepNotFound,
    TraceNotFound,
    TraceNotRunning,
)
from traces.models import Step, Trace, TraceEvent
from traces.projections import step_dict
from traces.store import OrmTraceStore, TraceSteps, get_trace_store, group_name


def orm_store() -> OrmTraceStore:
    store = get_trace_store()
    assert isinstance(store, OrmTraceStore)
    return store


pytestmark = pytest.mark.django_db


def replay(trace: Trace, limit: int = 1000) -> list[dict]:
    """What a watcher that connects with ``after_seq=0`` is sent."""
    return selectors.trace_events_after(trace_id=trace.id, after_seq=0, limit=limit)


def test_steps_get_consecutive_seq_depth_and_path(user):
    trace = make_trace(user)
    root = step("goal")
    thought = step("thought", parent=root)
    action = step("action", parent=thought)
    result = step("result", parent=action)
    stored = add(trace, root, thought, action, result)

    assert [s.seq for s in stored] == [1, 2, 3, 4]
    assert [s.depth for s in stored] == [0, 1, 2, 3]
    assert stored[3].path == [1, 2, 3]
    trace.refresh_from_db()
    assert trace.last_seq == 4
    assert trace.total_steps == 4
    assert trace.root_count == 1


def test_rollups_are_maintained_on_write_across_batches(user):
    store = orm_store()
    trace = make_trace(user)
    root = step("goal")
    thought = step("thought", parent=root, tokens=100, cost="0.5")
    add(trace, root, thought)
    action = step("action", parent=thought, tokens=5)
    failed = step("result", parent=action, status="failed", error="boom", cost="0.25")
    add(trace, action, failed)

    root_row = Step.objects.get(pk=root.id)
    assert root_row.children_count == 1
    assert root_row.subtree_steps == 4
    assert root_row.subtree_tokens == 105
    assert root_row.subtree_cost == Decimal("0.75")
    assert root_row.subtree_error_count == 1
    thought_row = Step.objects.get(pk=thought.id)
    assert thought_row.subtree_steps == 3
    assert thought_row.subtree_tokens == 105
    trace.refresh_from_db()
    assert (trace.total_tokens, trace.total_cost, trace.error_count) == (105, Decimal("0.75"), 1)

    # An update moves the deltas up the ancestors and into the totals.
    async_to_sync(store.update_step)(
        trace.id, failed.id, {"status": "completed", "error": "", "tokens": 7}
    )
    root_row.refresh_from_db()
    assert root_row.subtree_error_count == 0
    assert root_row.subtree_tokens == 112
    trace.refresh_from_db()
    assert (trace.total_tokens, trace.error_count) == (112, 0)
    failed_row = Step.objects.get(pk=failed.id)
    assert failed_row.subtree_tokens == 7
    assert failed_row.finished_at is not None


def test_rollups_of_a_built_tree_match_a_recount(user):
    trace = make_trace(user)
    build_tree(trace, depth=3, fanout=3)
    root = Step.objects.get(trace=trace, depth=0)
    assert root.subtree_steps == 1 + 3 + 9 + 27
    # Every node below the root is a model call of 1 token: those with model calls under them
    # count theirs there (``_count_once``), so only the 27 leaves count.
    assert root.subtree_tokens == 27
    for node in Step.objects.filter(trace=trace):
        children = Step.objects.filter(parent=node)
        assert node.children_count == children.count()
        assert node.tokens_counted_below == (node.depth > 0 and children.exists())
        own = 0 if node.tokens_counted_below else node.tokens
        assert node.subtree_tokens == own + sum(c.subtree_tokens for c in children)


def test_rejected_batch_writes_nothing(user, other_user):
    trace = make_trace(user)
    other = make_trace(other_user)
    foreign_parent = add(other, step("goal"))[0]
    root = add(trace, step("goal"))[0]
    before = (Step.objects.count(), TraceEvent.objects.count())

    cases = [
        [step("thought", parent=root), step("thought", parent=uuid.uuid4())],
        [step("thought", parent=root), step("thought", parent=foreign_parent.id)],
    ]
    for batch in cases:
        with pytest.raises(InvalidParent):
            add(trace, *batch)
    later = step("action")
    with pytest.raises(InvalidParent, match="must come before"):
        add(trace, step("thought", parent=later.id), later)

    assert (Step.objects.count(), TraceEvent.objects.count()) == before
    trace.refresh_from_db()
    assert trace.last_seq == 1
    assert trace.total_steps == 1


def test_batch_limit_and_duplicate_ids(user, settings):
    trace = make_trace(user)
    settings.TRACE_BATCH_MAX_STEPS = 3
    with pytest.raises(BatchTooLarge):
        add(trace, *[step("goal") for _ in range(4)])
    same = uuid.uuid4()
    with pytest.raises(InvalidStep):
        add(trace, step("goal", id=same), step("goal", id=same))
    assert Step.objects.filter(trace=trace).count() == 0


def test_resending_a_step_id_is_idempotent(user):
    store = orm_store()
    trace = make_trace(user)
    first = step("goal", name="once")
    add(trace, first)
    again = async_to_sync(store.add_steps)(trace.id, [first, step("thought", parent=first)])

    assert again.created == 1
    assert again.steps[0].seq == 1
    assert Step.objects.filter(trace=trace).count() == 2
    trace.refresh_from_db()
    assert trace.total_steps == 2
    assert [e["event"] for e in replay(trace)] == ["step_added", "step_added"]


def test_step_id_from_another_trace_conflicts(user):
    one, two = make_trace(user), make_trace(user)
    shared = step("goal")
    add(one, shared)
    with pytest.raises(StepIdConflict):
        add(two, shared)


def test_completed_trace_takes_no_more_changes(user):
    store = orm_store()
    trace = make_trace(user)
    root = add(trace, step("goal"))[0]
    done = async_to_sync(store.complete_trace)(trace.id, status="failed")
    assert done.status == "failed"
    assert done.completed_at is not None
    assert done.total_duration_ms is not None

    with pytest.raises(TraceNotRunning):
        add(trace, step("thought", parent=root))
    with pytest.raises(TraceNotRunning):
        async_to_sync(store.update_step)(trace.id, root.id, {"name": "late"})
    with pytest.raises(TraceNotRunning):
        async_to_sync(store.complete_trace)(trace.id)


def test_unknown_trace_and_step(user):
    store = orm_store()
    with pytest.raises(TraceNotFound):
        add(Trace(id=uuid.uuid4()), step("goal"))
    trace = make_trace(user)
    with pytest.raises(StepNotFound):
        selectors.step_get(trace_id=trace.id, step_id=uuid.uuid4())
    with pytest.raises(StepNotFound):
        async_to_sync(store.update_step)(trace.id, uuid.uuid4(), {"name": "x"})


def test_update_rejects_unknown_fields_and_empty_changes(user):
    store = orm_store()
    trace = make_trace(user)
    root = add(trace, step("goal"))[0]
    with pytest.raises(InvalidStep):
        async_to_sync(store.update_step)(trace.id, root.id, {"seq": 9})
    with pytest.raises(InvalidStep):
        async_to_sync(store.update_step)(trace.id, root.id, {})


def test_event_log_records_every_change_in_seq_order(user):
    store = orm_store()
    trace = make_trace(user)
    root = step("goal", status="running")
    add(trace, root, step("thought", parent=root))
    async_to_sync(store.update_step)(trace.id, root.id, {"status": "completed", "data": {"a": 1}})
    async_to_sync(store.complete_trace)(trace.id)

    events = selectors.trace_events_after(trace_id=trace.id, after_seq=0)
    assert [e["event"] for e in events] == [
        "step_added",
        "step_added",
        "step_updated",
        "trace_completed",
    ]
    assert [e["seq"] for e in events] == [1, 2, 3, 4]
    assert events[0]["step"]["step_id"] == str(root.id)
    assert events[0]["step"]["seq"] == 1
    assert events[2]["step_id"] == str(root.id)
    assert events[2]["updates"]["status"] == "completed"
    assert events[2]["updates"]["data_preview"] == '{"a":1}'
    assert "data" not in events[2]["updates"]
    assert events[3]["trace"]["status"] == "completed"
    assert events[1]["totals"]["total_steps"] == 2
    assert selectors.trace_events_after(trace_id=trace.id, after_seq=2) == events[2:]


def test_node_windows_nest_children_per_level(user):
    trace = make_trace(user)
    build_tree(trace, depth=3, fanout=4)
    root = Step.objects.get(trace=trace, depth=0)

    window = selectors.node_window(
        trace_id=trace.id, step_id=root.id, max_depth=2, offset=1, limit=2
    )
    assert window.step is not None
    assert window.step["step_id"] == str(root.id)
    assert window.total_children == 4
    assert [c["name"] for c in window.children] == ["n1", "n2"]
    assert window.next_offset == 3
    for child in window.children:
        assert len(child["children"]) == 2  # first `limit` grandchildren
        assert all(g["children"] == [] for g in child["children"])

    trace.refresh_from_db()
    top = selectors.node_window(trace_id=trace.id, step_id=None, max_depth=1)
    assert top.step is None
    assert top.total_children == 1
    assert top.next_offset is None


def test_children_windows_and_tree(user):
    trace = make_trace(user)
    build_tree(trace, depth=2, fanout=3)
    root = Step.objects.get(trace=trace, depth=0)
    children = selectors.children_window(trace_id=trace.id, parent_id=root.id, offset=1, limit=5)
    assert [c["name"] for c in children] == ["n1", "n2"]
    firsts = selectors.first_children(
        trace_id=trace.id, parent_ids=[c["step_id"] for c in children], limit=2
    )
    assert [len(group) for group in firsts.values()] == [2, 2]

    tree = selectors.trace_tree(trace=trace)
    assert len(tree) == 1
    assert len(tree[0]["children"]) == 3
    assert all(len(c["children"]) == 3 for c in tree[0]["children"])
    shallow = selectors.trace_tree(trace=trace, max_depth=2)
    assert all(c["children"] == [] for c in shallow[0]["children"])


def test_list_traces_filters_and_paginates(user, other_user, staff_user):
    made = [make_trace(user, task=f"task {i}", mode="call" if i % 2 else "agent") for i in range(5)]
    make_trace(other_user, task="someone else")

    page = selectors.trace_list_for(viewer=user, limit=2)
    assert [t.id for t in page.traces] == [made[4].id, made[3].id]
    seen = [t.id for t in page.traces]
    while page.next_cursor:
        page = selectors.trace_list_for(viewer=user, limit=2, cursor=page.next_cursor)
        seen += [t.id for t in page.traces]
    assert seen == [t.id for t in reversed(made)]

    calls = selectors.trace_list_for(viewer=user, mode="call")
    assert {t.task for t in calls.traces} == {"task 1", "task 3"}
    found = selectors.trace_list_for(viewer=staff_user, q="ELSE")
    assert [t.task for t in found.traces] == ["someone else"]
    assert selectors.trace_list_for(viewer=user, q="ELSE").traces == []
    with pytest.raises(InvalidCursor):
        selectors.trace_list_for(viewer=user, cursor="!!not-a-cursor")


@pytest.mark.django_db(transaction=True)
def test_seq_is_unique_and_gapless_under_concurrent_writers(user):
    """Several threads, each with its own database connection, write to one trace at once."""
    store = orm_store()
    trace = make_trace(user)
    root = add(trace, step("goal"))[0]
    writers, per_writer = 6, 20
    barrier = threading.Barrier(writers)
    errors: list[BaseException] = []

    def write() -> None:
        try:
            barrier.wait()
            for _ in range(per_writer // 2):
                store.add_steps_sync(
                    trace.id, [step("thought", parent=root.id, tokens=1), step("action")]
                )
        except BaseException as exc:
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=write) for _ in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    assert errors == []
    seqs = list(Step.objects.filter(trace=trace).order_by("seq").values_list("seq", flat=True))
    total = 1 + writers * per_writer
    assert seqs == list(range(1, total + 1))
    assert [event["seq"] for event in replay(trace, limit=total)] == seqs
    trace.refresh_from_db()
    root.refresh_from_db()
    assert trace.total_steps == total
    assert trace.last_seq == total
    assert root.children_count == writers * per_writer // 2
    assert root.subtree_tokens == writers * per_writer // 2


@pytest.mark.django_db(transaction=True)
async def test_concurrent_async_writers_and_broadcast_in_commit_order(user):
    import asyncio

    store = orm_store()
    layer = get_channel_layer()
    channel = await layer.new_channel()
    trace = await store.create_trace(user=user, task="async")
    await layer.group_add(group_name(trace.id), channel)

    await asyncio.gather(*(store.add_step(trace.id, step("thought")) for _ in range(10)))
    await store.complete_trace(trace.id)

    received = [await layer.receive(channel) for _ in range(11)]
    seqs = [m["event"]["seq"] for m in received]
    assert sorted(seqs) == list(range(1, 12))
    assert received[-1]["event"]["event"] == "trace_completed"


@pytest.mark.django_db(transaction=True)
def test_events_are_broadcast_only_once_the_callers_transaction_commits(user, monkeypatch):
    sent: list[tuple[str, dict]] = []

    async def heard(group, message):
        sent.append((group, message))

    monkeypatch.setattr("devassist.follow.broadcast", heard)
    store = orm_store()
    trace = make_trace(user)
    sent.clear()

    with transaction.atomic():
        store.add_steps_sync(trace.id, [step("goal")])
        Group.objects.create(name="the caller's row")
        assert sent == []
    assert [(group, m["event"]["seq"]) for group, m in sent] == [(group_name(trace.id), 1)]

    def fail_after_the_steps() -> None:
        with transaction.atomic():
            store.add_steps_sync(trace.id, [step("goal")])
            raise RuntimeError("the caller fails after the steps")

    with pytest.raises(RuntimeError):
        fail_after_the_steps()
    assert len(sent) == 1
    assert Step.objects.filter(trace=trace).count() == 1
    assert [event["seq"] for event in replay(trace)] == [1]


def test_a_replay_reads_each_steps_step_added_from_the_step_between_the_logged_events(user):
    store = orm_store()
    trace = make_trace(user)
    root = step("goal")
    store.add_steps_sync(trace.id, [root, step("thought", parent=root, tokens=2)])  # 1, 2
    store.update_step_sync(trace.id, root.id, {"name": "renamed"})  # 3
    store.add_steps_sync(trace.id, [step("action", parent=root, tokens=5)])  # 4
    store.complete_trace_sync(trace.id)  # 5
    # Feedback on the finished trace, and a late step: no event, as when they came.
    store.add_feedback_sync(trace.id, step("feedback", parent=root))  # seq 6
    store.add_to_traces_sync(
        [TraceSteps(trace=Trace(id=trace.id), steps=[step("action", parent=root)])]
    )  # seq 7

    everything = replay(trace)
    assert [(e["event"], e["seq"]) for e in everything] == [
        ("step_added", 1),
        ("step_added", 2),
        ("step_updated", 3),
        ("step_added", 4),
        ("trace_completed", 5),
    ]
    first = everything[0]
    assert first["step"]["step_id"] == str(root.id)
    assert first["step"]["name"] == "renamed"  # the step as it stands
    assert first["totals"]["total_tokens"] == 7
    # Pages: by count and up to a seq, each source cut at the same place.
    page = selectors.trace_events_after(trace_id=trace.id, after_seq=1, limit=2)
    assert [e["seq"] for e in page] == [2, 3]
    page = selectors.trace_events_after(trace_id=trace.id, after_seq=2, up_to=4)
    assert [e["seq"] for e in page] == [3, 4]
    assert selectors.trace_events_after(trace_id=trace.id, after_seq=5) == []
    assert selectors.trace_events_after(trace_id=uuid.uuid4(), after_seq=0) == []


def test_a_running_traces_replay_reaches_its_newest_step(user):
    trace = make_trace(user)
    add(trace, step("goal"), step("thought"))
    assert [e["seq"] for e in replay(trace)] == [1, 2]
    assert [e["seq"] for e in selectors.trace_events_after(trace_id=trace.id, after_seq=1)] == [2]


@pytest.mark.django_db(transaction=True)
def test_a_failing_broadcast_is_logged_and_the_write_stands(user, monkeypatch):
    async def broken(group, message):
        raise ConnectionError("the channel layer is down")

    monkeypatch.setattr("devassist.follow.broadcast", broken)
    store = orm_store()
    trace = make_trace(user)

    added = store.add_steps_sync(trace.id, [step("goal")])

    assert added.created == 1
    # Its watchers catch up from the record.
    assert [(e["event"], e["seq"]) for e in replay(trace)] == [("step_added", 1)]


def test_a_rejected_write_leaves_the_callers_transaction_usable(user):
    store = orm_store()
    trace = make_trace(user)
    root = step("goal")

    with transaction.atomic():
        store.add_steps_sync(trace.id, [root])
        with pytest.raises(InvalidParent):
            store.add_steps_sync(trace.id, [step("thought", parent=uuid.uuid4())])
        Group.objects.create(name="after the rejected batch")

    assert list(Group.objects.values_list("name", flat=True)) == ["after the rejected batch"]
    assert Step.objects.filter(trace=trace).count() == 1


def test_a_batch_can_complete_the_trace_or_not_at_all(user):
    store = orm_store()
    trace = make_trace(user)
    root = step("goal", status="running")
    add(trace, root)

    with pytest.raises(InvalidInput):
        store.add_steps_sync(trace.id, [], complete="running")
    with pytest.raises(InvalidParent):
        store.add_steps_sync(trace.id, [step("thought", parent=uuid.uuid4())], complete="completed")
    assert Trace.objects.get(pk=trace.id).status == "running"

    answer = step("response", parent=root)
    store.add_steps_sync(
        trace.id, [answer], updates={root.id: {"status": "completed"}}, complete="completed"
    )
    trace.refresh_from_db()
    assert (trace.status, trace.total_steps, trace.last_seq) == ("completed", 2, 4)
    assert trace.completed_at is not None
    assert trace.total_duration_ms is not None
    events = selectors.trace_events_after(trace_id=trace.id, after_seq=1)
    assert [(e["event"], e["seq"]) for e in events] == [
        ("step_added", 2),
        ("step_updated", 3),
        ("trace_completed", 4),
    ]
    assert events[-1]["trace"]["status"] == "completed"
    with pytest.raises(TraceNotRunning):
        store.add_steps_sync(trace.id, [], complete="failed")


def test_a_batch_can_update_steps_in_the_same_transaction(user):
    store = orm_store()
    trace = make_trace(user)
    root = step("goal", status="running")
    action = step("action", parent=root, status="running")
    add(trace, root, action)
    result = step("result", parent=action, status="failed", error="boom", tokens=4)
    added = async_to_sync(store.add_steps)(
        trace.id, [result], updates={action.id: {"status": "failed", "duration_ms": 12}}
    )
    assert added.created == 1
    events = selectors.trace_events_after(trace_id=trace.id, after_seq=2)
    assert [(e["event"], e["seq"]) for e in events] == [("step_added", 3), ("step_updated", 4)]
    action_row = Step.objects.get(pk=action.id)
    assert (action_row.status, action_row.duration_ms) == ("failed", 12)
    assert action_row.subtree_error_count == 2  # its failed result, then itself
    root_row = Step.objects.get(pk=root.id)
    assert root_row.subtree_error_count == 2
    assert root_row.subtree_tokens == 4
    trace.refresh_from_db()
    assert (trace.last_seq, trace.error_count, trace.total_steps) == (4, 2, 3)
    with pytest.raises(StepNotFound):
        async_to_sync(store.add_steps)(trace.id, [], updates={uuid.uuid4(): {"name": "x"}})
    with pytest.raises(InvalidStep):
        async_to_sync(store.add_steps)(trace.id, [step("goal")], updates={root.id: {"seq": 1}})
    assert Step.objects.filter(trace=trace).count() == 3


@pytest.mark.django_db(transaction=True)
def test_a_batch_is_written_in_the_same_queries_whatever_its_size(user, django_assert_num_queries):
    store = orm_store()
    trace = make_trace(user)
    root = step("goal")
    store.add_steps_sync(trace.id, [root])

    # BEGIN, the lock, the lookup of re-sent ids and parents, the trace's counters, the
    # ancestors' rollups, one INSERT of the steps (their step_added events are not stored),
    # COMMIT
    with django_assert_num_queries(7):
        store.add_steps_sync(trace.id, [step("thought", parent=root)])
    with django_assert_num_queries(7):
        store.add_steps_sync(trace.id, [step("thought", parent=root) for _ in range(500)])

    root_row = Step.objects.get(pk=root.id)
    assert (root_row.children_count, root_row.subtree_steps) == (501, 502)


def test_new_steps_keep_every_value_as_sent(user):
    """New steps go in with PostgreSQL's COPY (text format): the characters that format
    gives a meaning (tab, newline, backslash, its end-of-data line, ``\\N`` for NULL) and
    every kind of field come back as they were sent, in the step and in the trace's read."""
    awkward = "tab\there\nnew line\r\nback\\slash \\N \\.\n\\.\n'quote\" \u4e2d\u6587 \U0001f600"
    started = datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)
    data = {
        "text": awkward,
        "null": None,
        "big": 2**63 - 1,
        "float": 0.1,
        "list": [awkward, {"\\N": "\t"}],
    }
    trace = make_trace(user)
    root = step("goal", name="\\N")
    child = step(
        "action",
        parent=root,
        name=awkward[:200],
        description=awkward,
        error=awkward,
        status="failed",
        data=data,
        started_at=started,
        finished_at=started + timedelta(milliseconds=1500),
        tokens=2**31 - 1,
        cost="12345678.12345678",
    )
    add(trace, root, child)

    stored = Step.objects.get(pk=child.id)
    assert (stored.name, stored.description, stored.error) == (awkward[:200], awkward, awkward)
    assert stored.data == data
    assert (stored.started_at, stored.finished_at, stored.duration_ms) == (
        started,
        started + timedelta(milliseconds=1500),
        1500,
    )
    assert (stored.tokens, stored.cost) == (2**31 - 1, Decimal("12345678.12345678"))
    assert (stored.parent_id, stored.path, stored.pending_parent_id) == (root.id, [1], None)
    assert Step.objects.get(pk=root.id).name == "\\N"
    assert Step.objects.get(pk=root.id).finished_at is None
    (tree_root,) = selectors.trace_tree(trace=trace, full=True)
    assert tree_root["children"][0]["data"] == data
    assert tree_root["children"][0]["description"] == awkward


@pytest.mark.django_db(transaction=True)
def test_the_look_up_leaves_the_data_of_stored_steps_where_it_is(user, django_assert_num_queries):
    """Re-sent steps and steps waiting for a parent are looked up without their data: the
    answer for re-sent steps needs none, and a move keeps the stored data whole."""
    store = orm_store()
    trace = make_trace(user)
    root = step("goal", data={"input": "x" * 5000})
    waiting = step("action", parent=uuid.uuid4(), out_of_order=True, data={"result": "y" * 5000})
    store.add_steps_sync(trace.id, [root, waiting])

    # BEGIN, the lock, the look-up, COMMIT: nothing is new, so nothing is written, and the
    # projections of the stored steps read no data.
    with django_assert_num_queries(4) as queries:
        again = store.add_steps_sync(trace.id, [root, waiting])
        shown = [step_dict(s) for s in again.steps]
    assert not [q["sql"] for q in queries.captured_queries if '"traces_step"."data"' in q["sql"]]
    assert again.created == 0
    assert [s["step_id"] for s in shown] == [str(root.id), str(waiting.id)]
    assert shown[0]["data_preview"].startswith('{"input":"xxx')

    parent = step("thought", id=waiting.parent_id, parent=root, out_of_order=True)
    store.add_steps_sync(trace.id, [parent])
    moved = Step.objects.get(pk=waiting.id)
    assert (moved.parent_id, moved.depth) == (parent.id, 2)
    assert moved.data == {"result": "y" * 5000}


@pytest.mark.django_db(transaction=True)
def test_a_resent_step_under_a_known_parent_is_still_given_back_as_stored(user):
    store = orm_store()
    trace = make_trace(user)
    root = step("goal")
    child = step("thought", parent=root)
    async_to_sync(store.add_steps)(trace.id, [root, child])
    first = Step.objects.get(pk=child.id)

    again = async_to_sync(store.add_steps)(trace.id, [child, step("action", parent=root)])

    assert again.created == 1
    assert again.steps[0].seq == first.seq
    assert Step.objects.filter(trace=trace).count() == 3
    trace.refresh_from_db()
    assert trace.total_steps == 3


def test_a_step_is_added_at_most_max_step_depth_levels_down(user):
    """Paths grow with the square of the depth: a step deeper than ``MAX_STEP_DEPTH`` is
    refused, and a waiting step whose parent arrives that deep stays waiting."""
    from traces.store import MAX_STEP_DEPTH

    trace = make_trace(user)
    chain = [step("thought")]
    for _ in range(MAX_STEP_DEPTH - 1):
        chain.append(step("thought", parent=chain[-1]))
    add(trace, *chain)
    waiting = step("action", parent=uuid.uuid4(), out_of_order=True)
    add(trace, waiting)
    # Its parent comes at the deepest level a step may have: the waiting one stays waiting.
    deepest = step("thought", id=waiting.parent_id, parent=chain[-1], out_of_order=True)
    add(trace, deepest)
    assert Step.objects.get(pk=deepest.id).depth == MAX_STEP_DEPTH
    stored = Step.objects.get(pk=waiting.id)
    assert (stored.parent_id, stored.pending_parent_id, stored.depth) == (None, deepest.id, 0)

    with pytest.raises(InvalidParent, match=f"at most {MAX_STEP_DEPTH} levels below the top"):
        add(trace, step("thought", parent=deepest))
    trace.refresh_from_db()
    assert trace.total_steps == MAX_STEP_DEPTH + 2
