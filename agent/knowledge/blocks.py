"""Markdown as whole blocks, and Markdown cut to a size without breaking one.

``split_blocks`` reads text as a sequence of blocks, as CommonMark draws them: a heading line
(``## x``), a paragraph, a list (its items and what is indented under them), a fenced code
block (with its fence lines and language) and a pipe table. ``cut_block`` shortens one block the
way it can be shortened: a code block at lines, closed with its fence again; a table at rows,
its header kept; a list at items; a paragraph at a sentence or a word, ending with "…".
``clip_markdown`` keeps whole blocks up to a size and cuts the first one that does not fit.

A code block with nothing in it is never produced: an empty one is dropped, and one cut so
short that no line of it is left is left out. A code block the text leaves open (a chunk that
ends inside one) is closed. Pure functions over strings.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

__all__ = [
    "ELLIPSIS",
    "Block",
    "clip_lines",
    "clip_markdown",
    "cut_block",
    "fenced",
    "split_blocks",
]

ELLIPSIS = "…"
#: The least room worth cutting a block into; with less, the block is left out.
MIN_CUT_CHARS = 60

BlockKind = Literal["heading", "paragraph", "list", "code", "table"]

_FENCE = re.compile(r"^( {0,3})(`{3,}|~{3,})(.*)$")
_ATX = re.compile(r"^ {0,3}#{1,6}(?:[ \t]|$)")
_LIST_ITEM = re.compile(r"^( {0,3})(?:[-*+]|\d{1,9}[.)])(?:[ \t]|$)")
_TABLE_DELIMITER = re.compile(r"^ {0,3}\|?\s*:?-+:?\s*(?:\|\s*:?-+:?\s*)*\|?\s*$")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|(?<=[。！？])")


def fenced(text: str, language: str = "") -> str:
    """``text`` as a fenced code block, its fence longer than any backtick run inside it."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}{language}\n{text.rstrip(chr(10))}\n{fence}"


@dataclass(frozen=True)
class Block:
    """One Markdown block: its ``kind`` and its ``text`` as written (a code block with its
    fence lines)."""

    kind: BlockKind
    text: str


def split_blocks(text: str) -> list[Block]:
    """The blocks of ``text``, in order; blank lines between them are dropped."""
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if not line.strip():
            i += 1
        elif fence := _FENCE.match(line):
            i = _code(lines, i, fence, blocks)
        elif _ATX.match(line):
            blocks.append(Block("heading", line.rstrip()))
            i += 1
        elif _table_starts(lines, i):
            end = i + 2
            while end < len(lines) and lines[end].strip() and "|" in lines[end]:
                end += 1
            blocks.append(Block("table", "\n".join(lines[i:end])))
            i = end
        elif _LIST_ITEM.match(line):
            end = _list_end(lines, i)
            blocks.append(Block("list", "\n".join(lines[i:end]).rstrip()))
            i = end
        else:
            end = i + 1
            while end < len(lines) and lines[end].strip() and not _starts_block(lines, end):
                end += 1
            blocks.append(Block("paragraph", "\n".join(lines[i:end])))
            i = end
    return blocks


def cut_block(block: Block, limit: int) -> Block | None:
    """``block`` if it fits in ``limit`` characters, else its beginning cut as its kind allows
    (see the module docstring), or None when nothing of it worth showing fits."""
    if len(block.text) <= limit:
        return block
    if limit < MIN_CUT_CHARS:
        return None
    if block.kind == "code":
        return _cut_code(block.text, limit)
    if block.kind == "table":
        header, *rows = _table_parts(block.text)
        kept = _fitting(rows, limit - len(header) - 1)
        return Block("table", "\n".join([header, *kept])) if kept else None
    if block.kind == "list":
        items = _list_items(block.text)
        kept = _fitting(items, limit)
        if kept:
            return Block("list", "\n".join(kept))
        if "```" in items[0] or "~~~" in items[0]:
            return None
        return Block("list", _cut_text(items[0], limit))
    return Block(block.kind, _cut_text(block.text, limit))


def clip_markdown(text: str, limit: int) -> str:
    """``text`` (Markdown) if it fits in ``limit`` characters; otherwise its whole blocks up to
    the limit, the first block that does not fit cut (``cut_block``) into the room left, and
    "…" to say that more followed. Blocks are joined by a blank line."""
    text = text.strip()
    if len(text) <= limit:
        return text
    kept: list[str] = []
    size = 0
    for block in split_blocks(text):
        room = limit - size - (2 if kept else 0) - len(ELLIPSIS) - 2
        if len(block.text) <= room:
            kept.append(block.text)
            size += len(block.text) + (2 if len(kept) > 1 else 0)
            continue
        cut = cut_block(block, room)
        if cut is not None:
            kept.append(cut.text)
        break
    if not kept or not kept[-1].endswith(ELLIPSIS):
        kept.append(ELLIPSIS)
    return "\n\n".join(kept)


