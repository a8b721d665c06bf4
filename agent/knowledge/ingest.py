"""Ingestion services: files into a collection's chunks, idempotently.

A document is identified in its collection by its ``source``: the path relative to the
ingested root, with ``/`` separators (``docs/tools.md``), or the file name of an upload. Its
chunks get the ids ``<source>#<chunk_index>`` and the metadata ``source``, ``chunk_index``,
``title``, ``section``, ``content_hash`` (of the chunk), ``file_hash`` (SHA-256 of the file's
bytes), ``root`` (where it was ingested from) and ``chunking`` (the ``CHUNKING_VERSION`` that
cut it).

Re-ingesting is idempotent: a file whose ``file_hash`` is unchanged is skipped (unless its
chunks were cut by another version of the chunking, then it is chunked again); a changed file's
chunks are replaced; a file deleted from an ingested path loses its chunks (only files under the
paths given this time, ingested from the same root). Unsupported types, empty files and files
that are not UTF-8 text are listed in the summary and skipped. The collection's BM25 index is
rebuilt once at the end when anything changed.
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

import structlog

from agent.exceptions import DocumentNotFound, IngestPathInvalid
from agent.knowledge import bm25
from agent.knowledge.chunking import CHUNKING_VERSION, chunk_document, format_for
from agent.knowledge.store import (
    collection_lock,
    delete_ids,
    get_records,
    open_collection,
    upsert_texts,
)

logger = structlog.get_logger(__name__)

__all__ = [
    "DocumentNotFound",
    "IngestPathInvalid",
    "IngestSummary",
    "SourceFile",
    "document_delete",
    "ingest_files",
    "ingest_paths",
]

#: The ``root`` metadata of uploaded documents.
UPLOAD_ROOT = "upload:"
_SKIPPED_DIRS = {"__pycache__", "node_modules"}
_BATCH_CHUNKS = 256

#: ``progress(done, total)``: called as files are processed (``done`` counts from 1).
Progress = Callable[[int, int], None]


@dataclass(frozen=True)
class SourceFile:
    """A file to ingest: its ``source`` name in the collection and a way to read its bytes."""

    source: str
    read: Callable[[], bytes]


@dataclass(frozen=True)
class IngestSummary:
    """What an ingest did. The tuples hold sources, sorted."""

    collection: str
    added: tuple[str, ...] = ()
    updated: tuple[str, ...] = ()
    unchanged: tuple[str, ...] = ()
    deleted: tuple[str, ...] = ()
    unsupported: tuple[str, ...] = ()
    empty: tuple[str, ...] = ()
    unreadable: tuple[str, ...] = ()
    chunks_written: int = 0
    chunks_deleted: int = 0
    duration_ms: int = 0

    @property
    def changed(self) -> bool:
        return bool(self.chunks_written or self.chunks_deleted)

    def line(self) -> str:
        """The one-line summary the command prints."""
        seen = len(self.added) + len(self.updated) + len(self.unchanged)
        text = (
            f"Ingested {seen} file(s) into {self.collection!r}: {len(self.added)} added, "
            f"{len(self.updated)} updated, {len(self.unchanged)} unchanged, "
            f"{len(self.deleted)} deleted; {self.chunks_written} chunk(s) written, "
            f"{self.chunks_deleted} removed"
        )
        skipped = [
            f"{len(items)} {label} ({_listing(items)})"
            for label, items in (
                ("unsupported", self.unsupported),
                ("empty", self.empty),
                ("unreadable", self.unreadable),
            )
            if items
        ]
        if skipped:
            text += "; skipped " + ", ".join(skipped)
        return f"{text} in {self.duration_ms / 1000:.1f} s."


@dataclass
class _Tally:
    added: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    unsupported: list[str] = field(default_factory=list)
    empty: list[str] = field(default_factory=list)
    unreadable: list[str] = field(default_factory=list)
    chunks_written: int = 0
    chunks_deleted: int = 0


def ingest_paths(
    *, paths: Sequence[Path | str], collection: str, progress: Progress | None = None
) -> IngestSummary:
    """Ingest files and directories (walked recursively, hidden entries, ``__pycache__`` and
    ``node_modules`` skipped) into ``collection``, creating it if needed.

    The ingested root is the deepest directory holding every path (a lone directory is its own
    root); sources are relative to it. Documents previously ingested from the same root under
    one of ``paths`` whose file is gone lose their chunks. Raises ``IngestPathInvalid`` for a
    path that does not exist, ``CollectionInvalid`` and ``EmbeddingsMismatch``."""
    resolved = [Path(p).expanduser().resolve() for p in paths]
    if not resolved:
        raise IngestPathInvalid("Give at least one file or directory to ingest.")
    missing = [str(p) for p in resolved if not p.exists()]
    if missing:
        raise IngestPathInvalid(
            f"No such file or directory: {', '.join(missing)}.", details={"paths": missing}
        )
    root = Path(os.path.commonpath([p if p.is_dir() else p.parent for p in resolved]))
    scopes = ["" if p == root else p.relative_to(root).as_posix() for p in resolved]
    files = [
        SourceFile(source=path.relative_to(root).as_posix(), read=path.read_bytes)
        for path in _walk(resolved)
    ]
    return _ingest(
        collection=collection, root=str(root), files=files, scopes=scopes, progress=progress
    )


def ingest_files(
    *, files: Sequence[SourceFile], collection: str, progress: Progress | None = None
) -> IngestSummary:
    """Ingest uploaded files into ``collection`` (created if needed); each ``source`` must be a
    plain file name. Nothing else in the collection is deleted. Raises ``IngestPathInvalid``
    for a bad name, ``CollectionInvalid`` and ``EmbeddingsMismatch``."""
    for item in files:
        name = item.source
        if not name or name in {".", ".."} or "/" in name or "\\" in name or "\x00" in name:
            raise IngestPathInvalid(f"Invalid file name {name!r}.", details={"source": name})
    return _ingest(
        collection=collection, root=UPLOAD_ROOT, files=files, scopes=None, progress=progress
    )


def document_delete(*, collection: str, source: str) -> int:
    """Delete document ``source`` (all its chunks) from ``collection`` and rebuild the BM25
    index; returns how many chunks went. Raises ``CollectionNotFound`` and
    ``DocumentNotFound``."""
    with collection_lock(collection):
        target = open_collection(collection)
        ids = [r.id for r in get_records(target, where={"source": source}, documents=False)]
        if not ids:
            raise DocumentNotFound(
                f"Collection {collection!r} has no document {source!r}.",
                details={"collection": collection, "source": source},
            )
        delete_ids(collection, ids=ids)
        bm25.rebuild(open_collection(collection))
    logger.info("document_deleted", collection=collection, source=source, chunks=len(ids))
    return len(ids)


def _ingest(
    *,
    collection: str,
    root: str,
    files: Sequence[SourceFile],
    scopes: Sequence[str] | None,
    progress: Progress | None,
) -> IngestSummary:
    started = time.monotonic()
    tally = _Tally()
    with collection_lock(collection):
        target = open_collection(collection, create=True)
        stored = _stored_documents(get_records(target, documents=False))
        seen: set[str] = set()
        pending = _Pending(collection)
        for done, item in enumerate(files, start=1):
            seen.add(item.source)
            old = stored.get(item.source)
            _ingest_one(item, old=old, root=root, tally=tally, pending=pending)
            if progress is not None:
                progress(done, len(files))
        tally.chunks_written += pending.flush()
        if scopes is not None:
            gone = sorted(
                source
                for source, doc in stored.items()
                if doc.root == root and source not in seen and _in_scopes(source, scopes)
            )
            for source in gone:
                delete_ids(collection, ids=stored[source].ids)
                tally.chunks_deleted += len(stored[source].ids)
                tally.deleted.append(source)
        target = open_collection(collection)
        if tally.chunks_written or tally.chunks_deleted:
            bm25.rebuild(target)
        else:
            bm25.index_for(target)
    summary = IngestSummary(
        collection=collection,
        **{
            name: tuple(sorted(getattr(tally, name)))
            for name in (
                "added",
                "updated",
                "unchanged",
                "deleted",
                "unsupported",
                "empty",
                "unreadable",
            )
        },
        chunks_written=tally.chunks_written,
        chunks_deleted=tally.chunks_deleted,
        duration_ms=round((time.monotonic() - started) * 1000),
    )
    logger.info(
        "documents_ingested",
        collection=collection,
        added=len(summary.added),
        updated=len(summary.updated),
        unchanged=len(summary.unchanged),
        deleted=len(summary.deleted),
        skipped=len(summary.unsupported) + len(summary.empty) + len(summary.unreadable),
        chunks_written=summary.chunks_written,
        chunks_deleted=summary.chunks_deleted,
        duration_ms=summary.duration_ms,
    )
    return summary


@dataclass(frozen=True)
class _StoredDocument:
    file_hash: str
    root: str
    chunking: int
    ids: list[str]


def _stored_documents(records: Iterable[Any]) -> dict[str, _StoredDocument]:
    documents: dict[str, _StoredDocument] = {}
    for record in records:
        source = str(record.metadata.get("source", ""))
        doc = documents.setdefault(
            source,
            _StoredDocument(
                file_hash=str(record.metadata.get("file_hash", "")),
                root=str(record.metadata.get("root", "")),
                chunking=int(record.metadata.get("chunking", 1)),
                ids=[],
            ),
        )
        doc.ids.append(record.id)
    return documents


class _Pending:
    """Chunks waiting to be embedded and written, in batches."""

    def __init__(self, collection: str) -> None:
        self.collection = collection
        self.ids: list[str] = []
        self.texts: list[str] = []
        self.metadatas: list[dict[str, Any]] = []

    def add(self, record_id: str, text: str, metadata: dict[str, Any]) -> int:
        self.ids.append(record_id)
        self.texts.append(text)
        self.metadatas.append(metadata)
        return self.flush() if len(self.ids) >= _BATCH_CHUNKS else 0

    def flush(self) -> int:
        written = len(self.ids)
        if written:
            upsert_texts(self.collection, ids=self.ids, texts=self.texts, metadatas=self.metadatas)
            self.ids, self.texts, self.metadatas = [], [], []
        return written


def _ingest_one(
    item: SourceFile,
    *,
    old: _StoredDocument | None,
    root: str,
    tally: _Tally,
    pending: _Pending,
) -> None:
    if format_for(item.source) is None:
        tally.unsupported.append(item.source)
        return
    data = item.read()
    file_hash = hashlib.sha256(data).hexdigest()
    if (
        old is not None
        and old.file_hash == file_hash
        and old.root == root
        and old.chunking == CHUNKING_VERSION
    ):
        tally.unchanged.append(item.source)
        return
    text = _decode(data)
    if text is None:
        tally.unreadable.append(item.source)
        return
    chunks = chunk_document(text=text, name=item.source)
    if not chunks:
        tally.empty.append(item.source)
        if old is not None:
            delete_ids(pending.collection, ids=old.ids)
            tally.chunks_deleted += len(old.ids)
        return
    # Write the new chunks before removing the old ones past the new count, so a reader never
    # finds the document missing.
    for chunk in chunks:
        tally.chunks_written += pending.add(
            f"{item.source}#{chunk.index}",
            chunk.text,
            {
                "source": item.source,
                "chunk_index": chunk.index,
                "title": chunk.title,
                "section": chunk.section,
                "content_hash": chunk.content_hash,
                "file_hash": file_hash,
                "root": root,
                "chunking": CHUNKING_VERSION,
            },
        )
    (tally.added if old is None else tally.updated).append(item.source)
    if old is not None:
        new_ids = {f"{item.source}#{chunk.index}" for chunk in chunks}
        extra = [record_id for record_id in old.ids if record_id not in new_ids]
        if extra:
            tally.chunks_written += pending.flush()
            delete_ids(pending.collection, ids=extra)
            tally.chunks_deleted += len(extra)


def _decode(data: bytes) -> str | None:
    if b"\x00" in data:
        return None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        return None


def _walk(paths: Iterable[Path]) -> Iterator[Path]:
    """The files under ``paths`` in a stable order, each once."""
    seen: set[Path] = set()
    for path in paths:
        candidates: Iterable[Path] = [path] if path.is_file() else _walk_directory(path)
        for candidate in candidates:
            if candidate not in seen:
                seen.add(candidate)
                yield candidate


def _walk_directory(directory: Path) -> Iterator[Path]:
    for current, dirs, names in os.walk(directory):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in _SKIPPED_DIRS)
        for name in sorted(names):
            if not name.startswith("."):
                yield Path(current) / name


def _in_scopes(source: str, scopes: Sequence[str]) -> bool:
    return any(
        scope == "" or source == scope or PurePosixPath(source).is_relative_to(scope)
        for scope in scopes
    )


def _listing(items: Sequence[str], limit: int = 5) -> str:
    shown = ", ".join(items[:limit])
    return f"{shown}, ..." if len(items) > limit else shown
