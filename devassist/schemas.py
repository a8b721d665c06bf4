"""Base classes for API schemas."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class InputSchema(BaseModel):
    """Request bodies: plain pydantic models, so only a JSON object validates (django-ninja's
    ``Schema`` reads attributes from any object, which turns ``[1]`` into an empty body), and
    unknown fields are refused rather than silently dropped."""

    model_config = ConfigDict(extra="forbid")
