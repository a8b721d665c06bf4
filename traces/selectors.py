"""Reads of the trace browser: the trace list, windows of a trace's tree, search, jumps, the
timeline and the export stream.

Every function here reads; ``traces.store`` remains the only writer. Steps come out in the
projection's shape (``traces.projections.step_from_values``) with a few browser fields added:
``iteration`` (the number of a ``thought`` among its siblings' thoughts), ``repeated`` (an
``action`` whose tool and arguments an earlier action of the trace already used), and for nodes
shown open, ``children`` with the window's ``next_offset``/``remaining`` and ``prev_offset``.
"""

from __future__ import annotations

import itertools
import json
import uuid
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from typing import Any

from asgiref.sync import sync_to_async
from django.db.models import Count, F, Min, OuterRef, Q, QuerySet, Subquery
from django.db.models.expressions import Window
from django.db.models.functions import RowNumber
from django.http import Http404, QueryDict
from django.utils.dateparse import parse_date, parse_datetime

from devassist.responses import json_bytes
from traces.access import can_view
from traces.models import Step, StepStatus, StepType, Trace, TraceMode, TraceStatus
from traces.projections import step_from_values, step_values, trace_dict
from traces.store import (
    InvalidCursor,
    TracePage,
    after_cursor,
    decode_cursor,
    trace_page,
    traces_filtered,
)

#: Children shown per window ("show N more" loads the next one).
WINDOW = 50
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
EXPORT_CHUNK = 1000


# --- the list -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class TraceFilters:
    """The list's filters, each already checked; ``notices`` say which parameters were
    ignored and why."""

    mode: str = ""
    status: str = ""
    agent_type: str = ""
    user: str = ""
    q: str = ""
    since: date | None = None
    until: date | None = None
    cursor: str = ""
    notices: tuple[str, ...] = ()

    def query(self, **changes: Any) -> dict[str, str]:
        """The filters as query parameters (without the cursor unless given)."""
        values = {
            "mode": self.mode,
            "status": self.status,
            "agent_type": self.agent_type,
            "user": self.user,
            "q": self.q,
            "since": self.since.isoformat() if self.since else "",
            "until": self.until.isoformat() if self.until else "",
        }
        values.update(changes)
        return {name: value for name, value in values.items() if value}


def _choice(params: QueryDict, name: str, choices: Iterable[str], notices: list[str]) -> str:
    value = params.get(name, "").strip()
    if value and value not in choices:
        notices.append(f"Ignored {name}={value[:40]!r}: not one of {', '.join(choices)}.")
        return ""
    return value


def _text(params: QueryDict, name: str, limit: int, notices: list[str]) -> str:
    value = params.get(name, "").strip()
    if len(value) > limit:
        notices.append(f"Ignored {name}: longer than {limit} characters.")
        return ""
    if "\x00" in value:
        # PostgreSQL text cannot hold NUL; no stored value contains one.
        notices.append(f"Ignored {name}: it contains a NUL character.")
        return ""
    return value


def _date(params: QueryDict, name: str, notices: list[str]) -> date | None:
    value = params.get(name, "").strip()
    if not value:
        return None
    try:
        parsed = parse_date(value)
    except ValueError:
        parsed = None
    if parsed is None:
        notices.append(f"Ignored {name}={value[:40]!r}: not a date (YYYY-MM-DD).")
    return parsed


def parse_trace_filters(params: QueryDict, *, staff: bool) -> TraceFilters:
    """The list filters of a query string. Malformed or unknown values are dropped with a
    notice, never an error; ``user`` is for staff only."""
    notices: list[str] = []
    user = _text(params, "user", 150, notices)
    if user and not staff:
        notices.append("Ignored user: only staff see other people's traces.")
        user = ""
    since = _date(params, "since", notices)
    until = _date(params, "until", notices)
    if since and until and since > until:
        notices.append("Ignored the time range: 'since' is after 'until'.")
        since = until = None
    cursor = _text(params, "cursor", 200, notices)
    if cursor:
        try:
            decode_cursor(cursor)
        except InvalidCursor:
            notices.append("Ignored cursor: it is not one this page gave; showing the newest.")
            cursor = ""
    return TraceFilters(
        mode=_choice(params, "mode", TraceMode.values, notices),
        status=_choice(params, "status", TraceStatus.values, notices),
        agent_type=_text(params, "agent_type", 100, notices),
        user=user,
        q=_text(params, "q", 500, notices),
        since=since,
        until=until,
        cursor=cursor,
        notices=tuple(notices),
    )


