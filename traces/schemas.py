"""Request and response schemas of the trace API."""

from __future__ import annotations

import uuid
from datetime import datetime
from decimal import Decimal
from typing import Any, Literal

from ninja import Field, Schema
from pydantic import field_validator

from devassist.schemas import InputSchema, StorableDatetime
from devassist.storable import MAX_INT
from traces.store import COST_LIMIT

COST_QUANTUM = Decimal("0.00000001")


def _quantized_cost(value: Any) -> Any:
    """Costs arrive as JSON numbers; keep 8 decimal places rather than refuse 0.1 + 0.2."""
    if value is None or isinstance(value, bool):
        return value
    try:
        return Decimal(str(value)).quantize(COST_QUANTUM)
    except ArithmeticError:
        return value  # let the field's own validation report it


StepTypeName = Literal[
    "goal", "thought", "action", "result", "response", "memory_read", "memory_write", "feedback"
]
StepStatusName = Literal["planned", "running", "completed", "failed", "skipped"]
TraceStatusName = Literal["running", "completed", "failed", "cancelled"]
FinalStatusName = Literal["completed", "failed", "cancelled"]
TraceModeName = Literal["call", "agent"]


class TraceIn(InputSchema):
    task: str = Field("", max_length=20_000)
    mode: TraceModeName = "agent"
    agent_type: str = Field("external", min_length=1, max_length=100)
    metadata: dict[str, Any] = Field(default_factory=dict)


class TraceOut(Schema):
    trace_id: uuid.UUID
    mode: TraceModeName
    task: str
    agent_type: str
    status: TraceStatusName
    user: str | None
    total_steps: int
    total_tokens: int
    total_cost: float
    total_duration_ms: int | None
    error_count: int
    root_count: int
    last_seq: int
    created_at: datetime
    completed_at: datetime | None
    metadata: dict[str, Any]


class TraceListOut(Schema):
    traces: list[TraceOut]
    next_cursor: str | None


class StepIn(InputSchema):
    id: uuid.UUID | None = Field(None, description="Client-chosen id; re-sending it is a no-op.")
    parent_id: uuid.UUID | None = None
    step_type: StepTypeName
    status: StepStatusName = "completed"
    name: str = Field("", max_length=200)
    description: str = Field("", max_length=20_000)
    data: Any = Field(default_factory=dict)
    error: str = Field("", max_length=100_000)
    started_at: StorableDatetime | None = None
    finished_at: StorableDatetime | None = None
    duration_ms: int | None = Field(None, ge=0, le=MAX_INT)
    tokens: int = Field(0, ge=0, le=2**31 - 1)
    cost: Decimal = Field(Decimal(0), ge=0, lt=COST_LIMIT)

    _cost = field_validator("cost", mode="before")(_quantized_cost)

    @field_validator("data")
    @classmethod
    def _null_data_is_empty(cls, value: Any) -> Any:
        return {} if value is None else value


class StepPatch(InputSchema):
    status: StepStatusName | None = None
    name: str | None = Field(None, max_length=200)
    description: str | None = Field(None, max_length=20_000)
    data: Any = None
    error: str | None = Field(None, max_length=100_000)
    started_at: StorableDatetime | None = None
    finished_at: StorableDatetime | None = None
    duration_ms: int | None = Field(None, ge=0, le=MAX_INT)
    tokens: int | None = Field(None, ge=0, le=2**31 - 1)
    cost: Decimal | None = Field(None, ge=0, lt=COST_LIMIT)

    _cost = field_validator("cost", mode="before")(_quantized_cost)


class TraceCompleteIn(InputSchema):
    status: FinalStatusName = "completed"
    total_duration_ms: int | None = Field(None, ge=0, le=MAX_INT)


class OutcomeOut(Schema):
    """A step's outcome (``traces.outcomes.step_outcome``)."""

    kind: str = Field(
        description="ok, failed, blocked, timed_out, oom, cancelled, running or pending"
    )
    label: str
    reason: str
    summary: str
    is_error: bool


class StepOut(Schema):
    step_id: uuid.UUID
    trace_id: uuid.UUID
    parent_id: uuid.UUID | None
    seq: int
    depth: int
    step_type: StepTypeName
    status: StepStatusName
    name: str
    description: str
    error: str
    started_at: datetime | None
    finished_at: datetime | None
    duration_ms: int | None
    tokens: int
    cost: float
    children_count: int
    has_children: bool
    subtree_steps: int
    subtree_error_count: int
    subtree_tokens: int
    subtree_cost: float
    data_preview: str
    data_bytes: int
    outcome: OutcomeOut


class StepFullOut(StepOut):
    path: list[int]
    data: Any
    #: A model call whose own tokens (cost) a model call under it counts: shown in ``tokens``
    #: (``cost``), left out of the rollups and the trace's totals.
    tokens_counted_below: bool
    cost_counted_below: bool


class StepsAddedOut(Schema):
    steps: list[StepOut]
    created: int
    existing: int


class StepHead(StepOut):
    data: Any = Field(None, description="Only with view=full / expand=true.")


class StepNode(StepHead):
    children: list[StepNode]


class TreeOut(Schema):
    trace: TraceOut
    root_steps: list[StepNode]


class NodeOut(Schema):
    step: StepHead | None
    children: list[StepNode]
    total_children: int
    next_offset: int | None


class EventsOut(Schema):
    events: list[dict[str, Any]]
    last_seq: int
    has_more: bool


class WaitingSpanOut(Schema):
    """The log records of a span that has not arrived, as step events (docs/opentelemetry.md)."""

    step_id: str = Field(description="The step the span will be.")
    span_id: str | None = Field(description="The span's OpenTelemetry id (hex).")
    received_at: str = Field(description="When its first record came.")
    events: list[Any] = Field(description="Its records, as step events (objects).")


class WaitingLogRecordsOut(Schema):
    spans: list[WaitingSpanOut]
    total_spans: int
    next_offset: int | None


class WaitingStepOut(StepOut):
    parent_span_id: str | None = Field(description="The span it waits for (hex).")


class WaitingStepsOut(Schema):
    steps: list[WaitingStepOut]
    total_steps: int
    next_offset: int | None
