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
from django.db.models import Q

from devassist.exceptions import DomainError
from traces.exceptions import TraceNotFromOtlp, TraceOfAnotherUser
from traces.messages import asked_in
from traces.models import OTEL_METADATA_KEY, PendingLogEvents, Step, StepType, Trace, TraceMode
from traces.otlp import (
    LOGS,
    Limits,
    OtlpError,
    Refusals,
    Signal,
    SpanBatch,
    TraceSpans,
    request_spans,
    task_of,
)
from traces.otlp_logs import LogBatch, TraceLogs, request_log_records, with_log_events
from traces.store import NewTrace, StepCreate, get_trace_store

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
    trace_id: uuid.UUID, *, user: Any, service: str, resource: dict[str, Any], task: str = ""
) -> Trace:
    """The trace that OTLP data for an unknown ``trace_id`` opens, as ``user``'s."""
    return Trace(
        id=trace_id,
        user=user,
        mode=TraceMode.AGENT,
        task=task,
        agent_type=service,
        metadata={OTEL_METADATA_KEY: {"trace_id": trace_id.hex, "resource": resource}},
    )


def _spans_trace(spans: TraceSpans, user: Any, task: str | None) -> Trace:
    """The trace that ``spans`` open when it is new: named after its root's service when the
    root came with them (a trace of several services is its entry point's)."""
    return _new_otlp_trace(
        spans.trace_id,
        user=user,
        service=spans.root_service or spans.service,
        resource=spans.resource,
        task=task or "",
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
        reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
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
    table, however many), the spans of each trace that exists in one store write of its own;
    a trace whose root span came completed with them (and named after the root's input and
    service). Log records that came before their span (``PendingLogEvents``) join its step
    as it is stored.

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


def _in_runs(
    traces: Mapping[uuid.UUID, T],
    *,
    new: Callable[[list[T]], int],
    stored: Callable[[list[T]], int],
) -> int:
    """Hand the items of ``traces`` (by trace id) in id order, in runs: the traces that are
    not stored to ``new``, the others to ``stored``; the sum of what they return. Every
    request takes its traces in the same order (locks them, or opens them), so no two wait on
    each other in a circle. Which are stored is read unlocked: one opened after this is
    found by the insert that opens it (``open_traces_sync``'s ``IntegrityError``)."""
    found = set(Trace.objects.filter(pk__in=list(traces)).values_list("pk", flat=True))
    total = 0
    for is_new, run in itertools.groupby(sorted(traces), key=lambda t: t not in found):
        items = [traces[trace_id] for trace_id in run]
        total += new(items) if is_new else stored(items)
    return total


def _open_spans(user: Any, batch: SpanBatch, traces: list[TraceSpans]) -> int:
    """Open the new ``traces`` together; one by one (``_add_spans``) when one of them was
    opened in the meantime (by a request of the same trace's spans or log records). Returns
    how many spans were refused as someone else's."""
    opening = [
        NewTrace(
            # Nothing of a new trace is stored, and no log record waits for it (they open
            # their trace too).
            trace=_spans_trace(
                spans, user, _task_from_first_question(spans, stored=False) or spans.task
            ),
            steps=spans.steps,
            complete=spans.complete,
            total_duration_ms=spans.duration_ms,
        )
        for spans in traces
    ]
    try:
        refused = get_trace_store().open_traces_sync(opening)
    except IntegrityError:
        return _add_spans(user, batch, traces)
    return sum(
        _refused(batch, exc, otel_trace_id=trace_id.hex, count=len(batch.traces[trace_id].steps))
        for trace_id, exc in refused.items()
    )


