"""Ingestion: idempotent re-ingest (skip, replace, delete), unsupported and empty files, the
command, and the BM25 index kept in step."""

from __future__ import annotations

from collections.abc import Sequence
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from agent.exceptions import EmbeddingsMismatch, IngestPathInvalid
from agent.knowledge import bm25
from agent.knowledge.chunking import CHUNKING_VERSION
from agent.knowledge.embeddings import get_embeddings
from agent.knowledge.ingest import SourceFile, ingest_files, ingest_paths
from agent.knowledge.search import search
from agent.knowledge.store import (
    collection_count,
    collection_names,
    delete_where,
    get_records,
    open_collection,
    query_texts,
    upsert_texts,
)

pytestmark = pytest.mark.usefixtures("knowledge")


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture
def docs(tmp_path: Path) -> Path:
    root = tmp_path / "docs"
    write(root / "guide.md", "# Guide\n\nThe quokka lives on Rottnest Island.\n")
    write(root / "api" / "errors.rst", "Errors\n======\n\nEvery error has an envelope.\n")
    write(root / "notes.txt", "Plain notes about the walrus.\n")
    write(root / "page.html", "<h1>Page</h1><p>The narwhal has a tusk.</p>")
    write(root / "tool.py", '"""Tool module about the axolotl."""\n\nX = 1\n')
    write(root / "logo.png", "\x89PNG not really")
    write(root / "blank.md", "   \n\n")
    write(root / ".hidden" / "secret.md", "# Secret\n\nhidden\n")
    return root


def sources(collection: str) -> dict[str, int]:
    counts: dict[str, int] = {}
    for record in get_records(open_collection(collection), documents=False):
        counts[record.metadata["source"]] = counts.get(record.metadata["source"], 0) + 1
    return counts


def test_first_ingest_adds_supported_files_and_lists_the_rest(docs: Path) -> None:
    summary = ingest_paths(paths=[docs], collection="kb_docs")

    assert summary.added == ("api/errors.rst", "guide.md", "notes.txt", "page.html", "tool.py")
    assert summary.unsupported == ("logo.png",)
    assert summary.empty == ("blank.md",)
    assert summary.updated == summary.unchanged == summary.deleted == ()
    assert summary.chunks_written == collection_count("kb_docs") == 6
    assert set(sources("kb_docs")) == set(summary.added)
    assert "skipped 1 unsupported (logo.png), 1 empty (blank.md)" in summary.line()


def test_chunks_carry_their_metadata(docs: Path) -> None:
    ingest_paths(paths=[docs], collection="kb_docs")

    (record,) = get_records(open_collection("kb_docs"), where={"source": "guide.md"})
    assert record.id == "guide.md#0"
    assert record.metadata["chunk_index"] == 0
    assert record.metadata["title"] == "Guide"
    assert record.metadata["root"] == str(docs.resolve())
    assert len(record.metadata["content_hash"]) == len(record.metadata["file_hash"]) == 64
    assert "quokka" in record.text


def test_reingest_skips_unchanged_replaces_changed_and_deletes_removed(docs: Path) -> None:
    ingest_paths(paths=[docs], collection="kb_docs")
    write(docs / "guide.md", "# Guide\n\nThe wombat digs burrows.\n\n## More\n\nAnd more.\n")
    (docs / "notes.txt").unlink()
    write(docs / "new.md", "# New\n\nA fresh page about the pangolin.\n")

    summary = ingest_paths(paths=[docs], collection="kb_docs")

    assert summary.added == ("new.md",)
    assert summary.updated == ("guide.md",)
    assert summary.unchanged == ("api/errors.rst", "page.html", "tool.py")
    assert summary.deleted == ("notes.txt",)
    assert sources("kb_docs") == {
        "api/errors.rst": 1,
        "guide.md": 2,
        "new.md": 1,
        "page.html": 1,
        "tool.py": 2,
    }
    assert [r.source for r in search(query="quokka", top_k=5, collection="kb_docs")] == []
    assert [r.source for r in search(query="wombat", top_k=5, collection="kb_docs")] == ["guide.md"]
    assert [r.source for r in search(query="walrus", top_k=5, collection="kb_docs")] == []


