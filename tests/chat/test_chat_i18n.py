"""The chat page in Simplified Chinese (docs/i18n.md): its words, a step card's, the route
badges and the refusals it shows follow the reader's language, while the REST API, the stored
data and what the model sees stay English."""

from __future__ import annotations

import json
import re
from http import HTTPStatus
from typing import Any

import pytest
from django.template.loader import render_to_string
from django.test import Client
from django.utils import translation

from chat.exceptions import (
    ConversationBusy,
    MessageNotFound,
    MessageTooLarge,
    TitleInvalid,
)
from chat.models import Conversation
from chat.refusals import refusal_text
from chat.services import NewMessage, messages_append
from chat.turns import MESSAGE_MAX_CHARS
from chat.views import answer_view, step_view
from devassist.exceptions import DomainError
from devassist.markdown import render_markdown

CHINESE = {"Accept-Language": "zh-CN,zh;q=0.9,en;q=0.8"}
ENGLISH = {"Accept-Language": "en-US,en;q=0.9"}


def aria_labels(html: str) -> set[str]:
    return set(re.findall(r'aria-label="([^"]*)"', html))


@pytest.mark.django_db
def test_the_chat_page_speaks_chinese(client: Client, user: Any) -> None:
    client.force_login(user)

    page = client.get("/", headers=CHINESE).content.decode()

    assert '<html lang="zh-hans"' in page
    assert "<h2>有什么可以帮你的？</h2>" in page
    assert 'placeholder="给 DevAssist 发消息（Enter 发送，Shift+Enter 换行）"' in page
    assert re.findall(r'<option value="\w+">([^<]+)</option>', page) == [
        "自动",
        "对话",
        "RAG",
        "智能体",
    ]
    assert '<button type="submit" id="send-button">发送</button>' in page
    assert "+ 新对话" in page
    assert "还没有对话。" in page
    assert "<h3>键盘快捷键</h3>" in page
    assert "<dd>聚焦到消息输入框</dd>" in page
    assert f"已登录：{user.get_username()}" in page
    assert {"对话列表", "搜索对话", "消息", "路由"} <= aria_labels(page)


@pytest.mark.django_db
def test_turns_and_their_actions_speak_chinese(client: Client, user: Any) -> None:
    conversation = Conversation.objects.create(owner=user, title="")
    messages_append(
        conversation_id=conversation.id,
        messages=[
            NewMessage(role="user", content="Say hello"),
            NewMessage(role="assistant", content="Hello.\n\n```python\nprint(1)\n```"),
        ],
    )
    untitled = Conversation.objects.create(owner=user, title="")
    client.force_login(user)

    page = client.get(f"/c/{conversation.id}/", headers=CHINESE).content.decode()
    english = client.get(f"/c/{conversation.id}/", headers=ENGLISH).content.decode()
    empty = client.get(f"/c/{untitled.id}/", headers=CHINESE).content.decode()

    assert {
        "复制你的消息",
        "编辑并重新发送你的消息",
        "编辑你的消息",
        "复制回答（Markdown）",
        "重新生成此回答",
        "重命名“Say hello”",
        "删除“未命名”",
    } <= aria_labels(page)
    assert "对话将从这里分叉：之后的内容保留为另一个版本。" in page
    # The code block's toolbar, rendered on the server.
    assert '<button type="button" class="code-copy">复制</button>' in page
    assert '<button type="button" class="code-run">运行</button>' in page
    assert "<title>对话 · DevAssist</title>" in empty
    assert {"Copy your message", "Regenerate this answer", "Delete “Untitled”"} <= aria_labels(
        english
    )
    assert '<button type="button" class="code-run">Run</button>' in english


def test_a_step_card_speaks_chinese_and_keeps_the_programs_text() -> None:
    program = {
        "tool_name": "execute_code",
        "thought": "Run it",
        "tool_args": {"code": "print('hi')"},
        "observation": {"stdout": "hi\n", "exit_code": 137, "oom_killed": True, "truncated": True},
        "latency_ms": 120,
    }
    search = {
        "tool_name": "search_docs",
        "tool_args": {"query": "sandbox"},
        "observation": {"results": [], "message": "No documents matched."},
    }
    unformatted = {"tool_name": None, "error": "bad format"}

    with translation.override("zh-hans"):
        card = render_to_string("chat/_step.html", {"step": step_view(program)})
        searched = render_to_string("chat/_step.html", {"step": step_view(search)})
        odd = render_to_string("chat/_step.html", {"step": step_view(unformatted)})
        badge = str(answer_view(content="", mode="agent", model="m", sources=[])["route_label"])

    assert "<h4>思考</h4>" in card
    assert "<h4>参数</h4>" in card
    assert '<h4>退出码 <span class="step-exit">137</span>' in card
    assert '<span class="step-flag"> · 内存不足</span>' in card
    assert '<span class="step-flag"> · 输出已截断</span>' in card
    assert '<pre class="step-stdout">hi\n</pre>' in card
    assert "120 ms" in card
    assert "<h4>检索结果</h4>" in searched
    assert "No documents matched." in searched  # the tool's own words
    assert '<span class="step-tool">格式</span>' in odd
    assert "<h4>错误</h4>" in odd
    assert badge == "智能体"


