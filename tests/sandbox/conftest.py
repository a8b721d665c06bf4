"""Fixtures for sandbox tests: a real Docker engine and the sandbox image."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from sandbox.backends.docker import DockerSandbox
from sandbox.engine import docker_client
from sandbox.health import docker_status
from tests.conftest import require


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


@pytest.fixture(scope="session")
def sandbox(sandbox_image: str) -> Iterator[DockerSandbox]:
    """One warm-pooled backend for the session (tests/conftest.py checks that no container
    outlives the session)."""
    backend = DockerSandbox(image=sandbox_image, pool_size=2)
    backend.start()
    yield backend
    backend.close()


@pytest.fixture
def cold_sandbox(sandbox_image: str) -> Iterator[DockerSandbox]:
    backend = DockerSandbox(image=sandbox_image, pool_size=0)
    yield backend
    backend.close()
