"""The trace store: the only writer of traces and steps and the only broadcaster of their events.

Every write runs in ``transaction.atomic()``: inside the caller's transaction when there is one
(as a savepoint, so that a rejected write leaves the caller's transaction usable), in one of its
own otherwise. It locks the trace row first (``select_for_update``), so the writes to one trace
are serialised: a step's ``seq`` is the ``seq`` of its ``step_added`` event, both come from
``Trace.last_seq``, and seq order is commit order. A new step is its own ``step_added`` event's
record (a replay reads it from the steps, ``traces.selectors.trace_events_after``); the other
events are stored in ``TraceEvent`` with the rows they describe. All are broadcast to the
channel group ``trace.<id>`` once the transaction has committed (``transaction.on_commit``); a
broadcast that fails is logged, and followers catch up from the record (``devassist.follow``).

Reads are in ``traces.selectors``.
"""

from __future__ import annotations

import contextlib
import uuid
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from functools import lru_cache
from typing import Any, Protocol

import structlog
from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import transaction
from django.db.models import Case, F, Q, UUIDField, Value, When
from django.utils import timezone
from django.utils.module_loading import import_string

from devassist.exceptions import DomainError
from devassist.follow import broadcast_on_commit
from devassist.storable import make_storable
from traces.exceptions import (
    BatchTooLarge,
    CostOutOfRange,
    InvalidParent,
    InvalidStep,
    InvalidTraceStatus,
    StepIdConflict,
    StepNotFound,
    TraceNotFound,
    TraceNotRunning,
)
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
from traces.outcomes import tool_facts
from traces.projections import (
    LIVE_OUTPUT_KEY,
    data_summary,
    event_dict,
    step_added_event,
    step_dict,
    trace_dict,
    trace_totals,
)
from traces.sql import PrefixedArray

logger = structlog.get_logger(__name__)

#: Costs are stored as numeric(20, 8): each step's, each subtree's and each trace's total stay
#: below this.
COST_LIMIT = Decimal(10**12)
#: How deep a step may be added (the top level is 0): a step keeps its ancestors' seqs
#: (``Step.path``), so a trace's paths grow with the square of its depth; one OTLP request of
#: 10,000 spans each the parent of the next took 105 s and 162 MB. No agent nests so deep.
MAX_STEP_DEPTH = 500


# --- values crossing the store boundary ---------------------------------------------------------


@dataclass(frozen=True)
class StepCreate:
    """A step to add. ``id`` may be chosen by the client (re-sending one that is stored is a
    no-op); ``parent_id`` must exist in the trace or come earlier in the same batch, unless
    ``out_of_order``.

    ``out_of_order``: the step comes from a source that sends steps in any order (OTLP spans,
    which are sent as they end, children before their parents). A parent that is neither
    stored nor in the batch may come later: the step is stored at the top level, waiting for
    it (``Step.pending_parent_id``), and moves under it, with its subtree, when a step with
    that id is added. Steps stored earlier that wait for this one move under it then."""

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
    out_of_order: bool = False


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
class TraceSteps:
    """Steps for one trace of a write of several (``open_traces_sync``, ``add_to_traces_sync``),
    and what ends or renames it: ``trace`` is the unsaved instance that opens it when it is new
    (only its id counts when it is stored); ``complete`` a final status when the steps end it;
    ``task`` and ``agent_type`` replace a stored running trace's (a new one has its own)."""

    trace: Trace
    steps: Sequence[StepCreate]
    complete: str | None = None
    total_duration_ms: int | None = None
    task: str | None = None
    agent_type: str | None = None
    #: The step whose arrival ends the trace as ``complete`` says (an OTLP root span's): when
    #: it is stored already, the batch re-sends it, and a re-sent step changes nothing.
    ended_by: uuid.UUID | None = None
    #: Changes to stored steps of a stored trace (step id -> changes, as ``update_step``
    #: takes them), applied after the steps are added.
    updates: Mapping[uuid.UUID, dict[str, Any]] = field(default_factory=dict)
    #: A task that replaces the stored trace's, running or finished: what the log records
    #: that came after an OTLP trace's spans ask, where its root span named it by its name
    #: alone (``traces.services``).
    late_task: str | None = None


#: A write's new steps, by the id of their trace.
StepsByTrace = Mapping[uuid.UUID, Sequence[StepCreate]]
#: What a write of several traces writes to each, by trace id.
WritesByTrace = Mapping[uuid.UUID, TraceSteps]

#: What one look-up (``_look_up``) found for a trace's batch: the stored steps among its ids
#: and the parents it names, by id, and the stored steps of the trace that wait for a parent.
_Found = tuple[dict[uuid.UUID, Step], list[Step]]


@dataclass(frozen=True)
class AddedSteps:
    """The batch's steps in batch order (stored ones for re-sent ids) and how many are new."""

    steps: list[Step]
    created: int


class TraceStore(Protocol):
    """Writes of traces and steps. The sync methods run in the caller's transaction (or one of
    their own) and broadcast their events once it commits; the async ones are the sync ones
    through ``sync_to_async``, each in a transaction of its own."""

    def open_trace_sync(self, trace: Trace, steps: Sequence[StepCreate] = ()) -> None: ...

    def add_steps_sync(
        self,
        trace_id: uuid.UUID,
        steps: Sequence[StepCreate],
        updates: Mapping[uuid.UUID, dict[str, Any]] | None = None,
        *,
        complete: str | None = None,
        total_duration_ms: int | None = None,
    ) -> AddedSteps: ...

    def update_step_sync(
        self, trace_id: uuid.UUID, step_id: uuid.UUID, changes: dict[str, Any]
    ) -> Step: ...

    def add_feedback_sync(self, trace_id: uuid.UUID, step: StepCreate) -> Step: ...

    def open_traces_sync(self, traces: Sequence[TraceSteps]) -> dict[uuid.UUID, DomainError]: ...

    def add_to_traces_sync(
        self,
        traces: Sequence[TraceSteps],
        *,
        check: Callable[[Trace], None] | None = None,
        prepare: Callable[[WritesByTrace], WritesByTrace] | None = None,
    ) -> dict[uuid.UUID, AddedSteps | DomainError]: ...

    def complete_trace_sync(
        self,
        trace_id: uuid.UUID,
        *,
        status: str = TraceStatus.COMPLETED,
        total_duration_ms: int | None = None,
    ) -> Trace: ...

    async def create_trace(
        self,
        *,
        user: Any,
        task: str,
        mode: str = TraceMode.AGENT,
        agent_type: str = "devassist",
        metadata: dict[str, Any] | None = None,
    ) -> Trace: ...

    async def add_steps(
        self,
        trace_id: uuid.UUID,
        steps: Sequence[StepCreate],
        *,
        updates: Mapping[uuid.UUID, dict[str, Any]] | None = None,
        complete: str | None = None,
    ) -> AddedSteps: ...

    async def add_step(self, trace_id: uuid.UUID, step: StepCreate) -> Step: ...

    async def update_step(
        self, trace_id: uuid.UUID, step_id: uuid.UUID, changes: dict[str, Any]
    ) -> Step: ...

    async def complete_trace(
        self,
        trace_id: uuid.UUID,
        *,
        status: str = TraceStatus.COMPLETED,
        total_duration_ms: int | None = None,
    ) -> Trace: ...


