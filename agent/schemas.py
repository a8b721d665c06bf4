"""Request and response schemas of the agent API."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from ninja import Field, Schema

from devassist.schemas import InputSchema
from traces.schemas import OutcomeOut


class AgentIn(InputSchema):
    message: str = Field(..., max_length=100_000)
    tools: list[str] | None = Field(None, description="Limit the run to these tools.")
    conversation_id: uuid.UUID | None = Field(
        None,
        description="Run in this conversation of yours: the message and the answer are "
        "stored there, and the agent remembers the conversation.",
    )
    collection_name: str | None = Field(
        None,
        max_length=63,
        description="The knowledge collection search_docs searches (unless the model names "
        "another); default: the project's documentation.",
    )


class StepEventOut(Schema):
    type: str
    step_index: int
    step_id: str
    thought: str
    action_raw: str
    tool_name: str | None
    tool_args: dict[str, Any] | None
    observation: Any = Field(
        None,
        description="The tool's structured result (for execute_code: stdout, stderr, "
        "exit_code, duration_ms, timed_out, oom_killed, truncated...).",
    )
    error: str | None
    status: str = Field(description="The result step's (the action's, for a call cut short).")
    outcome: OutcomeOut = Field(description="What it came to (docs/chat.md, step states).")
    started_at_ms: int
    finished_at_ms: int
    latency_ms: int


class AgentOut(Schema):
    run_id: uuid.UUID
    trace_id: uuid.UUID | None
    conversation_id: uuid.UUID | None
    answer: str
    steps: list[StepEventOut]


class RunOut(Schema):
    run_id: uuid.UUID
    trace_id: uuid.UUID | None
    conversation_id: uuid.UUID | None
    mode: str
    status: str
    input: str
    answer: str
    error: str
    error_code: str
    tools: list[str]
    model: str
    created_at: datetime
    started_at: datetime | None
    first_output_at: datetime | None
    finished_at: datetime | None


class RunWithStepsOut(RunOut):
    steps: list[StepEventOut]


class RunListOut(Schema):
    runs: list[RunWithStepsOut]
    limit: int
    offset: int
    next_offset: int | None
