"""Files a step produced (a program's plots and output files): stored through Django's storage
API, recorded in the step's data, served to those who may read the trace.

A file is stored as ``<trace_id>/<artifact_id>`` in the ``artifacts`` storage
(``settings.STORAGES``: a ``FileSystemStorage`` under the var dir by default, any backend such
as django-storages' S3 by setting); no name a program chose is ever part of a storage path. Its
record, ``StoredArtifact.as_dict()``, goes into the step's data (``artifacts``, beside the
result of the execution that wrote it): id, sanitised name, media type sniffed from the content
(the name only tells text kinds apart), size, SHA-256 and, for raster images, width and height.
``serving_headers`` gives the headers it is served with: raster images and plain text inline
(text always as ``text/plain``), everything else (SVG, HTML, CSV, PDF, archives...) as a
download; never sniffed by the browser, never allowed to run script.
"""

from __future__ import annotations

import hashlib
import re
import struct
import unicodedata
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import structlog
from django.core.files.base import ContentFile
from django.core.files.storage import Storage, storages
from django.urls import reverse

from traces.exceptions import ArtifactNotFound

logger = structlog.get_logger(__name__)

STORAGE_ALIAS = "artifacts"
NAME_MAX_CHARS = 120
#: Raster images, shown in the page.
IMAGE_TYPES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})
#: Text kinds told apart by the name's extension, once the content is known to be text.
TEXT_BY_EXTENSION = {
    ".csv": "text/csv",
    ".tsv": "text/tab-separated-values",
    ".tab": "text/tab-separated-values",
    ".json": "application/json",
    ".md": "text/markdown",
    ".html": "text/html",
    ".htm": "text/html",
    ".svg": "image/svg+xml",
    ".xml": "application/xml",
    ".js": "text/javascript",
}
#: The serving CSP: nothing loads, nothing runs, even for a file opened on its own.
CONTENT_SECURITY_POLICY = "default-src 'none'; sandbox"
_MARKUP = re.compile(rb"<(?:\?xml|!doctype|html|svg|script|head|body|iframe|object)\b", re.I)
_SVG = re.compile(rb"<svg\b", re.I)
_UNSAFE_CHARS = re.compile(r"[^\w.\- ]+")
#: How much of a file the text check reads.
_TEXT_PROBE_BYTES = 64 * 1024
_JPEG_FRAMES = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}


@dataclass(frozen=True)
class StoredArtifact:
    id: uuid.UUID
    name: str
    media_type: str
    size: int
    sha256: str
    width: int | None = None
    height: int | None = None

    def as_dict(self) -> dict[str, Any]:
        record: dict[str, Any] = {
            "id": str(self.id),
            "name": self.name,
            "media_type": self.media_type,
            "size": self.size,
            "sha256": self.sha256,
        }
        if self.width is not None and self.height is not None:
            record["width"], record["height"] = self.width, self.height
        return record


@dataclass(frozen=True)
class NotStored:
    """A file that could not be stored (the storage failed), and why."""

    name: str
    reason: str


def artifact_storage() -> Storage:
    return storages[STORAGE_ALIAS]


def storage_name(trace_id: uuid.UUID | str, artifact_id: uuid.UUID | str) -> str:
    return f"{trace_id}/{artifact_id}"


def sanitise_name(raw: str) -> str:
    """A file name fit to show and to download as: the program's relative path with its
    folders joined by ``_``, characters other than letters, digits, ``.``, ``-``, ``_`` and
    spaces (control characters, NUL, lone surrogates, markup, quotes...) replaced by ``_``, no
    leading dots, at most ``NAME_MAX_CHARS`` (the extension kept); ``file`` for nothing left.
    ``<script>.png`` becomes ``_script_.png``, ``../../x`` becomes ``x``."""
    parts = [part for part in raw.replace("\\", "/").split("/") if part not in {"", ".", ".."}]
    text = unicodedata.normalize("NFC", "_".join(parts))
    text = _UNSAFE_CHARS.sub("_", text).strip(" ").lstrip(".")
    if len(text) > NAME_MAX_CHARS:
        _, dot, extension = text.rpartition(".")
        keep = extension if dot and len(extension) <= 10 else ""
        text = text[: NAME_MAX_CHARS - len(keep) - 1] + ("." + keep if keep else "")
    return text or "file"


