"""A model call's usage counts once (``traces.store._Write._count_once``) in the traces stored
before 0014 too: a model call (``thought``) whose child model call reports tokens (a cost)
stops counting its own tokens (cost), taken off its rollups, its ancestors' and its trace's
totals, and its flag says so. Backwards, they count again.

The rule is a copy of its day's (a migration keeps it as it was)."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from django.db import migrations
from django.db.models import Exists, F, OuterRef, Q


def _below(step_model: Any, usage: str) -> Exists:
    """Whether a step has a child model call that reports ``usage`` (tokens or cost)."""
    return Exists(
        step_model.objects.filter(
            parent_id=OuterRef("pk"), step_type="thought", **{f"{usage}__gt": 0}
        )
    )


def _move(step_model: Any, trace_model: Any, rows: Any, sign: int) -> None:
    """Add ``sign`` times each row's ``(tokens, cost)`` to its rollups, its ancestors' and its
    trace's totals."""
    for trace_id, seq, path, tokens, cost in rows:
        step_model.objects.filter(trace_id=trace_id, seq__in=[*path, seq]).update(
            subtree_tokens=F("subtree_tokens") + sign * tokens,
            subtree_cost=F("subtree_cost") + sign * cost,
        )
        trace_model.objects.filter(pk=trace_id).update(
            total_tokens=F("total_tokens") + sign * tokens,
            total_cost=F("total_cost") + sign * cost,
        )


FIELDS = ("pk", "trace_id", "seq", "path", "tokens", "cost")
FLAGS = ("tokens_counted_below", "cost_counted_below")


def count_once(apps: Any, schema_editor: Any) -> None:
    step_model = apps.get_model("traces", "Step")
    trace_model = apps.get_model("traces", "Trace")
    calls = step_model.objects.filter(step_type="thought").annotate(
        tokens_below=_below(step_model, "tokens"), cost_below=_below(step_model, "cost")
    )
    found = calls.filter(
        Q(tokens__gt=0, tokens_below=True, tokens_counted_below=False)
        | Q(cost__gt=0, cost_below=True, cost_counted_below=False)
    )
    rows = []
    for step in list(found.values(*FIELDS, *FLAGS, "tokens_below", "cost_below")):
        # What the step counts of what a call under it reports too (none when its flag says
        # the store took it off already).
        tokens = step["tokens"] if step["tokens_below"] and not step[FLAGS[0]] else 0
        cost = step["cost"] if step["cost_below"] and not step[FLAGS[1]] else Decimal(0)
        rows.append((step["trace_id"], step["seq"], step["path"], tokens, cost))
        step_model.objects.filter(pk=step["pk"]).update(
            tokens_counted_below=step[FLAGS[0]] or tokens > 0,
            cost_counted_below=step[FLAGS[1]] or cost > 0,
        )
    _move(step_model, trace_model, rows, -1)


def count_again(apps: Any, schema_editor: Any) -> None:
    step_model = apps.get_model("traces", "Step")
    trace_model = apps.get_model("traces", "Trace")
    flagged = step_model.objects.filter(Q(tokens_counted_below=True) | Q(cost_counted_below=True))
    rows = [
        (
            step["trace_id"],
            step["seq"],
            step["path"],
            step["tokens"] if step[FLAGS[0]] else 0,
            step["cost"] if step[FLAGS[1]] else Decimal(0),
        )
        for step in flagged.values(*FIELDS, *FLAGS)
    ]
    flagged.update(tokens_counted_below=False, cost_counted_below=False)
    _move(step_model, trace_model, rows, 1)


class Migration(migrations.Migration):
    dependencies = [
        ("traces", "0014_step_usage_counted_below"),
    ]

    operations = [
        migrations.RunPython(count_once, count_again),
    ]