def _day_start(day: date) -> datetime:
    return datetime.combine(day, time.min, tzinfo=UTC)


def trace_list(*, viewer: Any, filters: TraceFilters, limit: int = TRACE_PAGE_SIZE) -> TracePage:
    """A page of the traces ``viewer`` may see, newest first (one query)."""
    qs: QuerySet[Trace] = Trace.objects.visible_to(viewer).select_related("user").newest_first()
    if filters.user:
        qs = qs.filter(user__username=filters.user)
    qs = traces_filtered(
        qs,
        mode=filters.mode,
        status=filters.status,
        agent_type=filters.agent_type,
        q=filters.q,
    )
    if filters.since:
        qs = qs.filter(created_at__gte=_day_start(filters.since))
    if filters.until:
        qs = qs.filter(created_at__lt=_day_start(filters.until) + timedelta(days=1))
    return trace_page(list(after_cursor(qs, filters.cursor)[: limit + 1]), limit)


# --- one trace ----------------------------------------------------------------------------------


def _uuid_or_404(value: str | uuid.UUID) -> uuid.UUID:
    try:
        return value if isinstance(value, uuid.UUID) else uuid.UUID(str(value))
    except ValueError as exc:
        raise Http404("No such trace.") from exc


def trace_for(*, viewer: Any, trace_id: str | uuid.UUID) -> Trace:
    """The trace if ``viewer`` may see it (one query); ``Http404`` for a malformed id, a missing
    trace and someone else's alike."""
    trace = Trace.objects.select_related("user").filter(pk=_uuid_or_404(trace_id)).first()
    if trace is None or not can_view(viewer, trace):
        raise Http404("No such trace.")
    return trace


def parse_step_id(value: str | None) -> uuid.UUID | None:
    """A step id from a query parameter; None when absent or malformed."""
    if not value:
        return None
    try:
        return uuid.UUID(value)
    except ValueError:
        return None


#: Offsets and seqs from query strings are clamped below what a bigint holds.
MAX_QUERY_INT = 2**62


def parse_offset(value: str | None) -> int:
    """A window offset (or seq) from a query parameter; 0 when absent, malformed or negative,
    at most ``MAX_QUERY_INT``."""
    try:
        return min(max(0, int(value or 0)), MAX_QUERY_INT)
    except ValueError:
        return 0


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


def _node(row: dict[str, Any]) -> dict[str, Any]:
    node = step_from_values(row)
    node["iteration"] = row.get("thought_rank") if row["step_type"] == StepType.THOUGHT else None
    node["repeated"] = False
    node["children"] = []
    node["open"] = False
    node["next_offset"] = None
    node["prev_offset"] = None
    node["remaining"] = 0
    node["index"] = None
    return node


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
    """Children ``[offset, offset + WINDOW)`` of a node (top level for None), with the next and
    previous window offsets. One query, and one more to count the earlier thoughts when the
    window starts past the first child and holds a thought."""
    siblings = Step.objects.filter(trace_id=trace.id, parent_id=parent_id)
    nodes = [_node(r) for r in step_values(siblings.order_by("seq"))[offset : offset + WINDOW]]
    for index, node in enumerate(nodes, start=offset):
        node["index"] = index
    before = 0
    if offset and any(n["step_type"] == StepType.THOUGHT for n in nodes):
        before = siblings.filter(step_type=StepType.THOUGHT, seq__lt=nodes[0]["seq"]).count()
    _number_iterations(nodes, before)
    end = offset + len(nodes)
    prev = max(0, offset - WINDOW) if offset > 0 else None
    return nodes, (end if end < total else None), prev


def _open(node: dict[str, Any], children: list[dict[str, Any]], next_offset: int | None) -> None:
    node["open"] = True
    node["children"] = children
    node["next_offset"] = next_offset
    node["remaining"] = node["children_count"] - (next_offset or 0) if next_offset else 0


