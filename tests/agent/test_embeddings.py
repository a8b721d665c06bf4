"""Dense embeddings: the OpenAI-compatible client and backend against the scripted HTTP server,
and the sentence-transformers backend on a tiny BERT model built in the test (no download)."""

from __future__ import annotations

import base64
import http.server
import json
import math
import os
import re
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from http import HTTPStatus
from pathlib import Path
from typing import Any, ClassVar

import pytest
import torch
from django.test import override_settings
from huggingface_hub import constants as hub_constants
from sentence_transformers import SentenceTransformer
from sentence_transformers.sentence_transformer.modules import Pooling, Transformer
from transformers import BertConfig, BertModel, BertTokenizer

from agent.exceptions import EmbeddingsMismatch, EmbeddingsUnavailable, LLMTimeout, LLMUnavailable
from agent.knowledge import bm25
from agent.knowledge.embeddings import Embeddings, get_embeddings
from agent.knowledge.embeddings import sentence_transformers as st_backend
from agent.knowledge.embeddings.openai import OpenAIEmbeddings
from agent.knowledge.embeddings.sentence_transformers import SentenceTransformerEmbeddings
from agent.knowledge.ingest import ingest_paths
from agent.knowledge.search import RRF_K, search
from agent.knowledge.store import get_records, open_collection
from agent.llm.embeddings import OpenAIEmbeddingsClient
from devassist.api import http_status
from tests.agent.conftest import TEST_API_KEY
from tests.agent.fake_openai import EMBEDDING_DIMENSIONS, FakeOpenAI, embedding_vector
from tests.servers import REPO, free_port

DOCS = [
    "Configure the sandbox memory limit with SANDBOX_MEMORY_MB.",
    "The sandbox runs Python code in a Docker container.",
    "Chroma stores the document chunks and their vectors.",
    "Ingest documentation with manage.py ingest_docs.",
    "Traces record every agent step as a tree.",
]


def client_on(fake: FakeOpenAI, **options: Any) -> OpenAIEmbeddingsClient:
    settings: dict[str, Any] = {
        "base_url": fake.base_url,
        "api_key": TEST_API_KEY,
        "model": "fake-embedding",
        "timeout_s": 5,
        "max_retries": 2,
        **options,
    }
    return OpenAIEmbeddingsClient(**settings)


def backend_on(fake: FakeOpenAI, **options: Any) -> OpenAIEmbeddings:
    settings: dict[str, Any] = {
        "base_url": fake.base_url,
        "api_key": TEST_API_KEY,
        "model": "fake-embedding",
        "timeout_s": 5,
        "max_retries": 1,
        **options,
    }
    return OpenAIEmbeddings(**settings)


def cosine(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True)) / (
        math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b))
    )


# -- the OpenAI-compatible client --------------------------------------------------------------


def test_client_batches_in_order_and_sums_usage(fake_openai: FakeOpenAI) -> None:
    response = client_on(fake_openai, batch_size=2).embed(DOCS)

    assert [r["input"] for r in fake_openai.embedding_requests] == [DOCS[0:2], DOCS[2:4], DOCS[4:]]
    assert all(r["model"] == "fake-embedding" for r in fake_openai.embedding_requests)
    assert all(r["encoding_format"] == "float" for r in fake_openai.embedding_requests)
    # Floats survive JSON exactly, so the vectors are the server's own.
    assert response.vectors == [embedding_vector(text) for text in DOCS]
    assert response.requests == 3
    assert response.usage.prompt_tokens == sum(len(re.findall(r"\w+", text)) for text in DOCS)
    assert response.model == "fake-embedding"
    assert fake_openai.requests == []  # chat completions untouched


def test_client_sends_dimensions_only_when_asked(fake_openai: FakeOpenAI) -> None:
    short = client_on(fake_openai, dimensions=16).embed(["one text"])
    default = client_on(fake_openai).embed(["one text"])

    assert fake_openai.embedding_requests[0]["dimensions"] == 16
    assert "dimensions" not in fake_openai.embedding_requests[1]
    assert len(short.vectors[0]) == 16
    assert len(default.vectors[0]) == EMBEDDING_DIMENSIONS


def test_client_sends_blank_texts_as_a_space(fake_openai: FakeOpenAI) -> None:
    response = client_on(fake_openai).embed(["", "  ", "text"])

    assert fake_openai.embedding_requests[0]["input"] == [" ", " ", "text"]
    assert len(response.vectors) == 3


