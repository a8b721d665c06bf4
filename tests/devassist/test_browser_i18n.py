"""The zh-Hans UI in the system Chromium: a browser asking for Chinese gets the login page, the
trace list and the trace page in Chinese, words put in by the scripts included (the JavaScript
catalogue), and live updates worded the same way; the language switch takes the user to English
and back to the browser's language; every page still fits a phone and reaches AA contrast with
the Chinese words. Screenshots under tests/artifacts/."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from devassist.models import UserPreferences
from devassist.tokens import api_token_create
from tests.devassist.test_layout import (
    DESKTOP,
    OVERFLOW_JS,
    PHONE,
    contrast_failures,
    save,
    sign_in,
    site,
    small_targets,
)
from tests.traces.factories import step
from traces.models import Trace
from traces.store import OrmTraceStore

pytestmark = pytest.mark.django_db(transaction=True)

CHINA = {"locale": "zh-CN", "timezone_id": "Asia/Shanghai"}


@pytest.fixture
def page(chromium: Any, app_server: str) -> Iterator[Any]:
    """The ``page`` of tests/browser.py (which ``login`` and ``screenshot`` use) in a browser
    set to Chinese: it sends ``Accept-Language: zh-CN``."""
    context = chromium.new_context(base_url=app_server, viewport=DESKTOP, **CHINA)
    context.set_default_timeout(15_000)
    yield context.new_page()
    context.close()


def failed_trace(user: Any) -> Trace:
    """A finished trace whose program exited with 1 (built with the store's sync cores:
    Playwright keeps an event loop in this thread)."""
    trace = Trace.objects.create(user=user, task="用 Python 计算 1/0")
    goal = step("goal", name="task")
    thought = step("thought", parent=goal, name="iteration 1", tokens=42, duration_ms=800)
    action = step("action", parent=thought, name="execute_code", duration_ms=45)
    result = step(
        "result",
        parent=action,
        name="execute_code",
        data={"result": {"exit_code": 1, "stderr": "ZeroDivisionError: division by zero"}},
        duration_ms=40,
    )
    OrmTraceStore().add_steps_sync(trace.id, [goal, thought, action, result])
    OrmTraceStore().complete_trace_sync(trace.id, status="failed", total_duration_ms=885)
    return Trace.objects.get(pk=trace.pk)


def test_the_zh_hans_ui(page: Any, login: Any, screenshot: Any, app_server: str) -> None:
    page.goto("/login/")
    assert page.locator("html").get_attribute("lang") == "zh-hans"
    assert page.locator("h1").inner_text() == "登录"
    assert page.get_by_label("用户名").is_visible()
    screenshot("login")

    user = login("ada")
    failed = failed_trace(user)
    running = Trace.objects.create(user=user, task="一个仍在运行的追踪")
    OrmTraceStore().add_steps_sync(running.id, [step("goal", name="task", status="running")])

    page.goto("/traces/")
    assert page.locator("h1").inner_text() == "追踪记录"
    assert page.locator(".trace-table th").all_inner_texts()[:3] == ["任务", "状态", "模式"]
    assert page.locator(f"#t-{failed.id} .status-badge").inner_text() == "失败"
    assert page.locator(f"#t-{running.id} .status-badge").inner_text() == "运行中"
    assert "年" in page.locator(f"#t-{failed.id} time").inner_text()
    assert page.get_by_role("combobox", name="语言").input_value() == ""
    screenshot("list")

    # The finished trace: its failed program, the detail pane and the timeline in Chinese.
    page.goto(f"/traces/{failed.id}/")
    result = page.locator("#tree li.t-result")
    assert result.locator(".outcome-text").inner_text() == "失败 · 退出码 1"
    assert result.locator(".type").inner_text() == "结果"
    result.locator("a.name").click()
    page.locator("#detail .step-detail").wait_for()
    assert "耗时" in page.locator("#detail dl.fields").inner_text()
    page.get_by_role("button", name="时间线").click()
    page.locator("#timeline").filter(has_text="压缩空闲间隔").wait_for()
    # Words the page's script writes (gettext from the JavaScript catalogue).
    page.keyboard.press("s")
    page.locator("#live-state").filter(has_text="此追踪中没有慢步骤。").wait_for()
    screenshot("trace")

    # The running trace: its script says it is live, then how it ended, in Chinese.
    page.goto(f"/traces/{running.id}/")
    page.locator("#live-state").filter(has_text="实时").wait_for()
    _, token = api_token_create(user=user, name="agent")
    with httpx.Client(base_url=app_server, timeout=10) as api:
        response = api.post(
            f"/api/traces/{running.id}/complete",
            json={"status": "completed"},
            headers={"Authorization": f"Bearer {token}"},
        )
        assert response.status_code == 200, response.text
    page.locator("#trace-status").filter(has_text="已完成").wait_for()
    assert page.locator("#live-state").inner_text() == "已结束：已完成"
    screenshot("live")


def test_the_switch_overrides_the_browser_and_gives_the_choice_back(
    page: Any, login: Any, screenshot: Any
) -> None:
    user = login("ada")
    page.goto("/traces/")
    assert page.locator("html").get_attribute("lang") == "zh-hans"

    page.get_by_role("combobox", name="语言").select_option("en")
    page.wait_for_function("document.documentElement.lang === 'en'")
    assert page.locator("h1").inner_text() == "Traces"
    assert UserPreferences.objects.get(user=user).language == "en"
    screenshot("english")
    page.goto("/login/")  # signed in: redirected home, and still in English
    assert page.locator("html").get_attribute("lang") == "en"

    page.goto("/traces/")
    page.get_by_role("combobox", name="Language").select_option("")
    page.wait_for_function("document.documentElement.lang === 'zh-hans'")
    assert page.locator("h1").inner_text() == "追踪记录"
    assert UserPreferences.objects.get(user=user).language == ""


@pytest.fixture
def chinese_browser(chromium: Any, app_server: str) -> Iterator[Any]:
    """``open_page(viewport, scheme)``: a page of a Chinese browser of that size and colour
    scheme."""
    contexts: list[Any] = []

    def open_page(viewport: dict[str, int], scheme: str) -> Any:
        context = chromium.new_context(
            base_url=app_server,
            viewport=viewport,
            color_scheme=scheme,
            reduced_motion="reduce",
            **CHINA,
        )
        context.set_default_timeout(15_000)
        contexts.append(context)
        return context.new_page()

    yield open_page
    for context in contexts:
        context.close()


def test_in_chinese_every_page_fits_a_phone_and_reaches_aa_contrast(
    chinese_browser: Any, live_model: Any, django_user_model: Any
) -> None:
    phone = chinese_browser(PHONE, "light")
    pages = site(phone, live_model, django_user_model)
    for name, visit in pages.items():
        visit(phone)
        assert phone.locator("html").get_attribute("lang") == "zh-hans"
        overflow = phone.evaluate(OVERFLOW_JS)
        assert overflow["scrollWidth"] <= overflow["clientWidth"], (name, overflow)
        assert small_targets(phone) == [], name
        save(phone, f"zh-{name.replace(' ', '-')}-phone-light")
    login = chinese_browser(PHONE, "dark")
    login.goto("/login/")
    assert login.evaluate(OVERFLOW_JS)["scrollWidth"] <= PHONE["width"]
    assert small_targets(login) == []

    failures = {"login": contrast_failures(login, "dark")}
    desktop = chinese_browser(DESKTOP, "dark")
    sign_in(desktop, "root")
    for name in ("trace list", "trace", "debug"):
        pages[name](desktop)
        failures[name] = contrast_failures(desktop, "dark")
    assert {name: found for name, found in failures.items() if found} == {}
