"""traces 0006: the ``step_added`` copies the store logged before a step became its own event
go, so that a replay of an older trace announces each step once."""

from __future__ import annotations

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from tests.traces.factories import add, make_trace, step
from traces.models import TraceEvent
from traces.projections import step_dict, trace_totals
from traces.selectors import trace_events_after

BEFORE = [("traces", "0005_step_pending_parent")]
AFTER = [("traces", "0006_step_added_is_the_step")]


def migrate(targets: list[tuple[str, str]] | None = None) -> None:
    """Migrate to ``targets``, or to the latest migrations (the tests after this one use the
    current models: left at 0006, the tables of later migrations were missing for them)."""
    executor = MigrationExecutor(connection)
    executor.migrate(targets or executor.loader.graph.leaf_nodes())


@pytest.mark.django_db(transaction=True)
def test_the_logged_copies_of_step_added_go_and_a_replay_announces_each_step_once(user):
    trace = make_trace(user)
    goal, thought = add(trace, step("goal"), step("thought", tokens=5))
    add(trace, step("action", parent=goal))
    trace.refresh_from_db()
    # What the store logged before: a step_added row per step, the step's projection inside.
    TraceEvent.objects.bulk_create(
        TraceEvent(
            trace=trace,
            seq=s.seq,
            event="step_added",
            payload={"step": step_dict(s), "totals": trace_totals(trace)},
        )
        for s in (goal, thought)
    )
    assert [e["seq"] for e in trace_events_after(trace_id=trace.id, after_seq=0)] == [1, 1, 2, 2, 3]

    try:
        migrate(BEFORE)
        migrate(AFTER)
    finally:
        migrate()

    assert not TraceEvent.objects.filter(trace=trace, event="step_added").exists()
    replay = trace_events_after(trace_id=trace.id, after_seq=0)
    assert [(e["event"], e["seq"]) for e in replay] == [
        ("step_added", 1),
        ("step_added", 2),
        ("step_added", 3),
    ]
    assert replay[1]["step"]["tokens"] == 5
