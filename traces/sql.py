"""SQL expressions that let the database format skeleton columns, so reading 10,000 steps does
not convert 20,000 timestamps and 30,000 UUIDs in Python only to turn them back into text.

Each has a PostgreSQL and a SQLite form (the two databases DevAssist runs on)."""

from __future__ import annotations

from typing import Any

from django.db.models import FloatField, Func, JSONField, TextField, Value
from django.db.models.expressions import Expression


class IsoTimestamp(Func):
    """A timestamp as UTC ISO 8601 text with microseconds and a ``Z``."""

    output_field = TextField()

    def as_postgresql(self, compiler: Any, connection: Any, **extra: Any) -> Any:
        return self.as_sql(
            compiler,
            connection,
            template=(
                "to_char(%(expressions)s AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"')"
            ),
            **extra,
        )

    def as_sqlite(self, compiler: Any, connection: Any, **extra: Any) -> Any:
        # Django keeps UTC timestamps in SQLite as "YYYY-MM-DD HH:MM:SS[.ffffff]". (No
        # strftime: its %-format would meet the %-formatting of SQLite's cursor wrapper.)
        template = (
            "(replace(CASE WHEN length(%(expressions)s) = 19 "
            "THEN %(expressions)s || '.000000' ELSE %(expressions)s END, ' ', 'T') || 'Z')"
        )
        return self.as_sql(compiler, connection, template=template, **extra)


class UuidText(Func):
    """A UUID column as its canonical dashed text."""

    output_field = TextField()

    def as_postgresql(self, compiler: Any, connection: Any, **extra: Any) -> Any:
        return self.as_sql(compiler, connection, template="(%(expressions)s)::text", **extra)

    def as_sqlite(self, compiler: Any, connection: Any, **extra: Any) -> Any:
        # Django keeps UUIDs in SQLite as 32 hex digits.
        template = (
            "(substr(%(expressions)s, 1, 8) || '-' || substr(%(expressions)s, 9, 4) || '-' || "
            "substr(%(expressions)s, 13, 4) || '-' || substr(%(expressions)s, 17, 4) || '-' || "
            "substr(%(expressions)s, 21, 12))"
        )
        return self.as_sql(compiler, connection, template=template, **extra)


class AsFloat(Func):
    """A decimal column as a float (costs only ever leave as JSON numbers)."""

    output_field = FloatField()
    template = "CAST(%(expressions)s AS DOUBLE PRECISION)"

    def as_sqlite(self, compiler: Any, connection: Any, **extra: Any) -> Any:
        return self.as_sql(compiler, connection, template="CAST(%(expressions)s AS REAL)", **extra)


class Prefix(Func):
    """The first ``length`` characters of a text column."""

    function = "SUBSTR"
    output_field = TextField()

    def __init__(self, expression: Expression | str, length: int) -> None:
        super().__init__(expression, Value(1), Value(length))


class PrefixedArray(Func):
    """The JSON array column ``expression`` with the integers ``prefix`` (at least one) put in
    front of its items (a subtree's ``path`` when the subtree moves under a new parent)."""

    output_field = JSONField()

    def __init__(self, prefix: list[int], expression: Expression | str) -> None:
        super().__init__(Value(prefix, output_field=JSONField()), expression)

    def as_postgresql(self, compiler: Any, connection: Any, **extra: Any) -> Any:
        return self.as_sql(
            compiler, connection, template="(%(expressions)s)", arg_joiner=" || ", **extra
        )

    def as_sqlite(self, compiler: Any, connection: Any, **extra: Any) -> Any:
        # SQLite keeps JSON as text and has no array concatenation: the prefix's text without
        # its "]", then the column's items without its "[" (or the prefix, for an empty one).
        prefix_sql, prefix_params = compiler.compile(self.source_expressions[0])
        column_sql, column_params = compiler.compile(self.source_expressions[1])
        sql = (
            f"(CASE WHEN json_array_length({column_sql}) = 0 THEN json({prefix_sql}) "
            f"ELSE json(substr({prefix_sql}, 1, length({prefix_sql}) - 1) || ',' || "
            f"substr({column_sql}, 2)) END)"
        )
        params = (
            *column_params,
            *prefix_params,
            *prefix_params,
            *prefix_params,
            *column_params,
        )
        return sql, params
