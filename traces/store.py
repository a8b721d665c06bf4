"""The trace store: the only writer of traces and steps and the only broadcaster of their events.

``TraceStore`` is the async protocol agents and views use; ``OrmTraceStore`` implements it on the
Django ORM. Writes lock the trace row (``SELECT ... FOR UPDATE``), so per trace they are
serialised: a step's ``seq`` is the ``seq`` of its ``step_added`` event, both come from
``Trace.last_seq``, and seq order is commit order. Events are broadcast to the channel group
``trace.<id>`` only after their transaction commits.
"""

from __future__ import annotations

import itertools
import threading
import uuid
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from functools import lru_cache
from http import HTTPStatus
from typing import Any, Protocol

import structlog
from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import connection, models, transaction
from django.db.models import F, Q, QuerySet
from django.db.models.expressions import Window
from django.db.models.functions import RowNumber
from django.utils import timezone
from django.utils.module_loading import import_string

from devassist import cursors, db
from devassist.db import (
    PLACEHOLDER_STEP,
    PLACEHOLDER_TRACE,
    PLACEHOLDER_USER,
    CompiledSelect,
    bind,
    placeholder_ids,
)
from devassist.errors import ApiError, BadRequest, Conflict, NotFound, PayloadTooLarge
from devassist.follow import broadcast
from traces.models import (
    FINAL_TRACE_STATUSES,
    Step,
    StepStatus,
    StepType,
    Trace,
    TraceEvent,
    TraceMode,
    TraceStatus,
)
from traces.projections import (
    data_summary,
    step_dict,
    step_from_values,
    step_values,
    trace_dict,
    trace_totals,
)

logger = structlog.get_logger(__name__)

#: The deepest a tree or node read nests (``max_depth``), the same for both endpoints.
MAX_DEPTH = 10
#: Costs are stored as numeric(20, 8): each step's, each subtree's and each trace's total stay
#: below this.
COST_LIMIT = Decimal(10**12)


# --- errors -------------------------------------------------------------------------------------


class TraceNotFound(NotFound):
    code = "trace_not_found"


class StepNotFound(NotFound):
    code = "step_not_found"


class TraceNotRunning(Conflict):
    code = "trace_not_running"


class StepIdConflict(Conflict):
    code = "step_id_conflict"


class InvalidParent(BadRequest):
    code = "invalid_parent"


class InvalidStep(BadRequest):
    code = "invalid_step"


class BatchTooLarge(PayloadTooLarge):
    code = "batch_too_large"


class TreeTooLarge(PayloadTooLarge):
    code = "tree_too_large"


class CostOutOfRange(ApiError):
    status = HTTPStatus.UNPROCESSABLE_ENTITY
    code = "cost_out_of_range"


class InvalidCursor(BadRequest):
    code = "validation_error"
    status = HTTPStatus.UNPROCESSABLE_ENTITY


# --- values crossing the store boundary ---------------------------------------------------------


@dataclass(frozen=True)
class StepCreate:
    """A step to add. ``id`` may be chosen by the client (re-sending one that is stored is a
    no-op); ``parent_id`` must exist in the trace or come earlier in the same batch."""

    step_type: str
    id: uuid.UUID = field(default_factory=uuid.uuid4)
    parent_id: uuid.UUID | None = None
    status: str = StepStatus.COMPLETED
    name: str = ""
    description: str = ""
    data: Any = field(default_factory=dict)
    error: str = ""
    started_at: datetime | None = None
    finished_at: datetime | None = None
    duration_ms: int | None = None
    tokens: int = 0
    cost: Decimal = Decimal(0)


#: Fields ``update_step`` accepts.
UPDATABLE_STEP_FIELDS = frozenset(
    {
        "status",
        "name",
        "description",
        "data",
        "error",
        "started_at",
        "finished_at",
        "duration_ms",
        "tokens",
        "cost",
    }
)


#: Fields an update may not set to null (the texts take null as "").
_NOT_NULL_STEP_FIELDS = frozenset({"status", "tokens", "cost", "data"})


@dataclass(frozen=True)
class AddedSteps:
    """The batch's steps in batch order (stored ones for re-sent ids) and how many are new."""

    steps: list[Step]
    created: int


@dataclass(frozen=True)
class TracePage:
    traces: list[Trace]
    next_cursor: str | None


@dataclass(frozen=True)
class StepWindow:
    """A node (None for the top level) with a window of its children, nested to a depth."""

    step: dict[str, Any] | None
    children: list[dict[str, Any]]
    total_children: int
    next_offset: int | None


