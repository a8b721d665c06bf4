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


class ArtifactOut(Schema):
    id: uuid.UUID
    name: str = Field(..., description="Sanitised: letters, digits, `.`, `-`, `_`, spaces.")
    media_type: str = Field(..., description="Sniffed from the content, not from the name.")
    size: int
    sha256: str
    width: int | None = Field(None, description="Raster images only.")
    height: int | None = None
    url: str = Field(
        ...,
        description="GET it with the same credentials: the caller and staff may read it. "
        "Raster images and plain text are served inline (`?download=true` to download), "
        "everything else as a download.",
    )


class SkippedFileOut(Schema):
    name: str
    reason: str


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
    artifacts: list[ArtifactOut] = Field(
        ...,
        description="Files the code wrote under /tmp/outputs and its matplotlib figures (PNG), "
        "within the output file limits; stored with the call's trace.",
    )
    skipped_files: list[SkippedFileOut] = Field(
        ..., description="Outputs left out (symbolic links, past a limit), and why."
    )
    skipped_more: int = Field(..., description="Outputs left out beyond those listed.")
