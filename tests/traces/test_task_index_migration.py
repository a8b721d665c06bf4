"""traces 0013: the trigram index on the task, made without locking the table, and skipped with
a warning where the database user may not create the extension."""

from __future__ import annotations

import importlib
import logging
from typing import Any

import pytest
from django.db import ProgrammingError, connection
from django.db.migrations.executor import MigrationExecutor

MIGRATION = importlib.import_module("traces.migrations.0013_trace_task_trigram_index")


def index_exists() -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1 FROM pg_indexes WHERE indexname = %s", [MIGRATION.INDEX])
        return cursor.fetchone() is not None


@pytest.mark.django_db(transaction=True)
def test_the_index_goes_back_and_comes_again_with_the_migration() -> None:
    executor = MigrationExecutor(connection)
    assert index_exists()
    try:
        executor.migrate([("traces", "0012_step_top")])
        assert not index_exists()
    finally:
        executor = MigrationExecutor(connection)
        executor.migrate(executor.loader.graph.leaf_nodes())
    assert index_exists()


class Refusing:
    """A schema editor of a user that may not create extensions."""

    def __init__(self) -> None:
        self.connection = connection
        self.executed: list[str] = []

    def execute(self, sql: str, params: Any = ()) -> None:
        self.executed.append(sql)
        if sql.startswith("CREATE EXTENSION"):
            raise ProgrammingError('permission denied to create extension "pg_trgm"')


def test_a_user_that_may_not_create_the_extension_is_warned_and_the_migration_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    editor = Refusing()

    with caplog.at_level(logging.WARNING):
        MIGRATION.create(None, editor)

    assert editor.executed == ["CREATE EXTENSION IF NOT EXISTS pg_trgm"]  # no index attempted
    assert "permission denied" in caplog.text
    assert "CREATE EXTENSION pg_trgm" in caplog.text
