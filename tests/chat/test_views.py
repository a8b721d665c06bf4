"""The chat page without a model: the notice that says so, and offline answers whose sources
lead to the documents' pages."""

from __future__ import annotations

import json
import re
from http import HTTPStatus
from pathlib import Path
from typing import Any

import pytest
from django.test import Client

from agent.knowledge.ingest import ingest_paths

pytestmark = pytest.mark.django_db


def send(client: Client, message: str, **extra: Any) -> Any:
    return client.post(
        "/chat", data=json.dumps({"message": message, **extra}), content_type="application/json"
    ).json()


def notice(html: str) -> str:
    start = html.index('<p class="offline-notice"')
    return html[start : html.index("</p>", start)]


def test_without_a_model_the_chat_says_so_and_how_to_add_one(
    client: Client, user: Any, knowledge: Any, tmp_path: Path, settings: Any
) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "llm.md").write_text("# Models\n\nSet LLM_BASE_URL.\n")
    (tmp_path / "README.md").write_text("# DevAssist\n")
    ingest_paths(paths=[tmp_path / "README.md", tmp_path / "docs"], collection="devassist_docs")
    settings.KNOWLEDGE_DEFAULT_COLLECTION = "devassist_docs"
    client.force_login(user)

    shown = notice(client.get("/").content.decode())

    assert "No language model is configured" in shown
    assert "<code>LLM_BASE_URL</code>" in shown
    assert '<a href="/docs/devassist_docs/docs/llm.md">docs/llm.md</a>' in shown
    assert client.get("/docs/devassist_docs/docs/llm.md").status_code == HTTPStatus.OK


def test_the_notice_names_the_page_when_the_docs_are_not_ingested(
    client: Client, user: Any, knowledge: Any
) -> None:
    client.force_login(user)

    assert "(see <code>docs/llm.md</code>)" in notice(client.get("/").content.decode())


def test_with_a_model_there_is_no_notice(client: Client, user: Any, scripted: Any) -> None:
    client.force_login(user)

    assert "offline-notice" not in client.get("/").content.decode()


def test_offline_answer_sources_link_to_their_chunks(client: Client, user: Any, guide: str) -> None:
    client.force_login(user)
    body = send(client, "How do I change the sandbox memory limit?", use_rag=True)

    page = client.get(f"/c/{body['conversation_id']}/").content.decode()
    answer = client.get(f"/ui/chat/runs/{body['run_id']}/answer").content.decode()

    for html in (page, answer):
        assert '<a href="/docs/guide_docs/sandbox.md#chunk-1">sandbox.md#1</a>' in html
        # Listed once, under the answer (Copy's Markdown source keeps the answer's own list).
        shown = re.sub(r'<template class="message-source">.*?</template>', "", html, flags=re.S)
        assert "Sources:" not in shown
    assert client.get("/docs/guide_docs/sandbox.md").status_code == HTTPStatus.OK


def test_an_offline_answer_that_found_nothing_lists_no_sources(
    client: Client, user: Any, guide: str
) -> None:
    client.force_login(user)
    body = send(client, "goldfish memory span and lifetime", use_rag=True)

    answer = client.get(f"/ui/chat/runs/{body['run_id']}/answer").content.decode()

    # The search found a chunk about memory, which shares one word of four with the question:
    # not quoted, so not a source.
    assert body["sources"] == []
    assert "Nothing in the documentation" in answer
    assert 'class="sources"' not in answer
