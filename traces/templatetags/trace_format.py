"""Formatting of trace figures for the browser: durations, costs, sizes, times, outcomes, and
the stored names of statuses, step types and modes, in the reader's language (the stored
values stay English: they are data, and the API's)."""

from __future__ import annotations

import math
from datetime import datetime
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

from django import template
from django.utils.formats import number_format
from django.utils.html import format_html_join
from django.utils.safestring import SafeString
from django.utils.translation import pgettext_lazy

from devassist.responses import children_first, json_bytes
from traces.outcomes import localized_reason, localized_summary, outcome_symbol
from traces.projections import clip

register = template.Library()

register.filter("outcome_symbol", outcome_symbol)
register.filter("outcome_text", localized_summary)
register.filter("outcome_reason", localized_reason)


@register.filter
def ms(value: int | float | None) -> str:
    """A duration in milliseconds as ``850 ms``, ``12.4 s`` or ``3 min 5 s`` (the units are
    symbols, the same in every language; the number is formatted for it); ``—`` for None."""
    if value is None:
        return "—"
    if value < 1000:
        return f"{int(value)} ms"
    seconds = value / 1000
    if seconds < 60:
        return f"{number_format(seconds, 1)} s"
    minutes, rest = divmod(int(seconds), 60)
    return f"{minutes} min {rest} s"


#: The decimals a cost below 1 USD shows at least, and at most (the store keeps 8).
COST_PLACES = (4, 8)


def cost_places(value: float | Decimal) -> int:
    """The decimals that show a cost (below 1 USD) to its first two significant digits: 4,
    more for one below a tenth of a cent, a model call of a small model's (``0.000020``, not
    ``0.0000``), at most 8. static/js/format.js's ``costText`` counts them alike."""
    least, most = COST_PLACES
    if value <= 0 or value >= 0.001:
        return least
    return min(most, max(least, 1 - math.floor(math.log10(value))))


@register.filter
def cost(value: float | Decimal | None) -> str:
    """A cost as a number (a trace's total in the list and on its page): ``cost_places``
    decimals."""
    value = value or 0
    return _rounded(value, cost_places(value))


@register.filter
def usd(value: float | Decimal | None) -> str:
    """A cost in USD: below 1 USD with ``cost_places`` decimals, else with 2; empty for
    zero."""
    if not value:
        return ""
    if value < 1:
        return f"${_rounded(value, cost_places(value))}"
    return f"${_rounded(value, 2, force_grouping=True)}"


def _rounded(value: float | Decimal, places: int, *, force_grouping: bool = False) -> str:
    """``value`` rounded to ``places`` decimals as the reader's language writes it (Django's
    ``number_format`` cuts the digits past them instead)."""
    exact = Decimal(str(value)).quantize(Decimal(1).scaleb(-places), rounding=ROUND_HALF_UP)
    return number_format(exact, places, force_grouping=force_grouping)


@register.filter
def size(value: int | None) -> str:
    """A byte count as ``512 B``, ``4.2 KB`` or ``1.3 MB``."""
    value = value or 0
    if value < 1024:
        return f"{value} B"
    if value < 1024 * 1024:
        return f"{number_format(value / 1024, 1)} KB"
    return f"{number_format(value / 1024 / 1024, 1)} MB"


@register.filter
def minus_one(value: int) -> int:
    return value - 1


@register.filter
def as_datetime(value: str | None) -> datetime | None:
    """An ISO 8601 time as the projections carry it (``2025-01-02T03:04:05.678Z``), as a
    datetime for the ``date`` and ``time`` filters; None for none or a malformed one."""
    if not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


#: How much of a log record's body (or attributes) a waiting record shows.
LOG_RECORD_CHARS = 300


@register.filter
def log_record_text(event: Any) -> str:
    """What a log record event says, in a line: its body (a string as it is, anything else
    as JSON), else its attributes as JSON; clipped to ``LOG_RECORD_CHARS``. Something that is
    not an event object is shown as JSON itself."""
    said = event.get("body") if isinstance(event, dict) else event
    if said is None and isinstance(event, dict):
        said = event.get("attributes") or ""
    if not isinstance(said, str):
        said = json_bytes(said).decode()
    return clip(said, LOG_RECORD_CHARS)


# The words for stored values, lazy: each is looked up in the active language only when shown.
_STATUSES = {
    "planned": pgettext_lazy("status", "planned"),
    "queued": pgettext_lazy("status", "queued"),
    "running": pgettext_lazy("status", "running"),
    "completed": pgettext_lazy("status", "completed"),
    "failed": pgettext_lazy("status", "failed"),
    "cancelled": pgettext_lazy("status", "cancelled"),
    "skipped": pgettext_lazy("status", "skipped"),
}
_STEP_TYPES = {
    "goal": pgettext_lazy("step type", "goal"),
    "thought": pgettext_lazy("step type", "thought"),
    "action": pgettext_lazy("step type", "action"),
    "result": pgettext_lazy("step type", "result"),
    "response": pgettext_lazy("step type", "response"),
    "memory_read": pgettext_lazy("step type", "memory read"),
    "memory_write": pgettext_lazy("step type", "memory write"),
    "feedback": pgettext_lazy("step type", "feedback"),
}
_MODES = {
    "call": pgettext_lazy("mode", "call"),
    "agent": pgettext_lazy("mode", "agent"),
    "chat": pgettext_lazy("mode", "chat"),
    "rag": pgettext_lazy("mode", "rag"),
}


@register.filter
def status_label(value: str) -> str:
    """A stored status (a trace's, a step's or a run's) in the reader's language."""
    return str(_STATUSES.get(value, value))


@register.filter
def step_type_label(value: str) -> str:
    """A step's stored type in the reader's language."""
    return str(_STEP_TYPES.get(value, value))


@register.filter
def mode_label(value: str) -> str:
    """A trace's or a run's stored mode in the reader's language."""
    return str(_MODES.get(value, value))


@register.simple_tag(takes_context=True)
def tree_nodes(context: template.Context, nodes: Any) -> SafeString:
    """``nodes`` (tree nodes, or one) as ``traces/_node.html`` renders each, an open node's
    children inside it (its ``children_html``). Rendered deepest first, each node once: a
    template that includes itself for each level nests some two dozen Python calls a level,
    and failed (``RecursionError``, a 500) on a deep link to a step 40 levels down, which
    OTLP traces reach."""
    tops = nodes if isinstance(nodes, list) else [nodes]
    assert context.template is not None  # a tag renders within a template
    node_template = context.template.engine.get_template("traces/_node.html")
    rendered: dict[int, SafeString] = {}

    def joined(items: list[dict[str, Any]]) -> SafeString:
        # The rendered nodes are safe (autoescaped) strings: joined as they are.
        return format_html_join("", "{}", ((rendered.pop(id(item)),) for item in items))

    for node in children_first(tops):
        with context.push(node=node, children_html=joined(node.get("children") or [])):
            rendered[id(node)] = node_template.render(context)
    return joined(tops)