def test_reingest_without_changes_writes_nothing(docs: Path) -> None:
    ingest_paths(paths=[docs], collection="kb_docs")
    generation = open_collection("kb_docs").metadata["generation"]

    summary = ingest_paths(paths=[docs], collection="kb_docs")

    assert summary.unchanged == ("api/errors.rst", "guide.md", "notes.txt", "page.html", "tool.py")
    assert summary.added == summary.updated == summary.deleted == ()
    assert summary.chunks_written == summary.chunks_deleted == 0
    assert open_collection("kb_docs").metadata["generation"] == generation


def test_documents_chunked_by_another_version_are_chunked_again(docs: Path) -> None:
    ingest_paths(paths=[docs], collection="kb_docs")
    (record,) = get_records(open_collection("kb_docs"), where={"source": "guide.md"})
    assert record.metadata["chunking"] == CHUNKING_VERSION
    # As an earlier version of the chunking stored it.
    upsert_texts(
        "kb_docs",
        ids=[record.id],
        texts=[record.text],
        metadatas=[record.metadata | {"chunking": 1}],
    )

    summary = ingest_paths(paths=[docs], collection="kb_docs")

    assert summary.updated == ("guide.md",)
    assert "guide.md" not in summary.unchanged
    (record,) = get_records(open_collection("kb_docs"), where={"source": "guide.md"})
    assert record.metadata["chunking"] == CHUNKING_VERSION


def test_a_shrinking_file_loses_its_surplus_chunks(docs: Path) -> None:
    write(docs / "guide.md", "# A\n\none\n\n# B\n\ntwo\n\n# C\n\nthree\n")
    ingest_paths(paths=[docs], collection="kb_docs")
    write(docs / "guide.md", "# A\n\nonly one now\n")

    summary = ingest_paths(paths=[docs], collection="kb_docs")

    assert summary.chunks_deleted == 2
    records = get_records(open_collection("kb_docs"), where={"source": "guide.md"})
    assert [(r.id, r.text) for r in records] == [("guide.md#0", "A\n\nonly one now")]


def test_a_file_that_became_empty_loses_its_chunks(docs: Path) -> None:
    ingest_paths(paths=[docs], collection="kb_docs")
    write(docs / "guide.md", "")

    summary = ingest_paths(paths=[docs], collection="kb_docs")

    assert summary.empty == ("blank.md", "guide.md")
    assert "guide.md" not in sources("kb_docs")


def test_deletion_is_limited_to_the_paths_ingested(docs: Path, tmp_path: Path) -> None:
    other = write(tmp_path / "elsewhere" / "other.md", "# Other\n\nThe okapi.\n")
    ingest_paths(paths=[docs], collection="kb_docs")
    ingest_paths(paths=[other], collection="kb_docs")
    ingest_paths(paths=[docs / "api"], collection="kb_docs")

    summary = ingest_paths(paths=[docs / "api"], collection="kb_docs")

    assert summary.deleted == ()
    assert "other.md" in sources("kb_docs")
    assert "guide.md" in sources("kb_docs")


def test_several_paths_share_their_common_root(tmp_path: Path) -> None:
    readme = write(tmp_path / "README.md", "# Readme\n\nTop.\n")
    write(tmp_path / "docs" / "a.md", "# A\n\nA page.\n")

    summary = ingest_paths(paths=[readme, tmp_path / "docs"], collection="kb_docs")

    assert summary.added == ("README.md", "docs/a.md")


def test_hidden_directories_are_not_walked(docs: Path) -> None:
    ingest_paths(paths=[docs], collection="kb_docs")

    assert not any(".hidden" in source for source in sources("kb_docs"))


def test_undecodable_files_are_listed_as_unreadable(tmp_path: Path) -> None:
    (tmp_path / "latin1.txt").write_bytes("caf\xe9".encode("latin-1"))
    (tmp_path / "ok.txt").write_text("fine")

    summary = ingest_paths(paths=[tmp_path], collection="kb_docs")

    assert summary.unreadable == ("latin1.txt",)
    assert summary.added == ("ok.txt",)


def test_a_missing_path_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(IngestPathInvalid, match="No such file"):
        ingest_paths(paths=[tmp_path / "nope"], collection="kb_docs")


