"""The create_api_token and ensure_demo_user management commands."""

from __future__ import annotations

import re
from http import HTTPStatus
from io import StringIO

import pytest
from django.conf import settings
from django.contrib.auth.models import User
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client

from devassist.models import ApiToken

DEMO_LINE = re.compile(r"Demo login: username demo  password (\S+)")


def run(*args: str) -> tuple[str, str]:
    out, err = StringIO(), StringIO()
    call_command(*args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


@pytest.mark.django_db
def test_create_api_token_prints_a_working_token_once(user: User) -> None:
    out, err = run("create_api_token", "alice")

    lines = out.splitlines()
    assert len(lines) == 1
    raw = lines[0].strip()
    assert raw.startswith("da_")
    assert raw not in err
    assert "not shown again" in err
    response = Client(headers={"Authorization": f"Bearer {raw}"}).get("/api/traces")
    assert response.status_code == HTTPStatus.OK


@pytest.mark.django_db
def test_create_api_token_stores_the_name_and_not_the_token(user: User) -> None:
    out, _ = run("create_api_token", "alice", "--name", "laptop")

    token = ApiToken.objects.get(user=user)
    assert token.name == "laptop"
    assert out.strip() not in {token.token_hash, token.prefix, token.name}


@pytest.mark.django_db
def test_create_api_token_default_name_is_cli(user: User) -> None:
    run("create_api_token", "alice")

    assert ApiToken.objects.get(user=user).name == "cli"


@pytest.mark.django_db
def test_create_api_token_for_unknown_user_fails() -> None:
    with pytest.raises(CommandError, match="nobody"):
        run("create_api_token", "nobody")

    assert not ApiToken.objects.exists()


@pytest.mark.django_db
@pytest.mark.parametrize("name", ["   ", "x" * 101])
def test_create_api_token_rejects_a_bad_name(user: User, name: str) -> None:
    with pytest.raises(CommandError, match="name must be 1 to 100 characters"):
        run("create_api_token", "alice", "--name", name)

    assert not ApiToken.objects.exists()


@pytest.mark.django_db
def test_ensure_demo_user_creates_a_superuser_whose_printed_password_logs_in(
    django_user_model: type[User],
) -> None:
    out, _ = run("ensure_demo_user")

    match = DEMO_LINE.search(out)
    assert match is not None
    demo = django_user_model.objects.get(username="demo")
    assert demo.is_superuser
    assert demo.is_staff
    client = Client()
    response = client.post("/login/", {"username": "demo", "password": match.group(1)})
    assert response.status_code == HTTPStatus.FOUND
    assert client.get("/").status_code == HTTPStatus.OK


@pytest.mark.django_db
def test_ensure_demo_user_twice_keeps_one_user_and_one_password(
    django_user_model: type[User],
) -> None:
    first, _ = run("ensure_demo_user")
    second, _ = run("ensure_demo_user")

    first_match = DEMO_LINE.search(first)
    second_match = DEMO_LINE.search(second)
    assert first_match is not None
    assert second_match is not None
    assert first_match.group(1) == second_match.group(1)
    assert django_user_model.objects.filter(username="demo").count() == 1


@pytest.mark.django_db
def test_ensure_demo_user_keeps_its_password_private_in_var_dir() -> None:
    out, _ = run("ensure_demo_user")

    password_file = settings.VAR_DIR / "demo_password"
    assert password_file.exists()
    assert password_file.stat().st_mode & 0o777 == 0o600
    match = DEMO_LINE.search(out)
    assert match is not None
    assert password_file.read_text().strip() == match.group(1)


@pytest.mark.django_db
def test_ensure_demo_user_does_not_print_a_password_it_did_not_set(
    django_user_model: type[User],
) -> None:
    django_user_model.objects.create_user(username="demo", password="chosen-by-demo")

    out, _ = run("ensure_demo_user")

    assert DEMO_LINE.search(out) is None
    assert "password of its own" in out
    demo = django_user_model.objects.get(username="demo")
    assert demo.check_password("chosen-by-demo")
    assert not demo.is_superuser
