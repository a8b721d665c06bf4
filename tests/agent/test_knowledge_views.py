"""The document pages (/docs/<collection>/<source>): who may read them, what they show (every
chunk in order under its anchor, Markdown rendered safely, links inside pointed at pages)."""

from __future__ import annotations

from http import HTTPStatus
from pathlib import Path
from typing import Any

import pytest
from django.test import Client

from agent.knowledge.ingest import ingest_paths
from agent.knowledge.links import document_url
from agent.knowledge.store import upsert_texts
from tests.chat.test_persistence import live_markup

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("knowledge")]

GUIDE = """# Guide

Read [the models page](llm.md#configuration), the [readme](../README.md) and
[the limits](#limits). [Gone](missing.md), ![a picture](shot.png),
[elsewhere](https://example.com/x), and `[code](llm.md)` stays code.

```python
print("[not a link](llm.md)")
```

## Limits

| name | value |
|------|-------|
| memory | 256 MB |

<script>alert(1)</script> <img src=x onerror="alert(2)"> [click](javascript:alert(3))
"""


def ingest(root: Path, collection: str, documents: dict[str, str]) -> None:
    """``documents`` (source → text) written under ``root`` and ingested from there."""
    for source, text in documents.items():
        (root / source).parent.mkdir(parents=True, exist_ok=True)
        (root / source).write_text(text)
    ingest_paths(paths=[root], collection=collection)


@pytest.fixture
def guide_docs(tmp_path: Path) -> str:
    ingest(
        tmp_path / "team",
        "team_docs",
        {
            "docs/guide.md": GUIDE,
            "docs/llm.md": "# Models\n\n## Configuration\n\nSet LLM_BASE_URL.\n",
            "README.md": "# Readme\n\nHello.\n",
            "tool.py": 'def run():\n    """Run `it`."""\n    return 1\n',
        },
    )
    return "team_docs"


def page(client: Client, collection: str, source: str) -> Any:
    return client.get(document_url(collection, source))


def test_the_page_shows_every_chunk_in_order_under_its_anchor(
    client: Client, user: Any, guide_docs: str
) -> None:
    client.force_login(user)

    response = page(client, guide_docs, "docs/guide.md")

    assert response.status_code == HTTPStatus.OK
    html = response.content.decode()
    assert html.index('id="chunk-0"') < html.index('id="chunk-1"')
    assert '<h3 id="limits" class="document-heading">Limits</h3>' in html
    assert "<table>" in html
    assert "<td>256 MB</td>" in html
    assert '<div class="codeblock" data-lang="python">' in html
    assert 'class="code-run"' not in html  # no chat.js here


def test_links_inside_point_at_document_pages_or_become_text(
    client: Client, user: Any, guide_docs: str
) -> None:
    client.force_login(user)

    html = page(client, guide_docs, "docs/guide.md").content.decode()

    assert 'href="/docs/team_docs/docs/llm.md#configuration"' in html
    assert 'href="/docs/team_docs/README.md"' in html
    assert 'href="/docs/team_docs/docs/guide.md#limits"' in html
    assert 'href="https://example.com/x"' in html
    assert "Gone" in html
    assert "missing.md" not in html
    assert "a picture" in html
    assert "shot.png" not in html
    # Code is never touched.
    assert "<code>[code](llm.md)</code>" in html
    assert "[not a link](llm.md)" in html.replace("&quot;", '"')
    linked = page(client, guide_docs, "docs/llm.md").content.decode()
    assert '<h3 id="configuration" class="document-heading">Configuration</h3>' in linked


def test_hostile_markdown_is_escaped(client: Client, user: Any, guide_docs: str) -> None:
    client.force_login(user)

    html = page(client, guide_docs, "docs/guide.md").content.decode()
    document = html[html.index('id="document"') :]

    assert live_markup(document) == []
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in document


def test_python_is_shown_as_code(client: Client, user: Any, guide_docs: str) -> None:
    client.force_login(user)

    html = page(client, guide_docs, "tool.py").content.decode()

    assert '<div class="codeblock" data-lang="python">' in html


def test_a_chunk_does_not_repeat_the_end_of_the_one_before(
    client: Client, user: Any, tmp_path: Path
) -> None:
    paragraphs = [f"Paragraph {i} " + "word " * 60 for i in range(8)]
    ingest(tmp_path, "long_docs", {"long.md": "# Long\n\n" + "\n\n".join(paragraphs)})
    client.force_login(user)

    html = page(client, "long_docs", "long.md").content.decode()

    assert html.count('class="document-part"') > 2
    assert all(html.count(f"Paragraph {i} ") == 1 for i in range(8))


def test_every_signed_in_user_reads_documents_as_the_collections_api_lists_them(
    client: Client, other_user: Any, guide_docs: str, other_api: Client
) -> None:
    client.force_login(other_user)

    assert page(client, guide_docs, "docs/guide.md").status_code == HTTPStatus.OK
    listed = [c["name"] for c in other_api.get("/api/collections").json()]
    assert guide_docs in listed


def test_missing_documents_collections_and_the_memory_are_404(
    client: Client, user: Any, guide_docs: str, settings: Any
) -> None:
    memory = settings.MEMORY["collection"]
    upsert_texts(memory, ids=["m1"], texts=["a secret"], metadatas=[{"source": "notes.md"}])
    client.force_login(user)

    assert page(client, guide_docs, "docs/nope.md").status_code == HTTPStatus.NOT_FOUND
    assert page(client, "nope_docs", "docs/guide.md").status_code == HTTPStatus.NOT_FOUND
    assert page(client, memory, "notes.md").status_code == HTTPStatus.NOT_FOUND


def test_anonymous_visitors_are_sent_to_the_login(client: Client, guide_docs: str) -> None:
    response = page(client, guide_docs, "docs/guide.md")

    assert response.status_code == HTTPStatus.FOUND
    assert response["Location"].startswith("/login/?next=/docs/team_docs/docs/guide.md")


def test_document_urls_stand_in_markdown_links_as_they_are() -> None:
    assert document_url("team_docs", "docs/a (draft).md", 3) == (
        "/docs/team_docs/docs/a%20%28draft%29.md#chunk-3"
    )
    assert document_url("zh_docs", "说明.md") == "/docs/zh_docs/%E8%AF%B4%E6%98%8E.md"
