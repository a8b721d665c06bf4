"""``Message.step``: the trace step a message records, as a foreign key.

Messages written before it named their step in ``metadata["step_id"]``; that is copied into the
key where it is the id of an existing step. Anything else (no such key, not a string, not a
UUID, a step since deleted, metadata that is not an object) leaves the key empty; the old
metadata stays as it is.
"""

from __future__ import annotations

import uuid
from typing import Any

import django.db.models.deletion
from django.db import migrations, models

#: Messages read, and updated, per round.
BATCH = 2000


def _step_id(metadata: Any) -> uuid.UUID | None:
    value = metadata.get("step_id") if isinstance(metadata, dict) else None
    if not isinstance(value, str):
        return None
    try:
        return uuid.UUID(value)
    except ValueError:
        return None


def link_messages_to_steps(apps: Any, schema_editor: Any) -> None:
    """Fill ``step`` from ``metadata["step_id"]``, in batches by primary key (each batch read
    whole before it is updated: SQLite does not isolate a cursor from writes to its table)."""
    Message = apps.get_model("chat", "Message")
    Step = apps.get_model("traces", "Step")
    named = Message.objects.filter(metadata__has_key="step_id").only("id", "metadata")
    after: uuid.UUID | None = None
    while True:
        page = named.order_by("pk")
        if after is not None:
            page = page.filter(pk__gt=after)
        batch = list(page[:BATCH])
        if not batch:
            return
        after = batch[-1].pk
        wanted = {message.pk: _step_id(message.metadata) for message in batch}
        existing = set(
            Step.objects.filter(pk__in={s for s in wanted.values() if s is not None}).values_list(
                "pk", flat=True
            )
        )
        linked = []
        for message in batch:
            step_id = wanted[message.pk]
            if step_id in existing:
                message.step_id = step_id
                linked.append(message)
        Message.objects.bulk_update(linked, ["step"], batch_size=BATCH)


class Migration(migrations.Migration):
    dependencies = [
        ("chat", "0002_memorysummary"),
        ("traces", "0002_step_parent_index"),
    ]

    operations = [
        migrations.AddField(
            model_name="message",
            name="step",
            field=models.ForeignKey(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="messages",
                to="traces.step",
            ),
        ),
        migrations.RunPython(link_messages_to_steps, migrations.RunPython.noop),
    ]
