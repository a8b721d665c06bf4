"""Request and response schemas of the sandbox API."""

from __future__ import annotations

import uuid

from ninja import Field, Schema
from pydantic import field_validator

from devassist.schemas import InputSchema


class ExecuteIn(InputSchema):
    code: str = Field(..., min_length=1, description="Python 3 source, run with `python3 -I`.")
    timeout_s: float = Field(5, ge=1, le=60, description="Wall-clock limit, kept on the host.")

    @field_validator("code")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("code is blank")
        return value


class FindingOut(Schema):
    rule_id: str
    level: str
    line: int
    col: int
    reason: str


class SafetyReportOut(Schema):
    blocked: bool
    text: str
    findings: list[FindingOut]


class ExecuteOut(Schema):
    stdout: str
    stderr: str
    exit_code: int | None
    duration_ms: int
    timed_out: bool
    oom_killed: bool
    truncated: bool
    cancelled: bool
    backend: str
    image: str
    safety: SafetyReportOut
    trace_id: uuid.UUID
