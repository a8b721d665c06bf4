"""The middleware chain under ASGI (the async path daphne runs): Django's own middleware, with
DevAssist's request id and error envelope (devassist.middleware) outermost."""

from __future__ import annotations

import uuid
from http import HTTPStatus

import pytest
from asgiref.sync import sync_to_async
from django.contrib.auth.models import User
from django.contrib.sessions.models import Session
from django.test import AsyncClient

pytestmark = pytest.mark.django_db(transaction=True)


async def test_logging_in_through_the_form_saves_the_session_and_opens_pages(user: User) -> None:
    client = AsyncClient(enforce_csrf_checks=True)
    assert (await client.get("/login/")).status_code == HTTPStatus.OK
    token = client.cookies["csrftoken"].value

    response = await client.post(
        "/login/",
        {"username": "alice", "password": "pw-alice-123", "csrfmiddlewaretoken": token},
    )

    assert response.status_code == HTTPStatus.FOUND
    key = client.cookies["sessionid"].value
    assert await sync_to_async(Session.objects.filter(session_key=key).exists)()
    page = await client.get("/")
    assert page.status_code == HTTPStatus.OK
    assert "alice" in page.content.decode()


async def test_a_form_post_without_the_csrf_token_is_refused(user: User) -> None:
    client = AsyncClient(enforce_csrf_checks=True)
    await client.get("/login/")

    response = await client.post("/login/", {"username": "alice", "password": "pw-alice-123"})

    assert response.status_code == HTTPStatus.FORBIDDEN
    assert "sessionid" not in client.cookies


async def test_a_session_api_post_without_the_csrf_token_is_refused(user: User) -> None:
    client = AsyncClient(enforce_csrf_checks=True)
    await client.get("/login/")
    await client.aforce_login(user)

    response = await client.post("/api/traces", {"task": "x"}, content_type="application/json")

    assert response.status_code == HTTPStatus.FORBIDDEN
    assert response.json()["error"]["code"] == "forbidden"


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("get", "/api/traces"),
        ("post", "/agent"),
        ("post", "/chat"),
        ("get", "/chat/conversations"),
        ("get", "/admin/agent-traces"),
        ("get", "/api/collections"),
        ("get", f"/api/runs/{uuid.uuid4()}"),
    ],
)
async def test_every_api_route_answers_401_in_the_envelope_rather_than_redirecting(
    method: str, path: str
) -> None:
    response = await getattr(AsyncClient(), method)(path)

    assert response.status_code == HTTPStatus.UNAUTHORIZED
    assert "Location" not in response
    assert response.json()["error"]["code"] == "not_authenticated"
    assert response.json()["request_id"] == response["X-Request-ID"]


@pytest.mark.parametrize("path", ["/", "/traces/", f"/c/{uuid.uuid4()}/", "/api/docs"])
async def test_pages_and_the_api_docs_send_anonymous_visitors_to_the_login_page(path: str) -> None:
    response = await AsyncClient().get(path)

    assert response.status_code == HTTPStatus.FOUND
    assert response["Location"].startswith("/login/")


async def test_pages_need_a_login_and_the_api_answers_401_itself() -> None:
    client = AsyncClient()

    page = await client.get("/traces/")
    api = await client.get("/api/traces")

    assert page.status_code == HTTPStatus.FOUND
    assert page["Location"].startswith("/login/")
    assert api.status_code == HTTPStatus.UNAUTHORIZED
    assert api.json()["error"]["code"] == "not_authenticated"
