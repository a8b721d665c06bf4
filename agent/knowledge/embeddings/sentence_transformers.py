"""Dense embeddings from a local sentence-transformers model, on the CPU by default.

Needs the optional ``local-embeddings`` extra (``sentence-transformers``, which brings torch;
install the CPU build of torch first, see docs/knowledge.md). The model is loaded on first use,
once per process for each (model, device), and shared by every instance.

The model is first loaded from what is on disk: ``model`` is a directory (as written by
``SentenceTransformer.save()``, or a plain transformers model directory, which gets mean
pooling) or the name of a model in the local Hugging Face cache. That load runs with
``local_files_only`` and the hub's offline mode on, so no code path of the Hugging Face
libraries reaches the network; the offline mode is switched on for that load only, so a later
load that may download still can. Only a named model missing from the cache, with
``allow_download``, is fetched from the hub (``HF_ENDPOINT``), after a quick check that the
hub can be reached at all: without one, the error says so at once instead of after the
libraries' retries (about 70 s).
"""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import structlog

from agent.exceptions import EmbeddingsUnavailable

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

logger = structlog.get_logger(__name__)

_models: dict[tuple[str, str, bool], _LoadedModel] = {}
# Held while a model loads: loads take turns, so the offline mode one sets (process-wide, in
# huggingface_hub) is never in the way of another.
_models_lock = threading.Lock()
#: Seconds to wait for a connection to the hub before a download is given up as unreachable.
HUB_CONNECT_TIMEOUT_S = 5.0


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
    happened and what to set when it cannot be loaded (see the module docstring)."""
    os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
    try:
        from huggingface_hub import constants
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
    details = {"model": model, "device": device}
    try:
        with _hub_offline():
            loaded = SentenceTransformer(
                source, device=device, local_files_only=True, trust_remote_code=False
            )
    except (OSError, ValueError, RuntimeError) as exc:
        if path.is_dir():
            raise EmbeddingsUnavailable(
                f"EMBEDDINGS_MODEL={model!r} could not be loaded: the directory holds no "
                f"sentence-transformers or transformers model. ({exc})",
                details=details,
            ) from exc
        if not allow_download:
            raise EmbeddingsUnavailable(
                f"EMBEDDINGS_MODEL={model!r} could not be loaded: it is not a local directory "
                f"and not in the local Hugging Face cache ({constants.HF_HUB_CACHE}), and "
                "downloads are off. Set EMBEDDINGS_MODEL to a model directory (docs/knowledge.md "
                "says how to prepare one), or set EMBEDDINGS_ALLOW_DOWNLOAD=true to fetch it "
                "from the hub into the cache.",
                details=details,
            ) from exc
        loaded = _download(SentenceTransformer, model, device=device, endpoint=constants.ENDPOINT)
    logger.info(
        "embeddings_model_loaded",
        model=model,
        device=str(loaded.device),
        dimensions=_dimensions(loaded),
    )
    return loaded


def _download(
    build: type[SentenceTransformer], model: str, *, device: str, endpoint: str
) -> SentenceTransformer:
    """Model ``model`` fetched from the hub at ``endpoint`` into the cache, and loaded.
    Raises ``EmbeddingsUnavailable`` when the hub cannot be reached (at once) or the download
    fails."""
    details = {"model": model, "device": device, "endpoint": endpoint}
    unreachable = _unreachable(endpoint)
    if unreachable:
        raise EmbeddingsUnavailable(
            f"EMBEDDINGS_MODEL={model!r} is not in the local Hugging Face cache, and "
            f"EMBEDDINGS_ALLOW_DOWNLOAD=true, but the hub at {endpoint} cannot be reached "
            f"({unreachable}). Check the network (or HF_ENDPOINT), or copy the model to a local "
            "directory and set EMBEDDINGS_MODEL to it.",
            details=details,
        )
    logger.info("embeddings_model_downloading", model=model, endpoint=endpoint)
    try:
        return build(model, device=device, local_files_only=False, trust_remote_code=False)
    except (OSError, ValueError, RuntimeError) as exc:
        raise EmbeddingsUnavailable(
            f"EMBEDDINGS_MODEL={model!r} could not be downloaded from the hub at {endpoint}. "
            "Check the name (a sentence-transformers model on the hub, such as "
            f"sentence-transformers/all-MiniLM-L6-v2). ({exc})",
            details=details,
        ) from exc


def _unreachable(endpoint: str) -> str:
    """Why no connection to ``endpoint`` can be opened within ``HUB_CONNECT_TIMEOUT_S`` (its
    name does not resolve, nothing listens, no route...); empty when one can."""
    parts = urlsplit(endpoint)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        with socket.create_connection((parts.hostname or "", port), HUB_CONNECT_TIMEOUT_S):
            return ""
    except OSError as exc:
        return str(exc) or type(exc).__name__


@contextmanager
def _hub_offline() -> Iterator[None]:
    """The Hugging Face hub's offline mode, for the duration of the block only.

    ``huggingface_hub`` reads ``HF_HUB_OFFLINE`` once, at import, into
    ``constants.HF_HUB_OFFLINE``, which its ``is_offline_mode()`` (and transformers' checks
    through it) read on every request; setting the environment variable later changes nothing,
    and setting it before the import would keep every later load offline. The value the
    environment gave is put back afterwards."""
    from huggingface_hub import constants

    before = constants.HF_HUB_OFFLINE
    constants.HF_HUB_OFFLINE = True
    try:
        yield
    finally:
        constants.HF_HUB_OFFLINE = before


def _dimensions(model: SentenceTransformer) -> int | None:
    get = getattr(model, "get_embedding_dimension", None) or getattr(
        model, "get_sentence_embedding_dimension", None
    )
    return get() if get is not None else None
