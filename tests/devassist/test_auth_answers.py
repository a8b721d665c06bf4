"""Auth answers on every write route of the API: a present but invalid ``Authorization``
header is 401 at once (never a fall-back to the session and its CSRF check), and so is an
anonymous write. The routes are read from the NinjaAPI, so a new one is covered by itself."""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable
from http import HTTPStatus
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client

from agent.models import AgentRun
from chat.models import Conversation
from devassist.api import api
from devassist.tokens import TOKEN_PREFIX, api_token_create, api_token_revoke
from tests.devassist.test_api_auth import assert_not_authenticated
from traces.models import Trace

WRITE_METHODS = ("post", "put", "patch", "delete")


def write_routes() -> list[tuple[str, str]]:
    """(method, path) of every write operation the API serves, path parameters filled in
    (ids with a UUID, anything else with a name)."""
    routes = []
    for path, operations in api.get_openapi_schema()["paths"].items():
        filled = re.sub(
            r"\{(\w+)\}",
            lambda m: str(uuid.uuid4()) if m.group(1).endswith("_id") else "docs",
            path,
        )
        routes += [(method, filled) for method in operations if method in WRITE_METHODS]
    return routes


ROUTES = write_routes()
ROUTE_IDS = [
    f"{method.upper()} {re.sub(r'[0-9a-f-]{36}', '{id}', path)}" for method, path in ROUTES
]


def test_the_write_routes_are_all_found() -> None:
    found = {(method, re.sub(r"[0-9a-f-]{36}", "{id}", path)) for method, path in ROUTES}
    assert {
        ("post", "/api/traces"),
        ("post", "/api/traces/{id}/steps"),
        ("patch", "/api/traces/{id}/steps/{id}"),
        ("post", "/api/traces/{id}/complete"),
        ("post", "/api/sandbox/execute"),
        ("post", "/agent"),
        ("post", "/chat"),
        ("post", "/api/runs/{id}/cancel"),
        ("post", "/api/collections/docs/documents"),
        ("delete", "/api/collections/docs"),
        ("delete", "/api/collections/docs/documents/docs"),
        ("patch", "/chat/conversations/{id}"),
        ("delete", "/chat/conversations/{id}"),
    } <= found


def bogus(user: User) -> str:
    return f"Bearer {TOKEN_PREFIX}not-a-token"


def revoked(user: User) -> str:
    token, raw = api_token_create(user=user, name="revoked")
    api_token_revoke(token=token)
    return f"Bearer {raw}"


def inactive_user(user: User) -> str:
    _, raw = api_token_create(user=user, name="inactive")
    user.is_active = False
    user.save(update_fields=["is_active"])
    return f"Bearer {raw}"


def wrong_scheme(user: User) -> str:
    _, raw = api_token_create(user=user, name="scheme")
    return f"Token {raw}"


def empty(user: User) -> str:
    return ""


HEADERS: list[Callable[[User], str]] = [bogus, revoked, inactive_user, wrong_scheme, empty]


def send(client: Client, method: str, path: str, **extra: Any) -> Any:
    return getattr(client, method)(path, {}, content_type="application/json", **extra)


def assert_nothing_written() -> None:
    assert Trace.objects.count() == 0
    assert AgentRun.objects.count() == 0
    assert Conversation.objects.count() == 0


@pytest.mark.django_db
@pytest.mark.parametrize("header", HEADERS, ids=[h.__name__ for h in HEADERS])
@pytest.mark.parametrize(("method", "path"), ROUTES, ids=ROUTE_IDS)
def test_an_invalid_authorization_header_is_401_on_every_write(
    user: User, method: str, path: str, header: Callable[[User], str]
) -> None:
    client = Client(enforce_csrf_checks=True, headers={"Authorization": header(user)})

    response = send(client, method, path)

    assert_not_authenticated(response)
    assert response["WWW-Authenticate"] == "Bearer"
    assert_nothing_written()


@pytest.mark.django_db
@pytest.mark.parametrize(("method", "path"), ROUTES, ids=ROUTE_IDS)
def test_an_anonymous_write_is_401_not_a_csrf_failure(method: str, path: str) -> None:
    response = send(Client(enforce_csrf_checks=True), method, path)

    assert_not_authenticated(response)
    assert_nothing_written()


@pytest.mark.django_db
@pytest.mark.parametrize(("method", "path"), ROUTES, ids=ROUTE_IDS)
def test_an_invalid_header_is_401_even_beside_a_valid_session(
    user: User, method: str, path: str
) -> None:
    client = Client(enforce_csrf_checks=True)
    client.get("/login/")
    client.force_login(user)
    token = client.cookies["csrftoken"].value

    response = send(
        client,
        method,
        path,
        headers={"Authorization": bogus(user), "X-CSRFToken": token},
    )

    assert_not_authenticated(response)
    assert_nothing_written()


@pytest.mark.django_db
def test_the_invalid_token_answer_says_what_is_wrong(user: User) -> None:
    response = send(Client(headers={"Authorization": revoked(user)}), "post", "/api/traces")

    assert "bearer token" in response.json()["error"]["message"]


@pytest.mark.django_db
def test_a_logged_in_write_without_csrf_is_still_403(user: User) -> None:
    client = Client(enforce_csrf_checks=True)
    client.force_login(user)

    response = send(client, "post", "/api/traces")

    assert response.status_code == HTTPStatus.FORBIDDEN
    assert response.json()["error"]["code"] == "forbidden"


@pytest.mark.django_db
def test_a_valid_token_still_writes(user: User) -> None:
    _, raw = api_token_create(user=user, name="ok")
    client = Client(enforce_csrf_checks=True, headers={"Authorization": f"bearer {raw}"})

    response = send(client, "post", "/api/traces")

    assert response.status_code == HTTPStatus.CREATED
