"""Writes of the project-wide models."""

from __future__ import annotations

from typing import Any

from devassist.models import Language, Theme, UserPreferences


def user_preferences_update(
    *, user: Any, theme: Theme | None = None, language: Language | None = None
) -> UserPreferences:
    """Store those of ``user``'s choices that are given (creating their preferences row on
    first use, with the defaults for the others)."""
    changes: dict[str, str] = {}
    if theme is not None:
        changes["theme"] = theme
    if language is not None:
        changes["language"] = language
    preferences, _ = UserPreferences.objects.update_or_create(user=user, defaults=changes)
    return preferences