def group_name(trace_id: uuid.UUID | str) -> str:
    """The channel group the trace's events are broadcast to."""
    return f"trace.{trace_id}"


# --- checks -------------------------------------------------------------------------------------

_STEP_TYPES = frozenset(StepType.values)
_STEP_STATUSES = frozenset(StepStatus.values)


def _check_batch_size(steps: Sequence[StepCreate]) -> None:
    if len(steps) > settings.TRACE_BATCH_MAX_STEPS:
        raise BatchTooLarge(
            f"A batch holds at most {settings.TRACE_BATCH_MAX_STEPS} steps, got {len(steps)}.",
            details={"max_steps": settings.TRACE_BATCH_MAX_STEPS, "got": len(steps)},
        )


def _check_changes(changes: dict[str, Any]) -> None:
    """Refuse an update that cannot be applied, before anything is written (and before any
    lock is taken, where the changes are known before: not those ``add_to_traces_sync``'s
    ``prepare`` makes under the locks)."""
    unknown = set(changes) - UPDATABLE_STEP_FIELDS
    if unknown:
        raise InvalidStep(f"These fields cannot be updated: {', '.join(sorted(unknown))}.")
    if not changes:
        raise InvalidStep("Nothing to update: send at least one field.")
    nulls = sorted(n for n in _NOT_NULL_STEP_FIELDS if n in changes and changes[n] is None)
    if nulls:
        raise InvalidStep(f"These fields cannot be null: {', '.join(nulls)}.")
    if "status" in changes and changes["status"] not in _STEP_STATUSES:
        raise InvalidStep(f"Unknown status {changes['status']!r}.")


def _check_final(status: str) -> None:
    if status not in FINAL_TRACE_STATUSES:
        raise InvalidTraceStatus(f"A trace completes as one of {', '.join(FINAL_TRACE_STATUSES)}.")


def _check_total_cost(trace: Trace) -> None:
    """Refuse a write that would take the trace's total cost (every subtree's is at most
    that) past what its column holds; nothing has been written yet."""
    if trace.total_cost >= COST_LIMIT:
        raise CostOutOfRange(
            f"The trace's total cost would reach {trace.total_cost}; it must stay below "
            f"{COST_LIMIT}.",
            details={"limit": float(COST_LIMIT), "total_cost": float(trace.total_cost)},
        )


def _locked_running_trace(trace_id: uuid.UUID) -> Trace:
    """The trace (with its user, which its events show), locked until the transaction ends;
    ``TraceNotFound`` or ``TraceNotRunning`` unless it is running."""
    trace = _locked_trace(trace_id)
    if not trace.is_running:
        raise TraceNotRunning(
            f"Trace {trace_id} is {trace.status}; it takes no more changes.",
            details={"status": trace.status},
        )
    return trace


def _locked_trace(trace_id: uuid.UUID) -> Trace:
    """The trace (with its user), locked until the transaction ends; ``TraceNotFound``."""
    trace = (
        Trace.objects.select_for_update(of=("self",))
        .select_related("user")
        .filter(pk=trace_id)
        .first()
    )
    if trace is None:
        raise TraceNotFound(f"Trace {trace_id} does not exist.")
    return trace


def _live_output(data: Any) -> Any:
    """A step's live output (``LIVE_OUTPUT_KEY`` in its data), None when it has none."""
    return data.get(LIVE_OUTPUT_KEY) if isinstance(data, dict) else None


def _duration(
    started_at: datetime | None, finished_at: datetime | None, duration_ms: int | None
) -> int | None:
    if duration_ms is not None:
        return duration_ms
    if started_at and finished_at and finished_at >= started_at:
        return int((finished_at - started_at).total_seconds() * 1000)
    return None


# --- one write ----------------------------------------------------------------------------------


@dataclass
class _Delta:
    """What a stored step's rollups gain from a write."""

    steps: int = 0
    errors: int = 0
    tokens: int = 0
    cost: Decimal = Decimal(0)
    children: int = 0

    def key(self) -> tuple[int, int, int, Decimal, int]:
        return (self.steps, self.errors, self.tokens, self.cost, self.children)


#: Rollups of stored steps change only by relative writes (``_Write.save``), never by setting
#: a value read before.
_ROLLUP_FIELDS = frozenset(
    {"children_count", "subtree_steps", "subtree_error_count", "subtree_tokens", "subtree_cost"}
)
#: A model call's flags that its usage is counted in a model call under it (``_count_once``).
_COUNTED_BELOW = frozenset({"tokens_counted_below", "cost_counted_below"})
#: What a write may change in the (locked) trace row.
_TRACE_FIELDS = [
    "last_seq",
    "total_steps",
    "root_count",
    "total_tokens",
    "total_cost",
    "error_count",
    "status",
    "completed_at",
    "total_duration_ms",
]


