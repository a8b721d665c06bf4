"""Writes of the traces app that are more than one store call: OTLP spans and log records into
traces.

The trace store (``traces.store``) stays the only writer of traces and steps; this module
decides which of them a request's spans may go into.
"""

from __future__ import annotations

import functools
import itertools
import uuid
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from http import HTTPStatus
from typing import Any, TypeVar

import structlog
from django.db import DataError, IntegrityError, transaction
from django.db.models import F, Q, Window
from django.db.models.functions import Left, RowNumber
from django.utils import timezone

from devassist.exceptions import DomainError
from traces.exceptions import InvalidStep, TraceNotFromOtlp, TraceOfAnotherUser
from traces.messages import asked_in
from traces.models import OTEL_METADATA_KEY, PendingLogEvents, Step, StepType, Trace, TraceMode
from traces.otlp import (
    LOGS,
    TASK_CHARS,
    Limits,
    OtlpError,
    Refusals,
    Signal,
    SpanBatch,
    TraceSpans,
    as_structured,
    request_spans,
    task_of,
)
from traces.otlp_logs import LogBatch, TraceLogs, request_log_records, with_log_events
from traces.store import AddedSteps, StepCreate, TraceSteps, WritesByTrace, get_trace_store

logger = structlog.get_logger(__name__)


@dataclass(frozen=True)
class IngestOutcome:
    """How many of a request's items (spans, log records) were stored and refused, why (the
    first reasons), and whether every refusal was a trace of someone else's."""

    accepted: int
    rejected: int
    reasons: list[str]
    only_foreign: bool
    #: What an item is called (``span``, ``log record``).
    item: str = "span"

    @property
    def message(self) -> str:
        if not self.rejected:
            return ""
        return f"{self.rejected} {self.item}(s) rejected: " + "; ".join(self.reasons)


def _owned_otlp_trace(stored: Trace, *, user: Any) -> None:
    """Refuse spans for a trace that is not ``user``'s, or was not opened by OTLP spans."""
    if stored.user_id != user.pk:
        raise TraceOfAnotherUser(f"Trace {stored.id.hex} belongs to another user.")
    if not stored.is_otlp:
        raise TraceNotFromOtlp(
            f"Trace {stored.id.hex} was not recorded over OTLP; it takes no OTLP spans."
        )


def _new_otlp_trace(
    trace_id: uuid.UUID,
    *,
    user: Any,
    service: str,
    resource: dict[str, Any],
    task: str = "",
    started: datetime | None = None,
) -> Trace:
    """The trace that OTLP data for an unknown ``trace_id`` opens, as ``user``'s; it started
    at ``started`` (its earliest span's start), now when that is unknown or ahead."""
    now = timezone.now()
    return Trace(
        id=trace_id,
        user=user,
        mode=TraceMode.AGENT,
        task=task,
        agent_type=service,
        metadata={OTEL_METADATA_KEY: {"trace_id": trace_id.hex, "resource": resource}},
        created_at=min(started, now) if started else now,
    )


def _spans_trace(spans: TraceSpans, user: Any, task: str | None) -> Trace:
    """The trace that ``spans`` open when it is new: named after its root's service when the
    root came with them (a trace of several services is its entry point's), started when the
    first of them started (when the agent ran, not when its spans arrived: an exporter's
    retries, a collector's queue or a backfill deliver them later)."""
    starts = [step.started_at for step in spans.steps if step.started_at is not None]
    return _new_otlp_trace(
        spans.trace_id,
        user=user,
        service=spans.root_service or spans.service,
        resource=spans.resource,
        task=task or "",
        started=min(starts, default=None),
    )


def _ingested(batch: Refusals, foreign: int, item: str) -> IngestOutcome:
    return IngestOutcome(
        accepted=batch.total - batch.rejected,
        rejected=batch.rejected,
        reasons=batch.reasons,
        only_foreign=batch.rejected > 0 and foreign == batch.rejected,
        item=item,
    )