def test_client_of_no_texts_sends_nothing(fake_openai: FakeOpenAI) -> None:
    response = client_on(fake_openai).embed([])

    assert response.vectors == []
    assert response.requests == 0
    assert fake_openai.embedding_requests == []


def test_client_retries_a_5xx_and_429_then_succeeds(fake_openai: FakeOpenAI) -> None:
    fake_openai.script_embeddings(
        [{"status": 503}, {"status": 429, "headers": {"Retry-After": "0"}}]
    )

    response = client_on(fake_openai).embed(DOCS[:2])

    assert len(fake_openai.embedding_requests) == 3
    assert response.vectors == [embedding_vector(text) for text in DOCS[:2]]


def test_client_retries_each_batch_on_its_own(fake_openai: FakeOpenAI) -> None:
    # The first batch succeeds; the second fails once and is retried alone.
    fake_openai.script_embeddings([{}, {"status": 502}])

    response = client_on(fake_openai, batch_size=3, max_retries=1).embed(DOCS)

    inputs = [r["input"] for r in fake_openai.embedding_requests]
    assert inputs == [DOCS[:3], DOCS[3:], DOCS[3:]]
    assert len(response.vectors) == len(DOCS)


def test_client_5xx_after_the_retries_is_unavailable(fake_openai: FakeOpenAI) -> None:
    fake_openai.script_embeddings([{"status": 500, "message": "model overloaded"}] * 3)

    with pytest.raises(LLMUnavailable) as caught:
        client_on(fake_openai, max_retries=2).embed(DOCS)

    assert len(fake_openai.embedding_requests) == 3
    assert caught.value.details == {
        "status": HTTPStatus.INTERNAL_SERVER_ERROR,
        "base_url": fake_openai.base_url,
        "attempts": 3,
    }
    assert "500 Internal Server Error (after 3 attempts): model overloaded" in str(caught.value)


def test_client_4xx_is_final_with_a_hint_and_no_key(fake_openai: FakeOpenAI) -> None:
    fake_openai.script_embeddings(
        [{"status": 401, "message": f"Incorrect API key provided: {TEST_API_KEY}"}]
    )

    with pytest.raises(LLMUnavailable) as caught:
        client_on(fake_openai).embed(DOCS)

    assert len(fake_openai.embedding_requests) == 1
    message = str(caught.value)
    assert "check EMBEDDINGS_API_KEY" in message
    assert TEST_API_KEY not in message
    assert "[redacted]" in message


def test_client_timeout_is_llm_timeout(fake_openai: FakeOpenAI) -> None:
    fake_openai.script_embeddings([{"delay_s": 3}, {"delay_s": 3}])

    with pytest.raises(LLMTimeout) as caught:
        client_on(fake_openai, timeout_s=0.3, max_retries=1).embed(DOCS[:1])

    assert caught.value.code == "llm_timeout"
    assert caught.value.details["attempts"] == 2
    assert "did not answer within 0.3 s (after 2 attempts)" in str(caught.value)


def test_client_refused_connection_is_unavailable() -> None:
    client = OpenAIEmbeddingsClient(
        base_url=f"http://127.0.0.1:{free_port()}/v1",
        api_key=None,
        model="m",
        max_retries=1,
    )

    with pytest.raises(LLMUnavailable) as caught:
        client.embed(["text"])

    assert "Could not reach the embeddings endpoint" in str(caught.value)
    assert caught.value.details["attempts"] == 2


@pytest.mark.parametrize(
    "body",
    [
        '{"object": "list", "data": [], "model": "m"}',
        '{"object": "list", "data": [{"index": 0, "embedding": []}], "model": "m"}',
        "not json at all",
    ],
)
def test_client_malformed_answer_is_unavailable(fake_openai: FakeOpenAI, body: str) -> None:
    fake_openai.script_embeddings([{"body": body}])

    with pytest.raises(LLMUnavailable, match="malformed answer"):
        client_on(fake_openai, max_retries=0).embed(["text"])


def test_client_reads_base64_vectors_and_restores_input_order(fake_openai: FakeOpenAI) -> None:
    # Some servers answer base64 whatever encoding_format says, and the order is by "index".
    vectors = [[0.5, -0.25, 1.0], [0.125, 0.0, -2.0]]
    data = [
        {"index": i, "embedding": base64.b64encode(struct.pack("<3f", *v)).decode()}
        for i, v in enumerate(vectors)
    ]
    body = {"object": "list", "data": data[::-1], "model": "m", "usage": None}
    fake_openai.script_embeddings([{"body": json.dumps(body)}])

    response = client_on(fake_openai).embed(["first", "second"])

    assert response.vectors == vectors
    assert response.usage.prompt_tokens == 0