class _Write:
    """One write to a locked trace: new steps, changes to steps, the trace's end. Only a
    running trace's write makes events; a finished one takes late steps and changes silently
    (its ``trace_completed`` stays its last event), though they move its ``last_seq`` too.

    Everything is worked out in memory first (seq, depth, path, the rollups of new steps, the
    deltas of stored ones, the trace's counters, the events); ``save`` then stores it: one
    insert for the new steps (``_insert_steps``) and one for the logged events (moves,
    updates, the end), a relative ``F()`` update of the rollups of stored steps per distinct
    delta, a ``bulk_update`` of changed stored steps and the trace's row. The broadcast goes
    out after commit, with a ``step_added`` event for each new step (not stored: the step is
    its record. Storing a copy doubled the rows a batch writes: ``benchmarks/otlp_ingest.py``'s
    10,000 spans took 8.2-9.4 s to store in-process with it, 5.1-5.9 s without)."""

    def __init__(
        self,
        trace: Trace,
        *,
        own_ids: bool = False,
        loaded: Mapping[uuid.UUID, Step] | None = None,
    ) -> None:
        self.trace = trace
        #: Stored steps of the trace that ``update`` may change, loaded already (by id).
        self._loaded = dict(loaded or {})
        #: The write opens the trace and its step ids are derived from the trace's id (OTLP's):
        #: no stored step can have them or wait for them, so ``add`` looks nothing up.
        self.own_ids = own_ids
        self.publish = trace.is_running
        #: Stored steps have seqs up to this one; the write's new steps come after it.
        self._stored_up_to = trace.last_seq
        self.new_steps: dict[uuid.UUID, Step] = {}
        self._new_by_seq: dict[int, Step] = {}
        self.changed: dict[uuid.UUID, Step] = {}
        self._changed_fields: dict[uuid.UUID, set[str]] = {}
        self._deltas: dict[int, _Delta] = defaultdict(_Delta)
        #: Stored top-level steps that moved under a new parent (``_adopt``), by seq, with
        #: the path and depth they end with: the stored steps under them get that path in
        #: front of theirs (``_save_moves``).
        self._moved: dict[int, Step] = {}
        #: Stored steps ``update`` brought to where this write's moves and rollups put them.
        self._caught_up: set[uuid.UUID] = set()
        self.extra_trace_fields: set[str] = set()
        self.events: list[TraceEvent] = []
        #: The write ends the trace (``complete``).
        self.completed = False

    # -- new steps --

    def add(self, items: Sequence[StepCreate], found: _Found | None = None) -> list[Step]:
        """Add ``items`` as new steps of the trace; returns the batch's steps in order, the
        stored ones for ids that are stored in this trace already. One query looks up the
        re-sent ids and the parents from outside the batch, unless ``found`` has what it
        finds (``_look_up`` for several traces at once)."""
        ids = [item.id for item in items]
        if len(ids) != len(set(ids)):
            raise InvalidStep("A step id appears twice in the batch.")
        if found is None:
            found = ({}, []) if self.own_ids else _look_up({self.trace.id: items})[self.trace.id]
        stored, waiting = found
        foreign = [str(i) for i in ids if i in stored and stored[i].trace_id != self.trace.id]
        if foreign:
            raise StepIdConflict(
                "Step ids already used in another trace.", details={"step_ids": foreign}
            )
        batch: list[Step] = []
        for index, item in enumerate(items):
            if item.id in stored:
                batch.append(stored[item.id])
                continue
            parent = self._parent(item, index, stored)
            step = self._new_step(item, index, parent)
            batch.append(step)
        self.events += self._adopt(waiting)
        return batch

    def _parent(self, item: StepCreate, index: int, found: Mapping[uuid.UUID, Step]) -> Step | None:
        if item.parent_id is None:
            return None
        parent = self.new_steps.get(item.parent_id) or found.get(item.parent_id)
        if parent is None and item.out_of_order:
            return None  # it waits for its parent (``_new_step``)
        if parent is None:
            raise InvalidParent(
                f"Parent step {item.parent_id} does not exist in this trace "
                "(a parent in the same batch must come before its children).",
                details={"index": index, "parent_id": str(item.parent_id)},
            )
        if parent.trace_id != self.trace.id:
            raise InvalidParent(
                f"Parent step {item.parent_id} belongs to another trace.",
                details={"index": index, "parent_id": str(item.parent_id)},
            )
        if parent.depth >= MAX_STEP_DEPTH:
            raise InvalidParent(
                f"Parent step {item.parent_id} is {parent.depth} levels deep: a step may be "
                f"at most {MAX_STEP_DEPTH} levels below the top.",
                details={"index": index, "parent_id": str(item.parent_id)},
            )
        return parent

    def _new_step(self, item: StepCreate, index: int, parent: Step | None) -> Step:
        if item.step_type not in _STEP_TYPES:
            raise InvalidStep(f"Unknown step_type {item.step_type!r}.", details={"index": index})
        if item.status not in _STEP_STATUSES:
            raise InvalidStep(f"Unknown status {item.status!r}.", details={"index": index})
        trace = self.trace
        trace.last_seq += 1
        started_at = item.started_at or timezone.now()
        step = Step(
            id=item.id,
            trace=trace,
            parent_id=parent.id if parent else None,
            seq=trace.last_seq,
            depth=parent.depth + 1 if parent else 0,
            path=[*parent.path, parent.seq] if parent else [],
            pending_parent_id=item.parent_id if parent is None else None,
            step_type=item.step_type,
            status=item.status,
            name=item.name,
            description=item.description,
            data=item.data,
            error=item.error,
            started_at=started_at,
            finished_at=item.finished_at,
            duration_ms=_duration(started_at, item.finished_at, item.duration_ms),
            tokens=item.tokens,
            cost=item.cost,
        )
        make_storable(step)
        step.data_preview, step.data_bytes = data_summary(step.data)
        step.tool_facts = _tool_facts(step)
        error = 1 if step.is_error else 0
        step.subtree_error_count = error
        step.subtree_tokens = item.tokens
        step.subtree_cost = item.cost
        self._roll_up(step.path, _Delta(steps=1, errors=error, tokens=item.tokens, cost=item.cost))
        if parent is None:
            trace.root_count += 1
        else:
            self._roll_up([parent.seq], _Delta(children=1))
        trace.total_steps += 1
        self._count(_Delta(errors=error, tokens=item.tokens, cost=item.cost))
        self.new_steps[step.id] = step
        self._new_by_seq[step.seq] = step
        if parent is not None:
            self._count_once(parent, step)
        return step

    def _count_once(self, parent: Step, child: Step) -> None:
        """Count a model call's usage once. A model call (``thought``) whose child model call
        reports tokens stops counting its own tokens, and one whose child reports a cost its
        own cost: they were the same call recorded twice (a framework's span over the OpenAI
        instrumentation's, Google ADK 2's ``call_llm`` over its ``generate_content``) or the
        sum of its calls. The step still shows them; its rollups, its ancestors' and the
        trace's totals lose them (once: the flags say it is done). Decided as the child is
        added (under a parent that came first, or moving under one that came later), so
        the same steps in any order count the same."""
        if parent.step_type != StepType.THOUGHT or child.step_type != StepType.THOUGHT:
            return
        tokens = parent.tokens if child.tokens and not parent.tokens_counted_below else 0
        cost = parent.cost if child.cost and not parent.cost_counted_below else Decimal(0)
        if not tokens and not cost:
            return
        parent.tokens_counted_below = parent.tokens_counted_below or bool(tokens)
        parent.cost_counted_below = parent.cost_counted_below or bool(cost)
        uncounted = _Delta(tokens=-tokens, cost=-cost)
        self._roll_up([*parent.path, parent.seq], uncounted)
        self._count(uncounted)
        if parent.id not in self.new_steps:
            self.changed[parent.id] = parent
            self._changed_fields.setdefault(parent.id, set()).update(_COUNTED_BELOW)

    def _adopt(self, stored: Sequence[Step]) -> list[TraceEvent]:
        """Move the steps that wait for a step this write added (stored ones, and new ones
        whose parent came later in the batch) under it, with their subtrees, oldest first;
        returns the ``step_updated`` events of the stored ones (``parent_id`` and ``depth``:
        their subtrees moved with them).

        Each move adds the moving subtree's rollups to its new ancestors (in memory for new
        steps, as a relative write for stored ones), puts the new parent's path in front of
        the paths of the subtree's steps (in memory for new ones and moved stored top steps,
        by ``_save_moves`` for the stored steps under those) and takes one step off the
        trace's top level. A step that would become its own ancestor (span ids that form a
        loop) stays where it is and waits no more: its parent is stored, under it. One whose
        parent is ``MAX_STEP_DEPTH`` levels deep stays where it is, still waiting."""
        orphans = [s for s in stored if s.pending_parent_id in self.new_steps]
        orphans += [s for s in self.new_steps.values() if s.pending_parent_id in self.new_steps]
        parents = {o.id: self.new_steps[o.pending_parent_id] for o in orphans}  # type: ignore[index]
        events: list[TraceEvent] = []
        # The steps in memory under each top-level step (by its seq): what moves with it.
        under: dict[int, list[Step]] = defaultdict(list)
        for step in self.new_steps.values():
            if step.path:
                under[step.path[0]].append(step)
        # Any order gives the same tree.
        for orphan in sorted(orphans, key=lambda o: o.seq):
            parent = parents[orphan.id]
            if (parent.path[0] if parent.path else parent.seq) == orphan.seq:
                self._stop_waiting(orphan)
                continue
            if parent.depth >= MAX_STEP_DEPTH:
                continue  # it would be deeper than a step may be added: it stays, waiting
            is_stored = orphan.id not in self.new_steps
            moving = _Delta(
                steps=orphan.subtree_steps,
                errors=orphan.subtree_error_count,
                tokens=orphan.subtree_tokens,
                cost=orphan.subtree_cost,
            )
            pending = self._deltas.get(orphan.seq) if is_stored else None
            if pending is not None:
                moving.steps += pending.steps
                moving.errors += pending.errors
                moving.tokens += pending.tokens
                moving.cost += pending.cost
            prefix = [*parent.path, parent.seq]
            self._roll_up(prefix, moving)
            self._roll_up([parent.seq], _Delta(children=1))
            self.trace.root_count -= 1
            # The steps under it move with it: new ones, and stored ones that moved under it
            # earlier in this write (their stored subtrees follow them in ``_save_moves``).
            followers = under.pop(orphan.seq, [])
            for step in followers:
                step.path = [*prefix, *step.path]
                step.depth = len(step.path)
            orphan.parent_id, orphan.pending_parent_id = parent.id, None
            orphan.path, orphan.depth = prefix, len(prefix)
            under[prefix[0]] += [*followers, orphan]
            if is_stored:
                self._moved[orphan.seq] = orphan
            self._count_once(parent, orphan)
            if is_stored and self.publish:
                self.trace.last_seq += 1
                events.append(
                    self._event(
                        "step_updated",
                        self.trace.last_seq,
                        step_id=str(orphan.id),
                        updates={"parent_id": str(parent.id), "depth": orphan.depth},
                    )
                )
        return events

    def _stop_waiting(self, step: Step) -> None:
        step.pending_parent_id = None
        if step.id not in self.new_steps:
            self.changed[step.id] = step
            self._changed_fields.setdefault(step.id, set()).add("pending_parent_id")

    def _moved_path(self, step: Step) -> None:
        """Bring a stored step loaded before this write's moves to where they put it."""
        moved = self._moved.get(step.path[0] if step.path else step.seq)
        if moved is None:
            return
        if moved.seq == step.seq:
            step.parent_id, step.pending_parent_id = moved.parent_id, None
        step.path = [*moved.path, *step.path]
        step.depth = len(step.path)

    def _roll_up(self, seqs: Sequence[int], delta: _Delta) -> None:
        """Add ``delta`` to the rollups of the steps ``seqs``: in memory for new ones, as a
        pending relative write for stored ones."""
        for seq in seqs:
            new = self._new_by_seq.get(seq)
            if new is not None:
                new.subtree_steps += delta.steps
                new.subtree_error_count += delta.errors
                new.subtree_tokens += delta.tokens
                new.subtree_cost += delta.cost
                new.children_count += delta.children
                continue
            pending = self._deltas[seq]
            pending.steps += delta.steps
            pending.errors += delta.errors
            pending.tokens += delta.tokens
            pending.cost += delta.cost
            pending.children += delta.children

    def _count(self, delta: _Delta) -> None:
        self.trace.total_tokens += delta.tokens
        self.trace.total_cost += delta.cost
        self.trace.error_count += delta.errors

    # -- changes --

    def update(self, step_id: uuid.UUID, changes: dict[str, Any]) -> Step:
        """Apply checked ``changes`` to a step of the trace (new in this write or stored), keep
        the rollups and totals right and add its ``step_updated`` event."""
        step = self.new_steps.get(step_id) or self.changed.get(step_id)
        if step is None:
            step = self._stored(step_id)
        elif step_id not in self.new_steps:
            # Changed already by this write's steps (``_count_once``, ``_stop_waiting``) as
            # it was loaded, before their moves and rollups.
            self._catch_up(step)
        was_live = _live_output(step.data) is not None
        was_error = 1 if step.is_error else 0
        old_tokens, old_cost = step.tokens, step.cost
        for name, value in changes.items():
            setattr(
                step,
                name,
                "" if value is None and name in {"error", "name", "description"} else value,
            )
        if (
            "status" in changes
            and step.status in (StepStatus.COMPLETED, StepStatus.FAILED, StepStatus.SKIPPED)
            and step.finished_at is None
        ):
            step.finished_at = timezone.now()
        if "duration_ms" not in changes and step.duration_ms is None:
            step.duration_ms = _duration(step.started_at, step.finished_at, None)
        updated = set(changes) | {"finished_at", "duration_ms"}
        make_storable(step)
        if "data" in changes:
            step.data_preview, step.data_bytes = data_summary(step.data)
            updated |= {"data_preview", "data_bytes", "tool_facts"}
        step.tool_facts = _tool_facts(step)
        delta = _Delta(
            errors=(1 if step.is_error else 0) - was_error,
            # What a model call under it counts instead stays uncounted (``_count_once``).
            tokens=0 if step.tokens_counted_below else step.tokens - old_tokens,
            cost=Decimal(0) if step.cost_counted_below else step.cost - old_cost,
        )
        if delta.key() != _Delta().key():
            self._roll_up([*step.path, step.seq], delta)
            if step.id not in self.new_steps:
                # The stored row gets it by the relative write; its event shows it now.
                step.subtree_error_count += delta.errors
                step.subtree_tokens += delta.tokens
                step.subtree_cost += delta.cost
            self._count(delta)
            updated |= {"subtree_error_count", "subtree_tokens", "subtree_cost"}
        if step.id not in self.new_steps:
            self.changed[step.id] = step
            self._changed_fields.setdefault(step.id, set()).update(updated - _ROLLUP_FIELDS)
        # A finished trace's change moves its ``last_seq`` too, as its late steps do: what is
        # kept under it (``traces.selectors.trace_tree_json``) is then no longer found. Its
        # watchers are not told (its ``trace_completed`` stays its last event).
        self.trace.last_seq += 1
        if not self.publish:
            return step
        row = step_dict(step)
        shown = updated - {"data", "tool_facts"} | (
            {"data_preview"} if "data" in changes else set()
        )
        event_updates = {name: row[name] for name in sorted(shown) if name in row}
        if "data" in changes and (was_live or _live_output(step.data) is not None):
            # What a running step printed so far reaches watchers whole (it is bounded by its
            # writer); None once it is gone (the step's result holds the output).
            event_updates[LIVE_OUTPUT_KEY] = _live_output(step.data)
        self.events.append(
            self._event(
                "step_updated", self.trace.last_seq, step_id=str(step.id), updates=event_updates
            )
        )
        return step

    def _stored(self, step_id: uuid.UUID) -> Step:
        """A stored step of the trace, as it will stand once this write's rollups are in."""
        step = self._loaded.pop(step_id, None)
        if step is None:
            step = Step.objects.for_trace(self.trace).filter(pk=step_id).first()
        if step is None:
            raise StepNotFound(f"Step {step_id} does not exist in trace {self.trace.id}.")
        self._catch_up(step)
        return step

    def _catch_up(self, step: Step) -> None:
        """Bring a stored step loaded before this write's moves and rollups to where they put
        it (once)."""
        if step.id in self._caught_up:
            return
        self._caught_up.add(step.id)
        self._moved_path(step)
        pending = self._deltas.get(step.seq)
        if pending is not None:
            step.children_count += pending.children
            step.subtree_steps += pending.steps
            step.subtree_error_count += pending.errors
            step.subtree_tokens += pending.tokens
            step.subtree_cost += pending.cost

    # -- the end --

    def end_or_rename(
        self,
        complete: str | None,
        total_duration_ms: int | None,
        *,
        task: str | None = None,
        agent_type: str | None = None,
    ) -> None:
        """Give a running trace a new ``task`` and ``agent_type`` when they are given and
        differ, and end it as ``complete`` when given; a trace that is no longer running
        keeps what it has (late steps change nothing of it)."""
        if not self.trace.is_running:
            return
        self.rename(task, agent_type)
        if complete is not None:
            self.complete(complete, total_duration_ms)

    def rename(self, task: str | None, agent_type: str | None = None) -> None:
        """Give the trace ``task`` and ``agent_type`` when they are given and differ, running
        or finished (``end_or_rename`` only a running one; ``TraceSteps.late_task`` any)."""
        for name, value in (("task", task), ("agent_type", agent_type)):
            if value is not None and value != getattr(self.trace, name):
                setattr(self.trace, name, value)
                self.extra_trace_fields.add(name)
        if self.extra_trace_fields:
            make_storable(self.trace)  # before its trace_completed event is made from it

    def log(self) -> None:
        """Log what the write added and whether it ended the trace."""
        trace_id = str(self.trace.id)
        if self.new_steps:
            logger.info("steps_added", trace_id=trace_id, count=len(self.new_steps))
        if self.completed:
            logger.info("trace_completed", trace_id=trace_id, status=self.trace.status)

    def complete(self, status: str, total_duration_ms: int | None) -> None:
        """Finish the trace as ``status`` and add its ``trace_completed`` event."""
        trace = self.trace
        now = timezone.now()
        trace.status = status
        trace.completed_at = now
        if total_duration_ms is None:
            total_duration_ms = int((now - trace.created_at).total_seconds() * 1000)
        trace.total_duration_ms = total_duration_ms
        self.completed = True
        trace.last_seq += 1
        self.events.append(
            TraceEvent(
                trace=trace,
                seq=trace.last_seq,
                event="trace_completed",
                payload={"trace": trace_dict(trace)},
            )
        )

    def _event(self, event: str, seq: int, **payload: Any) -> TraceEvent:
        """An event of the trace, with the trace's totals as they stand."""
        return TraceEvent(
            trace=self.trace,
            seq=seq,
            event=event,
            payload={**payload, "totals": trace_totals(self.trace)},
        )

    # -- storing --

    def save(self, *, new_trace: bool = False) -> None:
        """Store the write, with the trace's row (inserted for a ``new_trace``: see
        ``_save_opening``; nothing is written when nothing changed) and broadcast its events
        once the transaction commits."""
        _check_total_cost(self.trace)
        if new_trace:
            make_storable(self.trace)
            _save_opening([self])
            return
        _save_writes([self])

    @property
    def changes_anything(self) -> bool:
        return bool(self.events or self.new_steps or self.changed)

    def _save_changed(self) -> None:
        """Store the changed stored steps: one update per set of changed fields."""
        by_fields: dict[frozenset[str], list[Step]] = defaultdict(list)
        for step_id, step in self.changed.items():
            by_fields[frozenset(self._changed_fields[step_id])].append(step)
        for names, steps in by_fields.items():
            Step.objects.bulk_update(steps, sorted(names))

    def _broadcast(self) -> None:
        broadcast_on_commit(
            group_name(self.trace.id),
            [{"type": "trace.event", "event": event} for event in self._announced()],
        )

    def _announced(self) -> list[dict[str, Any]]:
        """What the trace's watchers are told, in seq order: the new steps' ``step_added``
        events (each step as it stands once the whole write is in, so with the rollups of
        the later steps of its batch) and the stored events."""
        added: list[dict[str, Any]] = []
        if self.publish:
            totals = trace_totals(self.trace)
            added = [step_added_event(step_dict(s), totals) for s in self.new_steps.values()]
        return sorted([*added, *map(event_dict, self.events)], key=lambda event: event["seq"])

    def _save_moves(self) -> None:
        """Move the stored subtrees whose top steps moved (the new steps were placed in
        memory): one update, each stored step under a moved top step getting that step's new
        path in front of its own (one branch per new path: the steps that moved under one
        parent share theirs); the steps under a top step are found by their ``path[0]``
        (the index ``step_top``). One update rather than one per new parent: in
        ``benchmarks/otlp_ingest.py``'s 10,000-span burst the moves took 1.1 s, against 1.6 s
        with an update per new parent and 5.4 s with a branch per moved step
        (benchmarks/README.md)."""
        if not self._moved:
            return
        by_path: dict[tuple[int, ...], list[int]] = defaultdict(list)
        parents: dict[tuple[int, ...], uuid.UUID | None] = {}
        for seq, step in self._moved.items():
            by_path[tuple(step.path)].append(seq)
            parents[tuple(step.path)] = step.parent_id
        roots = list(self._moved)
        Step.objects.for_trace(self.trace).filter(seq__lte=self._stored_up_to).filter(
            Q(seq__in=roots) | Q(path__0__in=roots)
        ).update(
            path=Case(
                *(
                    When(Q(seq__in=seqs) | Q(path__0__in=seqs), then=PrefixedArray(list(p), "path"))
                    for p, seqs in by_path.items()
                ),
                default=F("path"),
            ),
            depth=F("depth")
            + Case(
                *(
                    When(Q(seq__in=seqs) | Q(path__0__in=seqs), then=Value(len(p)))
                    for p, seqs in by_path.items()
                ),
                default=Value(0),
            ),
            parent_id=Case(
                *(When(seq__in=seqs, then=Value(parents[p])) for p, seqs in by_path.items()),
                default=F("parent_id"),
            ),
            pending_parent_id=Case(
                When(seq__in=roots, then=Value(None, output_field=UUIDField())),
                default=F("pending_parent_id"),
            ),
        )

    def _save_rollups(self) -> None:
        """Add the pending deltas to the stored steps' rollups: one relative update per
        distinct delta (the steps of a batch's path mostly share theirs)."""
        seqs_by_delta: dict[tuple[int, int, int, Decimal, int], list[int]] = defaultdict(list)
        for seq, delta in self._deltas.items():
            if delta.key() != _Delta().key():
                seqs_by_delta[delta.key()].append(seq)
        for (steps, errors, tokens, cost, children), seqs in seqs_by_delta.items():
            Step.objects.for_trace(self.trace).filter(seq__in=seqs).update(
                subtree_steps=F("subtree_steps") + steps,
                subtree_error_count=F("subtree_error_count") + errors,
                subtree_tokens=F("subtree_tokens") + tokens,
                subtree_cost=F("subtree_cost") + cost,
                children_count=F("children_count") + children,
            )


