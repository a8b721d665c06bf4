"""Search over a collection: BM25, or hybrid BM25 + dense vectors fused by reciprocal rank.

With the lexical default (``get_embeddings().dense`` False) the ranking is BM25's alone, and
each result's ``vector_distance`` is still filled with the cosine distance of the hashed term
vectors. With a dense backend, the BM25 ranking and Chroma's nearest-neighbour ranking (each
``max(4 * top_k, 20)`` deep) are fused by reciprocal rank (``1 / (60 + rank)`` summed over the
lists, rank from 1), and both scores are reported for every result.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Any

import structlog

from agent.knowledge import bm25
from agent.knowledge.blocks import clip_lines, clip_markdown
from agent.knowledge.chunking import format_for
from agent.knowledge.embeddings import get_embeddings
from agent.knowledge.store import Hit, hits_for_ids, open_collection, query_collection

logger = structlog.get_logger(__name__)

__all__ = ["CONTENT_MAX_CHARS", "RRF_K", "SearchResult", "search"]

CONTENT_MAX_CHARS = 800
RRF_K = 60


@dataclass(frozen=True)
class SearchResult:
    """One chunk found in ``collection``. ``content`` is the chunk's text as stored (Markdown
    keeps its line breaks, code blocks and tables), cut to at most 800 characters at a block
    boundary (Python source at a line; see ``agent.knowledge.blocks``), "…" marking a cut;
    ``chunk_index`` is None when the record has none; a score that was not computed is 0.0.
    ``score`` orders the results (higher is better): the RRF sum in hybrid mode, the BM25
    score otherwise."""

    id: str
    collection: str
    source: str
    chunk_index: int | None
    title: str
    content: str
    vector_distance: float
    bm25_score: float
    score: float

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def search(*, query: str, top_k: int, collection: str) -> list[SearchResult]:
    """The ``top_k`` best chunks of ``collection`` for ``query``, best first; ``[]`` for a
    query without search terms or when nothing matches. Raises ``CollectionNotFound`` (404),
    ``EmbeddingsMismatch`` (409) and ``EmbeddingsUnavailable``."""
    started = time.monotonic()
    target = open_collection(collection)
    index = bm25.index_for(target)
    embeddings = get_embeddings()
    depth = max(4 * top_k, 20)
    lexical = index.top(query, k=depth if embeddings.dense else top_k)
    bm25_scores = dict(lexical)
    if embeddings.dense:
        dense = query_collection(target, text=query, n=depth)
        fused: dict[str, float] = {}
        for ranking in ([record_id for record_id, _ in lexical], [hit.id for hit in dense]):
            for rank, record_id in enumerate(ranking, start=1):
                fused[record_id] = fused.get(record_id, 0.0) + 1.0 / (RRF_K + rank)
        chosen = sorted(fused, key=lambda record_id: -fused[record_id])[:top_k]
        hits = {hit.id: hit for hit in dense}
        missing_scores = [record_id for record_id in chosen if record_id not in bm25_scores]
        if missing_scores:
            all_scores = index.scores(query)
            positions = {record_id: i for i, record_id in enumerate(index.ids)}
            for record_id in missing_scores:
                if all_scores is not None and record_id in positions:
                    bm25_scores[record_id] = float(all_scores[positions[record_id]])
        scores = fused
    else:
        chosen = [record_id for record_id, _ in lexical]
        hits = {}
        scores = bm25_scores
    without_distance = [record_id for record_id in chosen if record_id not in hits]
    for hit in hits_for_ids(target, text=query, ids=without_distance):
        hits[hit.id] = hit
    # A record BM25 knows but Chroma no longer has (deleted since the index was built) has no
    # hit: it is dropped rather than shown empty.
    results = [
        _result(collection, record_id, hits[record_id], bm25_scores.get(record_id, 0.0), scores)
        for record_id in chosen
        if record_id in hits
    ]
    logger.debug(
        "docs_searched",
        collection=collection,
        results=len(results),
        hybrid=embeddings.dense,
        duration_ms=round((time.monotonic() - started) * 1000, 1),
    )
    return results


def _result(
    collection: str, record_id: str, hit: Hit, bm25_score: float, scores: dict[str, float]
) -> SearchResult:
    metadata = hit.metadata
    chunk_index = metadata.get("chunk_index")
    source = str(metadata.get("source") or "")
    clip = clip_lines if format_for(source) == "python" else clip_markdown
    return SearchResult(
        id=record_id,
        collection=collection,
        source=source,
        chunk_index=int(chunk_index) if isinstance(chunk_index, int | float) else None,
        title=str(metadata.get("title") or ""),
        content=clip(hit.text, CONTENT_MAX_CHARS),
        vector_distance=float(hit.distance),
        bm25_score=float(bm25_score),
        score=float(scores.get(record_id, 0.0)),
    )