def _add_spans(user: Any, batch: SpanBatch, traces: list[TraceSpans]) -> int:
    """Add the spans of ``traces`` to them one trace at a time, each locked (or opened, when
    it is not stored) and checked to be ``user``'s. Returns how many spans were refused as
    someone else's."""
    store = get_trace_store()
    check = functools.partial(_owned_otlp_trace, user=user)
    foreign = 0
    for spans in traces:
        task = _task_from_waiting_input(spans) or _task_from_first_question(spans) or spans.task
        try:
            store.open_or_add_sync(
                _spans_trace(spans, user, task),
                spans.steps,
                check=check,
                # Read under the trace's lock: a request of log records for the trace has
                # committed them, or waits.
                prepare=functools.partial(_with_waiting_log_events, spans.trace_id),
                complete=spans.complete,
                total_duration_ms=spans.duration_ms,
                task=task,
                agent_type=spans.root_service,
            )
        except DomainError as exc:
            foreign += _refused(
                batch, exc, otel_trace_id=spans.otel_trace_id, count=len(spans.steps)
            )
    return foreign


def _refused(batch: Refusals, exc: DomainError, *, otel_trace_id: str, count: int) -> int:
    """Count a trace's ``count`` items refused by the store; how many of them were refused
    as someone else's."""
    batch.reject(count, f"trace {otel_trace_id}: {exc.message}")
    logger.info("otlp_trace_rejected", otel_trace_id=otel_trace_id, code=exc.code, items=count)
    return count if isinstance(exc, TraceOfAnotherUser) else 0


def _task_from_waiting_input(spans: TraceSpans) -> str | None:
    """The task of a trace whose root span came without an input, from the input that log
    records waiting for it give it (a plain script's model call is its root, its messages
    log records); None when none wait. Read before the trace's lock: a record that commits
    in between leaves the root's name as the task, nothing worse."""
    if spans.unnamed_root is None:
        return None
    waiting = PendingLogEvents.objects.filter(
        trace_id=spans.trace_id, step_id=spans.unnamed_root
    ).order_by("pk")
    events = [event for row in waiting.values_list("events", flat=True) for event in row]
    if not events:
        return None
    root_input = with_log_events({}, events, max_events=Limits.current().max_events).get("input")
    return task_of(root_input, "") or None


#: The stored model calls of a trace whose inputs ``_task_from_first_question`` looks at.
QUESTION_CANDIDATES = 20


def _task_from_first_question(spans: TraceSpans, *, stored: bool = True) -> str | None:
    """The task of a trace whose root span came without an input (an OpenAI Agents SDK
    workflow's, a plain span around an agent): what its first model call was asked (the
    last user message of the earliest model call whose input is a conversation, in this
    batch or, when the trace is ``stored``, stored before it); None when none was. One
    query, for such a root of a stored trace only."""
    if spans.unnamed_root is None:
        return None
    calls = [
        (step.started_at, step.data.get("input"), step.data.get("input_messages"))
        for step in spans.steps
        if step.step_type == StepType.THOUGHT and isinstance(step.data, dict)
    ]
    if stored:
        calls += list(
            Step.objects.filter(trace_id=spans.trace_id, step_type=StepType.THOUGHT)
            .filter(Q(data__has_key="input") | Q(data__has_key="input_messages"))
            .order_by("started_at")
            .values_list("started_at", "data__input", "data__input_messages")[:QUESTION_CANDIDATES]
        )
    calls.sort(key=lambda call: (call[0] is None, call[0] or datetime.min.replace(tzinfo=UTC)))
    # The messages flattened beside the request (OpenInference's) or the input itself.
    asked = (asked_in(messages) or asked_in(given) for _, given, messages in calls)
    return next((text for text in asked if text), None)


def _with_waiting_log_events(
    trace_id: uuid.UUID, steps: Sequence[StepCreate]
) -> Sequence[StepCreate]:
    """``steps`` with the log record events that waited for them in their data; the waiting
    rows go. The caller holds the trace's lock (``open_or_add_sync``'s ``prepare``)."""
    waiting = list(
        PendingLogEvents.objects.filter(trace_id=trace_id, step_id__in=[s.id for s in steps])
        .order_by("pk")
        .values_list("pk", "step_id", "events")
    )
    if not waiting:
        return steps
    events: dict[uuid.UUID, list[dict[str, Any]]] = defaultdict(list)
    for _, step_id, step_events in waiting:
        events[step_id] += step_events
    PendingLogEvents.objects.filter(pk__in=[pk for pk, _, _ in waiting]).delete()
    max_events = Limits.current().max_events
    return [
        replace(step, data=with_log_events(step.data, events[step.id], max_events=max_events))
        if step.id in events
        else step
        for step in steps
    ]


