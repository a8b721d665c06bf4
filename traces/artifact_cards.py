"""Files a run's code wrote (its ``execute_code`` results' artifacts, ``traces.artifacts``) as
the chat and the trace browser show them: an image inline, a CSV or TSV as a small preview
table, anything else a download chip; every one links to the permission-checked artifact URL,
and every value is escaped by the templates."""

from __future__ import annotations

import csv
import io
import uuid
from collections.abc import Iterable
from typing import Any

import structlog

from traces.artifacts import IMAGE_TYPES, artifact_head, artifact_url, artifacts_of
from traces.exceptions import ArtifactNotFound
from traces.projections import clip

logger = structlog.get_logger(__name__)

#: A preview table shows at most this many rows (after the header) and columns, read from
#: at most this many bytes of the file; each cell cut to ``PREVIEW_CELL_CHARS``.
PREVIEW_ROWS = 10
PREVIEW_COLUMNS = 8
PREVIEW_BYTES = 64 * 1024
PREVIEW_CELL_CHARS = 60
TABLE_TYPES = {"text/csv": ",", "text/tab-separated-values": "\t"}


def artifact_cards(
    trace_id: uuid.UUID | str | None, records: Iterable[Any]
) -> list[dict[str, Any]]:
    """``records`` (artifact records, as ``traces.artifacts.artifacts_of`` reads them) as
    cards: ``kind`` (``image``, ``table`` or ``file``), ``name``, ``size``, ``media_type``,
    ``url`` (inline where the file may be shown), ``download_url``, an image's ``width`` and
    ``height``, a table's ``preview`` (``header``, ``rows``, ``more``; None when it cannot be
    read). None without a trace."""
    if trace_id is None:
        return []
    cards = []
    for record in artifacts_of({"artifacts": list(records)}):
        url = artifact_url(trace_id, record["id"])
        card: dict[str, Any] = {
            "kind": "file",
            "name": record["name"],
            "size": record["size"],
            "media_type": record["media_type"],
            "url": url,
            "download_url": f"{url}?download=true",
        }
        if record["media_type"] in IMAGE_TYPES:
            card.update(kind="image", width=record.get("width"), height=record.get("height"))
        elif record["media_type"] in TABLE_TYPES:
            card.update(kind="table", preview=_preview(trace_id, record))
        cards.append(card)
    return cards


def _preview(trace_id: uuid.UUID | str, record: dict[str, Any]) -> dict[str, Any] | None:
    try:
        head, truncated = artifact_head(trace_id, record["id"], max_bytes=PREVIEW_BYTES)
    except ArtifactNotFound:
        logger.warning("artifact_missing", trace_id=str(trace_id), artifact_id=record["id"])
        return None
    text = head.decode("utf-8", errors="replace")
    if truncated:
        text = text.rsplit("\n", 1)[0]  # the last line may be cut
    rows = []
    reader = csv.reader(io.StringIO(text), delimiter=TABLE_TYPES[record["media_type"]])
    try:
        for row in reader:
            rows.append([clip(value, PREVIEW_CELL_CHARS) for value in row[:PREVIEW_COLUMNS]])
            if len(rows) == PREVIEW_ROWS + 1:  # the header and the rows shown
                break
        more = truncated or next(reader, None) is not None
    except csv.Error:
        return None
    if not rows:
        return None
    return {"header": rows[0], "rows": rows[1:], "more": more}