def sniff(data: bytes, name: str = "") -> tuple[str, tuple[int, int] | None]:
    """The media type of ``data`` from its content, with a raster image's width and height.
    The name's extension only tells kinds of text apart (``.csv``...); a file whose content
    is not text is never text, whatever its name, and a raster image is one by its header."""
    image = _image_size(data)
    if image is not None:
        return image
    if data.startswith(b"%PDF-"):
        return "application/pdf", None
    if data.startswith((b"PK\x03\x04", b"PK\x05\x06")):
        return "application/zip", None
    if data.startswith(b"\x1f\x8b"):
        return "application/gzip", None
    probe = data[:_TEXT_PROBE_BYTES]
    if b"\x00" in probe or not _is_utf8(probe, whole=len(data) <= _TEXT_PROBE_BYTES):
        return "application/octet-stream", None
    extension = "." + name.rsplit(".", 1)[-1].lower() if "." in name else ""
    by_name = TEXT_BY_EXTENSION.get(extension)
    head = probe[:4096]
    if _MARKUP.search(head):
        if by_name in {"image/svg+xml", "application/xml"}:
            return by_name, None
        return ("image/svg+xml" if _SVG.search(head) else "text/html"), None
    return by_name or "text/plain", None


def _is_utf8(probe: bytes, *, whole: bool) -> bool:
    try:
        probe.decode("utf-8")
    except UnicodeDecodeError as exc:
        # A character cut at the end of the probe is not an error.
        return not whole and exc.start >= len(probe) - 3
    return True


def _image_size(data: bytes) -> tuple[str, tuple[int, int] | None] | None:
    """``(media type, (width, height))`` of a PNG, GIF, JPEG or WebP header; None otherwise."""
    if data.startswith(b"\x89PNG\r\n\x1a\n") and data[12:16] == b"IHDR" and len(data) >= 24:
        return "image/png", _dimensions(*struct.unpack(">II", data[16:24]))
    if data[:6] in {b"GIF87a", b"GIF89a"} and len(data) >= 10:
        return "image/gif", _dimensions(*struct.unpack("<HH", data[6:10]))
    if data.startswith(b"\xff\xd8\xff"):
        return "image/jpeg", _jpeg_size(data)
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp", _webp_size(data)
    return None


def _dimensions(width: int, height: int) -> tuple[int, int] | None:
    return (width, height) if 0 < width <= 1 << 24 and 0 < height <= 1 << 24 else None


def _jpeg_size(data: bytes) -> tuple[int, int] | None:
    at = 2
    while at + 9 <= len(data):
        if data[at] != 0xFF:
            return None
        marker = data[at + 1]
        if marker == 0xFF:
            at += 1
            continue
        if marker in _JPEG_FRAMES:
            height, width = struct.unpack(">HH", data[at + 5 : at + 9])
            return _dimensions(width, height)
        if marker == 0xD9 or marker == 0xDA:  # end of image, start of scan: no frame header
            return None
        if marker == 0x01 or 0xD0 <= marker <= 0xD7:
            at += 2
            continue
        (length,) = struct.unpack(">H", data[at + 2 : at + 4])
        at += 2 + length
    return None


