"""The browser-test setup itself, on the login flow: the system Chromium against DevAssist under
daphne on the test database."""

from __future__ import annotations

import pytest

from tests.browser import browser_user

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_user_signs_in_through_the_form_and_lands_on_the_home_page(page, login, screenshot):
    login("ada")

    assert page.locator("h1").first.inner_text() == "DevAssist"
    assert "Signed in as ada" in page.inner_text("body")
    screenshot("home")


def test_a_wrong_password_stays_on_the_login_page_with_an_error(page, django_user_model):
    browser_user(django_user_model, "ada")

    page.goto("/login/")
    page.fill("input[name=username]", "ada")
    page.fill("input[name=password]", "not-the-password")
    page.click("button[type=submit]")

    assert page.get_by_role("alert").inner_text().startswith("Your username and password")
    assert page.url.endswith("/login/")


def test_pages_need_a_login(page):
    page.goto("/")

    assert "/login/" in page.url
