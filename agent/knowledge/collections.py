"""Collection-level reads and removal (the collections API's services)."""

from __future__ import annotations

from dataclasses import dataclass

import structlog

from agent.exceptions import CollectionNotFound
from agent.knowledge import bm25
from agent.knowledge.store import collection_delete, collection_names, get_records, open_collection
from devassist.exceptions import DomainError

logger = structlog.get_logger(__name__)

__all__ = ["CollectionInfo", "collection_list", "collection_remove"]


@dataclass(frozen=True)
class CollectionInfo:
    """A collection: how many chunks it holds and from how many documents (sources), or why
    it cannot be read (``error``; then both counts are 0)."""

    name: str
    chunks: int
    documents: int
    error: str = ""


def collection_list() -> list[CollectionInfo]:
    """Every collection, by name. One that cannot be opened (built with another embeddings
    backend, say) is listed with the reason, so that it can be found and deleted."""
    infos = []
    for name in collection_names():
        try:
            target = open_collection(name)
        except CollectionNotFound:
            continue  # deleted meanwhile
        except DomainError as exc:
            logger.warning("collection_unreadable", collection=name, error=exc.message)
            infos.append(CollectionInfo(name=name, chunks=0, documents=0, error=exc.message))
            continue
        records = get_records(target, documents=False)
        sources = {str(r.metadata.get("source", "")) for r in records}
        infos.append(CollectionInfo(name=name, chunks=len(records), documents=len(sources)))
    return infos


def collection_remove(*, name: str) -> None:
    """Delete collection ``name`` and its BM25 index. Raises ``CollectionNotFound``."""
    collection_delete(name)
    bm25.drop_index(name)