def otlp_export_ingest(*, user: Any, request: Any, signal: Signal) -> IngestOutcome:
    """Store a decoded OTLP export ``request`` of ``signal`` (spans or log records) for
    ``user``, checked against the current limits: what both OTLP/HTTP and OTLP/gRPC do with a
    request; logs the outcome. Raises ``OtlpError``: 413 for a request of more items than a
    request may hold, 400 when the database refuses what the request holds (nothing of it
    is stored)."""
    limits = Limits.current()
    try:
        if signal is LOGS:
            outcome = otlp_logs_ingest(user=user, batch=request_log_records(request, limits=limits))
        else:
            outcome = otlp_spans_ingest(user=user, batch=request_spans(request, limits=limits))
    except DataError as exc:
        # Text or a number that the mapping let through and the database cannot hold: a bug
        # here, and the same request would fail again, so not "unavailable; retry".
        logger.exception("otlp_ingest_refused", items=signal.items, user_id=user.pk)
        reason = _first_line(exc)
        raise OtlpError(
            HTTPStatus.BAD_REQUEST, f"The database refused the {signal.items}: {reason}"
        ) from exc
    logger.info(
        "otlp_ingested",
        items=signal.items,
        accepted=outcome.accepted,
        rejected=outcome.rejected,
        user_id=user.pk,
    )
    return outcome


def otlp_spans_ingest(*, user: Any, batch: SpanBatch) -> IngestOutcome:
    """Store ``batch`` (a request's spans, decoded by ``traces.otlp``) for ``user``: the
    traces that are new opened together as ``user``'s (``open_traces_sync``: one insert per
    table, however many), the spans of the traces that exist added to them together
    (``add_to_traces_sync``); a trace ends when its root span came completed with them (and
    is named after the root's input and service). Log records that came before their span
    (``PendingLogEvents``) join its step as it is stored.

    All in one transaction, the traces locked or opened in id order (``_in_runs``). A trace
    the store refuses (another user's, one not recorded over OTLP, a cost past the limit)
    has all its spans rejected and nothing written, the other traces are stored; anything
    else raises and nothing is stored. The refused spans are counted in ``batch``
    (``SpanBatch.reject``)."""
    with transaction.atomic():
        foreign = _in_runs(
            batch.traces,
            new=functools.partial(_open_spans, user, batch),
            stored=functools.partial(_add_spans, user, batch),
        )
    return _ingested(batch, foreign, "span")


T = TypeVar("T")

#: What a run's handler (``_in_runs``) returns: how many of its items were refused as someone
#: else's, and the traces to look at again (another request opened or deleted them meanwhile).
Handled = tuple[int, list[uuid.UUID]]


def _in_runs(
    traces: Mapping[uuid.UUID, T],
    *,
    new: Callable[[list[T]], Handled],
    stored: Callable[[list[T]], Handled],
) -> int:
    """Hand the items of ``traces`` (by trace id) in id order, in runs: the traces that are
    not stored to ``new``, the others to ``stored``; how many items they refused as someone
    else's. Every request takes its traces in the same order (locks them, or opens them), so
    no two wait on each other in a circle. Which are stored is read unlocked: a trace opened
    after this is found by the insert that opens it (``open_traces_sync``'s
    ``IntegrityError``), one deleted by the lock that misses it, and the run's handler hands
    them back to be looked at again, before the next run (each time at least one of them has
    become stored or gone)."""
    found = _stored_ids(list(traces))
    total = 0
    for is_new, run in itertools.groupby(sorted(traces), key=lambda t: t not in found):
        items = [traces[trace_id] for trace_id in run]
        foreign, again = new(items) if is_new else stored(items)
        total += foreign
        for trace_id in again:  # one by one: see ``_look_again``
            total += _in_runs({trace_id: traces[trace_id]}, new=new, stored=stored)
    return total


def _stored_ids(trace_ids: list[uuid.UUID]) -> set[uuid.UUID]:
    """Which of ``trace_ids`` are stored (unlocked)."""
    return set(Trace.objects.filter(pk__in=trace_ids).values_list("pk", flat=True))


