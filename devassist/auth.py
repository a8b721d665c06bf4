"""API authentication: ``Authorization: Bearer <token>`` or the browser session (with CSRF).

An ``Authorization`` header decides alone: when it is present and not a valid bearer token
(unknown, revoked, an inactive user's, another scheme), the request is answered 401 at once,
never retried as a session request (whose CSRF check would answer 403 instead). Without one,
the session decides; an anonymous request is 401 before any CSRF check."""

from __future__ import annotations

from typing import Any, cast

from django.contrib.auth.models import User
from django.http import HttpRequest
from ninja.errors import AuthenticationError
from ninja.security import HttpBearer, SessionAuth

from devassist.exceptions import Forbidden
from devassist.tokens import api_token_authenticate

AUTHORIZATION = "Authorization"


class InvalidCredentials(AuthenticationError):
    """An ``Authorization`` header was sent and it authenticates no one."""

    def __init__(self) -> None:
        super().__init__(
            message="The Authorization header is not a valid bearer token (unknown, revoked, "
            "or its user is inactive); send 'Authorization: Bearer <token>'."
        )


class ApiTokenAuth(HttpBearer):
    """Bearer tokens (made on the API tokens page, through ``/api/tokens`` or with ``manage.py
    create_api_token``); sets ``request.user``."""

    def __call__(self, request: HttpRequest) -> Any | None:
        if AUTHORIZATION not in request.headers:
            return None
        user = super().__call__(request)
        if user is None:
            raise InvalidCredentials
        return user

    def authenticate(self, request: HttpRequest, token: str) -> Any | None:
        api_token = api_token_authenticate(raw=token)
        if api_token is None:
            return None
        request.user = api_token.user
        return api_token.user


class CsrfSessionAuth(SessionAuth):
    """The browser session with django-ninja's CSRF check, which only a logged-in user's
    request gets: an anonymous one is left unauthenticated (401)."""

    def __call__(self, request: HttpRequest) -> Any | None:
        if not request.user.is_authenticated:
            return None
        return super().__call__(request)


api_auth = [ApiTokenAuth(), CsrfSessionAuth(csrf=True)]


def api_user(request: HttpRequest) -> User:
    """The user an API request authenticated as (every operation requires one)."""
    return cast(User, getattr(request, "auth"))  # noqa: B009 - set by django-ninja at run time


def require_staff(request: HttpRequest, message: str = "Staff only.") -> User:
    """The request's user, who must be staff; raises ``Forbidden`` (403) otherwise."""
    user = api_user(request)
    if not user.is_staff:
        raise Forbidden(message)
    return user
