"""Shared fixtures: users, authenticated clients, and the real services the tests need."""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import redis
from asgiref.sync import SyncToAsync, sync_to_async
from channels.layers import channel_layers
from django.contrib.auth.models import User
from django.db import connections
from django.test import Client
from django.utils import translation

from devassist.channel_layer import redis_layer_config
from devassist.tokens import api_token_create
from sandbox.engine import docker_client
from sandbox.health import docker_status
from tests.browser import (  # noqa: F401
    app_server,
    chromium,
    live_model,
    login,
    page,
    redis_app_server,
    screenshot,
    server_url,
)
from traces.store import get_trace_store

IN_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}


def require(condition: bool, reason: str) -> None:
    """Skip a test whose service is missing, except in CI, where that is a failure."""
    if condition:
        return
    if IN_CI:
        pytest.fail(f"CI=true and {reason}")
    pytest.skip(reason)


def engine_and_image() -> str:
    """The sandbox image ref; skips (fails under CI=true) without an engine or the image."""
    require(docker_status()["ok"], "no Docker engine is reachable")
    from sandbox.image import sandbox_image_ref

    ref = sandbox_image_ref()
    client = docker_client(timeout_s=10)
    try:
        present = bool(client.images.list(name=ref))
    finally:
        client.close()
    require(present, f"the sandbox image {ref} is missing: run `manage.py sandbox_image build`")
    return ref


@pytest.fixture(scope="session")
def sandbox_image() -> str:
    return engine_and_image()


@pytest.fixture
def user(django_user_model: Any) -> User:
    return django_user_model.objects.create_user(username="alice", password="pw-alice-123")


@pytest.fixture
def other_user(django_user_model: Any) -> User:
    return django_user_model.objects.create_user(username="bob", password="pw-bob-123")


@pytest.fixture
def superuser(django_user_model: Any) -> User:
    return django_user_model.objects.create_superuser(username="root", password="pw-root-123")


@pytest.fixture
def other_superuser(django_user_model: Any) -> User:
    return django_user_model.objects.create_superuser(username="toor", password="pw-toor-123")


@pytest.fixture
def staff_user(django_user_model: Any) -> User:
    return django_user_model.objects.create_user(
        username="carol", password="pw-carol-123", is_staff=True
    )


def token_client(user: User) -> Client:
    _, raw = api_token_create(user=user, name="tests")
    return Client(headers={"Authorization": f"Bearer {raw}"})


async def post_as(
    user: User, path: str, json: Any = None, *, timeout_s: float = 60
) -> httpx.Response:
    """POST ``path`` as ``user`` (a new bearer token) through the ASGI application, as daphne
    serves it."""
    from devassist.asgi import application

    _, raw = await sync_to_async(api_token_create)(user=user, name="tests")
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=application),
        base_url="http://127.0.0.1",
        headers={"Authorization": f"Bearer {raw}"},
        timeout=timeout_s,
    ) as client:
        return await client.post(path, json=json)


@pytest.fixture
def api(user: User) -> Client:
    """A client authenticated as ``user`` with a bearer token."""
    return token_client(user)


@pytest.fixture
def other_api(other_user: User) -> Client:
    return token_client(other_user)


@pytest.fixture
def staff_api(staff_user: User) -> Client:
    return token_client(staff_user)


@pytest.fixture
def store() -> Any:
    return get_trace_store()


@pytest.fixture(scope="session", autouse=True)
def _no_sandbox_container_outlives_the_session() -> Iterator[None]:
    """Once the session ends, no sandbox container of this session may remain: neither this
    process's (labelled with its host and pid) nor those of the servers it started (they
    inherit ``SANDBOX_SESSION_LABEL``, set here before any of them starts). Containers of other
    DevAssist processes on the same engine (a `make run` server, another test session) do not
    count."""
    from sandbox.backends.docker import (
        LABEL,
        LABEL_HOST,
        LABEL_PID,
        LABEL_SESSION,
        close_all,
    )

    session = f"tests-{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    os.environ["SANDBOX_SESSION_LABEL"] = session
    yield
    close_all()
    if not docker_status()["ok"]:
        return
    client = docker_client(timeout_s=10)
    try:
        listed = client.api.containers(all=True, filters={"label": LABEL})
    finally:
        client.close()
    this_process = (socket.gethostname(), str(os.getpid()))

    def ours(labels: dict[str, str]) -> bool:
        return labels.get(LABEL_SESSION) == session or (
            (labels.get(LABEL_HOST), labels.get(LABEL_PID)) == this_process
        )

    left = [entry["Names"][0] for entry in listed if ours(entry.get("Labels") or {})]
    assert left == [], f"sandbox containers left behind: {left}"


@pytest.fixture(autouse=True)
def _close_executor_connections() -> Iterator[None]:
    """Async tests reach the database from asgiref's shared sync thread; close that thread's
    connection after each test so the test database can be flushed and dropped."""
    yield
    SyncToAsync.single_thread_executor.submit(connections.close_all).result()


@pytest.fixture(autouse=True)
def _default_language() -> Iterator[None]:
    """Each test starts in English: a request in another language leaves it active in the
    thread (LocaleMiddleware activates a request's language and nothing resets it)."""
    yield
    translation.deactivate()


@pytest.fixture(autouse=True)
def _fresh_channel_layers() -> Iterator[None]:
    """Each test gets new channel layer instances (the in-memory one keeps state)."""
    channel_layers.backends.clear()
    yield
    channel_layers.backends.clear()


# --- channel layers -----------------------------------------------------------------------------


def redis_reachable(url: str) -> bool:
    try:
        return bool(redis.Redis.from_url(url, socket_timeout=2).ping())
    except redis.RedisError:
        return False


def use_redis(settings: Any, url: str) -> str:
    """Point the channel layer at Redis ``url`` under a prefix of its own; returns the prefix."""
    prefix = f"devassist-test-{uuid.uuid4().hex[:8]}"
    settings.CHANNEL_LAYERS = {
        "default": redis_layer_config(url, prefix=prefix, group_expiry_s=300)
    }
    channel_layers.backends.clear()
    return prefix


def forget_prefix(url: str, prefix: str) -> None:
    """Delete what a channel layer left in Redis ``url`` under ``prefix``."""
    client = redis.Redis.from_url(url)
    for key in client.scan_iter(f"{prefix}*"):
        client.delete(key)


@pytest.fixture(params=["memory", "redis"])
def layer(request: pytest.FixtureRequest, settings: Any) -> Iterator[str]:
    """Each test on the in-memory layer and on Redis (as ``REDIS_URL`` configures it): live
    paths run on both."""
    if request.param == "memory":
        settings.CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
        channel_layers.backends.clear()
        yield "memory"
        return
    require(redis_reachable(settings.TEST_REDIS_URL), "no Redis at TEST_REDIS_URL")
    prefix = use_redis(settings, settings.TEST_REDIS_URL)
    yield prefix
    forget_prefix(settings.TEST_REDIS_URL, prefix)
