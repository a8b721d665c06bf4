"""Fixtures for chat tests: the scripted model server and a knowledge collection."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
from asgiref.sync import sync_to_async

from agent.knowledge.ingest import ingest_paths
from devassist.services import api_token_create
from tests.agent.conftest import fake_openai, knowledge, scripted  # noqa: F401


@pytest.fixture
def guide(knowledge: Path, tmp_path: Path, settings: Any) -> str:  # noqa: F811
    """A default collection ``guide_docs`` with two short documents."""
    root = tmp_path / "docs"
    root.mkdir()
    (root / "sandbox.md").write_text(
        "# Sandbox\n\nCode runs in Docker containers.\n\n## Memory\n\n"
        "Each container gets 256 MB by default. Set SANDBOX_MEMORY_MB to change the memory "
        "limit. Swap is disabled.\n"
    )
    (root / "models.md").write_text("# Models\n\nSet LLM_BASE_URL to use a real model.\n")
    ingest_paths(paths=[root], collection="guide_docs")
    settings.KNOWLEDGE_DEFAULT_COLLECTION = "guide_docs"
    return "guide_docs"


async def bearer(user: Any) -> str:
    return (await sync_to_async(api_token_create)(user=user, name="chat-tests"))[1]


def asgi_client(token: str) -> httpx.AsyncClient:
    """An HTTP client on the ASGI application (streams run through the real stack)."""
    from devassist.asgi import application

    return httpx.AsyncClient(
        transport=httpx.ASGITransport(app=application),
        base_url="http://127.0.0.1",
        headers={"Authorization": f"Bearer {token}"},
        timeout=30,
    )
