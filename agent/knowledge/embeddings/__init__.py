"""Embedding backends: text to vectors, chosen by ``settings.EMBEDDINGS``.

``settings.EMBEDDINGS`` follows Django's backend idiom, ``{"BACKEND": "dotted.path",
"OPTIONS": {...}}``; ``get_embeddings()`` builds the backend once per process. A backend is a
class whose constructor takes the options as keyword arguments (ignoring the ones it does not
use) and whose instances follow the ``Embeddings`` protocol.

- ``agent.knowledge.embeddings.lexical.LexicalEmbeddings`` (the default): offline, nothing to
  download, deterministic hashed term vectors; ``dense`` is False, so ranking comes from BM25
  alone.
- a dense backend (``dense`` True): retrieval becomes hybrid, dense and BM25 rankings fused by
  reciprocal rank.

``name`` is stored in every collection's metadata: a collection built with another backend (or
model) must be re-ingested, and using it raises ``EmbeddingsMismatch``.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from typing import Any, Protocol, cast, runtime_checkable

from django.conf import settings
from django.utils.module_loading import import_string

__all__ = ["Embeddings", "get_embeddings"]


@runtime_checkable
class Embeddings(Protocol):
    """Turns texts into vectors. Implementations are thread-safe and return one vector per
    text, all of the same length, in the order given."""

    #: A stable id of the backend and its model ("lexical-hash-v1",
    #: "openai:text-embedding-3-small"): vectors from backends with different names are not
    #: comparable.
    name: str
    #: False for lexical vectors (ranking then comes from BM25 alone); True for semantic
    #: vectors (hybrid retrieval).
    dense: bool

    def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        """One vector per text, for storing."""
        ...

    def embed_query(self, text: str) -> list[float]:
        """The vector of a search query."""
        ...


@lru_cache(maxsize=1)
def get_embeddings() -> Embeddings:
    """The backend ``settings.EMBEDDINGS`` names, built with its ``OPTIONS`` (cached; tests
    that change the setting call ``get_embeddings.cache_clear()``)."""
    config: dict[str, Any] = settings.EMBEDDINGS
    backend = import_string(config["BACKEND"])
    return cast(Embeddings, backend(**config.get("OPTIONS", {})))
