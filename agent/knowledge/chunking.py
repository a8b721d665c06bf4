"""Splitting documents into chunks that follow their structure.

A document is first parsed into **sections** (a heading and the blocks under it) by a parser
for its format, chosen by file suffix (``FORMATS``):

- Markdown: ATX (``## x``) and setext headings, outside fenced code; YAML front matter is
  dropped; a fenced code block is one block;
- reStructuredText: titles underlined (and optionally overlined) with punctuation, levels in
  order of appearance;
- HTML: the stdlib ``html.parser``; ``<h1>``-``<h6>`` start sections, block elements make
  blocks, ``<pre>`` keeps its layout, ``<script>``, ``<style>`` and the like are dropped;
  ``<title>`` (else the first heading) names the document;
- Python: ``ast``; the module docstring, each top-level class and function (with its
  decorators) and runs of other top-level statements are sections; a file that does not parse
  is read as plain text;
- plain text: blank-line separated paragraphs under the file's name.

Then each section's blocks are packed into chunks of at most ``max_chars`` characters (a block
longer than that is split at lines, then sentences, then words). Every piece of a fenced code
block is fenced again with the block's own fence line, and every piece of a table repeats its
header rows, so each chunk is Markdown that renders as its part of the document did. Each chunk
starts with its section's heading, and a chunk that continues a section repeats the end of the
previous one (up to ``overlap_chars``; never part of a code block or a table), so a passage cut
at a chunk boundary is whole in one of them.
"""

from __future__ import annotations

import ast
import hashlib
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import PurePosixPath

__all__ = [
    "CHUNKING_VERSION",
    "FORMATS",
    "Chunk",
    "chunk_document",
    "format_for",
]

CHUNK_MAX_CHARS = 1200
CHUNK_OVERLAP_CHARS = 200
#: Changes whenever the same file would be chunked differently: ingestion re-chunks documents
#: stored by another version even when the file is unchanged.
CHUNKING_VERSION = 2

#: File suffix (lower case) to format.
FORMATS: dict[str, str] = {
    ".md": "markdown",
    ".markdown": "markdown",
    ".rst": "rst",
    ".txt": "text",
    ".text": "text",
    ".html": "html",
    ".htm": "html",
    ".py": "python",
}


@dataclass(frozen=True)
class Chunk:
    """One piece of a document. ``index`` counts from 0 in document order; ``title`` is the
    nearest heading (the document's title before the first one); ``section`` the heading path
    joined by " > "; ``content_hash`` the SHA-256 of ``text``."""

    index: int
    text: str
    title: str
    section: str
    content_hash: str


@dataclass
class _Section:
    path: list[str]
    blocks: list[str] = field(default_factory=list)

    @property
    def title(self) -> str:
        return self.path[-1] if self.path else ""


def format_for(name: str) -> str | None:
    """The format of a file called ``name`` (``"markdown"``, ...), or None if unsupported."""
    return FORMATS.get(PurePosixPath(name).suffix.lower())


