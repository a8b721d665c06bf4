"""Every read of traces and steps: for the REST API, the watch websocket and the trace browser.

``traces.store`` is the only writer. Reads raise the domain errors (``TraceNotFound``,
``StepNotFound``, …); the API turns them into its error envelope, the browser views into 404
pages. Steps come out in the projection's shape (``traces.projections.step_from_values``); the
browser's nodes add a few fields: ``iteration`` (the number of a ``thought`` among its siblings'
thoughts), ``repeated`` (an ``action`` whose tool and arguments an earlier action of the trace
already used), and for nodes shown open, ``children`` with the window's
``next_offset``/``remaining`` and ``prev_offset``.

A node's children are read in windows of ``CHILD_WINDOW`` by one builder
(``children_window``, and ``first_children`` for several nodes at once) that the API's node
endpoint and the browser both use.
"""

from __future__ import annotations

import itertools
import json
import uuid
from collections.abc import AsyncIterator, Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, date, datetime, time, timedelta
from typing import Any, Generic, TypeVar, cast

from asgiref.sync import sync_to_async
from django.conf import settings
from django.core.cache import caches
from django.db import connection
from django.db.models import Count, F, Max, Min, OuterRef, Q, Subquery, Value
from django.db.models.expressions import Window
from django.db.models.fields.json import KT
from django.db.models.functions import Coalesce, RowNumber
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from django.utils.translation import gettext

from devassist import cursors
from devassist.responses import json_bytes, tree_json_bytes
from traces.access import can_view
from traces.artifacts import artifacts_of
from traces.exceptions import (
    ArtifactNotFound,
    InvalidCursor,
    StepNotFound,
    StepValueNotFound,
    TraceNotFound,
    TreeTooLarge,
)
from traces.messages import (
    MESSAGE_BODIES,
    answered_in,
    conversation,
    part_answer,
    part_call,
    split_message,
    tool_call,
)
from traces.models import (
    PendingLogEvents,
    Step,
    StepType,
    Trace,
    TraceEvent,
    TraceQuerySet,
    TraceStatus,
)
from traces.projections import (
    event_dict,
    iso,
    step_added_event,
    step_from_values,
    step_values,
    trace_dict,
    trace_totals,
)

#: The deepest a tree or node read nests (``max_depth``), the same for both endpoints.
MAX_DEPTH = 10
#: Past every seq (``PositiveBigIntegerField``).
MAX_SEQ = 2**63 - 1
#: Children per window: the node endpoint's default ``limit`` and the browser's window ("show
#: N more" loads the next one).
CHILD_WINDOW = 50
#: Rows the first render may open automatically, level by level, before it stops expanding.
AUTO_EXPAND_ROWS = 300
#: Levels the first render opens at most (goal → thought → action → result).
AUTO_EXPAND_DEPTH = 3
#: A step counts as slow for the ``s`` key from this duration on.
SLOW_STEP_MS = 1000
#: Pretty-printed values longer than this are previewed with a download link.
VALUE_PREVIEW_CHARS = 5000
#: Search results shown at most.
SEARCH_LIMIT = 100
#: Bars of the timeline at most (steps of the top levels in seq order).
TIMELINE_BARS = 400
TIMELINE_DEPTH = 3
#: Idle gaps longer than this share of the timeline are drawn this wide when compressed.
GAP_MIN_SHARE = 0.05
GAP_DRAWN_SHARE = 0.015
TRACE_PAGE_SIZE = 25
#: New traces the list counts at most (it then says "100+" and stops asking).
NEW_TRACES_CAP = 100
EXPORT_CHUNK = 1000
#: A running OTLP trace that has had no new span for this long says so on its page.
OTLP_QUIET = timedelta(minutes=5)
#: The spans whose waiting log records the trace page shows (the API pages through all).
WAITING_SPANS_SHOWN = 20
#: The steps waiting for their parent span that the trace page lists (the API pages through all).
WAITING_STEPS_SHOWN = 20

T = TypeVar("T")


# --- traces -------------------------------------------------------------------------------------


def trace_get(*, trace_id: uuid.UUID) -> Trace:
    """The trace with its user (one query); ``TraceNotFound``."""
    trace = Trace.objects.select_related("user").filter(pk=trace_id).first()
    if trace is None:
        raise TraceNotFound(f"Trace {trace_id} does not exist.")
    return trace


def trace_get_for(*, viewer: Any, trace_id: uuid.UUID) -> Trace:
    """The trace if ``viewer`` may see it (one query); ``TraceNotFound`` for a missing trace
    and for someone else's alike."""
    trace = trace_get(trace_id=trace_id)
    if not can_view(viewer, trace):
        raise TraceNotFound(f"Trace {trace_id} does not exist.")
    return trace


def otlp_quiet_since(trace: Trace, *, now: datetime | None = None) -> datetime | None:
    """When the last span of a running OTLP trace arrived, if that was more than
    ``OTLP_QUIET`` ago (the trace's start when none has); None for any other trace (one
    query, for a running OTLP trace only). Such a trace runs until its root span arrives,
    and an agent stopped before it ended its root span never sends it."""
    return otlp_quiet([trace], now=now).get(trace.id)


def otlp_quiet(
    traces: Iterable[Trace], *, now: datetime | None = None
) -> dict[uuid.UUID, datetime]:
    """``otlp_quiet_since`` of each of ``traces`` that is quiet, by trace id: one query
    when any of them is a running OTLP trace, none otherwise."""
    watched = [trace.pk for trace in traces if trace.is_running and trace.is_otlp]
    if not watched:
        return {}
    last_step = Step.objects.filter(trace=OuterRef("pk")).order_by("-seq").values("created_at")
    rows = (
        Trace.objects.filter(pk__in=watched)
        .order_by()
        .annotate(last_step_at=Subquery(last_step[:1]))
        .values_list("pk", "created_at", "last_step_at")
    )
    cutoff = (now or timezone.now()) - OTLP_QUIET
    quiet = {pk: last or created for pk, created, last in rows}
    return {pk: since for pk, since in quiet.items() if since < cutoff}


@dataclass(frozen=True)
class WaitingSpan:
    """The log records of a span that has not arrived (``PendingLogEvents``): they become
    its step's events when it does."""

    step_id: uuid.UUID
    #: The span's OpenTelemetry id (hex); empty for records stored before it was kept.
    span_id: str
    #: When its first record came.
    received_at: datetime
    events: list[dict[str, Any]]

    def as_dict(self) -> dict[str, Any]:
        return {
            "step_id": str(self.step_id),
            "span_id": self.span_id or None,
            "received_at": iso(self.received_at),
            "events": self.events,
        }


