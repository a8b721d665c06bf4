"""Fixtures for agent tests: the scripted OpenAI-compatible server and a provider on it (the
channel layer each live-path test runs on, ``layer``, is in tests/conftest.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agent.knowledge.embeddings import get_embeddings
from agent.knowledge.ingest import ingest_paths
from agent.knowledge.store import close_clients
from agent.llm import get_llm
from agent.llm.openai_provider import OpenAIProvider
from tests.agent.fake_openai import FakeOpenAI

TEST_API_KEY = "test-key"


@pytest.fixture
def fake_openai() -> Iterator[FakeOpenAI]:
    """A real HTTP server on 127.0.0.1 answering chat completions from ``.script([...])``."""
    with FakeOpenAI() as fake:
        yield fake


@pytest.fixture
def openai_provider(fake_openai: FakeOpenAI) -> OpenAIProvider:
    """``OpenAIProvider`` on ``fake_openai``, with the SDK's retries (2, as by default)."""
    return OpenAIProvider(
        base_url=fake_openai.base_url,
        api_key=TEST_API_KEY,
        model="fake-model",
        timeout_s=5,
        max_retries=2,
    )


@pytest.fixture
def knowledge(settings: Any, tmp_path: Path) -> Iterator[Path]:
    """Chroma and the BM25 indexes in a fresh directory of their own, with the default
    (lexical) embeddings; yields that directory."""
    settings.CHROMA_PATH = tmp_path / "chroma"
    get_embeddings.cache_clear()
    yield settings.CHROMA_PATH
    get_embeddings.cache_clear()
    close_clients()  # an embedded client keeps its files open: one per test would pile up


@pytest.fixture
def scripted(fake_openai: Any, settings: Any) -> Iterator[Any]:
    """Runs talk to the scripted model server through the real OpenAI provider."""
    settings.LLM = {
        "BACKEND": "agent.llm.openai_provider.OpenAIProvider",
        "OPTIONS": {
            "base_url": fake_openai.base_url,
            "api_key": "test-key",
            "model": "fake-model",
            "timeout_s": 5,
            "max_retries": 1,
        },
    }
    get_llm.cache_clear()
    yield fake_openai
    get_llm.cache_clear()


@pytest.fixture
def guide(knowledge: Path, tmp_path: Path, settings: Any) -> str:
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