def test_fake_server_honours_base64_and_the_bare_path(fake_openai: FakeOpenAI) -> None:
    # The SDK's own default is base64; /embeddings without /v1 is what some servers expose.
    client = OpenAIEmbeddingsClient(
        base_url=fake_openai.base_url.removesuffix("/v1"), api_key=None, model="m"
    )
    response = client._client.embeddings.create(model="m", input=["a text"])

    assert fake_openai.embedding_requests[0]["encoding_format"] == "base64"
    assert response.data[0].embedding == pytest.approx(embedding_vector("a text"), abs=1e-6)


# -- the openai backend ------------------------------------------------------------------------


def test_openai_backend_follows_the_protocol(fake_openai: FakeOpenAI) -> None:
    backend = backend_on(fake_openai, batch_size=2, unknown_option="ignored")

    documents = backend.embed_documents(DOCS)
    query = backend.embed_query("sandbox memory limit")

    assert isinstance(backend, Embeddings)
    assert backend.name == "openai:fake-embedding"
    assert backend.dense is True
    assert len(documents) == len(DOCS)
    assert len(fake_openai.embedding_requests) == 4  # 3 batches, then the query
    ranked = sorted(range(len(DOCS)), key=lambda i: -cosine(query, documents[i]))
    assert ranked[0] == 0
    assert backend.embed_documents([]) == []
    assert len(fake_openai.embedding_requests) == 4


def test_openai_backend_name_carries_shortened_dimensions(fake_openai: FakeOpenAI) -> None:
    assert backend_on(fake_openai, dimensions=256).name == "openai:fake-embedding@256"
    assert OpenAIEmbeddings(model=None).name == "openai:text-embedding-3-small"


def test_openai_backend_failures_are_embeddings_unavailable(fake_openai: FakeOpenAI) -> None:
    fake_openai.script_embeddings([{"status": 503}, {"status": 503}])

    with pytest.raises(EmbeddingsUnavailable) as caught:
        backend_on(fake_openai, max_retries=1).embed_documents(DOCS)

    assert caught.value.code == "embeddings_unavailable"
    assert http_status(caught.value) == HTTPStatus.SERVICE_UNAVAILABLE
    assert isinstance(caught.value.__cause__, LLMUnavailable)
    assert caught.value.details["attempts"] == 2


def test_openai_backend_timeout_keeps_its_code(fake_openai: FakeOpenAI) -> None:
    fake_openai.script_embeddings([{"delay_s": 3}])

    with pytest.raises(EmbeddingsUnavailable) as caught:
        backend_on(fake_openai, timeout_s=0.3, max_retries=0).embed_query("q")

    assert caught.value.code == "embeddings_timeout"
    assert http_status(caught.value) == HTTPStatus.GATEWAY_TIMEOUT
    assert isinstance(caught.value.__cause__, LLMTimeout)


def test_get_embeddings_builds_the_openai_backend_from_settings(fake_openai: FakeOpenAI) -> None:
    config = {
        "BACKEND": "agent.knowledge.embeddings.openai.OpenAIEmbeddings",
        "OPTIONS": {
            "model": "fake-embedding",
            "base_url": fake_openai.base_url,
            "api_key": TEST_API_KEY,
            "device": "cpu",
        },
    }
    get_embeddings.cache_clear()
    try:
        with override_settings(EMBEDDINGS=config):
            backend = get_embeddings()
            vector = backend.embed_query("hello")
    finally:
        get_embeddings.cache_clear()

    assert isinstance(backend, OpenAIEmbeddings)
    assert vector == pytest.approx(embedding_vector("hello"))


# -- hybrid retrieval end to end -------------------------------------------------------------


def openai_embeddings_config(fake: FakeOpenAI) -> dict[str, Any]:
    return {
        "BACKEND": "agent.knowledge.embeddings.openai.OpenAIEmbeddings",
        "OPTIONS": {"model": "fake-embedding", "base_url": fake.base_url, "api_key": None},
    }


@pytest.fixture
def knowledge_on(knowledge: Path, settings: Any, fake_openai: FakeOpenAI, tmp_path: Path) -> Path:
    """The ``knowledge`` fixture's fresh Chroma directory with embeddings from ``fake_openai``;
    returns a directory of documents to ingest."""
    settings.EMBEDDINGS = openai_embeddings_config(fake_openai)
    get_embeddings.cache_clear()  # the knowledge fixture clears it again afterwards
    docs = tmp_path / "docs"
    docs.mkdir()
    for number, text in enumerate(DOCS):
        (docs / f"doc{number}.md").write_text(f"# Note {number}\n\n{text}\n")
    return docs


