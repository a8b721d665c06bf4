"""Where an ingested document is shown, and the links inside documents pointed there.

Every document of a collection has a page, ``/docs/<collection>/<source>``
(``agent.knowledge.views.document_page``), on which each chunk has the anchor ``chunk-<index>``
and each section heading the anchor GitHub would give it (``heading_anchor``).

A document's relative links (``[models](llm.md)``, ``[x](../README.md#setup)``, ``[y](#usage)``)
mean files next to it; shown anywhere else (a quote in an answer, the document's page) they
would lead nowhere. ``rewrite_links`` points each one whose target is a document of the same
collection at that document's page, and turns the others (a file that was not ingested, a
picture, a path outside the ingested root) into their plain text. Links with a scheme
(``https:``, ``mailto:``) are left alone; code (fenced blocks and inline spans) is never
touched. Pure functions: which targets exist is given by the caller (``link_targets`` says
which to ask about).
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Set
from urllib.parse import unquote

from django.urls import reverse

from agent.knowledge.blocks import split_blocks

__all__ = ["document_url", "heading_anchor", "link_targets", "rewrite_links"]

# An inline link or image: [text](destination "title"), the destination without spaces.
_LINK = re.compile(
    r"(?P<bang>!?)\[(?P<text>(?:[^\[\]\\]|\\.|\[[^\[\]]*\])*)\]"
    r"\(\s*(?P<dest><[^<>\n]*>|[^\s()<>]+)(?P<title>\s+(?:\"[^\"\n]*\"|'[^'\n]*'))?\s*\)"
)
_SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.\-]*:")
_CODE_SPAN = re.compile(r"(`+)(?:.|\n)*?(?<!`)\1(?!`)")
_NOT_IN_ANCHOR = re.compile(r"[^\w\- ]")


def document_url(collection: str, source: str, chunk_index: int | None = None) -> str:
    """The path of ``source``'s page, at chunk ``chunk_index`` when given. Parentheses are
    escaped too, so that the path can stand in a Markdown link as it is."""
    path = reverse("knowledge:document", args=[collection, source])
    path = path.replace("(", "%28").replace(")", "%29")
    return f"{path}#chunk-{chunk_index}" if chunk_index is not None else path


def heading_anchor(title: str) -> str:
    """The anchor of a heading as GitHub makes it: lower case, punctuation dropped, spaces
    turned into hyphens (``Timeouts, retries (x)`` → ``timeouts-retries-x``)."""
    return _NOT_IN_ANCHOR.sub("", title.strip().lower()).replace(" ", "-")


def link_targets(text: str, *, source: str) -> set[str]:
    """The sources that the relative links in ``text`` (Markdown of document ``source``)
    point at, as ``rewrite_links`` would look them up."""
    targets: set[str] = set()
    for piece, code in _pieces(text):
        for match in () if code else _LINK.finditer(piece):
            target = _target(match.group("dest"), source)
            if target is not None and target[0] not in {"", ".."}:
                targets.add(target[0])
    return targets


def rewrite_links(text: str, *, collection: str, source: str, documents: Set[str]) -> str:
    """``text`` (Markdown of document ``source`` of ``collection``) with each relative link
    pointed at the page of its target when the target is one of ``documents`` (sources of
    the same collection), a link within the document at its own page; any other relative
    link or image becomes its text. See the module docstring."""

    def replace(match: re.Match[str]) -> str:
        dest = match.group("dest")
        target = _target(dest, source)
        if target is None:
            return match.group(0)
        path, fragment = target
        if match.group("bang") or (path and path not in documents):
            return match.group("text")
        path = path or source
        url = document_url(collection, path) + (f"#{fragment}" if fragment else "")
        return f"[{match.group('text')}]({url}{match.group('title') or ''})"

    return "".join(piece if code else _LINK.sub(replace, piece) for piece, code in _pieces(text))


def _target(dest: str, source: str) -> tuple[str, str] | None:
    """``(path, fragment)`` of a relative destination, the path relative to the ingested root
    (empty for a link within the document, ``".."`` for a path outside the root); None for a
    destination with a scheme or a network path, which stays as it is."""
    dest = dest.strip("<>")
    if _SCHEME.match(dest) or dest.startswith("//"):
        return None
    path, _, fragment = dest.partition("#")
    path = unquote(path.partition("?")[0])
    if not path:
        return "", fragment
    if path.startswith("/"):
        # A path from the root of the repository the documents were ingested from.
        resolved = posixpath.normpath(path.lstrip("/"))
    else:
        resolved = posixpath.normpath(posixpath.join(posixpath.dirname(source), path))
    if resolved == ".." or resolved.startswith("../"):
        return "..", fragment
    return resolved, fragment


def _pieces(text: str) -> list[tuple[str, bool]]:
    """``text`` as ``(piece, is_code)`` pairs in order: code blocks and code spans apart from
    the prose around them. Joined, the pieces are ``text`` with its blocks one blank line
    apart."""
    pieces: list[tuple[str, bool]] = []
    for number, block in enumerate(split_blocks(text)):
        if number:
            pieces.append(("\n\n", False))
        if block.kind == "code":
            pieces.append((block.text, True))
            continue
        position = 0
        for span in _CODE_SPAN.finditer(block.text):
            pieces.append((block.text[position : span.start()], False))
            pieces.append((span.group(0), True))
            position = span.end()
        pieces.append((block.text[position:], False))
    return pieces
