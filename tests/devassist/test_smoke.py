from http import HTTPStatus

import pytest


@pytest.mark.django_db
def test_login_page_is_public(client):
    response = client.get("/login/")
    assert response.status_code == HTTPStatus.OK
    assert b"Log in" in response.content