@pytest.mark.django_db
def test_a_running_card_and_the_live_turn_speak_chinese() -> None:
    running = {"running": True, "label": "execute_code", "started_at_ms": 1, "live_id": "live-x"}
    with translation.override("zh-hans"):
        card = render_to_string("chat/_step.html", {"step": running})
        stopped = render_to_string("chat/_run_error.html", {"code": "cancelled"}).strip()
        failed = render_to_string(
            "chat/_run_error.html", {"code": "failed", "message": "The model endpoint failed."}
        ).strip()

    assert (
        'data-started-at-ms="1">运行中</span><span class="step-stopped muted">已停止</span>' in card
    )
    assert stopped == '<p class="run-error">已停止。</p>'
    # The run's error is data: it stays as the run stored it.
    assert failed == '<p class="run-error">失败：The model endpoint failed.</p>'


def test_refusals_are_worded_in_the_readers_language() -> None:
    too_long = MessageTooLarge(
        f"The message is longer than {MESSAGE_MAX_CHARS} characters.",
        details={"max_chars": MESSAGE_MAX_CHARS, "chars": MESSAGE_MAX_CHARS + 1},
    )
    busy = ConversationBusy(
        "The conversation has a run going: wait for it, or stop it, first.",
        details={"run_id": "x"},
    )
    unknown = MessageNotFound("Message 1234 does not exist.")
    unworded = DomainError("Something this page has no words for.")

    with translation.override("zh-hans"):
        chinese = [
            refusal_text(e)
            for e in (too_long, busy, unknown, TitleInvalid("The title is blank."), unworded)
        ]
    english = [refusal_text(e) for e in (too_long, busy, unknown)]

    assert chinese == [
        "消息超过 32000 个字符。",
        "此对话有一个运行正在进行：请等它结束，或先停止它。",
        "此对话中没有这条消息。",
        "标题不能为空。",
        "Something this page has no words for.",
    ]
    assert english == [
        "The message is longer than 32000 characters.",
        "The conversation has a run going: wait for it, or stop it, first.",
        "That message is not in this conversation.",
    ]


@pytest.mark.django_db
def test_the_page_refuses_in_chinese_and_the_api_in_english(client: Client, user: Any) -> None:
    conversation = Conversation.objects.create(owner=user, title="Mine")
    client.force_login(user)
    htmx = {"HX-Request": "true", **CHINESE}

    empty = client.post("/ui/chat/messages", {"message": "  ", "route": "auto"}, headers=htmx)
    too_long = client.post(
        "/ui/chat/messages", {"message": "x" * (MESSAGE_MAX_CHARS + 1)}, headers=htmx
    )
    rename = client.post(
        f"/ui/chat/conversations/{conversation.id}/rename", {"title": " "}, headers=htmx
    )
    api = client.post(
        "/chat",
        data=json.dumps({"message": "x" * (MESSAGE_MAX_CHARS + 1)}),
        content_type="application/json",
        headers=CHINESE,
    )

    assert empty.status_code == HTTPStatus.BAD_REQUEST
    assert '<p class="run-error">失败：消息为空。</p>' in empty.content.decode()
    assert too_long.status_code == HTTPStatus.REQUEST_ENTITY_TOO_LARGE
    assert "失败：消息超过 32000 个字符。" in too_long.content.decode()
    assert rename.status_code == HTTPStatus.BAD_REQUEST
    assert '<p class="error" id="rename-error" role="alert">标题不能为空。</p>' in (
        rename.content.decode()
    )
    assert '<h2 id="rename-dialog-title">重命名对话</h2>' in rename.content.decode()
    assert api.status_code == HTTPStatus.REQUEST_ENTITY_TOO_LARGE
    assert api.json()["error"]["message"] == "The message is longer than 32000 characters."


def test_markdown_code_tools_follow_the_language_and_stay_allowed() -> None:
    with translation.override("zh-hans"):
        html = render_markdown("```\nplain\n```\n\n```py\nprint(1)\n```")

    assert (
        '<span class="code-lang">代码</span><button type="button" class="code-copy">复制</button>'
        in html
    )
    assert '<button type="button" class="code-run">运行</button>' in html