def _look_up(batches: StepsByTrace) -> dict[uuid.UUID, _Found]:
    """For each trace's batch (by trace id): the stored steps among its ids (re-sent ones) and
    the parents it names from outside itself, by id, and the stored steps of the trace that
    wait for a parent (its ``out_of_order`` steps may be theirs). One query for them all."""
    wanted: dict[uuid.UUID, set[uuid.UUID]] = {}
    awaited: set[uuid.UUID] = set()
    awaiting: list[uuid.UUID] = []
    for trace_id, items in batches.items():
        wanted[trace_id] = {item.id for item in items} | {
            item.parent_id for item in items if item.parent_id
        }
        ids = [item.id for item in items if item.out_of_order]
        if ids:
            awaited.update(ids)
            awaiting.append(trace_id)
    if not any(wanted.values()):
        return {trace_id: ({}, []) for trace_id in batches}
    query = Q(pk__in=set().union(*wanted.values()))
    if awaiting:
        query |= Q(trace_id__in=awaiting, pending_parent_id__in=awaited)
    # Without the data: nothing here reads it, and spans sent children first leave many
    # steps waiting, each with its whole input and output (512 LLM spans of 30 KB: 73 ms
    # with the data, 17 ms without).
    rows = list(Step.objects.filter(query).order_by().defer("data"))
    by_id = {row.id: row for row in rows}
    waiting: dict[uuid.UUID, list[Step]] = defaultdict(list)
    for row in rows:
        if row.pending_parent_id is not None:
            waiting[row.trace_id].append(row)
    return {
        trace_id: (
            {step_id: by_id[step_id] for step_id in wanted[trace_id] if step_id in by_id},
            waiting.get(trace_id, []),
        )
        for trace_id in batches
    }


