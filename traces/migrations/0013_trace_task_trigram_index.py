"""A trigram index on the trace's task, for the trace list's search (``task__icontains``:
``UPPER(task) LIKE UPPER('%q%')``), on PostgreSQL.

Without it, a search reads every trace the viewer may see: at a million traces, 0.2-0.5 s for
a rare word or one no task holds, and the list's poll for new traces asks the same every 5 s;
with it, 20-30 ms the list, 15-20 ms the poll (benchmarks/README.md, ``trace_list.py``).

It is not in ``Trace.Meta.indexes``: SQLite, the embedded default, has no trigram index, so it
is made here only where the database is PostgreSQL (``pg_trgm`` is a trusted extension: the
database's owner may create it), and without locking the table (``CONCURRENTLY``: OTLP keeps
writing traces meanwhile).
"""

from django.db import migrations

INDEX = "trace_task_trgm"


def create(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    schema_editor.execute("CREATE EXTENSION IF NOT EXISTS pg_trgm")
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
