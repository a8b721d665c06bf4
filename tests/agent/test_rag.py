"""The RAG answer: offline extractive answers with sources, and a real provider (the OpenAI
client against the scripted OpenAI-compatible server) citing numbered passages."""

from __future__ import annotations

from typing import Any

import pytest

from agent.exceptions import CollectionNotFound
from agent.knowledge.answers import extractive_answer, source_label, strip_sources_block
from agent.knowledge.ingest import SourceFile, ingest_files
from agent.knowledge.rag import SYSTEM_PROMPT, rag_answer
from tests.agent.fake_openai import FakeOpenAI

pytestmark = pytest.mark.usefixtures("knowledge")


async def test_offline_answer_quotes_the_best_chunks_with_sources(guide: str) -> None:
    result = await rag_answer(question="How do I change the sandbox memory limit?")

    assert result.answer.startswith("Here is what the documentation says:\n\n> ")
    assert "Set SANDBOX_MEMORY_MB to change the memory limit. [1]" in result.answer
    assert result.answer.endswith("Sources:\n1. sandbox.md#1\n2. sandbox.md#0")
    assert [s.label for s in result.sources] == ["sandbox.md#1", "sandbox.md#0"]
    assert [s.number for s in result.sources] == [1, 2]
    assert [c.id for c in result.chunks] == ["sandbox.md#1", "sandbox.md#0"]


async def test_offline_answer_in_chinese_for_a_chinese_question(settings: Any) -> None:
    ingest_files(
        files=[SourceFile(source="说明.md", read="# 沙箱\n\n沙箱默认内存为 256 MB。".encode)],
        collection="zh_docs",
    )

    result = await rag_answer(question="沙箱默认内存是多少？", collection="zh_docs")

    assert result.answer == (
        "文档中的相关内容：\n\n> 沙箱默认内存为 256 MB。 [1]\n\nSources:\n1. 说明.md#0"
    )


async def test_nothing_found_is_said_plainly(guide: str) -> None:
    result = await rag_answer(question="kubernetes helm")

    assert result.answer == "The documentation has nothing that matches this question."
    assert result.sources == [] == result.chunks


async def test_an_unknown_collection_raises(guide: str) -> None:
    with pytest.raises(CollectionNotFound):
        await rag_answer(question="x y z", collection="missing_docs")


async def test_a_real_provider_answers_from_numbered_passages(
    guide: str, scripted: FakeOpenAI
) -> None:
    scripted.script(
        ["Set SANDBOX_MEMORY_MB; the default is 256 MB [1].\n\nSources:\n1. sandbox.md (chunk 1)\n"]
    )

    result = await rag_answer(question="How do I change the sandbox memory limit?")

    assert result.answer == (
        "Set SANDBOX_MEMORY_MB; the default is 256 MB [1].\n\nSources:\n1. sandbox.md#1"
    )
    assert [s.label for s in result.sources] == ["sandbox.md#1"]
    [request] = scripted.requests
    system, user = request["messages"]
    assert system == {"role": "system", "content": SYSTEM_PROMPT}
    assert user["content"].startswith("Passages:\n\n[1] (sandbox.md#1, Memory)\nMemory Each")
    assert "[2] (sandbox.md#0, Sandbox)" in user["content"]
    assert user["content"].endswith("Question: How do I change the sandbox memory limit?")


async def test_an_answer_without_citations_lists_every_passage(
    guide: str, scripted: FakeOpenAI
) -> None:
    scripted.script(["Use SANDBOX_MEMORY_MB."])

    result = await rag_answer(question="sandbox memory limit")

    assert result.answer == "Use SANDBOX_MEMORY_MB.\n\nSources:\n1. sandbox.md#1\n2. sandbox.md#0"


def test_source_labels_leave_out_an_unknown_chunk_index() -> None:
    assert source_label("guide.md", 3) == "guide.md#3"
    assert source_label("guide.md", None) == "guide.md"
    answer = extractive_answer(
        question="tea", results=[{"source": "notes", "chunk_index": None, "content": "Tea."}]
    )
    assert answer.endswith("Sources:\n1. notes")


def test_a_sources_list_written_by_the_model_is_replaced() -> None:
    assert strip_sources_block("Answer [1].\n\n**Sources:**\n1. a.md\n- b.md\n") == "Answer [1]."
    assert strip_sources_block("No list here.") == "No list here."


def test_extracts_keep_file_names_and_drop_the_opening_heading() -> None:
    answer = extractive_answer(
        question="where are the settings read?",
        results=[
            {
                "source": "docs/sandbox.md",
                "chunk_index": 0,
                "title": "Configuring the sandbox",
                "content": "Configuring the sandbox Settings are read by devassist/settings.py "
                "at start-up. Restart after a change. Unrelated trailing sentence.",
            }
        ],
    )

    assert answer == (
        "Here is what the documentation says:\n\n"
        "> Settings are read by devassist/settings.py at start-up. [1]\n\n"
        "Sources:\n1. docs/sandbox.md#0"
    )