def test_uploads_replace_by_name_and_delete_nothing(docs: Path) -> None:
    ingest_paths(paths=[docs], collection="kb_docs")

    first = ingest_files(
        files=[SourceFile(source="faq.md", read=lambda: b"# FAQ\n\nThe capybara.\n")],
        collection="kb_docs",
    )
    again = ingest_files(
        files=[SourceFile(source="faq.md", read=lambda: b"# FAQ\n\nThe capybara.\n")],
        collection="kb_docs",
    )

    assert first.added == ("faq.md",)
    assert again.unchanged == ("faq.md",)
    assert "guide.md" in sources("kb_docs")
    with pytest.raises(IngestPathInvalid):
        ingest_files(files=[SourceFile(source="../x.md", read=lambda: b"x")], collection="kb_docs")


def test_the_bm25_index_is_persisted_and_reloaded(docs: Path) -> None:
    ingest_paths(paths=[docs], collection="kb_docs")
    bm25._cache.clear()

    index = bm25.index_for(open_collection("kb_docs"))

    assert len(index.ids) == collection_count("kb_docs")
    assert (bm25.index_root() / "kb_docs" / "CURRENT").is_file()
    assert [r.source for r in search(query="narwhal tusk", top_k=1, collection="kb_docs")] == [
        "page.html"
    ]


def test_the_bm25_index_follows_writes_made_through_the_store(docs: Path) -> None:
    ingest_paths(paths=[docs], collection="kb_docs")
    upsert_texts(
        "kb_docs",
        ids=["manual#0"],
        texts=["The platypus lays eggs."],
        metadatas=[{"source": "manual", "chunk_index": 0}],
    )

    assert [r.id for r in search(query="platypus", top_k=3, collection="kb_docs")] == ["manual#0"]

    delete_where("kb_docs", where={"source": "manual"})
    assert search(query="platypus", top_k=3, collection="kb_docs") == []


def test_store_query_texts_filters_and_ranks(docs: Path) -> None:
    upsert_texts(
        "memory_test",
        ids=["a", "b", "c"],
        texts=["likes green tea", "prefers dark mode", "likes green tea a lot"],
        metadatas=[{"conversation_id": "1"}, {"conversation_id": "1"}, {"conversation_id": "2"}],
    )

    hits = query_texts("memory_test", text="green tea", n=5, where={"conversation_id": "1"})

    assert [hit.id for hit in hits] == ["a", "b"]
    assert hits[0].distance < hits[1].distance
    assert hits[0].metadata == {"conversation_id": "1"}
    assert query_texts("no_such_collection", text="x", n=3) == []
    assert "memory_test" in collection_names()


class OtherEmbeddings:
    """Another backend, for the mismatch check."""

    name = "other-v1"
    dense = False

    def __init__(self, **options: Any) -> None:
        del options

    def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        return [[1.0, 0.0] for _ in texts]

    def embed_query(self, text: str) -> list[float]:
        return [1.0, 0.0]


def test_a_collection_built_with_other_embeddings_must_be_reingested(
    docs: Path, settings: Any
) -> None:
    ingest_paths(paths=[docs], collection="kb_docs")
    settings.EMBEDDINGS = {"BACKEND": f"{__name__}.OtherEmbeddings", "OPTIONS": {}}
    get_embeddings.cache_clear()

    with pytest.raises(EmbeddingsMismatch, match="ingest it again") as raised:
        search(query="quokka", top_k=3, collection="kb_docs")

    assert raised.value.details == {
        "collection": "kb_docs",
        "stored": "lexical-hash-v1",
        "configured": "other-v1",
    }


def test_the_command_prints_a_summary_line(docs: Path) -> None:
    out = StringIO()

    call_command("ingest_docs", str(docs), "--collection", "cmd_docs", stdout=out)

    line = out.getvalue().strip()
    assert line.startswith("Ingested 5 file(s) into 'cmd_docs': 5 added, 0 updated")
    assert "skipped 1 unsupported (logo.png)" in line
    assert collection_count("cmd_docs") == 6


def test_the_command_reports_bad_paths(tmp_path: Path) -> None:
    with pytest.raises(CommandError, match="No such file"):
        call_command("ingest_docs", str(tmp_path / "missing"), stdout=StringIO())
