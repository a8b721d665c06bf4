"""The agent's memory collection stays out of the knowledge services and APIs; collections the
configured embeddings cannot read are listed with the reason, and `ingest_docs --rebuild`
rebuilds them."""

from __future__ import annotations

import io
from http import HTTPStatus
from pathlib import Path
from typing import Any

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.core.management import CommandError, call_command

from agent.knowledge.embeddings import get_embeddings
from agent.knowledge.embeddings.lexical import LexicalEmbeddings
from agent.knowledge.ingest import ingest_paths
from agent.knowledge.store import collection_names, query_texts, upsert_texts
from agent.tools import ToolContext, default_registry

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("knowledge")]

MEMORY = "agent_memory"


class RenamedEmbeddings(LexicalEmbeddings):
    """Another embeddings backend, as far as collections can tell."""

    name = "renamed-lexical-v1"


@pytest.fixture
def memory_record(knowledge: Path) -> None:
    upsert_texts(
        MEMORY,
        ids=["m1"],
        texts=["User: the deploy key is in the vault"],
        metadatas=[{"conversation_id": "c1"}],
    )


@pytest.fixture
def docs(knowledge: Path, tmp_path: Path) -> Path:
    root = tmp_path / "docs"
    root.mkdir()
    (root / "guide.md").write_text("# Guide\n\nDeploys happen on Tuesday.\n")
    ingest_paths(paths=[root], collection="team_docs")
    return root


@pytest.mark.usefixtures("memory_record", "docs")
def test_the_memory_collection_is_not_listed(api: Any) -> None:
    assert collection_names() == ["team_docs"]
    assert collection_names(internal=True) == [MEMORY, "team_docs"]
    assert [c["name"] for c in api.get("/api/collections").json()] == ["team_docs"]


@pytest.mark.usefixtures("memory_record", "docs")
async def test_search_docs_cannot_read_memories() -> None:
    observation = await default_registry().call(
        "search_docs",
        {"query": "deploy key vault", "collection_name": MEMORY},
        ToolContext(user=None),
    )

    assert observation["results"] == []
    assert "Unknown collection 'agent_memory'" in observation["message"]
    assert observation["collections"] == ["team_docs"]


@pytest.mark.usefixtures("memory_record")
def test_the_memory_collection_cannot_be_uploaded_to_or_deleted(staff_api: Any) -> None:
    upload = staff_api.post(
        f"/api/collections/{MEMORY}/documents",
        {"files": [SimpleUploadedFile("notes.md", b"# Notes\n\nHello.\n")]},
    )
    assert upload.status_code == HTTPStatus.BAD_REQUEST
    assert "reserved" in upload.json()["error"]["message"]

    assert staff_api.delete(f"/api/collections/{MEMORY}").status_code == HTTPStatus.NOT_FOUND
    assert [hit.id for hit in query_texts(MEMORY, text="vault", n=3)] == ["m1"]


@pytest.mark.usefixtures("docs")
def test_a_collection_of_other_embeddings_is_listed_with_the_reason(
    api: Any, settings: Any
) -> None:
    settings.EMBEDDINGS = {
        "BACKEND": "tests.agent.test_knowledge_internal.RenamedEmbeddings",
        "OPTIONS": {},
    }
    get_embeddings.cache_clear()

    (listed,) = api.get("/api/collections").json()

    assert (listed["name"], listed["chunks"], listed["documents"]) == ("team_docs", 0, 0)
    assert "lexical-hash-v1" in listed["error"]
    assert "renamed-lexical-v1" in listed["error"]


def test_ingest_docs_rebuilds_a_collection_after_an_embeddings_switch(
    docs: Path, settings: Any, api: Any
) -> None:
    settings.EMBEDDINGS = {
        "BACKEND": "tests.agent.test_knowledge_internal.RenamedEmbeddings",
        "OPTIONS": {},
    }
    get_embeddings.cache_clear()

    with pytest.raises(CommandError, match="--rebuild"):
        call_command("ingest_docs", str(docs), "--collection", "team_docs", stdout=io.StringIO())
    out = io.StringIO()
    call_command("ingest_docs", str(docs), "--collection", "team_docs", "--rebuild", stdout=out)

    assert "Deleted collection 'team_docs' to rebuild it." in out.getvalue()
    (listed,) = api.get("/api/collections").json()
    assert (listed["chunks"], listed["error"]) == (1, "")