class TraceStore(Protocol):
    async def create_trace(
        self,
        *,
        user: Any,
        task: str,
        mode: str = TraceMode.AGENT,
        agent_type: str = "devassist",
        metadata: dict[str, Any] | None = None,
    ) -> Trace: ...

    def open_trace_sync(
        self,
        trace: Trace,
        steps: Sequence[StepCreate] = (),
        *,
        with_writes: Sequence[db.Statement] = (),
    ) -> list[dict[str, Any]]: ...

    async def publish(self, trace_id: uuid.UUID, events: Iterable[dict[str, Any]]) -> None: ...

    def add_steps_sync(
        self,
        trace_id: uuid.UUID,
        steps: Sequence[StepCreate],
        updates: Mapping[uuid.UUID, dict[str, Any]] | None = None,
        with_rows: Sequence[models.Model] = (),
        *,
        with_writes: Sequence[db.Statement] = (),
        complete: str | None = None,
        total_duration_ms: int | None = None,
    ) -> tuple[AddedSteps, list[dict[str, Any]]]: ...

    async def get_trace(self, trace_id: uuid.UUID) -> Trace: ...

    async def list_traces(
        self,
        *,
        user: Any | None,
        mode: str | None = None,
        status: str | None = None,
        agent_type: str | None = None,
        q: str | None = None,
        limit: int = 20,
        cursor: str | None = None,
    ) -> TracePage: ...

    async def add_steps(
        self,
        trace_id: uuid.UUID,
        steps: Sequence[StepCreate],
        *,
        updates: Mapping[uuid.UUID, dict[str, Any]] | None = None,
        with_rows: Sequence[models.Model] = (),
        with_writes: Sequence[db.Statement] = (),
        complete: str | None = None,
    ) -> AddedSteps: ...

    async def add_step(self, trace_id: uuid.UUID, step: StepCreate) -> Step: ...

    async def update_step(
        self, trace_id: uuid.UUID, step_id: uuid.UUID, changes: dict[str, Any]
    ) -> Step: ...

    async def get_step(self, trace_id: uuid.UUID, step_id: uuid.UUID) -> Step: ...

    async def get_children(
        self, trace_id: uuid.UUID, parent_id: uuid.UUID | None, *, offset: int = 0, limit: int = 100
    ) -> tuple[list[Step], int]: ...

    async def get_subtree(
        self,
        trace_id: uuid.UUID,
        step_id: uuid.UUID | None,
        *,
        viewer: Any | None = None,
        max_depth: int = 1,
        offset: int = 0,
        limit: int = 100,
        full: bool = False,
    ) -> StepWindow: ...

    async def get_tree(
        self,
        trace: Trace,
        *,
        max_depth: int | None = None,
        full: bool = False,
        max_steps: int | None = None,
    ) -> list[dict[str, Any]]: ...

    async def complete_trace(
        self,
        trace_id: uuid.UUID,
        *,
        status: str = TraceStatus.COMPLETED,
        total_duration_ms: int | None = None,
    ) -> Trace: ...

    async def events_after(
        self, trace_id: uuid.UUID, after_seq: int, *, limit: int = 1000, up_to: int | None = None
    ) -> list[dict[str, Any]]: ...


# --- helpers ------------------------------------------------------------------------------------


def group_name(trace_id: uuid.UUID | str) -> str:
    return f"trace.{trace_id}"


def encode_cursor(created_at: datetime, trace_id: uuid.UUID) -> str:
    return cursors.encode_cursor(created_at, trace_id)


def decode_cursor(cursor: str) -> tuple[datetime, uuid.UUID]:
    try:
        return cursors.decode_cursor(cursor)
    except ValueError as exc:
        raise InvalidCursor(
            "Invalid cursor: pass back the next_cursor of a previous page.",
            details={"errors": [{"loc": ["query", "cursor"], "msg": "invalid cursor"}]},
        ) from exc


def traces_filtered(
    qs: QuerySet[Trace],
    *,
    mode: str | None = None,
    status: str | None = None,
    agent_type: str | None = None,
    q: str | None = None,
) -> QuerySet[Trace]:
    """``qs`` narrowed by the list filters the API and the trace browser share."""
    if mode:
        qs = qs.filter(mode=mode)
    if status:
        qs = qs.filter(status=status)
    if agent_type:
        qs = qs.filter(agent_type=agent_type)
    if q:
        qs = qs.filter(task__icontains=q)
    return qs


def after_cursor(qs: QuerySet[Trace], cursor: str | None) -> QuerySet[Trace]:
    """The traces of a newest-first ``qs`` that come after ``cursor``. Raises
    ``InvalidCursor``."""
    if not cursor:
        return qs
    created_at, last_id = decode_cursor(cursor)
    return qs.filter(Q(created_at__lt=created_at) | Q(created_at=created_at, id__lt=last_id))


def trace_page(rows: list[Trace], limit: int) -> TracePage:
    """A page from up to ``limit + 1`` rows: the extra one says that a next page exists."""
    if len(rows) <= limit:
        return TracePage(traces=rows, next_cursor=None)
    rows = rows[:limit]
    return TracePage(traces=rows, next_cursor=encode_cursor(rows[-1].created_at, rows[-1].id))


def _is_error(status: str, error: str) -> bool:
    return status == StepStatus.FAILED or bool(error)


def _duration(
    started_at: datetime | None, finished_at: datetime | None, duration_ms: int | None
) -> int | None:
    if duration_ms is not None:
        return duration_ms
    if started_at and finished_at and finished_at >= started_at:
        return int((finished_at - started_at).total_seconds() * 1000)
    return None


@dataclass
class _Delta:
    steps: int = 0
    errors: int = 0
    tokens: int = 0
    cost: Decimal = Decimal(0)
    children: int = 0


def _rollup_writes(trace_id: uuid.UUID, deltas: dict[int, _Delta]) -> list[db.Statement]:
    """The UPDATEs that add rollup deltas to existing steps, keyed by seq, one per 500 steps.

    Plain SQL (a VALUES list joined in; PostgreSQL and SQLite both take it): every write to a
    trace runs this, and compiling the equivalent CASE expressions cost Django more than the
    statement costs the database."""
    rows = [(seq, d) for seq, d in deltas.items() if d != _Delta()]
    if not rows:
        return []
    ops = connection.ops
    table = ops.quote_name(Step._meta.db_table)
    trace_value = Step._meta.get_field("trace").target_field.get_db_prep_value(trace_id, connection)
    statements = []
    for start in range(0, len(rows), 500):
        chunk = rows[start : start + 500]
        values = ", ".join(["(%s, %s, %s, %s, %s, %s)"] * len(chunk))
        params: list[Any] = []
        for seq, d in chunk:
            cost = ops.adapt_decimalfield_value(d.cost, 20, 8)
            params += [seq, d.steps, d.errors, d.tokens, cost, d.children]
        # Only placeholders and the quoted table name are formatted in; values are parameters.
        sql = (
            f"WITH d(seq, steps, errors, tokens, cost, children) AS (VALUES {values}) "  # noqa: S608
            f"UPDATE {table} SET subtree_steps = subtree_steps + d.steps, "
            "subtree_error_count = subtree_error_count + d.errors, "
            "subtree_tokens = subtree_tokens + d.tokens, "
            "subtree_cost = subtree_cost + d.cost, "
            "children_count = children_count + d.children "
            f"FROM d WHERE {table}.trace_id = %s AND {table}.seq = d.seq"
        )
        statements.append(db.Statement(sql, [*params, trace_value]))
    return statements


