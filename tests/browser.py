"""Browser-test fixtures: DevAssist under daphne, the scripted model server, and the system
Chromium driven by Playwright.

``app_server`` is one daphne process for the session, on the test database (so browser tests
use ``@pytest.mark.django_db(transaction=True)``: what they write is committed and the server
sees it), with embedded Chroma in a temporary directory and the model at ``live_model`` (a
``FakeOpenAI`` whose ``script`` each test sets); ``redis_app_server`` is its twin on the Redis
channel layer, which a test opens by parametrizing ``server_url`` (live pages run on both).
``page`` is a fresh browser context per test;
``login`` signs a user in; ``screenshot`` saves a PNG under ``tests/artifacts/`` (kept by CI as
the tests' artefacts, ignored by git).
"""

from __future__ import annotations

import os
import re
import shutil
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.hashers import PBKDF2PasswordHasher

from tests.agent.fake_openai import FakeOpenAI
from tests.servers import REPO, daphne_server

CHROMIUM = os.environ.get("CHROMIUM_PATH", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-quic",
    "--no-first-run",
    "--disable-sync",
]
ARTIFACTS = REPO / "tests" / "artifacts"
PASSWORD = "pw-browser-123"


@pytest.fixture(scope="session")
def live_model() -> Iterator[FakeOpenAI]:
    """The scripted OpenAI-compatible server the live server's runs talk to."""
    with FakeOpenAI() as fake:
        yield fake


@pytest.fixture(scope="session")
def app_server(
    django_db_setup: Any,
    django_db_blocker: Any,
    live_model: FakeOpenAI,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[str]:
    """The base URL of DevAssist under daphne, on the test database."""
    env = live_server_env(django_db_blocker, live_model, tmp_path_factory.mktemp("live-var"))
    with daphne_server(env) as base_url:
        yield base_url


@pytest.fixture(scope="session")
def redis_app_server(
    django_db_setup: Any,
    django_db_blocker: Any,
    live_model: FakeOpenAI,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[str]:
    """``app_server``'s twin on the Redis channel layer (the test Redis, under a prefix of its
    own): the same database and secret key, so a session signed in on one is signed in on the
    other (the browser sends 127.0.0.1's cookies to either port)."""
    from tests.conftest import forget_prefix, redis_reachable, require
    from tests.settings import TEST_REDIS_URL

    require(redis_reachable(TEST_REDIS_URL), "no Redis at TEST_REDIS_URL")
    prefix = f"devassist-test-browser-{uuid.uuid4().hex[:8]}"
    env = {
        **live_server_env(django_db_blocker, live_model, tmp_path_factory.mktemp("redis-var")),
        "REDIS_URL": TEST_REDIS_URL,
        "CHANNELS_PREFIX": prefix,
    }
    try:
        with daphne_server(env) as base_url:
            yield base_url
    finally:
        forget_prefix(TEST_REDIS_URL, prefix)


@pytest.fixture
def server_url(request: pytest.FixtureRequest, app_server: str) -> str:
    """The server ``page`` opens: ``app_server`` (the in-memory channel layer), or
    ``redis_app_server`` for a test parametrized with
    ``@pytest.mark.parametrize("server_url", ["memory", "redis"], indirect=True)``."""
    if getattr(request, "param", "memory") == "redis":
        return str(request.getfixturevalue("redis_app_server"))
    return app_server


def live_server_env(
    django_db_blocker: Any, live_model: FakeOpenAI, var_dir: Path
) -> dict[str, str]:
    """The environment of a DevAssist server for browser tests: the test database, the model
    at ``live_model``, its own ``var_dir``, no warm sandbox pool."""
    from django.db import connection

    with django_db_blocker.unblock():
        database = connection.settings_dict
    return {
        "DATABASE_URL": (
            f"postgres://{database['USER']}@{database['HOST']}:{database['PORT']}"
            f"/{database['NAME']}"
        ),
        "DEVASSIST_VAR_DIR": str(var_dir),
        "CHROMA_PATH": str(var_dir / "chroma"),
        "LLM_BASE_URL": live_model.base_url,
        "LLM_API_KEY": "test-key",
        "LLM_MODEL": "fake-model",
        "LLM_MAX_RETRIES": "0",
        "SANDBOX_WARM_ON_START": "0",
        "SANDBOX_POOL_SIZE": "0",
        "DEBUG": "0",
        "LOG_LEVEL": "WARNING",
        "SECRET_KEY": "browser-tests-only",
    }


@pytest.fixture(scope="module")
def chromium() -> Iterator[Any]:
    """The system Chromium under Playwright (skipped without it, a failure with CI=true).

    Playwright's sync API keeps an event loop running in this thread while it is open, which
    Django takes for an async context and refuses ORM calls in; the test's own ORM calls are
    sync code all the same, so that check is lifted while the browser is open, one test
    module at a time."""
    from tests.conftest import require

    require(shutil.which(CHROMIUM) is not None, f"no Chromium at {CHROMIUM}")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        require(False, "Playwright for Python is not installed")
        raise
    previous = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            yield browser
            browser.close()
    finally:
        if previous is None:
            os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
        else:
            os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = previous


@pytest.fixture
def page(chromium: Any, server_url: str) -> Iterator[Any]:
    """A page in a fresh context (no cookies), with ``server_url`` as its base URL."""
    context = chromium.new_context(base_url=server_url, viewport={"width": 1280, "height": 800})
    context.set_default_timeout(15_000)
    page = context.new_page()
    yield page
    context.close()


def browser_user(user_model: Any, username: str, **fields: Any) -> Any:
    """A user the live server can sign in with ``PASSWORD``: the suite hashes passwords with
    MD5 for speed, which the server's real settings do not accept, so this one gets a PBKDF2
    hash (with few iterations: the test only needs the server to check it)."""
    salt = PBKDF2PasswordHasher().salt()
    password = PBKDF2PasswordHasher().encode(PASSWORD, salt, iterations=1000)
    return user_model.objects.create(username=username, password=password, **fields)


@pytest.fixture
def login(page: Any, django_user_model: Any) -> Callable[..., Any]:
    """``login(username="dev", **user_fields)`` creates the user (password ``PASSWORD``) and
    signs the page in through the login form; returns the user."""

    def sign_in(username: str = "dev", **fields: Any) -> Any:
        user = browser_user(django_user_model, username, **fields)
        page.goto("/login/")
        page.fill("input[name=username]", username)
        page.fill("input[name=password]", PASSWORD)
        page.click("button[type=submit], input[type=submit]")
        page.wait_for_url(re.compile(r"^(?!.*/login/).*$"))
        return user

    return sign_in


@pytest.fixture
def screenshot(page: Any, request: pytest.FixtureRequest) -> Callable[[str], Path]:
    """``screenshot(name)`` saves the page as ``tests/artifacts/<test>-<name>.png``."""

    def save(name: str) -> Path:
        ARTIFACTS.mkdir(exist_ok=True)
        path = ARTIFACTS / f"{request.node.name}-{name}.png"
        page.screenshot(path=str(path), full_page=True)
        return path

    return save
