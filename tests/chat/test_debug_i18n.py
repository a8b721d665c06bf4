"""The debug panel in Simplified Chinese: its words, labels and outcomes translated, its data
(the embedded JSON the panel copies, as the debug API answers it) left in English."""

from __future__ import annotations

from typing import Any

import pytest

from tests.chat.test_debug_views import browser_as, chat, elements, embedded_data, panel_url
from tests.chat.test_debug_views import switch as debug_mode

pytestmark = pytest.mark.django_db

CHINESE = {"Accept-Language": "zh-CN,zh;q=0.9"}


def test_the_panel_speaks_the_readers_language_and_keeps_its_data_english(
    superuser: Any, scripted: Any
) -> None:
    scripted.script(["第一个回答。"])
    answer = chat(superuser, "你好")
    admin = browser_as(superuser)
    debug_mode(admin, True)

    html = admin.get(panel_url(answer["conversation_id"]), headers=CHINESE).content.decode()

    filters = [a["data-filter"] for _, a in elements(html) if a.get("class") == "dbg-filter"]
    assert filters == ["all", "user", "model", "tool", "error", "system"]
    assert '全部 <span class="dbg-count">' in html
    assert '<span class="dbg-label">用户</span>' in html
    assert '<span class="dbg-status-badge st-completed">已完成</span>' in html
    assert "复制运行" in html
    assert "年" in html  # the run's start, in the locale's date format
    rows = [a for _, a in elements(html) if a.get("class", "").startswith("dbg-entry")]
    assert {row["data-status"] for row in rows} == {"已完成"}
    assert {row["data-outcome"] for row in rows} == {"成功"}
    data = embedded_data(html)
    labels = [entry["label"] for group in data["groups"] for entry in group["entries"]]
    assert "User" in labels
    assert data["groups"][0]["status"] == "completed"
