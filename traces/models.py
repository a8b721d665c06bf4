"""Traces: every agent run as a tree of steps, with rollups kept on write and an event log.

Only ``traces.store`` writes traces, steps and their events (``traces.services`` writes the
``PendingLogEvents`` that wait for their span); the fields below that it maintains (``seq``,
``depth``, ``path``, ``pending_parent_id``, ``children_count``, the ``subtree_*`` rollups,
``data_preview``, ``data_bytes``, ``tool_facts``, the trace totals and ``last_seq``) are never
recomputed on read.
"""

from __future__ import annotations

import uuid
from decimal import Decimal

from django.conf import settings
from django.db import models
from django.db.models import F, Value
from django.db.models.fields.json import KeyTransform
from django.utils import timezone

from devassist.storable import StorableJSONField


def money_field() -> models.DecimalField:
    """Costs in USD, exact to 1e-8."""
    return models.DecimalField(max_digits=20, decimal_places=8, default=Decimal(0))


class TraceMode(models.TextChoices):
    CALL = "call"
    AGENT = "agent"


class TraceStatus(models.TextChoices):
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"


FINAL_TRACE_STATUSES = (TraceStatus.COMPLETED, TraceStatus.FAILED, TraceStatus.CANCELLED)

#: The key of an OTLP trace's metadata that holds what OTLP said of it (its OTel trace id,
#: its first resource); only such traces take OTLP spans.
OTEL_METADATA_KEY = "otel"


class StepType(models.TextChoices):
    GOAL = "goal"
    THOUGHT = "thought"
    ACTION = "action"
    RESULT = "result"
    RESPONSE = "response"
    MEMORY_READ = "memory_read"
    MEMORY_WRITE = "memory_write"
    FEEDBACK = "feedback"


class StepStatus(models.TextChoices):
    PLANNED = "planned"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    SKIPPED = "skipped"


class TraceQuerySet(models.QuerySet["Trace"]):
    def visible_to(self, user: models.Model) -> TraceQuerySet:
        """Staff see every trace; everyone else their own."""
        if getattr(user, "is_staff", False):
            return self
        return self.filter(user=user)

    def newest_first(self) -> TraceQuerySet:
        return self.order_by("-created_at", "-id")


class Trace(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    mode = models.CharField(max_length=16, choices=TraceMode.choices, default=TraceMode.AGENT)
    task = models.TextField(blank=True)
    agent_type = models.CharField(max_length=100, default="devassist")
    status = models.CharField(
        max_length=16, choices=TraceStatus.choices, default=TraceStatus.RUNNING
    )
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="traces",
    )
    total_steps = models.PositiveIntegerField(default=0)
    total_tokens = models.PositiveBigIntegerField(default=0)
    total_cost = money_field()
    total_duration_ms = models.PositiveBigIntegerField(null=True, blank=True)
    error_count = models.PositiveIntegerField(default=0)
    root_count = models.PositiveIntegerField(default=0, help_text="Steps without a parent.")
    last_seq = models.PositiveBigIntegerField(
        default=0, help_text="Sequence number of the newest event in this trace's event log."
    )
    #: Set as the instance is made, not as it is inserted: a trace opened together with
    #: others (``OrmTraceStore.open_traces_sync``) is built whole, its events too, before
    #: the one insert.
    created_at = models.DateTimeField(default=timezone.now, editable=False)
    completed_at = models.DateTimeField(null=True, blank=True)
    metadata = models.JSONField(default=dict, blank=True)

    objects = TraceQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [
            models.Index(fields=["-created_at", "-id"], name="trace_newest"),
            models.Index(fields=["user", "-created_at", "-id"], name="trace_user_newest"),
        ]

    def __str__(self) -> str:
        return f"{self.task[:60] or self.id} ({self.status})"

    @property
    def is_running(self) -> bool:
        return self.status == TraceStatus.RUNNING

    @property
    def is_otlp(self) -> bool:
        """Whether the trace was recorded over OTLP (``POST /v1/traces``)."""
        return isinstance(self.metadata, dict) and OTEL_METADATA_KEY in self.metadata


class StepQuerySet(models.QuerySet["Step"]):
    def for_trace(self, trace: Trace | uuid.UUID) -> StepQuerySet:
        return self.filter(trace=trace)

    def roots(self) -> StepQuerySet:
        return self.filter(parent__isnull=True)

    def children_of(self, parent_id: uuid.UUID | None) -> StepQuerySet:
        """The children of a step; the top-level steps for None."""
        return self.roots() if parent_id is None else self.filter(parent_id=parent_id)

    def in_order(self) -> StepQuerySet:
        return self.order_by("seq")

    def failed(self) -> StepQuerySet:
        """Steps that count as errors (``Step.is_error``: their outcome is one)."""
        from traces.outcomes import error_condition

        return self.filter(error_condition())


