"""Database helpers for the hot write paths: a running agent's steps and events.

Every step a running agent records goes through a handful of statements (lock the trace, look
up parents, insert steps and events, update counters). Compiling them through the ORM each time
cost Django several times what running them costs the database, so they are compiled once:
SELECTs from a queryset built with placeholder values (``PLACEHOLDER_*``), which ``bind`` swaps
for the real ones; INSERTs and UPDATEs as plain SQL over the model's own column names, with
values prepared by the model's fields (``get_db_prep_save``), exactly as the ORM would, once
made storable (``devassist.storable``: a program's NUL, lone surrogates, integers past 64 bits
are replaced, never refused). The same SQL runs on PostgreSQL and SQLite. ``skip_flush_wait``
lets such a transaction commit without waiting for the disk.
"""

from __future__ import annotations

import dataclasses
import functools
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, ParamSpec, TypeVar, cast

from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connection, connections, models
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import QuerySet

from devassist.storable import REPLACED_FLAG, storable_json, storable_text

M = TypeVar("M", bound=models.Model)
P = ParamSpec("P")
T = TypeVar("T")

#: Stand-ins a cached query is built with; ``bind`` replaces them with real values.
PLACEHOLDER_TRACE = uuid.UUID("00000000-0000-4000-8000-0000000a11ce")
PLACEHOLDER_STEP = uuid.UUID("00000000-0000-4000-8000-000000000b0b")
PLACEHOLDER_USER = -424_242


def placeholder_ids(count: int) -> list[uuid.UUID]:
    """``count`` distinct UUID stand-ins (for an ``IN`` list)."""
    return [uuid.UUID(int=0x5EED_0000_0000_4000_8000_0000_0000_0000 + n) for n in range(count)]


def _connection() -> BaseDatabaseWrapper:
    # The connection itself, not the ``django.db.connection`` proxy: every attribute read
    # through the proxy is a thread-local lookup, and a statement's values make hundreds.
    return connections[DEFAULT_DB_ALIAS]


def bind(params: Sequence[Any], binding: dict[Any, Any]) -> list[Any]:
    """``params`` of a cached statement with each stand-in replaced by its value in
    ``binding``, in the form the database got it (a UUID, or its hex digits on SQLite)."""
    values: dict[Any, Any] = {}
    for placeholder, value in binding.items():
        values[placeholder] = value
        if isinstance(placeholder, uuid.UUID):
            values[placeholder.hex] = value.hex if isinstance(value, uuid.UUID) else value
            values[str(placeholder)] = str(value)
    return [values.get(p, p) if isinstance(p, (uuid.UUID, str, int)) else p for p in params]


Converter = Callable[[Any, Any, Any], Any]


@dataclass(frozen=True)
class CompiledSelect:
    """A SELECT of model rows: its SQL, parameters with stand-ins, the attribute name of each
    column, and the ORM's converters per column (database value → Python value)."""

    sql: str
    params: tuple[Any, ...]
    attnames: tuple[str, ...]
    converters: tuple[tuple[int, tuple[Converter, ...], Any], ...]

    @classmethod
    def of(cls, queryset: QuerySet[Any]) -> CompiledSelect:
        """Compile a model queryset (no ``values()``, no annotations) built with stand-ins."""
        compiler = queryset.query.get_compiler(using=queryset.db)
        sql, params = compiler.as_sql()
        columns = [column for column, _, _ in compiler.select]
        attnames = tuple(column.target.attname for column in columns)
        converters = tuple(
            (index, tuple(functions), expression)
            for index, (functions, expression) in compiler.get_converters(columns).items()
        )
        return cls(sql=sql, params=tuple(params), attnames=attnames, converters=converters)

    def rows(self, binding: dict[Any, Any]) -> list[list[Any]]:
        connection = _connection()
        with connection.cursor() as cursor:
            cursor.execute(self.sql, bind(self.params, binding))
            # Statements sent before the SELECT in the same string (``prefixed``) give no rows.
            while cursor.description is None and cursor.nextset():
                pass
            rows = [list(row) for row in cursor.fetchall()]
        for row in rows:
            for index, functions, expression in self.converters:
                value = row[index]
                for function in functions:
                    value = function(value, expression, connection)
                row[index] = value
        return rows

    def prefixed(self, statement: str) -> CompiledSelect:
        """The same SELECT sent after ``statement`` (plain SQL without parameters) in one
        round trip; PostgreSQL only, whose client-side-binding cursors take several
        statements at once."""
        return dataclasses.replace(self, sql=f"{statement}; {self.sql}")

    def instances(self, model: type[M], binding: dict[Any, Any]) -> list[M]:
        return [model.from_db(DEFAULT_DB_ALIAS, self.attnames, row) for row in self.rows(binding)]


