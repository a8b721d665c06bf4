"""Base classes and field types for API schemas."""

from __future__ import annotations

import types
from datetime import UTC, datetime
from functools import cache
from typing import Annotated, Any, Union, get_args, get_origin

from pydantic import AfterValidator, BaseModel, ConfigDict, model_validator


class InputSchema(BaseModel):
    """Request bodies: plain pydantic models, so only a JSON object validates (django-ninja's
    ``Schema`` reads attributes from any object, which turns ``[1]`` into an empty body), and
    unknown fields are refused rather than silently dropped. ``null`` for an optional field
    that cannot hold it means the same as leaving the field out (how most clients say "no
    error"); a required field stays required."""

    model_config = ConfigDict(extra="forbid")

    @model_validator(mode="before")
    @classmethod
    def _null_is_absent(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        defaulted = _null_means_default(cls)
        if not any(value is None and name in defaulted for name, value in data.items()):
            return data
        return {n: v for n, v in data.items() if v is not None or n not in defaulted}


@cache
def _null_means_default(schema: type[BaseModel]) -> frozenset[str]:
    """The fields of ``schema`` that have a default and do not take None."""
    return frozenset(
        name
        for name, field in schema.model_fields.items()
        if not field.is_required() and not _takes_none(field.annotation)
    )


def _takes_none(annotation: Any) -> bool:
    if annotation is Any or annotation is None or annotation is type(None):
        return True
    if get_origin(annotation) is Annotated:
        return _takes_none(get_args(annotation)[0])
    if get_origin(annotation) in (Union, types.UnionType):
        return any(_takes_none(arg) for arg in get_args(annotation))
    return False


def _in_utc_range(value: datetime) -> datetime:
    try:
        (value if value.tzinfo else value.replace(tzinfo=UTC)).astimezone(UTC)
    except OverflowError as exc:
        raise ValueError("the time is outside the years 1 to 9999 in UTC") from exc
    return value


#: A timestamp that can be stored: in UTC it falls within the years 1 to 9999.
StorableDatetime = Annotated[datetime, AfterValidator(_in_utc_range)]
