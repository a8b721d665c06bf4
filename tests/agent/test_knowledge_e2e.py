"""End to end: with no model configured, /agent answers a question about DevAssist from its
own ingested documentation, with sources (the knowledge issue's done-criterion)."""

from __future__ import annotations

import json
from http import HTTPStatus
from pathlib import Path
from typing import Any

import pytest
from django.test import Client

from agent.knowledge.ingest import ingest_paths
from agent.llm import get_llm

REPO = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("knowledge")]


def ask(client: Client, message: str, **extra: Any) -> Any:
    return client.post(
        "/agent", data=json.dumps({"message": message, **extra}), content_type="application/json"
    )


@pytest.fixture
def sample_docs(settings: Any) -> None:
    """What `make run` does: README.md and docs/ into devassist_docs."""
    ingest_paths(paths=[REPO / "README.md", REPO / "docs"], collection="devassist_docs")
    assert settings.KNOWLEDGE_DEFAULT_COLLECTION == "devassist_docs"


def test_offline_agent_answers_from_the_docs_with_sources(api: Client, sample_docs: None) -> None:
    assert get_llm().model == "offline"

    response = ask(api, "how do I configure the sandbox?")

    assert response.status_code == HTTPStatus.OK, response.content
    body = response.json()
    (step,) = body["steps"]
    assert step["tool_name"] == "search_docs"
    assert step["tool_args"] == {"query": "how do I configure the sandbox?"}
    observation = step["observation"]  # the structured result, not the text the model read
    assert observation["results"][0]["source"] == "docs/sandbox.md"
    answer = body["answer"]
    assert answer.startswith("Here is what the documentation says:")
    assert "[1]" in answer
    sources = answer.split("Sources:\n", 1)[1].splitlines()
    assert sources[0].startswith("1. docs/sandbox.md#")
    assert all(line[0].isdigit() and ". " in line and "#" in line for line in sources)


def test_a_chinese_question_gets_a_chinese_answer_with_sources(
    api: Client, sample_docs: None
) -> None:
    body = ask(api, "如何配置沙箱的内存上限？").json()

    assert body["steps"][0]["tool_name"] == "search_docs"
    assert body["answer"].startswith("文档中的相关内容：")
    assert "Sources:\n1. docs/zh/overview.md#" in body["answer"]


def test_without_search_docs_in_the_run_the_offline_answer_is_unchanged(
    api: Client, sample_docs: None
) -> None:
    body = ask(api, "how do I configure the sandbox?", tools=["execute_code"]).json()

    assert body["steps"] == []
    assert body["answer"].startswith("No language model is configured")


def test_without_documents_the_offline_answer_is_unchanged(api: Client) -> None:
    body = ask(api, "how do I configure the sandbox?").json()

    assert body["steps"] == []
    assert body["answer"].startswith("No language model is configured")
