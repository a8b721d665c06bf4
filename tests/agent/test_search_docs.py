"""The search_docs tool: its contract, bad input, unknown collections, hybrid mode."""

from __future__ import annotations

from collections.abc import Sequence
from http import HTTPStatus
from pathlib import Path
from typing import Any

import pytest

from agent.exceptions import ToolInputInvalid
from agent.knowledge.embeddings import get_embeddings
from agent.knowledge.ingest import SourceFile, ingest_files, ingest_paths
from agent.knowledge.search import search
from agent.knowledge.store import upsert_texts
from agent.tools import ToolContext, default_registry
from agent.tools.search_docs import TOOL
from devassist.api import http_status

pytestmark = pytest.mark.usefixtures("knowledge")

RESULT_FIELDS = {
    "id",
    "source",
    "chunk_index",
    "title",
    "content",
    "vector_distance",
    "bm25_score",
    "score",
}


async def call(args: dict[str, Any]) -> Any:
    return await default_registry().call("search_docs", args, ToolContext(user=None))


@pytest.fixture
def docs(tmp_path: Path, settings: Any) -> str:
    root = tmp_path / "docs"
    root.mkdir()
    (root / "sandbox.md").write_text(
        "# Sandbox\n\nThe sandbox runs code in Docker.\n\n## Limits\n\n"
        "Set SANDBOX_MEMORY_MB to change the memory limit of each container.\n"
    )
    (root / "llm.md").write_text("# Models\n\nSet LLM_BASE_URL to use a real model.\n")
    (root / "long.txt").write_text("Lorem ipsum   dolor\n\n" + "filler words here " * 200)
    (root / "zh.md").write_text("# 沙箱\n\n沙箱的内存上限由 SANDBOX_MEMORY_MB 配置。\n")
    ingest_paths(paths=[root], collection="team_docs")
    settings.KNOWLEDGE_DEFAULT_COLLECTION = "team_docs"
    return "team_docs"


def test_the_tool_is_builtin_with_its_schema() -> None:
    assert default_registry().get("search_docs") is TOOL
    properties = TOOL.parameters["properties"]
    assert properties["top_k"] == {
        "type": "integer",
        "minimum": 1,
        "maximum": 20,
        "default": 5,
        "description": "How many passages to return.",
    }
    assert TOOL.parameters["required"] == ["query"]


async def test_results_follow_the_contract(docs: str) -> None:
    observation = await call({"query": "how do I change the memory limit of the sandbox?"})

    assert observation["collection"] == "team_docs"
    results = observation["results"]
    assert 1 <= len(results) <= 5
    assert all(set(result) == RESULT_FIELDS for result in results)
    best = results[0]
    assert best["id"] == "sandbox.md#1"
    assert best["source"] == "sandbox.md"
    assert best["chunk_index"] == 1
    assert best["title"] == "Limits"
    assert best["content"].startswith("Limits\n\nSet SANDBOX_MEMORY_MB")
    assert best["bm25_score"] > 0
    assert best["score"] == best["bm25_score"]
    assert 0 < best["vector_distance"] < 1
    assert [r["score"] for r in results] == sorted((r["score"] for r in results), reverse=True)


async def test_top_k_limits_the_results(docs: str) -> None:
    observation = await call({"query": "sandbox memory", "top_k": 1})

    assert len(observation["results"]) == 1


async def test_content_is_cut_to_800_chars_at_a_block_boundary(docs: str) -> None:
    observation = await call({"query": "filler words", "top_k": 1})

    (result,) = observation["results"]
    assert result["source"] == "long.txt"
    assert len(result["content"]) <= 800
    assert result["content"].startswith("long.txt\n\n")
    # Cut after a whole word.
    assert result["content"].endswith("…")
    assert result["content"][:-1].split()[-1] in {"filler", "words", "here"}


async def test_content_keeps_code_blocks_and_tables(docs: str) -> None:
    filler = "\n\n".join(f"Paragraph {i} about the weather and nothing else." for i in range(3))
    code = "\n".join(f"limits_{i} = {i}" for i in range(45))
    text = (
        f"# Limits\n\nThe quota table:\n\n| name | value |\n|---|---|\n| quota | 5 |\n\n"
        f"{filler}\n\n```python\n{code}\n```\n"
    )
    ingest_files(files=[SourceFile(source="quota.md", read=text.encode)], collection="team_docs")

    observation = await call({"query": "quota limits_1", "top_k": 1})

    content = observation["results"][0]["content"]
    assert "| name | value |\n|---|---|\n| quota | 5 |" in content
    assert len(content) <= 800
    # The code block is cut at a line and closed again.
    fence = content.index("```python\n")
    assert content[fence:].count("```") == 2
    assert "\nlimits_0 = 0\n" in content
    assert content.endswith("```\n\n…")


