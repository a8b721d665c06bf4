"""The Chroma store: the only module that imports ``chromadb``.

Chroma runs embedded (``chromadb.PersistentClient`` under ``settings.CHROMA_PATH``) or, when
``settings.CHROMA_URL`` is set, as a server (``chromadb.HttpClient``). Telemetry is off. Every
collection is opened with ``ChromaEmbeddingFunction``, a wrapper around ``get_embeddings()``
(Chroma's own default would download a model), uses the cosine space, and records the
embeddings backend's ``name`` in its metadata: opening a collection built with another backend
raises ``EmbeddingsMismatch`` (re-ingest it). Every change bumps the collection's
``generation`` metadata, which tells the BM25 index (``agent.knowledge.bm25``) it is stale, also
in other processes.

The generic API, used by the knowledge services and by the agent's memory (all sync and
thread-safe; async callers wrap them with ``sync_to_async(..., thread_sensitive=False)``):

- ``upsert_texts(collection, *, ids, texts, metadatas) -> None``: create the collection if
  needed, then insert or replace the records (embedded with the configured backend);
- ``query_texts(collection, *, text, n, where=None) -> list[Hit]``: the ``n`` nearest records
  to ``text`` by vector distance (``[]`` for an unknown or empty collection);
- ``delete_where(collection, *, where) -> None``: delete the records matching a Chroma
  ``where`` filter (nothing for an unknown collection);
- ``collection_names() -> list[str]``: the collections that exist, sorted.

The generic API reaches every collection; the rest (``open_collection``, ``collection_names``,
``collection_delete``, and through them searching, ingesting and the collections API) treats
the ``internal_collections`` (the agent's long-term memory, ``agent_memory``) as absent, so
memories can only be read the way ``chat.memory`` reads them: filtered by conversation.

Metadata values are ``str``, ``int``, ``float`` or ``bool`` (Chroma's rule); ``where`` filters
use Chroma's syntax (``{"conversation_id": "…"}``, ``{"source": {"$in": [...]}}``).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, cast
from urllib.parse import urlsplit

import chromadb
import numpy as np
import structlog
from chromadb.api import ClientAPI
from chromadb.api.models.Collection import Collection
from chromadb.api.types import Documents, EmbeddingFunction
from chromadb.api.types import Embeddings as ChromaEmbeddings
from chromadb.config import Settings as ChromaSettings
from chromadb.errors import NotFoundError
from django.conf import settings

from agent.exceptions import CollectionInvalid, CollectionNotFound, EmbeddingsMismatch
from agent.knowledge.embeddings import Embeddings, get_embeddings

logger = structlog.get_logger(__name__)

__all__ = [
    "CollectionInvalid",
    "CollectionNotFound",
    "Hit",
    "Record",
    "collection_count",
    "collection_delete",
    "collection_generation",
    "collection_names",
    "delete_where",
    "get_records",
    "query_texts",
    "upsert_texts",
    "validate_collection_name",
]

#: Chroma's rule for collection names: 3-512 characters from [a-zA-Z0-9._-], starting and
#: ending with a letter or digit.
COLLECTION_NAME_RE = re.compile(r"[a-zA-Z0-9][a-zA-Z0-9._-]{1,510}[a-zA-Z0-9]")
_EMBEDDINGS_KEY = "embeddings"
_GENERATION_KEY = "generation"
_PAGE = 5000


@dataclass(frozen=True)
class Hit:
    """One record found by ``query_texts``; ``distance`` is the cosine distance (0 = same
    direction, up to 2)."""

    id: str
    text: str
    metadata: dict[str, Any]
    distance: float


@dataclass(frozen=True)
class Record:
    """One stored record as ``get_records`` returns it."""

    id: str
    text: str
    metadata: dict[str, Any]


class ChromaEmbeddingFunction(EmbeddingFunction[Documents]):
    """Chroma's embedding-function interface over one of our ``Embeddings`` backends."""

    def __init__(self, embeddings: Embeddings) -> None:
        self.embeddings = embeddings

    def __call__(self, input: Documents) -> ChromaEmbeddings:
        return cast(ChromaEmbeddings, self.embeddings.embed_documents(list(input)))

    def embed_query(self, input: Documents) -> ChromaEmbeddings:
        return cast(ChromaEmbeddings, [self.embeddings.embed_query(text) for text in input])

    @staticmethod
    def name() -> str:
        return "devassist"

    def default_space(self) -> str:  # type: ignore[override]
        return "cosine"

    def supported_spaces(self) -> list[str]:  # type: ignore[override]
        return ["cosine"]

    def get_config(self) -> dict[str, Any]:
        return {"backend": self.embeddings.name}

    @staticmethod
    def build_from_config(config: dict[str, Any]) -> ChromaEmbeddingFunction:
        return ChromaEmbeddingFunction(get_embeddings())

    def is_legacy(self) -> bool:
        return False