def test_hybrid_search_fuses_dense_and_bm25_rankings(
    fake_openai: FakeOpenAI, knowledge_on: Path
) -> None:
    query = "How do I configure the sandbox memory?"
    summary = ingest_paths(paths=[knowledge_on], collection="hybrid_docs")
    records = get_records(open_collection("hybrid_docs"))

    results = search(query=query, top_k=len(records), collection="hybrid_docs")

    assert summary.chunks_written == len(records) == len(DOCS)
    embedded = [text for r in fake_openai.embedding_requests for text in r["input"]]
    assert sorted(embedded[:-1]) == sorted(record.text for record in records)
    assert embedded[-1] == query
    # The dense ranking, computed here from the fake server's vectors: all records (the search
    # goes max(4 * top_k, 20) deep), nearest first.
    query_vector = embedding_vector(query)
    distances = {r.id: 1 - cosine(query_vector, embedding_vector(r.text)) for r in records}
    dense_ranks = {
        record_id: rank
        for rank, record_id in enumerate(sorted(distances, key=distances.__getitem__), start=1)
    }
    lexical = bm25.index_for(open_collection("hybrid_docs")).top(query, k=len(records))
    bm25_ranks = {record_id: rank for rank, (record_id, _) in enumerate(lexical, start=1)}
    expected = {
        record_id: 1 / (RRF_K + dense_ranks[record_id])
        + (1 / (RRF_K + bm25_ranks[record_id]) if record_id in bm25_ranks else 0.0)
        for record_id in distances
    }
    assert {r.id: r.score for r in results} == pytest.approx(expected)
    assert [r.score for r in results] == sorted((r.score for r in results), reverse=True)
    for result in results:
        assert result.vector_distance == pytest.approx(distances[result.id], abs=1e-5)
        assert result.bm25_score == pytest.approx(dict(lexical).get(result.id, 0.0))
    best = results[0]
    assert best.source == "doc0.md"
    assert best.bm25_score > 0
    assert best.vector_distance < min(r.vector_distance for r in results[1:])
    # Documents that share no term with the query still come back, ranked by the vectors alone.
    assert any(r.bm25_score == 0.0 and r.score > 0 for r in results)
    # And BM25 moves documents it ranks well above nearer vectors.
    assert [r.id for r in results] != sorted(dense_ranks, key=dense_ranks.__getitem__)


def test_switching_embeddings_backend_requires_a_re_ingest(
    fake_openai: FakeOpenAI, knowledge_on: Path
) -> None:
    ingest_paths(paths=[knowledge_on], collection="switched_docs")
    get_embeddings.cache_clear()
    lexical = {"BACKEND": "agent.knowledge.embeddings.lexical.LexicalEmbeddings", "OPTIONS": {}}

    with override_settings(EMBEDDINGS=lexical), pytest.raises(EmbeddingsMismatch) as caught:
        search(query="sandbox", top_k=3, collection="switched_docs")

    assert caught.value.details["stored"] == "openai:fake-embedding"
    assert caught.value.details["configured"] == "lexical-hash-v1"


# -- the sentence-transformers backend ---------------------------------------------------------

