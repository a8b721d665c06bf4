"""The precompiled statements of devassist.db store and read what the ORM would."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from decimal import Decimal

import pytest
from django.db import IntegrityError, connection, transaction

from devassist import db
from devassist.db import (
    PLACEHOLDER_STEP,
    PLACEHOLDER_TRACE,
    CompiledSelect,
    bind,
)
from tests.traces.factories import make_trace
from traces.models import Step, TraceEvent

pytestmark = pytest.mark.django_db


def new_step(trace, **fields) -> Step:
    values = {
        "trace": trace,
        "seq": 1,
        "step_type": "thought",
        "status": "completed",
        "name": "iteration 1",
        "description": "I think — 我想",
        "data": {"thought": "x", "nested": [1, {"a": None}], "text": "引号\"'"},
        "started_at": datetime(2026, 11, 30, 1, 2, 3, 456789, tzinfo=UTC),
        "tokens": 12,
        "cost": Decimal("0.00012345"),
        "path": [],
    }
    values.update(fields)
    return Step(**values)


def test_insert_stores_every_field_as_the_orm_reads_it(user):
    trace = make_trace(user)
    step = new_step(trace)

    db.run(db.insert_statements([step]))

    stored = Step.objects.get(pk=step.pk)
    assert step._state.adding is False
    for field in Step._meta.concrete_fields:
        assert getattr(stored, field.attname) == getattr(step, field.attname), field.name
    assert stored.created_at is not None


def test_insert_leaves_auto_primary_keys_to_the_database(user):
    trace = make_trace(user)
    events = [TraceEvent(trace=trace, seq=n, event="step_added", payload={"n": n}) for n in (1, 2)]

    db.run(db.insert_statements(events))

    assert list(
        TraceEvent.objects.filter(trace=trace).order_by("seq").values_list("seq", "payload")
    ) == [(1, {"n": 1}), (2, {"n": 2})]


def test_insert_splits_large_batches_into_chunks(user):
    trace = make_trace(user)
    steps = [new_step(trace, id=uuid.uuid4(), seq=n) for n in range(1, 8)]

    db.run(db.insert_statements(steps, chunk=3))

    assert Step.objects.filter(trace=trace).count() == 7


def test_update_writes_only_the_named_fields(user):
    trace = make_trace(user)
    step = new_step(trace)
    db.run(db.insert_statements([step]))
    Step.objects.filter(pk=step.pk).update(name="changed elsewhere")
    step.status = "failed"
    step.data = {"observation": "boom"}
    step.name = "stale"

    db.run([db.update_statement(step, ["status", "data"])])

    stored = Step.objects.get(pk=step.pk)
    assert (stored.status, stored.data, stored.name) == (
        "failed",
        {"observation": "boom"},
        "changed elsewhere",
    )


def test_a_compiled_select_runs_again_with_new_values(user):
    first, second = make_trace(user), make_trace(user)
    steps = [new_step(first), new_step(second, id=uuid.uuid4())]
    db.run(db.insert_statements(steps))
    query = CompiledSelect.of(
        Step.objects.filter(trace_id=PLACEHOLDER_TRACE, pk=PLACEHOLDER_STEP).order_by()
    )

    found = [
        query.instances(Step, {PLACEHOLDER_TRACE: s.trace_id, PLACEHOLDER_STEP: s.id})
        for s in steps
    ]
    crossed = query.instances(Step, {PLACEHOLDER_TRACE: first.id, PLACEHOLDER_STEP: steps[1].id})

    assert [[s.id for s in rows] for rows in found] == [[steps[0].id], [steps[1].id]]
    assert crossed == []
    loaded = found[0][0]
    assert loaded.data == steps[0].data
    assert loaded.cost == Decimal("0.00012345")
    assert loaded.started_at == steps[0].started_at
    assert loaded._state.adding is False


def test_bind_replaces_stand_ins_in_every_form_the_database_takes():
    real = uuid.uuid4()
    params = [PLACEHOLDER_TRACE, PLACEHOLDER_TRACE.hex, str(PLACEHOLDER_TRACE), 7, "other"]

    assert bind(params, {PLACEHOLDER_TRACE: real}) == [real, real.hex, str(real), 7, "other"]


@pytest.mark.django_db(transaction=True)
def test_run_writes_commit_without_waiting_for_the_flush_only_inside_their_transaction(
    settings,
):
    def synchronous_commit() -> str:
        with connection.cursor() as cursor:
            cursor.execute("SHOW synchronous_commit")
            return str(cursor.fetchone()[0])

    with transaction.atomic():
        db.run(db.skip_flush_wait())
        assert synchronous_commit() == "off"
    assert synchronous_commit() == "on"
    settings.ASYNC_COMMIT_RUN_WRITES = False
    with transaction.atomic():
        db.run(db.skip_flush_wait())
        assert synchronous_commit() == "on"


def test_writes_run_together_in_one_round_trip_and_report_each_row_count(
    user, django_assert_num_queries
):
    trace = make_trace(user)
    first, second = new_step(trace), new_step(trace, id=uuid.uuid4(), seq=2)
    statements = [
        *db.insert_statements([first, second]),
        db.update_statement(first, ["name"]),
        *db.insert_statements([new_step(trace, id=first.id, seq=3)], skip_conflicts=True),
    ]

    with django_assert_num_queries(1):
        counts = db.run(statements)

    assert counts == [2, 1, 0]
    assert Step.objects.filter(trace=trace).count() == 2


def test_a_failing_write_among_several_raises_and_the_transaction_keeps_none(user):
    trace = make_trace(user)
    step = new_step(trace)
    db.run(db.insert_statements([step]))
    clash = new_step(trace, id=uuid.uuid4())  # the same seq in the same trace

    with pytest.raises(IntegrityError), transaction.atomic():
        db.run(
            [
                *db.insert_statements([new_step(trace, id=uuid.uuid4(), seq=5)]),
                *db.insert_statements([clash]),
            ]
        )

    assert list(Step.objects.filter(trace=trace).values_list("seq", flat=True)) == [1]
