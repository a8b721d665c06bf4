"""Writes for project-wide models: API tokens and the demo user."""

from __future__ import annotations

import hashlib
import secrets
from datetime import timedelta

from django.contrib.auth import get_user_model
from django.contrib.auth.models import User
from django.db import transaction
from django.utils import timezone

from devassist.exceptions import Conflict, InvalidValue, NotFound
from devassist.models import ApiToken

TOKEN_PREFIX = "da_"
#: A token's name: what its owner recognises it by in the list (``ApiToken.name``).
TOKEN_NAME_MAX = 100
#: Active tokens a user may hold at once: a new one past them is refused until one is revoked.
MAX_ACTIVE_TOKENS = 100
# last_used_at is a hint for people, not an audit log: one write a minute per token is enough.
LAST_USED_RESOLUTION = timedelta(minutes=1)


def _hash(raw: str) -> str:
    return hashlib.sha256(raw.encode()).hexdigest()


@transaction.atomic
def api_token_create(*, user: User, name: str) -> tuple[ApiToken, str]:
    """Create a token named ``name`` (stripped; 1 to ``TOKEN_NAME_MAX`` characters, else
    ``InvalidValue``) for ``user``, who may hold ``MAX_ACTIVE_TOKENS`` active ones (else
    ``Conflict``; counted under a lock of the user's row, so two at once cannot both pass);
    returns it with the plain text, which is never stored or shown again."""
    name = name.strip()
    if not name or len(name) > TOKEN_NAME_MAX:
        raise InvalidValue(
            f"A token's name must be 1 to {TOKEN_NAME_MAX} characters.",
            details={"field": "name"},
        )
    # Text that cannot be stored (NUL) is refused at the door: by the API's parser and the
    # page's form. The count below is taken with the user's row locked.
    get_user_model().objects.select_for_update().filter(pk=user.pk).first()
    if ApiToken.objects.active().filter(user=user).count() >= MAX_ACTIVE_TOKENS:
        raise Conflict(
            f"You have {MAX_ACTIVE_TOKENS} active tokens, the most one may hold: revoke one "
            "you no longer use first.",
            code="too_many_tokens",
        )
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


def api_token_revoke_for(*, user: User, token_id: int) -> ApiToken:
    """Revoke ``user``'s token ``token_id`` (``NotFound`` when it is not theirs: another
    user's token is as unknown as a missing one); revoking a revoked token changes nothing."""
    token = ApiToken.objects.filter(user=user, pk=token_id).first()
    if token is None:
        raise NotFound("No such token.")
    return api_token_revoke(token=token)


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
