"""chat 0002: ``Message.step`` filled from the ``metadata["step_id"]`` that messages stored before
it, where that names an existing step, and nothing stored breaking the migration or the panel."""

from __future__ import annotations

import importlib
import uuid
from typing import Any

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from chat.debug import conversation_debug
from chat.models import Message

BEFORE = [("chat", "0002_memorysummary")]


def migrate(targets: list[tuple[str, str]] | None = None) -> Any:
    """Migrate to ``targets`` (the latest migrations when None: the models the tests use);
    returns the apps as they were there."""
    executor = MigrationExecutor(connection)
    targets = targets or executor.loader.graph.leaf_nodes()
    executor.migrate(targets)
    return executor.loader.project_state(targets).apps


@pytest.mark.django_db(transaction=True)
def test_old_metadata_step_ids_become_the_foreign_key_where_the_step_exists(superuser, monkeypatch):
    # Two messages per round: the batches' paging is exercised too.
    monkeypatch.setattr(importlib.import_module("chat.migrations.0003_message_step"), "BATCH", 2)
    old = migrate(BEFORE)
    try:
        trace = old.get_model("traces", "Trace").objects.create(task="q")
        Step = old.get_model("traces", "Step")
        thought = Step.objects.create(trace=trace, seq=1, step_type="thought")
        result = Step.objects.create(trace=trace, seq=2, step_type="result")
        conversation = old.get_model("chat", "Conversation").objects.create(owner_id=superuser.pk)
        metadata: list[Any] = [
            {"step_id": str(thought.id)},
            {"step_id": str(result.id).upper(), "tool_name": "search_docs"},
            {"step_id": str(uuid.uuid4())},  # a step since deleted
            {"step_id": "not a uuid"},
            {"step_id": 42},
            {"step_id": None},
            {"model": "fake-model"},
            ["step_id"],  # not an object (has_key matches an array's element)
            "step_id",
            7,
        ]
        OldMessage = old.get_model("chat", "Message")
        for sequence, value in enumerate(metadata, start=1):
            OldMessage.objects.create(
                conversation=conversation,
                role="assistant",
                kind="step",
                content=f"message {sequence}",
                sequence=sequence,
                metadata=value,
            )
    finally:
        migrate()

    stored = list(Message.objects.filter(conversation_id=conversation.id).order_by("sequence"))
    assert [m.step_id for m in stored] == [thought.id, result.id] + [None] * 8
    assert [m.metadata for m in stored] == metadata  # left as it was
    view = conversation_debug(user=superuser, conversation_id=conversation.id)
    assert [e.summary for g in view.groups for e in g.entries] == [
        f"message {n}" for n in range(1, 11)
    ]
