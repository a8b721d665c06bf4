"""``Step.tool_facts``: what a result's outcome reads of its data (``traces.outcomes``), kept
on write; filled here for the results stored before, a batch at a time."""

from __future__ import annotations

from typing import Any

from django.db import migrations, models
from django.db.models import Value

BATCH = 1000
#: The keys ``traces.outcomes.tool_facts`` read when this migration was written (a copy: a
#: migration keeps the rule of its day).
OUTCOME_KEYS = ("blocked", "safety", "timed_out", "oom_killed", "cancelled", "exit_code", "duration_ms")


def tool_facts(data: Any) -> dict[str, Any]:
    if not isinstance(data, dict):
        return {}
    nested = data.get("result")
    facts: dict[str, Any] = {}
    for key in OUTCOME_KEYS:
        value = nested[key] if isinstance(nested, dict) and key in nested else data.get(key)
        if value is not None:
            facts[key] = value
    return facts


def fill(apps: Any, schema_editor: Any) -> None:
    step_model = apps.get_model("traces", "Step")
    results = step_model.objects.filter(step_type="result").order_by("pk")
    last = None
    while True:
        batch = results if last is None else results.filter(pk__gt=last)
        rows = list(batch.only("pk", "data")[:BATCH])
        if not rows:
            return
        for row in rows:
            row.tool_facts = tool_facts(row.data)
        step_model.objects.bulk_update([r for r in rows if r.tool_facts], ["tool_facts"])
        last = rows[-1].pk


class Migration(migrations.Migration):
    dependencies = [
        ("traces", "0002_step_parent_index"),
    ]

    operations = [
        migrations.AddField(
            model_name="step",
            name="tool_facts",
            field=models.JSONField(
                blank=True,
                default=dict,
                db_default=Value({}, output_field=models.JSONField()),
                help_text="What a result's outcome reads of its data (traces.outcomes.tool_facts).",
            ),
        ),
        migrations.RunPython(fill, migrations.RunPython.noop),
    ]