@dataclass(frozen=True)
class Waiting(Generic[T]):
    """A window of ``items`` from ``offset`` of a trace's ``total`` waiting things, oldest
    first: the spans whose log records wait for them (``WaitingSpan``), or the steps that
    wait at the top level for their parent span (each a step in the API's shape with the id
    of the span it waits for, ``parent_span_id``, hex)."""

    items: list[T]
    total: int
    offset: int

    @property
    def next_offset(self) -> int | None:
        end = self.offset + len(self.items)
        return end if end < self.total else None

    @property
    def more(self) -> int:
        """How many come after the window."""
        return max(self.total - self.offset - len(self.items), 0)


def waiting_log_records(
    trace: Trace, *, offset: int = 0, limit: int = WAITING_SPANS_SHOWN
) -> Waiting[WaitingSpan]:
    """The log records of ``trace``'s spans that have not arrived (yet, while it runs; an
    exporter that dropped a span, or a span sent elsewhere, never sends it), grouped by span,
    the ``limit`` spans from ``offset`` in the order their first records came. No query for
    a trace not recorded over OTLP, one when no records wait, three otherwise."""
    if not trace.is_otlp:
        return Waiting(items=[], total=0, offset=offset)
    waiting = PendingLogEvents.objects.filter(trace=trace)
    spans = (
        waiting.values("step_id")
        .annotate(first=Min("pk"), span_id=Max("span_id"), received_at=Min("received_at"))
        .order_by("first")
        .values_list("step_id", "span_id", "received_at")
    )
    total = spans.count()
    window = list(spans[offset : offset + limit]) if total > offset else []
    events: dict[uuid.UUID, list[dict[str, Any]]] = {step_id: [] for step_id, _, _ in window}
    if window:
        rows = waiting.filter(step_id__in=list(events)).order_by("pk")
        for step_id, step_events in rows.values_list("step_id", "events"):
            # A list of event objects as written; anything else is shown as one event.
            events[step_id] += step_events if isinstance(step_events, list) else [step_events]
    return Waiting(
        items=[
            WaitingSpan(step_id=step_id, span_id=span_id, received_at=at, events=events[step_id])
            for step_id, span_id, at in window
        ],
        total=total,
        offset=offset,
    )


def waiting_steps(
    trace: Trace, *, offset: int = 0, limit: int = WAITING_STEPS_SHOWN
) -> Waiting[dict[str, Any]]:
    """The steps of ``trace`` stored at the top level to wait for a parent span that has not
    arrived (``Step.pending_parent_id``), in the order they came, the ``limit`` from
    ``offset``. Each moves under its parent, with its subtree, when that span arrives; one
    whose exporter dropped it (its queue full, the agent stopped) never does. No query for a
    trace not recorded over OTLP, one when no step waits, two otherwise."""
    if not trace.is_otlp:
        return Waiting(items=[], total=0, offset=offset)
    waiting = Step.objects.for_trace(trace).filter(pending_parent_id__isnull=False)
    total = waiting.count()
    rows = []
    if total > offset:
        window = step_values(waiting.in_order()).annotate(
            # Kept by the mapping (``traces.otlp``); text whatever a stored row holds there.
            parent_span=KT("data__otel_span__parent_span_id")
        )
        rows = list(window[offset : offset + limit])
    steps = [step_from_values(row) | {"parent_span_id": row["parent_span"]} for row in rows]
    return Waiting(items=steps, total=total, offset=offset)


@dataclass(frozen=True)
class TracePage:
    traces: list[Trace]
    next_cursor: str | None


def decode_cursor(cursor: str) -> tuple[datetime, uuid.UUID]:
    """The position a ``next_cursor`` of a trace page names; ``InvalidCursor``."""
    try:
        return cursors.decode_cursor(cursor)
    except ValueError as exc:
        raise InvalidCursor(
            "Invalid cursor: pass back the next_cursor of a previous page.",
            details={"errors": [{"loc": ["query", "cursor"], "msg": "invalid cursor"}]},
        ) from exc


def _day_start(day: date) -> datetime:
    return datetime.combine(day, time.min, tzinfo=UTC)


def trace_list_for(
    *, viewer: Any, cursor: str = "", limit: int = TRACE_PAGE_SIZE, **filters: Any
) -> TracePage:
    """A page of the traces ``viewer`` may see (staff everyone's), newest first, narrowed by
    the ``filters`` that are set (``_listed_traces``), after ``cursor`` (a ``next_cursor``;
    ``InvalidCursor``). One query."""
    qs = _listed_traces(viewer, **filters)
    qs = qs.select_related("user").newest_first()
    if cursor:
        created_at, last_id = decode_cursor(cursor)
        qs = qs.filter(Q(created_at__lt=created_at) | Q(created_at=created_at, id__lt=last_id))
    rows = list(qs[: limit + 1])
    if len(rows) <= limit:
        return TracePage(traces=rows, next_cursor=None)
    rows = rows[:limit]
    return TracePage(
        traces=rows, next_cursor=cursors.encode_cursor(rows[-1].created_at, rows[-1].id)
    )


#: The latest traces of a viewer whose agent types the list's filter suggests.
AGENT_TYPES_FROM = 1000


def recent_agent_types(viewer: Any) -> list[str]:
    """The agent types of the latest ``AGENT_TYPES_FROM`` traces ``viewer`` may see, sorted:
    what the list's agent filter (an exact match) suggests. One query, on the index the list
    pages with: 0.3-1.9 ms at a million traces, where the agent types of all of a user's
    took 156 ms (benchmarks/README.md, "2026-12-07 09:35")."""
    latest = Trace.objects.visible_to(viewer).newest_first().values_list("agent_type", flat=True)
    return sorted(set(latest[:AGENT_TYPES_FROM]))


def new_trace_count(
    *, viewer: Any, shown: Iterable[uuid.UUID], cap: int, last: str = "", **filters: Any
) -> int:
    """How many traces a first page of the list (``_listed_traces``'s ``filters``) would show
    now that it did not: those it orders before its last row (``last``, the page's
    ``next_cursor``; every trace when the page was not full) that are not among ``shown``, the
    page's rows. New traces, and older ones that opened since (an OTLP trace starts when its
    earliest span did, which may be below the page's top) or came to match the filters (a
    status). At most ``cap``; ``InvalidCursor``. One query."""
    qs = _listed_traces(viewer, **filters)
    if last:
        created_at, last_id = decode_cursor(last)
        qs = qs.filter(Q(created_at__gt=created_at) | Q(created_at=created_at, id__gt=last_id))
    return qs.exclude(id__in=list(shown)).order_by().values("id")[:cap].count()


