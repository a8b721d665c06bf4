"""Database helpers shared by the apps' write paths."""

from __future__ import annotations

from django.conf import settings
from django.db import connection


def commit_without_flush_wait() -> None:
    """Let the open transaction commit without waiting for its WAL flush to disk.

    For the high-rate writes of a running agent (steps, trace and run events) when
    ``settings.ASYNC_COMMIT_RUN_WRITES`` is on: PostgreSQL's ``synchronous_commit = off`` for
    this transaction only (``SET LOCAL``). A commit then costs a round trip instead of an
    fsync; a crash of the database server can lose the last fraction of a second of such
    writes (never corrupt them), and the next durable commit (a run's end) flushes all of
    them. A no-op on other databases. Call it inside ``transaction.atomic()``: outside a
    transaction block ``SET LOCAL`` changes nothing.
    """
    if settings.ASYNC_COMMIT_RUN_WRITES and connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SET LOCAL synchronous_commit TO OFF")
