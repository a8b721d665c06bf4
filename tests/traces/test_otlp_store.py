"""The trace store's out-of-order writes (what OTLP ingestion relies on): steps sent before
their parents wait at the top level and move under them when they arrive, with rollups, paths
and depths as if the tree had come in order."""

from __future__ import annotations

import functools
import random
import uuid
from decimal import Decimal
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from devassist.exceptions import DomainError
from traces.exceptions import InvalidStep, TraceNotFound
from traces.models import PendingLogEvents, Step, Trace, TraceEvent, TraceStatus
from traces.selectors import trace_tree
from traces.store import AddedSteps, OrmTraceStore, StepCreate, TraceSteps

pytestmark = pytest.mark.django_db


def span(
    step_id: uuid.UUID,
    parent: uuid.UUID | None,
    *,
    tokens: int = 0,
    failed: bool = False,
    cost: str = "0",
    step_type: str = "action",
) -> StepCreate:
    return StepCreate(
        id=step_id,
        parent_id=parent,
        step_type=step_type,
        name=str(step_id)[:8],
        status="failed" if failed else "completed",
        error="boom" if failed else "",
        tokens=tokens,
        cost=Decimal(cost),
        out_of_order=True,
    )


def write(
    store: OrmTraceStore,
    trace: Trace,
    steps: list[StepCreate],
    *,
    check: Any = None,
    complete: str | None = None,
) -> None:
    """Write ``steps`` to ``trace`` as OTLP ingestion does: open it with them when it is not
    stored (``open_traces_sync``), add them to it when it is (``add_to_traces_sync``, which
    ``check`` may refuse); raise what the store refused."""
    item = TraceSteps(trace=trace, steps=steps, complete=complete)
    result: AddedSteps | DomainError | None
    if Trace.objects.filter(pk=trace.id).exists():
        result = store.add_to_traces_sync([item], check=check)[trace.id]
    else:
        result = store.open_traces_sync([item]).get(trace.id)
    if isinstance(result, DomainError):
        raise result


def new_trace(user: Any) -> Trace:
    return Trace(id=uuid.uuid4(), user=user, task="", agent_type="otel", metadata={"otel": {}})


def tree_state(trace_id: uuid.UUID) -> dict[str, Any]:
    """What must not depend on the order the steps came in: each step's place and rollups
    (paths as step ids, since seqs follow the order), and the trace's totals."""
    steps = list(Step.objects.filter(trace_id=trace_id))
    by_seq = {s.seq: s.id for s in steps}
    trace = Trace.objects.get(pk=trace_id)
    return {
        "steps": {
            s.id: (
                s.parent_id,
                s.pending_parent_id,
                s.depth,
                [by_seq[seq] for seq in s.path],
                s.children_count,
                s.subtree_steps,
                s.subtree_error_count,
                s.subtree_tokens,
                s.subtree_cost,
                s.tokens_counted_below,
                s.cost_counted_below,
            )
            for s in steps
        },
        "totals": (
            trace.total_steps,
            trace.root_count,
            trace.total_tokens,
            trace.total_cost,
            trace.error_count,
        ),
    }