@lru_cache(maxsize=128)
def _concrete(
    model: type[models.Model], names: tuple[str, ...] | None
) -> tuple[models.Field[Any, Any], ...]:
    """The model's stored fields (an auto primary key left out), or those of ``names``."""
    fields = [f for f in model._meta.concrete_fields if not isinstance(f, models.AutoField)]
    if names is not None:
        fields = [f for f in fields if f.name in names or f.attname in names]
    return tuple(fields)


def _column(field: models.Field[Any, Any] | None) -> str:
    # Concrete fields always have a column; the stubs allow None for the others.
    return cast(str, getattr(field, "column", None))


@lru_cache(maxsize=64)
def _insert_sql(vendor: str, model: type[models.Model], rows: int, skip_conflicts: bool) -> str:
    qn = _connection().ops.quote_name
    columns = ", ".join(qn(_column(f)) for f in _concrete(model, None))
    row = "(" + ", ".join(["%s"] * len(_concrete(model, None))) + ")"
    # Only quoted names and placeholders are formatted in; values are parameters.
    sql = f"INSERT INTO {qn(model._meta.db_table)} ({columns}) VALUES " + ", ".join(  # noqa: S608
        [row] * rows
    )
    # PostgreSQL and SQLite (3.24+) both take this form.
    return sql + " ON CONFLICT DO NOTHING" if skip_conflicts else sql


@dataclass(frozen=True)
class Statement:
    """One write with its parameters, to run alone or with others (``run``)."""

    sql: str
    params: list[Any]


def insert_statements(
    objs: Sequence[models.Model], *, chunk: int = 200, skip_conflicts: bool = False
) -> list[Statement]:
    """The INSERTs that store new instances of one model, ``chunk`` rows per statement, as
    ``bulk_create`` would store them (``pre_save`` runs, so ``auto_now_add`` fields are set).
    An auto primary key is left to the database and not read back. With ``skip_conflicts``,
    rows that would violate a unique constraint are left out instead of failing the
    statement. The instances count as stored from here on (``_state.adding`` is false)."""
    if not objs:
        return []
    model = type(objs[0])
    fields = _concrete(model, None)
    connection = _connection()
    statements = []
    for start in range(0, len(objs), chunk):
        part = objs[start : start + chunk]
        params: list[Any] = []
        for obj in part:
            params += [
                f.get_db_prep_save(_storable(obj, f, f.pre_save(obj, True)), connection)
                for f in fields
            ]
            obj._state.adding = False
            obj._state.db = DEFAULT_DB_ALIAS
        sql = _insert_sql(connection.vendor, model, len(part), skip_conflicts)
        statements.append(Statement(sql, params))
    return statements


def _storable(obj: models.Model, field: models.Field[Any, Any], value: Any) -> Any:
    """``value`` of ``field`` made storable (``devassist.storable``); a replaced value is set
    on ``obj`` too, so that what is published or answered from it is what was stored. A JSON
    object with replacements gets ``REPLACED_FLAG``."""
    if isinstance(field, models.JSONField):
        stored, replaced = storable_json(value)
        if not replaced:
            return value
        if isinstance(stored, dict):
            stored = {**stored, REPLACED_FLAG: True}
    elif isinstance(value, str):
        stored = storable_text(value)
        if stored is value:
            return value
    else:
        return value
    setattr(obj, field.attname, stored)
    return stored