def _to_change(items: WritesByTrace) -> dict[uuid.UUID, dict[uuid.UUID, Step]]:
    """The stored steps that ``items`` change, by trace id and step id: one query for all."""
    step_ids = [step_id for item in items.values() for step_id in item.updates]
    if not step_ids:
        return {}
    changed: dict[uuid.UUID, dict[uuid.UUID, Step]] = defaultdict(dict)
    for step in Step.objects.filter(trace_id__in=list(items), pk__in=step_ids).order_by():
        changed[step.trace_id][step.id] = step
    return changed


def _write_to(
    stored: Trace, item: TraceSteps, found: _Found, changed: Mapping[uuid.UUID, Step]
) -> tuple[_Write, list[Step]]:
    """The write of ``item`` to its ``stored`` trace (locked), the stored steps its batch
    names as ``found`` has them and those it changes as ``changed`` has them; returns it with
    the batch's steps, or raises what refuses it."""
    if item.complete is not None:
        _check_final(item.complete)
    for changes in item.updates.values():
        _check_changes(changes)
    write = _Write(stored, loaded=changed)
    batch = write.add(item.steps, found)
    for step_id, changes in item.updates.items():
        write.update(step_id, changes)
    resent = item.ended_by is not None and item.ended_by not in write.new_steps
    if item.late_task is not None:
        write.rename(item.late_task)
    write.end_or_rename(
        None if resent else item.complete,
        item.total_duration_ms,
        task=item.task,
        agent_type=item.agent_type,
    )
    _check_total_cost(stored)
    return write, batch