def test_a_child_sent_before_its_parent_waits_at_the_top_and_moves_under_it(user):
    store = OrmTraceStore()
    trace = new_trace(user)
    root, child, grandchild = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    write(store, trace, [span(grandchild, child, tokens=5, failed=True)])
    waiting = Step.objects.get(pk=grandchild)
    assert (waiting.parent_id, waiting.pending_parent_id, waiting.depth) == (None, child, 0)
    assert Trace.objects.get(pk=trace.id).root_count == 1

    write(store, trace, [span(child, root, tokens=7)])
    moved = Step.objects.get(pk=grandchild)
    parent = Step.objects.get(pk=child)
    assert (moved.parent_id, moved.pending_parent_id, moved.depth) == (child, None, 1)
    assert moved.path == [parent.seq]
    assert parent.pending_parent_id == root
    assert (parent.children_count, parent.subtree_steps, parent.subtree_tokens) == (1, 2, 12)
    assert parent.subtree_error_count == 1
    event = TraceEvent.objects.filter(trace_id=trace.id).order_by("-seq").first()
    assert event is not None
    assert event.event == "step_updated"
    assert event.payload["step_id"] == str(grandchild)
    assert event.payload["updates"] == {"parent_id": str(child), "depth": 1}

    write(store, trace, [span(root, None)])
    stored = Trace.objects.get(pk=trace.id)
    assert (stored.root_count, stored.total_steps, stored.total_tokens, stored.error_count) == (
        1,
        3,
        12,
        1,
    )
    top = Step.objects.get(pk=root)
    assert (top.subtree_steps, top.subtree_tokens, top.subtree_error_count) == (3, 12, 1)
    assert Step.objects.get(pk=grandchild).path == [top.seq, parent.seq]
    assert Step.objects.get(pk=grandchild).depth == 2
    (tree,) = trace_tree(trace=stored)
    assert tree["step_id"] == str(root)
    assert tree["children"][0]["children"][0]["step_id"] == str(grandchild)


def test_a_batch_in_any_order_is_placed_within_the_batch(user):
    store = OrmTraceStore()
    trace = new_trace(user)
    a, b, c = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    # Leaves first, as a span processor sends them: c under b under a.
    write(store, trace, [span(c, b, tokens=1), span(b, a, tokens=2), span(a, None)])
    state = tree_state(trace.id)
    assert state["steps"][c][:4] == (b, None, 2, [a, b])
    assert state["totals"][:3] == (3, 1, 3)
    assert not TraceEvent.objects.filter(trace_id=trace.id, event="step_updated").exists()


def random_tree(rng: random.Random, size: int) -> list[StepCreate]:
    """``size`` spans: a root, each later one under a random earlier one, some failed, some
    model calls (``thought``), with tokens and costs (or none)."""
    ids = [uuid.uuid4() for _ in range(size)]
    items = [span(ids[0], None, tokens=1, step_type=rng.choice(["action", "thought"]))]
    for index in range(1, size):
        items.append(
            span(
                ids[index],
                ids[rng.randrange(index)],
                tokens=rng.randrange(5),
                failed=rng.random() < 0.2,
                cost=str(Decimal(rng.randrange(100)) / 1000 if rng.random() < 0.7 else 0),
                step_type=rng.choice(["action", "thought"]),
            )
        )
    return items


