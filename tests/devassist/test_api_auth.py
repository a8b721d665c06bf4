"""API authentication: bearer tokens and the browser session (with CSRF)."""

from __future__ import annotations

import hashlib
from datetime import timedelta
from http import HTTPStatus
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone

from devassist.models import ApiToken
from devassist.tokens import (
    LAST_USED_RESOLUTION,
    TOKEN_PREFIX,
    api_token_authenticate,
    api_token_create,
    api_token_revoke,
)


def bearer(raw: str) -> Client:
    return Client(headers={"Authorization": f"Bearer {raw}"})


def assert_not_authenticated(response: Any) -> None:
    assert response.status_code == HTTPStatus.UNAUTHORIZED
    body = response.json()
    assert set(body) == {"error", "request_id"}
    assert set(body["error"]) == {"code", "message", "details"}
    assert body["error"]["code"] == "not_authenticated"
    assert body["error"]["message"]
    assert body["error"]["details"] == {}
    assert body["request_id"] == response["X-Request-ID"]


@pytest.mark.django_db
def test_anonymous_api_request_gets_401_envelope(client: Client) -> None:
    assert_not_authenticated(client.get("/api/traces"))


@pytest.mark.django_db
def test_bearer_token_authenticates(api: Client) -> None:
    response = api.get("/api/traces")

    assert response.status_code == HTTPStatus.OK
    assert response.json() == {"traces": [], "next_cursor": None}


@pytest.mark.django_db
def test_bearer_token_requests_act_as_the_token_owner(user: User) -> None:
    _, raw = api_token_create(user=user, name="t")

    response = bearer(raw).post("/api/traces", {"task": "mine"}, content_type="application/json")

    assert response.status_code == HTTPStatus.CREATED
    assert response.json()["user"] == "alice"


@pytest.mark.django_db
def test_wrong_token_is_refused(user: User) -> None:
    _, raw = api_token_create(user=user, name="t")

    assert_not_authenticated(bearer(raw + "x").get("/api/traces"))
    assert_not_authenticated(bearer(TOKEN_PREFIX + "not-a-token").get("/api/traces"))


@pytest.mark.django_db
def test_malformed_authorization_header_is_refused(user: User) -> None:
    _, raw = api_token_create(user=user, name="t")

    response = Client(headers={"Authorization": f"Token {raw}"}).get("/api/traces")

    assert_not_authenticated(response)


@pytest.mark.django_db
def test_revoked_token_is_refused(user: User) -> None:
    token, raw = api_token_create(user=user, name="t")
    client = bearer(raw)
    assert client.get("/api/traces").status_code == HTTPStatus.OK

    api_token_revoke(token=token)

    assert_not_authenticated(client.get("/api/traces"))


@pytest.mark.django_db
def test_revoking_twice_keeps_the_first_revocation_time(user: User) -> None:
    token, _ = api_token_create(user=user, name="t")
    api_token_revoke(token=token)
    first = token.revoked_at

    api_token_revoke(token=token)

    token.refresh_from_db()
    assert first is not None
    assert token.revoked_at == first
    assert not token.is_active


@pytest.mark.django_db
def test_token_of_an_inactive_user_is_refused(user: User) -> None:
    _, raw = api_token_create(user=user, name="t")
    user.is_active = False
    user.save(update_fields=["is_active"])

    assert_not_authenticated(bearer(raw).get("/api/traces"))


@pytest.mark.django_db
def test_last_used_at_is_set_when_a_token_is_used(user: User) -> None:
    token, raw = api_token_create(user=user, name="t")
    assert token.last_used_at is None

    assert bearer(raw).get("/api/traces").status_code == HTTPStatus.OK

    token.refresh_from_db()
    assert token.last_used_at is not None
    assert token.last_used_at <= timezone.now()


@pytest.mark.django_db
def test_last_used_at_is_written_at_most_once_per_resolution(user: User) -> None:
    token, raw = api_token_create(user=user, name="t")
    stale = timezone.now() - LAST_USED_RESOLUTION - timedelta(seconds=5)
    ApiToken.objects.filter(pk=token.pk).update(last_used_at=stale)

    api_token_authenticate(raw=raw)
    token.refresh_from_db()
    refreshed = token.last_used_at
    assert refreshed is not None
    assert refreshed > stale

    api_token_authenticate(raw=raw)
    token.refresh_from_db()
    assert token.last_used_at == refreshed


@pytest.mark.django_db
def test_token_is_stored_only_as_its_sha256(user: User) -> None:
    token, raw = api_token_create(user=user, name="laptop")

    assert raw.startswith(TOKEN_PREFIX)
    row = ApiToken.objects.filter(pk=token.pk).values().get()
    assert all(raw not in str(value) for value in row.values())
    assert row["token_hash"] == hashlib.sha256(raw.encode()).hexdigest()
    assert len(row["token_hash"]) == 64
    assert int(row["token_hash"], 16) >= 0
    assert raw.startswith(row["prefix"])
    assert len(row["prefix"]) < len(raw)


@pytest.mark.django_db
def test_each_token_is_different(user: User) -> None:
    _, first = api_token_create(user=user, name="a")
    _, second = api_token_create(user=user, name="a")

    assert first != second
    assert ApiToken.objects.filter(user=user).count() == 2


@pytest.mark.django_db
def test_session_authenticates_get(client: Client, user: User) -> None:
    client.force_login(user)

    response = client.get("/api/traces")

    assert response.status_code == HTTPStatus.OK
    assert response.json()["traces"] == []


@pytest.mark.django_db
def test_session_post_without_csrf_token_is_refused(user: User) -> None:
    client = Client(enforce_csrf_checks=True)
    client.get("/login/")
    client.force_login(user)

    response = client.post("/api/traces", {"task": "x"}, content_type="application/json")

    assert response.status_code == HTTPStatus.FORBIDDEN
    assert response.json()["error"]["code"] == "forbidden"
    assert response.json()["request_id"] == response["X-Request-ID"]


@pytest.mark.django_db
def test_session_post_with_csrf_token_succeeds(user: User) -> None:
    client = Client(enforce_csrf_checks=True)
    assert client.get("/login/").status_code == HTTPStatus.OK
    csrf_token = client.cookies["csrftoken"].value
    client.force_login(user)

    response = client.post(
        "/api/traces",
        {"task": "from the browser"},
        content_type="application/json",
        headers={"X-CSRFToken": csrf_token},
    )

    assert response.status_code == HTTPStatus.CREATED
    assert response.json()["task"] == "from the browser"
    assert response.json()["user"] == "alice"


@pytest.mark.django_db
def test_bearer_post_needs_no_csrf_token(user: User) -> None:
    _, raw = api_token_create(user=user, name="t")
    client = Client(enforce_csrf_checks=True, headers={"Authorization": f"Bearer {raw}"})

    response = client.post("/api/traces", {"task": "x"}, content_type="application/json")

    assert response.status_code == HTTPStatus.CREATED
