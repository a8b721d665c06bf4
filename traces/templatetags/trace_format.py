"""Formatting of trace figures for the browser: durations, costs and sizes."""

from __future__ import annotations

from django import template

register = template.Library()


@register.filter
def ms(value: int | float | None) -> str:
    """A duration in milliseconds as ``850 ms``, ``12.4 s`` or ``3 min 5 s``; ``—`` for None."""
    if value is None:
        return "—"
    if value < 1000:
        return f"{int(value)} ms"
    seconds = value / 1000
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, rest = divmod(int(seconds), 60)
    return f"{minutes} min {rest} s"


@register.filter
def usd(value: float | None) -> str:
    """A cost in USD with up to 4 significant decimals; empty for zero."""
    if not value:
        return ""
    return f"${value:.4f}" if value < 1 else f"${value:,.2f}"


@register.filter
def size(value: int | None) -> str:
    """A byte count as ``512 B``, ``4.2 KB`` or ``1.3 MB``."""
    value = value or 0
    if value < 1024:
        return f"{value} B"
    if value < 1024 * 1024:
        return f"{value / 1024:.1f} KB"
    return f"{value / 1024 / 1024:.1f} MB"


@register.filter
def minus_one(value: int) -> int:
    return value - 1
