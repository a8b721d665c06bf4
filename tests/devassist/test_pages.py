"""Login, logout and which pages need a logged-in user."""

from __future__ import annotations

from http import HTTPStatus

import pytest
from django.contrib.auth.models import User
from django.test import Client


@pytest.mark.django_db
def test_login_page_is_public(client: Client) -> None:
    response = client.get("/login/")

    assert response.status_code == HTTPStatus.OK
    assert b"Log in" in response.content
    assert b'name="csrfmiddlewaretoken"' in response.content


@pytest.mark.django_db
def test_home_redirects_anonymous_users_to_login(client: Client) -> None:
    response = client.get("/")

    assert response.status_code == HTTPStatus.FOUND
    assert response["Location"] == "/login/?next=/"


@pytest.mark.django_db
def test_login_with_valid_credentials_opens_home(client: Client, user: User) -> None:
    response = client.post(
        "/login/", {"username": "alice", "password": "pw-alice-123", "next": "/"}
    )

    assert response.status_code == HTTPStatus.FOUND
    assert response["Location"] == "/"
    home = client.get("/")
    assert home.status_code == HTTPStatus.OK
    assert home.context["user"] == user
    assert b"alice" in home.content


@pytest.mark.django_db
def test_login_with_a_wrong_password_is_refused(client: Client, user: User) -> None:
    response = client.post("/login/", {"username": "alice", "password": "wrong"})

    assert response.status_code == HTTPStatus.OK
    assert response.context["form"].errors
    assert b'role="alert"' in response.content
    assert client.get("/").status_code == HTTPStatus.FOUND


@pytest.mark.django_db
def test_login_page_redirects_a_logged_in_user_home(client: Client, user: User) -> None:
    client.force_login(user)

    response = client.get("/login/")

    assert response.status_code == HTTPStatus.FOUND
    assert response["Location"] == "/"


@pytest.mark.django_db
def test_logout_by_post_ends_the_session(client: Client, user: User) -> None:
    client.force_login(user)
    assert client.get("/").status_code == HTTPStatus.OK

    response = client.post("/logout/")

    assert response.status_code == HTTPStatus.FOUND
    assert response["Location"] == "/login/"
    assert "_auth_user_id" not in client.session
    assert client.get("/").status_code == HTTPStatus.FOUND


@pytest.mark.django_db
def test_logout_by_get_is_not_allowed(client: Client, user: User) -> None:
    client.force_login(user)

    response = client.get("/logout/")

    assert response.status_code == HTTPStatus.METHOD_NOT_ALLOWED
    assert client.get("/").status_code == HTTPStatus.OK


@pytest.mark.django_db
def test_healthz_is_public(client: Client) -> None:
    response = client.get("/healthz")

    assert response.status_code in {HTTPStatus.OK, HTTPStatus.SERVICE_UNAVAILABLE}
    assert response["Content-Type"] == "application/json"
    assert "status" in response.json()


@pytest.mark.django_db
def test_admin_redirects_anonymous_users_to_admin_login(client: Client) -> None:
    response = client.get("/admin/")

    assert response.status_code == HTTPStatus.FOUND
    assert response["Location"].startswith("/admin/login/?next=/admin/")


@pytest.mark.django_db
def test_admin_refuses_users_who_are_not_staff(client: Client, user: User) -> None:
    client.force_login(user)

    response = client.get("/admin/")

    assert response.status_code == HTTPStatus.FOUND
    assert response["Location"].startswith("/admin/login/")


@pytest.mark.django_db
def test_admin_opens_for_staff(client: Client, staff_user: User) -> None:
    client.force_login(staff_user)

    response = client.get("/admin/")

    assert response.status_code == HTTPStatus.OK
    assert b"Site administration" in response.content


@pytest.mark.django_db
def test_unknown_page_is_an_html_404(client: Client, user: User) -> None:
    client.force_login(user)

    response = client.get("/no-such-page/")

    assert response.status_code == HTTPStatus.NOT_FOUND
    assert response["Content-Type"].startswith("text/html")


@pytest.mark.django_db
def test_api_is_not_redirected_to_the_login_page(client: Client) -> None:
    response = client.get("/api/traces")

    assert response.status_code == HTTPStatus.UNAUTHORIZED
    assert "Location" not in response


@pytest.mark.django_db(transaction=True)
async def test_security_headers_under_asgi() -> None:
    """Django's security, common and clickjacking middleware under ASGI: their headers and
    redirects, with DevAssist's request id beside them."""
    import httpx

    from devassist.asgi import application

    transport = httpx.ASGITransport(app=application)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
        page = await client.get("/login/")
        assert page.status_code == HTTPStatus.OK
        assert page.headers["X-Frame-Options"] == "DENY"
        assert page.headers["X-Content-Type-Options"] == "nosniff"
        assert page.headers["Referrer-Policy"] == "same-origin"
        assert "X-Request-ID" in page.headers
        # CommonMiddleware's APPEND_SLASH
        redirect = await client.get("/login")
        assert redirect.status_code == HTTPStatus.MOVED_PERMANENTLY
        assert redirect.headers["Location"] == "/login/"
