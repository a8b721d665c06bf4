"""Reads of the project-wide models."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db.models import F

from devassist.models import ApiToken, Language, Theme, UserPreferences


@dataclass(frozen=True)
class Preferences:
    """A user's UI choices: ``theme`` (a ``Theme`` value) and ``language`` (a ``Language``
    value, ``""`` for the browser's)."""

    theme: str = Theme.SYSTEM.value
    language: str = Language.BROWSER.value


def preferences_for(*, user: Any) -> Preferences:
    """The user's preferences in one query; the defaults (the system's theme, the browser's
    language) for an anonymous user or one who never chose."""
    if not user.is_authenticated:
        return Preferences()
    row = UserPreferences.objects.filter(user=user).values_list("theme", "language").first()
    return Preferences(theme=row[0], language=row[1]) if row else Preferences()


def language_for(*, user: Any) -> str:
    """The language the user chose (a code of ``settings.LANGUAGES``), ``""`` when they left it
    to the browser (or are anonymous)."""
    return preferences_for(user=user).language


def api_tokens_for(*, user: Any) -> list[ApiToken]:
    """``user``'s API tokens, the active ones first, each group newest first. One query."""
    return list(
        ApiToken.objects.filter(user=user).order_by(
            F("revoked_at").desc(nulls_first=True), "-created_at", "-id"
        )
    )