def _auto_expand(trace: Trace, level: list[dict[str, Any]], budget: int) -> int:
    """Open ``level``'s nodes breadth first, one query per level, while the rows stay within
    ``budget``; returns the rows added."""
    added = 0
    for _depth in range(AUTO_EXPAND_DEPTH):
        frontier = {n["step_id"]: n for n in level if n["has_children"] and not n["open"]}
        cost = sum(min(n["children_count"], WINDOW) for n in frontier.values())
        if not frontier or added + cost > budget:
            break
        # The first WINDOW children of each frontier node: ranked by id alone, then fetched, so
        # a node with thousands of children costs an index scan, not thousands of projections
        # (and a lone node, as the goal usually is, needs no ranking at all).
        in_frontier = Step.objects.filter(trace_id=trace.id, parent_id__in=list(frontier))
        if len(frontier) == 1:
            first_ids = in_frontier.order_by("seq").values("pk")[:WINDOW]
        else:
            first_ids = (
                in_frontier.annotate(
                    sibling_rank=Window(
                        RowNumber(), partition_by=[F("parent_id")], order_by=F("seq").asc()
                    )
                )
                .filter(sibling_rank__lte=WINDOW)
                .values("pk")
            )
        rows = step_values(Step.objects.filter(pk__in=first_ids).order_by("seq"))
        children: dict[str, list[dict[str, Any]]] = {sid: [] for sid in frontier}
        level = []
        for row in rows:
            child = _node(row)
            children[child["parent_id"]].append(child)
            level.append(child)
        for group in children.values():
            _number_iterations(group, 0)
            for index, node in enumerate(group):
                node["index"] = index
        for sid, node in frontier.items():
            shown = len(children[sid])
            _open(node, children[sid], shown if shown < node["children_count"] else None)
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
        Step.objects.filter(
            trace_id=trace.id,
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
        target = step_values(Step.objects.filter(trace_id=trace.id, pk=step_id), full=True).first()
        if target is None:
            notices.append("That step is not in this trace; showing the trace from the top.")
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


def _path_view(trace: Trace, target: dict[str, Any]) -> TreeView:
    chain_seqs = [*target["path"], target["seq"]]
    earlier = Step.objects.filter(
        trace_id=trace.id, parent_id=OuterRef("parent_id"), seq__lt=OuterRef("seq")
    )
    ranks = {
        r["seq"]: r
        for r in Step.objects.filter(trace_id=trace.id, seq__in=chain_seqs)
        .annotate(
            rank=Subquery(
                earlier.order_by().values("trace_id").annotate(n=Count("pk")).values("n")[:1]
            )
        )
        .values("seq", "id", "children_count", "rank")
    }
    chain = [ranks[s] for s in chain_seqs if s in ranks]

    def window_at(parent_id: uuid.UUID | None, rank: int, total: int) -> tuple[Any, ...]:
        offset = (rank // WINDOW) * WINDOW
        nodes, nxt, prev = _window(trace, parent_id, offset, total)
        return nodes, nxt, prev

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


def child_window(*, trace: Trace, parent_id: uuid.UUID | None, offset: int) -> ChildWindow:
    """A window of a node's children for "show more" and lazy expansion (2 or 3 queries).
    ``Http404`` for a step that is not in the trace."""
    if parent_id is None:
        total = trace.root_count
    else:
        count = (
            Step.objects.filter(trace_id=trace.id, pk=parent_id)
            .values_list("children_count", flat=True)
            .first()
        )
        if count is None:
            raise Http404("No such step.")
        total = count
    children, nxt, prev = _window(trace, parent_id, offset, total)
    _mark_repeats(trace, children)
    return ChildWindow(
        children=children,
        next_offset=nxt,
        prev_offset=prev,
        remaining=total - nxt if nxt is not None else 0,
    )


def steps_by_id(*, trace: Trace, ids: Iterable[uuid.UUID]) -> list[dict[str, Any]]:
    """Skeletons of the given steps of the trace, in seq order (the live view's new and
    changed rows), thoughts numbered among their siblings (one query, two with actions)."""
    thoughts_so_far = Step.objects.filter(
        trace_id=trace.id,
        parent_id=OuterRef("parent_id"),
        step_type=StepType.THOUGHT,
        seq__lte=OuterRef("seq"),
    )
    rows = step_values(
        Step.objects.filter(trace_id=trace.id, pk__in=list(ids)).order_by("seq")
    ).annotate(
        thought_rank=Subquery(
            thoughts_so_far.order_by().values("trace_id").annotate(n=Count("pk")).values("n")[:1]
        )
    )
    nodes = [_node(r) for r in rows]
    _mark_repeats(trace, nodes)
    return nodes


# --- a step's detail ----------------------------------------------------------------------------


@dataclass(frozen=True)
class ShownValue:
    """One value of a step's data, pretty-printed; ``cut`` when only a preview is shown."""

    key: str | None
    text: str
    cut: bool
    size: int


def _pretty(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True, default=str)


def step_detail(*, trace: Trace, step_id: uuid.UUID) -> tuple[dict[str, Any], list[ShownValue]]:
    """A step with its full data (one query), and its data as values to show: one per
    top-level key of an object, else one; longer ones cut to ``VALUE_PREVIEW_CHARS``."""
    row = step_values(Step.objects.filter(trace_id=trace.id, pk=step_id), full=True).first()
    if row is None:
        raise Http404("No such step.")
    step = step_from_values(row, full=True)
    data = step["data"]
    items: list[tuple[str | None, Any]] = (
        list(data.items()) if isinstance(data, dict) and data else [(None, data)]
    )
    shown = []
    for key, value in items:
        text = value if isinstance(value, str) else _pretty(value)
        shown.append(
            ShownValue(
                key=key,
                text=text[:VALUE_PREVIEW_CHARS],
                cut=len(text) > VALUE_PREVIEW_CHARS,
                size=len(text.encode()),
            )
        )
    return step, shown


def step_data(*, trace: Trace, step_id: uuid.UUID, key: str | None) -> bytes:
    """A step's data (or one top-level key of it) as JSON bytes, for download."""
    data = Step.objects.filter(trace_id=trace.id, pk=step_id).values_list("data", flat=True).first()
    if data is None and not Step.objects.filter(trace_id=trace.id, pk=step_id).exists():
        raise Http404("No such step.")
    if key is not None:
        if not isinstance(data, dict) or key not in data:
            raise Http404("No such value.")
        data = data[key]
    return json_bytes(data)


# --- search and jumps ---------------------------------------------------------------------------


def _errors() -> Q:
    return Q(status=StepStatus.FAILED) | ~Q(error="")


def search_steps(*, trace: Trace, q: str) -> list[dict[str, Any]]:
    """Steps whose name, description, error or data preview contain ``q`` (case-insensitive),
    in seq order, at most ``SEARCH_LIMIT``; collapsed subtrees included (one query)."""
    q = q.replace("\x00", "")
    if not q:
        return []
    matches = Step.objects.filter(trace_id=trace.id).filter(
        Q(name__icontains=q)
        | Q(description__icontains=q)
        | Q(error__icontains=q)
        | Q(data_preview__icontains=q)
    )
    return [step_from_values(r) for r in step_values(matches.order_by("seq"))[:SEARCH_LIMIT]]


def next_step(*, trace: Trace, after_seq: int, kind: str) -> str | None:
    """The id of the next error (``kind="error"``) or slow step (``"slow"``) after
    ``after_seq`` in seq order, wrapping round to the first; None when there is none."""
    condition = _errors() if kind == "error" else Q(duration_ms__gte=SLOW_STEP_MS)
    steps = Step.objects.filter(trace_id=trace.id).filter(condition).order_by("seq")
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
    ``TIMELINE_BARS`` in seq order (one query)."""
    steps = Step.objects.filter(trace_id=trace.id, depth__lte=TIMELINE_DEPTH).order_by("seq")
    rows = [step_from_values(r) for r in step_values(steps)[: TIMELINE_BARS + 1]]
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
    steps = Step.objects.filter(trace_id=trace_id, seq__gt=after_seq).order_by("seq")
    return [step_from_values(r, full=True) for r in step_values(steps, full=True)[:EXPORT_CHUNK]]


async def export_chunks(trace: Trace) -> AsyncIterator[bytes]:
    """The trace as one JSON document, ``{"trace": {...}, "steps": [...]}``, every step with
    its full data in seq order, in pieces of ``EXPORT_CHUNK`` steps (one query each), so a
    trace of any size streams in constant memory."""
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
    yield b"]}"