def _look_again(trace_ids: list[uuid.UUID]) -> bool:
    """After the insert that opens the traces ``trace_ids`` together failed: whether to look
    at them again, one by one (``_in_runs``). Yes when they are several (another request
    opened one of them meanwhile, or one of them cannot be stored: alone, each is stored,
    opened or found at fault), or when the one is stored now. No for one that is still not
    stored: it failed for a reason of its own."""
    return len(trace_ids) > 1 or bool(_stored_ids(trace_ids))


def _first_line(exc: Exception) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


def _open_spans(user: Any, batch: SpanBatch, traces: list[TraceSpans]) -> Handled:
    """Open the new ``traces`` together; all of them to be looked at again when that fails
    (``_look_again``: one was opened in the meantime by a request of the same trace's spans
    or log records, say). A trace that fails alone is refused: one of its spans' step ids
    is a step's of another trace (clients of the REST API choose their step ids)."""
    # Nothing of a new trace is stored, and no log record waits for it (they open their trace
    # too).
    opening = [_spans_write(spans, user, _first_question(spans) or spans.task) for spans in traces]
    try:
        refused = get_trace_store().open_traces_sync(opening)
    except IntegrityError as exc:
        ids = [spans.trace_id for spans in traces]
        if _look_again(ids):
            return 0, ids
        cause = InvalidStep(f"The spans cannot be stored: {_first_line(exc)}.")
        return _refused(batch, cause, otel_trace_id=ids[0].hex, count=len(traces[0].steps)), []
    foreign = sum(
        _refused(batch, exc, otel_trace_id=trace_id.hex, count=len(batch.traces[trace_id].steps))
        for trace_id, exc in refused.items()
    )
    return foreign, []


def _add_spans(user: Any, batch: SpanBatch, traces: list[TraceSpans]) -> Handled:
    """Add the spans of the stored ``traces`` to them together (``add_to_traces_sync``: one
    lock, one look-up and one insert for them all), each checked to be ``user``'s, with the
    log records that waited for them; the traces deleted since the caller looked are handed
    back (they are opened again)."""
    waiting = _WaitingRecords()
    tasks = _stored_traces_tasks(traces)
    results = get_trace_store().add_to_traces_sync(
        [_spans_write(spans, user, tasks[spans.trace_id]) for spans in traces],
        check=functools.partial(_owned_otlp_trace, user=user),
        prepare=waiting.join,
    )
    waiting.taken(_taken(results))
    return _handled(batch, results, {spans.trace_id: len(spans.steps) for spans in traces})


def _taken(results: Mapping[uuid.UUID, AddedSteps | DomainError]) -> list[uuid.UUID]:
    """The traces that ``add_to_traces_sync`` took (it returned what it added)."""
    return [trace_id for trace_id, result in results.items() if isinstance(result, AddedSteps)]


def _handled(
    batch: Refusals,
    results: Mapping[uuid.UUID, AddedSteps | DomainError],
    counts: Mapping[uuid.UUID, int],
) -> Handled:
    """What ``add_to_traces_sync``'s ``results`` for traces of ``counts`` items each (by
    trace id) come to: the refused traces' items counted in ``batch``, and the traces that
    are no longer stored, to be looked at again."""
    foreign = sum(
        _refused(batch, result, otel_trace_id=trace_id.hex, count=counts[trace_id])
        for trace_id, result in results.items()
        if isinstance(result, DomainError)
    )
    return foreign, [trace_id for trace_id in counts if trace_id not in results]


def _spans_write(spans: TraceSpans, user: Any, task: str | None) -> TraceSteps:
    """What ``spans`` write to their trace: the trace they open when it is new (``task`` its
    task), their steps, its end when its root came completed with them, and ``task`` and the
    root's service as its task and agent type when it is stored."""
    return TraceSteps(
        trace=_spans_trace(spans, user, task),
        steps=spans.steps,
        complete=spans.complete,
        total_duration_ms=spans.duration_ms,
        task=task,
        agent_type=spans.root_service,
        ended_by=spans.ended_by,
    )


