"""Database work of long-lived tasks, with the connection back in the pool while they wait.

A run spends seconds on each model call and an SSE stream minutes waiting for events; holding
a pooled connection all that time would let 20 streams (``DATABASE_POOL_MAX``) exhaust a
worker's pool. So their database work goes through ``in_thread``, which gives the thread's
connection back after each call.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import ParamSpec, TypeVar

from asgiref.sync import sync_to_async
from django.db import connection

P = ParamSpec("P")
T = TypeVar("T")


def release_connection() -> None:
    """Give this thread's database connection back to the pool; the thread's next query
    takes one again. A no-op without a pool (SQLite, ``DATABASE_POOL=0``: a persistent
    connection is kept) and inside a transaction (the connection is in use)."""
    if connection.in_atomic_block or not connection.settings_dict.get("OPTIONS", {}).get("pool"):
        return
    connection.close()


def _released(function: Callable[P, T]) -> Callable[P, T]:
    @functools.wraps(function)
    def call(*args: P.args, **kwargs: P.kwargs) -> T:
        try:
            return function(*args, **kwargs)
        finally:
            release_connection()

    return call


async def in_thread(function: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """``function(*args, **kwargs)`` through ``sync_to_async`` (the caller's thread for
    database work), the connection back in the pool after it."""
    return await sync_to_async(_released(function))(*args, **kwargs)
