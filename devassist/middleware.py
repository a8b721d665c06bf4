"""DevAssist's own middleware: the request id and the error envelope of every API error, and
the login of pages' HTMX requests."""

from __future__ import annotations

import re
import uuid
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urlsplit

import structlog
from asgiref.sync import iscoroutinefunction, markcoroutinefunction
from django.contrib.auth import middleware as auth_middleware
from django.contrib.auth.views import redirect_to_login
from django.http import HttpRequest, HttpResponse, HttpResponseBase
from django.shortcuts import resolve_url
from django_htmx.http import HttpResponseClientRedirect

from devassist.envelope import enveloped

REQUEST_ID_HEADER = "X-Request-ID"
_VALID_REQUEST_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")


def request_id_from(value: str | None) -> str:
    """The client's request id when it is a safe token, else a new one."""
    if value and _VALID_REQUEST_ID.match(value):
        return value
    return uuid.uuid4().hex


class RequestIdMiddleware:
    """Echoes or creates ``X-Request-ID``, binds it to every log line of the request, and makes
    sure every API error leaves in the error envelope (the outermost middleware sees them all)."""

    sync_capable = True
    async_capable = True

    def __init__(self, get_response: Callable[[HttpRequest], Any]) -> None:
        self.get_response = get_response
        self.is_async = iscoroutinefunction(get_response)
        if self.is_async:
            markcoroutinefunction(self)

    def __call__(self, request: HttpRequest) -> HttpResponse | Awaitable[HttpResponse]:
        if self.is_async:
            return self._acall(request)
        self._start(request)
        try:
            response = self.get_response(request)
        finally:
            structlog.contextvars.clear_contextvars()
        return self._finish(request, response)

    async def _acall(self, request: HttpRequest) -> HttpResponse:
        self._start(request)
        try:
            response = await self.get_response(request)
        finally:
            structlog.contextvars.clear_contextvars()
        return self._finish(request, response)

    def _start(self, request: HttpRequest) -> None:
        request_id = request_id_from(request.headers.get(REQUEST_ID_HEADER))
        request.request_id = request_id  # type: ignore[attr-defined]
        structlog.contextvars.clear_contextvars()
        structlog.contextvars.bind_contextvars(request_id=request_id)

    def _finish(self, request: HttpRequest, response: HttpResponse) -> HttpResponse:
        response = enveloped(request, response)
        response[REQUEST_ID_HEADER] = request.request_id  # type: ignore[attr-defined]
        return response


class LoginRequiredMiddleware(auth_middleware.LoginRequiredMiddleware):
    """Django's, except that an HTMX request of a signed-out page (a list row's refresh, the
    list's poll for new traces, a chat message) sends the whole page to the login page, which
    comes back to that page: redirected itself, htmx put the login page inside the fragment."""

    def process_view(
        self, request: HttpRequest, view_func: Any, view_args: Any, view_kwargs: Any
    ) -> HttpResponseBase | None:
        response: HttpResponseBase | None = super().process_view(
            request, view_func, view_args, view_kwargs
        )
        if response is None or request.headers.get("HX-Request") != "true":
            return response
        page = urlsplit(request.headers.get("HX-Current-URL", ""))
        here = "/"
        if page.netloc == request.get_host() and page.path.startswith("/"):
            here = f"{page.path}?{page.query}" if page.query else page.path
        login_url = resolve_url(self.get_login_url(view_func))
        login = redirect_to_login(here, login_url, self.get_redirect_field_name(view_func))
        return HttpResponseClientRedirect(login.url)
