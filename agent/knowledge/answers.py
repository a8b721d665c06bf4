"""Answers shared by the RAG service and the offline provider: source labels, the ``Sources:``
list, the extractive answer built from search results without a model, and the answer that
says no model is configured.

An answer cites chunks by number (``[1]``) and ends with::

    Sources:
    1. guide.md#3
    2. notes.txt

where ``#3`` is the chunk index, left out when unknown. The extractive answer links each
source to its document's page (``1. [guide.md#3](/docs/team_docs/guide.md#chunk-3)``), and its
quotes keep their Markdown: whole blocks (paragraphs, lists, code blocks with their language,
tables) chosen by the search terms they share with the question.

Formatting is pure; ``extractive_answer`` and ``no_model_answer`` read the knowledge store for
the links they write (which documents exist, where the page about models is): call them off the
event loop.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

from agent.knowledge.blocks import Block, cut_block, fenced, split_blocks
from agent.knowledge.chunking import format_for
from agent.knowledge.links import document_url, link_targets, rewrite_links
from agent.knowledge.text import tokenize

__all__ = [
    "SOURCES_HEADING",
    "SOURCES_HEADING_LINE",
    "extractive_answer",
    "is_small_talk",
    "linked_label",
    "listed_sources",
    "no_model_answer",
    "source_label",
    "sources_block",
    "strip_sources_block",
]

SOURCES_HEADING = "Sources:"
#: How many chunks an extractive answer quotes, and how much of each (in characters).
EXTRACT_CHUNKS = 3
QUOTE_MAX_CHARS = 700
#: A passage is quoted when it shares at least this share of the question's search terms
#: (and at least one): with one word of a longer question in common, it is about something else.
MIN_SHARED_TERMS = 1 / 3

#: The line that heads a sources list (``Sources:``, ``**Sources**``, any case).
SOURCES_HEADING_LINE = re.compile(r"\**Sources\**:?\**\s*", re.IGNORECASE)
_SOURCES_TAIL = re.compile(
    rf"\n+{SOURCES_HEADING_LINE.pattern}\n(?:\s*(?:\d+[.)]|[-*]).*(?:\n|$))*\s*\Z", re.IGNORECASE
)
# A numbered entry of a sources list, with the document page it links to, if it does.
_LISTED = re.compile(
    r"^\s*(\d+)[.)][ \t]*(?:\[(?:[^\]\\\n]|\\.)*\]\((/docs/[^)\s]*)\))?", re.MULTILINE
)
# Words that greet, thank or ask what the assistant is: a message of only these (and stop
# words) is small talk, which the documentation cannot answer.
_SMALL_TALK_EN = frozenset(
    """
    hi hello hey heya hiya howdy yo sup greetings morning afternoon evening night good thanks
    thank thx ty cheers bye goodbye ok okay cool nice great awesome please sorry yes yeah yep
    nope lol lot much whats help devassist bot assistant
    """.split()  # noqa: SIM905
)
_SMALL_TALK_ZH = re.compile(
    "你们好|大家好|你好|您好|哈喽|哈啰|嗨|喂|谢谢你|谢谢|多谢|感谢|谢了|再见|拜拜|早上好|下午好|晚上好|早安|"
    "晚安|你是谁|你能做什么|你可以做什么|你会什么|在吗|好的|没事|不客气|对不起|帮助|[啊呀吗呢哦吧啦嘛哈嗯]"
)
_WORD = re.compile(r"[^\W\d_]+", re.UNICODE)


def source_label(source: str, chunk_index: int | None) -> str:
    """``guide.md#3``, or ``guide.md`` when the chunk index is unknown."""
    return f"{source}#{chunk_index}" if chunk_index is not None else source


def sources_block(labels: Sequence[tuple[int, str]]) -> str:
    """``Sources:`` followed by ``n. label`` lines, for ``(number, label)`` pairs (a label may
    be a Markdown link)."""
    return "\n".join([SOURCES_HEADING, *(f"{number}. {label}" for number, label in labels)])


def strip_sources_block(answer: str) -> str:
    """``answer`` without a trailing sources list a model wrote itself."""
    return _SOURCES_TAIL.sub("", answer.rstrip()).rstrip()


def listed_sources(answer: str) -> dict[int, str | None]:
    """The sources ``answer``'s trailing ``Sources:`` list names: each number with the
    document page its entry links to (``/docs/...``; None for an entry that is not such a
    link). Empty when the answer has no such list."""
    tail = _SOURCES_TAIL.search(answer.rstrip())
    if tail is None:
        return {}
    return {int(number): url or None for number, url in _LISTED.findall(tail.group(0))}


def linked_label(collection: str, source: str, chunk_index: int | None) -> str:
    """A ``Sources:`` entry: the source's label linked to its chunk on the document's page,
    ``[guide.md#3](/docs/team_docs/guide.md#chunk-3)``."""
    label = re.sub(r"([\[\]\\])", r"\\\1", source_label(source, chunk_index))
    return f"[{label}]({document_url(collection, source, chunk_index)})"


