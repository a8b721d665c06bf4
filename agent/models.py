"""Agent runs: the lifecycle of one request to the agent, and its event log (the SSE stream)."""

from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models

from devassist.storable import StorableJSONField, StorableTextField
from traces.models import Trace


class RunMode(models.TextChoices):
    CHAT = "chat"
    RAG = "rag"
    AGENT = "agent"


class RunStatus(models.TextChoices):
    QUEUED = "queued"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"


FINAL_RUN_STATUSES = (RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELLED)
#: A cancelled run's error when its goal step records none (``agent.selectors.run_error``).
RUN_CANCELLED_MESSAGE = "Cancelled."
#: A run in one of these has an owner worker with a lease (``agent.leases``).
LIVE_RUN_STATUSES = (RunStatus.QUEUED, RunStatus.RUNNING)


class AgentRunQuerySet(models.QuerySet["AgentRun"]):
    def visible_to(self, user: models.Model) -> AgentRunQuerySet:
        if getattr(user, "is_staff", False):
            return self
        return self.filter(user=user)


class AgentRun(models.Model):
    """One run's lifecycle; it owns one trace, the record of what it did, its answer and its
    error included. Timings are wall-clock for people; durations in the trace come from a
    monotonic clock."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="agent_runs"
    )
    trace = models.OneToOneField(
        Trace, null=True, blank=True, on_delete=models.SET_NULL, related_name="run"
    )
    conversation = models.ForeignKey(
        "chat.Conversation",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="runs",
    )
    request_id = models.CharField(max_length=128, blank=True)
    mode = models.CharField(max_length=16, choices=RunMode.choices, default=RunMode.AGENT)
    status = models.CharField(max_length=16, choices=RunStatus.choices, default=RunStatus.QUEUED)
    input = StorableTextField()
    #: The answer and the error are not here: the run's trace records them once
    #: (``agent.selectors.run_outcomes``). ``error_code`` is a short code to filter runs by.
    error_code = models.CharField(max_length=64, blank=True)
    tools = models.JSONField(default=list, blank=True)
    model = models.CharField(max_length=200, blank=True)
    langfuse_trace_id = models.CharField(max_length=64, blank=True)
    cancel_requested_at = models.DateTimeField(null=True, blank=True)
    #: The worker executing the run and when it last renewed its lease (``agent.leases``).
    owner = models.CharField(max_length=200, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    first_output_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    objects = AgentRunQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [
            models.Index(fields=["user", "-created_at"], name="agentrun_user_newest"),
            models.Index(fields=["status", "heartbeat_at"], name="agentrun_status_heartbeat"),
        ]

    def __str__(self) -> str:
        return f"{self.input[:60]} ({self.status})"

    @property
    def is_finished(self) -> bool:
        return self.status in FINAL_RUN_STATUSES


class RunEvent(models.Model):
    """The run's SSE events in order, so a client that dropped can re-attach and miss nothing."""

    run = models.ForeignKey(AgentRun, on_delete=models.CASCADE, related_name="events")
    seq = models.PositiveIntegerField()
    type = models.CharField(max_length=16)
    payload = StorableJSONField(default=dict)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["run", "seq"]
        constraints = [
            models.UniqueConstraint(fields=["run", "seq"], name="run_event_unique_seq"),
        ]

    def __str__(self) -> str:
        return f"{self.type} #{self.seq}"
