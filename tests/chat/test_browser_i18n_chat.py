"""The chat in Simplified Chinese in the system Chromium, against DevAssist under daphne and the
scripted model: a browser asking for Chinese gets the composer, the route picker, a live step
card, the answer's route badge and actions, feedback, versions, a code block's Copy and Run,
the shortcuts, the rename dialog and the undoable delete in Chinese, words written by chat.js
included; the top bar takes at most two rows on a phone in either language. Screenshots of the
Chinese chat on a desktop and on a 390×844 phone under tests/artifacts/."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.browser import browser_user
from tests.chat.test_browser_actions import settled
from tests.chat.test_browser_chat import ANSWER, send
from tests.devassist.test_browser_i18n import CHINA
from tests.devassist.test_layout import DESKTOP, OVERFLOW_JS, PHONE, sign_in, small_targets

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def page(chromium: Any, app_server: str) -> Iterator[Any]:
    """The ``page`` that ``login`` and ``screenshot`` use, in a browser set to Chinese."""
    context = chromium.new_context(base_url=app_server, viewport=DESKTOP, **CHINA)
    context.set_default_timeout(15_000)
    yield context.new_page()
    context.close()


CODE_ANSWER = "运行这段代码：\n\n```python\nprint(6 * 7)\n```\n"

# The rows the top bar's controls sit in: the distinct vertical centres of its visible links,
# buttons and fields (the bar aligns each row's items on their centre).
TOPBAR_ROWS_JS = """
() => {
  const centres = [...document.querySelectorAll(".topbar a, .topbar button, .topbar select")]
    .filter((el) => el.checkVisibility())
    .map((el) => el.getBoundingClientRect())
    .filter((box) => box.width > 0)
    .map((box) => Math.round(box.top + box.height / 2));
  return [...new Set(centres)].sort((a, b) => a - b);
}
"""


def test_the_chat_in_chinese(page, login, live_model, screenshot, sandbox_image):
    live_model.script(
        [
            'Thought: 先运行\nAction: tool:execute_code\nargs: {"code": "print(6 * 7)"}',
            "Thought: 完成\nAction: final: 答案是 **42**。",
            "Thought: 再答一次\nAction: final: 还是 **42**。",
            CODE_ANSWER,
        ]
    )
    page.context.grant_permissions(["clipboard-read", "clipboard-write"])
    login("ada")
    page.goto("/")

    assert page.locator("html").get_attribute("lang") == "zh-hans"
    assert page.locator("#welcome h2").inner_text() == "有什么可以帮你的？"
    composer = page.get_by_role("textbox", name="消息")
    assert composer.get_attribute("placeholder") == (
        "给 DevAssist 发消息（Enter 发送，Shift+Enter 换行）"
    )
    route = page.get_by_role("combobox", name="路由")
    assert route.locator("option").all_inner_texts() == ["自动", "对话", "RAG", "智能体"]
    assert page.get_by_role("button", name="发送").is_visible()
    page.keyboard.press("?")
    shortcuts = page.get_by_role("dialog", name="键盘快捷键")
    assert "聚焦到消息输入框" in shortcuts.inner_text()
    page.keyboard.press("Escape")

    # An agent turn: its step card, then the answer with its badge and actions.
    send(page, "用 Python 计算 6*7", route="agent")
    card = page.locator(".turn.assistant .step:not(.running)").first
    card.wait_for()
    card.locator("summary").click()
    assert card.locator(".outcome-text").inner_text() == "成功"
    headings = card.locator("h4").all_inner_texts()
    assert headings[:3] == ["思考", "参数", "退出码 0"]
    assert card.locator(".step-stdout").inner_text() == "42\n"
    page.locator(f"{ANSWER} strong").wait_for()
    settled(page)
    answer = page.locator(".turn.assistant").last
    assert answer.locator(".badge").inner_text() == "智能体"
    assert answer.get_by_role("button", name="复制回答（Markdown）").is_visible()
    user_turn = page.locator(".turn.user").first
    user_turn.hover()
    assert user_turn.get_by_role("button", name="复制你的消息").is_visible()
    assert user_turn.get_by_role("button", name="编辑并重新发送你的消息").is_visible()

    # Copy: chat.js says it copied, in Chinese.
    copy = answer.get_by_role("button", name="复制回答（Markdown）")
    copy.click()
    answer.locator('.action-copy[aria-label="已复制"]').wait_for()
    assert page.evaluate("navigator.clipboard.readText()") == "答案是 **42**。"

    # Feedback: the thumbs, then a comment.
    answer.get_by_role("button", name="回答不好").click()
    comment = page.get_by_role("textbox", name="你对此回答的评论")
    comment.fill("太短了。")
    page.get_by_role("button", name="保存评论").click()
    page.locator(".feedback-comment summary").filter(has_text="你的评论").wait_for()
    assert answer.get_by_role("button", name="回答不好").get_attribute("aria-pressed") == "true"
    screenshot("desktop")

    # Regenerate: a second version, switchable.
    answer.get_by_role("button", name="重新生成此回答").click()
    page.locator(ANSWER).get_by_text("还是").wait_for()
    settled(page)
    versions = page.get_by_role("group", name="此回答的各个版本")
    assert versions.locator(".version-count").inner_text() == "2 / 2"
    assert versions.get_by_role("button", name="上一个版本").is_enabled()
    assert versions.get_by_role("button", name="下一个版本").is_disabled()

    # A chat turn with a code block: its toolbar, and Run's output, in Chinese.
    send(page, "给我一段代码", route="chat")
    block = page.locator(f"{ANSWER} .codeblock").last
    block.wait_for()
    assert page.locator(".turn.assistant .badge").last.inner_text() == "对话"
    assert block.locator(".code-copy").inner_text() == "复制"
    block.get_by_role("button", name="运行").click()
    block.locator(".code-output .out-stdout").wait_for(timeout=30_000)
    assert block.locator(".code-output .out-status").first.inner_text().startswith("退出码 0 · ")
    block.locator(".code-copy").click()
    block.locator(".code-copy").filter(has_text="已复制").wait_for()

    # On a phone: the same conversation, the top bar in two rows at most.
    page.set_viewport_size(PHONE)
    page.reload()
    page.locator(ANSWER).last.wait_for()
    assert len(page.evaluate(TOPBAR_ROWS_JS)) <= 2
    assert page.evaluate(OVERFLOW_JS)["scrollWidth"] <= PHONE["width"]
    assert small_targets(page) == []
    screenshot("phone")
    page.get_by_role("button", name="对话列表").click()
    page.locator("#sidebar").wait_for(state="visible")
    screenshot("phone-drawer")


def test_rename_and_delete_in_chinese(page, login, live_model, screenshot):
    live_model.script(["你好。"])
    login("ada")
    page.goto("/")
    send(page, "打个招呼", route="chat")
    settled(page)
    row = page.locator(".conversation.current")

    row.get_by_role("button", name="重命名“打个招呼”").click()
    dialog = page.get_by_role("dialog", name="重命名对话")
    dialog.wait_for()
    title = dialog.get_by_label("标题")
    assert dialog.get_by_role("button", name="取消").is_visible()
    title.fill(" ")
    dialog.get_by_role("button", name="保存").click()
    dialog.get_by_role("alert").filter(has_text="标题不能为空。").wait_for()
    dialog.get_by_label("标题").fill("问候")
    screenshot("rename-dialog")
    dialog.get_by_label("标题").press("Enter")
    dialog.wait_for(state="detached")
    assert row.locator(".conversation-link").inner_text() == "问候"

    row.get_by_role("button", name="删除“问候”").click()
    toast = page.locator(".toast")
    toast.wait_for()
    assert toast.inner_text().startswith("已删除“问候”。")
    assert toast.get_by_role("button", name="关闭").is_visible()
    screenshot("deleted")
    toast.get_by_role("button", name="撤销").click()
    page.wait_for_url("**/c/*/")
    assert page.locator(".conversation.current .conversation-link").inner_text() == "问候"
    assert page.get_by_role("button", name="重新生成此回答").is_visible()


@pytest.fixture
def phones(chromium: Any, app_server: str) -> Iterator[Any]:
    """``open_phone(locale)``: a 390×844 page of a browser asking for that locale."""
    contexts: list[Any] = []

    def open_phone(locale: str) -> Any:
        context = chromium.new_context(
            base_url=app_server, viewport=PHONE, locale=locale, reduced_motion="reduce"
        )
        context.set_default_timeout(15_000)
        contexts.append(context)
        return context.new_page()

    yield open_phone
    for context in contexts:
        context.close()


def test_the_top_bar_takes_two_rows_at_most_on_a_phone_in_either_language(
    phones, django_user_model
):
    # Staff: the bar's longest form (the Admin link too).
    browser_user(django_user_model, "root", is_staff=True, is_superuser=True)
    for locale, lang in (("zh-CN", "zh-hans"), ("en-US", "en")):
        phone = phones(locale)
        sign_in(phone, "root")
        for url in ("/", "/traces/"):
            phone.goto(url)
            assert phone.locator("html").get_attribute("lang") == lang
            rows = phone.evaluate(TOPBAR_ROWS_JS)
            assert len(rows) <= 2, (lang, url, rows)
            assert small_targets(phone) == [], (lang, url)