def _save_writes(writes: Sequence[_Write]) -> None:
    """Store writes to stored traces (each checked, its trace locked) and broadcast each one's
    events once the transaction commits: the new steps of all of them in one insert and their
    events in another; each trace's row, and the rollups, moves and changes of its stored
    steps, trace by trace (most of a service's traces need only their row: their later spans
    come with the steps they hang under, or adopt stored ones in one update)."""
    writes = [write for write in writes if write.changes_anything]
    if not writes:
        return
    for write in writes:
        # An update per trace: Django's ``bulk_update`` of a hundred traces' rows (a CASE per
        # field and trace) took longer to build than the hundred updates to run (py-spy on
        # ``otlp_service.py --logs``, 2,000 traces and their one-trace baseline: 5.5 s of the
        # 37.6 s spent storing them went to building it).
        write.trace.save(update_fields=[*_TRACE_FIELDS, *sorted(write.extra_trace_fields)])
        write._save_rollups()
    _insert_steps([step for write in writes for step in write.new_steps.values()])
    for write in writes:
        write._save_moves()
        write._save_changed()
    TraceEvent.objects.bulk_create([event for write in writes for event in write.events])
    for write in writes:
        write._broadcast()


def _save_opening(writes: Sequence[_Write]) -> None:
    """Store writes that open their traces (new instances, made storable: no stored step of
    theirs, so no rollups, moves or changes of stored steps to write), one insert per table
    for all of them.

    Nothing is broadcast: a trace has watchers only once it is stored, and a watch starts
    after the trace's last seq as it reads it (``traces.consumers``), so the events of the
    write that opens it are nobody's to hear. On Redis, broadcasting them cost a round trip
    per trace: 0.4 ms each of a service's small traces (benchmarks/README.md,
    "2026-12-05 17:30")."""
    Trace.objects.bulk_create([write.trace for write in writes])
    _insert_steps([step for write in writes for step in write.new_steps.values()])
    TraceEvent.objects.bulk_create([event for write in writes for event in write.events])