def chunk_document(
    *,
    text: str,
    name: str,
    max_chars: int = CHUNK_MAX_CHARS,
    overlap_chars: int = CHUNK_OVERLAP_CHARS,
) -> list[Chunk]:
    """The chunks of ``text``, a file called ``name`` (its suffix picks the parser; an
    unknown suffix is read as plain text). Empty or blank text gives no chunks."""
    if not text.strip():
        return []
    fallback_title = PurePosixPath(name).name
    parser = {
        "markdown": _markdown_sections,
        "rst": _rst_sections,
        "html": _html_sections,
        "python": _python_sections,
    }.get(format_for(name) or "text", _text_sections)
    sections = parser(text.replace("\r\n", "\n").replace("\r", "\n"), fallback_title)
    chunks: list[Chunk] = []
    for section in sections:
        heading = section.title
        budget = max(max_chars - len(heading) - 2, max_chars // 2)
        for body in _pack(section.blocks, max_chars=budget, overlap_chars=overlap_chars):
            # A block that already opens with its heading (Python's "class Invoice(Base):")
            # does not repeat it.
            opens_with_heading = re.match(re.escape(heading) + r"\b", body) is not None
            chunk_text = f"{heading}\n\n{body}" if heading and not opens_with_heading else body
            chunks.append(
                Chunk(
                    index=len(chunks),
                    text=chunk_text,
                    title=heading or fallback_title,
                    section=" > ".join(section.path),
                    content_hash=hashlib.sha256(chunk_text.encode("utf-8")).hexdigest(),
                )
            )
    return chunks


# --- packing ------------------------------------------------------------------------------


def _pack(blocks: list[str], *, max_chars: int, overlap_chars: int) -> Iterator[str]:
    pieces = [piece for block in blocks for piece in _split_block(block, max_chars)]
    current: list[str] = []
    size = 0
    fresh = False  # whether current holds anything beyond the overlap
    for piece in pieces:
        if current and fresh and size + len(piece) + 2 > max_chars:
            yield "\n\n".join(current)
            tail = _tail(current[-1], overlap_chars)
            current, size, fresh = ([tail], len(tail), False) if tail else ([], 0, False)
            if size + len(piece) + 2 > max_chars:
                current, size = [], 0
        current.append(piece)
        size += len(piece) + 2
        fresh = True
    if current and fresh:
        yield "\n\n".join(current)


def _tail(text: str, limit: int) -> str:
    """The end of ``text``, at most ``limit`` characters, starting at a word or line; nothing
    of a code block or table longer than that (a part of one would not render as one)."""
    if limit <= 0:
        return ""
    if len(text) <= limit:
        return text
    if _fence_lines(text) is not None or _table_header(text) is not None:
        return ""
    cut = text[-limit:]
    boundary = re.search(r"[\s。！？]", cut)
    return cut[boundary.end() :].lstrip() if boundary else cut


_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|(?<=[。！？；])")


def _split_block(block: str, max_chars: int) -> list[str]:
    block = block.strip("\n")
    if not block.strip():
        return []
    if len(block) <= max_chars:
        return [block]
    fence = _fence_lines(block)
    if fence is not None:
        opening, body, closing = fence
        return _framed(body, max_chars, head=opening, foot=closing)
    header = _table_header(block)
    if header is not None:
        return _framed(block.split("\n")[2:], max_chars, head=header, foot="")
    lines = block.split("\n")
    units = lines if len(lines) > 1 else _SENTENCE_END.split(block)
    out: list[str] = []
    current = ""
    joiner = "\n" if len(lines) > 1 else " "
    for unit in units:
        for part in _hard_split(unit, max_chars):
            if current and len(current) + len(joiner) + len(part) > max_chars:
                out.append(current)
                current = part
            else:
                current = f"{current}{joiner}{part}" if current else part
    if current.strip():
        out.append(current)
    return out


def _fence_lines(block: str) -> tuple[str, list[str], str] | None:
    """A fenced code block's opening line, its lines of code and its closing line (the
    opening's fence when the block has none), or None when ``block`` is not one."""
    lines = block.split("\n")
    opening = _FENCE_OPEN.match(lines[0])
    if opening is None:
        return None
    fence = opening.group(1)
    if len(lines) > 1 and lines[-1].strip().startswith(fence):
        return lines[0], lines[1:-1], lines[-1]
    return lines[0], lines[1:], fence


def _table_header(block: str) -> str | None:
    """A pipe table's header row and delimiter row, or None when ``block`` is not a table."""
    lines = block.split("\n")
    if len(lines) > 2 and "|" in lines[0] and _TABLE_DELIMITER.match(lines[1]):
        return f"{lines[0]}\n{lines[1]}"
    return None


def _framed(lines: list[str], max_chars: int, *, head: str, foot: str) -> list[str]:
    """``lines`` in pieces that each fit ``max_chars`` with ``head`` before them and ``foot``
    after them (a line longer than the room left is cut); pieces of blank lines only are
    left out."""
    frame = len(head) + (len(foot) + 1 if foot else 0) + 1
    room = max(max_chars - frame, max_chars // 2)
    groups: list[list[str]] = []
    current: list[str] = []
    size = 0
    for line in lines:
        for part in list(_hard_split(line, room)) or [""]:
            if current and size + len(part) + 1 > room:
                groups.append(current)
                current, size = [], 0
            current.append(part)
            size += len(part) + 1
    groups.append(current)
    return [
        "\n".join([head, *group, foot] if foot else [head, *group])
        for group in groups
        if any(line.strip() for line in group)
    ]


def _hard_split(text: str, max_chars: int) -> Iterator[str]:
    while len(text) > max_chars:
        cut = text.rfind(" ", 0, max_chars)
        cut = cut if cut > max_chars // 2 else max_chars
        yield text[:cut]
        text = text[cut:].lstrip()
    if text:
        yield text


def _paragraphs(lines: Iterable[str]) -> list[str]:
    blocks: list[str] = []
    current: list[str] = []
    for line in lines:
        if line.strip():
            current.append(line.rstrip())
        elif current:
            blocks.append("\n".join(current))
            current = []
    if current:
        blocks.append("\n".join(current))
    return blocks


# --- plain text ---------------------------------------------------------------------------


def _text_sections(text: str, title: str) -> list[_Section]:
    return [_Section(path=[title], blocks=_paragraphs(text.split("\n")))]


# --- Markdown -----------------------------------------------------------------------------

_ATX = re.compile(r"^ {0,3}(#{1,6})[ \t]+(.*?)(?:[ \t]+#+)?[ \t]*$")
_FENCE_OPEN = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_SETEXT = re.compile(r"^ {0,3}(=+|-+)[ \t]*$")
_TABLE_DELIMITER = re.compile(r"^ {0,3}\|?\s*:?-+:?\s*(?:\|\s*:?-+:?\s*)*\|?\s*$")


class _Outline:
    """Sections under a heading stack; ``level`` is any comparable depth."""

    def __init__(self, title: str) -> None:
        self.doc_title = title
        self.stack: list[tuple[int, str]] = []
        self.sections: list[_Section] = [_Section(path=[title])]

    def heading(self, level: int, text: str) -> None:
        text = " ".join(text.split())
        if not text:
            return
        while self.stack and self.stack[-1][0] >= level:
            self.stack.pop()
        self.stack.append((level, text))
        self.sections.append(_Section(path=[t for _, t in self.stack]))

    def add(self, block: str) -> None:
        if block.strip():
            self.sections[-1].blocks.append(block)

    def result(self) -> list[_Section]:
        return [section for section in self.sections if section.blocks]


def _markdown_sections(text: str, title: str) -> list[_Section]:
    lines = text.split("\n")
    if lines and lines[0].strip() == "---":
        end = next((i for i in range(1, len(lines)) if lines[i].strip() in {"---", "..."}), None)
        if end is not None:
            lines = lines[end + 1 :]
    first_h1 = next(
        (m.group(2) for line in lines if (m := _ATX.match(line)) and len(m.group(1)) == 1), None
    )
    outline = _Outline(first_h1.strip() if first_h1 else title)
    paragraph: list[str] = []
    fence: str | None = None

    def flush() -> None:
        if paragraph:
            outline.add("\n".join(paragraph))
            paragraph.clear()

    for line in lines:
        if fence is not None:
            paragraph.append(line)
            if line.strip().startswith(fence):
                fence = None
                flush()
            continue
        opening = _FENCE_OPEN.match(line)
        if opening:
            flush()
            fence = opening.group(1)[0] * len(opening.group(1))
            paragraph.append(line)
            continue
        atx = _ATX.match(line)
        if atx:
            flush()
            outline.heading(len(atx.group(1)), atx.group(2))
            continue
        setext = _SETEXT.match(line)
        if setext and len(paragraph) == 1 and not paragraph[0].lstrip().startswith(("|", "-")):
            heading_text = paragraph.pop()
            outline.heading(1 if setext.group(1)[0] == "=" else 2, heading_text)
            continue
        if not line.strip():
            flush()
            continue
        paragraph.append(line.rstrip())
    flush()
    return outline.result()


# --- reStructuredText ---------------------------------------------------------------------

_RST_ADORNMENT = re.compile(r"^([=\-~^\"'`#*+:._<>!$%&,;/?@\\|])\1{2,}\s*$")


def _rst_sections(text: str, title: str) -> list[_Section]:
    lines = text.split("\n")
    styles: list[tuple[str, bool]] = []
    headings: dict[int, tuple[int, str, int]] = {}  # first line -> (level, text, lines used)
    for i in range(len(lines) - 1):
        line, under = lines[i], lines[i + 1]
        if not line.strip() or line[0].isspace() or _RST_ADORNMENT.match(line):
            continue
        match = _RST_ADORNMENT.match(under)
        if not match or len(under.rstrip()) < min(len(line.rstrip()), 3):
            continue
        over = i > 0 and lines[i - 1].rstrip() == under.rstrip()
        if i > 0 and lines[i - 1].strip() and not over:
            continue  # the underline of a paragraph's last line is a transition, not a title
        style = (match.group(1), over)
        if style not in styles:
            styles.append(style)
        start = i - 1 if over else i
        headings[start] = (styles.index(style), line.strip(), 3 if over else 2)
    first = min(headings) if headings else None
    outline = _Outline(headings[first][1] if first is not None else title)
    body: list[str] = []
    i = 0
    while i < len(lines):
        if i in headings:
            for block in _paragraphs(body):
                outline.add(block)
            body = []
            level, heading_text, used = headings[i]
            outline.heading(level, heading_text)
            i += used
            continue
        body.append(lines[i])
        i += 1
    for block in _paragraphs(body):
        outline.add(block)
    return outline.result()


# --- HTML ---------------------------------------------------------------------------------

_HTML_SKIP = {"script", "style", "noscript", "template", "svg", "iframe", "object"}
_HTML_BLOCK = {
    "address", "article", "aside", "blockquote", "body", "dd", "details", "div", "dl", "dt",
    "fieldset", "figcaption", "figure", "footer", "form", "header", "hr", "li", "main", "nav",
    "ol", "p", "section", "summary", "table", "tbody", "td", "th", "thead", "tr", "ul",
}  # fmt: skip
_HTML_HEADINGS = {f"h{level}": level for level in range(1, 7)}


class _HTMLSections(HTMLParser):
    def __init__(self, title: str) -> None:
        super().__init__(convert_charrefs=True)
        self.fallback = title
        self.page_title = ""
        self.in_title = False
        self.skip_depth = 0
        self.pre_depth = 0
        self.heading_level: int | None = None
        self.buffer: list[str] = []
        self.events: list[
            tuple[str, int, str]
        ] = []  # ("heading", level, text) | ("block", 0, text)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in _HTML_SKIP:
            self.skip_depth += 1
            return
        if tag == "title":
            self.in_title = True
        elif tag in _HTML_HEADINGS:
            self._flush()
            self.heading_level = _HTML_HEADINGS[tag]
        elif tag == "pre":
            self._flush()
            self.pre_depth += 1
        elif tag == "br":
            self.buffer.append("\n")
        elif tag in _HTML_BLOCK:
            self._flush()

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "br":
            self.buffer.append("\n")
        elif tag in _HTML_BLOCK:
            self._flush()

    def handle_endtag(self, tag: str) -> None:
        if tag in _HTML_SKIP:
            self.skip_depth = max(0, self.skip_depth - 1)
            return
        if tag == "title":
            self.in_title = False
        elif tag in _HTML_HEADINGS and self.heading_level is not None:
            text = " ".join("".join(self.buffer).split())
            self.buffer = []
            if text:
                self.events.append(("heading", self.heading_level, text))
            self.heading_level = None
        elif tag == "pre":
            self._flush()
            self.pre_depth = max(0, self.pre_depth - 1)
        elif tag in _HTML_BLOCK:
            self._flush()

    def handle_data(self, data: str) -> None:
        if self.skip_depth:
            return
        if self.in_title:
            self.page_title += data
            return
        self.buffer.append(data)

    def _flush(self) -> None:
        raw = "".join(self.buffer)
        self.buffer = []
        if self.heading_level is not None:
            self.buffer = [raw]
            return
        if self.pre_depth:
            text = raw.strip("\n")
        else:
            text = "\n".join(" ".join(line.split()) for line in raw.split("\n"))
            text = re.sub(r"\n{2,}", "\n", text).strip()
        if text.strip():
            self.events.append(("block", 0, text))

    def sections(self) -> list[_Section]:
        self._flush()
        first_heading = next((text for kind, _, text in self.events if kind == "heading"), None)
        title = " ".join(self.page_title.split()) or first_heading or self.fallback
        outline = _Outline(title)
        for kind, level, text in self.events:
            if kind == "heading":
                outline.heading(level, text)
            else:
                outline.add(text)
        return outline.result()


def _html_sections(text: str, title: str) -> list[_Section]:
    parser = _HTMLSections(title)
    parser.feed(text)
    parser.close()
    return parser.sections()


# --- Python -------------------------------------------------------------------------------


def _python_sections(text: str, title: str) -> list[_Section]:
    try:
        module = ast.parse(text)
    except (SyntaxError, ValueError):
        return _text_sections(text, title)
    lines = text.split("\n")
    sections: list[_Section] = []
    docstring = ast.get_docstring(module)
    body = module.body
    if docstring:
        sections.append(_Section(path=[title], blocks=_paragraphs(docstring.split("\n"))))
        body = body[1:]
    loose: list[str] = []

    def flush_loose() -> None:
        if loose:
            sections.append(_Section(path=[title], blocks=["\n".join(loose)]))
            loose.clear()

    for node in body:
        first = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", []))])
        source = "\n".join(lines[first - 1 : node.end_lineno]).rstrip()
        if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            flush_loose()
            kind = "class" if isinstance(node, ast.ClassDef) else "def"
            blocks = _class_blocks(node, lines) if isinstance(node, ast.ClassDef) else [source]
            sections.append(_Section(path=[title, f"{kind} {node.name}"], blocks=blocks))
        else:
            loose.append(source)
    flush_loose()
    return [section for section in sections if section.blocks]


def _class_blocks(node: ast.ClassDef, lines: list[str]) -> list[str]:
    """A class cut before each of its methods: the header, then one block per method (with
    whatever follows it up to the next)."""
    starts = [min([node.lineno, *(d.lineno for d in node.decorator_list)])]
    for child in node.body:
        if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
            starts.append(min([child.lineno, *(d.lineno for d in child.decorator_list)]))
    ends = [*starts[1:], (node.end_lineno or starts[0]) + 1]
    blocks = ["\n".join(lines[a - 1 : b - 1]).rstrip() for a, b in zip(starts, ends, strict=True)]
    return [block for block in blocks if block.strip()]
