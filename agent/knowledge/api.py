"""The collections API: list collections, upload documents, delete documents and collections.

Reads are open to every authenticated user; writes are staff only (403). The Chroma and BM25
work runs in worker threads, off the event loop.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from asgiref.sync import sync_to_async
from django.conf import settings
from django.http import HttpRequest, HttpResponse
from ninja import File, Router
from ninja.files import UploadedFile

from agent.knowledge.collections import collection_list, collection_remove
from agent.knowledge.ingest import SourceFile, document_delete, ingest_files
from agent.knowledge.schemas import CollectionOut, IngestOut
from devassist.auth import require_staff
from devassist.exceptions import InvalidInput, TooLarge

router = Router(tags=["knowledge"])


@router.get("", response=list[CollectionOut], url_name="list_collections")
async def list_collections(request: HttpRequest) -> list[dict[str, Any]]:
    """Every collection with its chunk and document counts."""
    infos = await sync_to_async(collection_list, thread_sensitive=False)()
    return [asdict(info) for info in infos]


@router.post("/{name}/documents", response=IngestOut, url_name="upload_documents")
async def upload_documents(
    request: HttpRequest, name: str, files: File[list[UploadedFile]]
) -> dict[str, Any]:
    """Ingest the uploaded files (multipart field ``files``, one or more) into collection
    ``name``, created if needed; a file with the name of a document already there replaces
    it. Staff only; over ``KNOWLEDGE_UPLOAD_MAX_BYTES`` in total → 413."""
    require_staff(request, "Only staff can change collections.")
    limit = settings.KNOWLEDGE_UPLOAD_MAX_BYTES
    total = sum(upload.size or 0 for upload in files)
    if total > limit:
        raise TooLarge(
            f"The upload is {total} bytes; at most {limit} bytes are accepted.",
            details={"size": total, "limit": limit},
        )
    if not files:
        raise InvalidInput("Upload at least one file in the multipart field 'files'.")
    sources = [SourceFile(source=upload.name or "", read=upload.read) for upload in files]
    summary = await sync_to_async(ingest_files, thread_sensitive=False)(
        files=sources, collection=name
    )
    return asdict(summary)


@router.delete("/{name}", response={204: None}, url_name="delete_collection")
async def delete_collection(request: HttpRequest, name: str) -> HttpResponse:
    """Delete collection ``name`` with all its documents. Staff only."""
    require_staff(request, "Only staff can change collections.")
    await sync_to_async(collection_remove, thread_sensitive=False)(name=name)
    return HttpResponse(status=204)


@router.delete("/{name}/documents/{path:source}", response={204: None}, url_name="delete_document")
async def delete_document(request: HttpRequest, name: str, source: str) -> HttpResponse:
    """Delete document ``source`` (e.g. ``docs/tools.md``) from collection ``name``. Staff
    only."""
    require_staff(request, "Only staff can change collections.")
    await sync_to_async(document_delete, thread_sensitive=False)(collection=name, source=source)
    return HttpResponse(status=204)
