"""Docker engine reachability, reported by /healthz."""

from __future__ import annotations

from typing import Any

from docker.errors import DockerException

from sandbox.engine import docker_client


def docker_status(*, timeout_s: float = 2.0) -> dict[str, Any]:
    """``{"ok": True, "version": ...}`` when the engine answers, else ``{"ok": False, "error"}``."""
    try:
        client = docker_client(timeout_s=timeout_s)
        try:
            client.ping()
            version = client.version().get("Version", "")
        finally:
            client.close()
    except (DockerException, OSError) as exc:
        return {"ok": False, "error": str(exc)[:300]}
    return {"ok": True, "version": version}
