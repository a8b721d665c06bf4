"""Response schemas of the collections API."""

from __future__ import annotations

from ninja import Schema


class CollectionOut(Schema):
    name: str
    chunks: int
    documents: int
    error: str = ""


class IngestOut(Schema):
    """What an upload did; the lists hold sources (file names)."""

    collection: str
    added: list[str]
    updated: list[str]
    unchanged: list[str]
    deleted: list[str]
    unsupported: list[str]
    empty: list[str]
    unreadable: list[str]
    chunks_written: int
    chunks_deleted: int
    duration_ms: int
