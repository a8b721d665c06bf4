"""Shared admin helpers: read-only pretty JSON and links to related objects."""

from __future__ import annotations

import json
from typing import Any

from django.db.models import Model
from django.urls import reverse
from django.utils.html import format_html


def pretty_json(value: Any, *, limit: int = 200_000) -> str:
    """Escaped, indented JSON in a <pre>; very large values are cut with a note."""
    text = json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True, default=str)
    note = ""
    if len(text) > limit:
        note = f"\n… cut at {limit:,} of {len(text):,} characters"
        text = text[:limit]
    return format_html(
        '<pre style="white-space: pre-wrap; max-height: 40em; overflow: auto">{}{}</pre>',
        text,
        note,
    )


def admin_link(obj: Model | None, label: str | None = None) -> str:
    if obj is None:
        return "—"
    meta = obj._meta
    url = reverse(f"admin:{meta.app_label}_{meta.model_name}_change", args=[obj.pk])
    return format_html('<a href="{}">{}</a>', url, label or str(obj))