#: Rollups change only by relative writes (``_rollup_writes``), never by setting a value.
_SUBTREE_FIELDS = frozenset({"subtree_error_count", "subtree_tokens", "subtree_cost"})
_STEP_TYPES = frozenset(StepType.values)
_STEP_STATUSES = frozenset(StepStatus.values)

#: The trace counters every write may change.
_TRACE_COUNTERS = ["last_seq", "total_tokens", "total_cost", "error_count"]


def _check_changes(changes: dict[str, Any]) -> None:
    """Refuse an update ``update_step`` cannot apply (before any lock is taken)."""
    unknown = set(changes) - UPDATABLE_STEP_FIELDS
    if unknown:
        raise InvalidStep(f"These fields cannot be updated: {', '.join(sorted(unknown))}.")
    if not changes:
        raise InvalidStep("Nothing to update: send at least one field.")
    nulls = sorted(n for n in _NOT_NULL_STEP_FIELDS if n in changes and changes[n] is None)
    if nulls:
        raise InvalidStep(f"These fields cannot be null: {', '.join(nulls)}.")
    if "status" in changes and changes["status"] not in StepStatus.values:
        raise InvalidStep(f"Unknown status {changes['status']!r}.")


@lru_cache(maxsize=4)
def _lock_query(vendor: str, skip_flush_wait: bool) -> CompiledSelect:
    query = CompiledSelect.of(
        Trace.objects.select_for_update().filter(pk=PLACEHOLDER_TRACE).order_by()
    )
    # The transaction's first statement: the durability setting travels with it.
    return query.prefixed(db.SKIP_FLUSH_WAIT) if skip_flush_wait else query


@lru_cache(maxsize=64)
def _nodes_query(vendor: str, count: int) -> CompiledSelect:
    """Where steps sit in their trees: enough of a step to be a parent."""
    return CompiledSelect.of(
        Step.objects.filter(pk__in=placeholder_ids(count))
        .only("id", "trace_id", "seq", "depth", "path")
        .order_by()
    )


@lru_cache(maxsize=2)
def _step_query(vendor: str) -> CompiledSelect:
    return CompiledSelect.of(
        Step.objects.filter(trace_id=PLACEHOLDER_TRACE, pk=PLACEHOLDER_STEP).order_by()
    )


def _locked_running_trace(trace_id: uuid.UUID, *, skip_flush_wait: bool = False) -> Trace:
    """The trace, locked until the transaction ends; raises unless it is running. With
    ``skip_flush_wait``, the transaction commits without waiting for the disk
    (``devassist.db.skip_flush_wait``, in the same round trip)."""
    query = _lock_query(connection.vendor, skip_flush_wait and db.flush_wait_skippable())
    found = query.instances(Trace, {PLACEHOLDER_TRACE: trace_id})
    trace = found[0] if found else None
    if trace is None:
        raise TraceNotFound(f"Trace {trace_id} does not exist.")
    if not trace.is_running:
        raise TraceNotRunning(
            f"Trace {trace_id} is {trace.status}; it takes no more changes.",
            details={"status": trace.status},
        )
    return trace


#: What completing a trace changes besides ``last_seq``.
_COMPLETION_FIELDS = ["status", "completed_at", "total_duration_ms"]


def _check_final(status: str) -> None:
    if status not in FINAL_TRACE_STATUSES:
        raise BadRequest(f"A trace completes as one of {', '.join(FINAL_TRACE_STATUSES)}.")


def _check_total_cost(trace: Trace) -> None:
    """Refuse a write that would take the trace's total cost (every subtree's is at most
    that) past what its column holds; nothing has been written yet."""
    if trace.total_cost >= COST_LIMIT:
        raise CostOutOfRange(
            f"The trace's total cost would reach {trace.total_cost}; it must stay below "
            f"{COST_LIMIT}.",
            details={"limit": float(COST_LIMIT), "total_cost": float(trace.total_cost)},
        )


def _completed(trace: Trace, status: str, total_duration_ms: int | None) -> TraceEvent:
    """Finish the locked ``trace`` as ``status`` (its ``_COMPLETION_FIELDS`` and ``last_seq``,
    in memory; the caller writes them) and return its ``trace_completed`` event, unsaved."""
    now = timezone.now()
    trace.status = status
    trace.completed_at = now
    if total_duration_ms is None:
        total_duration_ms = int((now - trace.created_at).total_seconds() * 1000)
    trace.total_duration_ms = total_duration_ms
    trace.last_seq += 1
    payload = {"trace": trace_dict(trace)}
    return TraceEvent(trace=trace, seq=trace.last_seq, event="trace_completed", payload=payload)


@dataclass(frozen=True)
class _Extra:
    """What a batch of steps writes besides them (``OrmTraceStore.add_steps``)."""

    with_rows: Sequence[models.Model] = ()
    with_writes: Sequence[db.Statement] = ()
    complete: str | None = None
    total_duration_ms: int | None = None


def _step_event(event: str, seq: int, trace: Trace, **payload: Any) -> TraceEvent:
    return TraceEvent(
        trace=trace, seq=seq, event=event, payload={**payload, "totals": trace_totals(trace)}
    )


# The node endpoint is the one the trace browser calls on every expand; compiling its two
# queries (nine SQL expressions each) costs Django about 2 ms apiece on a small machine, more
# than running them. Their compact forms are compiled once per shape, with placeholders for the
# ids, and run again with the real ones.