def _refused(batch: Refusals, exc: DomainError, *, otel_trace_id: str, count: int) -> int:
    """Count a trace's ``count`` items refused by the store; how many of them were refused
    as someone else's."""
    batch.reject(count, f"trace {otel_trace_id}: {exc.message}")
    logger.info("otlp_trace_rejected", otel_trace_id=otel_trace_id, code=exc.code, items=count)
    return count if isinstance(exc, TraceOfAnotherUser) else 0


def _stored_traces_tasks(traces: Sequence[TraceSpans]) -> dict[uuid.UUID, str | None]:
    """The tasks the spans of the stored ``traces`` give them: a root's input or name
    (``TraceSpans.task``; None when the root did not come), and for a root that came without
    an input that asks anything (a plain script's model call, an OpenAI Agents SDK workflow, a
    plain span around an agent, a framework's own state) the input that log records waiting
    for it give it, else what the trace's first model call was asked (its input, or the one
    its waiting records give it). A trace that has no task yet (its root has not come: an
    agent at work) is named after the first question its spans bring (``_first_question``),
    until the root names it. At most three queries for them all, read before the traces' locks: a
    record or a model call that commits in between leaves the trace named by what was there,
    nothing worse."""
    unnamed = [spans for spans in traces if spans.unnamed_root is not None]
    untitled = _untitled([spans for spans in traces if spans.task is None])
    logged = _logged_inputs([*unnamed, *untitled])
    tasks = {
        spans.trace_id: task
        for spans in unnamed
        if spans.unnamed_root is not None
        and (task := task_of(logged.get((spans.trace_id, spans.unnamed_root)), ""))
    }
    asked = _first_questions([spans for spans in unnamed if spans.trace_id not in tasks], logged)
    for spans in untitled:
        if question := _first_question(spans, logged=logged):
            asked[spans.trace_id] = question
    return {
        spans.trace_id: tasks.get(spans.trace_id) or asked.get(spans.trace_id) or spans.task
        for spans in traces
    }


def _calls(spans: TraceSpans) -> list[StepCreate]:
    """The model calls (``thought`` steps) among ``spans``."""
    return [step for step in spans.steps if step.step_type == StepType.THOUGHT]


def _untitled(traces: Sequence[TraceSpans]) -> list[TraceSpans]:
    """Those of ``traces`` whose stored trace has no task (one query, none for no traces)."""
    if not traces:
        return []
    ids = {spans.trace_id for spans in traces}
    empty = set(Trace.objects.filter(pk__in=ids, task="").values_list("pk", flat=True))
    return [spans for spans in traces if spans.trace_id in empty]


#: A step by its trace's id and its own.
_StepKey = tuple[uuid.UUID, uuid.UUID]


def _logged_inputs(traces: Sequence[TraceSpans]) -> dict[_StepKey, Any]:
    """The inputs that the log records waiting for the unnamed roots and the model calls of
    ``traces`` give them (as ``with_log_events`` reads them), by trace and step id: one query.
    OpenTelemetry's own instrumentations send a model call's messages as records, emitted
    while it runs, so they usually wait for its span."""
    wanted = {
        (spans.trace_id, step.id)
        for spans in traces
        for step in spans.steps
        if step.id == spans.unnamed_root or step.step_type == StepType.THOUGHT
    }
    if not wanted:
        return {}
    waiting = (
        PendingLogEvents.objects.filter(
            trace_id__in={trace_id for trace_id, _ in wanted},
            step_id__in={step_id for _, step_id in wanted},
        )
        .order_by("pk")
        .values_list("trace_id", "step_id", "events")
    )
    events: dict[_StepKey, list[dict[str, Any]]] = defaultdict(list)
    for trace_id, step_id, step_events in waiting:
        if (trace_id, step_id) in wanted:
            events[trace_id, step_id] += step_events
    max_events = Limits.current().max_events
    return {
        key: with_log_events({}, found, max_events=max_events).get("input")
        for key, found in events.items()
    }