def counted_once(items: list[StepCreate]) -> dict[uuid.UUID, tuple[int, Decimal]]:
    """Each step's subtree tokens and cost worked out from the whole tree: a model call with
    a model call under it that reports tokens (a cost) counts none of its own."""
    children: dict[uuid.UUID | None, list[StepCreate]] = {}
    for item in items:
        children.setdefault(item.parent_id, []).append(item)

    def thought_children(item: StepCreate) -> list[StepCreate]:
        if item.step_type != "thought":
            return []
        return [c for c in children.get(item.id, []) if c.step_type == "thought"]

    totals: dict[uuid.UUID, tuple[int, Decimal]] = {}

    def total(item: StepCreate) -> tuple[int, Decimal]:
        below = thought_children(item)
        tokens = 0 if any(c.tokens for c in below) else item.tokens
        cost = Decimal(0) if any(c.cost for c in below) else item.cost
        for child in children.get(item.id, []):
            child_tokens, child_cost = total(child)
            tokens, cost = tokens + child_tokens, cost + child_cost
        totals[item.id] = (tokens, cost)
        return tokens, cost

    for root in children.get(None, []):
        total(root)
    return totals


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(seed=st.integers(0, 2**32), size=st.integers(1, 40), batches=st.integers(1, 8))
def test_any_order_and_any_batching_give_the_tree_that_came_in_order(user, seed, size, batches):
    rng = random.Random(seed)
    items = random_tree(rng, size)
    store = OrmTraceStore()
    in_order = new_trace(user)
    write(store, in_order, items)
    # Each model call's usage counted once (``_count_once``), as worked out from the tree.
    expected = counted_once(items)
    stored = {s.id: (s.subtree_tokens, s.subtree_cost) for s in Step.objects.filter(trace=in_order)}
    assert stored == expected
    in_order.refresh_from_db()
    assert (in_order.total_tokens, in_order.total_cost) == expected[items[0].id]

    shuffled = items[:]
    rng.shuffle(shuffled)
    cuts = sorted(rng.sample(range(1, size), min(batches - 1, size - 1))) if size > 1 else []
    pieces = [shuffled[i:j] for i, j in zip([0, *cuts], [*cuts, size], strict=True)]
    out_of_order = new_trace(user)
    remapped = {item.id: uuid.uuid4() for item in items}
    for piece in pieces:
        write(
            store,
            out_of_order,
            [
                StepCreate(
                    **{
                        **item.__dict__,
                        "id": remapped[item.id],
                        "parent_id": remapped.get(item.parent_id) if item.parent_id else None,
                    }
                )
                for item in piece
            ],
        )
    # Re-sending a piece changes nothing.
    write(
        store,
        out_of_order,
        [
            StepCreate(
                **{
                    **item.__dict__,
                    "id": remapped[item.id],
                    "parent_id": remapped.get(item.parent_id) if item.parent_id else None,
                }
            )
            for item in pieces[0]
        ],
    )
    back = {new: old for old, new in remapped.items()}

    def renamed(state: dict[str, Any]) -> dict[str, Any]:
        steps = {
            back[step_id]: (
                back.get(values[0]) if values[0] else None,
                values[1],
                values[2],
                [back[i] for i in values[3]],
                *values[4:],
            )
            for step_id, values in state["steps"].items()
        }
        return {"steps": steps, "totals": state["totals"]}

    assert renamed(tree_state(out_of_order.id)) == tree_state(in_order.id)


def model_calls(outer: uuid.UUID, inner: uuid.UUID, root: uuid.UUID) -> list[StepCreate]:
    """A framework's model call (tokens and a cost) over the same call as the OpenAI
    instrumentation records it (its tokens, no cost), under an agent's root: inner first,
    as spans end."""
    return [
        span(inner, outer, tokens=30, step_type="thought"),
        span(outer, root, tokens=30, cost="0.002", step_type="thought"),
        span(root, None),
    ]


@pytest.mark.parametrize("order", ["children first", "parents first", "one request"])
def test_a_model_call_recorded_twice_counts_its_tokens_once(user, order):
    """A model call over a model call that reports tokens (the same call, recorded by the
    framework and by the OpenAI instrumentation) counts none of its own: the trace has 30
    tokens, not 60. Its cost, which the call under it does not report, still counts."""
    store = OrmTraceStore()
    trace = new_trace(user)
    root, outer, inner = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    steps = model_calls(outer, inner, root)
    if order == "one request":
        write(store, trace, steps)
    else:
        for step in steps if order == "children first" else reversed(steps):
            write(store, trace, [step])
    stored = {s.id: s for s in Step.objects.filter(trace_id=trace.id)}
    # Each step shows what its span said.
    assert (stored[outer].tokens, stored[outer].cost) == (30, Decimal("0.002"))
    assert (stored[outer].tokens_counted_below, stored[outer].cost_counted_below) == (True, False)
    assert (stored[outer].subtree_tokens, stored[outer].subtree_cost) == (30, Decimal("0.002"))
    assert (stored[root].subtree_tokens, stored[root].subtree_cost) == (30, Decimal("0.002"))
    assert tree_state(trace.id)["totals"][2:4] == (30, Decimal("0.002"))