def _listed_traces(
    viewer: Any,
    *,
    mode: str = "",
    status: str = "",
    agent_type: str = "",
    user: str = "",
    q: str = "",
    since: date | None = None,
    until: date | None = None,
) -> TraceQuerySet:
    """The traces ``viewer`` may see that the list's filters that are set let through:
    ``mode``, ``status``, ``agent_type`` (each exactly), ``user`` (a username), ``q`` (in the
    task, case-insensitive), ``since`` and ``until`` (days, both included)."""
    qs = Trace.objects.visible_to(viewer)
    if user:
        qs = qs.filter(user__username=user)
    if mode:
        qs = qs.filter(mode=mode)
    if status:
        qs = qs.filter(status=status)
    if agent_type:
        qs = qs.filter(agent_type=agent_type)
    if q:
        qs = qs.filter(task__icontains=q)
    if since:
        qs = qs.filter(created_at__gte=_day_start(since))
    if until:
        qs = qs.filter(created_at__lt=_day_start(until) + timedelta(days=1))
    return qs


def trace_events_after(
    *, trace_id: uuid.UUID, after_seq: int, limit: int = 1000, up_to: int | None = None
) -> list[dict[str, Any]]:
    """The trace's events with ``after_seq < seq <= up_to``, oldest first, at most ``limit``,
    as the websocket sends them (three queries: the trace, then ``_events_after``'s two); none
    for a trace that does not exist."""
    trace = Trace.objects.filter(pk=trace_id).first()
    if trace is None:
        return []
    return _events_after(trace, after_seq=after_seq, limit=limit, up_to=up_to)


def trace_event_page(*, trace: Trace, after_seq: int, limit: int) -> dict[str, Any]:
    """A page of ``trace``'s events after ``after_seq`` for the API: ``events``, the trace's
    ``last_seq`` and ``has_more``. A running trace has more up to its ``last_seq``; a finished
    one up to its ``trace_completed``, its last event (steps added after it, late spans or
    feedback, take seqs but announce nothing). Two queries."""
    events = _events_after(trace, after_seq=after_seq, limit=limit)
    if trace.is_running:
        has_more = (events[-1]["seq"] if events else after_seq) < trace.last_seq
    else:
        has_more = bool(events) and events[-1]["event"] != "trace_completed"
    return {"events": events, "last_seq": trace.last_seq, "has_more": has_more}


def _events_after(
    trace: Trace, *, after_seq: int, limit: int, up_to: int | None = None
) -> list[dict[str, Any]]:
    """``trace``'s events after ``after_seq`` (to ``up_to``), at most ``limit``: the logged
    ones and the ``step_added`` of each step (the store does not log them: the step is its
    record), with ``trace``'s totals. Steps added after the trace's ``trace_completed`` (late
    spans, feedback) announce nothing, as when they were added.

    The logged events are read before the steps: a write that commits between the two reads
    is then seen by its steps alone, whose seqs come before its events', so the page has no
    gap (the follower goes on from its last seq)."""
    events = TraceEvent.objects.filter(trace=trace, seq__gt=after_seq).order_by("seq")
    completed = TraceEvent.objects.filter(trace=trace, event="trace_completed").values("seq")
    steps = Step.objects.for_trace(trace).filter(
        seq__gt=after_seq, seq__lt=Coalesce(Subquery(completed[:1]), Value(MAX_SEQ))
    )
    if up_to is not None:
        events, steps = events.filter(seq__lte=up_to), steps.filter(seq__lte=up_to)
    logged = [event_dict(event) for event in events[:limit]]
    totals = trace_totals(trace)
    added = [
        step_added_event(step_from_values(row), totals)
        for row in step_values(steps.in_order()[:limit])
    ]
    return sorted([*added, *logged], key=lambda event: event["seq"])[:limit]


# --- steps --------------------------------------------------------------------------------------


def step_get(*, trace_id: uuid.UUID, step_id: uuid.UUID) -> Step:
    """A step of the trace (one query); ``StepNotFound``."""
    step = Step.objects.for_trace(trace_id).filter(pk=step_id).first()
    if step is None:
        raise StepNotFound(f"Step {step_id} does not exist in trace {trace_id}.")
    return step


def artifact_get(*, viewer: Any, trace_id: uuid.UUID, artifact_id: uuid.UUID) -> dict[str, Any]:
    """The record of one of the trace's artifacts (``traces.artifacts``), found in its result
    steps, if ``viewer`` may see the trace; ``TraceNotFound`` for a missing trace and for
    someone else's alike, ``ArtifactNotFound``. On PostgreSQL the database finds the step
    (JSON containment, within the trace); elsewhere the trace's result steps are read."""
    trace = trace_get_for(viewer=viewer, trace_id=trace_id)
    wanted = str(artifact_id)
    steps = Step.objects.for_trace(trace.id).filter(step_type=StepType.RESULT)
    if connection.features.supports_json_field_contains:
        pattern = [{"id": wanted}]
        steps = steps.filter(
            Q(data__result__artifacts__contains=pattern) | Q(data__artifacts__contains=pattern)
        )
    for data in steps.values_list("data", flat=True).iterator():
        for record in artifacts_of(data):
            if record["id"] == wanted:
                return record
    raise ArtifactNotFound(f"Trace {trace_id} has no artifact {artifact_id}.")


def children_window(
    *,
    trace_id: uuid.UUID,
    parent_id: uuid.UUID | None,
    offset: int = 0,
    limit: int = CHILD_WINDOW,
    full: bool = False,
) -> list[dict[str, Any]]:
    """Children ``[offset, offset + limit)`` of a step (the top level for None) in seq order,
    in the projection's shape, ``full`` with their data (one query)."""
    siblings = Step.objects.for_trace(trace_id).children_of(parent_id).in_order()
    return [
        step_from_values(row, full=full)
        for row in step_values(siblings, full=full)[offset : offset + limit]
    ]


def first_children(
    *,
    trace_id: uuid.UUID,
    parent_ids: Iterable[str],
    limit: int = CHILD_WINDOW,
    full: bool = False,
) -> dict[str, list[dict[str, Any]]]:
    """The first ``limit`` children of each of the steps ``parent_ids``, by parent id, each
    in seq order (one query).

    The children are ranked by id alone, then fetched, so a step with thousands of children
    costs an index scan, not thousands of projections; a lone parent (as the goal usually is)
    needs no ranking at all."""
    parents = list(parent_ids)
    found: dict[str, list[dict[str, Any]]] = {parent: [] for parent in parents}
    if not parents:
        return found
    in_level = Step.objects.for_trace(trace_id).filter(
        parent_id__in=[uuid.UUID(parent) for parent in parents]
    )
    if len(parents) == 1:
        first_ids = in_level.in_order().values("pk")[:limit]
    else:
        first_ids = (
            in_level.annotate(
                sibling_rank=Window(
                    RowNumber(), partition_by=[F("parent_id")], order_by=F("seq").asc()
                )
            )
            .filter(sibling_rank__lte=limit)
            .values("pk")
        )
    rows = step_values(Step.objects.filter(pk__in=first_ids).in_order(), full=full)
    for row in rows:
        child = step_from_values(row, full=full)
        found[child["parent_id"]].append(child)
    return found


