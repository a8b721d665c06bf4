"""The one place that opens connections to the Docker engine."""

from __future__ import annotations

import docker
from django.conf import settings


def docker_client(*, timeout_s: float = 60.0) -> docker.DockerClient:
    """A client for the configured engine: ``DOCKER_HOST`` when set, else docker-py's default
    (the ``DOCKER_HOST`` environment variable or the local socket).

    ``timeout_s`` bounds each API request, in seconds. The engine is not contacted here, so an
    unreachable engine shows up as ``DockerException`` or ``OSError`` on the first call. The
    caller closes the client.
    """
    if settings.DOCKER_HOST:
        return docker.DockerClient(base_url=settings.DOCKER_HOST, timeout=timeout_s)
    return docker.from_env(timeout=timeout_s)
