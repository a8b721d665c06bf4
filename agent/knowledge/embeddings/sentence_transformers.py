"""Dense embeddings from a local sentence-transformers model, on the CPU by default.

Needs the optional ``local-embeddings`` extra (``sentence-transformers``, which brings torch;
install the CPU build of torch first, see docs/knowledge.md). The model is loaded on first use,
once per process for each (model, device), and shared by every instance.

Nothing is downloaded at run time unless ``allow_download`` is set: the model is loaded with
``local_files_only``, and ``HF_HUB_OFFLINE`` is set (unless the environment already sets it)
before the Hugging Face libraries are first imported, so no code path of theirs reaches the hub.
``model`` is then a directory (as written by ``SentenceTransformer.save()``, or a plain
transformers model directory, which gets mean pooling) or the name of a model already in the
local Hugging Face cache.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import structlog

from agent.exceptions import EmbeddingsUnavailable

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

logger = structlog.get_logger(__name__)

_models: dict[tuple[str, str, bool], _LoadedModel] = {}
_models_lock = threading.Lock()


class SentenceTransformerEmbeddings:
    """``Embeddings`` backend ``sentence-transformers:<model>`` (dense, unit-length vectors).

    Options: ``model`` (required: a local directory, or a model name in the local Hugging Face
    cache), ``device`` (``cpu`` by default; ``cuda``, ``mps``...), ``batch_size``,
    ``allow_download`` (fetch a named model from the Hugging Face hub once, into its cache);
    the others are ignored. Documents and queries go through the model's document and query
    prompts when it defines them. Loading or running the model raises
    ``EmbeddingsUnavailable`` naming the setting to fix. Calls block: run them off the event
    loop.
    """

    dense = True

    def __init__(
        self,
        *,
        model: str | None = None,
        device: str | None = "cpu",
        batch_size: int = 64,
        allow_download: bool = False,
        **options: Any,
    ) -> None:
        del options
        if not model:
            raise EmbeddingsUnavailable(
                "The sentence-transformers embeddings backend needs a model: set "
                "EMBEDDINGS_MODEL to a local model directory (or a model name in the local "
                "Hugging Face cache)."
            )
        self.model = model
        self.device = device or "cpu"
        self.batch_size = max(1, int(batch_size))
        self.allow_download = bool(allow_download)
        self.name = f"sentence-transformers:{model}"

    def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        """One unit-length vector per text, in order."""
        if not texts:
            return []
        return self._loaded().encode(list(texts), query=False, batch_size=self.batch_size)

    def embed_query(self, text: str) -> list[float]:
        return self._loaded().encode([text], query=True, batch_size=1)[0]

    def describe(self) -> dict[str, Any]:
        return {"backend": self.name, "model": self.model, "device": self.device}

    def _loaded(self) -> _LoadedModel:
        key = (self.model, self.device, self.allow_download)
        loaded = _models.get(key)
        if loaded is not None:
            return loaded
        with _models_lock:
            loaded = _models.get(key)
            if loaded is None:
                loaded = _models[key] = _LoadedModel(
                    _load(self.model, device=self.device, allow_download=self.allow_download)
                )
        return loaded


class _LoadedModel:
    """A loaded model and the lock its calls take: a fast tokenizer refuses to be used by two
    threads at once ("Already borrowed"), and torch already spreads one call over the cores."""

    def __init__(self, model: SentenceTransformer) -> None:
        self.model = model
        self.lock = threading.Lock()

    def encode(self, texts: list[str], *, query: bool, batch_size: int) -> list[list[float]]:
        # encode_query / encode_document (sentence-transformers 5+) apply the model's prompts.
        encode = getattr(self.model, "encode_query" if query else "encode_document", None)
        encode = encode or self.model.encode
        try:
            with self.lock:
                vectors = encode(
                    texts,
                    batch_size=batch_size,
                    normalize_embeddings=True,
                    convert_to_numpy=True,
                    show_progress_bar=False,
                )
        except (RuntimeError, ValueError) as exc:
            raise EmbeddingsUnavailable(
                f"The sentence-transformers model failed to embed {len(texts)} texts: {exc}"
            ) from exc
        result: list[list[float]] = vectors.tolist()
        return result


def _load(model: str, *, device: str, allow_download: bool) -> SentenceTransformer:
    """The model ``model`` names, on ``device``; raises ``EmbeddingsUnavailable`` saying what
    to set when it cannot be loaded."""
    if not allow_download:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
    try:
        from sentence_transformers import SentenceTransformer
    except ImportError as exc:
        raise EmbeddingsUnavailable(
            "EMBEDDINGS_BACKEND names the sentence-transformers backend, but the package is not "
            "installed: pip install torch==2.13.0 (the CPU build) and then "
            "pip install -e '.[local-embeddings]'."
        ) from exc
    path = Path(model).expanduser()
    if path.is_dir():
        source = str(path)
    elif path.is_absolute() or model.startswith((".", "~")) or path.exists():
        raise EmbeddingsUnavailable(
            f"EMBEDDINGS_MODEL={model!r}: no sentence-transformers model directory there.",
            details={"model": model},
        )
    else:
        source = model
    try:
        loaded = SentenceTransformer(
            source,
            device=device,
            local_files_only=not allow_download,
            trust_remote_code=False,
        )
    except (OSError, ValueError, RuntimeError) as exc:
        where = (
            "the directory holds no sentence-transformers or transformers model"
            if path.is_dir()
            else "it is not in the local Hugging Face cache, and nothing is downloaded unless "
            "EMBEDDINGS_ALLOW_DOWNLOAD=true"
        )
        raise EmbeddingsUnavailable(
            f"EMBEDDINGS_MODEL={model!r} could not be loaded: {where}. Set EMBEDDINGS_MODEL to "
            f"a local model directory. ({exc})",
            details={"model": model, "device": device},
        ) from exc
    logger.info(
        "embeddings_model_loaded",
        model=model,
        device=str(loaded.device),
        dimensions=_dimensions(loaded),
    )
    return loaded


def _dimensions(model: SentenceTransformer) -> int | None:
    get = getattr(model, "get_embedding_dimension", None) or getattr(
        model, "get_sentence_embedding_dimension", None
    )
    return get() if get is not None else None
