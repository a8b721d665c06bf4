"""The request type of the HTML views, and where a form posted from a page goes back to."""

from __future__ import annotations

from django.contrib.auth.models import User
from django.http import HttpRequest
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django_htmx.middleware import HtmxDetails


class HtmxHttpRequest(HttpRequest):
    """A signed-in request that went through ``HtmxMiddleware`` (every page needs a login)."""

    htmx: HtmxDetails
    user: User


def local_next(request: HttpRequest) -> str:
    """The posted form's ``next`` when it is a URL of this site, else home."""
    next_url = request.POST.get("next", "")
    if url_has_allowed_host_and_scheme(
        next_url, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        return next_url
    return reverse("home")
