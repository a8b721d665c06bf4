"""The page of an ingested document, ``/docs/<collection>/<source>``: its chunks in order from
the knowledge store, each under the anchor ``chunk-<index>``, section headings under the
anchors GitHub gives them, Markdown rendered safely (``devassist.markdown``), Python source as
code, other text as text. Every signed-in user reads every collection the collections API
lists; an unknown document, an unknown collection and the agent's internal memory are 404."""

from __future__ import annotations

from typing import Any

from django.http import Http404, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from agent.knowledge.blocks import fenced
from agent.knowledge.links import heading_anchor
from agent.knowledge.selectors import Document, document_get
from devassist.api import http_status
from devassist.exceptions import DomainError, NotFound
from devassist.htmx import HtmxHttpRequest
from devassist.markdown import render_markdown


@require_GET
def document_page(request: HtmxHttpRequest, collection: str, source: str) -> HttpResponse:
    try:
        document = document_get(collection=collection, source=source)
    except NotFound as exc:
        raise Http404(exc.message) from exc
    except DomainError as exc:
        return render(
            request,
            "agent/document.html",
            {"collection": collection, "source": source, "error": exc.message},
            status=http_status(exc),
        )
    return render(
        request,
        "agent/document.html",
        {"collection": collection, "source": source, "parts": document_view(document)},
    )


def document_view(document: Document) -> list[dict[str, Any]]:
    """The parts of ``document`` as ``agent/document.html`` shows them: ``anchor``, the
    section ``heading`` (with its ``heading_id`` and ``level``) where a new section starts,
    and ``html`` (Markdown rendered, sanitised) or ``text`` (shown as it is, escaped)."""
    shown: list[dict[str, Any]] = []
    section = None
    for part in document.parts:
        view: dict[str, Any] = {"anchor": f"chunk-{part.index}"}
        if part.section != section and part.title:
            view["heading"] = part.title
            view["heading_id"] = heading_anchor(part.title)
            view["level"] = min(part.section.count(" > ") + 2, 6)
        section = part.section
        if document.format == "markdown":
            view["html"] = render_markdown(part.text, code_tools=False)
        elif document.format == "python":
            view["html"] = render_markdown(fenced(part.text, "python"), code_tools=False)
        else:
            view["text"] = part.text
        shown.append(view)
    return shown