#: The stored model calls of a trace whose inputs ``_first_questions`` looks at.
QUESTION_CANDIDATES = 20

#: A model call: when it started, its input and the messages flattened beside it.
_Call = tuple[datetime | None, Any, Any]


def _first_questions(
    traces: Sequence[TraceSpans], logged: Mapping[_StepKey, Any]
) -> dict[uuid.UUID, str]:
    """What the first model call of each of the stored ``traces`` was asked (the last user
    message of the earliest call whose input is a conversation, among the trace's spans here,
    with the inputs ``logged`` gives them, and the first ``QUESTION_CANDIDATES`` stored), by
    trace id, for those where one was: one query."""
    if not traces:
        return {}
    stored: dict[uuid.UUID, list[_Call]] = defaultdict(list)
    rows = (
        Step.objects.filter(trace_id__in=[spans.trace_id for spans in traces])
        .filter(step_type=StepType.THOUGHT)
        .filter(Q(data__has_key="input") | Q(data__has_key="input_messages"))
        .annotate(
            rank=Window(RowNumber(), partition_by=[F("trace_id")], order_by=F("started_at").asc())
        )
        .filter(rank__lte=QUESTION_CANDIDATES)
        .values_list("trace_id", "started_at", "data__input", "data__input_messages")
    )
    for trace_id, *call in rows:
        stored[trace_id].append(tuple(call))
    found = {
        spans.trace_id: _first_question(spans, stored[spans.trace_id], logged) for spans in traces
    }
    return {trace_id: task for trace_id, task in found.items() if task}


def _first_question(
    spans: TraceSpans, stored: Sequence[_Call] = (), logged: Mapping[_StepKey, Any] | None = None
) -> str | None:
    """What the first model call of ``spans``'s trace was asked, among its spans here (with
    the inputs ``logged`` gives them) and the ``stored`` calls; None when none was asked
    anything, or the root came with an input that asks something. While the root has not
    come (``task`` None: an agent at work), the first of any of its spans here that was given
    something that asks: a LangGraph node's state starts before the model calls of its
    subgraph, which are asked to work on the question."""
    if spans.task is not None and spans.unnamed_root is None:
        return None
    logged = logged or {}
    calls = [
        (
            step.started_at,
            step.data.get("input", logged.get((spans.trace_id, step.id))),
            step.data.get("input_messages"),
        )
        for step in (spans.steps if spans.task is None else _calls(spans))
        if isinstance(step.data, dict)
    ]
    return _asked_first([*calls, *stored])


def _asked_first(calls: Sequence[_Call]) -> str | None:
    """What the earliest of the model ``calls`` that was asked anything was asked (its
    messages flattened beside the request, OpenInference's, or its input itself), cut to
    ``TASK_CHARS`` as a task."""
    ordered = sorted(
        calls, key=lambda call: (call[0] is None, call[0] or datetime.min.replace(tzinfo=UTC))
    )
    asked = (asked_in(messages) or asked_in(as_structured(given)) for _, given, messages in ordered)
    return next((text[:TASK_CHARS] for text in asked if text), None)


class _WaitingRecords:
    """The log records that waited for a request's spans (``PendingLogEvents``): read into the
    spans' steps under their traces' locks (``join``, the store's ``prepare``), and deleted
    once the store has taken the steps (``taken``): a trace whose write is refused keeps its
    records waiting."""

    def __init__(self) -> None:
        self._rows: dict[uuid.UUID, list[int]] = defaultdict(list)

    def join(self, items: WritesByTrace) -> dict[uuid.UUID, TraceSteps]:
        """``items`` (by trace id) with the events of the records that wait for their steps in
        the steps' data: one query for all the traces."""
        step_ids = [step.id for item in items.values() for step in item.steps]
        waiting = (
            PendingLogEvents.objects.filter(trace_id__in=list(items), step_id__in=step_ids)
            .order_by("pk")
            .values_list("pk", "trace_id", "step_id", "events")
        )
        events: dict[tuple[uuid.UUID, uuid.UUID], list[dict[str, Any]]] = defaultdict(list)
        for pk, trace_id, step_id, step_events in waiting:
            self._rows[trace_id].append(pk)
            events[trace_id, step_id] += step_events
        if not events:
            return dict(items)
        max_events = Limits.current().max_events
        return {
            trace_id: replace(
                item,
                steps=[
                    replace(
                        step,
                        data=with_log_events(
                            step.data, events[trace_id, step.id], max_events=max_events
                        ),
                    )
                    if (trace_id, step.id) in events
                    else step
                    for step in item.steps
                ],
            )
            for trace_id, item in items.items()
        }

    def taken(self, trace_ids: Sequence[uuid.UUID]) -> None:
        """Delete the records that joined the steps of ``trace_ids``, which are stored."""
        pks = [pk for trace_id in trace_ids for pk in self._rows.pop(trace_id, [])]
        if pks:
            PendingLogEvents.objects.filter(pk__in=pks).delete()