@dataclass(frozen=True)
class StepWindow:
    """A node (None for the top level) with a window of its children, nested to a depth."""

    step: dict[str, Any] | None
    children: list[dict[str, Any]]
    total_children: int
    next_offset: int | None


def node_window(
    *,
    trace_id: uuid.UUID,
    step_id: uuid.UUID | None,
    viewer: Any | None = None,
    max_depth: int = 1,
    offset: int = 0,
    limit: int = CHILD_WINDOW,
    full: bool = False,
) -> StepWindow:
    """The node ``step_id`` (top level for None) with children ``[offset, offset + limit)``,
    each nested ``max_depth - 1`` levels deeper with its first ``limit`` children.

    With ``viewer``, a trace the viewer may not see is ``TraceNotFound``; a step that is not
    in the trace is ``StepNotFound``. One query for the node (with the access check) and one
    per level."""
    traces = Trace.objects.filter(pk=trace_id)
    if viewer is not None:
        traces = traces.visible_to(viewer)
    node: dict[str, Any] | None = None
    if step_id is None:
        total = traces.values_list("root_count", flat=True).first()
        if total is None:
            raise TraceNotFound(f"Trace {trace_id} does not exist.")
    else:
        found = step_values(
            Step.objects.for_trace(trace_id).filter(pk=step_id, trace__in=traces), full=full
        ).first()
        if found is None:
            if not traces.exists():
                raise TraceNotFound(f"Trace {trace_id} does not exist.")
            raise StepNotFound(f"Step {step_id} does not exist in trace {trace_id}.")
        node = step_from_values(found, full=full)
        total = found["children_count"]
    first = children_window(
        trace_id=trace_id, parent_id=step_id, offset=offset, limit=limit, full=full
    )
    level = first
    for _depth in range(max_depth):
        for child in level:
            child["children"] = []
        if _depth == max_depth - 1:
            break
        frontier = {c["step_id"]: c for c in level if c["has_children"]}
        if not frontier:
            break
        below = first_children(trace_id=trace_id, parent_ids=frontier, limit=limit, full=full)
        level = []
        for parent_id, children in below.items():
            frontier[parent_id]["children"] = children
            level += children
    end = offset + len(first)
    return StepWindow(
        step=node,
        children=first,
        total_children=total,
        next_offset=end if end < total else None,
    )


@dataclass(frozen=True)
class TreeWindow:
    """A window of a node's children (``total_children`` in all), each child that was opened
    carrying its own first window under ``"window"``."""

    children: list[dict[str, Any]]
    total_children: int
    next_offset: int | None

    @property
    def remaining(self) -> int:
        """Children after this window."""
        return self.total_children - self.next_offset if self.next_offset is not None else 0


def step_tree_window(
    *,
    trace_id: uuid.UUID,
    parent_id: uuid.UUID | None,
    offset: int = 0,
    limit: int = CHILD_WINDOW,
    depth: int = 1,
) -> TreeWindow:
    """Children ``[offset, offset + limit)`` of a step (the top level for None), each opened
    ``depth - 1`` levels deeper with its first ``limit`` children: ``node_window``'s reads
    (one query for the node and one per level), with a ``TreeWindow`` on every opened node.
    ``TraceNotFound``, ``StepNotFound``."""
    found = node_window(
        trace_id=trace_id, step_id=parent_id, max_depth=depth, offset=offset, limit=limit
    )
    for node in _walk(found.children):
        shown = len(node["children"])
        node["window"] = TreeWindow(
            children=node["children"],
            total_children=node["children_count"],
            next_offset=shown if shown < node["children_count"] else None,
        )
    return TreeWindow(found.children, found.total_children, found.next_offset)


def trace_tree(
    *,
    trace: Trace,
    max_depth: int | None = None,
    full: bool = False,
    max_steps: int | None = None,
) -> list[dict[str, Any]]:
    """The whole tree (to ``max_depth`` levels) as nested dicts, children in seq order, in
    one query. Raises ``TreeTooLarge`` when it holds more than ``max_steps`` steps.

    A parent can have a later seq than its children (steps sent before their parent, OTLP),
    so the steps are linked once all are read."""
    qs = Step.objects.for_trace(trace)
    if max_depth is not None:
        qs = qs.filter(depth__lt=max_depth)
    rows = step_values(qs.in_order(), full=full)
    if max_steps is not None:
        rows = rows[: max_steps + 1]
    nodes: dict[str, dict[str, Any]] = {}
    for row in rows:
        if max_steps is not None and len(nodes) == max_steps:
            raise TreeTooLarge(
                f"The tree has more than {max_steps:,} steps: load it level by level with "
                "the node endpoint, or pass max_depth.",
                details={"max_steps": max_steps, "total_steps": trace.total_steps},
            )
        node = step_from_values(row, full=full)
        node["children"] = []
        nodes[node["step_id"]] = node
    roots: list[dict[str, Any]] = []
    for node in nodes.values():
        parent = nodes.get(node["parent_id"]) if node["parent_id"] else None
        (parent["children"] if parent is not None else roots).append(node)
    return roots


def trace_tree_json(
    *, trace: Trace, max_depth: int | None = None, full: bool = False, max_steps: int
) -> bytes:
    """``trace_tree`` encoded as JSON. A finished trace's compact tree of at least
    ``TRACE_TREE_CACHE_MIN_STEPS`` steps is kept encoded after its first read (the cache
    ``trace_trees``, in each server process) under the trace's ``last_seq``: every write to
    a trace's steps moves it (``traces.store``; a finished trace's, without an event) and
    nothing else writes them (the admin deletes a step only with its trace), so a later
    read finds a kept tree only while it is still the trace's tree. ``created_at`` tells a trace
    apart from an earlier one with its id (deleted, then sent again over OTLP).

    Built from ``trace`` as the caller read it, the tree is that state or a newer one, never
    an older one. In ``benchmarks/otlp_ingest.py``'s 10,000-span trace, the first read took
    0.30-0.41 s and a read of the kept tree 0.09 s, 24x faster than Phoenix's 2.1 s
    (benchmarks/README.md, "2026-12-06 15:00"). The full view, every step's data, is never
    kept."""

    def build() -> bytes:
        return tree_json_bytes(
            trace_tree(trace=trace, max_depth=max_depth, full=full, max_steps=max_steps)
        )

    if (
        full
        or trace.status == TraceStatus.RUNNING
        or trace.total_steps < settings.TRACE_TREE_CACHE_MIN_STEPS
    ):
        return build()
    key = f"{trace.id}:{trace.created_at.timestamp()}:{trace.last_seq}:{max_depth}:{max_steps}"
    return cast(bytes, caches["trace_trees"].get_or_set(key, build))


# --- the browser's tree -------------------------------------------------------------------------


