"""Retrieval quality of the default (lexical, BM25) backend over the sample docs: a labelled set
of English and Chinese questions, each with the chunks that answer it, and a hit@3 bar.

A question counts as a hit when one of the top 3 results comes from an expected source and,
when a title is given, from a section whose title contains it. The figure is printed (run with
``-s`` to see it): a measured quality bar, not a timing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agent.knowledge.ingest import ingest_paths
from agent.knowledge.search import search

REPO = Path(__file__).resolve().parents[2]
COLLECTION = "quality_docs"
HIT_AT_3_MIN = 0.8

# (question, [(source, title fragment or None), ...])
LABELLED: list[tuple[str, list[tuple[str, str | None]]]] = [
    # English
    (
        "how do I configure the sandbox?",
        [("docs/sandbox.md", None), ("README.md", "Sandbox"), ("README.md", "Configuration")],
    ),
    (
        "How much memory does a sandbox container get by default?",
        [("docs/sandbox.md", "Container limits"), ("README.md", "Configuration")],
    ),
    ("How is the sandbox image tag computed?", [("docs/sandbox-image.md", "tag")]),
    (
        "How do I build the sandbox image offline with debootstrap from a Debian mirror?",
        [("docs/sandbox-image.md", None)],
    ),
    ("Which kinds of code does the AST safety scan block?", [("docs/sandbox-scanner.md", None)]),
    (
        "How do I disable a scanner rule or allow reading another path?",
        [("docs/sandbox-scanner.md", "Configuring the policy"), ("docs/sandbox.md", "policy")],
    ),
    (
        "How do I point DevAssist at an OpenAI-compatible model endpoint?",
        [("docs/llm.md", None), ("README.md", "Configuration"), ("README.md", "Agent")],
    ),
    (
        "What does the offline provider answer when no model is configured?",
        [("docs/llm.md", "offline"), ("README.md", "Agent"), ("docs/knowledge.md", "sources")],
    ),
    (
        "How are LLM request timeouts and retries handled?",
        [("docs/llm.md", "Timeouts"), ("README.md", "Configuration")],
    ),
    (
        "Which stop sequences are sent to the model?",
        [("docs/llm.md", "Stop"), ("docs/react-protocol.md", "Stop")],
    ),
    (
        "What is the reply format with Thought and Action lines?",
        [("docs/react-protocol.md", None), ("docs/llm.md", "ReAct")],
    ),
    (
        "Does the parser tolerate JSON in code fences and trailing commas?",
        [("docs/react-protocol.md", None)],
    ),
    ("How do I define a new tool with a JSON Schema for its arguments?", [("docs/tools.md", None)]),
    (
        "What happens when the tool arguments do not match the schema?",
        [("docs/tools.md", None), ("docs/react-protocol.md", None)],
    ),
    ("What fields does the execute_code observation contain?", [("docs/tools.md", None)]),
    ("How do I add a builtin tool to the registry?", [("docs/tools.md", "builtin tool")]),
    (
        "How do I create an API token for curl?",
        [("README.md", "Authentication"), ("docs/zh/overview.md", None)],
    ),
    (
        "What does the JSON error envelope look like?",
        [("README.md", "API overview"), ("docs/traces.md", None)],
    ),
    (
        "How do I watch a trace live over the websocket?",
        [("docs/traces.md", None), ("README.md", "API overview")],
    ),
    (
        "How are the error and token rollups of a subtree kept up to date when steps are written?",
        [("docs/traces.md", None)],
    ),
    (
        "How do I ingest documents into a collection with the management command?",
        [("docs/knowledge.md", None), ("README.md", "Knowledge")],
    ),
    ("How are Markdown files split into chunks?", [("docs/knowledge.md", "Chunking")]),
    (
        "What does the search_docs tool return?",
        [("docs/knowledge.md", "search_docs"), ("docs/tools.md", None)],
    ),
    (
        "How does hybrid retrieval fuse BM25 and dense vector results?",
        [("docs/knowledge.md", None), ("README.md", "Knowledge")],
    ),
    (
        "Which embeddings backend is the default, and does it download a model?",
        [("docs/knowledge.md", None), ("README.md", "Knowledge")],
    ),
    (
        "How do I upload files to a collection over the HTTP API?",
        [("docs/knowledge.md", "collections API"), ("README.md", "Knowledge")],
    ),
    ("How do I cancel a running agent run?", [("README.md", "Agent"), ("README.md", "API")]),
    (
        "How does a client re-attach to a run's event stream after its connection drops?",
        [("README.md", "Agent")],
    ),
    (
        "Which services does make test need?",
        [("README.md", "Two commands")],
    ),
    (
        "How do I scale out to several workers behind a load balancer?",
        [("README.md", "Scaling out")],
    ),
    (
        "How fast is code execution from the warm pool of containers?",
        [("README.md", "Sandbox"), ("docs/sandbox.md", "warm pool"), ("README.md", "Benchmarks")],
    ),
    # Chinese
    ("如何配置沙箱？", [("docs/zh/overview.md", "配置沙箱"), ("docs/sandbox.md", None)]),
    ("沙箱容器的内存上限默认是多少？", [("docs/zh/overview.md", "配置沙箱")]),
    ("怎么配置语言模型？", [("docs/zh/overview.md", "配置语言模型")]),
    ("如何把文档导入知识库？", [("docs/zh/overview.md", "知识库")]),
    ("代码执行的超时时间是多久？", [("docs/zh/overview.md", "配置沙箱")]),
    ("安全扫描会拦截哪些代码？", [("docs/zh/overview.md", "代码安全检查")]),
    ("怎样生成 API 令牌？", [("docs/zh/overview.md", "令牌")]),
    ("智能体最多迭代多少轮？", [("docs/zh/overview.md", "智能体")]),
    ("回答里的来源列表是什么格式？", [("docs/zh/overview.md", "带来源的回答")]),
    ("混合检索如何合并向量结果和 BM25 结果？", [("docs/zh/overview.md", "知识库")]),
    ("如何实时观看一条追踪？", [("docs/zh/overview.md", "追踪")]),
]


def is_hit(results: list[Any], expected: list[tuple[str, str | None]]) -> bool:
    return any(
        result.source == source and (title is None or title.lower() in result.title.lower())
        for result in results[:3]
        for source, title in expected
    )


@pytest.fixture
def sample_docs(knowledge: Path) -> str:
    ingest_paths(paths=[REPO / "README.md", REPO / "docs"], collection=COLLECTION)
    return COLLECTION


def test_the_labelled_set_is_large_enough_and_bilingual() -> None:
    chinese = [q for q, _ in LABELLED if any("\u4e00" <= ch <= "\u9fff" for ch in q)]
    assert len(LABELLED) >= 30
    assert len(chinese) >= 10
    assert len(LABELLED) - len(chinese) >= 20


def test_labels_name_files_that_exist() -> None:
    for _, expected in LABELLED:
        for source, _title in expected:
            assert (REPO / source).is_file(), source


def test_hit_at_3_over_the_sample_docs(sample_docs: str) -> None:
    misses = []
    hits = firsts = 0
    for question, expected in LABELLED:
        results = search(query=question, top_k=3, collection=sample_docs)
        if is_hit(results, expected):
            hits += 1
            firsts += is_hit(results[:1], expected)
        else:
            misses.append((question, [(r.source, r.title) for r in results]))
    hit_at_3 = hits / len(LABELLED)
    print(
        f"\nhit@3 = {hit_at_3:.3f}, hit@1 = {firsts / len(LABELLED):.3f} "
        f"({hits}/{len(LABELLED)} questions, default backend)"
    )
    for question, got in misses:
        print(f"  miss: {question!r} -> {got}")
    assert hit_at_3 >= HIT_AT_3_MIN, misses