# One lock per collection serialises writers in this process (an ingest's delete-then-add must
# not interleave with another's); readers need none.
_locks_guard = threading.Lock()
_locks: dict[str, threading.RLock] = {}


@contextmanager
def collection_lock(name: str) -> Iterator[None]:
    """Hold the in-process write lock of collection ``name``."""
    with _locks_guard:
        lock = _locks.setdefault(name, threading.RLock())
    with lock:
        yield


def validate_collection_name(name: str) -> str:
    """``name`` if Chroma accepts it; raises ``CollectionInvalid`` (400) otherwise."""
    if not isinstance(name, str) or not COLLECTION_NAME_RE.fullmatch(name) or ".." in name:
        raise CollectionInvalid(
            f"Invalid collection name {name!r}: use 3-512 letters, digits, '.', '_' or '-', "
            "starting and ending with a letter or digit.",
            details={"collection": name},
        )
    return name


def client() -> ClientAPI:
    """The Chroma client for the current settings (one per location, shared by threads)."""
    key = (settings.CHROMA_URL, str(settings.CHROMA_PATH))
    with _clients_lock:
        made = _clients.get(key)
        if made is None:
            made = _clients[key] = _new_client(*key)
        return made


def close_clients() -> None:
    """Close every Chroma client this process opened (an embedded one holds its files open)
    and forget them; the next ``client()`` opens a new one. For a process that moves
    ``CHROMA_PATH`` (the test suite does, per test) or is shutting down."""
    with _clients_lock:
        opened = list(_clients.values())
        _clients.clear()
    for made in opened:
        # Chroma's Client has close(); its ClientAPI protocol does not name it.
        close = getattr(made, "close", None)
        if close is not None:
            close()


_clients: dict[tuple[str, str], ClientAPI] = {}
_clients_lock = threading.Lock()


def _new_client(url: str, path: str) -> ClientAPI:
    chroma_settings = ChromaSettings(anonymized_telemetry=False)
    if url:
        parts = urlsplit(url)
        secure = parts.scheme == "https"
        return chromadb.HttpClient(
            host=parts.hostname or "localhost",
            port=parts.port or (443 if secure else 8000),
            ssl=secure,
            settings=chroma_settings,
        )
    return chromadb.PersistentClient(path=path, settings=chroma_settings)


def internal_collections() -> frozenset[str]:
    """Collections the product keeps for itself (the agent's long-term memory): never listed,
    searched, ingested into or deleted through the knowledge services and APIs, only used
    through the generic API below, whose callers filter what they read."""
    return frozenset({str(settings.MEMORY["collection"])})


def collection_names(*, internal: bool = False) -> list[str]:
    """The names of the collections that exist, sorted; ``internal`` ones only when asked."""
    hidden = frozenset() if internal else internal_collections()
    return sorted(c.name for c in client().list_collections() if c.name not in hidden)


