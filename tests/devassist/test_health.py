"""GET /healthz: database, channel layer and Docker checks."""

from __future__ import annotations

from http import HTTPStatus
from typing import Any

import pytest
from channels.layers import channel_layers
from django.test import Client, override_settings

from devassist import health
from sandbox.health import docker_status
from tests.conftest import require
from tests.settings import TEST_REDIS_URL


def redis_reachable() -> bool:
    import redis

    try:
        connection = redis.Redis.from_url(TEST_REDIS_URL, socket_timeout=2)
        try:
            return bool(connection.ping())
        finally:
            connection.close()
    except redis.RedisError:
        return False


@pytest.fixture
def docker_up(monkeypatch: pytest.MonkeyPatch) -> None:
    """Pretend Docker answers, for tests about the other checks."""
    monkeypatch.setattr(health, "docker_status", lambda **_: {"ok": True, "version": "test"})


@pytest.mark.django_db
def test_healthz_reports_database_and_channel_layer(client: Client, docker_up: None) -> None:
    response = client.get("/healthz")

    assert response.status_code == HTTPStatus.OK
    report = response.json()
    assert report["status"] == "ok"
    database = report["checks"]["database"]
    assert database["ok"] is True
    assert database["vendor"] == "postgresql"
    assert isinstance(database["latency_ms"], float | int)
    layer = report["checks"]["channel_layer"]
    assert layer["ok"] is True
    assert layer["backend"] == "InMemoryChannelLayer"
    assert set(report["checks"]) == {"database", "channel_layer", "docker"}


@pytest.mark.django_db
def test_healthz_is_never_cached(client: Client, docker_up: None) -> None:
    response = client.get("/healthz")

    assert "no-cache" in response["Cache-Control"]
    assert "max-age=0" in response["Cache-Control"]


@pytest.mark.django_db
def test_healthz_only_answers_get(client: Client) -> None:
    assert client.post("/healthz").status_code == HTTPStatus.METHOD_NOT_ALLOWED


@pytest.mark.django_db
def test_healthz_reports_a_reachable_docker_engine(client: Client) -> None:
    require(docker_status()["ok"], "no Docker engine")

    response = client.get("/healthz")

    assert response.status_code == HTTPStatus.OK
    report = response.json()
    assert report["status"] == "ok"
    assert report["checks"]["docker"]["ok"] is True
    assert report["checks"]["docker"]["version"]


@pytest.mark.django_db
def test_healthz_without_docker_is_degraded_but_up(
    client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(health, "docker_status", lambda **_: {"ok": False, "error": "x"})

    response = client.get("/healthz")

    assert response.status_code == HTTPStatus.OK
    report = response.json()
    assert report["status"] == "degraded"
    assert report["checks"]["docker"] == {"ok": False, "error": "x"}
    assert report["checks"]["database"]["ok"] is True
    assert report["checks"]["channel_layer"]["ok"] is True


@pytest.mark.django_db
def test_healthz_with_a_failing_database_is_an_error(
    client: Client, monkeypatch: pytest.MonkeyPatch, docker_up: None
) -> None:
    def broken() -> dict[str, Any]:
        raise RuntimeError("database is gone")

    monkeypatch.setattr(health, "_database_check", broken)

    response = client.get("/healthz")

    assert response.status_code == HTTPStatus.SERVICE_UNAVAILABLE
    report = response.json()
    assert report["status"] == "error"
    assert report["checks"]["database"] == {"ok": False, "error": "database is gone"}
    assert report["checks"]["channel_layer"]["ok"] is True


@pytest.mark.django_db
@override_settings(CHANNEL_LAYERS={})
def test_healthz_without_a_channel_layer_is_an_error(client: Client, docker_up: None) -> None:
    channel_layers.backends.clear()

    response = client.get("/healthz")

    assert response.status_code == HTTPStatus.SERVICE_UNAVAILABLE
    report = response.json()
    assert report["status"] == "error"
    assert report["checks"]["channel_layer"]["ok"] is False
    assert report["checks"]["database"]["ok"] is True


@pytest.mark.django_db
def test_healthz_round_trips_through_the_redis_channel_layer(
    client: Client, docker_up: None
) -> None:
    require(redis_reachable(), "no Redis at TEST_REDIS_URL")
    layers = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {"hosts": [TEST_REDIS_URL], "prefix": "devassist-test"},
        }
    }
    with override_settings(CHANNEL_LAYERS=layers):
        channel_layers.backends.clear()
        response = client.get("/healthz")

    assert response.status_code == HTTPStatus.OK
    layer = response.json()["checks"]["channel_layer"]
    assert layer["ok"] is True
    assert layer["backend"] == "RedisChannelLayer"


@pytest.mark.django_db
def test_healthz_reports_an_unreachable_redis_channel_layer(
    client: Client, docker_up: None
) -> None:
    layers = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            # Port 1 is never a Redis server: the connection is refused at once.
            "CONFIG": {"hosts": ["redis://127.0.0.1:1/0"], "prefix": "devassist-test"},
        }
    }
    with override_settings(CHANNEL_LAYERS=layers):
        channel_layers.backends.clear()
        response = client.get("/healthz")

    assert response.status_code == HTTPStatus.SERVICE_UNAVAILABLE
    report = response.json()
    assert report["status"] == "error"
    assert report["checks"]["channel_layer"]["ok"] is False
    assert report["checks"]["channel_layer"]["backend"] == "RedisChannelLayer"
    assert report["checks"]["channel_layer"]["error"]
