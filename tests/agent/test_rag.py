"""The RAG answer: offline extractive answers with sources, and a real provider (the OpenAI
client against the scripted OpenAI-compatible server) citing numbered passages."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from agent.exceptions import CollectionNotFound
from agent.knowledge.answers import (
    extractive_answer,
    listed_sources,
    source_label,
    strip_sources_block,
)
from agent.knowledge.ingest import SourceFile, ingest_files, ingest_paths
from agent.knowledge.rag import SYSTEM_PROMPT, rag_answer
from agent.llm import ChatMessage
from devassist.markdown import render_markdown
from tests.agent.fake_openai import FakeOpenAI

pytestmark = pytest.mark.usefixtures("knowledge")


async def test_offline_answer_quotes_the_best_chunks_with_linked_sources(guide: str) -> None:
    result = await rag_answer(question="How do I change the sandbox memory limit?")

    assert result.answer == (
        "No language model is configured, so here is what the documentation says:\n\n"
        "> Each container gets 256 MB by default. Set SANDBOX_MEMORY_MB to change the memory "
        "limit. Swap is disabled. [1]\n\n"
        "Sources:\n"
        "1. [sandbox.md#1](/docs/guide_docs/sandbox.md#chunk-1)"
    )
    # Only the chunks the answer quotes are its sources.
    assert [s.label for s in result.sources] == ["sandbox.md#1"]
    assert [s.number for s in result.sources] == [1]
    assert [c.id for c in result.chunks] == ["sandbox.md#1", "sandbox.md#0"]
    # The second chunk ("Sandbox: Code runs in Docker containers.") shares one word of four
    # with the question: not quoted, not listed.
    assert listed_sources(result.answer) == {1: "/docs/guide_docs/sandbox.md#chunk-1"}


async def test_offline_answer_in_chinese_for_a_chinese_question(settings: Any) -> None:
    ingest_files(
        files=[SourceFile(source="说明.md", read="# 沙箱\n\n沙箱默认内存为 256 MB。".encode)],
        collection="zh_docs",
    )

    result = await rag_answer(question="沙箱默认内存是多少？", collection="zh_docs")

    assert result.answer == (
        "尚未配置语言模型，以下是文档中的相关内容：\n\n> 沙箱默认内存为 256 MB。 [1]\n\n"
        "Sources:\n1. [说明.md#0](/docs/zh_docs/%E8%AF%B4%E6%98%8E.md#chunk-0)"
    )


async def test_nothing_found_says_so_and_that_no_model_is_configured(guide: str) -> None:
    result = await rag_answer(question="kubernetes helm")

    assert result.answer.startswith(
        "Nothing in the documentation matches this question, and no language model is "
        "configured to answer it otherwise.\n\nWithout a model I can still:\n"
    )
    assert "`LLM_BASE_URL`" in result.answer
    assert listed_sources(result.answer) == {}
    assert result.sources == [] == result.chunks


@pytest.mark.parametrize("question", ["hello?", "Hi, who are you?", "你好？"])
async def test_small_talk_gets_the_no_model_answer_not_quotes(guide: str, question: str) -> None:
    result = await rag_answer(question=question)

    assert result.answer.startswith(("No language model is configured", "尚未配置语言模型"))
    assert ">" not in result.answer


async def test_with_a_model_nothing_found_is_said_plainly(guide: str, scripted: FakeOpenAI) -> None:
    asked: list[list[ChatMessage]] = []
    result = await rag_answer(question="kubernetes helm", on_asking=asked.append)

    assert result.answer == "The documentation has nothing that matches this question."
    assert scripted.requests == []
    assert asked == []  # no model call: nothing to record


async def test_the_messages_the_model_is_sent_are_told_before_it_is_asked(
    guide: str, scripted: FakeOpenAI
) -> None:
    scripted.script(["Each container gets 256 MB [1]."])
    asked: list[list[ChatMessage]] = []

    await rag_answer(question="What is the sandbox memory limit?", on_asking=asked.append)

    assert asked == [scripted.requests[0]["messages"]]


async def test_a_streamed_answer_is_sent_on_when_the_model_pauses(
    guide: str, scripted: FakeOpenAI
) -> None:
    """As in the agent's loop: an empty piece tells the run to send what it queued when the
    model stops writing for a moment, not when its next token comes."""
    scripted.script([{"chunks": ["The default is 256 MB [1].", " Set it."], "delays_s": [0, 1.5]}])
    started = time.monotonic()
    seen: list[tuple[float, str]] = []

    async def delta(text: str) -> None:
        seen.append((time.monotonic() - started, text))

    result = await rag_answer(question="What is the sandbox memory limit?", on_delta=delta)

    assert result.answer.startswith("".join(text for _, text in seen))
    first = next(at for at, text in seen if text)
    pause = next(at for at, text in seen if at >= first and text == "")
    rest = next(at for at, text in seen if text == " Set it.")
    assert pause - first < 0.5 < rest - first


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
        "Set SANDBOX_MEMORY_MB; the default is 256 MB [1].\n\nSources:\n"
        "1. [sandbox.md#1](/docs/guide_docs/sandbox.md#chunk-1)"
    )
    assert [s.label for s in result.sources] == ["sandbox.md#1"]
    [request] = scripted.requests
    system, user = request["messages"]
    assert system == {"role": "system", "content": SYSTEM_PROMPT}
    assert user["content"].startswith("Passages:\n\n[1] (sandbox.md#1, Memory)\nMemory\n\nEach")
    assert "[2] (sandbox.md#0, Sandbox)" in user["content"]
    assert user["content"].endswith("Question: How do I change the sandbox memory limit?")


async def test_an_answer_without_citations_lists_every_passage(
    guide: str, scripted: FakeOpenAI
) -> None:
    scripted.script(["Use SANDBOX_MEMORY_MB."])

    result = await rag_answer(question="sandbox memory limit")

    assert result.answer == (
        "Use SANDBOX_MEMORY_MB.\n\nSources:\n"
        "1. [sandbox.md#1](/docs/guide_docs/sandbox.md#chunk-1)\n"
        "2. [sandbox.md#0](/docs/guide_docs/sandbox.md#chunk-0)"
    )


def test_source_labels_leave_out_an_unknown_chunk_index() -> None:
    assert source_label("guide.md", 3) == "guide.md#3"
    assert source_label("guide.md", None) == "guide.md"
    answer = extractive_answer(
        question="tea",
        results=[{"source": "notes", "chunk_index": None, "content": "Tea."}],
        model_configured=False,
    )
    assert answer.endswith("Sources:\n1. notes")


def test_a_sources_list_written_by_the_model_is_replaced() -> None:
    assert strip_sources_block("Answer [1].\n\n**Sources:**\n1. a.md\n- b.md\n") == "Answer [1]."
    assert strip_sources_block("No list here.") == "No list here."
    # Whatever its case: the stream holds such a heading back, so the answer must drop it.
    assert strip_sources_block("Answer [1].\n\nsources:\n1. a.md\n") == "Answer [1]."


def test_extracts_quote_whole_blocks_and_drop_the_opening_heading() -> None:
    answer = extractive_answer(
        question="where are the settings read?",
        results=[
            {
                "source": "docs/sandbox.md",
                "chunk_index": 0,
                "title": "Configuring the sandbox",
                "content": "Configuring the sandbox\n\nSettings are read by "
                "devassist/settings.py\nat start-up. Restart after a change.\n\n"
                "An unrelated paragraph about lunch.",
            }
        ],
        model_configured=False,
    )

    assert answer == (
        "No language model is configured, so here is what the documentation says:\n\n"
        "> Settings are read by devassist/settings.py\n"
        "> at start-up. Restart after a change. [1]\n\n"
        "Sources:\n1. docs/sandbox.md#0"
    )


CODE_AND_TABLE = """Limits

