"""Docker engine reachability, reported by /healthz."""

from __future__ import annotations

from typing import Any

import docker
from django.conf import settings
from docker.errors import DockerException


def docker_status(*, timeout_s: float = 2.0) -> dict[str, Any]:
    """``{"ok": True, "version": ...}`` when the engine answers, else ``{"ok": False, "error"}``."""
    try:
        if settings.DOCKER_HOST:
            client = docker.DockerClient(base_url=settings.DOCKER_HOST, timeout=timeout_s)
        else:
            client = docker.from_env(timeout=timeout_s)
        try:
            client.ping()
            version = client.version().get("Version", "")
        finally:
            client.close()
    except (DockerException, OSError) as exc:
        return {"ok": False, "error": str(exc)[:300]}
    return {"ok": True, "version": version}
