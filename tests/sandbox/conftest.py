"""Fixtures for sandbox tests: warm-pooled and cold backends on the real engine."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from sandbox.backends.docker import DockerSandbox


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
