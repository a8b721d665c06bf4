"""What the database and the JSON encoders can hold, checked at the door and enforced on write.

PostgreSQL refuses NUL in text and in jsonb, UTF-8 has no lone surrogates, bigint columns and
orjson stop at 64 bits, JSON has no NaN or Infinity, and orjson nests at most 254 levels. One
such value stored would make every later read that meets it fail, so:

PostgreSQL keeps a JSON number as a decimal and gives a float past 2^63 back as a long
integer (1e20 as 100000000000000000000), so numbers of either kind stop at ±(2^63 − 1).

- input from people (request bodies and query strings) holding one is refused with its path
  (``value_problems``; ``devassist.parser`` turns them into a 422 ``validation_error``);
- text from programs (sandbox and tool output, model replies, the arguments a model wrote)
  must be kept, so it is made storable on every write: by the model fields that hold it
  (``StorableJSONField``, ``StorableTextField``, ``StorableCharField``), or by a writer that
  builds events from an instance before saving it (``make_storable``, the trace store): NUL
  and lone surrogates become U+FFFD, numbers past 64 bits and NaN or Infinity become their
  text, anything nested deeper than ``MAX_JSON_DEPTH`` becomes its JSON text; a JSON object
  that had something replaced carries ``REPLACED_FLAG: true``.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from django.db import models

#: The largest magnitude a signed 64-bit integer (PostgreSQL's bigint) holds, either sign.
MAX_INT = 2**63 - 1
#: How deep JSON input may nest; leaves room for the envelopes around it (tree nodes, events)
#: below orjson's limit of 254.
MAX_JSON_DEPTH = 100
REPLACEMENT = "\ufffd"
#: Set on a stored JSON object whose values had to be replaced to be stored.
REPLACED_FLAG = "storage_replaced"

_UNSTORABLE_CHARS = re.compile("[\x00\ud800-\udfff]")

Path = tuple[str | int, ...]


@dataclass(frozen=True)
class Problem:
    """Why a value cannot be stored, and where it sits (keys and indexes from the top)."""

    path: Path
    message: str
    kind: str


def text_problem(text: str) -> str | None:
    """Why ``text`` cannot be stored, or None."""
    found = _UNSTORABLE_CHARS.search(text)
    if found is None:
        return None
    if found.group() == "\x00":
        return "contains a NUL character (\\u0000), which cannot be stored"
    return "contains a lone surrogate (not valid Unicode text)"


def value_problems(value: Any, path: Path = ()) -> list[Problem]:
    """Every unstorable value in decoded JSON (or a query's strings), each with its path."""
    return list(_problems(value, path, 0))


def _problems(value: Any, path: Path, depth: int) -> Iterator[Problem]:
    if isinstance(value, str):
        message = text_problem(value)
        if message:
            yield Problem(path, message, "unstorable_text")
    elif isinstance(value, bool):
        return
    elif isinstance(value, int | float):
        if isinstance(value, float) and not math.isfinite(value):
            yield Problem(path, "NaN and Infinity are not JSON numbers", "number_not_finite")
        elif not -MAX_INT <= value <= MAX_INT:
            yield Problem(path, f"number outside ±{MAX_INT} (64 bits)", "number_out_of_range")
    elif isinstance(value, dict | list):
        if depth >= MAX_JSON_DEPTH:
            yield Problem(path, f"nested deeper than {MAX_JSON_DEPTH} levels", "too_deep")
            return
        if isinstance(value, dict):
            for key, item in value.items():
                if isinstance(key, str) and (message := text_problem(key)):
                    yield Problem((*path, key), f"key {message}", "unstorable_text")
                yield from _problems(item, (*path, key), depth + 1)
        else:
            for index, item in enumerate(value):
                yield from _problems(item, (*path, index), depth + 1)


def storable_text(text: str) -> str:
    """``text`` with NUL and lone surrogates replaced by U+FFFD (the same object when clean)."""
    if _UNSTORABLE_CHARS.search(text) is None:
        return text
    return _UNSTORABLE_CHARS.sub(REPLACEMENT, text)


def storable_json(value: Any) -> tuple[Any, bool]:
    """``value`` made storable as JSON, and whether anything was replaced; the same object
    when nothing was. Only the JSON types are looked into; other values pass as they are."""
    return _storable(value, 0)


def _storable(value: Any, depth: int) -> tuple[Any, bool]:
    if isinstance(value, str):
        text = storable_text(value)
        return text, text is not value
    if isinstance(value, bool):
        return value, False
    if isinstance(value, int | float):
        if isinstance(value, float) and not math.isfinite(value):
            return _float_text(value), True
        return (value, False) if -MAX_INT <= value <= MAX_INT else (str(value), True)
    if isinstance(value, dict | list | tuple):
        if depth >= MAX_JSON_DEPTH:
            return _json_text(value), True
        if isinstance(value, dict):
            return _storable_dict(value, depth)
        items = [_storable(item, depth + 1) for item in value]
        if not any(replaced for _, replaced in items):
            return value, False
        return [item for item, _ in items], True
    return value, False


def _storable_dict(value: dict[Any, Any], depth: int) -> tuple[Any, bool]:
    pairs = []
    changed = False
    for key, item in value.items():
        new_key = storable_text(key) if isinstance(key, str) else key
        new_item, replaced = _storable(item, depth + 1)
        changed = changed or replaced or new_key is not key
        pairs.append((new_key, new_item))
    return (dict(pairs), True) if changed else (value, False)


def _float_text(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    return "Infinity" if value > 0 else "-Infinity"


def _json_text(value: Any) -> str:
    """A subtree too deep to store, kept as its JSON text (ASCII: escapes are plain text)."""
    try:
        return json.dumps(value, default=str, allow_nan=True)
    except (RecursionError, ValueError):
        return REPLACEMENT


def storable_json_value(value: Any) -> Any:
    """``value`` as a JSON column stores it: made storable, and a JSON object that had
    something replaced flagged with ``REPLACED_FLAG`` (the same object when clean)."""
    stored, replaced = storable_json(value)
    if replaced and isinstance(stored, dict):
        return {**stored, REPLACED_FLAG: True}
    return stored


def storable_value(field: models.Field[Any, Any], value: Any) -> Any:
    """``value`` as ``field`` stores it: a JSON field's made storable (``storable_json_value``),
    text made storable (``storable_text``), anything else as it is."""
    if isinstance(field, models.JSONField):
        return storable_json_value(value)
    return storable_text(value) if isinstance(value, str) else value


def make_storable(instance: models.Model) -> None:
    """Replace in ``instance``'s text and JSON fields what the database cannot hold
    (``storable_value``). Call it before the instance is saved, and before anything is made
    from it, so that what is answered and broadcast is what is stored."""
    for field in instance._meta.concrete_fields:
        setattr(instance, field.attname, storable_value(field, getattr(instance, field.attname)))


class _Storable:
    """Makes a field's value storable on every write (``storable_value``): on insert and save
    the instance gets the stored value too (so what is published or answered from it is what
    was stored); ``QuerySet.update`` values are made storable on their way to the database."""

    def pre_save(self, model_instance: models.Model, add: bool) -> Any:
        value = super().pre_save(model_instance, add)  # type: ignore[misc]
        stored = storable_value(self, value)  # type: ignore[arg-type]
        if stored is not value:
            setattr(model_instance, self.attname, stored)  # type: ignore[attr-defined]
        return stored

    def get_prep_value(self, value: Any) -> Any:
        return super().get_prep_value(storable_value(self, value))  # type: ignore[misc,arg-type]


class StorableJSONField(_Storable, models.JSONField):
    """A ``JSONField`` for values programs wrote."""


class StorableTextField(_Storable, models.TextField):
    """A ``TextField`` for text programs wrote."""


class StorableCharField(_Storable, models.CharField):
    """A ``CharField`` for text programs wrote."""
