"""What format templates say: the fields of ``str.format`` templates and the widths of
``%``-templates, for the checks that look inside them."""

from __future__ import annotations

import re
import string
from collections.abc import Iterator

_FORMATTER = string.Formatter()
_FIELD_PART = re.compile(r"\.([^.\[]*)|\[([^\]]*)\]")
_PERCENT_SPEC = re.compile(r"%(?:\([^)]*\))?[-#0 +]*(\d*)(?:\.(\d+))?[a-zA-Z%]")


def format_fields(template: str, depth: int = 0) -> Iterator[tuple[str, str]]:
    """``(field_name, format_spec)`` of every replacement field of a ``str.format`` template,
    in order, each followed by the fields nested in its spec (two levels deep, as far as
    ``str.format`` nests); nothing for a template that doesn't parse."""
    if "{" not in template or depth > 2:
        return
    try:
        fields = list(_FORMATTER.parse(template))
    except ValueError:
        return
    for _, field_name, spec, _ in fields:
        yield field_name or "", spec or ""
        if spec and "{" in spec:
            yield from format_fields(spec, depth + 1)


def field_lookups(field_name: str) -> Iterator[str]:
    """The attribute names and keys a field name looks up: ``0.__init__[x]`` -> ``__init__``,
    ``x``."""
    for match in _FIELD_PART.finditer(field_name):
        yield match.group(1) or match.group(2)


def percent_widths(template: str) -> Iterator[str]:
    """``"<width>.<precision>"`` of every conversion of a ``%``-template (either may be
    empty)."""
    for width, precision in _PERCENT_SPEC.findall(template):
        yield f"{width}.{precision}"
