"""Plain-dict projections of traces, steps and events: the one shape used by the REST API, the
event log and the websocket, so a step looks the same wherever a client meets it."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from django.db.models import QuerySet

from traces.models import Step, Trace, TraceEvent
from traces.outcomes import step_outcome
from traces.sql import AsFloat, IsoTimestamp, Prefix, UuidText

PREVIEW_CHARS = 200
#: The key of a running step's data that holds what it has printed so far (bounded by its
#: writer); a ``step_updated`` that changes the data carries it (docs/traces.md).
LIVE_OUTPUT_KEY = "live_output"
COMPACT_TEXT_CHARS = 200


def iso(value: datetime | None) -> str | None:
    """UTC ISO 8601 with microseconds and a ``Z`` (the form ``IsoTimestamp`` gives in SQL)."""
    if value is None:
        return None
    return value.astimezone(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


def money(value: Decimal | float | None) -> float:
    return float(value or 0)


def clip(text: str | None, limit: int) -> str:
    """``text`` cut to ``limit`` characters, the last one an ellipsis when something was cut."""
    if not text:
        return ""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def data_summary(data: Any) -> tuple[str, int]:
    """(preview, size in bytes) of a step's data, computed once on write, once the write has
    made the data storable (``devassist.storable``: nested at most ``MAX_JSON_DEPTH`` levels,
    which ``json.dumps`` encodes without exhausting the stack)."""
    encoded = json.dumps(data, ensure_ascii=False, separators=(",", ":"), default=str)
    return clip(encoded, PREVIEW_CHARS), len(encoded.encode("utf-8", "surrogatepass"))


#: The skeleton of a step as the database formats it (see ``traces.sql``): ids and
#: timestamps arrive as text and costs as floats, so building 10,000 nodes stays cheap.
_SKELETON_PLAIN = (
    "seq",
    "depth",
    "step_type",
    "status",
    "name",
    "data_preview",
    "data_bytes",
    "duration_ms",
    "tokens",
    "children_count",
    "subtree_steps",
    "subtree_error_count",
    "subtree_tokens",
    "tool_facts",
)


def _skeleton_expressions() -> dict[str, Any]:
    return {
        "step_id": UuidText("id"),
        "trace_ref": UuidText("trace_id"),
        "parent_ref": UuidText("parent_id"),
        "started": IsoTimestamp("started_at"),
        "finished": IsoTimestamp("finished_at"),
        "cost_value": AsFloat("cost"),
        "subtree_cost_value": AsFloat("subtree_cost"),
        "description_head": Prefix("description", COMPACT_TEXT_CHARS + 1),
        "error_head": Prefix("error", COMPACT_TEXT_CHARS + 1),
    }


def step_values(qs: QuerySet[Step], *, full: bool = False) -> QuerySet[Step, dict[str, Any]]:
    """``qs`` as rows for ``step_from_values``; ``full`` adds path, data and the whole texts."""
    extra = (
        ("path", "data", "description", "error", "tokens_counted_below", "cost_counted_below")
        if full
        else ()
    )
    return qs.values(*_SKELETON_PLAIN, *extra, **_skeleton_expressions())


def step_from_values(row: dict[str, Any], *, full: bool = False) -> dict[str, Any]:
    """A step in the API's shape from a ``step_values`` row, with its ``outcome``
    (``traces.outcomes.step_outcome``: ``kind``, ``label``, ``reason``)."""
    children = row["children_count"]
    if full:
        description, error = row["description"], row["error"]
    else:
        description = clip(row["description_head"], COMPACT_TEXT_CHARS)
        error = clip(row["error_head"], COMPACT_TEXT_CHARS)
    out: dict[str, Any] = {
        "step_id": row["step_id"],
        "trace_id": row["trace_ref"],
        "parent_id": row["parent_ref"],
        "seq": row["seq"],
        "depth": row["depth"],
        "step_type": row["step_type"],
        "status": row["status"],
        "name": row["name"],
        "description": description,
        "error": error,
        "started_at": row["started"],
        "finished_at": row["finished"],
        "duration_ms": row["duration_ms"],
        "tokens": row["tokens"],
        "cost": row["cost_value"] or 0.0,
        "children_count": children,
        "has_children": children > 0,
        "subtree_steps": row["subtree_steps"],
        "subtree_error_count": row["subtree_error_count"],
        "subtree_tokens": row["subtree_tokens"],
        "subtree_cost": row["subtree_cost_value"] or 0.0,
        "data_preview": row["data_preview"],
        "data_bytes": row["data_bytes"],
        "outcome": step_outcome(
            row["step_type"], row["status"], error, row["tool_facts"]
        ).as_dict(),
    }
    if full:
        out["path"] = row["path"]
        out["data"] = row["data"]
        out["tokens_counted_below"] = row["tokens_counted_below"]
        out["cost_counted_below"] = row["cost_counted_below"]
    return out


def step_dict(step: Step, *, full: bool = False) -> dict[str, Any]:
    """A model instance in the same shape as ``step_from_values`` gives."""
    row = {name: getattr(step, name) for name in _SKELETON_PLAIN}
    row.update(
        step_id=str(step.id),
        trace_ref=str(step.trace_id),
        parent_ref=str(step.parent_id) if step.parent_id else None,
        started=iso(step.started_at),
        finished=iso(step.finished_at),
        cost_value=money(step.cost),
        subtree_cost_value=money(step.subtree_cost),
        description_head=step.description[: COMPACT_TEXT_CHARS + 1],
        error_head=step.error[: COMPACT_TEXT_CHARS + 1],
    )
    if full:  # only then: a step loaded without its data (``defer``) is not read again
        row.update(
            description=step.description,
            error=step.error,
            path=step.path,
            data=step.data,
            tokens_counted_below=step.tokens_counted_below,
            cost_counted_below=step.cost_counted_below,
        )
    return step_from_values(row, full=full)


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


def event_dict(event: TraceEvent) -> dict[str, Any]:
    """A logged event as the websocket sends it: ``{event, seq, ...payload}``."""
    return {"event": event.event, "seq": event.seq, **event.payload}


def step_added_event(step: dict[str, Any], totals: dict[str, Any]) -> dict[str, Any]:
    """The ``step_added`` event of a step (in ``step_from_values``' shape): not logged, the
    step is its record, and its ``seq`` is the step's."""
    return {"event": "step_added", "seq": step["seq"], "step": step, "totals": totals}