def test_a_model_call_is_uncounted_once_whatever_calls_come_under_it(user):
    """A second call under it (a retry), sent later, takes nothing more off; a tool or a
    model call that reports nothing takes nothing off; its cost goes once a call under it
    reports one."""
    store = OrmTraceStore()
    trace = new_trace(user)
    root, outer, tool, silent, first, retry = (uuid.uuid4() for _ in range(6))
    write(
        store,
        trace,
        [
            span(root, None),
            span(outer, root, tokens=50, cost="0.005", step_type="thought"),
            span(tool, outer, tokens=7),
            span(silent, outer, step_type="thought"),
        ],
    )
    assert tree_state(trace.id)["totals"][2:4] == (57, Decimal("0.005"))
    write(store, trace, [span(first, outer, tokens=20, step_type="thought")])
    write(store, trace, [span(retry, outer, tokens=30, cost="0.003", step_type="thought")])
    # Re-sent: nothing changes.
    write(store, trace, [span(first, outer, tokens=20, step_type="thought")])
    top = Step.objects.get(pk=outer)
    assert (top.tokens_counted_below, top.cost_counted_below) == (True, True)
    assert (top.subtree_tokens, top.subtree_cost) == (7 + 20 + 30, Decimal("0.003"))
    assert tree_state(trace.id)["totals"][2:4] == (57, Decimal("0.003"))


def test_a_model_call_under_a_tool_or_an_agent_counts_its_own(user):
    """Only a model call directly over another is the same call: an agent's (a goal's) or a
    tool's (an action's) model calls each count theirs."""
    store = OrmTraceStore()
    trace = new_trace(user)
    root, tool, call = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    write(
        store,
        trace,
        [
            span(call, tool, tokens=10, step_type="thought"),
            span(tool, root, tokens=5),
            span(root, None, tokens=3, step_type="goal"),
        ],
    )
    assert tree_state(trace.id)["totals"][2] == 18
    assert not Step.objects.filter(tokens_counted_below=True).exists()


def test_a_change_to_an_uncounted_model_calls_tokens_stays_uncounted(user):
    """The API's step update of a model call whose usage a call under it counts: its own
    tokens change, the totals do not."""
    store = OrmTraceStore()
    trace = new_trace(user)
    root, outer, inner = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    write(store, trace, model_calls(outer, inner, root)[::-1])
    store.update_step_sync(trace.id, outer, {"tokens": 45})
    assert Step.objects.get(pk=outer).tokens == 45
    assert tree_state(trace.id)["totals"][2] == 30


def test_a_model_call_changed_in_the_write_that_uncounts_it_is_changed_where_it_stands(user):
    """One write adds a model call under a stored one (which stops counting its tokens),
    brings the step its top waits for (which moves it), and fails the stored call: the
    failure goes up its new path, and its event shows its rollups as stored."""
    store = OrmTraceStore()
    trace = new_trace(user)
    root, top, outer, inner = (uuid.uuid4() for _ in range(4))
    write(store, trace, [span(top, root), span(outer, top, tokens=30, step_type="thought")])
    store.add_to_traces_sync(
        [
            TraceSteps(
                trace=trace,
                steps=[span(inner, outer, tokens=20, step_type="thought"), span(root, None)],
                updates={outer: {"status": "failed", "error": "boom"}},
            )
        ]
    )
    stored = {s.id: s for s in Step.objects.filter(trace_id=trace.id)}
    assert [stored[s].subtree_error_count for s in (root, top, outer)] == [1, 1, 1]
    assert [stored[s].subtree_tokens for s in (root, top, outer)] == [20, 20, 20]
    assert stored[outer].path == [stored[root].seq, stored[top].seq]
    assert tree_state(trace.id)["totals"][2:] == (20, Decimal(0), 1)
    event = TraceEvent.objects.filter(trace_id=trace.id, event="step_updated").latest("seq")
    assert event.payload["step_id"] == str(outer)
    assert event.payload["updates"]["subtree_tokens"] == 20
    assert event.payload["updates"]["subtree_error_count"] == 1


