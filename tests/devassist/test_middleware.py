"""The middleware chain under ASGI (the async path daphne runs), where sessions, CSRF,
authentication and messages run their hooks in the event loop (devassist.middleware)."""

from __future__ import annotations

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


async def test_pages_need_a_login_and_the_api_answers_401_itself() -> None:
    client = AsyncClient()

    page = await client.get("/traces/")
    api = await client.get("/api/traces")

    assert page.status_code == HTTPStatus.FOUND
    assert page["Location"].startswith("/login/")
    assert api.status_code == HTTPStatus.UNAUTHORIZED
    assert api.json()["error"]["code"] == "not_authenticated"
