"""End to end: with no model configured, /agent answers a question about DevAssist from its
own ingested documentation, with sources (the knowledge issue's done-criterion)."""

from __future__ import annotations

import json
import re
from http import HTTPStatus
from pathlib import Path
from typing import Any

import pytest
from django.test import Client

from agent.knowledge.ingest import ingest_paths
from agent.llm import get_llm

REPO = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("knowledge")]


def chat(client: Client, message: str) -> Any:
    return client.post(
        "/chat", data=json.dumps({"message": message}), content_type="application/json"
    )


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
    assert answer.startswith("No language model is configured, so here is what the documentation")
    assert "[1]" in answer
    sources = answer.split("Sources:\n", 1)[1].splitlines()
    assert sources[0].startswith("1. [docs/sandbox.md#")
    assert all(
        re.fullmatch(r"\d+\. \[[^\]]+#\d+\]\(/docs/devassist_docs/\S+#chunk-\d+\)", line)
        for line in sources
    )


def test_a_chinese_question_gets_a_chinese_answer_with_sources(
    api: Client, sample_docs: None
) -> None:
    body = ask(api, "如何配置沙箱的内存上限？").json()

    assert body["steps"][0]["tool_name"] == "search_docs"
    assert body["answer"].startswith("尚未配置语言模型，以下是文档中的相关内容：")
    assert "Sources:\n1. [docs/zh/overview.md#" in body["answer"]


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


@pytest.mark.parametrize(
    ("message", "opening"),
    [
        ("hello", "No language model is configured"),
        ("thanks!", "No language model is configured"),
        ("你好", "尚未配置语言模型"),
        ("谢谢", "尚未配置语言模型"),
    ],
)
def test_greetings_in_the_chat_get_the_no_model_answer(
    api: Client, sample_docs: None, message: str, opening: str
) -> None:
    body = chat(api, message).json()

    assert body["steps"] == []  # nothing searched, nothing quoted
    assert body["reply"].startswith(opening)
    assert "LLM_BASE_URL" in body["reply"]
    assert "[docs/llm.md](/docs/devassist_docs/docs/llm.md)" in body["reply"]


def test_a_chat_question_that_nothing_matches_says_so_and_that_no_model_is_configured(
    api: Client, sample_docs: None
) -> None:
    body = chat(api, "tell me about kubernetes helm charts").json()

    assert body["steps"][0]["tool_name"] == "search_docs"
    assert body["reply"].startswith(
        "Nothing in the documentation (devassist_docs) matches this question, and no language "
        "model is configured"
    )


def test_every_source_and_link_of_an_offline_answer_leads_to_a_page(
    client: Client, user: Any, sample_docs: None
) -> None:
    client.force_login(user)
    answers = [
        ask(client, question).json()["answer"]
        for question in (
            "how do I configure the sandbox?",
            "which environment variables configure the model endpoint?",
            "如何配置沙箱的内存上限？",
        )
    ]

    answers.append(chat(client, "hello").json()["reply"])
    links = {url for answer in answers for url in re.findall(r"\]\((/docs/[^)\s]+)\)", answer)}
    assert len(links) >= 3
    for url in links:
        assert client.get(url.partition("#")[0]).status_code == HTTPStatus.OK, url
