"""Request-scoped middleware: request ids and the login requirement."""

from __future__ import annotations

import re
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import structlog
from asgiref.sync import iscoroutinefunction, markcoroutinefunction
from django.contrib.auth.middleware import LoginRequiredMiddleware as DjangoLoginRequired
from django.http import HttpRequest, HttpResponse, HttpResponseBase
from django.middleware import clickjacking as django_clickjacking
from django.middleware import common as django_common
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


class LoginRequiredMiddleware(DjangoLoginRequired):
    """Django's login requirement for pages; the API answers 401 itself (session or token)."""

    def process_view(
        self,
        request: HttpRequest,
        view_func: Callable[..., Any],
        view_args: tuple[Any, ...],
        view_kwargs: dict[str, Any],
    ) -> HttpResponseBase | None:
        if is_api_path(request):
            return None
        return super().process_view(request, view_func, view_args, view_kwargs)


class InEventLoop:
    """Runs a Django middleware's ``process_request``/``process_response`` in the event loop.

    ``MiddlewareMixin`` hands every hook of every middleware to a worker thread under ASGI, a
    thread hop each. The middlewares below only look at headers and settings (no I/O, no
    database), so their hooks run inline, which takes several hops off every request.
    """

    async def __acall__(self: Any, request: HttpRequest) -> HttpResponseBase:
        response = None
        if hasattr(self, "process_request"):
            response = self.process_request(request)
        response = response or await self.get_response(request)
        if hasattr(self, "process_response"):
            response = self.process_response(request, response)
        return response


class SecurityMiddleware(InEventLoop, django_security.SecurityMiddleware):
    pass


class CommonMiddleware(InEventLoop, django_common.CommonMiddleware):
    pass


class XFrameOptionsMiddleware(InEventLoop, django_clickjacking.XFrameOptionsMiddleware):
    pass