@pytest.mark.parametrize("requests", [2, 1])
def test_steps_whose_parents_form_a_loop_are_stored_and_wait_no_more(user, requests):
    store = OrmTraceStore()
    trace = new_trace(user)
    a, b = uuid.uuid4(), uuid.uuid4()
    if requests == 2:
        write(store, trace, [span(a, b)])
        write(store, trace, [span(b, a)])
    else:
        write(store, trace, [span(a, b), span(b, a)])
    state = tree_state(trace.id)
    # b moved under a; a cannot move under its own child, so it stays a top step, and does
    # not wait for a parent that is stored (the trace page would say it never came).
    assert state["steps"][b][:3] == (a, None, 1)
    assert state["steps"][a][:3] == (None, None, 0)
    assert state["totals"][:2] == (2, 1)


def test_a_finished_trace_takes_late_steps_without_events(user):
    store = OrmTraceStore()
    trace = new_trace(user)
    root, late = uuid.uuid4(), uuid.uuid4()
    write(store, trace, [span(root, None)], complete=TraceStatus.COMPLETED)
    events = TraceEvent.objects.filter(trace_id=trace.id).count()
    assert Trace.objects.get(pk=trace.id).status == TraceStatus.COMPLETED
    write(store, trace, [span(late, root, tokens=3)], complete=TraceStatus.FAILED)
    stored = Trace.objects.get(pk=trace.id)
    assert stored.status == TraceStatus.COMPLETED
    assert (stored.total_steps, stored.total_tokens) == (2, 3)
    assert Step.objects.get(pk=late).parent_id == root
    assert TraceEvent.objects.filter(trace_id=trace.id).count() == events


def test_a_refused_check_writes_nothing(user, other_user):
    store = OrmTraceStore()
    trace = new_trace(user)
    write(store, trace, [span(uuid.uuid4(), None)])
    before = tree_state(trace.id)

    def refuse(stored: Trace) -> None:
        raise TraceNotFound("not yours")

    intruder = Trace(id=trace.id, user=other_user, task="x", agent_type="otel")
    with pytest.raises(TraceNotFound):
        write(store, intruder, [span(uuid.uuid4(), None)], check=refuse)
    assert tree_state(trace.id) == before
    assert Trace.objects.get(pk=trace.id).user_id == user.id


def test_a_batch_with_moves_costs_a_fixed_number_of_queries(user, django_assert_num_queries):
    store = OrmTraceStore()
    trace = new_trace(user)
    root, mid = uuid.uuid4(), uuid.uuid4()
    leaves = [uuid.uuid4() for _ in range(50)]
    write(store, trace, [span(leaf, mid, tokens=1) for leaf in leaves])
    # savepoint, lock, look-up, trace row, steps, the moves, events, release: whatever the
    # number of waiting steps.
    with django_assert_num_queries(8):
        store.add_to_traces_sync(
            [TraceSteps(trace=trace, steps=[span(mid, root), span(root, None)])]
        )
    assert tree_state(trace.id)["totals"][:3] == (52, 1, 50)


def test_the_moves_of_a_long_trace_read_only_the_steps_that_move(user):
    """A step that adopts waiting children moves them (and what hangs under them) by their
    top step, ``path[0]``, through the index on it: the update does not read every step of the
    trace (a late step's request into a 50,000-span trace took 60 ms, 18 ms with the index,
    benchmarks/README.md)."""
    store = OrmTraceStore()
    trace = new_trace(user)
    root, parent = uuid.uuid4(), uuid.uuid4()
    write(store, trace, [span(root, None)])
    for _ in range(6):
        write(store, trace, [span(uuid.uuid4(), root) for _ in range(500)])
    write(store, trace, [span(uuid.uuid4(), parent) for _ in range(5)])
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE traces_step")
    with CaptureQueriesContext(connection) as queries:
        write(store, trace, [span(parent, root)])
    (move,) = [q["sql"] for q in queries if q["sql"].startswith('UPDATE "traces_step" SET "path"')]
    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN {move}")
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert "step_top" in plan, plan
    assert "Seq Scan on traces_step" not in plan, plan
    assert Step.objects.filter(parent_id=parent).count() == 5