def _webp_size(data: bytes) -> tuple[int, int] | None:
    chunk = data[12:16]
    if chunk == b"VP8 " and len(data) >= 30:
        width, height = struct.unpack("<HH", data[26:30])
        return _dimensions(width & 0x3FFF, height & 0x3FFF)
    if chunk == b"VP8L" and len(data) >= 25:
        (bits,) = struct.unpack("<I", data[21:25])
        return _dimensions((bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1)
    if chunk == b"VP8X" and len(data) >= 30:
        width = int.from_bytes(data[24:27], "little") + 1
        height = int.from_bytes(data[27:30], "little") + 1
        return _dimensions(width, height)
    return None


def store_files(
    files: Iterable[tuple[str, bytes]], *, trace_id: uuid.UUID | str
) -> tuple[list[StoredArtifact], list[NotStored]]:
    """Store ``(name, data)`` files as artifacts of the trace: their records in order, and
    the files the storage refused (each with the reason; the others are stored all the
    same)."""
    storage = artifact_storage()
    stored: list[StoredArtifact] = []
    failed: list[NotStored] = []
    for raw_name, data in files:
        artifact_id = uuid.uuid4()
        name = sanitise_name(raw_name)
        media_type, size = sniff(data, name)
        try:
            storage.save(storage_name(trace_id, artifact_id), ContentFile(data))
        except Exception as exc:
            logger.warning("artifact_not_stored", trace_id=str(trace_id), error=str(exc))
            failed.append(NotStored(name=name, reason=f"not stored: {type(exc).__name__}"))
            continue
        stored.append(
            StoredArtifact(
                id=artifact_id,
                name=name,
                media_type=media_type,
                size=len(data),
                sha256=hashlib.sha256(data).hexdigest(),
                width=size[0] if size else None,
                height=size[1] if size else None,
            )
        )
    if stored:
        logger.info("artifacts_stored", trace_id=str(trace_id), count=len(stored))
    return stored, failed


def artifacts_of(data: Any) -> list[dict[str, Any]]:
    """The artifact records in a step's data: ``data["result"]["artifacts"]`` (an agent's
    ``execute_code`` result) or ``data["artifacts"]`` (``/api/sandbox/execute``'s call
    traces); records not of the shape ``StoredArtifact.as_dict`` writes are left out."""
    if not isinstance(data, dict):
        return []
    result = data.get("result")
    found = result.get("artifacts") if isinstance(result, dict) else None
    if found is None:
        found = data.get("artifacts")
    if not isinstance(found, list):
        return []
    return [
        record
        for record in found
        if isinstance(record, dict)
        and isinstance(record.get("id"), str)
        and isinstance(record.get("name"), str)
        and isinstance(record.get("media_type"), str)
        and isinstance(record.get("size"), int)
    ]


def artifact_bytes(trace_id: uuid.UUID | str, artifact_id: uuid.UUID | str) -> bytes:
    """The stored file's content (at most the output file limit, so it is read whole);
    raises ``ArtifactNotFound`` when the storage no longer has it."""
    try:
        with artifact_storage().open(storage_name(trace_id, artifact_id), "rb") as stored:
            return bytes(stored.read())
    except FileNotFoundError as exc:
        raise ArtifactNotFound(f"Artifact {artifact_id} is no longer stored.") from exc


def artifact_head(
    trace_id: uuid.UUID | str, artifact_id: uuid.UUID | str, *, max_bytes: int
) -> tuple[bytes, bool]:
    """The first ``max_bytes`` of the stored file, and whether there is more; raises
    ``ArtifactNotFound`` when the storage no longer has it."""
    try:
        with artifact_storage().open(storage_name(trace_id, artifact_id), "rb") as stored:
            head = bytes(stored.read(max_bytes + 1))
    except FileNotFoundError as exc:
        raise ArtifactNotFound(f"Artifact {artifact_id} is no longer stored.") from exc
    return head[:max_bytes], len(head) > max_bytes


def artifact_url(trace_id: uuid.UUID | str, artifact_id: uuid.UUID | str) -> str:
    """Where the trace's owner (and staff) fetch the artifact: ``GET /api/traces/<trace>/
    artifacts/<artifact>`` (add ``?download=true`` to download an image or plain text)."""
    return reverse("api:trace_artifact", kwargs={"trace_id": trace_id, "artifact_id": artifact_id})


def is_inline(media_type: str) -> bool:
    """Shown in the page: raster images and plain text, nothing else."""
    return media_type in IMAGE_TYPES or media_type == "text/plain"


def serving_headers(record: dict[str, Any], *, download: bool = False) -> dict[str, str]:
    """The response headers of an artifact: inline only for a raster image or plain text
    (unless ``download``), else an attachment; never sniffed, never allowed to run script."""
    media_type = str(record["media_type"])
    inline = is_inline(media_type) and not download
    if media_type in IMAGE_TYPES:
        content_type = media_type
    elif media_type.startswith("text/") and media_type not in {"text/html", "text/javascript"}:
        content_type = f"{media_type}; charset=utf-8"
    else:
        content_type = "application/octet-stream"
    name = sanitise_name(str(record["name"]))
    ascii_name = name.encode("ascii", "replace").decode().replace("?", "_")
    disposition = "inline" if inline else "attachment"
    return {
        "Content-Type": content_type,
        "Content-Disposition": (
            f"{disposition}; filename=\"{ascii_name}\"; filename*=UTF-8''{quote(name, safe='')}"
        ),
        "X-Content-Type-Options": "nosniff",
        "Content-Security-Policy": CONTENT_SECURITY_POLICY,
        "Cross-Origin-Resource-Policy": "same-origin",
        "Cache-Control": "private, max-age=3600",
    }
