"""Error counts follow the steps' outcomes (``traces.outcomes``): a step counts as an error when
its outcome is one, so a result whose tool failed counts though its status says completed, and
a cancelled step does not though it carries a message. Rows stored under the earlier rule
(status failed or any error text) have their rollups corrected here: only the steps the two
rules disagree on, each adding its difference to itself, its ancestors and its trace.

Both rules are copies of their day's (a migration keeps them as they were); an ``exit_code``
that is not an integer leaves ``tool_facts`` as the store now leaves it out."""

from __future__ import annotations

from typing import Any

from django.db import migrations
from django.db.models import F, Q

BATCH = 1000


def old_rule() -> Q:
    return Q(status="failed") | ~Q(error="")


def _fact(path: str) -> Q:
    *outer, key = path.split("__")
    lookup = "__".join(["tool_facts", *outer])
    return Q(**{f"{lookup}__has_key": key, f"tool_facts__{path}": True})


def new_rule() -> Q:
    finished = Q(status__in=["completed", "failed"])
    result = Q(step_type="result")
    stopped = (
        _fact("blocked")
        | _fact("safety__blocked")
        | _fact("timed_out")
        | _fact("oom_killed")
    )
    cancelled = _fact("cancelled")
    exit_code = Q(tool_facts__has_key="exit_code") & ~Q(tool_facts__exit_code=0)
    return finished & (
        (result & stopped)
        | (~(result & cancelled) & ((result & exit_code) | ~Q(error="") | Q(status="failed")))
    )


def drop_odd_exit_codes(step_model: Any) -> None:
    odd = step_model.objects.filter(tool_facts__has_key="exit_code").order_by("pk")
    last = None
    while True:
        batch = odd if last is None else odd.filter(pk__gt=last)
        rows = list(batch.only("pk", "tool_facts")[:BATCH])
        if not rows:
            return
        changed = []
        for row in rows:
            code = row.tool_facts.get("exit_code")
            if not isinstance(code, int) or isinstance(code, bool):
                del row.tool_facts["exit_code"]
                changed.append(row)
        step_model.objects.bulk_update(changed, ["tool_facts"])
        last = rows[-1].pk


def correct(apps: Any, schema_editor: Any) -> None:
    step_model = apps.get_model("traces", "Step")
    trace_model = apps.get_model("traces", "Trace")
    drop_odd_exit_codes(step_model)
    now_errors = step_model.objects.filter(new_rule() & ~old_rule())
    no_longer = step_model.objects.filter(old_rule() & ~new_rule())
    for steps, delta in ((now_errors, 1), (no_longer, -1)):
        for trace_id, seq, path in steps.values_list("trace_id", "seq", "path").iterator():
            step_model.objects.filter(trace_id=trace_id, seq__in=[*path, seq]).update(
                subtree_error_count=F("subtree_error_count") + delta
            )
            trace_model.objects.filter(pk=trace_id).update(error_count=F("error_count") + delta)


class Migration(migrations.Migration):
    dependencies = [
        ("traces", "0003_step_tool_facts"),
    ]

    operations = [
        migrations.RunPython(correct, migrations.RunPython.noop),
    ]