def test_an_otlp_request_costs_the_same_queries_whatever_its_size(user, django_assert_num_queries):
    """A request's writes, whatever the number of spans: which of its traces are stored;
    for a new trace one insert of it and one of its steps (in a savepoint); for a stored one
    the lock, the log records waiting for its spans, the look-up of re-sent and waiting
    steps, the trace row, the rollups, one insert of the steps, one of the moved steps'
    events, one update for the moves (savepoints around each)."""
    from tests.traces.otlp_clients import export_request, sdk_spans
    from traces.otlp import Limits, request_spans
    from traces.services import otlp_spans_ingest

    def wide(tracer: Any, fanout: int) -> None:
        with tracer.start_as_current_span("root"):
            for group in range(10):
                with tracer.start_as_current_span(f"group {group}"):
                    for leaf in range(fanout):
                        tracer.start_span(f"leaf {group}.{leaf}").end()

    limits = Limits(
        max_body_bytes=10**8,
        max_spans=10_000,
        max_attributes=100,
        max_events=100,
        max_value_chars=1000,
    )
    for fanout in (5, 50):
        spans = sdk_spans(functools.partial(wide, fanout=fanout))
        leaves = [s for s in spans if s.name.startswith("leaf")]
        parents = [s for s in spans if not s.name.startswith("leaf")]
        # The leaves first (a new trace, opened in a savepoint)...
        with django_assert_num_queries(7):
            outcome = otlp_spans_ingest(
                user=user, batch=request_spans(export_request(leaves), limits=limits)
            )
        assert outcome.accepted == 10 * fanout
        # ...then their parents and the root (which has no input: the log records waiting
        # for it, then the trace's model calls, are looked for to name the trace): ten
        # groups adopt their leaves, the root them.
        with django_assert_num_queries(14):
            outcome = otlp_spans_ingest(
                user=user, batch=request_spans(export_request(parents), limits=limits)
            )
        assert outcome.accepted == 11
        trace = Trace.objects.get(pk=uuid.UUID(int=spans[0].context.trace_id))
        assert (trace.total_steps, trace.root_count, trace.status) == (
            11 + 10 * fanout,
            1,
            TraceStatus.COMPLETED,
        )


def test_a_trace_opened_meanwhile_by_someone_else_is_checked_too(user, other_user, monkeypatch):
    """Spans of a trace that looked new to a request, but that another user's request stored
    meanwhile: the insert that opens it fails, the request looks again, finds it stored and
    refuses it as someone else's, leaving it as it was."""
    import traces.services as services
    from tests.traces.otlp_clients import export_request, sdk_spans
    from traces.otlp import Limits, request_spans

    def two_spans(tracer: Any) -> None:
        with tracer.start_as_current_span("root"):
            tracer.start_span("child").end()

    spans = sdk_spans(two_spans)
    trace_id = uuid.UUID(int=spans[0].context.trace_id)
    services.otlp_spans_ingest(
        user=other_user, batch=request_spans(export_request(spans[:1]), limits=Limits.current())
    )
    before = tree_state(trace_id)
    real = services._stored_ids
    calls = []

    def missing_at_first(trace_ids: list[uuid.UUID]) -> set[uuid.UUID]:
        calls.append(trace_ids)
        return set() if len(calls) == 1 else real(trace_ids)

    monkeypatch.setattr(services, "_stored_ids", missing_at_first)
    outcome = services.otlp_spans_ingest(
        user=user, batch=request_spans(export_request(spans), limits=Limits.current())
    )
    assert (outcome.accepted, outcome.rejected, outcome.only_foreign) == (0, 2, True)
    # Looked new; stored after the insert failed (asked whether to look again, then looked).
    assert len(calls) == 3
    assert tree_state(trace_id) == before
    assert Trace.objects.get(pk=trace_id).user_id == other_user.id


