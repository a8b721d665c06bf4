"""Websocket authentication: the session cookie or ``Authorization: Bearer <token>``."""

from __future__ import annotations

from typing import Any

from channels.auth import AuthMiddlewareStack
from channels.db import database_sync_to_async
from channels.middleware import BaseMiddleware
from channels.security.websocket import OriginValidator
from django.conf import settings
from django.contrib.auth.models import AnonymousUser

from devassist.tokens import api_token_authenticate


def bearer_token(headers: list[tuple[bytes, bytes]]) -> str | None:
    for name, value in headers:
        if name == b"authorization":
            scheme, _, token = value.decode("latin1").partition(" ")
            if scheme.lower() == "bearer" and token.strip():
                return token.strip()
    return None


@database_sync_to_async
def _user_for_token(raw: str) -> Any:
    api_token = api_token_authenticate(raw=raw)
    return api_token.user if api_token else AnonymousUser()


class TokenAuthMiddleware(BaseMiddleware):
    """A bearer token, when sent, decides the user; otherwise the session's user stands."""

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> Any:
        token = bearer_token(scope.get("headers", []))
        if token is not None:
            scope = dict(scope, user=await _user_for_token(token))
        return await self.inner(scope, receive, send)


def TokenAuthMiddlewareStack(inner: Any) -> Any:
    return AuthMiddlewareStack(TokenAuthMiddleware(inner))


class BrowserOriginValidator(OriginValidator):
    """Checks Origin against ALLOWED_HOSTS when a browser sends one (cross-site websocket
    hijacking); clients without an Origin header are not browsers and need a token or cookie
    of their own, so they pass through to authentication."""

    def valid_origin(self, parsed_origin: Any) -> bool:
        if parsed_origin is None:
            return True
        return bool(self.validate_origin(parsed_origin))


def browser_origin_validator(inner: Any) -> BrowserOriginValidator:
    return BrowserOriginValidator(inner, settings.ALLOWED_HOSTS)
