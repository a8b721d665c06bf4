"""A trigram index on the trace's task, for the trace list's search (``task__icontains``:
``UPPER(task) LIKE UPPER('%q%')``), on PostgreSQL.

Without it, a search reads every trace the viewer may see: at a million traces, 0.2-0.5 s for
a rare word or one no task holds, and the list's poll for new traces asks the same every 5 s;
with it, 20-30 ms the list, 15-20 ms the poll (benchmarks/README.md, ``trace_list.py``).

It is not in ``Trace.Meta.indexes``: SQLite, the embedded default, has no trigram index, so it
is made here only where the database is PostgreSQL (``pg_trgm`` is a trusted extension: the
database's owner may create it; a user that may not is warned and goes on without the index),
and without locking the table (``CONCURRENTLY``: OTLP keeps writing traces meanwhile).
"""

import logging

from django.db import DatabaseError, migrations

INDEX = "trace_task_trgm"
logger = logging.getLogger(__name__)


def create(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    try:
        schema_editor.execute("CREATE EXTENSION IF NOT EXISTS pg_trgm")
    except DatabaseError as exc:
        # A user that may not create extensions (nor was given pg_trgm by its DBA): the search
        # works without the index, only slower; a speed-up must not stop a deploy.
        logger.warning(
            "traces 0013: no trigram index on the task, the trace list's search reads every "
            "trace (%s). Have the database's owner run CREATE EXTENSION pg_trgm, then "
            "migrate traces 0012 and migrate again.",
            str(exc).strip(),
        )
        return
    schema_editor.execute(
        f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {INDEX} ON traces_trace "
        "USING gin (UPPER(task) gin_trgm_ops)"
    )


def drop(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {INDEX}")


class Migration(migrations.Migration):
    atomic = False  # CREATE INDEX CONCURRENTLY runs outside a transaction

    dependencies = [
        ("traces", "0012_step_top"),
    ]

    operations = [migrations.RunPython(create, drop, elidable=False)]
