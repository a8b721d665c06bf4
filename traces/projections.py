"""Plain-dict projections of traces, steps and events: the one shape used by the REST API, the
event log and the websocket, so a step looks the same wherever a client meets it."""

from __future__ import annotations

import json
from datetime import datetime
from decimal import Decimal
from typing import Any

from traces.models import Step, Trace

PREVIEW_CHARS = 200
COMPACT_TEXT_CHARS = 200

#: Columns a compact step needs; the tree and node queries load only these.
STEP_SKELETON_FIELDS = (
    "id",
    "trace_id",
    "parent_id",
    "seq",
    "depth",
    "step_type",
    "status",
    "name",
    "description",
    "error",
    "data_preview",
    "data_bytes",
    "started_at",
    "finished_at",
    "duration_ms",
    "tokens",
    "cost",
    "children_count",
    "subtree_steps",
    "subtree_error_count",
    "subtree_tokens",
    "subtree_cost",
)
STEP_FULL_FIELDS = (*STEP_SKELETON_FIELDS, "path", "data")


def iso(value: datetime | None) -> str | None:
    """UTC ISO 8601 with a ``Z``."""
    if value is None:
        return None
    return value.isoformat().replace("+00:00", "Z")


def money(value: Decimal | float | None) -> float:
    return float(value or 0)


def clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def data_summary(data: Any) -> tuple[str, int]:
    """(preview, size in bytes) of a step's data, computed once on write."""
    encoded = json.dumps(data, ensure_ascii=False, separators=(",", ":"), default=str)
    return clip(encoded, PREVIEW_CHARS), len(encoded.encode())


def step_row(step: Step, *, full: bool = False) -> dict[str, Any]:
    """A model instance as the row dict that ``step_dict`` takes."""
    fields = STEP_FULL_FIELDS if full else STEP_SKELETON_FIELDS
    return {name: getattr(step, name) for name in fields}


def step_dict(row: dict[str, Any], *, full: bool = False) -> dict[str, Any]:
    """A step from a row of ``STEP_SKELETON_FIELDS`` (plus ``path`` and ``data`` when full).

    Compact steps cut ``description`` and ``error`` to 200 characters and carry ``data_preview``
    instead of ``data``.
    """
    description = row["description"]
    error = row["error"]
    out: dict[str, Any] = {
        "step_id": str(row["id"]),
        "trace_id": str(row["trace_id"]),
        "parent_id": str(row["parent_id"]) if row["parent_id"] else None,
        "seq": row["seq"],
        "depth": row["depth"],
        "step_type": row["step_type"],
        "status": row["status"],
        "name": row["name"],
        "description": description if full else clip(description, COMPACT_TEXT_CHARS),
        "error": error if full else clip(error, COMPACT_TEXT_CHARS),
        "started_at": iso(row["started_at"]),
        "finished_at": iso(row["finished_at"]),
        "duration_ms": row["duration_ms"],
        "tokens": row["tokens"],
        "cost": money(row["cost"]),
        "children_count": row["children_count"],
        "has_children": row["children_count"] > 0,
        "subtree_steps": row["subtree_steps"],
        "subtree_error_count": row["subtree_error_count"],
        "subtree_tokens": row["subtree_tokens"],
        "subtree_cost": money(row["subtree_cost"]),
        "data_preview": row["data_preview"],
        "data_bytes": row["data_bytes"],
    }
    if full:
        out["path"] = row["path"]
        out["data"] = row["data"]
    return out


def trace_totals(trace: Trace) -> dict[str, Any]:
    return {
        "total_steps": trace.total_steps,
        "total_tokens": trace.total_tokens,
        "total_cost": money(trace.total_cost),
        "total_duration_ms": trace.total_duration_ms,
        "error_count": trace.error_count,
    }


def trace_dict(trace: Trace) -> dict[str, Any]:
    return {
        "trace_id": str(trace.id),
        "mode": trace.mode,
        "task": trace.task,
        "agent_type": trace.agent_type,
        "status": trace.status,
        "user": trace.user.get_username() if trace.user_id and trace.user else None,
        **trace_totals(trace),
        "root_count": trace.root_count,
        "last_seq": trace.last_seq,
        "created_at": iso(trace.created_at),
        "completed_at": iso(trace.completed_at),
        "metadata": trace.metadata,
    }
