"""A step is its own ``step_added`` event: the trace store no longer logs a copy of each new
step, and a replay (``traces.selectors.trace_events_after``) reads the steps beside the logged
events. The copies logged before this would be replayed beside the steps, every step of an
older trace announced twice: they go.

Backwards nothing is written again: the older store's replays then show those traces' steps on
their pages but not in their event log."""

from typing import Any

from django.db import migrations


def drop_logged_step_added(apps: Any, schema_editor: Any) -> None:
    TraceEvent = apps.get_model("traces", "TraceEvent")
    TraceEvent.objects.filter(event="step_added").delete()


class Migration(migrations.Migration):
    dependencies = [
        ("traces", "0005_step_pending_parent"),
    ]

    operations = [
        migrations.RunPython(drop_logged_step_added, migrations.RunPython.noop),
    ]
