"""Answers as HTML: Markdown (markdown-it-py, raw HTML off), code highlighted by Pygments, and
the result sanitised by nh3, so nothing a model writes can become script, an event handler or
an htmx attribute.

Fenced code blocks get a toolbar (Copy, and Run for Python) that ``static/chat/chat.js`` wires
up; the code itself is in the block's ``<code>``.
"""

from __future__ import annotations

from functools import lru_cache
from html import escape
from typing import Any

import nh3
from markdown_it import MarkdownIt
from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import get_lexer_by_name
from pygments.util import ClassNotFound

__all__ = ["render_markdown"]

#: Fence languages the Run button executes in the sandbox.
RUNNABLE = frozenset({"", "python", "py", "python3", "py3"})

_TAGS = {
    "a", "b", "blockquote", "br", "button", "code", "del", "div", "em", "h1", "h2", "h3", "h4",
    "h5", "h6", "hr", "i", "img", "li", "ol", "p", "pre", "s", "span", "strong", "sub", "sup",
    "table", "tbody", "td", "th", "thead", "tr", "ul",
}  # fmt: skip
_ATTRIBUTES = {
    "a": {"href", "title"},
    "img": {"src", "alt", "title"},
    "button": {"type", "class"},
    "div": {"class", "data-lang"},
    "span": {"class"},
    "code": {"class"},
    "pre": {"class"},
    "ol": {"start"},
}
_FORMATTER = HtmlFormatter(nowrap=True, classprefix="tok-")


def _fence(renderer: Any, tokens: Any, idx: int, options: Any, env: Any) -> str:
    token = tokens[idx]
    language = (token.info or "").strip().split(maxsplit=1)[0].lower() if token.info else ""
    code = token.content
    try:
        lexer = get_lexer_by_name(language or "text")
        body = highlight(code, lexer, _FORMATTER)
    except ClassNotFound:
        body = escape(code)
    run = '<button type="button" class="code-run">Run</button>' if language in RUNNABLE else ""
    return (
        f'<div class="codeblock" data-lang="{escape(language)}">'
        f'<div class="code-tools"><span class="code-lang">{escape(language or "code")}</span>'
        f'<button type="button" class="code-copy">Copy</button>{run}</div>'
        f'<pre class="highlight"><code>{body}</code></pre></div>\n'
    )


@lru_cache(maxsize=1)
def _parser() -> MarkdownIt:
    md = MarkdownIt("commonmark", {"html": False, "linkify": False, "breaks": True})
    md.enable(["table", "strikethrough"])
    md.add_render_rule("fence", _fence)
    md.add_render_rule("code_block", _fence)
    return md


def render_markdown(text: str) -> str:
    """``text`` (untrusted Markdown) as safe HTML: raw HTML in it is shown as text, links keep
    only http(s)/mailto and get ``rel="noopener noreferrer"``, attributes outside a short
    allow-list (``on*``, ``hx-*``, ``style``...) are dropped."""
    html = _parser().render(text)
    return nh3.clean(
        html,
        tags=_TAGS,
        attributes=_ATTRIBUTES,
        url_schemes={"http", "https", "mailto"},
        link_rel="noopener noreferrer nofollow",
        strip_comments=True,
    )


def pygments_css() -> str:
    """The highlighting styles for light and dark themes (served as a static file)."""
    light = _FORMATTER.get_style_defs(".highlight")
    dark = HtmlFormatter(nowrap=True, classprefix="tok-", style="monokai").get_style_defs(
        ".highlight"
    )
    return f"{light}\n@media (prefers-color-scheme: dark) {{\n{dark}\n}}\n"