@lru_cache(maxsize=256)
def _compiled_window(kind: str, restricted: bool, offset: int, limit: int) -> tuple[str, tuple]:
    """SQL and parameters of the compact ``node`` row, or a window of ``roots`` or
    ``children``, with the placeholders in the parameters."""
    steps = Step.objects.filter(trace_id=PLACEHOLDER_TRACE)
    if kind == "node":
        rows = steps.filter(pk=PLACEHOLDER_STEP)
        if restricted:
            rows = rows.filter(trace__user_id=PLACEHOLDER_USER)
    elif kind == "roots":
        rows = steps.filter(parent__isnull=True).order_by("seq")
    else:
        rows = steps.filter(parent_id=PLACEHOLDER_STEP).order_by("seq")
    sql, params = step_values(rows)[offset : offset + limit].query.sql_with_params()
    return sql, tuple(params)


def _run_compiled(
    compiled_window: tuple[str, tuple], binding: dict[Any, Any]
) -> list[dict[str, Any]]:
    """Run a ``_compiled_window`` with the stand-ins replaced by ``binding``'s values."""
    sql, params = compiled_window
    with connection.cursor() as cursor:
        cursor.execute(sql, bind(params, binding))
        names = [column[0] for column in cursor.description]
        return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]


def event_dict(event: TraceEvent) -> dict[str, Any]:
    return {"event": event.event, "seq": event.seq, **event.payload}


# --- the ORM store ------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Position:
    """Where a stored step sits: what a child needs of its parent."""

    id: uuid.UUID
    trace_id: uuid.UUID
    seq: int
    depth: int
    path: list[int]


