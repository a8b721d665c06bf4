"""API tokens over the API: a user lists, creates and revokes their own (the page at
``/tokens/`` does the same in the browser). A token is shown once, in the answer that creates
it; only a signed-in session may create one, so a token that leaks cannot make others that
outlive its revocation."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.http import HttpRequest
from ninja import Router, Schema, Status

from devassist.auth import AUTHORIZATION, api_user
from devassist.exceptions import Forbidden
from devassist.models import ApiToken
from devassist.schemas import InputSchema
from devassist.selectors import api_tokens_for
from devassist.tokens import api_token_create, api_token_revoke_for

router = Router(tags=["tokens"])


class TokenOut(Schema):
    id: int
    name: str
    prefix: str
    created_at: datetime
    last_used_at: datetime | None
    revoked_at: datetime | None
    active: bool


class TokenCreatedOut(TokenOut):
    token: str


class TokenIn(InputSchema):
    name: str


def _token_dict(token: ApiToken) -> dict[str, Any]:
    return {
        "id": token.pk,
        "name": token.name,
        "prefix": token.prefix,
        "created_at": token.created_at,
        "last_used_at": token.last_used_at,
        "revoked_at": token.revoked_at,
        "active": token.is_active,
    }


@router.get("", response=list[TokenOut], url_name="list_tokens")
def list_tokens(request: HttpRequest) -> list[dict[str, Any]]:
    """Your tokens, the active ones first (each group newest first); never their text."""
    return [_token_dict(token) for token in api_tokens_for(user=api_user(request))]


@router.post("", response={201: TokenCreatedOut}, url_name="create_token")
def create_token(request: HttpRequest, payload: TokenIn) -> Status[dict[str, Any]]:
    """Create a token named ``name`` (1 to 100 characters; at most 100 active at once). Its
    text (``token``) is in this answer only. A signed-in session only: 403 for a token."""
    if AUTHORIZATION in request.headers:
        raise Forbidden("A token cannot create tokens: sign in, then create one.")
    token, raw = api_token_create(user=api_user(request), name=payload.name)
    return Status(201, {**_token_dict(token), "token": raw})


@router.post("/{token_id}/revoke", response=TokenOut, url_name="revoke_token")
def revoke_token(request: HttpRequest, token_id: int) -> dict[str, Any]:
    """Revoke one of your tokens: from now on it authenticates nothing (404 for another's)."""
    return _token_dict(api_token_revoke_for(user=api_user(request), token_id=token_id))
