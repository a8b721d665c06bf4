"""Dense embeddings from any OpenAI-compatible ``/embeddings`` endpoint.

The HTTP client (batching, the SDK's retries, error mapping) is ``agent.llm.embeddings``, since only
``agent/llm/`` talks to a model; this backend adapts it to the ``Embeddings`` protocol and turns
its ``LLMUnavailable`` / ``LLMTimeout`` into the ``EmbeddingsUnavailable`` the knowledge package
handles (a timeout keeps its own code, ``embeddings_timeout``, and status 504).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agent.exceptions import EmbeddingsTimeout, EmbeddingsUnavailable, LLMTimeout, LLMUnavailable
from agent.llm.embeddings import OpenAIEmbeddingsClient

DEFAULT_MODEL = "text-embedding-3-small"


class OpenAIEmbeddings:
    """``Embeddings`` backend ``openai:<model>`` (dense).

    Options: ``model`` (default ``text-embedding-3-small``), ``base_url`` (default OpenAI's),
    ``api_key``, ``timeout_s``, ``max_retries``, ``batch_size``, ``dimensions``; the others are
    ignored. Calls block (run them off the event loop) and raise ``EmbeddingsUnavailable``.
    """

    dense = True

    def __init__(
        self,
        *,
        model: str | None = None,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout_s: float = 30.0,
        max_retries: int = 2,
        batch_size: int = 64,
        dimensions: int | None = None,
        **options: Any,
    ) -> None:
        del options
        self.client = OpenAIEmbeddingsClient(
            base_url=base_url,
            api_key=api_key,
            model=model or DEFAULT_MODEL,
            timeout_s=timeout_s,
            max_retries=max_retries,
            batch_size=batch_size,
            dimensions=dimensions,
        )
        # Shorter vectors of the same model are not comparable with full-length ones.
        suffix = f"@{self.client.dimensions}" if self.client.dimensions else ""
        self.name = f"openai:{self.client.model}{suffix}"

    def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        """One vector per text, in order (none for no texts, without a request)."""
        if not texts:
            return []
        return self._embed(texts)

    def embed_query(self, text: str) -> list[float]:
        return self._embed([text])[0]

    def describe(self) -> dict[str, Any]:
        return {"backend": self.name, **self.client.describe()}

    def _embed(self, texts: Sequence[str]) -> list[list[float]]:
        try:
            return self.client.embed(texts).vectors
        except LLMTimeout as exc:
            raise EmbeddingsTimeout(exc.message, details=exc.details) from exc
        except LLMUnavailable as exc:
            raise EmbeddingsUnavailable(exc.message, details=exc.details) from exc
