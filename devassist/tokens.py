"""Writes for project-wide models: API tokens and the demo user."""

from __future__ import annotations

import hashlib
import secrets
from datetime import timedelta

from django.contrib.auth import get_user_model
from django.contrib.auth.models import User
from django.utils import timezone

from devassist.models import ApiToken

TOKEN_PREFIX = "da_"
# last_used_at is a hint for people, not an audit log: one write a minute per token is enough.
LAST_USED_RESOLUTION = timedelta(minutes=1)


def _hash(raw: str) -> str:
    return hashlib.sha256(raw.encode()).hexdigest()


def api_token_create(*, user: User, name: str) -> tuple[ApiToken, str]:
    """Create a token; returns it with the plain text, which is never stored or shown again."""
    raw = TOKEN_PREFIX + secrets.token_urlsafe(32)
    token = ApiToken.objects.create(user=user, name=name, prefix=raw[:10], token_hash=_hash(raw))
    return token, raw


def api_token_authenticate(*, raw: str) -> ApiToken | None:
    """The active token matching ``raw`` (with its user loaded), or None."""
    token = (
        ApiToken.objects.active()
        .select_related("user")
        .filter(token_hash=_hash(raw), user__is_active=True)
        .first()
    )
    if token is None:
        return None
    now = timezone.now()
    if token.last_used_at is None or now - token.last_used_at >= LAST_USED_RESOLUTION:
        ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
        token.last_used_at = now
    return token


def api_token_revoke(*, token: ApiToken) -> ApiToken:
    if token.revoked_at is None:
        token.revoked_at = timezone.now()
        token.save(update_fields=["revoked_at"])
    return token


def demo_user_ensure(*, username: str, password: str) -> tuple[User, bool]:
    """Create the demo superuser if it is missing; returns (user, created)."""
    user_model = get_user_model()
    user = user_model.objects.filter(username=username).first()
    if user is not None:
        return user, False
    user = user_model.objects.create_superuser(
        username=username, email=f"{username}@localhost", password=password
    )
    return user, True
