"""A client for any OpenAI-compatible ``/embeddings`` endpoint (OpenAI, vLLM, Ollama, llama.cpp
server, LM Studio, TEI...), on the official ``openai`` SDK.

It is synchronous on purpose: its callers (ingestion, the ``Embeddings`` protocol of the
knowledge package) are synchronous and run off the event loop, and a sync ``openai.OpenAI``
client is thread-safe and tied to no event loop, so one client serves every thread of the
process. Never call it from the event loop thread itself (use ``asyncio.to_thread``).

Retries are the SDK's (``max_retries``; see ``agent.llm.endpoint``), per request: each batch is
retried on its own, so a long ingest does not start over because one request failed once.
"""

from __future__ import annotations

import array
import base64
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import openai
import structlog

from agent.exceptions import LLMUnavailable
from agent.llm.base import Usage
from agent.llm.endpoint import OpenAIEndpoint, ms_since

logger = structlog.get_logger(__name__)

#: The OpenAI API takes at most 2048 inputs per request; local servers often far fewer.
MAX_BATCH_SIZE = 2048


@dataclass(frozen=True)
class EmbeddingsResponse:
    """The vectors of one ``embed()`` call, in the order of its texts.

    ``usage.prompt_tokens`` is summed over the requests (0 where the server reports none);
    ``requests`` counts the HTTP requests that succeeded (one per batch); ``latency_ms`` is the
    whole call, retries and backoff included, on a monotonic clock.
    """

    vectors: list[list[float]]
    model: str
    usage: Usage
    requests: int
    latency_ms: int


class OpenAIEmbeddingsClient(OpenAIEndpoint):
    """Embeds texts through an OpenAI-compatible ``POST {base_url}/embeddings``.

    ``timeout_s`` bounds connecting and each wait for data of one request; ``max_retries`` is the
    number of extra attempts the SDK makes per batch after the first; ``batch_size`` is the
    number of texts per request (1-2048); ``dimensions`` asks models that support it
    (``text-embedding-3-*``) for shorter vectors and is not sent when None.
    """

    label = "embeddings endpoint"
    failure_event = "embeddings_call_failed"
    status_hints = {
        401: "check EMBEDDINGS_API_KEY",
        403: "check EMBEDDINGS_API_KEY and the key's permissions",
        404: "check EMBEDDINGS_MODEL, and that EMBEDDINGS_BASE_URL ends with /v1",
    }

    def __init__(
        self,
        *,
        base_url: str | None,
        api_key: str | None,
        model: str,
        timeout_s: float = 30.0,
        max_retries: int = 2,
        batch_size: int = 64,
        dimensions: int | None = None,
    ) -> None:
        if not model:
            raise ValueError("an embeddings model name is required (EMBEDDINGS_MODEL)")
        self._endpoint_setup(
            base_url=base_url,
            api_key=api_key,
            model=model,
            timeout_s=timeout_s,
            max_retries=max_retries,
        )
        self.batch_size = min(MAX_BATCH_SIZE, max(1, int(batch_size)))
        self.dimensions = int(dimensions) if dimensions else None
        self._client = openai.OpenAI(
            base_url=self.base_url,
            api_key=api_key or "not-needed",
            timeout=self.timeout_s,
            max_retries=self.max_retries,
        )

    def describe(self) -> dict[str, Any]:
        """What to show people about this client: model and endpoint (never the key)."""
        return {"provider": "openai", "model": self.model, "base_url": self._display_url}

    def embed(self, texts: Sequence[str]) -> EmbeddingsResponse:
        """The embedding of every text, in order, requested ``batch_size`` texts at a time.

        Blank texts are sent as a single space (the OpenAI API refuses empty input). Blocks
        until every batch is answered; raises ``LLMUnavailable`` (unreachable endpoint, HTTP
        error, malformed answer) or ``LLMTimeout`` once a batch has used up its retries, and
        the vectors of earlier batches are then discarded.
        """
        started = time.monotonic()
        inputs = [text if text.strip() else " " for text in texts]
        vectors: list[list[float]] = []
        prompt_tokens = 0
        model = self.model
        requests = 0
        for offset in range(0, len(inputs), self.batch_size):
            batch = inputs[offset : offset + self.batch_size]
            batch_vectors, batch_tokens, model = self._embed_batch(batch, started)
            vectors.extend(batch_vectors)
            prompt_tokens += batch_tokens
            requests += 1
        dimensions = {len(vector) for vector in vectors}
        if len(dimensions) > 1:
            raise self._logged(
                LLMUnavailable(
                    f"The embeddings endpoint at {self._display_url} answered vectors of "
                    f"different lengths ({', '.join(map(str, sorted(dimensions)))}).",
                    details=self._details(None, 1),
                ),
                started,
            )
        response = EmbeddingsResponse(
            vectors=vectors,
            model=model,
            usage=Usage(prompt_tokens=prompt_tokens),
            requests=requests,
            latency_ms=ms_since(started),
        )
        logger.info(
            "embeddings_call_finished",
            model=model,
            inputs=len(inputs),
            requests=requests,
            dimensions=len(vectors[0]) if vectors else 0,
            prompt_tokens=prompt_tokens,
            latency_ms=response.latency_ms,
        )
        return response

    def _embed_batch(self, batch: list[str], started: float) -> tuple[list[list[float]], int, str]:
        """One request: the batch's vectors in input order, its prompt tokens and the model."""
        params: dict[str, Any] = {"model": self.model, "input": batch, "encoding_format": "float"}
        if self.dimensions:
            params["dimensions"] = self.dimensions
        try:
            raw = self._client.embeddings.with_raw_response.create(**params)
            answer = raw.parse()
        except (openai.OpenAIError, ValueError) as exc:
            raise self._logged(self._error(exc), started) from exc
        try:
            items = sorted(answer.data, key=lambda item: item.index)
            if [item.index for item in items] != list(range(len(batch))):
                raise ValueError(f"{len(items)} embeddings for {len(batch)} inputs")
            vectors = [_vector(item.embedding) for item in items]
            if not all(vectors):
                raise ValueError("an empty embedding")
            usage = answer.usage
            tokens = int(getattr(usage, "prompt_tokens", 0) or 0) if usage is not None else 0
            model = str(answer.model or self.model)
        except (AttributeError, TypeError, ValueError) as exc:
            raise self._logged(
                LLMUnavailable(
                    f"The embeddings endpoint at {self._display_url} sent a malformed answer: "
                    f"{self._redact(str(exc)) or type(exc).__name__}",
                    details=self._details(None, raw.retries_taken + 1),
                ),
                started,
            ) from exc
        return vectors, tokens, model


def _vector(embedding: object) -> list[float]:
    """A float list from an answer's ``embedding``: a list of numbers, or the base64 of
    little-endian float32 values that some servers send whatever ``encoding_format`` says."""
    if isinstance(embedding, str):
        values = array.array("f")
        values.frombytes(base64.b64decode(embedding, validate=True))
        if sys.byteorder != "little":
            values.byteswap()
        return values.tolist()
    if not isinstance(embedding, list):
        raise TypeError(f"an embedding of type {type(embedding).__name__}")
    return [float(value) for value in embedding]
