"""Request-scoped middleware: request ids and the login requirement."""

from __future__ import annotations

import re
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import structlog
from asgiref.sync import iscoroutinefunction, markcoroutinefunction, sync_to_async
from django.conf import settings
from django.contrib.auth import middleware as django_auth
from django.contrib.messages import middleware as django_messages
from django.contrib.sessions import middleware as django_sessions
from django.http import HttpRequest, HttpResponse, HttpResponseBase
from django.middleware import clickjacking as django_clickjacking
from django.middleware import common as django_common
from django.middleware import csrf as django_csrf
from django.middleware import security as django_security

from devassist.envelope import enveloped, is_api_path

REQUEST_ID_HEADER = "X-Request-ID"
_VALID_REQUEST_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")

logger = structlog.get_logger(__name__)


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
        response = enveloped(request, response)
        response[REQUEST_ID_HEADER] = request.request_id  # type: ignore[attr-defined]
        return response

    async def _acall(self, request: HttpRequest) -> HttpResponse:
        self._start(request)
        try:
            response = await self.get_response(request)
        finally:
            structlog.contextvars.clear_contextvars()
        response = enveloped(request, response)
        response[REQUEST_ID_HEADER] = request.request_id  # type: ignore[attr-defined]
        return response

    def _start(self, request: HttpRequest) -> None:
        request_id = request_id_from(request.headers.get(REQUEST_ID_HEADER))
        request.request_id = request_id  # type: ignore[attr-defined]
        structlog.contextvars.clear_contextvars()
        structlog.contextvars.bind_contextvars(request_id=request_id)


class LoginRequiredMiddleware(django_auth.LoginRequiredMiddleware):
    """Django's login requirement for pages; the API answers 401 itself (session or token).
    Async, so an API request does not hop to a thread for nothing; for a page, reading the
    session's user is database work and happens in the request's thread."""

    async def process_view(  # type: ignore[override]
        self,
        request: HttpRequest,
        view_func: Callable[..., Any],
        view_args: tuple[Any, ...],
        view_kwargs: dict[str, Any],
    ) -> HttpResponseBase | None:
        if is_api_path(request):
            return None
        check = super().process_view
        return await sync_to_async(check)(request, view_func, view_args, view_kwargs)


class InEventLoop:
    """Runs a Django middleware's ``process_request``/``process_response`` in the event loop.

    ``MiddlewareMixin`` hands every hook of every middleware to a worker thread under ASGI, a
    thread hop each (and under load each hop waits its turn for the loop). The middlewares
    below only look at headers, cookies and settings in these hooks (no I/O, no database;
    ``needs_thread`` says when a hook would), so they run inline, which takes most hops off
    every request.
    """

    async def __acall__(self: Any, request: HttpRequest) -> HttpResponseBase:
        response = None
        if hasattr(self, "process_request"):
            response = self.process_request(request)
        response = response or await self.get_response(request)
        if hasattr(self, "process_response"):
            if self.needs_thread(request):
                return await sync_to_async(self.process_response)(request, response)
            response = self.process_response(request, response)
        return response

    def needs_thread(self, request: HttpRequest) -> bool:
        """Whether ``process_response`` would do I/O for this request."""
        return False


class SessionMiddleware(InEventLoop, django_sessions.SessionMiddleware):
    """Creating the lazy session store is no I/O; saving a changed session is."""

    def needs_thread(self, request: HttpRequest) -> bool:
        session = getattr(request, "session", None)
        return session is not None and (session.modified or settings.SESSION_SAVE_EVERY_REQUEST)


class CsrfViewMiddleware(InEventLoop, django_csrf.CsrfViewMiddleware):
    """Reads and sets the CSRF cookie inline; with ``CSRF_USE_SESSIONS`` the secret is in the
    session (database reads), so every hook runs in the request's thread as Django's does."""

    async def __acall__(self, request: HttpRequest) -> HttpResponseBase:
        if settings.CSRF_USE_SESSIONS:
            return await django_csrf.CsrfViewMiddleware.__acall__(self, request)
        return await InEventLoop.__acall__(self, request)

    async def process_view(  # type: ignore[override]
        self,
        request: HttpRequest,
        callback: Callable[..., Any],
        callback_args: tuple[Any, ...],
        callback_kwargs: dict[str, Any],
    ) -> HttpResponseBase | None:
        check = super().process_view
        if settings.CSRF_USE_SESSIONS:
            return await sync_to_async(check)(request, callback, callback_args, callback_kwargs)
        return check(request, callback, callback_args, callback_kwargs)


class AuthenticationMiddleware(InEventLoop, django_auth.AuthenticationMiddleware):
    """Sets a lazy ``request.user``; the database is read when a view asks for it."""


class MessageMiddleware(InEventLoop, django_messages.MessageMiddleware):
    """Storing messages writes the session (which may load it): only when some were added or
    read during the request."""

    def needs_thread(self, request: HttpRequest) -> bool:
        storage = getattr(request, "_messages", None)
        return storage is not None and (storage.used or storage.added_new)


class SecurityMiddleware(InEventLoop, django_security.SecurityMiddleware):
    pass


class CommonMiddleware(InEventLoop, django_common.CommonMiddleware):
    pass


class XFrameOptionsMiddleware(InEventLoop, django_clickjacking.XFrameOptionsMiddleware):
    pass
