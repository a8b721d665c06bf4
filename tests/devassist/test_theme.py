"""The theme: each user's choice stored on the server and rendered on <html>, the switch's
endpoint, and the Pygments styles of both themes (contrast, and the generated file current)."""

from __future__ import annotations

import json
from http import HTTPStatus

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.test import Client
from pygments.styles import get_style_by_name

from devassist.markdown import DARK_STYLE, LIGHT_STYLE
from devassist.models import UserPreferences


def contrast(a: str, b: str) -> float:
    def luminance(colour: str) -> float:
        colour = colour.lstrip("#")
        if len(colour) == 3:
            colour = "".join(c * 2 for c in colour)
        channels = [int(colour[i : i + 2], 16) / 255 for i in (0, 2, 4)]
        r, g, b = (c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in channels)
        return 0.2126 * r + 0.7152 * g + 0.0722 * b

    high, low = sorted((luminance(a), luminance(b)), reverse=True)
    return (high + 0.05) / (low + 0.05)


@pytest.mark.django_db
def test_a_page_renders_the_users_theme_on_html(client: Client, user: User) -> None:
    client.force_login(user)
    assert b'<html lang="en" data-theme="system">' in client.get("/").content

    UserPreferences.objects.create(user=user, theme="dark")

    page = client.get("/traces/")
    assert b'<html lang="en" data-theme="dark">' in page.content
    assert b'value="dark" aria-pressed="true"' in page.content


@pytest.mark.django_db
def test_the_login_page_follows_the_system(client: Client) -> None:
    assert b'data-theme="system"' in client.get("/login/").content


@pytest.mark.django_db
def test_the_switch_stores_the_theme_for_that_user_only(
    client: Client, user: User, other_user: User
) -> None:
    client.force_login(user)

    response = client.post("/ui/theme", {"theme": "dark"}, headers={"HX-Request": "true"})

    assert response.status_code == HTTPStatus.OK
    assert json.loads(response["HX-Trigger"]) == {"theme-changed": {"theme": "dark"}}
    assert b'value="dark" aria-pressed="true"' in response.content
    assert UserPreferences.objects.get(user=user).theme == "dark"
    assert not UserPreferences.objects.filter(user=other_user).exists()
    client.force_login(other_user)
    assert b'data-theme="system"' in client.get("/").content


@pytest.mark.django_db
def test_without_javascript_the_switch_goes_back_to_a_local_page(
    client: Client, user: User
) -> None:
    client.force_login(user)

    back = client.post("/ui/theme", {"theme": "light", "next": "/traces/"})
    away = client.post("/ui/theme", {"theme": "light", "next": "https://evil.example/"})

    assert back.status_code == HTTPStatus.FOUND
    assert back["Location"] == "/traces/"
    assert away["Location"] == "/"
    assert UserPreferences.objects.get(user=user).theme == "light"


@pytest.mark.django_db
def test_the_switch_refuses_an_unknown_theme_and_anonymous_users(
    client: Client, user: User
) -> None:
    assert client.post("/ui/theme", {"theme": "dark"}).status_code == HTTPStatus.FOUND  # login
    client.force_login(user)
    assert client.post("/ui/theme", {"theme": "sepia"}).status_code == HTTPStatus.BAD_REQUEST
    assert client.get("/ui/theme").status_code == HTTPStatus.METHOD_NOT_ALLOWED
    assert not UserPreferences.objects.exists()


@pytest.mark.parametrize("name", [LIGHT_STYLE, DARK_STYLE])
def test_every_token_of_the_code_styles_reaches_aa_contrast(name: str) -> None:
    style = get_style_by_name(name)
    weak = [
        (str(token), spec["color"])
        for token, spec in style
        if spec["color"]
        and "Whitespace" not in str(token)  # no glyphs to read
        and contrast(spec["color"], spec["bgcolor"] or style.background_color) < 4.5
    ]
    assert weak == []


def test_the_generated_pygments_css_is_current() -> None:
    call_command("pygments_css", "--check")