def otlp_logs_ingest(*, user: Any, batch: LogBatch) -> IngestOutcome:
    """Store ``batch`` (a request's log records, decoded by ``traces.otlp_logs``) for
    ``user``: each record joins the events of its span's step (``with_log_events``), in one
    store write per trace; the records of a span not stored yet wait for it
    (``PendingLogEvents``). The traces that do not exist yet are opened together as
    ``user``'s (their spans fill them), with their records waiting in one insert. One
    transaction, the traces locked or opened in id order; a trace the store refuses
    (another user's, one not recorded over OTLP) has all its records rejected and nothing
    written, as ``otlp_spans_ingest`` does."""
    with transaction.atomic():
        foreign = _in_runs(
            batch.traces,
            new=functools.partial(_open_logs, user, batch),
            stored=functools.partial(_add_logs, user, batch),
        )
    return _ingested(batch, foreign, "log record")


def _open_logs(user: Any, batch: LogBatch, traces: list[TraceLogs]) -> int:
    """Open the new ``traces`` together (with no steps, none is refused), every record of
    theirs waiting for its span; one by one (``_add_logs``) when one of them was opened in
    the meantime. Returns how many records were refused as someone else's: none."""
    opening = [
        NewTrace(
            trace=_new_otlp_trace(
                logs.trace_id, user=user, service=logs.service, resource=logs.resource
            ),
            steps=[],
        )
        for logs in traces
    ]
    try:
        get_trace_store().open_traces_sync(opening)
    except IntegrityError:
        return _add_logs(user, batch, traces)
    PendingLogEvents.objects.bulk_create(
        PendingLogEvents(
            trace_id=logs.trace_id, step_id=step_id, span_id=logs.span_ids[step_id], events=events
        )
        for logs in traces
        for step_id, events in logs.events.items()
    )
    return 0


def _add_logs(user: Any, batch: LogBatch, traces: list[TraceLogs]) -> int:
    """Add the records of ``traces`` one trace at a time, each locked (or opened, when it is
    not stored) and checked to be ``user``'s: to the steps of their spans that are stored,
    waiting for the others. Returns how many records were refused as someone else's."""
    store = get_trace_store()
    check = functools.partial(_owned_otlp_trace, user=user)
    max_events = Limits.current().max_events
    foreign = 0
    for logs in traces:
        trace_id = logs.trace_id
        new_trace = _new_otlp_trace(
            trace_id, user=user, service=logs.service, resource=logs.resource
        )
        try:
            with transaction.atomic():
                # The trace locked (or opened) first: its steps are read, and the records
                # that wait are written, under its lock (``otlp_spans_ingest`` reads them
                # under it).
                store.open_or_add_sync(new_trace, [], check=check)
                stored = dict(
                    Step.objects.filter(trace_id=trace_id, pk__in=list(logs.events))
                    .order_by()
                    .values_list("pk", "data")
                )
                if stored:
                    updates = {
                        step_id: {
                            "data": with_log_events(
                                data, logs.events[step_id], max_events=max_events
                            )
                        }
                        for step_id, data in stored.items()
                    }
                    store.open_or_add_sync(new_trace, [], updates=updates, check=check)
                PendingLogEvents.objects.bulk_create(
                    PendingLogEvents(
                        trace_id=trace_id,
                        step_id=step_id,
                        span_id=logs.span_ids[step_id],
                        events=events,
                    )
                    for step_id, events in logs.events.items()
                    if step_id not in stored
                )
        except DomainError as exc:
            foreign += _refused(batch, exc, otel_trace_id=trace_id.hex, count=logs.count)
    return foreign