def is_small_talk(message: str) -> bool:
    """Whether ``message`` only greets, thanks, says goodbye or asks what the assistant is
    ("hello", "thanks!", "你好", "who are you?"): nothing is left of it to search for."""
    rest = _SMALL_TALK_ZH.sub(" ", message.lower().replace("'", "").replace("’", ""))
    rest = _WORD.sub(lambda word: " " if word.group(0) in _SMALL_TALK_EN else word.group(0), rest)
    return not tokenize(rest)


def no_model_answer(
    *, chinese: bool, nothing_matched: bool = False, collection: str | None = None
) -> str:
    """The answer for what cannot be served without a language model: that none is
    configured, what works without one (searching the documentation, running code given in
    the message), and how to add one, with a link to the page about models when the default
    collection holds it. ``nothing_matched`` says first that nothing in the documentation
    (``collection``, when known) matches the question. In Chinese when ``chinese``."""
    # Imported here: chromadb takes seconds to import, and few processes answer without a model.
    from agent.knowledge.selectors import MODELS_DOCUMENT, models_document_url

    url = models_document_url()
    if chinese:
        named = f"（{collection}）" if collection else ""
        head = (
            f"文档{named}中没有与这个问题相关的内容，而且尚未配置语言模型，无法用其他方式回答。"
            if nothing_matched
            else "尚未配置语言模型，所以我无法自由对话或回答问题。"
        )
        where = f"[{MODELS_DOCUMENT}]({url})" if url else f"DevAssist 仓库中的 {MODELS_DOCUMENT}"
        return (
            f"{head}\n\n没有模型时我仍然可以：\n"
            "- 搜索文档：提出关于文档的问题，我会引用相关段落并注明来源；\n"
            "- 在沙箱中运行你给的 Python 代码：把代码放在 Markdown 代码块中，"
            "或写在“执行：”之后（也可以用 `run:` / `execute:`）。\n\n"
            "要接入模型，请把 `LLM_BASE_URL`（以及 `LLM_MODEL`，需要时还有 `LLM_API_KEY`）"
            "设置为任意兼容 OpenAI 的服务（OpenAI、Ollama、vLLM、llama.cpp 等），然后重启 "
            f"DevAssist，详见 {where}。"
        )
    named = f" ({collection})" if collection else ""
    head = (
        f"Nothing in the documentation{named} matches this question, and no language model is "
        "configured to answer it otherwise."
        if nothing_matched
        else "No language model is configured, so I cannot chat or answer freely."
    )
    where = f"[{MODELS_DOCUMENT}]({url})" if url else f"{MODELS_DOCUMENT} in DevAssist's source"
    return (
        f"{head}\n\nWithout a model I can still:\n"
        "- search the documentation: ask a question about it, and I quote the passages that "
        "match, with their sources;\n"
        "- run Python code you give me in the sandbox: put it in a fenced code block, or after "
        "`run:` / `execute:` / `执行：`.\n\n"
        "To add a model, set `LLM_BASE_URL` (and `LLM_MODEL`; `LLM_API_KEY` if the endpoint "
        "needs one) to any OpenAI-compatible endpoint (OpenAI, Ollama, vLLM, llama.cpp...) and "
        f"restart DevAssist: see {where}."
    )


def extractive_answer(
    *,
    question: str,
    results: Sequence[Mapping[str, Any]],
    chinese: bool = False,
    model_configured: bool,
) -> str:
    """An answer made only of passages quoted from ``results`` (search results as dicts with
    ``content``, ``source``, ``chunk_index``, ``title``, and ``collection`` for links), with
    numbered citations and the ``Sources:`` list.

    From each of the first ``EXTRACT_CHUNKS`` chunks that share at least ``MIN_SHARED_TERMS``
    of the question's search terms (cited by their place in ``results``), the blocks that
    share the most are quoted whole, in document order, up to ``QUOTE_MAX_CHARS`` (a block
    ending with a colon brings the block it introduces; a block too long is cut as
    ``agent.knowledge.blocks.cut_block`` cuts it). Relative links in quotes point at document
    pages (``agent.knowledge.links``), and each source links to its chunk's page.

    Without a model (``model_configured`` False) the quotes are
    introduced by saying that no model is configured, and small talk and a question that
    nothing matches get ``no_model_answer``; with one (the RAG answer when nothing was found),
    nothing matching is said in one sentence."""
    collection = next((str(r["collection"]) for r in results if r.get("collection")), None)
    if not model_configured and is_small_talk(question):
        return no_model_answer(chinese=chinese)
    terms = set(tokenize(question))
    needed = max(1, math.ceil(len(terms) * MIN_SHARED_TERMS))
    quoted: list[tuple[int, Mapping[str, Any], str]] = []
    for number, entry in _distinct(results)[:EXTRACT_CHUNKS]:
        quote = _quote(entry, terms, needed)
        if quote is not None:
            quoted.append((number, entry, quote))
    if not quoted:
        if not model_configured:
            return no_model_answer(chinese=chinese, nothing_matched=True, collection=collection)
        return (
            "文档中没有找到与这个问题相关的内容。"
            if chinese
            else "The documentation has nothing that matches this question."
        )
    quotes = _linked([(entry, quote) for _, entry, quote in quoted])
    labels = [(number, _source(entry)) for number, entry, _ in quoted]
    if model_configured:
        head = "文档中的相关内容：" if chinese else "Here is what the documentation says:"
    elif chinese:
        head = "尚未配置语言模型，以下是文档中的相关内容："
    else:
        head = "No language model is configured, so here is what the documentation says:"
    numbers = [number for number, _, _ in quoted]
    body = "\n\n".join(map(_blockquote, quotes, numbers))
    return f"{head}\n\n{body}\n\n{sources_block(labels)}"