@dataclass
class TreeView:
    """What the tree shows: the top-level window, with the opened nodes nested in it."""

    roots: list[dict[str, Any]]
    total: int
    next_offset: int | None
    prev_offset: int | None
    selected: dict[str, Any] | None = None
    rows: int = 0
    notices: list[str] = field(default_factory=list)

    @property
    def remaining(self) -> int:
        """Top-level steps after this window."""
        return self.total - self.next_offset if self.next_offset is not None else 0


def _node(step: dict[str, Any], *, iteration: int | None = None) -> dict[str, Any]:
    """A projected step as a row of the browser's tree, closed."""
    step["iteration"] = iteration if step["step_type"] == StepType.THOUGHT else None
    step["repeated"] = False
    step["children"] = []
    step["open"] = False
    step["next_offset"] = None
    step["prev_offset"] = None
    step["remaining"] = 0
    step["index"] = None
    return step


def _number_iterations(siblings: list[dict[str, Any]], thoughts_before: int) -> None:
    """Number the ``thought`` steps of a run of siblings: ReAct iterations, counted from
    ``thoughts_before`` (the thoughts among the earlier siblings)."""
    for node in siblings:
        if node["step_type"] == StepType.THOUGHT:
            thoughts_before += 1
            node["iteration"] = thoughts_before


def _window(
    trace: Trace, parent_id: uuid.UUID | None, offset: int, total: int
) -> tuple[list[dict[str, Any]], int | None, int | None]:
    """The browser's window of a node's children at ``offset``, with the next and previous
    window offsets. One query, and one more to count the earlier thoughts when the window
    starts past the first child and holds a thought."""
    nodes = [
        _node(child)
        for child in children_window(trace_id=trace.id, parent_id=parent_id, offset=offset)
    ]
    for index, node in enumerate(nodes, start=offset):
        node["index"] = index
    before = 0
    if offset and any(n["step_type"] == StepType.THOUGHT for n in nodes):
        before = (
            Step.objects.for_trace(trace)
            .children_of(parent_id)
            .filter(step_type=StepType.THOUGHT, seq__lt=nodes[0]["seq"])
            .count()
        )
    _number_iterations(nodes, before)
    prev = max(0, offset - CHILD_WINDOW) if offset > 0 else None
    return nodes, _next_offset(offset, len(nodes), total), prev


def _next_offset(offset: int, fetched: int, total: int) -> int | None:
    """Where the window after one of ``fetched`` children from ``offset`` starts, None when it
    is the last: past ``total`` (the trace's ``root_count``, the parent's ``children_count``),
    or shorter than ``CHILD_WINDOW``. ``total`` was read in a statement of its own, and may
    count steps that have moved away since (a parent span arriving takes the steps that waited
    for it off the top level): a page reloaded in between offered a window that held nothing."""
    end = offset + fetched
    return end if fetched == CHILD_WINDOW and end < total else None


def _open(node: dict[str, Any], children: list[dict[str, Any]], next_offset: int | None) -> None:
    node["open"] = True
    node["children"] = children
    node["next_offset"] = next_offset
    node["remaining"] = node["children_count"] - (next_offset or 0) if next_offset else 0


def _auto_expand(trace: Trace, level: list[dict[str, Any]], budget: int, *, depth: int = 0) -> int:
    """Open ``level``'s nodes (at ``depth``, 0 for the top level) breadth first down to
    ``AUTO_EXPAND_DEPTH``, one query per level, while the rows stay within ``budget``;
    returns the rows added."""
    added = 0
    for _depth in range(depth, AUTO_EXPAND_DEPTH):
        frontier = {n["step_id"]: n for n in level if n["has_children"] and not n["open"]}
        cost = sum(min(n["children_count"], CHILD_WINDOW) for n in frontier.values())
        if not frontier or added + cost > budget:
            break
        children = first_children(trace_id=trace.id, parent_ids=frontier)
        level = []
        for sid, group in children.items():
            nodes = [_node(child) for child in group]
            _number_iterations(nodes, 0)
            for index, node in enumerate(nodes):
                node["index"] = index
            parent = frontier[sid]
            _open(parent, nodes, _next_offset(0, len(nodes), parent["children_count"]))
            level += nodes
        added += len(level)
    return added


def _walk(nodes: Iterable[dict[str, Any]]) -> Iterable[dict[str, Any]]:
    for node in nodes:
        yield node
        yield from _walk(node["children"])


def _mark_repeats(trace: Trace, nodes: list[dict[str, Any]]) -> None:
    """Flag shown ``action`` steps whose tool and arguments an earlier action of the trace
    used (same name, same stored data preview and size: exact for arguments up to 200
    characters of JSON). One query, only when actions are shown."""
    actions = [n for n in nodes if n["step_type"] == StepType.ACTION]
    if not actions:
        return
    firsts = (
        Step.objects.for_trace(trace)
        .filter(
            step_type=StepType.ACTION,
            seq__lt=max(n["seq"] for n in actions),
            name__in={n["name"] for n in actions},
            data_preview__in={n["data_preview"] for n in actions},
        )
        .order_by()
        .values("name", "data_preview", "data_bytes")
        .annotate(first=Min("seq"))
    )
    first = {(r["name"], r["data_preview"], r["data_bytes"]): r["first"] for r in firsts}
    for node in actions:
        seen = first.get((node["name"], node["data_preview"], node["data_bytes"]))
        node["repeated"] = seen is not None and seen < node["seq"]


def tree_view(*, trace: Trace, step_id: uuid.UUID | None = None) -> TreeView:
    """The first render of a trace's tree.

    Without ``step_id``: the first window of top-level steps, opened breadth first while the
    rows stay under ``AUTO_EXPAND_ROWS`` (1 + levels queries). With ``step_id``: the path to
    that step opened, each level at the window that holds the next step of the path (3 + depth
    queries), the step itself selected. An unknown step adds a notice and falls back to the
    first render."""
    notices: list[str] = []
    if step_id is not None:
        target = Step.objects.for_trace(trace).filter(pk=step_id).values("seq", "path").first()
        if target is None:
            notices.append(
                gettext("That step is not in this trace; showing the trace from the top.")
            )
        else:
            view = _path_view(trace, target)
            view.notices = notices
            _mark_repeats(trace, list(_walk(view.roots)))
            return view
    roots, next_offset, _ = _window(trace, None, 0, trace.root_count)
    rows = len(roots) + _auto_expand(trace, roots, AUTO_EXPAND_ROWS - len(roots))
    _mark_repeats(trace, list(_walk(roots)))
    return TreeView(
        roots=roots,
        total=trace.root_count,
        next_offset=next_offset,
        prev_offset=None,
        rows=rows,
        notices=notices,
    )