def update_statement(obj: models.Model, names: Iterable[str]) -> Statement:
    """The UPDATE of the named fields of a stored instance from its attributes
    (``save(update_fields=)`` without the ORM's compilation; ``auto_now`` fields are not
    touched)."""
    key = tuple(sorted(names))
    connection = _connection()
    fields = _concrete(type(obj), key)
    params = [
        f.get_db_prep_save(_storable(obj, f, getattr(obj, f.attname)), connection) for f in fields
    ]
    pk = type(obj)._meta.pk
    params.append(pk.get_db_prep_value(obj.pk, connection))
    return Statement(_update_sql(connection.vendor, type(obj), key), params)


def run(statements: Sequence[Statement]) -> list[int]:
    """Run writes in order and return each one's row count. On PostgreSQL they travel as one
    string in one round trip (client-side binding takes several statements at once; the first
    failing one raises, as it would alone); elsewhere one by one."""
    if not statements:
        return []
    connection = _connection()
    with connection.cursor() as cursor:
        if connection.vendor != "postgresql" or len(statements) == 1:
            counts = []
            for statement in statements:
                cursor.execute(statement.sql, statement.params)
                counts.append(cursor.rowcount)
            return counts
        cursor.execute(
            "; ".join(statement.sql for statement in statements),
            [param for statement in statements for param in statement.params],
        )
        counts = [cursor.rowcount]
        while cursor.nextset():
            counts.append(cursor.rowcount)
        return counts


@lru_cache(maxsize=128)
def _update_sql(vendor: str, model: type[models.Model], names: tuple[str, ...]) -> str:
    qn = _connection().ops.quote_name
    sets = ", ".join(f"{qn(_column(f))} = %s" for f in _concrete(model, names))
    pk = qn(_column(model._meta.pk))
    return f"UPDATE {qn(model._meta.db_table)} SET {sets} WHERE {pk} = %s"  # noqa: S608


def skip_flush_wait() -> list[Statement]:
    """The statement that lets the open transaction commit without waiting for its WAL flush
    to disk, to send first in a ``run`` (or none, when that is off or not PostgreSQL).

    For the high-rate writes of a running agent (steps, trace and run events) when
    ``settings.ASYNC_COMMIT_RUN_WRITES`` is on: PostgreSQL's ``synchronous_commit = off`` for
    this transaction only (``SET LOCAL``). A commit then costs a round trip instead of an
    fsync; a crash of the database server can lose the last fraction of a second of such
    writes (never corrupt them), and the next durable commit (a run's end) flushes all of
    them. Only inside ``transaction.atomic()``: outside a transaction block ``SET LOCAL``
    changes nothing.
    """
    return [Statement(SKIP_FLUSH_WAIT, [])] if flush_wait_skippable() else []


#: The statement behind ``skip_flush_wait``, for callers that send it together with a SELECT
#: (``CompiledSelect.prefixed``).
SKIP_FLUSH_WAIT = "SET LOCAL synchronous_commit TO OFF"


def flush_wait_skippable() -> bool:
    """Whether run writes skip the flush wait here (the setting is on, on PostgreSQL)."""
    return bool(settings.ASYNC_COMMIT_RUN_WRITES) and connection.vendor == "postgresql"


def release_connection() -> None:
    """Give this thread's database connection back to the pool, so that a long-lived task
    (a run waiting for its model, an SSE stream waiting for events) holds none while it
    waits; the thread's next query takes one again (about as cheap as a query). A no-op
    without a pool (SQLite, ``DATABASE_POOL=0``: a persistent connection is kept) and inside
    a transaction (the connection is in use)."""
    connection = _connection()
    if connection.in_atomic_block or not connection.settings_dict.get("OPTIONS", {}).get("pool"):
        return
    connection.close()


def _released(function: Callable[P, T]) -> Callable[P, T]:
    """``function``, then ``release_connection``."""

    @functools.wraps(function)
    def call(*args: P.args, **kwargs: P.kwargs) -> T:
        try:
            return function(*args, **kwargs)
        finally:
            release_connection()

    return call


async def in_thread(function: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """``function(*args, **kwargs)`` through ``sync_to_async`` (the caller's thread for
    database work), the connection back in the pool after it (``release_connection``): for the
    database work of long-lived tasks, such as a run between its model calls."""
    return await sync_to_async(_released(function))(*args, **kwargs)
