"""Reads of ingested documents: one document's chunks in order (for its page), which sources
of a collection are documents (for links), and the page about configuring a model.

Collections are shared: every signed-in user may read every collection the collections API
lists; the internal ones (the agent's memory) do not exist here either (``open_collection``).
Synchronous (Chroma); async callers wrap them with ``sync_to_async(..., thread_sensitive=False)``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace

import structlog
from django.conf import settings

from agent.exceptions import CollectionNotFound, DocumentNotFound
from agent.knowledge.chunking import CHUNK_OVERLAP_CHARS, format_for
from agent.knowledge.links import document_url, link_targets, rewrite_links
from agent.knowledge.store import get_records, open_collection
from devassist.exceptions import DomainError

logger = structlog.get_logger(__name__)

__all__ = [
    "MODELS_DOCUMENT",
    "Document",
    "DocumentPart",
    "document_get",
    "documents_existing",
    "models_document_url",
]

#: The documentation page about configuring a model, as ``make run`` ingests it.
MODELS_DOCUMENT = "docs/llm.md"


@dataclass(frozen=True)
class DocumentPart:
    """One chunk of a document as its page shows it: ``text`` without the heading line the
    chunk opens with and without what it repeats of the chunk before (the overlap), so the
    parts read as the document did."""

    index: int
    title: str
    section: str
    text: str


@dataclass(frozen=True)
class Document:
    """A document of ``collection``, its chunks in order; ``format`` as ``format_for`` names
    it (``"markdown"``, ``"python"``...)."""

    collection: str
    source: str
    format: str
    parts: list[DocumentPart]


def document_get(*, collection: str, source: str) -> Document:
    """Document ``source`` of ``collection``; in a Markdown document, relative links point at
    the pages of the documents of the collection they name, or are plain text
    (``agent.knowledge.links.rewrite_links``). Raises ``CollectionNotFound`` (an unknown or
    internal collection), ``DocumentNotFound``, ``EmbeddingsMismatch`` (a collection built with
    other embeddings)."""
    target = open_collection(collection)
    records = get_records(target, where={"source": source})
    if not records:
        raise DocumentNotFound(
            f"Collection {collection!r} has no document {source!r}.",
            details={"collection": collection, "source": source},
        )
    records.sort(key=lambda record: int(record.metadata.get("chunk_index") or 0))
    parts: list[DocumentPart] = []
    previous = ""
    for record in records:
        title = str(record.metadata.get("title") or "")
        text = record.text
        if title and text.startswith(f"{title}\n\n"):
            text = text[len(title) + 2 :]
        if parts and parts[-1].section == record.metadata.get("section"):
            text = _without_overlap(previous, text)
        parts.append(
            DocumentPart(
                index=int(record.metadata.get("chunk_index") or 0),
                title=title,
                section=str(record.metadata.get("section") or ""),
                text=text,
            )
        )
        previous = record.text
    kind = format_for(source) or "text"
    if kind == "markdown":
        linked = documents_existing(
            collection=collection,
            sources=set().union(*(link_targets(part.text, source=source) for part in parts)),
        )
        parts = [
            replace(
                part,
                text=rewrite_links(
                    part.text, collection=collection, source=source, documents=linked
                ),
            )
            for part in parts
        ]
    return Document(collection=collection, source=source, format=kind, parts=parts)


def documents_existing(*, collection: str, sources: Iterable[str]) -> frozenset[str]:
    """Those of ``sources`` that are documents of ``collection``; none when the collection
    does not exist or cannot be read (logged)."""
    wanted = sorted(set(sources))
    if not wanted:
        return frozenset()
    try:
        target = open_collection(collection)
    except CollectionNotFound:
        return frozenset()
    except DomainError as exc:
        logger.warning("collection_unreadable", collection=collection, error=exc.message)
        return frozenset()
    records = get_records(target, where={"source": {"$in": wanted}}, documents=False)
    return frozenset(str(record.metadata.get("source")) for record in records)


def models_document_url() -> str | None:
    """The page of ``MODELS_DOCUMENT`` (how to configure a model) in the default collection,
    None when that collection does not hold it, or when the store cannot be read (logged:
    the answers and the page that link it work without the link)."""
    collection = settings.KNOWLEDGE_DEFAULT_COLLECTION
    try:
        found = documents_existing(collection=collection, sources=[MODELS_DOCUMENT])
    except Exception as exc:
        logger.warning("collection_unreadable", collection=collection, error=str(exc))
        return None
    return document_url(collection, MODELS_DOCUMENT) if found else None


def _without_overlap(previous: str, text: str) -> str:
    """``text`` without the end of ``previous`` it opens with, when it does: the chunker
    repeats up to ``CHUNK_OVERLAP_CHARS`` of a section's last piece, followed by a blank
    line, at the start of the next chunk of the section."""
    cut = 0
    position = text.find("\n\n")
    while 0 < position <= CHUNK_OVERLAP_CHARS:
        if previous.endswith(text[:position]):
            cut = position + 2
        position = text.find("\n\n", position + 2)
    return text[cut:]