class Step(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    trace = models.ForeignKey(Trace, on_delete=models.CASCADE, related_name="steps")
    parent = models.ForeignKey(
        "self",
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="children",
        # Its own index besides (trace, parent, seq): deleting a trace looks up every step's
        # children by parent alone (the cascade and the foreign key check), which without it
        # is a scan per step.
        db_index=True,
    )
    seq = models.PositiveBigIntegerField(help_text="Creation order; unique within the trace.")
    depth = models.PositiveIntegerField(default=0)
    path = models.JSONField(
        default=list, blank=True, help_text="The ancestors' seq numbers, root first."
    )
    pending_parent_id = models.UUIDField(
        null=True,
        blank=True,
        help_text="The parent this top-level step waits for: it was sent before its parent "
        "(OTLP), and moves under it when a step with this id is added.",
    )
    step_type = models.CharField(max_length=16, choices=StepType.choices)
    status = models.CharField(
        max_length=16, choices=StepStatus.choices, default=StepStatus.COMPLETED
    )
    name = models.CharField(max_length=200, blank=True)
    description = models.TextField(blank=True)
    data = models.JSONField(default=dict, blank=True)
    data_preview = models.CharField(max_length=200, blank=True)
    data_bytes = models.PositiveIntegerField(default=0)
    tool_facts = models.JSONField(
        default=dict,
        # Rows written without it (by an older migration's models) have none.
        db_default=Value({}, output_field=models.JSONField()),
        blank=True,
        help_text="What a result's outcome reads of its data (traces.outcomes.tool_facts).",
    )
    error = models.TextField(blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    duration_ms = models.PositiveBigIntegerField(null=True, blank=True)
    tokens = models.PositiveIntegerField(default=0)
    cost = money_field()
    #: A model call counts its own tokens (cost) once: where a model call under it reports
    #: them too (the same call recorded by a second instrumentation, or the calls it sums),
    #: its own are shown but not added to the rollups and the trace's totals (``traces.store``).
    tokens_counted_below = models.BooleanField(default=False, db_default=False)
    cost_counted_below = models.BooleanField(default=False, db_default=False)
    children_count = models.PositiveIntegerField(default=0)
    subtree_steps = models.PositiveIntegerField(
        default=1, help_text="Steps in the subtree, itself included."
    )
    subtree_error_count = models.PositiveIntegerField(default=0)
    subtree_tokens = models.PositiveBigIntegerField(default=0)
    subtree_cost = money_field()
    created_at = models.DateTimeField(auto_now_add=True)

    objects = StepQuerySet.as_manager()

    class Meta:
        ordering = ["trace", "seq"]
        constraints = [
            models.UniqueConstraint(fields=["trace", "seq"], name="step_unique_seq_per_trace"),
        ]
        indexes = [
            models.Index(fields=["trace", "parent", "seq"], name="step_children"),
            models.Index(fields=["trace", "depth", "seq"], name="step_depth"),
            models.Index(
                fields=["trace", "pending_parent_id"],
                condition=models.Q(pending_parent_id__isnull=False),
                name="step_pending_parent",
            ),
            # A subtree by its top step (``path[0]``): the steps that move when a waiting
            # step's parent arrives (``traces.store``). Without it each move read every step
            # of the trace: a late step's request into a 50,000-span trace took 60 ms, 18 ms
            # with it, as into a new trace (``otlp_ingest.py --late``, benchmarks/README.md).
            models.Index(F("trace"), KeyTransform("0", "path"), name="step_top"),
        ]

    def __str__(self) -> str:
        return f"#{self.seq} {self.step_type} {self.name}".strip()

    @property
    def is_error(self) -> bool:
        """Whether the step's outcome is an error (``traces.outcomes.step_outcome``): what
        the rollups count, "next error" finds and every badge shows."""
        from traces.outcomes import step_outcome

        return step_outcome(self.step_type, self.status, self.error, self.tool_facts).is_error


class TraceEvent(models.Model):
    """The per-trace event log: what the watch websocket sends, replayable by ``seq``, except
    each step's ``step_added``, whose record is the step (``selectors.trace_events_after``)."""

    trace = models.ForeignKey(Trace, on_delete=models.CASCADE, related_name="events")
    seq = models.PositiveBigIntegerField()
    event = models.CharField(max_length=32)
    payload = models.JSONField(default=dict)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["trace", "seq"]
        constraints = [
            models.UniqueConstraint(fields=["trace", "seq"], name="trace_event_unique_seq"),
        ]

    def __str__(self) -> str:
        return f"{self.event} #{self.seq}"


class PendingLogEvents(models.Model):
    """Log record events (``traces.otlp_logs``) of an OTLP span whose step is not stored yet:
    exporters send a span's log records as they are emitted, often before the span, which is
    sent when it ends. ``traces.services`` writes them, under the trace's lock, and moves them
    into the step's data when the span arrives (then the row goes)."""

    trace = models.ForeignKey(Trace, on_delete=models.CASCADE, related_name="+")
    step_id = models.UUIDField()
    #: The span's OpenTelemetry id (16 hex digits; empty in rows stored before it was kept),
    #: to name the span while it has no step.
    span_id = models.CharField(max_length=16, blank=True, default="")
    #: Made storable as it is written (a log record's body may hold NUL or a non-finite
    #: number, which PostgreSQL's JSON refuses).
    events = StorableJSONField(default=list)
    received_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        indexes = [models.Index(fields=["trace", "step_id"], name="pending_log_events_step")]
        verbose_name = "waiting log records"
        verbose_name_plural = "waiting log records"

    def __str__(self) -> str:
        return f"{len(self.events)} log event(s) for step {self.step_id}"