# A WordPiece vocabulary of the special tokens and the words of the test texts.
TINY_VOCAB = [
    "[PAD]",
    "[UNK]",
    "[CLS]",
    "[SEP]",
    "[MASK]",
    *sorted({word for text in DOCS for word in re.findall(r"\w+", text.lower())}),
]


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A sentence-transformers model directory: a randomly initialised one-layer BERT with a
    32-dimensional hidden state and a WordPiece vocabulary of a few words, plus mean pooling."""
    root = tmp_path_factory.mktemp("tiny-model")
    vocab = root / "vocab.txt"
    vocab.write_text("\n".join(TINY_VOCAB) + "\n")
    torch.manual_seed(0)
    bert = root / "bert"
    BertModel(
        BertConfig(
            vocab_size=len(TINY_VOCAB),
            hidden_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
            intermediate_size=37,
            max_position_embeddings=128,
        )
    ).save_pretrained(bert)
    BertTokenizer(vocab_file=str(vocab), do_lower_case=True).save_pretrained(bert)
    transformer = Transformer(str(bert), max_seq_length=64)
    model = SentenceTransformer(modules=[transformer, Pooling(32)], device="cpu")
    model.save(str(root / "st"))
    return root / "st"


@pytest.fixture
def fresh_model_cache(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """An empty per-process model cache, and the Hugging Face variables the backend sets put
    back afterwards."""
    monkeypatch.setattr(st_backend, "_models", {})
    saved = {name: os.environ.get(name) for name in ("HF_HUB_OFFLINE", "HF_HUB_DISABLE_TELEMETRY")}
    yield
    for name, value in saved.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


@pytest.fixture
def no_network(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """Every outgoing connection attempt is recorded, and refused."""
    attempts: list[object] = []

    def refuse(sock: socket.socket, address: object) -> None:
        attempts.append(address)
        raise OSError("the test forbids network access")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    return attempts


@pytest.mark.usefixtures("fresh_model_cache")
def test_sentence_transformers_backend_loads_a_local_model_without_network(
    tiny_model_dir: Path, no_network: list[object]
) -> None:
    backend = SentenceTransformerEmbeddings(model=str(tiny_model_dir), device="cpu", api_key="x")

    documents = backend.embed_documents(DOCS)
    query = backend.embed_query(DOCS[0])

    assert no_network == []
    assert isinstance(backend, Embeddings)
    assert backend.name == f"sentence-transformers:{tiny_model_dir}"
    assert backend.dense is True
    assert len(documents) == len(DOCS)
    assert {len(vector) for vector in documents} == {32}
    assert all(math.isclose(math.hypot(*vector), 1.0, rel_tol=1e-5) for vector in documents)
    assert all(isinstance(value, float) for value in query)
    # The model defines no query prompt: a query embeds like the same text as a document.
    assert query == pytest.approx(documents[0], abs=1e-5)
    assert backend.embed_documents(DOCS[:1])[0] == pytest.approx(documents[0], abs=1e-5)
    assert backend.embed_documents([]) == []
    # The hub's offline mode was on for the load only.
    assert hub_constants.HF_HUB_OFFLINE is False
    assert "HF_HUB_OFFLINE" not in os.environ


@pytest.mark.usefixtures("fresh_model_cache")
def test_sentence_transformers_model_is_loaded_once_per_process(tiny_model_dir: Path) -> None:
    first = SentenceTransformerEmbeddings(model=str(tiny_model_dir))
    second = SentenceTransformerEmbeddings(model=str(tiny_model_dir), batch_size=2)

    first.embed_query("sandbox")
    second.embed_documents(DOCS)

    assert len(st_backend._models) == 1
    assert first._loaded() is second._loaded()


@pytest.mark.usefixtures("fresh_model_cache")
def test_get_embeddings_builds_the_sentence_transformers_backend(tiny_model_dir: Path) -> None:
    config = {
        "BACKEND": (
            "agent.knowledge.embeddings.sentence_transformers.SentenceTransformerEmbeddings"
        ),
        "OPTIONS": {"model": str(tiny_model_dir), "base_url": None, "api_key": None},
    }
    get_embeddings.cache_clear()
    try:
        with override_settings(EMBEDDINGS=config):
            backend = get_embeddings()
            vector = backend.embed_query("configure the sandbox")
    finally:
        get_embeddings.cache_clear()

    assert isinstance(backend, SentenceTransformerEmbeddings)
    assert len(vector) == 32


@pytest.mark.usefixtures("fresh_model_cache")
def test_sentence_transformers_missing_directory_names_the_setting(
    tmp_path: Path, no_network: list[object]
) -> None:
    backend = SentenceTransformerEmbeddings(model=str(tmp_path / "no-such-model"))

    with pytest.raises(EmbeddingsUnavailable, match="EMBEDDINGS_MODEL=") as caught:
        backend.embed_query("text")

    assert "no sentence-transformers model directory" in str(caught.value)
    assert http_status(caught.value) == HTTPStatus.SERVICE_UNAVAILABLE
    assert no_network == []


@pytest.mark.usefixtures("fresh_model_cache")
def test_sentence_transformers_directory_without_a_model_names_the_setting(
    tmp_path: Path,
) -> None:
    (tmp_path / "notes.txt").write_text("not a model")
    backend = SentenceTransformerEmbeddings(model=str(tmp_path))

    with pytest.raises(EmbeddingsUnavailable, match="EMBEDDINGS_MODEL=") as caught:
        backend.embed_documents(["text"])

    assert "holds no sentence-transformers or transformers model" in str(caught.value)


@pytest.mark.usefixtures("fresh_model_cache")
def test_sentence_transformers_uncached_model_name_is_not_downloaded(
    no_network: list[object],
) -> None:
    backend = SentenceTransformerEmbeddings(model="devassist-tests/no-such-model")

    with pytest.raises(EmbeddingsUnavailable, match="EMBEDDINGS_MODEL=") as caught:
        backend.embed_query("text")

    message = str(caught.value)
    assert "not a local directory and not in the local Hugging Face cache" in message
    assert "downloads are off" in message
    assert "set EMBEDDINGS_ALLOW_DOWNLOAD=true" in message
    assert "Set EMBEDDINGS_MODEL to a model directory" in message
    assert no_network == []


@pytest.fixture
def hub(monkeypatch: pytest.MonkeyPatch) -> Callable[[str], None]:
    """Points the Hugging Face hub at the address given to the function it returns, as
    ``HF_ENDPOINT`` would have before huggingface_hub was imported (which reads it then)."""

    def point(endpoint: str) -> None:
        template = hub_constants.HUGGINGFACE_CO_URL_TEMPLATE.replace(
            hub_constants.ENDPOINT, endpoint, 1
        )
        monkeypatch.setattr(hub_constants, "ENDPOINT", endpoint)
        monkeypatch.setattr(hub_constants, "HUGGINGFACE_CO_URL_TEMPLATE", template)

    return point


@pytest.mark.usefixtures("fresh_model_cache")
def test_downloads_allowed_but_no_hub_reachable_says_so_at_once(
    hub: Callable[[str], None],
) -> None:
    closed = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    hub(closed)
    backend = SentenceTransformerEmbeddings(
        model="devassist-tests/no-such-model", allow_download=True
    )

    started = time.monotonic()
    with pytest.raises(EmbeddingsUnavailable) as caught:
        backend.embed_query("text")

    assert time.monotonic() - started < 10  # not the libraries' 70 s of retries
    message = str(caught.value)
    assert f"EMBEDDINGS_ALLOW_DOWNLOAD=true, but the hub at {closed} cannot be reached" in message
    assert "nothing is downloaded unless" not in message
    assert caught.value.details["endpoint"] == closed


class _NoModelsHere(http.server.BaseHTTPRequestHandler):
    """A hub that knows no model: 404 to everything, each request counted."""

    requests: ClassVar[list[str]] = []

    def do_HEAD(self) -> None:
        self.requests.append(self.path)
        self.send_response(404)
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_GET = do_HEAD

    def log_message(self, *args: Any) -> None:
        pass


# A fresh process, so that huggingface_hub is first imported by the backend's first load, as
# in a server: that load must not leave the hub's offline mode on for the next one.
LOAD_THEN_DOWNLOAD = """
from agent.exceptions import EmbeddingsUnavailable
from agent.knowledge.embeddings.sentence_transformers import SentenceTransformerEmbeddings

