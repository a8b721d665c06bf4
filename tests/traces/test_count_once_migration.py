"""traces 0015: the traces stored before a model call's usage counted once (0014) count it
once too; backwards, they count it twice again."""

from __future__ import annotations

import uuid
from decimal import Decimal
from typing import Any

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from tests.traces.test_otlp_store import new_trace, span, tree_state, write
from traces.models import Step
from traces.store import OrmTraceStore

BEFORE = [("traces", "0014_step_usage_counted_below")]


def migrate(targets: list[tuple[str, str]] | None = None) -> None:
    """Migrate to ``targets``, or to the latest migrations."""
    executor = MigrationExecutor(connection)
    executor.migrate(targets or executor.loader.graph.leaf_nodes())


def usage(trace_id: uuid.UUID) -> dict[str, Any]:
    """Each step's rollups and flags, and the trace's totals."""
    state = tree_state(trace_id)
    return {"steps": {i: s[7:] for i, s in state["steps"].items()}, "totals": state["totals"]}


@pytest.mark.django_db(transaction=True)
def test_older_traces_count_a_model_call_once_and_count_it_twice_backwards(user):
    store = OrmTraceStore()
    nested, plain = new_trace(user), new_trace(user)
    root, outer, inner, tool, late = (uuid.uuid4() for _ in range(5))
    write(
        store,
        nested,
        [
            span(root, None),
            span(outer, root, tokens=30, cost="0.002", step_type="thought"),
            span(inner, outer, tokens=30, step_type="thought"),
            span(tool, root, tokens=5),
        ],
    )
    a, b = uuid.uuid4(), uuid.uuid4()
    write(store, plain, [span(a, None, tokens=7, step_type="thought"), span(b, a, tokens=3)])
    once = {t.id: usage(t.id) for t in (nested, plain)}
    assert once[nested.id]["totals"][2:4] == (35, Decimal("0.002"))

    try:
        migrate(BEFORE)
        # As the store counted them before 0014: the outer call's tokens twice, no flag.
        twice = usage(nested.id)
        assert twice["totals"][2:4] == (65, Decimal("0.002"))
        assert twice["steps"][outer] == (60, Decimal("0.002"), False, False)
        assert twice["steps"][root][:2] == (65, Decimal("0.002"))
        assert usage(plain.id) == once[plain.id]
        # A call the store flagged between 0014 and 0015 is taken off once only.
        write(store, nested, [span(late, root, tokens=4, step_type="thought")])
        write(store, nested, [span(uuid.uuid4(), late, tokens=4, step_type="thought")])
        assert Step.objects.get(pk=late).tokens_counted_below
    finally:
        migrate()

    after = usage(nested.id)
    assert after["totals"][2:4] == (35 + 4, Decimal("0.002"))
    assert after["steps"][outer] == once[nested.id]["steps"][outer]
    assert after["steps"][root][:2] == (39, Decimal("0.002"))
    assert usage(plain.id) == once[plain.id]