def otlp_logs_ingest(*, user: Any, batch: LogBatch) -> IngestOutcome:
    """Store ``batch`` (a request's log records, decoded by ``traces.otlp_logs``) for
    ``user``: each record joins the events of its span's step (``with_log_events``), the
    traces that exist written together (``add_to_traces_sync``); the records of a span not
    stored yet wait for it (``PendingLogEvents``). The traces that do not exist yet are opened
    together as ``user``'s (their spans fill them), with their records waiting in one insert.
    One transaction, the traces locked or opened in id order; a trace the store refuses
    (another user's, one not recorded over OTLP) has all its records rejected and nothing
    written, as ``otlp_spans_ingest`` does."""
    with transaction.atomic():
        foreign = _in_runs(
            batch.traces,
            new=functools.partial(_open_logs, user, batch),
            stored=functools.partial(_add_logs, user, batch),
        )
    return _ingested(batch, foreign, "log record")


def _open_logs(user: Any, batch: LogBatch, traces: list[TraceLogs]) -> Handled:
    """Open the new ``traces`` together (with no steps, none is refused), every record of
    theirs waiting for its span; all of them to be looked at again when one was opened in
    the meantime."""
    try:
        get_trace_store().open_traces_sync([_logs_write(logs, user) for logs in traces])
    except IntegrityError:
        ids = [logs.trace_id for logs in traces]
        if _look_again(ids):
            return 0, ids
        raise  # a trace with no step has nothing else to fail on
    PendingLogEvents.objects.bulk_create(
        PendingLogEvents(
            trace_id=logs.trace_id, step_id=step_id, span_id=logs.span_ids[step_id], events=events
        )
        for logs in traces
        for step_id, events in logs.events.items()
    )
    return 0, []


def _add_logs(user: Any, batch: LogBatch, traces: list[TraceLogs]) -> Handled:
    """Add the records of the stored ``traces`` together (``add_to_traces_sync``: one lock,
    one read of the steps they join and one insert of those that wait, for them all), each
    trace checked to be ``user``'s: to the steps of their spans that are stored, waiting for
    the others. The traces deleted since the caller looked are handed back (they are opened
    again). One trace at a time (a dozen queries each), a service's 2,000 traces with their
    records sent after their spans took 21.2 s to store, 9.5 s so (``otlp_service.py --logs
    after``, benchmarks/README.md, "2026-12-05 21:35")."""
    records = _RecordsIntoSteps(traces)
    results = get_trace_store().add_to_traces_sync(
        [_logs_write(logs, user) for logs in traces],
        check=functools.partial(_owned_otlp_trace, user=user),
        prepare=records.join,
    )
    records.wait(_taken(results))
    return _handled(batch, results, {logs.trace_id: logs.count for logs in traces})


