"""The UI's language (docs/i18n.md): the user's stored choice carried by Django's language
cookie, and the JavaScript catalogue the pages' scripts translate with.

Django's ``LocaleMiddleware`` picks each request's language: the language cookie when it names
one of ``settings.LANGUAGES``, else the browser's ``Accept-Language``, else
``settings.LANGUAGE_CODE``. A user's choice is stored on the server
(``UserPreferences.language``) and put into that cookie when they switch and whenever they sign
in, so it wins on every page of every browser they use, the login page after they sign out
included, and the middleware does all the choosing. Reading the choice from the database on
every request instead would cost a query per request (fragments included) for a value that
only changes when the user changes it; the price is that a browser already signed in keeps
its cookie's language until the user switches there or signs in again.
"""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path

from django.conf import settings
from django.http import HttpResponseBase

#: Seconds a browser (and this process) keeps a catalogue: its URL names the catalogue's
#: version and language, so a new one is a new URL.
JS_CATALOG_CACHE_S = 24 * 60 * 60


def language_cookie_set(response: HttpResponseBase, language: str) -> HttpResponseBase:
    """``response`` with the language cookie set to ``language`` (a code of
    ``settings.LANGUAGES``), or deleted for ``""`` (the browser's choice), with the cookie
    settings Django's own ``set_language`` view uses."""
    if not language:
        response.delete_cookie(
            settings.LANGUAGE_COOKIE_NAME,
            path=settings.LANGUAGE_COOKIE_PATH,
            domain=settings.LANGUAGE_COOKIE_DOMAIN,
            samesite=settings.LANGUAGE_COOKIE_SAMESITE,
        )
        return response
    response.set_cookie(
        settings.LANGUAGE_COOKIE_NAME,
        language,
        max_age=settings.LANGUAGE_COOKIE_AGE,
        path=settings.LANGUAGE_COOKIE_PATH,
        domain=settings.LANGUAGE_COOKIE_DOMAIN,
        secure=settings.LANGUAGE_COOKIE_SECURE,
        httponly=settings.LANGUAGE_COOKIE_HTTPONLY,
        samesite=settings.LANGUAGE_COOKIE_SAMESITE,
    )
    return response


@functools.cache
def js_catalog_version() -> str:
    """A short hash of the compiled JavaScript catalogues (``djangojs.mo`` under
    ``settings.LOCALE_PATHS``), read once per process: the pages put it in the catalogue's
    URL, so a deployment with new translations is fetched afresh despite the caches."""
    digest = hashlib.sha256()
    for folder in settings.LOCALE_PATHS:
        for path in sorted(Path(folder).glob("*/LC_MESSAGES/djangojs.mo")):
            digest.update(path.parent.parent.name.encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()[:12]