def _quote(entry: Mapping[str, Any], terms: set[str], needed: int) -> str | None:
    """The passage of one search result worth quoting (Markdown), or None when it shares too
    few search terms."""
    content = str(entry.get("content") or "").strip()
    title = str(entry.get("title") or "")
    if format_for(str(entry.get("source") or "")) == "python":
        blocks = [Block("code", fenced(content, "python"))]
    else:
        blocks = split_blocks(content)
        if blocks and title and blocks[0].text.strip() == title:
            # Chunks open with their heading, which reads oddly inside a quote.
            blocks = blocks[1:]
    if not blocks:
        return None
    shared = [len(terms & set(tokenize(block.text))) for block in blocks]
    if len(terms & set(tokenize(" ".join([title, content])))) < needed:
        return None
    # Best blocks first; a chunk whose match is its heading alone is quoted from its start.
    order = sorted(range(len(blocks)), key=lambda i: (-shared[i], i))
    if shared[order[0]] == 0:
        order = list(range(len(blocks)))
    chosen: dict[int, Block] = {}
    size = 0
    for i in order:
        if chosen and shared[i] == 0:
            break
        for j in (i, i + 1) if blocks[i].text.rstrip().endswith((":", "：")) else (i,):
            if j >= len(blocks) or j in chosen:
                continue
            room = QUOTE_MAX_CHARS - size
            block = blocks[j] if len(blocks[j].text) <= room else cut_block(blocks[j], room)
            if block is None:
                break
            chosen[j] = block
            size += len(block.text) + 2
        if size >= QUOTE_MAX_CHARS:
            break
    if not chosen:
        return None
    return "\n\n".join(chosen[i].text for i in sorted(chosen))


def _linked(quoted: list[tuple[Mapping[str, Any], str]]) -> list[str]:
    """The quotes with their relative links pointed at document pages (Markdown sources of a
    known collection only)."""
    targets: dict[str, set[str]] = {}
    for entry, quote in quoted:
        if entry.get("collection") and format_for(str(entry.get("source") or "")) == "markdown":
            found = link_targets(quote, source=str(entry["source"]))
            targets.setdefault(str(entry["collection"]), set()).update(found)
    existing: dict[str, frozenset[str]] = {}
    if any(targets.values()):
        from agent.knowledge.selectors import documents_existing

        existing = {
            name: documents_existing(collection=name, sources=sources)
            for name, sources in targets.items()
        }
    linked: list[str] = []
    for entry, quote in quoted:
        collection = str(entry.get("collection") or "")
        if collection in targets:
            quote = rewrite_links(
                quote,
                collection=collection,
                source=str(entry["source"]),
                documents=existing.get(collection, frozenset()),
            )
        linked.append(quote)
    return linked


def _blockquote(text: str, number: int) -> str:
    """``text`` quoted (``> `` on every line) with its citation ``[number]``: at the end of
    its last line of prose, or on a line of its own after a code block or a table."""
    apart = split_blocks(text)[-1].kind in {"code", "table"}
    text = f"{text}\n\n[{number}]" if apart else f"{text} [{number}]"
    return "\n".join(f"> {line}" if line.strip() else ">" for line in text.split("\n"))


def _source(entry: Mapping[str, Any]) -> str:
    """The ``Sources:`` entry of a quoted result: its label, linked to its chunk on the
    document's page when its collection is known."""
    source = str(entry.get("source") or "?")
    chunk_index = entry.get("chunk_index")
    index = int(chunk_index) if isinstance(chunk_index, int) else None
    collection = entry.get("collection")
    if not collection or source == "?":
        return source_label(source, index)
    return linked_label(str(collection), source, index)


def _distinct(results: Sequence[Mapping[str, Any]]) -> list[tuple[int, Mapping[str, Any]]]:
    """The results with content, each chunk once, with their numbers (positions in
    ``results``, from 1, as the RAG answer numbers its passages)."""
    seen: set[str] = set()
    chosen: list[tuple[int, Mapping[str, Any]]] = []
    for number, entry in enumerate(results, start=1):
        if not isinstance(entry, Mapping):
            continue
        key = str(entry.get("id") or (entry.get("source"), entry.get("chunk_index")))
        if key not in seen and str(entry.get("content") or "").strip():
            seen.add(key)
            chosen.append((number, entry))
    return chosen