async def test_chinese_questions_find_chinese_text(docs: str) -> None:
    observation = await call({"query": "沙箱的内存上限怎么配置？", "top_k": 1})

    assert observation["results"][0]["source"] == "zh.md"


async def test_another_collection_by_name(docs: str) -> None:
    ingest_files(
        files=[SourceFile(source="faq.md", read=lambda: b"# FAQ\n\nThe office cat is Tom.\n")],
        collection="faq_docs",
    )

    observation = await call({"query": "office cat", "collection_name": "faq_docs"})

    assert [r["source"] for r in observation["results"]] == ["faq.md"]


@pytest.mark.parametrize("query", ["", "   ", "\n\t"])
async def test_an_empty_query_is_an_observation(docs: str, query: str) -> None:
    observation = await call({"query": query})

    assert observation["results"] == []
    assert "query is empty" in observation["message"]


async def test_a_query_without_matches_says_so(docs: str) -> None:
    observation = await call({"query": "kubernetes helm chart"})

    assert observation["results"] == []
    assert observation["collection"] == "team_docs"
    assert "Nothing in 'team_docs' matches" in observation["message"]


async def test_an_unknown_collection_names_the_existing_ones(docs: str) -> None:
    observation = await call({"query": "sandbox", "collection_name": "nope_docs"})

    assert observation["results"] == []
    assert observation["collections"] == ["team_docs"]
    assert observation["message"] == (
        "Unknown collection 'nope_docs'. Existing collections: team_docs."
    )


async def test_an_invalid_collection_name_is_an_observation_too(docs: str) -> None:
    observation = await call({"query": "sandbox", "collection_name": "x"})

    assert "Invalid collection name 'x'" in observation["message"]
    assert "Existing collections: team_docs." in observation["message"]


async def test_nothing_ingested_yet_is_explained() -> None:
    observation = await call({"query": "sandbox"})

    assert observation["message"] == (
        "Unknown collection 'devassist_docs'. Existing collections: none (nothing has been "
        "ingested yet)."
    )


@pytest.mark.parametrize(
    ("args", "path"),
    [
        ({"query": "x", "top_k": 0}, "$.top_k"),
        ({"query": "x", "top_k": 21}, "$.top_k"),
        ({"query": "x", "top_k": 2.5}, "$.top_k"),
        ({"query": "x", "top_k": "5"}, "$.top_k"),
        ({}, "$"),
        ({"query": 3}, "$.query"),
        ({"query": "x", "collection": "y"}, "$"),
    ],
)
async def test_bad_arguments_are_tool_input_invalid(args: dict[str, Any], path: str) -> None:
    with pytest.raises(ToolInputInvalid) as raised:
        await call(args)

    assert http_status(raised.value) == HTTPStatus.BAD_REQUEST
    assert raised.value.code == "tool_input_invalid"
    assert raised.value.details["path"] == path


class KeywordDense:
    """A dense backend stand-in with a fixed two-word vocabulary: enough to check that dense
    rankings are fused with BM25's."""

    name = "keyword-dense-v1"
    dense = True

    def __init__(self, **options: Any) -> None:
        del options

    def _vector(self, text: str) -> list[float]:
        lowered = text.lower()
        if "cat" in lowered:
            vector = [1.0, 0.1]
        elif "feline" in lowered:
            vector = [1.0, 0.3]
        else:
            vector = [0.0, 1.0]
        norm = sum(v * v for v in vector) ** 0.5
        return [v / norm for v in vector]

    def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        return [self._vector(text) for text in texts]

    def embed_query(self, text: str) -> list[float]:
        return self._vector(text)


def test_hybrid_mode_fuses_dense_and_bm25_rankings(settings: Any) -> None:
    settings.EMBEDDINGS = {"BACKEND": f"{__name__}.KeywordDense", "OPTIONS": {}}
    get_embeddings.cache_clear()
    upsert_texts(
        "hybrid_docs",
        ids=["a", "b", "c"],
        texts=["The feline sleeps all day.", "Dogs bark at the mailman.", "A cat and a dog."],
        metadatas=[{"source": "a.md", "chunk_index": 0}, {"source": "b.md"}, {"source": "c.md"}],
    )

    results = search(query="cat", top_k=3, collection="hybrid_docs")

    by_id = {r.id: r for r in results}
    # "c" is first in both rankings; "a" only matches densely (BM25 knows no "feline").
    assert [r.id for r in results] == ["c", "a", "b"]
    assert by_id["a"].bm25_score == 0.0
    assert by_id["a"].vector_distance < by_id["b"].vector_distance
    assert by_id["c"].score == pytest.approx(2 / 61)
    assert by_id["a"].score == pytest.approx(1 / 62)
    assert by_id["b"].score == pytest.approx(1 / 63)
    assert by_id["c"].bm25_score > 0
    assert by_id["b"].chunk_index is None
