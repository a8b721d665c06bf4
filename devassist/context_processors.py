"""Template context every page gets."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest
from django.utils.functional import SimpleLazyObject

from devassist.i18n import js_catalog_version
from devassist.models import Language, Theme
from devassist.selectors import preferences_for


def preferences(request: HttpRequest) -> dict[str, Any]:
    """The user's UI choices, read (one query for both) only by a template that shows them:
    the pages' ``base.html``, never a fragment. ``theme`` and ``language_choice`` (``""``: the
    browser's) are the stored choices; ``themes`` and ``language_choices`` the choices."""
    stored = SimpleLazyObject(lambda: preferences_for(user=request.user))
    return {
        "theme": SimpleLazyObject(lambda: stored.theme),
        "themes": Theme.choices,
        "language_choice": SimpleLazyObject(lambda: stored.language),
        "language_choices": Language.choices,
    }


def catalog(request: HttpRequest) -> dict[str, Any]:
    """``js_catalog_version``, the version of the JavaScript catalogue that ``base.html`` puts
    in the catalogue's URL (``devassist.i18n``)."""
    return {"js_catalog_version": js_catalog_version()}