def test_a_request_opens_any_number_of_new_traces_in_the_same_queries(
    user, django_assert_num_queries
):
    """New traces, however many in a request, are opened together: which of them are stored,
    then one insert of the traces, one of their steps and one of their ``trace_completed``
    events (savepoints around them)."""
    from tests.traces.otlp_clients import export_request, sdk_spans
    from traces.otlp import Limits, request_spans
    from traces.services import otlp_spans_ingest

    def requests(tracer: Any, count: int) -> None:
        for index in range(count):
            with tracer.start_as_current_span(f"GET /items/{index}"):
                tracer.start_span("SELECT items").end()

    for count in (2, 40):
        batch = request_spans(
            export_request(sdk_spans(functools.partial(requests, count=count))),
            limits=Limits.current(),
        )
        with django_assert_num_queries(8):
            outcome = otlp_spans_ingest(user=user, batch=batch)
        assert (outcome.accepted, outcome.rejected) == (2 * count, 0)
    assert Trace.objects.filter(status=TraceStatus.COMPLETED, total_steps=2).count() == 42
    assert TraceEvent.objects.filter(event="trace_completed").count() == 42


def test_log_records_open_any_number_of_new_traces_in_the_same_queries(
    user, django_assert_num_queries
):
    """Log records that come before their spans (as exporters send them) open their new
    traces together, however many, and wait in one insert; the spans then find them, and are
    added to the stored traces together: a query for each trace's row, the rest shared."""
    from tests.traces.otlp_clients import export_request, logs_request, sdk_spans_and_logs
    from traces.otlp import Limits, request_spans
    from traces.otlp_logs import request_log_records
    from traces.services import otlp_logs_ingest, otlp_spans_ingest

    def calls(tracer: Any, logger: Any, count: int) -> None:
        from opentelemetry._logs import LogRecord

        for index in range(count):
            with tracer.start_as_current_span(f"chat {index}"):
                logger.emit(LogRecord(body={"content": "hi"}, event_name="gen_ai.user.message"))

    for count in (2, 40):
        spans, records = sdk_spans_and_logs(functools.partial(calls, count=count))
        batch = request_log_records(logs_request(records), limits=Limits.current())
        with django_assert_num_queries(7):
            outcome = otlp_logs_ingest(user=user, batch=batch)
        assert (outcome.accepted, outcome.rejected) == (count, 0)
        # The spans then find their traces stored, and are added to them together: which
        # are stored; the log records waiting for the roots, which came without an input
        # (they name the traces); the lock of the traces, their waiting records, the look-up
        # of re-sent and waiting steps; each trace's row; one insert of the steps, one of
        # the traces' ends; the records that joined the steps deleted (savepoints around
        # them).
        spans_batch = request_spans(export_request(spans), limits=Limits.current())
        with django_assert_num_queries(12 + count):
            outcome = otlp_spans_ingest(user=user, batch=spans_batch)
        assert (outcome.accepted, outcome.rejected) == (count, 0)
    assert not PendingLogEvents.objects.exists()
    steps = Step.objects.filter(trace__user=user)
    assert steps.count() == 42
    assert all(step.data["events"][0]["name"] == "gen_ai.user.message" for step in steps)
    assert set(Trace.objects.values_list("task", "status")) == {("hi", TraceStatus.COMPLETED)}