def clip_lines(text: str, limit: int) -> str:
    """``text`` (source code) if it fits in ``limit`` characters, else its first whole lines
    that do, and a line "…"; a first line longer than that is cut."""
    text = text.strip("\n")
    if len(text) <= limit:
        return text
    room = limit - len(ELLIPSIS) - 1
    kept = _fitting(text.split("\n"), room) or [text[:room]]
    return "\n".join([*kept, ELLIPSIS])


def _code(lines: list[str], start: int, fence: re.Match[str], blocks: list[Block]) -> int:
    """Read the code block opening at ``start`` into ``blocks`` (unless it is empty); the
    index of the line after it. A block left open is closed with its own fence."""
    marker = fence.group(2)
    end = start + 1
    while end < len(lines) and not _closes(lines[end], marker):
        end += 1
    body = lines[start + 1 : end]
    if end < len(lines):
        closing = lines[end].rstrip()
    else:
        closing = fence.group(1) + marker
        while body and not body[-1].strip():
            body.pop()
    if any(line.strip() for line in body):
        blocks.append(Block("code", "\n".join([lines[start].rstrip(), *body, closing])))
    return end + 1


def _closes(line: str, marker: str) -> bool:
    """Whether ``line`` closes a code block opened with ``marker``: the same character, at
    least as many, nothing else, indented less than four spaces."""
    stripped = line.strip()
    indent = len(line) - len(line.lstrip(" "))
    return indent < 4 and stripped.startswith(marker) and not stripped.strip(marker[0])


def _table_starts(lines: list[str], i: int) -> bool:
    return "|" in lines[i] and i + 1 < len(lines) and bool(_TABLE_DELIMITER.match(lines[i + 1]))


def _starts_block(lines: list[str], i: int) -> bool:
    """Whether line ``i`` interrupts a paragraph: a fence, a heading, a list item, a table."""
    line = lines[i]
    return bool(
        _FENCE.match(line) or _ATX.match(line) or _LIST_ITEM.match(line) or _table_starts(lines, i)
    )


def _list_end(lines: list[str], start: int) -> int:
    """The index of the line after the list that starts at ``start``: it goes on over items,
    indented lines, lines continuing an item, and blank lines followed by either of the
    first two."""
    end = start + 1
    while end < len(lines):
        line = lines[end]
        if line.strip():
            indented = line.startswith((" ", "\t"))
            if indented or _LIST_ITEM.match(line) or not _starts_block(lines, end):
                end += 1
                continue
            return end
        following = end
        while following < len(lines) and not lines[following].strip():
            following += 1
        if following < len(lines) and (
            _LIST_ITEM.match(lines[following]) or lines[following].startswith(("  ", "\t"))
        ):
            end = following
            continue
        return end
    return end


def _list_items(text: str) -> list[str]:
    """The top-level items of a list block, each with what belongs to it."""
    lines = text.split("\n")
    indent = len(lines[0]) - len(lines[0].lstrip(" "))
    items: list[list[str]] = []
    for line in lines:
        item = _LIST_ITEM.match(line)
        if not items or (item is not None and len(item.group(1)) <= indent):
            items.append([line])
        else:
            items[-1].append(line)
    return ["\n".join(item).rstrip() for item in items]


def _table_parts(text: str) -> list[str]:
    """A table's header (its first two lines, as one string) followed by its rows."""
    lines = text.split("\n")
    return ["\n".join(lines[:2]), *lines[2:]]


def _fitting(parts: list[str], room: int) -> list[str]:
    """The leading ``parts`` that fit in ``room`` characters joined by newlines."""
    kept: list[str] = []
    size = 0
    for part in parts:
        size += len(part) + (1 if kept else 0)
        if size > room:
            break
        kept.append(part)
    return kept


def _cut_code(text: str, limit: int) -> Block | None:
    lines = text.split("\n")
    opening, body, closing = lines[0], lines[1:-1], lines[-1]
    room = limit - len(opening) - len(closing) - 2
    kept = _fitting(body, room)
    while kept and not kept[-1].strip():
        kept.pop()
    if not kept:
        first = next((line for line in body if line.strip()), "")
        if room < MIN_CUT_CHARS // 2 or not first:
            return None
        kept = [first[: room - 1] + ELLIPSIS]
    return Block("code", "\n".join([opening, *kept, closing]))


def _cut_text(text: str, limit: int) -> str:
    """The beginning of prose ``text``: whole sentences that fit, else words, then "…"."""
    room = limit - len(ELLIPSIS) - 1
    sentences = _SENTENCE_END.split(text)
    kept = ""
    for sentence in sentences:
        joined = f"{kept} {sentence}" if kept else sentence
        if len(joined) > room:
            break
        kept = joined
    if kept and len(kept) > room * 0.5:
        return f"{kept} {ELLIPSIS}"
    cut = text[:room]
    space = max(cut.rfind(" "), cut.rfind("\n"))
    return (cut[:space] if space > room * 0.6 else cut).rstrip() + ELLIPSIS