class _Positions:
    """Positions of committed steps, least recently used forgotten first. A step never moves
    and is only ever deleted with its trace, so a remembered position stays true; it lets a
    batch whose parents are all known skip looking them up (``OrmTraceStore.add_steps_sync``).
    Thread-safe."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._known: OrderedDict[uuid.UUID, _Position] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, ids: Iterable[uuid.UUID]) -> dict[uuid.UUID, _Position]:
        with self._lock:
            found = {i: self._known[i] for i in ids if i in self._known}
            for i in found:
                self._known.move_to_end(i)
        return found

    def remember(self, steps: Iterable[Step]) -> None:
        with self._lock:
            for step in steps:
                self._known[step.id] = _Position(
                    step.id, step.trace_id, step.seq, step.depth, list(step.path)
                )
                self._known.move_to_end(step.id)
            while len(self._known) > self.size:
                self._known.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._known.clear()


_positions = _Positions(20_000)


class _ResentIds(Exception):
    """A batch written on the assumption that its ids are new met stored ones."""


class OrmTraceStore:
    """``TraceStore`` on the Django ORM (PostgreSQL in production, SQLite for ``make run``)."""

    # -- traces --

    async def create_trace(
        self,
        *,
        user: Any,
        task: str,
        mode: str = TraceMode.AGENT,
        agent_type: str = "devassist",
        metadata: dict[str, Any] | None = None,
    ) -> Trace:
        trace = Trace(
            user=user, task=task, mode=mode, agent_type=agent_type, metadata=metadata or {}
        )
        await db.in_thread(self.open_trace_sync, trace)
        return trace

    def open_trace_sync(
        self,
        trace: Trace,
        steps: Sequence[StepCreate] = (),
        *,
        with_writes: Sequence[db.Statement] = (),
    ) -> list[dict[str, Any]]:
        """Store ``trace`` (a new, unsaved instance) with its first ``steps`` (each a root or
        a child of an earlier step of the batch) and ``with_writes`` (other apps' writes that
        must commit with it or not at all, such as the run that owns the trace), all in one
        round trip, in the caller's transaction (or one of its own). Returns the trace's
        events, to ``publish`` once that transaction has committed. Raises
        ``BatchTooLarge``, ``InvalidStep``, ``InvalidParent``; a rejected trace writes
        nothing."""
        if len(steps) > settings.TRACE_BATCH_MAX_STEPS:
            raise BatchTooLarge(
                f"A batch holds at most {settings.TRACE_BATCH_MAX_STEPS} steps, got {len(steps)}.",
                details={"max_steps": settings.TRACE_BATCH_MAX_STEPS, "got": len(steps)},
            )
        _, new_steps, events, _, _ = self._build_batch(trace, steps, assume_new=True)
        _check_total_cost(trace)
        with transaction.atomic():
            db.run(
                [
                    *db.insert_statements([trace]),
                    *db.insert_statements(new_steps),
                    *db.insert_statements(events),
                    *with_writes,
                ]
            )
            transaction.on_commit(lambda: _positions.remember(new_steps))
        logger.info(
            "trace_created", trace_id=str(trace.id), mode=trace.mode, agent_type=trace.agent_type
        )
        return [event_dict(event) for event in events]

    async def get_trace(self, trace_id: uuid.UUID) -> Trace:
        trace = await Trace.objects.select_related("user").filter(pk=trace_id).afirst()
        if trace is None:
            raise TraceNotFound(f"Trace {trace_id} does not exist.")
        return trace

    async def list_traces(
        self,
        *,
        user: Any | None,
        mode: str | None = None,
        status: str | None = None,
        agent_type: str | None = None,
        q: str | None = None,
        limit: int = 20,
        cursor: str | None = None,
    ) -> TracePage:
        """Newest first; ``user=None`` lists everyone's traces."""
        qs: QuerySet[Trace] = Trace.objects.select_related("user").newest_first()
        if user is not None:
            qs = qs.filter(user=user)
        qs = traces_filtered(qs, mode=mode, status=status, agent_type=agent_type, q=q)
        rows = [trace async for trace in after_cursor(qs, cursor)[: limit + 1]]
        return trace_page(rows, limit)

    async def complete_trace(
        self,
        trace_id: uuid.UUID,
        *,
        status: str = TraceStatus.COMPLETED,
        total_duration_ms: int | None = None,
    ) -> Trace:
        trace, events = await db.in_thread(
            self._complete_trace, trace_id, status, total_duration_ms
        )
        await self.publish(trace_id, events)
        return trace

    def _complete_trace(
        self, trace_id: uuid.UUID, status: str, total_duration_ms: int | None
    ) -> tuple[Trace, list[dict[str, Any]]]:
        _, events = self.add_steps_sync(
            trace_id, [], complete=status, total_duration_ms=total_duration_ms
        )
        return Trace.objects.select_related("user").get(pk=trace_id), events

    # -- steps: writes --

    async def add_step(self, trace_id: uuid.UUID, step: StepCreate) -> Step:
        return (await self.add_steps(trace_id, [step])).steps[0]

    async def add_steps(
        self,
        trace_id: uuid.UUID,
        steps: Sequence[StepCreate],
        *,
        updates: Mapping[uuid.UUID, dict[str, Any]] | None = None,
        with_rows: Sequence[models.Model] = (),
        with_writes: Sequence[db.Statement] = (),
        complete: str | None = None,
    ) -> AddedSteps:
        """Add a batch atomically, then apply ``updates`` (step id → changes, as
        ``update_step`` takes them), insert ``with_rows`` (new model instances of other apps
        that must commit with these steps or not at all, such as the run's event for a
        finished step) and run ``with_writes`` (other apps' writes, such as the run's end) in
        the same transaction. With ``complete`` (a final status) the batch also completes the
        trace, as ``complete_trace`` does, and commits durably. Raises ``BatchTooLarge``,
        ``InvalidParent``, ``StepIdConflict``, ``InvalidStep``, ``StepNotFound``,
        ``TraceNotFound``, ``TraceNotRunning``, ``BadRequest`` (a status that is not final); a
        rejected batch writes nothing."""
        result, events = await db.in_thread(
            self.add_steps_sync,
            trace_id,
            steps,
            updates,
            with_rows,
            with_writes=with_writes,
            complete=complete,
        )
        await self.publish(trace_id, events)
        return result

    def add_steps_sync(
        self,
        trace_id: uuid.UUID,
        steps: Sequence[StepCreate],
        updates: Mapping[uuid.UUID, dict[str, Any]] | None = None,
        with_rows: Sequence[models.Model] = (),
        *,
        with_writes: Sequence[db.Statement] = (),
        complete: str | None = None,
        total_duration_ms: int | None = None,
    ) -> tuple[AddedSteps, list[dict[str, Any]]]:
        """The synchronous core of ``add_steps``; returns the steps and the committed events
        (empty while an outer transaction is still open). ``total_duration_ms``: the
        completed trace's duration, when not the time since it was created."""
        if len(steps) > settings.TRACE_BATCH_MAX_STEPS:
            raise BatchTooLarge(
                f"A batch holds at most {settings.TRACE_BATCH_MAX_STEPS} steps, got {len(steps)}.",
                details={"max_steps": settings.TRACE_BATCH_MAX_STEPS, "got": len(steps)},
            )
        updates = updates or {}
        for changes in updates.values():
            _check_changes(changes)
        if complete is not None:
            _check_final(complete)
        if not steps and not updates and not with_rows and not with_writes and complete is None:
            return AddedSteps(steps=[], created=0), []
        extra = _Extra(
            with_rows=with_rows,
            with_writes=with_writes,
            complete=complete,
            total_duration_ms=total_duration_ms,
        )
        try:
            return self._add_steps_once(trace_id, steps, updates, extra, assume_new=True)
        except _ResentIds:
            return self._add_steps_once(trace_id, steps, updates, extra, assume_new=False)

    def _add_steps_once(
        self,
        trace_id: uuid.UUID,
        steps: Sequence[StepCreate],
        updates: Mapping[uuid.UUID, dict[str, Any]],
        extra: _Extra,
        *,
        assume_new: bool,
    ) -> tuple[AddedSteps, list[dict[str, Any]]]:
        """One try at ``add_steps_sync``. With ``assume_new``, when every parent's position
        is known, the steps are taken for new without looking them up, and ``_ResentIds``
        (the transaction rolled back) says they were not."""
        committed: list[dict[str, Any]] = []
        with transaction.atomic():
            # A run's steps need not wait for the disk; the trace's end does.
            trace = _locked_running_trace(trace_id, skip_flush_wait=extra.complete is None)
            stored, new_steps, events, deltas, assumed = self._build_batch(
                trace, steps, assume_new=assume_new
            )
            rollups = _rollup_writes(trace.id, deltas)
            inserts = db.insert_statements(new_steps, skip_conflicts=assumed)
            # The writes go out together, after the reads (the lock, the steps to update).
            writes = [*rollups, *inserts]
            batch = {step.id: step for step in new_steps}
            for step_id, changes in updates.items():
                _, event, step_writes = self._update_locked(
                    trace, step_id, changes, batch=batch, pending=deltas
                )
                events.append(event)
                writes += step_writes
            changed = [*_TRACE_COUNTERS, "total_steps", "root_count"]
            if extra.complete is not None:
                events.append(_completed(trace, extra.complete, extra.total_duration_ms))
                changed += _COMPLETION_FIELDS
            writes += db.insert_statements(events)
            for _, rows in itertools.groupby(extra.with_rows, key=type):
                writes += db.insert_statements(list(rows))
            if events:
                writes.append(db.update_statement(trace, changed))
            writes += extra.with_writes
            _check_total_cost(trace)
            counts = db.run(writes)
            if sum(counts[len(rollups) : len(rollups) + len(inserts)]) != len(new_steps):
                raise _ResentIds
            payload = [event_dict(event) for event in events]
            transaction.on_commit(lambda: committed.extend(payload))
            transaction.on_commit(lambda: _positions.remember(new_steps))
        if new_steps:
            logger.info("steps_added", trace_id=str(trace_id), count=len(new_steps))
        if extra.complete is not None:
            logger.info("trace_completed", trace_id=str(trace_id), status=extra.complete)
        return AddedSteps(steps=stored, created=len(new_steps)), committed

    def _build_batch(
        self, trace: Trace, items: Sequence[StepCreate], *, assume_new: bool = False
    ) -> tuple[list[Step], list[Step], list[TraceEvent], dict[int, _Delta], bool]:
        """The batch's steps (stored ones for re-sent ids), the new ones, their events, the
        rollup deltas of stored ancestors by seq (not written yet), and whether the ids were
        assumed new (``assume_new`` and every outside parent's position known: nothing was
        looked up, so the caller must check the insert)."""
        ids = [item.id for item in items]
        if len(ids) != len(set(ids)):
            raise InvalidStep("A step id appears twice in the batch.")
        named = {item.parent_id for item in items if item.parent_id} - set(ids)
        known = _positions.get(named) if assume_new else {}
        assumed = assume_new and len(known) == len(named)
        # Otherwise one query for the re-sent ids and the parents named from outside the batch.
        wanted = [] if assumed else list(dict.fromkeys([*ids, *named]))
        found: dict[uuid.UUID, Step | _Position] = dict(known) if assumed else {}
        if wanted:
            nodes = _nodes_query(connection.vendor, len(wanted)).instances(
                Step, dict(zip(placeholder_ids(len(wanted)), wanted, strict=True))
            )
            found = {node.id: node for node in nodes}
        resent = [step_id for step_id in ids if step_id in found]
        # Re-sent ids are given back whole, as stored.
        existing: dict[uuid.UUID, Step] = (
            {s.id: s for s in Step.objects.filter(id__in=resent)} if resent else {}
        )
        foreign = [str(sid) for sid, s in existing.items() if s.trace_id != trace.id]
        if foreign:
            raise StepIdConflict(
                "Step ids already used in another trace.", details={"step_ids": foreign}
            )
        batch_ids = {item.id for item in items if item.id not in existing}
        outside_parents = {
            item.parent_id
            for item in items
            if item.parent_id is not None and item.parent_id not in batch_ids
        }
        parents = {pid: found[pid] for pid in outside_parents if pid in found}
        now = timezone.now()
        deltas: dict[int, _Delta] = {}
        by_seq: dict[int, Step] = {}
        new_steps: list[Step] = []
        stored: list[Step] = []
        events: list[TraceEvent] = []
        for index, item in enumerate(items):
            if item.id in existing:
                stored.append(existing[item.id])
                continue
            if item.step_type not in _STEP_TYPES:
                raise InvalidStep(
                    f"Unknown step_type {item.step_type!r}.", details={"index": index}
                )
            if item.status not in _STEP_STATUSES:
                raise InvalidStep(f"Unknown status {item.status!r}.", details={"index": index})
            parent = self._parent_for(trace, item, index, parents)
            trace.last_seq += 1
            seq = trace.last_seq
            preview, size = data_summary(item.data)
            error = 1 if _is_error(item.status, item.error) else 0
            started_at = item.started_at or now
            step = Step(
                id=item.id,
                trace=trace,
                parent_id=parent.id if parent else None,
                seq=seq,
                depth=parent.depth + 1 if parent else 0,
                path=[*parent.path, parent.seq] if parent else [],
                step_type=item.step_type,
                status=item.status,
                name=item.name,
                description=item.description,
                data=item.data,
                data_preview=preview,
                data_bytes=size,
                error=item.error,
                started_at=started_at,
                finished_at=item.finished_at,
                duration_ms=_duration(started_at, item.finished_at, item.duration_ms),
                tokens=item.tokens,
                cost=item.cost,
                subtree_steps=1,
                subtree_error_count=error,
                subtree_tokens=item.tokens,
                subtree_cost=item.cost,
            )
            for ancestor_seq in step.path:
                ancestor = by_seq.get(ancestor_seq)
                if ancestor is not None:
                    ancestor.subtree_steps += 1
                    ancestor.subtree_error_count += error
                    ancestor.subtree_tokens += item.tokens
                    ancestor.subtree_cost += item.cost
                else:
                    delta = deltas.setdefault(ancestor_seq, _Delta())
                    delta.steps += 1
                    delta.errors += error
                    delta.tokens += item.tokens
                    delta.cost += item.cost
            if parent is not None:
                if parent.seq in by_seq:
                    by_seq[parent.seq].children_count += 1
                else:
                    deltas.setdefault(parent.seq, _Delta()).children += 1
            else:
                trace.root_count += 1
            parents[step.id] = step
            by_seq[seq] = step
            new_steps.append(step)
            stored.append(step)
            trace.total_steps += 1
            trace.total_tokens += item.tokens
            trace.total_cost += item.cost
            trace.error_count += error
        # Events carry the steps as stored, rollups from later steps of the batch included.
        for step in new_steps:
            events.append(_step_event("step_added", step.seq, trace, step=step_dict(step)))
        return stored, new_steps, events, deltas, assumed

    @staticmethod
    def _parent_for(
        trace: Trace, item: StepCreate, index: int, parents: Mapping[uuid.UUID, Step | _Position]
    ) -> Step | _Position | None:
        if item.parent_id is None:
            return None
        parent = parents.get(item.parent_id)
        if parent is None:
            raise InvalidParent(
                f"Parent step {item.parent_id} does not exist in this trace "
                "(a parent in the same batch must come before its children).",
                details={"index": index, "parent_id": str(item.parent_id)},
            )
        if parent.trace_id != trace.id:
            raise InvalidParent(
                f"Parent step {item.parent_id} belongs to another trace.",
                details={"index": index, "parent_id": str(item.parent_id)},
            )
        return parent

    async def update_step(
        self, trace_id: uuid.UUID, step_id: uuid.UUID, changes: dict[str, Any]
    ) -> Step:
        """Apply ``changes`` (a subset of ``UPDATABLE_STEP_FIELDS``), keep rollups right, and
        emit ``step_updated`` with the changed fields (``data`` as its preview)."""
        step, events = await db.in_thread(self.update_step_sync, trace_id, step_id, changes)
        await self.publish(trace_id, events)
        return step

    def update_step_sync(
        self, trace_id: uuid.UUID, step_id: uuid.UUID, changes: dict[str, Any]
    ) -> tuple[Step, list[dict[str, Any]]]:
        _check_changes(changes)
        committed: list[dict[str, Any]] = []
        with transaction.atomic():
            trace = _locked_running_trace(trace_id, skip_flush_wait=True)
            step, event, writes = self._update_locked(trace, step_id, changes)
            writes.append(db.update_statement(trace, _TRACE_COUNTERS))
            _check_total_cost(trace)
            db.run([*writes, *db.insert_statements([event])])
            payload = [event_dict(event)]
            transaction.on_commit(lambda: committed.extend(payload))
        return step, committed

    def _update_locked(
        self,
        trace: Trace,
        step_id: uuid.UUID,
        changes: dict[str, Any],
        *,
        batch: Mapping[uuid.UUID, Step] | None = None,
        pending: Mapping[int, _Delta] | None = None,
    ) -> tuple[Step, TraceEvent, list[db.Statement]]:
        """Apply checked ``changes`` to a step of the locked ``trace`` (one of ``batch``, the
        steps being added with it, or a stored one, whose rollups may have ``pending`` deltas
        from the same batch): the step, the trace totals (the caller saves the trace), the
        (unsaved) ``step_updated`` event with the next seq, and the writes of the step and of
        its own and its ancestors' rollups (relative, so that they add up with the batch's),
        for the caller to run."""
        step = (batch or {}).get(step_id)
        if step is None:
            found = _step_query(connection.vendor).instances(
                Step, {PLACEHOLDER_TRACE: trace.id, PLACEHOLDER_STEP: step_id}
            )
            step = found[0] if found else None
            waiting = (pending or {}).get(step.seq) if step is not None else None
            if step is not None and waiting is not None:
                # As the step will stand once the batch's writes are in (the event shows it).
                step.subtree_error_count += waiting.errors
                step.subtree_tokens += waiting.tokens
                step.subtree_cost += waiting.cost
        if step is None:
            raise StepNotFound(f"Step {step_id} does not exist in trace {trace.id}.")
        was_error = 1 if step.is_error else 0
        old_tokens, old_cost = step.tokens, step.cost
        for name, value in changes.items():
            if name in {"error", "name", "description"} and value is None:
                value = ""
            setattr(step, name, value)
        if (
            "status" in changes
            and step.status in (StepStatus.COMPLETED, StepStatus.FAILED, StepStatus.SKIPPED)
            and step.finished_at is None
        ):
            step.finished_at = timezone.now()
        if "duration_ms" not in changes and step.duration_ms is None:
            step.duration_ms = _duration(step.started_at, step.finished_at, None)
        updated = set(changes) | {"finished_at", "duration_ms"}
        if "data" in changes:
            step.data_preview, step.data_bytes = data_summary(step.data)
            updated |= {"data_preview", "data_bytes"}
        delta = _Delta(
            errors=(1 if step.is_error else 0) - was_error,
            tokens=step.tokens - old_tokens,
            cost=step.cost - old_cost,
        )
        writes = []
        if delta != _Delta():
            step.subtree_error_count += delta.errors
            step.subtree_tokens += delta.tokens
            step.subtree_cost += delta.cost
            updated |= _SUBTREE_FIELDS
            writes = _rollup_writes(trace.id, dict.fromkeys([*step.path, step.seq], delta))
            trace.total_tokens += delta.tokens
            trace.total_cost += delta.cost
            trace.error_count += delta.errors
        writes.append(db.update_statement(step, updated - _SUBTREE_FIELDS))
        trace.last_seq += 1
        row = step_dict(step)
        shown = updated - {"data"} | ({"data_preview"} if "data" in changes else set())
        updates = {name: row[name] for name in sorted(shown) if name in row}
        event = _step_event(
            "step_updated", trace.last_seq, trace, step_id=str(step.id), updates=updates
        )
        return step, event, writes

    # -- steps: reads --

    async def get_step(self, trace_id: uuid.UUID, step_id: uuid.UUID) -> Step:
        step = await Step.objects.filter(trace_id=trace_id, pk=step_id).afirst()
        if step is None:
            raise StepNotFound(f"Step {step_id} does not exist in trace {trace_id}.")
        return step

    async def get_children(
        self, trace_id: uuid.UUID, parent_id: uuid.UUID | None, *, offset: int = 0, limit: int = 100
    ) -> tuple[list[Step], int]:
        """A window of a step's children (top-level steps for ``None``) by seq, and their count."""
        trace = await self.get_trace(trace_id)
        qs = Step.objects.filter(trace=trace, parent_id=parent_id).order_by("seq")
        if parent_id is None:
            total = trace.root_count
        else:
            parent = await self.get_step(trace_id, parent_id)
            total = parent.children_count
        return [s async for s in qs[offset : offset + limit]], total

    async def get_subtree(
        self,
        trace_id: uuid.UUID,
        step_id: uuid.UUID | None,
        *,
        viewer: Any | None = None,
        max_depth: int = 1,
        offset: int = 0,
        limit: int = 100,
        full: bool = False,
    ) -> StepWindow:
        """The node ``step_id`` (top level for None) with children ``[offset, offset+limit)``,
        each nested ``max_depth - 1`` levels deeper with its first ``limit`` children.

        With ``viewer``, a trace the viewer may not see is ``TraceNotFound``. One query for the
        node (with the access check) and one per level."""
        return await sync_to_async(self._get_subtree)(
            trace_id, step_id, viewer, max_depth, offset, limit, full
        )

    def _get_subtree(
        self,
        trace_id: uuid.UUID,
        step_id: uuid.UUID | None,
        viewer: Any | None,
        max_depth: int,
        offset: int,
        limit: int,
        full: bool,
    ) -> StepWindow:
        traces = Trace.objects.filter(pk=trace_id)
        if viewer is not None:
            traces = traces.visible_to(viewer)
        steps = Step.objects.filter(trace_id=trace_id)
        viewer_pk = None if viewer is None or viewer.is_staff else viewer.pk
        restricted = viewer_pk is not None
        binding = {
            PLACEHOLDER_TRACE: trace_id,
            PLACEHOLDER_STEP: step_id,
            PLACEHOLDER_USER: viewer_pk,
        }
        node: dict[str, Any] | None = None
        if step_id is None:
            total = traces.values_list("root_count", flat=True).first()
            if total is None:
                raise TraceNotFound(f"Trace {trace_id} does not exist.")
            level = steps.filter(parent__isnull=True)
        else:
            if full:
                node_rows = steps.filter(pk=step_id)
                if restricted:
                    node_rows = node_rows.filter(trace__user=viewer)
                found = list(step_values(node_rows, full=True)[:1])
            else:
                found = _run_compiled(_compiled_window("node", restricted, 0, 1), binding)
            if not found:
                if not traces.exists():
                    raise TraceNotFound(f"Trace {trace_id} does not exist.")
                raise StepNotFound(f"Step {step_id} does not exist in trace {trace_id}.")
            node = step_from_values(found[0], full=full)
            total = found[0]["children_count"]
            level = steps.filter(parent_id=step_id)
        if full:
            rows = list(step_values(level.order_by("seq"), full=True)[offset : offset + limit])
        else:
            kind = "roots" if step_id is None else "children"
            rows = _run_compiled(_compiled_window(kind, False, offset, limit), binding)
        first = [step_from_values(r, full=full) for r in rows]
        for child in first:
            child["children"] = []
        frontier = {c["step_id"]: c for c in first if c["has_children"]}
        for _depth in range(1, max_depth):
            if not frontier:
                break
            ranked = (
                steps.filter(parent_id__in=list(frontier))
                .annotate(
                    sibling_rank=Window(
                        RowNumber(), partition_by=[F("parent_id")], order_by=F("seq").asc()
                    )
                )
                .filter(sibling_rank__lte=limit)
                .order_by("seq")
            )
            next_frontier: dict[str, dict[str, Any]] = {}
            for r in step_values(ranked, full=full):
                child = step_from_values(r, full=full)
                child["children"] = []
                frontier[child["parent_id"]]["children"].append(child)
                if child["has_children"]:
                    next_frontier[child["step_id"]] = child
            frontier = next_frontier
        end = offset + len(first)
        return StepWindow(
            step=node,
            children=first,
            total_children=total,
            next_offset=end if end < total else None,
        )

    async def get_tree(
        self,
        trace: Trace,
        *,
        max_depth: int | None = None,
        full: bool = False,
        max_steps: int | None = None,
    ) -> list[dict[str, Any]]:
        """The whole tree (to ``max_depth`` levels) as nested dicts in one query. Raises
        ``TreeTooLarge`` when it holds more than ``max_steps`` steps."""
        return await sync_to_async(self._get_tree)(trace, max_depth, full, max_steps)

    def _get_tree(
        self, trace: Trace, max_depth: int | None, full: bool, max_steps: int | None
    ) -> list[dict[str, Any]]:
        qs = Step.objects.filter(trace=trace)
        if max_depth is not None:
            qs = qs.filter(depth__lt=max_depth)
        rows = step_values(qs.order_by("seq"), full=full)
        if max_steps is not None:
            rows = rows[: max_steps + 1]
        nodes: dict[str, dict[str, Any]] = {}
        roots: list[dict[str, Any]] = []
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
            parent = nodes.get(node["parent_id"]) if node["parent_id"] else None
            (parent["children"] if parent is not None else roots).append(node)
        return roots

    # -- events --

    async def events_after(
        self, trace_id: uuid.UUID, after_seq: int, *, limit: int = 1000, up_to: int | None = None
    ) -> list[dict[str, Any]]:
        """Logged events with ``after_seq < seq <= up_to``, oldest first, at most ``limit``."""
        qs = TraceEvent.objects.filter(trace_id=trace_id, seq__gt=after_seq).order_by("seq")
        if up_to is not None:
            qs = qs.filter(seq__lte=up_to)
        return [event_dict(e) async for e in qs[:limit]]

    async def publish(self, trace_id: uuid.UUID, events: Iterable[dict[str, Any]]) -> None:
        """Broadcast committed events of the trace to its watchers."""
        for event in events:
            try:
                await broadcast(group_name(trace_id), {"type": "trace.event", "event": event})
            except Exception:
                # The event is in the log; watchers fill the gap from there on their next event.
                logger.exception("trace_event_broadcast_failed", trace_id=str(trace_id))


@lru_cache(maxsize=1)
def get_trace_store() -> TraceStore:
    """The store named by ``settings.TRACE_STORE["BACKEND"]`` (the ORM store by default)."""
    config = getattr(settings, "TRACE_STORE", {"BACKEND": "traces.store.OrmTraceStore"})
    store_class = import_string(config["BACKEND"])
    return store_class(**config.get("OPTIONS", {}))
