"""Turns form a tree (``Message.parent``, ``Conversation.current``), conversations remember where
their title came from (``title_source``) and are deleted with an undo delay (``deleted_at``).

The turns stored before were one line: each turn's parent becomes the turn before it in
``sequence`` order, so every conversation shows as it did. Titles stored before are taken as
the automatic ones they were.
"""

from __future__ import annotations

from typing import Any

import django.db.models.deletion
from django.db import migrations, models

#: Conversations linked per round.
BATCH = 500


def link_turns(apps: Any, schema_editor: Any) -> None:
    """Each turn's parent: the turn before it in its conversation (turns by ``sequence``)."""
    Conversation = apps.get_model("chat", "Conversation")
    Message = apps.get_model("chat", "Message")
    ids = list(Conversation.objects.order_by("pk").values_list("pk", flat=True))
    for start in range(0, len(ids), BATCH):
        turns = (
            Message.objects.filter(conversation_id__in=ids[start : start + BATCH], kind="turn")
            .order_by("conversation_id", "sequence")
            .only("id", "conversation_id")
        )
        linked = []
        previous: Any = None
        for turn in turns:
            if previous is not None and previous.conversation_id == turn.conversation_id:
                turn.parent_id = previous.id
                linked.append(turn)
            previous = turn
        Message.objects.bulk_update(linked, ["parent"], batch_size=1000)


class Migration(migrations.Migration):
    dependencies = [
        ("chat", "0004_storable_fields"),
    ]

    operations = [
        migrations.AddField(
            model_name="conversation",
            name="current",
            field=models.ForeignKey(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="+",
                to="chat.message",
            ),
        ),
        migrations.AddField(
            model_name="conversation",
            name="deleted_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="conversation",
            name="title_source",
            field=models.CharField(
                choices=[
                    ("auto", "taken from the first message"),
                    ("model", "summarised by the model from the first exchange"),
                    ("user", "set by the user"),
                ],
                default="auto",
                max_length=8,
            ),
        ),
        migrations.AddField(
            model_name="message",
            name="parent",
            field=models.ForeignKey(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="children",
                to="chat.message",
            ),
        ),
        migrations.RunPython(link_turns, migrations.RunPython.noop, elidable=True),
    ]