def open_collection(name: str, *, create: bool = False, internal: bool = False) -> Collection:
    """Collection ``name`` with our embedding function. Raises ``CollectionNotFound`` (404)
    when it does not exist and ``create`` is false, or when it is one of the
    ``internal_collections`` and ``internal`` is false; ``CollectionInvalid`` for a bad name
    and ``EmbeddingsMismatch`` (409) when it was built with another embeddings backend."""
    validate_collection_name(name)
    if not internal and name in internal_collections():
        if create:
            raise CollectionInvalid(
                f"The collection name {name!r} is reserved for the agent's memory.",
                details={"collection": name},
            )
        raise _not_found(name)
    embeddings = get_embeddings()
    function = ChromaEmbeddingFunction(embeddings)
    try:
        collection = client().get_collection(name, embedding_function=function)  # type: ignore[arg-type]
    except NotFoundError:
        if not create:
            raise _not_found(name) from None
        collection = client().get_or_create_collection(
            name,
            embedding_function=function,  # type: ignore[arg-type]
            configuration={"hnsw": {"space": "cosine"}},
            metadata={_EMBEDDINGS_KEY: embeddings.name, _GENERATION_KEY: 0},
        )
        logger.info("collection_created", collection=name, embeddings=embeddings.name)
    stored = (collection.metadata or {}).get(_EMBEDDINGS_KEY)
    if stored != embeddings.name:
        raise EmbeddingsMismatch(
            f"Collection {name!r} was built with the embeddings {stored!r}, but "
            f"{embeddings.name!r} is configured: delete the collection and ingest it again.",
            details={"collection": name, "stored": stored, "configured": embeddings.name},
        )
    return collection


def collection_generation(collection: Collection) -> int:
    """The collection's change counter (bumped by every write)."""
    return int((collection.metadata or {}).get(_GENERATION_KEY, 0))


def collection_count(name: str) -> int:
    """How many records collection ``name`` holds; 0 when it does not exist."""
    try:
        return open_collection(name).count()
    except CollectionNotFound:
        return 0


def collection_has_chunks(name: str) -> bool:
    """Whether collection ``name`` holds anything to search; a store that cannot be read (or
    a collection of other embeddings) counts as empty, and is logged."""
    try:
        return collection_count(name) > 0
    except Exception as exc:
        logger.warning("collection_unreadable", collection=name, error=str(exc))
        return False


def upsert_texts(
    collection: str,
    *,
    ids: Sequence[str],
    texts: Sequence[str],
    metadatas: Sequence[Mapping[str, Any]],
) -> None:
    """Insert or replace records (same length sequences), creating the collection when needed.
    Raises ``ValueError`` for mismatched lengths, ``EmbeddingsUnavailable`` when the backend
    cannot embed."""
    if not len(ids) == len(texts) == len(metadatas):
        raise ValueError("ids, texts and metadatas must have the same length")
    if not ids:
        return
    with collection_lock(collection):
        target = open_collection(collection, create=True, internal=True)
        embeddings = get_embeddings()
        step = min(_PAGE, client().get_max_batch_size())
        for start in range(0, len(ids), step):
            batch_texts = list(texts[start : start + step])
            target.upsert(
                ids=list(ids[start : start + step]),
                documents=batch_texts,
                embeddings=embeddings.embed_documents(batch_texts),  # type: ignore[arg-type]
                metadatas=[dict(m) for m in metadatas[start : start + step]],
            )
        _bump(target)


def delete_where(collection: str, *, where: Mapping[str, Any]) -> None:
    """Delete the records matching ``where``; nothing happens for an unknown collection."""
    with collection_lock(collection):
        try:
            target = open_collection(collection, internal=True)
        except CollectionNotFound:
            return
        target.delete(where=dict(where))
        _bump(target)


def delete_ids(collection: str, *, ids: Sequence[str]) -> None:
    """Delete records by id (unknown ids are ignored)."""
    if not ids:
        return
    with collection_lock(collection):
        target = open_collection(collection, internal=True)
        for start in range(0, len(ids), _PAGE):
            target.delete(ids=list(ids[start : start + _PAGE]))
        _bump(target)


def collection_delete(name: str, *, internal: bool = False) -> None:
    """Drop collection ``name``. Raises ``CollectionNotFound`` (also for an internal one,
    unless ``internal``)."""
    validate_collection_name(name)
    if not internal and name in internal_collections():
        raise _not_found(name)
    with collection_lock(name):
        try:
            client().delete_collection(name)
        except (NotFoundError, ValueError):
            raise _not_found(name) from None
    logger.info("collection_deleted", collection=name)


def query_texts(
    collection: str, *, text: str, n: int, where: Mapping[str, Any] | None = None
) -> list[Hit]:
    """The ``n`` records nearest to ``text`` (cosine distance, nearest first), optionally only
    those matching ``where``. ``[]`` for an unknown or empty collection."""
    try:
        target = open_collection(collection, internal=True)
    except CollectionNotFound:
        return []
    return query_collection(target, text=text, n=n, where=where)


