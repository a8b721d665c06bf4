"""API authentication: the browser session (with CSRF) or ``Authorization: Bearer <token>``."""

from __future__ import annotations

from typing import Any, cast

from django.contrib.auth.models import User
from django.http import HttpRequest
from ninja.security import HttpBearer, SessionAuth

from devassist.errors import Forbidden
from devassist.services import api_token_authenticate


class ApiTokenAuth(HttpBearer):
    """Bearer tokens created with ``manage.py create_api_token``; sets ``request.user``."""

    def authenticate(self, request: HttpRequest, token: str) -> Any | None:
        api_token = api_token_authenticate(raw=token)
        if api_token is None:
            return None
        request.user = api_token.user
        return api_token.user


api_auth = [ApiTokenAuth(), SessionAuth(csrf=True)]


def api_user(request: HttpRequest) -> User:
    """The user an API request authenticated as (every operation requires one)."""
    return cast(User, getattr(request, "auth"))  # noqa: B009 - set by django-ninja at run time


def require_staff(request: HttpRequest, message: str = "Staff only.") -> User:
    """The request's user, who must be staff; raises ``Forbidden`` (403) otherwise."""
    user = api_user(request)
    if not user.is_staff:
        raise Forbidden(message)
    return user
