"""The default embeddings: hashed term vectors, offline and deterministic.

Each text becomes the bag of its ``agent.knowledge.text.tokenize`` terms (stemmed English words,
identifiers, Chinese character bigrams), hashed into ``DIMENSIONS`` signed buckets (the
"hashing trick") with sublinear term frequency, then L2-normalised, so the cosine distance of
two vectors measures shared vocabulary. Nothing is downloaded and the same text always gives the
same vector. The vectors are lexical, not semantic (``dense`` is False): search ranks with BM25
and reports this distance beside it.
"""

from __future__ import annotations

import zlib
from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np

from agent.knowledge.text import tokenize

DIMENSIONS = 1024


class LexicalEmbeddings:
    """``Embeddings`` backend ``lexical-hash-v1``. Takes no options (ignores any given)."""

    name = "lexical-hash-v1"
    dense = False

    def __init__(self, **options: Any) -> None:
        del options

    def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        return [self._vector(text) for text in texts]

    def embed_query(self, text: str) -> list[float]:
        return self._vector(text)

    @staticmethod
    def _vector(text: str) -> list[float]:
        counts = Counter(tokenize(text))
        if not counts:
            # Chroma rejects an all-zero vector under the cosine space; a text without terms
            # gets a fixed unit vector instead (equally far from every real text).
            vector = np.zeros(DIMENSIONS)
            vector[0] = 1.0
            return list(vector.tolist())
        digests = np.fromiter(
            (zlib.crc32(term.encode("utf-8")) for term in counts),
            dtype=np.uint64,
            count=len(counts),
        )
        weights = 1.0 + np.log(np.fromiter(counts.values(), dtype=np.float64, count=len(counts)))
        signs = np.where(digests & 0x80000000, 1.0, -1.0)
        vector = np.zeros(DIMENSIONS)
        np.add.at(vector, (digests % DIMENSIONS).astype(np.intp), signs * weights)
        norm = float(np.linalg.norm(vector))
        if norm == 0.0:
            vector[0] = 1.0
            return list(vector.tolist())
        return list((vector / norm).tolist())
