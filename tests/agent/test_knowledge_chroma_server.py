"""CHROMA_URL: the same ingestion and search against a real Chroma server (``chroma run`` from
the chromadb package, on 127.0.0.1) through ``chromadb.HttpClient``."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agent.knowledge.collections import collection_list, collection_remove
from agent.knowledge.ingest import ingest_paths
from agent.knowledge.search import search
from agent.knowledge.store import collection_names, query_texts, upsert_texts
from tests.servers import free_port, http_server

CHROMA = Path(sys.executable).with_name("chroma")


@pytest.fixture
def chroma_server(knowledge: Path, settings: Any, tmp_path: Path) -> Iterator[str]:
    port = free_port()
    command = [str(CHROMA), "run", "--path", str(tmp_path / "server"), "--port", str(port)]
    with http_server(command, port=port, ready_path="/api/v2/heartbeat") as base_url:
        settings.CHROMA_URL = base_url
        yield base_url


def test_ingest_and_search_through_a_chroma_server(chroma_server: str, tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.md").write_text("# Alpha\n\nThe heron fishes in the pond.\n")
    (docs / "b.md").write_text("# Beta\n\nThe badger digs at night.\n")

    summary = ingest_paths(paths=[docs], collection="server_docs")
    results = search(query="heron pond", top_k=2, collection="server_docs")

    assert summary.added == ("a.md", "b.md")
    assert [r.source for r in results] == ["a.md"]
    assert results[0].vector_distance > 0
    assert [(c.name, c.chunks, c.documents) for c in collection_list()] == [("server_docs", 2, 2)]
    # Chroma's data lives in the server; only the BM25 index is local.
    assert not (tmp_path / "chroma" / "chroma.sqlite3").exists()
    assert (tmp_path / "chroma" / "bm25" / "server_docs" / "CURRENT").is_file()

    collection_remove(name="server_docs")
    assert collection_names() == []


def test_the_store_api_through_a_chroma_server(chroma_server: str) -> None:
    upsert_texts(
        "memory_srv",
        ids=["m1", "m2"],
        texts=["prefers tabs over spaces", "works on the billing service"],
        metadatas=[{"conversation_id": "c1"}, {"conversation_id": "c2"}],
    )

    hits = query_texts("memory_srv", text="tabs or spaces", n=3, where={"conversation_id": "c1"})

    assert [hit.id for hit in hits] == ["m1"]