def _path_view(trace: Trace, target: Mapping[str, Any]) -> TreeView:
    chain_seqs = [*target["path"], target["seq"]]
    in_trace = Step.objects.for_trace(trace)
    earlier = in_trace.filter(parent_id=OuterRef("parent_id"), seq__lt=OuterRef("seq"))
    ranks = {
        r["seq"]: r
        for r in in_trace.filter(seq__in=chain_seqs)
        .annotate(
            rank=Subquery(
                earlier.order_by().values("trace_id").annotate(n=Count("pk")).values("n")[:1]
            )
        )
        .values("seq", "id", "children_count", "rank")
    }
    chain = [ranks[s] for s in chain_seqs if s in ranks]

    def window_at(parent_id: uuid.UUID | None, rank: int, total: int) -> tuple[Any, ...]:
        offset = (rank // CHILD_WINDOW) * CHILD_WINDOW
        return _window(trace, parent_id, offset, total)

    roots, root_next, root_prev = window_at(None, chain[0]["rank"] or 0, trace.root_count)
    level = roots
    rows = len(roots)
    for here, below in itertools.pairwise(chain):
        node = next(n for n in level if n["seq"] == here["seq"])
        children, nxt, prev = window_at(here["id"], below["rank"] or 0, here["children_count"])
        _open(node, children, nxt)
        node["prev_offset"] = prev
        level = children
        rows += len(children)
    selected = next((n for n in level if n["seq"] == target["seq"]), None)
    return TreeView(
        roots=roots,
        total=trace.root_count,
        next_offset=root_next,
        prev_offset=root_prev,
        selected=selected,
        rows=rows,
    )


@dataclass(frozen=True)
class ChildWindow:
    children: list[dict[str, Any]]
    next_offset: int | None
    prev_offset: int | None
    remaining: int


def child_page(
    *, trace: Trace, parent_id: uuid.UUID | None, offset: int, opened: bool = False
) -> ChildWindow:
    """A window of a node's children for "show more" and lazy expansion (2 or 3 queries).
    ``opened``: the children open as a reload opens them at their depth (the live page
    loads a step this way when it arrives after children of its own; a query per level
    opened). ``StepNotFound`` for a step that is not in the trace."""
    if parent_id is None:
        total, depth = trace.root_count, 0
    else:
        found = (
            Step.objects.for_trace(trace)
            .filter(pk=parent_id)
            .values_list("children_count", "depth")
            .first()
        )
        if found is None:
            raise StepNotFound(f"Step {parent_id} does not exist in trace {trace.id}.")
        total, depth = found[0], found[1] + 1
    children, nxt, prev = _window(trace, parent_id, offset, total)
    if opened:
        _auto_expand(trace, children, AUTO_EXPAND_ROWS - len(children), depth=depth)
    _mark_repeats(trace, list(_walk(children)))
    return ChildWindow(
        children=children,
        next_offset=nxt,
        prev_offset=prev,
        remaining=total - nxt if nxt is not None else 0,
    )


def steps_by_id(*, trace: Trace, ids: Iterable[uuid.UUID]) -> list[dict[str, Any]]:
    """Skeletons of the given steps of the trace, in seq order (the live view's new and
    changed rows), thoughts numbered among their siblings (one query, two with actions)."""
    in_trace = Step.objects.for_trace(trace)
    thoughts_so_far = in_trace.filter(
        parent_id=OuterRef("parent_id"), step_type=StepType.THOUGHT, seq__lte=OuterRef("seq")
    )
    rows = step_values(in_trace.filter(pk__in=list(ids)).in_order()).annotate(
        thought_rank=Subquery(
            thoughts_so_far.order_by().values("trace_id").annotate(n=Count("pk")).values("n")[:1]
        )
    )
    nodes = [_node(step_from_values(r), iteration=r["thought_rank"]) for r in rows]
    _mark_repeats(trace, nodes)
    return nodes


# --- a step's detail ----------------------------------------------------------------------------


@dataclass(frozen=True)
class ShownMessage:
    """One message of a model conversation in a step's data (``_messages``): its role, who
    spoke (``about``: its name, and the tool call a tool's answer is to), its text, the tools it
    calls (``name(arguments)``), and what else it holds (parts that are not text) as JSON;
    ``cut`` when only a preview of the text is shown."""

    role: str
    about: str
    text: str
    calls: list[str]
    extra: str
    cut: bool


@dataclass(frozen=True)
class ShownValue:
    """One value of a step's data, pretty-printed; ``cut`` when only a preview is shown.
    ``messages`` when the value is a model conversation, or an object whose ``messages`` are
    one (a chat request, a LangGraph state), shown as such; then ``besides``, the object's
    other keys as JSON. ``folded`` when its messages are shown already (``_fold_repeats``): it
    is shown as recorded, folded away."""

    key: str | None
    text: str
    cut: bool
    size: int
    messages: list[ShownMessage] | None = None
    besides: str = ""
    folded: bool = False


def _pretty(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True, default=str)


#: A list of more messages than this is shown as JSON.
MESSAGES_SHOWN = 200


def _messages(value: Any) -> list[ShownMessage] | None:
    """``value`` as messages when it is a model conversation (``traces.messages``); None
    otherwise, and for more than ``MESSAGES_SHOWN`` messages."""
    found = conversation(value)
    if found is None or len(found) > MESSAGES_SHOWN:
        return None
    return [_message(item) for item in found]


#: The keys of a message shown beside its role: who spoke (a tool's or a participant's name),
#: the call a tool's answer is to, and why a model's answer ended.
_MESSAGE_ABOUT = ("name", "tool_call_id", "finish_reason")


def _message(message: dict[str, Any]) -> ShownMessage:
    """``message`` to show: its text (with the answers of the tool calls among its parts),
    its tool calls (``tool_calls``, or parts that call a tool), who spoke, and the rest of
    what it holds that says something (not null or empty)."""
    text, rest = split_message(message)
    texts = [text] if text else []
    listed = rest.get("tool_calls")
    found = [tool_call(item) for item in listed] if isinstance(listed, list) else []
    calls = [call for call in found if call is not None]
    if found and len(calls) == len(found):
        del rest["tool_calls"]
    else:
        calls = []  # none, or some of a shape not known: all shown as they are
    # OpenAI's function call before its tool calls (LiteLLM still records one so).
    if (called := tool_call(rest.get("function_call"))) is not None:
        calls.append(called)
        del rest["function_call"]
    about = [rest.pop(key) for key in _MESSAGE_ABOUT if isinstance(rest.get(key), str)]
    for key in MESSAGE_BODIES:
        if key not in rest:
            continue
        kept = []
        for part in rest[key]:  # the parts split_message left: those that are not text
            if (call := part_call(part)) is not None:
                calls.append(call)
            elif (answer := part_answer(part)) is not None:
                texts.append(_answer_text(answer[0]))
                about += [answer[1]] if answer[1] else []
            else:
                kept.append(part)
        rest[key] = kept
    rest = {key: item for key, item in rest.items() if item not in (None, "", [], {})}
    shown_text = "\n\n".join(texts)
    return ShownMessage(
        role=message["role"],
        about=" · ".join(about)[:VALUE_PREVIEW_CHARS],
        text=shown_text[:VALUE_PREVIEW_CHARS],
        calls=[_call_text(name, arguments) for name, arguments in calls],
        extra=_pretty(rest)[:VALUE_PREVIEW_CHARS] if rest else "",
        cut=len(shown_text) > VALUE_PREVIEW_CHARS,
    )


def _call_text(name: str, arguments: Any) -> str:
    """A tool call as ``name(arguments)``: the arguments as the model wrote them (JSON text),
    else as compact JSON."""
    if not isinstance(arguments, str):
        arguments = json.dumps(arguments, ensure_ascii=False, sort_keys=True, default=str)
    return f"{name}({arguments})"[:VALUE_PREVIEW_CHARS]


def _answer_text(answer: Any) -> str:
    """A tool's answer in a message's part as text: itself when text, the text of its text
    blocks (Anthropic's), else its JSON."""
    if isinstance(answer, str):
        return answer
    if isinstance(answer, list) and answer:
        blocks = [split_message({"content": [block]})[0] for block in answer]
        if all(blocks):
            return "\n\n".join(blocks)
    return _pretty(answer)


#: The keys of a step's data shown first, in this order (what a tool was given and gave, what
#: a model was asked and answered: a conversation before the request's raw JSON that an
#: instrumentation may send beside it), and last (what an OTel span carried besides); the
#: others between them, as stored. PostgreSQL keeps an object's keys shortest first, not as
#: they were written, so without this a model call's messages came after its attributes.
DATA_SHOWN_FIRST = (
    "tool_name",
    "arguments",
    "result",
    "model",
    "system_instructions",
    "input_messages",
    "output_messages",
    "input",
    "output",
    "messages",
    "usage",
)
DATA_SHOWN_LAST = ("attributes", "events", "links", "otel_span")
#: Each key's place: the first ones below 0, in order, the last ones above, the rest at 0.
_DATA_RANK = {
    key: rank for rank, key in enumerate(DATA_SHOWN_FIRST, start=-len(DATA_SHOWN_FIRST))
} | {key: rank for rank, key in enumerate(DATA_SHOWN_LAST, start=1)}


#: The keys under which an object holds a conversation (a chat request's ``messages``, Google's
#: request's ``contents``, a Haystack chat generator's ``replies``).
_MESSAGE_LISTS = ("messages", "contents", "replies")


def step_detail(*, trace: Trace, step_id: uuid.UUID) -> tuple[dict[str, Any], list[ShownValue]]:
    """A step with its full data (one query), and its data as values to show: one per
    top-level key of an object (in ``DATA_SHOWN_FIRST`` / ``DATA_SHOWN_LAST`` order), else
    one; longer ones cut to ``VALUE_PREVIEW_CHARS``; a model conversation, an object whose
    ``messages`` are one, or a chat completion's response (``answered_in``), as its messages
    too. ``StepNotFound``."""
    row = step_values(Step.objects.for_trace(trace).filter(pk=step_id), full=True).first()
    if row is None:
        raise StepNotFound(f"Step {step_id} does not exist in trace {trace.id}.")
    step = step_from_values(row, full=True)
    data = step["data"]
    items: list[tuple[str | None, Any]] = (
        sorted(data.items(), key=lambda item: _DATA_RANK.get(item[0] or "", 0))
        if isinstance(data, dict) and data
        else [(None, data)]
    )
    shown = []
    for key, value in items:
        text = value if isinstance(value, str) else _pretty(value)
        messages, besides = _messages(value), None
        if key == "system_instructions" and isinstance(value, list | str):
            # The GenAI conventions' system prompt, parts or text: one system message.
            body = "parts" if isinstance(value, list) else "content"
            messages = _messages([{"role": "system", body: value}])
        elif messages is None and isinstance(value, dict):
            # A chat request's messages (Gemini's contents, a Haystack generator's replies), or
            # a response's answers, beside the rest.
            inner = next((key for key in _MESSAGE_LISTS if key in value), "")
            listed = value.get(inner) if inner else None
            if listed is None and (answered := answered_in(value)) is not None:
                inner, listed = answered
            messages = _messages(listed)
            besides = {name: item for name, item in value.items() if name != inner}
        shown.append(
            ShownValue(
                key=key,
                text=text[:VALUE_PREVIEW_CHARS],
                cut=len(text) > VALUE_PREVIEW_CHARS,
                size=len(text.encode()),
                messages=messages,
                besides=_pretty(besides)[:VALUE_PREVIEW_CHARS] if messages and besides else "",
            )
        )
    return step, _fold_repeats(shown)


def _said(messages: list[ShownMessage]) -> list[tuple[str, str, list[str]]]:
    """What ``messages`` say: each one's role, text and calls."""
    return [(message.role, message.text, message.calls) for message in messages]


#: The keys of a step's data whose conversation is the one of another's, when both are one:
#: OpenInference's flattened messages and the request or answer it records beside them (a
#: LangChain model call's ``input`` holds its messages again, an Agno one's with Agno's own
#: fields).
_REPEATS = (("input_messages", "input"), ("output_messages", "output"))


def _fold_repeats(shown: list[ShownValue]) -> list[ShownValue]:
    """``shown`` with a value whose conversation repeats another's (``_REPEATS``: the same
    roles, texts and calls) folded away: every OpenInference model call showed its
    conversation twice."""
    said = {value.key: _said(value.messages) for value in shown if value.messages}
    folded = {
        again for first, again in _REPEATS if first in said and said.get(again) == said[first]
    }
    return [
        replace(value, messages=None, besides="", folded=True) if value.key in folded else value
        for value in shown
    ]


def step_data(*, trace: Trace, step_id: uuid.UUID, key: str | None) -> bytes:
    """A step's data (or one top-level key of it) as JSON bytes, for download.
    ``StepNotFound``, ``StepValueNotFound``."""
    found = Step.objects.for_trace(trace).filter(pk=step_id).values_list("data", flat=True)
    if not found:
        raise StepNotFound(f"Step {step_id} does not exist in trace {trace.id}.")
    data = found[0]
    if key is not None:
        if not isinstance(data, dict) or key not in data:
            raise StepValueNotFound(f"Step {step_id} has no value {key!r}.")
        data = data[key]
    return json_bytes(data)


# --- search and jumps ---------------------------------------------------------------------------


def search_steps(*, trace: Trace, q: str) -> list[dict[str, Any]]:
    """Steps whose name, description, error or data preview contain ``q`` (case-insensitive),
    in seq order, at most ``SEARCH_LIMIT``; collapsed subtrees included (one query)."""
    q = q.replace("\x00", "")
    if not q:
        return []
    matches = Step.objects.for_trace(trace).filter(
        Q(name__icontains=q)
        | Q(description__icontains=q)
        | Q(error__icontains=q)
        | Q(data_preview__icontains=q)
    )
    return [step_from_values(r) for r in step_values(matches.in_order())[:SEARCH_LIMIT]]


def next_step(*, trace: Trace, after_seq: int, kind: str) -> str | None:
    """The id of the next error (``kind="error"``) or slow step (``"slow"``) after
    ``after_seq`` in seq order, wrapping round to the first; None when there is none."""
    in_trace = Step.objects.for_trace(trace)
    steps = (
        in_trace.failed() if kind == "error" else in_trace.filter(duration_ms__gte=SLOW_STEP_MS)
    ).in_order()
    found = steps.filter(seq__gt=after_seq).values_list("id", flat=True).first()
    if found is None:
        found = steps.values_list("id", flat=True).first()
    return str(found) if found else None


# --- the timeline -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Bar:
    step: dict[str, Any]
    left: float
    width: float


@dataclass(frozen=True)
class Gap:
    left: float
    width: float
    idle_ms: int


@dataclass(frozen=True)
class Timeline:
    bars: list[Bar]
    gaps: list[Gap]
    span_ms: int
    shown_ms: int
    cut: bool


def _ms(value: str | None) -> float | None:
    parsed = parse_datetime(value) if value else None
    return parsed.timestamp() * 1000 if parsed else None


def layout_timeline(steps: list[dict[str, Any]], *, compress: bool) -> Timeline:
    """Bars in percent of the width for ``steps`` (with ``started_at`` and ``duration_ms``).

    With ``compress``, idle gaps (where no bar runs) longer than ``GAP_MIN_SHARE`` of the span
    are drawn ``GAP_DRAWN_SHARE`` wide and reported as ``gaps``. Steps without a start are
    left out."""
    opened: list[tuple[dict[str, Any], float, float | None]] = []
    for step in steps:
        start = _ms(step["started_at"])
        if start is None:
            continue
        end = _ms(step["finished_at"])
        if step["duration_ms"] is not None:
            end = start + step["duration_ms"]
        opened.append((step, start, end))
    if not opened:
        return Timeline(bars=[], gaps=[], span_ms=0, shown_ms=0, cut=False)
    t0 = min(s for _, s, _ in opened)
    t1 = max(max(s if e is None else e for _, s, e in opened), t0 + 1)
    # A running step's bar reaches the end; a finished one without timing is a sliver.
    spans = [
        (step, s, e if e is not None else t1 if step.get("status") == "running" else s)
        for step, s, e in opened
    ]
    # Idle intervals: what no bar covers.
    idle: list[tuple[float, float]] = []
    reach = t0
    for _, s, e in sorted(spans, key=lambda x: x[1]):
        if s > reach and s - reach > (t1 - t0) * GAP_MIN_SHARE:
            idle.append((reach, s))
        reach = max(reach, e)
    if not compress:
        idle = []
    idle_total = sum(b - a for a, b in idle)
    busy = (t1 - t0) - idle_total
    drawn_gap = GAP_DRAWN_SHARE * 100
    scale = (100 - drawn_gap * len(idle)) / busy if busy > 0 else 0

    def x(t: float) -> float:
        pos = 0.0
        cursor = t0
        for a, b in idle:
            if t <= a:
                break
            pos += (a - cursor) * scale
            if t < b:
                return pos + drawn_gap * (t - a) / (b - a)
            pos += drawn_gap
            cursor = b
        return pos + (t - cursor) * scale

    bars = [
        Bar(step=step, left=round(x(s), 3), width=round(max(x(e) - x(s), 0.15), 3))
        for step, s, e in spans
    ]
    gaps = [
        Gap(left=round(x(a), 3), width=round(drawn_gap, 3), idle_ms=int(b - a)) for a, b in idle
    ]
    return Timeline(bars=bars, gaps=gaps, span_ms=int(t1 - t0), shown_ms=int(busy), cut=False)


def timeline(*, trace: Trace, compress: bool) -> Timeline:
    """The waterfall of the trace's steps down to ``TIMELINE_DEPTH``, the first
    ``TIMELINE_BARS`` in the tree's order: each step after its parent, siblings in seq order,
    as the tree shows them (seq order alone is not that: OTLP spans come children first). Two
    queries: the steps' places (their paths), then the rows of the first."""
    steps = Step.objects.for_trace(trace).filter(depth__lte=TIMELINE_DEPTH)
    place = {seq: (*path, seq) for seq, path in steps.values_list("seq", "path")}
    first = sorted(place, key=place.__getitem__)[: TIMELINE_BARS + 1]
    chosen = [step_from_values(r) for r in step_values(steps.filter(seq__in=first))]
    rows = sorted(chosen, key=lambda row: place[row["seq"]])
    laid = layout_timeline(rows[:TIMELINE_BARS], compress=compress)
    return Timeline(
        bars=laid.bars,
        gaps=laid.gaps,
        span_ms=laid.span_ms,
        shown_ms=laid.shown_ms,
        cut=len(rows) > TIMELINE_BARS,
    )


# --- export -------------------------------------------------------------------------------------


def _export_chunk(trace_id: uuid.UUID, after_seq: int) -> list[dict[str, Any]]:
    steps = Step.objects.for_trace(trace_id).filter(seq__gt=after_seq).in_order()
    return [step_from_values(r, full=True) for r in step_values(steps, full=True)[:EXPORT_CHUNK]]


async def export_chunks(trace: Trace) -> AsyncIterator[bytes]:
    """The trace as one JSON document, ``{"trace": {...}, "steps": [...]}``, every step with
    its full data in seq order, in pieces of ``EXPORT_CHUNK`` steps (one query each), so a
    trace of any size streams in constant memory. An OTLP trace with log records waiting for
    spans that have not arrived adds them (``"waiting_log_records"``, as the API's
    ``spans``), so the file holds everything stored for the trace."""
    head = json_bytes(trace_dict(trace))
    yield b'{"trace":' + head + b',"steps":['
    after = -1
    first = True
    while True:
        chunk = await sync_to_async(_export_chunk)(trace.id, after)
        if not chunk:
            break
        body = b",".join(json_bytes(step) for step in chunk)
        yield (b"" if first else b",") + body
        first = False
        after = chunk[-1]["seq"]
        if len(chunk) < EXPORT_CHUNK:
            break
    opened = False
    offset: int | None = 0 if trace.is_otlp else None
    while offset is not None:
        waiting = await sync_to_async(waiting_log_records)(trace, offset=offset, limit=EXPORT_CHUNK)
        if waiting.items:
            body = b",".join(json_bytes(span.as_dict()) for span in waiting.items)
            yield (b"," if opened else b'],"waiting_log_records":[') + body
            opened = True
        offset = waiting.next_offset
    yield b"]}"  # the last list (steps or waiting records), the document
