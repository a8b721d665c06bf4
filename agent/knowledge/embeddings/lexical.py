"""The default embeddings: hashed term vectors, offline and deterministic.

Each text becomes the bag of its ``agent.knowledge.text.tokenize`` terms (stemmed English words,
identifiers, Chinese character bigrams), hashed into ``DIMENSIONS`` signed buckets (the
"hashing trick") with sublinear term frequency, then L2-normalised, so the cosine distance of
two vectors measures shared vocabulary. Nothing is downloaded and the same text always gives the
same vector. The vectors are lexical, not semantic (``dense`` is False): search ranks with BM25
and reports this distance beside it.
"""

from __future__ import annotations

import math
import zlib
from collections import Counter
from collections.abc import Sequence
from typing import Any

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
        vector = [0.0] * DIMENSIONS
        for term, count in Counter(tokenize(text)).items():
            digest = zlib.crc32(term.encode("utf-8"))
            sign = 1.0 if digest & 0x80000000 else -1.0
            vector[digest % DIMENSIONS] += sign * (1.0 + math.log(count))
        norm = math.sqrt(sum(value * value for value in vector))
        if norm == 0.0:
            # Chroma rejects an all-zero vector under the cosine space; a text without terms
            # gets a fixed unit vector instead (equally far from every real text).
            vector[0] = 1.0
            return vector
        return [value / norm for value in vector]