def query_collection(
    target: Collection,
    *,
    text: str,
    n: int,
    where: Mapping[str, Any] | None = None,
    ids: Sequence[str] | None = None,
) -> list[Hit]:
    """``query_texts`` on an opened collection; ``ids`` limits the candidates."""
    count = target.count()
    if count == 0 or n <= 0:
        return []
    result = target.query(
        query_embeddings=cast(Any, [get_embeddings().embed_query(text)]),
        n_results=min(n, count),
        where=dict(where) if where else None,
        ids=list(ids) if ids is not None else None,
        include=["documents", "metadatas", "distances"],
    )
    found_ids = result["ids"][0]
    documents = (result.get("documents") or [[]])[0]
    metadatas = (result.get("metadatas") or [[]])[0]
    distances = (result.get("distances") or [[]])[0]
    return [
        Hit(
            id=record_id,
            text=documents[i] or "",
            metadata=dict(metadatas[i] or {}),
            distance=float(distances[i]),
        )
        for i, record_id in enumerate(found_ids)
    ]


def hits_for_ids(target: Collection, *, text: str, ids: Sequence[str]) -> list[Hit]:
    """The records ``ids`` (those that exist, in no particular order) as hits, with their
    cosine distance to ``text`` computed from the stored vectors: cheaper than a filtered
    nearest-neighbour query when the candidates are already known."""
    if not ids:
        return []
    page = target.get(ids=list(ids), include=["documents", "metadatas", "embeddings"])
    vectors = page.get("embeddings")
    if vectors is None or len(page["ids"]) == 0:
        return []
    matrix = np.asarray(vectors, dtype=np.float64)
    query = np.asarray(get_embeddings().embed_query(text), dtype=np.float64)
    norms = np.linalg.norm(matrix, axis=1) * np.linalg.norm(query)
    similarity = np.divide(matrix @ query, norms, out=np.zeros(len(matrix)), where=norms > 0)
    documents: list[Any] = list(page.get("documents") or [])
    metadatas: list[Any] = list(page.get("metadatas") or [])
    return [
        Hit(
            id=record_id,
            text=(documents[i] or "") if i < len(documents) else "",
            metadata=dict(metadatas[i] or {}) if i < len(metadatas) else {},
            distance=float(1.0 - similarity[i]),
        )
        for i, record_id in enumerate(page["ids"])
    ]


def get_records(
    target: Collection,
    *,
    ids: Sequence[str] | None = None,
    where: Mapping[str, Any] | None = None,
    documents: bool = True,
) -> list[Record]:
    """The records of an opened collection (all, or those with ``ids`` / matching ``where``),
    read in pages; ``documents=False`` leaves ``text`` empty (cheaper)."""
    include: list[Any] = ["metadatas", "documents"] if documents else ["metadatas"]
    records: list[Record] = []
    offset = 0
    while True:
        page = target.get(
            ids=list(ids) if ids is not None else None,
            where=dict(where) if where else None,
            include=include,
            limit=_PAGE,
            offset=offset,
        )
        page_documents: list[Any] = list(page.get("documents") or [])
        page_metadatas: list[Any] = list(page.get("metadatas") or [])
        for i, record_id in enumerate(page["ids"]):
            text = page_documents[i] if i < len(page_documents) else None
            metadata = page_metadatas[i] if i < len(page_metadatas) else None
            records.append(Record(id=record_id, text=text or "", metadata=dict(metadata or {})))
        if len(page["ids"]) < _PAGE:
            return records
        offset += _PAGE


def _bump(target: Collection) -> None:
    metadata = dict(target.metadata or {})
    metadata[_GENERATION_KEY] = int(metadata.get(_GENERATION_KEY, 0)) + 1
    target.modify(metadata=metadata)


def _not_found(name: str) -> CollectionNotFound:
    names = collection_names()
    listed = ", ".join(names) or "none"
    return CollectionNotFound(
        f"Unknown collection {name!r}. Existing collections: {listed}.",
        details={"collection": name, "collections": names},
    )
