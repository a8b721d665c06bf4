"""BM25 over a collection's chunks, with ``bm25s`` (Lucene's BM25 variant; scoring is the
library's).

Embedded Chroma has no sparse index, so each collection gets a ``bm25s`` index persisted under
``<CHROMA_PATH>/bm25/<collection>/``: one directory per build (``g<generation>-<random>/``,
holding bm25s' files and ``ids.json``) and a ``CURRENT`` file naming the live one, replaced
atomically, so a reader in another process never sees half an index. An index is valid for the
collection ``generation`` it was built from (``agent.knowledge.store`` bumps it on every write):
``index_for`` loads the persisted index lazily, caches it in-process, and rebuilds it from
Chroma's records when the collection has changed since, also when another process changed it.

Each record is indexed as its ``section`` and ``source`` metadata (heading path and file name,
when present) followed by its text, tokenized by ``agent.knowledge.text.tokenize``.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import shutil
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import bm25s
import numpy as np
import structlog
from chromadb.api.models.Collection import Collection
from django.conf import settings

from agent.knowledge.store import Record, collection_generation, get_records
from agent.knowledge.text import tokenize

logger = structlog.get_logger(__name__)
# bm25s logs every index build and load; our own events say what matters.
logging.getLogger("bm25s").setLevel(logging.WARNING)

__all__ = ["BM25Index", "drop_index", "index_for", "rebuild"]

_CURRENT = "CURRENT"
_IDS = "ids.json"


@dataclass(frozen=True)
class BM25Index:
    """A loaded index: ``ids[i]`` is the record behind score column ``i``."""

    generation: int
    ids: tuple[str, ...]
    retriever: bm25s.BM25 | None  # None for an empty collection

    def top(self, query: str, *, k: int) -> list[tuple[str, float]]:
        """Up to ``k`` ``(id, score)`` pairs with a positive score, best first (ties by id
        order)."""
        scores = self.scores(query)
        if scores is None:
            return []
        positive = np.flatnonzero(scores > 0)
        if positive.size == 0:
            return []
        best = positive[np.argsort(-scores[positive], kind="stable")][:k]
        return [(self.ids[i], float(scores[i])) for i in best]

    def scores(self, query: str) -> np.ndarray | None:
        """The BM25 score of every record for ``query`` (None for an empty index)."""
        if self.retriever is None:
            return None
        terms = tokenize(query)
        if not terms:
            return np.zeros(len(self.ids), dtype=np.float32)
        return np.asarray(self.retriever.get_scores(terms))


_cache_guard = threading.Lock()
_cache: dict[tuple[str, str], BM25Index] = {}
_build_locks: dict[tuple[str, str], threading.Lock] = {}


def index_root() -> Path:
    return Path(settings.CHROMA_PATH) / "bm25"


def index_for(collection: Collection) -> BM25Index:
    """The BM25 index matching ``collection``'s current generation: cached, else loaded from
    disk, else rebuilt from the collection's records (and persisted)."""
    key = (str(index_root()), collection.name)
    generation = collection_generation(collection)
    cached = _cache.get(key)
    if cached is not None and cached.generation == generation:
        return cached
    with _build_lock(key):
        cached = _cache.get(key)
        if cached is not None and cached.generation == generation:
            return cached
        index = _load(collection.name, generation)
        if index is None:
            index = _build(collection, generation)
        _cache[key] = index
        return index


def rebuild(collection: Collection) -> BM25Index:
    """Rebuild and persist the index of ``collection`` now (after an ingest)."""
    key = (str(index_root()), collection.name)
    with _build_lock(key):
        index = _build(collection, collection_generation(collection))
        _cache[key] = index
        return index


def drop_index(name: str) -> None:
    """Forget and delete collection ``name``'s index (the collection was deleted)."""
    key = (str(index_root()), name)
    with _build_lock(key):
        _cache.pop(key, None)
        shutil.rmtree(index_root() / name, ignore_errors=True)


def indexed_text(record: Record) -> str:
    """What BM25 sees of a record: its heading path, file name and text."""
    parts = [str(record.metadata.get(key) or "") for key in ("section", "source")]
    return "\n".join([*filter(None, parts), record.text])


def _build_lock(key: tuple[str, str]) -> threading.Lock:
    with _cache_guard:
        return _build_locks.setdefault(key, threading.Lock())


def _build(collection: Collection, generation: int) -> BM25Index:
    started = time.monotonic()
    records = get_records(collection)
    ids = tuple(record.id for record in records)
    directory = index_root() / collection.name
    directory.mkdir(parents=True, exist_ok=True)
    build_name = f"g{generation}-{secrets.token_hex(4)}"
    build_dir = directory / build_name
    retriever: bm25s.BM25 | None = None
    if records:
        retriever = bm25s.BM25()
        retriever.index([tokenize(indexed_text(r)) for r in records], show_progress=False)
        retriever.save(str(build_dir), show_progress=False)
    else:
        build_dir.mkdir()
    (build_dir / _IDS).write_text(json.dumps({"generation": generation, "ids": list(ids)}))
    pointer = directory / f".{_CURRENT}.{build_name}"
    pointer.write_text(build_name)
    os.replace(pointer, directory / _CURRENT)
    for old in directory.iterdir():
        if old.is_dir() and old.name != build_name:
            shutil.rmtree(old, ignore_errors=True)
    logger.info(
        "bm25_index_built",
        collection=collection.name,
        generation=generation,
        records=len(ids),
        duration_ms=round((time.monotonic() - started) * 1000),
    )
    return BM25Index(generation=generation, ids=ids, retriever=retriever)


def _load(name: str, generation: int) -> BM25Index | None:
    """The persisted index if it was built from ``generation``; None when missing or stale."""
    directory = index_root() / name
    for _attempt in range(2):
        try:
            build_dir = directory / (directory / _CURRENT).read_text().strip()
            stored = json.loads((build_dir / _IDS).read_text())
            if stored["generation"] != generation:
                return None
            ids = tuple(stored["ids"])
            retriever = (
                bm25s.BM25.load(str(build_dir), show_progress=False, verbosity=0) if ids else None
            )
            return BM25Index(generation=generation, ids=ids, retriever=retriever)
        except FileNotFoundError:
            # Another process may have replaced the build between our two reads.
            continue
        except (OSError, ValueError, KeyError):
            logger.warning("bm25_index_unreadable", collection=name)
            return None
    return None