```bash
```

To change the memory limit of the sandbox, set it before start-up:

```python
import os

os.environ["SANDBOX_MEMORY_MB"] = "512"
```

| setting | default |
|---------|---------|
| SANDBOX_MEMORY_MB | 256 |

A paragraph about the weather."""


def test_code_blocks_and_tables_are_quoted_intact_and_no_code_block_is_empty() -> None:
    answer = extractive_answer(
        question="How do I set the sandbox memory limit?",
        results=[
            {"source": "limits.md", "chunk_index": 2, "title": "Limits", "content": CODE_AND_TABLE}
        ],
        model_configured=False,
    )

    assert answer == (
        "No language model is configured, so here is what the documentation says:\n\n"
        "> To change the memory limit of the sandbox, set it before start-up:\n>\n"
        '> ```python\n> import os\n>\n> os.environ["SANDBOX_MEMORY_MB"] = "512"\n> ```\n>\n'
        "> | setting | default |\n> |---------|---------|\n> | SANDBOX_MEMORY_MB | 256 |\n>\n"
        "> [1]\n\n"
        "Sources:\n1. limits.md#2"
    )
    html = render_markdown(answer)
    assert html.count('<div class="codeblock"') == 1
    assert '<div class="codeblock" data-lang="python">' in html
    assert "<td>SANDBOX_MEMORY_MB</td>" in html
    assert "weather" not in answer


def test_a_long_code_block_is_cut_at_a_line_and_closed() -> None:
    code = "\n".join(f"sandbox_limit_{i} = {i}" for i in range(200))
    answer = extractive_answer(
        question="sandbox limits",
        results=[{"source": "big.md", "chunk_index": 0, "content": f"```python\n{code}\n```"}],
        model_configured=False,
    )

    quote = answer.split("\n\n")[1]
    lines = [line.removeprefix("> ").removeprefix(">") for line in quote.split("\n")]
    assert lines[0] == "```python"
    assert lines[1] == "sandbox_limit_0 = 0"
    assert lines[-3:] == ["```", "", "[1]"]
    assert all(line.startswith("sandbox_limit_") for line in lines[1:-3])
    assert len(quote) < 900


async def test_links_in_quotes_point_at_document_pages(knowledge: Any, tmp_path: Path) -> None:
    root = tmp_path / "repo"
    (root / "docs").mkdir(parents=True)
    (root / "docs" / "guide.md").write_text(
        "# Guide\n\nThe sandbox memory is set as [the models page](llm.md#setup) says, "
        "see [the readme](../README.md) and [old notes](missing.md).\n"
    )
    (root / "docs" / "llm.md").write_text("# Models\n\nModels.\n")
    (root / "README.md").write_text("# Readme\n\nHello.\n")
    ingest_paths(paths=[root / "README.md", root / "docs"], collection="repo_docs")

    result = await rag_answer(question="sandbox memory", collection="repo_docs")

    assert "[the models page](/docs/repo_docs/docs/llm.md#setup)" in result.answer
    assert "[the readme](/docs/repo_docs/README.md)" in result.answer
    assert "old notes" in result.answer
    assert "missing.md" not in result.answer
    assert result.answer.endswith(
        "Sources:\n1. [docs/guide.md#0](/docs/repo_docs/docs/guide.md#chunk-0)"
    )