def _late_tasks(
    inputs: Mapping[uuid.UUID, Mapping[uuid.UUID, Any]],
    calls: Mapping[uuid.UUID, Sequence[_Call]],
) -> dict[uuid.UUID, str]:
    """The tasks that log records give the stored traces whose stored steps they join (the
    steps' ``inputs`` with the records, the model ``calls`` among them), by trace id, for the
    traces their root span named by its name alone: its input asked nothing, and no model
    call had been asked anything when it came (``_stored_traces_tasks``), because the records
    came after the spans (a process that sets up its tracing before its logging, as Semantic
    Kernel's samples do, flushes its spans first at exit). The task is the input the records
    give the root, else what the earliest of the model calls they join was asked. One query,
    none when the records ask nothing."""
    asking = {
        trace_id
        for trace_id, given in inputs.items()
        if any(value is not None for value in given.values())
    }
    if not asking:
        return {}
    roots = Step.objects.filter(
        trace_id__in=asking,
        parent__isnull=True,
        pending_parent_id__isnull=True,  # not a span waiting for its parent
        trace__task=Left("name", TASK_CHARS),
    ).values_list("trace_id", "pk")
    tasks = {
        trace_id: task_of(inputs[trace_id].get(root), "") or _asked_first(calls[trace_id])
        for trace_id, root in roots
    }
    return {trace_id: task for trace_id, task in tasks.items() if task}


def _logs_write(logs: TraceLogs, user: Any) -> TraceSteps:
    """What ``logs`` write to their trace through the store: no step (they change steps,
    ``_RecordsIntoSteps``), and the trace they open when it is new."""
    return TraceSteps(
        trace=_new_otlp_trace(
            logs.trace_id,
            user=user,
            service=logs.service,
            resource=logs.resource,
            started=logs.earliest,
        ),
        steps=[],
    )


class _RecordsIntoSteps:
    """A request's log records for stored traces: those whose span is stored join its step's
    data (``join``, the store's ``prepare``: read under the traces' locks, as the spans read
    the records that wait), the others wait for their span (``wait``, once the store has
    taken the traces)."""

    def __init__(self, traces: Sequence[TraceLogs]) -> None:
        self._logs = {logs.trace_id: logs for logs in traces}
        self._stored: dict[uuid.UUID, set[uuid.UUID]] = defaultdict(set)

    def join(self, items: WritesByTrace) -> dict[uuid.UUID, TraceSteps]:
        """``items`` (by trace id) with the changes of the data of the stored steps that the
        traces' records name: one query for all the traces."""
        step_ids = [step_id for trace_id in items for step_id in self._logs[trace_id].events]
        stored = (
            Step.objects.filter(trace_id__in=list(items), pk__in=step_ids)
            .order_by()
            .values_list("trace_id", "pk", "step_type", "started_at", "data")
        )
        max_events = Limits.current().max_events
        updates: dict[uuid.UUID, dict[uuid.UUID, dict[str, Any]]] = defaultdict(dict)
        inputs: dict[uuid.UUID, dict[uuid.UUID, Any]] = defaultdict(dict)
        calls: dict[uuid.UUID, list[_Call]] = defaultdict(list)
        for trace_id, step_id, step_type, started_at, data in stored:
            self._stored[trace_id].add(step_id)
            events = self._logs[trace_id].events[step_id]
            joined = with_log_events(data, events, max_events=max_events)
            updates[trace_id][step_id] = {"data": joined}
            inputs[trace_id][step_id] = joined.get("input")
            if step_type == StepType.THOUGHT:
                calls[trace_id].append((started_at, joined.get("input"), None))
        tasks = _late_tasks(inputs, calls)
        return {
            trace_id: replace(item, updates=updates[trace_id], late_task=tasks.get(trace_id))
            if trace_id in updates
            else item
            for trace_id, item in items.items()
        }

    def wait(self, trace_ids: Sequence[uuid.UUID]) -> None:
        """Store the records of ``trace_ids`` whose span is not stored, to wait for it: one
        insert."""
        PendingLogEvents.objects.bulk_create(
            PendingLogEvents(
                trace_id=trace_id,
                step_id=step_id,
                span_id=self._logs[trace_id].span_ids[step_id],
                events=events,
            )
            for trace_id in trace_ids
            for step_id, events in self._logs[trace_id].events.items()
            if step_id not in self._stored[trace_id]
        )