SentenceTransformerEmbeddings(model={local!r}).embed_query("sandbox")
name = "devassist-tests/no-such-model"
try:
    SentenceTransformerEmbeddings(model=name, allow_download=True).embed_query("x")
except EmbeddingsUnavailable as exc:
    print(exc.message)
"""


def test_an_offline_load_leaves_later_loads_free_to_download(tiny_model_dir: Path) -> None:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _NoModelsHere)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    endpoint = f"http://127.0.0.1:{server.server_address[1]}"
    _NoModelsHere.requests.clear()
    environment = {
        k: v for k, v in os.environ.items() if not k.startswith(("HF_", "TRANSFORMERS_"))
    }
    try:
        done = subprocess.run(
            [sys.executable, "-c", LOAD_THEN_DOWNLOAD.format(local=str(tiny_model_dir))],
            env={
                **environment,
                "HF_ENDPOINT": endpoint,
                "HF_HOME": str(tiny_model_dir.parent / "hf"),
            },
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        server.shutdown()
        server.server_close()

    assert done.returncode == 0, done.stderr
    # The hub was asked (offline mode refuses before any request is sent).
    assert _NoModelsHere.requests
    assert all("devassist-tests/no-such-model" in path for path in _NoModelsHere.requests)
    assert f"could not be downloaded from the hub at {endpoint}" in done.stdout


def test_sentence_transformers_backend_needs_a_model() -> None:
    with pytest.raises(EmbeddingsUnavailable, match="set EMBEDDINGS_MODEL"):
        SentenceTransformerEmbeddings(model=None)
