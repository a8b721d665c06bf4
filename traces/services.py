"""Writes of the traces app that are more than one store call: OTLP spans into traces.

The trace store (``traces.store``) stays the only writer of traces and steps; this module
decides which of them a request's spans may go into.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import structlog
from django.db import transaction

from devassist.exceptions import DomainError
from traces.exceptions import TraceNotFromOtlp, TraceOfAnotherUser
from traces.models import OTEL_METADATA_KEY, Trace, TraceMode
from traces.otlp import SpanBatch
from traces.store import get_trace_store

logger = structlog.get_logger(__name__)


@dataclass(frozen=True)
class IngestOutcome:
    """How many of a request's spans were stored and refused, why (the first reasons), and
    whether every refusal was a trace of someone else's."""

    accepted: int
    rejected: int
    reasons: list[str]
    only_foreign: bool

    @property
    def message(self) -> str:
        if not self.rejected:
            return ""
        return f"{self.rejected} span(s) rejected: " + "; ".join(self.reasons)


def _owned_otlp_trace(stored: Trace, *, user: Any) -> None:
    """Refuse spans for a trace that is not ``user``'s, or was not opened by OTLP spans."""
    if stored.user_id != user.pk:
        raise TraceOfAnotherUser(f"Trace {stored.id.hex} belongs to another user.")
    if not stored.is_otlp:
        raise TraceNotFromOtlp(
            f"Trace {stored.id.hex} was not recorded over OTLP; it takes no OTLP spans."
        )


def otlp_spans_ingest(*, user: Any, batch: SpanBatch) -> IngestOutcome:
    """Store ``batch`` (a request's spans, decoded by ``traces.otlp``) for ``user``: each
    trace's spans in one store write (one ``bulk_create`` of its steps), a trace that does not
    exist yet opened as ``user``'s, a trace whose root span came completed with it (and
    named after the root's input and service).

    All in one transaction, the traces locked in id order (two requests never wait on each
    other in a circle). A trace the store refuses (another user's, one not recorded over
    OTLP, a cost past the limit) has all its spans rejected and nothing written, the other
    traces are stored; anything else raises and nothing is stored. The refused spans are
    counted in ``batch`` (``SpanBatch.reject``)."""
    store = get_trace_store()
    foreign = 0
    with transaction.atomic():
        for trace_id in sorted(batch.traces):
            spans = batch.traces[trace_id]
            new_trace = Trace(
                id=trace_id,
                user=user,
                mode=TraceMode.AGENT,
                task=spans.task or "",
                agent_type=spans.root_service or spans.service,
                metadata={
                    OTEL_METADATA_KEY: {
                        "trace_id": spans.otel_trace_id,
                        "resource": spans.resource,
                    }
                },
            )
            try:
                store.open_or_add_sync(
                    new_trace,
                    spans.steps,
                    check=functools.partial(_owned_otlp_trace, user=user),
                    complete=spans.complete,
                    total_duration_ms=spans.duration_ms,
                    task=spans.task,
                    agent_type=spans.root_service,
                )
            except DomainError as exc:
                batch.reject(len(spans.steps), f"trace {spans.otel_trace_id}: {exc.message}")
                foreign += len(spans.steps) if isinstance(exc, TraceOfAnotherUser) else 0
                logger.info(
                    "otlp_trace_rejected",
                    otel_trace_id=spans.otel_trace_id,
                    code=exc.code,
                    spans=len(spans.steps),
                )
    return IngestOutcome(
        accepted=batch.total - batch.rejected,
        rejected=batch.rejected,
        reasons=batch.reasons,
        only_foreign=batch.rejected > 0 and foreign == batch.rejected,
    )
