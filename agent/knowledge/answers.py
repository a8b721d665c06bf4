"""Answer formatting shared by the RAG service and the offline provider: source labels, the
``Sources:`` list, and the extractive answer built from search results without a model.

An answer cites chunks by number (``[1]``) and ends with::

    Sources:
    1. guide.md#3
    2. notes.txt

where ``#3`` is the chunk index, left out when unknown. Pure functions over plain data: nothing
here reads Chroma or calls a model.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from agent.knowledge.text import tokenize

__all__ = [
    "SOURCES_HEADING",
    "extractive_answer",
    "source_label",
    "sources_block",
    "strip_sources_block",
]

SOURCES_HEADING = "Sources:"
#: How many chunks an extractive answer quotes, and how much of each.
EXTRACT_CHUNKS = 3
EXTRACT_MAX_CHARS = 420

# A sentence ends at . ! ? followed by a space (not inside "settings.py" or "3.5"), or at
# Chinese end punctuation.
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|(?<=[。！？])")
_SOURCES_TAIL = re.compile(r"\n+\**Sources\**:?\**\s*\n(?:\s*(?:\d+[.)]|[-*]).*(?:\n|$))*\s*\Z")


def source_label(source: str, chunk_index: int | None) -> str:
    """``guide.md#3``, or ``guide.md`` when the chunk index is unknown."""
    return f"{source}#{chunk_index}" if chunk_index is not None else source


def sources_block(labels: Sequence[tuple[int, str]]) -> str:
    """``Sources:`` followed by ``n. label`` lines, for ``(number, label)`` pairs."""
    return "\n".join([SOURCES_HEADING, *(f"{number}. {label}" for number, label in labels)])


def strip_sources_block(answer: str) -> str:
    """``answer`` without a trailing sources list a model wrote itself."""
    return _SOURCES_TAIL.sub("", answer.rstrip()).rstrip()


def extractive_answer(
    *, question: str, results: Sequence[Mapping[str, Any]], chinese: bool = False
) -> str:
    """An answer made only of passages quoted from ``results`` (search results as dicts with
    ``content``, ``source``, ``chunk_index``), most relevant sentences first chosen by shared
    search terms with ``question``; each quote cites its number, and the ``Sources:`` list
    names the quoted chunks. Says that nothing was found when ``results`` is empty."""
    chosen = _distinct(results)[:EXTRACT_CHUNKS]
    if not chosen:
        return (
            "文档中没有找到与这个问题相关的内容。"
            if chinese
            else "The documentation has nothing that matches this question."
        )
    terms = set(tokenize(question))
    quotes: list[str] = []
    labels: list[tuple[int, str]] = []
    for number, entry in enumerate(chosen, start=1):
        content = str(entry.get("content") or "")
        title = str(entry.get("title") or "")
        if title and content.startswith(title + " "):
            # Chunks open with their heading, which reads oddly inside a quote.
            content = content[len(title) + 1 :]
        extract = best_passage(content, terms)
        quotes.append(f"> {extract} [{number}]")
        chunk_index = entry.get("chunk_index")
        labels.append(
            (
                number,
                source_label(
                    str(entry.get("source") or "?"),
                    int(chunk_index) if isinstance(chunk_index, int) else None,
                ),
            )
        )
    head = "文档中的相关内容：" if chinese else "Here is what the documentation says:"
    return f"{head}\n\n" + "\n\n".join(quotes) + "\n\n" + sources_block(labels)


def best_passage(content: str, terms: set[str], limit: int = EXTRACT_MAX_CHARS) -> str:
    """The sentences of ``content`` that share the most ``terms``, kept in their order, up to
    ``limit`` characters (the start of ``content`` when no sentence shares any)."""
    text = " ".join(content.split())
    sentences = [s.strip() for s in _SENTENCE_END.split(text) if s.strip()]
    if not sentences:
        return _cut(text, limit)
    scored = sorted(
        range(len(sentences)),
        key=lambda i: (-len(terms & set(tokenize(sentences[i]))), i),
    )
    if not terms & set(tokenize(sentences[scored[0]])):
        return _cut(text, limit)
    keep: list[int] = []
    size = 0
    for i in scored:
        if size and size + len(sentences[i]) > limit:
            continue
        if not terms & set(tokenize(sentences[i])) and keep:
            break
        keep.append(i)
        size += len(sentences[i]) + 1
        if size >= limit:
            break
    return _cut(" ".join(sentences[i] for i in sorted(keep)), limit)


def _distinct(results: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    seen: set[str] = set()
    chosen: list[Mapping[str, Any]] = []
    for entry in results:
        if not isinstance(entry, Mapping):
            continue
        key = str(entry.get("id") or (entry.get("source"), entry.get("chunk_index")))
        if key not in seen and str(entry.get("content") or "").strip():
            seen.add(key)
            chosen.append(entry)
    return chosen


def _cut(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    cut = text[: limit - 1]
    space = cut.rfind(" ")
    return (cut[:space] if space > limit * 0.6 else cut) + "…"