def _insert_steps(steps: Sequence[Step]) -> None:
    """Insert new ``steps`` (their ids set, made storable): on PostgreSQL with ``COPY ... FROM
    STDIN``, each value prepared by its field as ``bulk_create`` prepares it; with
    ``bulk_create`` elsewhere (SQLite has no ``COPY``).

    ``bulk_create`` sends the rows as one array per column, which psycopg writes as text in
    Python, escaping every step's JSON (a regular expression per value); ``COPY`` sends each
    row as psycopg's C code formats it. In ``benchmarks/otlp_ingest.py``'s 10,000-span burst,
    the trace was readable 11.1 s after the flush with ``bulk_create`` and 7.3 s with
    ``COPY`` (Phoenix: 107 s; the ingest target, 10x Phoenix, is met only with ``COPY``;
    benchmarks/README.md, "2026-12-06 08:15")."""
    if not steps:
        return
    connection = transaction.get_connection()  # the write's
    if connection.vendor != "postgresql":
        Step.objects.bulk_create(steps)
        return
    fields = Step._meta.concrete_fields
    quote = connection.ops.quote_name
    columns = ", ".join(quote(f.column) for f in fields)
    sql = f"COPY {quote(Step._meta.db_table)} ({columns}) FROM STDIN"
    # As Django's own queries: its exceptions (IntegrityError...) and, when queries are
    # logged (DEBUG, django_assert_num_queries), the statement in connection.queries.
    with connection.cursor() as cursor, connection.wrap_database_errors:
        logged = cursor.debug_sql(sql) if connection.queries_logged else contextlib.nullcontext()
        with logged, cursor.cursor.copy(sql) as copy:
            for step in steps:
                copy.write_row(
                    [f.get_db_prep_save(f.pre_save(step, add=True), connection) for f in fields]
                )
    for step in steps:
        step._state.adding = False
        step._state.db = connection.alias


def _log_created(trace: Trace) -> None:
    logger.info(
        "trace_created", trace_id=str(trace.id), mode=trace.mode, agent_type=trace.agent_type
    )


# --- the ORM store ------------------------------------------------------------------------------