def test_steps_for_several_stored_traces_go_in_together_each_refused_alone(user, other_user):
    """``add_to_traces_sync``: each trace is checked and written on its own terms: one takes
    its steps, one refused by the check is not prepared, one whose batch is invalid keeps
    what it had, and one that is not stored is left to the caller."""
    store = OrmTraceStore()
    mine, invalid, theirs = new_trace(user), new_trace(user), new_trace(other_user)
    roots = {}
    for trace in (mine, invalid, theirs):
        roots[trace.id] = uuid.uuid4()
        write(store, trace, [span(roots[trace.id], None)])
    before = {trace.id: tree_state(trace.id) for trace in (invalid, theirs)}
    prepared: list[set[uuid.UUID]] = []

    def check(stored: Trace) -> None:
        if stored.user_id != user.id:
            raise TraceNotFound("not yours")

    def prepare(steps: Any) -> Any:
        prepared.append(set(steps))
        return steps

    twice = span(uuid.uuid4(), roots[invalid.id])
    results = store.add_to_traces_sync(
        [
            TraceSteps(trace=mine, steps=[span(uuid.uuid4(), roots[mine.id], tokens=2)]),
            TraceSteps(trace=invalid, steps=[twice, twice]),
            TraceSteps(trace=theirs, steps=[span(uuid.uuid4(), roots[theirs.id])]),
            TraceSteps(trace=new_trace(user), steps=[span(uuid.uuid4(), None)]),
        ],
        check=check,
        prepare=prepare,
    )
    assert prepared == [{mine.id, invalid.id}]
    assert set(results) == {mine.id, invalid.id, theirs.id}
    added = results[mine.id]
    assert isinstance(added, AddedSteps)
    assert added.created == 1
    assert isinstance(results[invalid.id], InvalidStep)
    assert isinstance(results[theirs.id], TraceNotFound)
    assert tree_state(mine.id)["totals"][:3] == (2, 1, 2)
    assert {trace_id: tree_state(trace_id) for trace_id in before} == before
    assert Trace.objects.count() == 3


def test_log_records_for_any_number_of_stored_traces_go_in_together(
    user, django_assert_num_queries
):
    """Log records that come after their spans join their steps, the traces' writes
    together: a query for each trace's row and one for its changed step, the rest shared;
    the traces their roots named by name alone are named after their model calls' questions
    in the same writes."""
    from tests.traces.otlp_clients import export_request, logs_request, sdk_spans_and_logs
    from traces.otlp import Limits, request_spans
    from traces.otlp_logs import request_log_records
    from traces.services import otlp_logs_ingest, otlp_spans_ingest

    def calls(tracer: Any, logger: Any, count: int) -> None:
        from opentelemetry._logs import LogRecord

        for index in range(count):
            with tracer.start_as_current_span(f"agent {index}"):
                with tracer.start_as_current_span(
                    "chat", attributes={"gen_ai.operation.name": "chat"}
                ):
                    logger.emit(
                        LogRecord(body={"content": f"hi {index}"}, event_name="gen_ai.user.message")
                    )
                # A span still running when its record is sent: the record waits for it.
                with tracer.start_as_current_span("tool"):
                    logger.emit(LogRecord(body={"n": index}, event_name="progress"))

    for count in (2, 40):
        spans, records = sdk_spans_and_logs(functools.partial(calls, count=count))
        sent = [span for span in spans if span.name != "tool"]
        otlp_spans_ingest(
            user=user, batch=request_spans(export_request(sent), limits=Limits.current())
        )
        batch = request_log_records(logs_request(records), limits=Limits.current())
        # Which traces are stored; the lock of the traces, the steps the records name, the
        # roots named by name alone; the look-up of those to change; each trace's row and its
        # changed step; one insert of the records that wait (savepoints around them).
        with django_assert_num_queries(10 + 2 * count):
            outcome = otlp_logs_ingest(user=user, batch=batch)
        assert (outcome.accepted, outcome.rejected) == (2 * count, 0)
        assert PendingLogEvents.objects.count() == count
        PendingLogEvents.objects.all().delete()
    chats = Step.objects.filter(name="chat")
    assert chats.count() == 42
    assert all(chat.data["input"][0]["content"].startswith("hi ") for chat in chats)
    assert {chat.trace.task for chat in chats} == {f"hi {index}" for index in range(40)}
