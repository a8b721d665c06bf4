"""The request type of the HTML views."""

from __future__ import annotations

from django.contrib.auth.models import User
from django.http import HttpRequest
from django_htmx.middleware import HtmxDetails


class HtmxHttpRequest(HttpRequest):
    """A signed-in request that went through ``HtmxMiddleware`` (every page needs a login)."""

    htmx: HtmxDetails
    user: User