class OrmTraceStore:
    """``TraceStore`` on the Django ORM (PostgreSQL in production, SQLite for ``make run``)."""

    def open_trace_sync(self, trace: Trace, steps: Sequence[StepCreate] = ()) -> None:
        """Store ``trace`` (a new, unsaved instance) with its first ``steps`` (each a root or a
        child of an earlier step of the batch). Raises ``BatchTooLarge``, ``InvalidStep``,
        ``InvalidParent``, ``StepIdConflict``; a rejected trace writes nothing."""
        _check_batch_size(steps)
        with transaction.atomic():
            write = _Write(trace)
            write.add(steps)
            write.save(new_trace=True)
        _log_created(trace)

    def add_steps_sync(
        self,
        trace_id: uuid.UUID,
        steps: Sequence[StepCreate],
        updates: Mapping[uuid.UUID, dict[str, Any]] | None = None,
        *,
        complete: str | None = None,
        total_duration_ms: int | None = None,
    ) -> AddedSteps:
        """Add a batch of steps, then apply ``updates`` (step id → changes, as ``update_step``
        takes them), and with ``complete`` (a final status) complete the trace, as
        ``complete_trace`` does (``total_duration_ms``: its duration, when not the time since
        it was created), all in one transaction. Raises ``BatchTooLarge``, ``InvalidParent``,
        ``StepIdConflict``, ``InvalidStep``, ``StepNotFound``, ``TraceNotFound``,
        ``TraceNotRunning``, ``CostOutOfRange``, ``InvalidInput`` (a status that is not final);
        a rejected batch writes nothing."""
        _check_batch_size(steps)
        updates = updates or {}
        for changes in updates.values():
            _check_changes(changes)
        if complete is not None:
            _check_final(complete)
        if not steps and not updates and complete is None:
            return AddedSteps(steps=[], created=0)
        with transaction.atomic():
            write = _Write(_locked_running_trace(trace_id))
            batch = write.add(steps)
            for step_id, changes in updates.items():
                write.update(step_id, changes)
            if complete is not None:
                write.complete(complete, total_duration_ms)
            write.save()
        write.log()
        return AddedSteps(steps=batch, created=len(write.new_steps))

    def update_step_sync(
        self, trace_id: uuid.UUID, step_id: uuid.UUID, changes: dict[str, Any]
    ) -> Step:
        """Apply ``changes`` (a subset of ``UPDATABLE_STEP_FIELDS``), keep the rollups right
        and log ``step_updated`` with the changed fields (``data`` as its preview)."""
        _check_changes(changes)
        with transaction.atomic():
            write = _Write(_locked_running_trace(trace_id))
            step = write.update(step_id, changes)
            write.save()
        return step

    def add_feedback_sync(self, trace_id: uuid.UUID, step: StepCreate) -> Step:
        """Add a ``feedback`` step (people's verdict on what the trace did, which comes after
        the fact) to the trace, finished or not, with its rollups. A finished trace's watchers
        are not told (its ``trace_completed`` stays its last event): its pages show the step.
        Raises ``InvalidStep`` for another step type, and as ``add_steps_sync``."""
        if step.step_type != StepType.FEEDBACK:
            raise InvalidStep(f"Only feedback steps are added this way, not {step.step_type!r}.")
        with transaction.atomic():
            write = _Write(_locked_trace(trace_id))
            (added,) = write.add([step])
            write.save()
        logger.info("feedback_added", trace_id=str(trace_id), step_id=str(added.id))
        return added

    def add_to_traces_sync(
        self,
        traces: Sequence[TraceSteps],
        *,
        check: Callable[[Trace], None] | None = None,
        prepare: Callable[[WritesByTrace], WritesByTrace] | None = None,
    ) -> dict[uuid.UUID, AddedSteps | DomainError]:
        """Add steps to several stored traces, for sources that name their traces themselves
        and send them in pieces, in any order (OTLP), in the caller's transaction: the traces
        locked in one query, in id order, the stored steps their batches name looked up in
        one, and the writes of all stored together (``_save_writes``). Each trace's steps may
        wait for their parents (``StepCreate.out_of_order``); ``updates`` change stored steps
        after the steps are added, of a finished trace too (its watchers are not told);
        ``complete`` ends a running trace, and ``task`` and ``agent_type`` replace its own
        (a trace that is no longer running still takes late steps, without events: its
        ``trace_completed`` stays its last event; only ``late_task`` renames it). For the
        traces of one OTLP request: their spans took about ten queries a trace one by one
        (benchmarks/README.md, "2026-12-05 20:10").

        ``check`` is given each locked trace and raises to refuse it; ``prepare`` is given what
        is to be written to the traces that passed, by trace id, under their locks, and returns
        what to write (the steps to add, the changes of stored steps: ``TraceSteps.updates``,
        whose steps are loaded in one query). Returns, by trace id, what was added, or why the
        trace was refused (what ``check`` raised, ``InvalidStep``, ``InvalidParent``,
        ``StepIdConflict``, ``StepNotFound``, ``CostOutOfRange``, ``InvalidInput`` for a status
        that is not final): a refused trace has nothing written and the others are stored. A
        trace that is not stored (deleted since the caller looked) has no entry: it is the
        caller's to open."""
        results: dict[uuid.UUID, AddedSteps | DomainError] = {}
        by_id = {item.trace.id: item for item in traces}
        with transaction.atomic():
            locked = (
                Trace.objects.select_for_update(of=("self",))
                .select_related("user")
                .filter(pk__in=list(by_id))
                .order_by("pk")
            )
            passed: list[Trace] = []
            for stored in locked:
                try:
                    if check is not None:
                        check(stored)
                except DomainError as exc:
                    results[stored.id] = exc
                    continue
                passed.append(stored)
            items: WritesByTrace = {stored.id: by_id[stored.id] for stored in passed}
            if prepare is not None:
                items = prepare(items)
            found = _look_up({trace_id: item.steps for trace_id, item in items.items()})
            changed = _to_change(items)
            writes: list[_Write] = []
            for stored in passed:
                try:
                    write, batch = _write_to(
                        stored, items[stored.id], found[stored.id], changed.get(stored.id, {})
                    )
                except DomainError as exc:
                    results[stored.id] = exc
                    continue
                writes.append(write)
                results[stored.id] = AddedSteps(steps=batch, created=len(write.new_steps))
            _save_writes(writes)
        for write in writes:
            write.log()
        return results

    def open_traces_sync(self, traces: Sequence[TraceSteps]) -> dict[uuid.UUID, DomainError]:
        """Open ``traces`` (new instances, each with its first steps, whose ids are derived
        from the trace's own: OTLP's), in the caller's transaction: one insert per table for
        all of them. For the many small traces of one request: a service's OTel SDK sends
        each of its requests as a trace, and opening them one by one took a dozen queries
        each (benchmarks/README.md, "2026-12-05 17:30").

        A trace whose write is refused (``InvalidStep``, ``InvalidParent``,
        ``CostOutOfRange``, ``InvalidInput`` for a status that is not final) is left out and
        its error returned by its id; the others are stored. Raises ``IntegrityError`` when
        one of them is stored by now (another request opened it in the meantime), and then
        none of them is: the caller's transaction stays usable (a savepoint)."""
        refused: dict[uuid.UUID, DomainError] = {}
        writes: list[_Write] = []
        for new in traces:
            try:
                if new.complete is not None:
                    _check_final(new.complete)
                make_storable(new.trace)  # before its trace_completed event is made from it
                write = _Write(new.trace, own_ids=True)
                write.add(new.steps)
                write.end_or_rename(new.complete, new.total_duration_ms)
                _check_total_cost(new.trace)
            except DomainError as exc:
                refused[new.trace.id] = exc
                continue
            writes.append(write)
        with transaction.atomic():
            _save_opening(writes)
        for write in writes:
            _log_created(write.trace)
            write.log()
        return refused

    def complete_trace_sync(
        self,
        trace_id: uuid.UUID,
        *,
        status: str = TraceStatus.COMPLETED,
        total_duration_ms: int | None = None,
    ) -> Trace:
        """End the trace as ``status`` (a final one) and log ``trace_completed``."""
        _check_final(status)
        with transaction.atomic():
            write = _Write(_locked_running_trace(trace_id))
            write.complete(status, total_duration_ms)
            write.save()
        write.log()
        return write.trace

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
        await sync_to_async(self.open_trace_sync)(trace)
        return trace

    async def add_steps(
        self,
        trace_id: uuid.UUID,
        steps: Sequence[StepCreate],
        *,
        updates: Mapping[uuid.UUID, dict[str, Any]] | None = None,
        complete: str | None = None,
    ) -> AddedSteps:
        return await sync_to_async(self.add_steps_sync)(trace_id, steps, updates, complete=complete)

    async def add_step(self, trace_id: uuid.UUID, step: StepCreate) -> Step:
        return (await self.add_steps(trace_id, [step])).steps[0]

    async def update_step(
        self, trace_id: uuid.UUID, step_id: uuid.UUID, changes: dict[str, Any]
    ) -> Step:
        return await sync_to_async(self.update_step_sync)(trace_id, step_id, changes)

    async def complete_trace(
        self,
        trace_id: uuid.UUID,
        *,
        status: str = TraceStatus.COMPLETED,
        total_duration_ms: int | None = None,
    ) -> Trace:
        return await sync_to_async(self.complete_trace_sync)(
            trace_id, status=status, total_duration_ms=total_duration_ms
        )


@lru_cache(maxsize=1)
def get_trace_store() -> TraceStore:
    """The store named by ``settings.TRACE_STORE["BACKEND"]`` (the ORM store by default)."""
    config = getattr(settings, "TRACE_STORE", {"BACKEND": "traces.store.OrmTraceStore"})
    store_class = import_string(config["BACKEND"])
    return store_class(**config.get("OPTIONS", {}))


def _tool_facts(step: Step) -> dict[str, Any]:
    """What the outcome of a stored step reads of its data (a ``result``'s only), kept beside
    it so reads of the skeleton never load the data."""
    return tool_facts(step.data) if step.step_type == StepType.RESULT else {}
