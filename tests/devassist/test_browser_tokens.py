"""The API tokens page (/tokens/) in the system Chromium, against DevAssist under daphne: a token
made on the page is shown once, with the two variables that send an agent's traces here, and
those variables work (the OpenTelemetry SDK's own OTLP/HTTP exporter, configured by them alone,
stores a trace for the user); revoking asks first, and a revoked token is refused at once; the
page fits a phone whatever the token's name; it is in Chinese for a browser asking for it.
Screenshots under tests/artifacts/."""

from __future__ import annotations

import re
import shlex
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace.export import SpanExportResult

from devassist.models import ApiToken
from tests.browser import browser_user
from tests.devassist.test_browser_i18n import CHINA
from tests.devassist.test_layout import DESKTOP, LONG_WORD, OVERFLOW_JS, PHONE, sign_in
from tests.traces.otlp_clients import sdk_spans
from traces.models import Trace

pytestmark = pytest.mark.django_db(transaction=True)

# English SHORT_DATETIME_FORMAT ("m/d/Y P"): "12/08/2026 2:06 a.m.", "12/08/2026 noon".
SHORT_DATETIME = r"\d{2}/\d{2}/\d{4} (\d{1,2}(:\d{2})? [ap]\.m\.|noon|midnight)"
# A token's name as a careless (or hostile) user may type it: markup, quotes, a template tag.
MARKUP_NAME = """<b>"o'neil"</b> & {{ co }} <img src=x onerror="window.pwned=1">"""


def create_token(page: Any, name: str, *, button: str = "Create token") -> str:
    """Submit the form for a new token named ``name``; returns the text the page shows."""
    page.locator("#token-name").fill(name)
    page.get_by_role("button", name=button).click()
    page.locator("#token-text").wait_for()
    text: str = page.locator("#token-text").input_value()
    return text


def answer(messages: list[str], *, accept: bool) -> Callable[[Any], None]:
    """A dialog handler that notes the dialog's message in ``messages`` and accepts or
    dismisses it."""

    def handle(dialog: Any) -> None:
        messages.append(dialog.message)
        if accept:
            dialog.accept()
        else:
            dialog.dismiss()

    return handle


def token_row(page: Any, name: str) -> Any:
    return page.locator("#tokens tbody tr").filter(has_text=name)


def api_status(app_server: str, token: str) -> int:
    """The status ``GET /api/traces`` answers with ``token`` as a bearer token."""
    response = httpx.get(
        f"{app_server}/api/traces", headers={"Authorization": f"Bearer {token}"}, timeout=10
    )
    return response.status_code


def shell_exports(text: str) -> dict[str, str]:
    """The variables the ``export NAME=value`` lines of ``text`` set, as a shell reads them."""
    variables = {}
    for line in text.splitlines():
        command, assignment = shlex.split(line)
        assert command == "export", line
        name, _, value = assignment.partition("=")
        variables[name] = value
    return variables


def test_a_token_made_on_the_page_sends_an_agents_traces(
    page: Any, login: Any, screenshot: Any, app_server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    user = login("ada")
    page.locator("nav").get_by_role("link", name="API", exact=True).click()
    page.wait_for_url("**/tokens/")
    assert page.locator("h1").inner_text() == "API tokens"
    assert page.get_by_role("link", name="API reference").get_attribute("href") == "/api/docs"
    assert page.locator("#tokens .empty").inner_text() == "No tokens yet."

    token = create_token(page, "my-agent")
    assert re.fullmatch(r"da_[A-Za-z0-9_-]{40,}", token), token
    assert "Token “my-agent” created." in page.get_by_role("status").inner_text()
    env = page.locator("#token-env").inner_text()
    assert f"OTEL_EXPORTER_OTLP_ENDPOINT={app_server}" in env
    assert f"x-api-key={token}" in env
    variables = shell_exports(env)
    assert variables == {
        "OTEL_EXPORTER_OTLP_ENDPOINT": app_server,
        "OTEL_EXPORTER_OTLP_HEADERS": f"x-api-key={token}",
    }
    assert token_row(page, "my-agent").locator("td").nth(1).inner_text() == f"{token[:10]}…"
    screenshot("created")

    # The two variables, as the agent's shell would set them, are all the SDK's exporter needs:
    # it posts protobuf to <endpoint>/v1/traces with the x-api-key header.
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    spans = sdk_spans(lambda tracer: tracer.start_span("answer the question").end())
    exporter = OTLPSpanExporter()
    try:
        assert exporter.export(spans) == SpanExportResult.SUCCESS
    finally:
        exporter.shutdown()
    trace = Trace.objects.get(pk=uuid.UUID(int=spans[0].context.trace_id))
    assert trace.user == user
    assert ApiToken.objects.get(user=user, name="my-agent").last_used_at is not None

    # Its text is never shown again; the list says when it was last used.
    page.goto("/tokens/")
    assert token not in page.content()
    assert page.locator("#token-text, #token-env").count() == 0
    row = token_row(page, "my-agent")
    assert row.locator("td.token-name").inner_text() == "my-agent"
    last_used = row.locator("td").nth(3).inner_text()
    assert last_used != "never"
    assert re.fullmatch(SHORT_DATETIME, last_used), last_used
    assert row.locator("button.token-revoke").is_visible()
    screenshot("used")


def test_revoking_asks_first_and_the_token_stops_working(
    page: Any, login: Any, screenshot: Any, app_server: str
) -> None:
    user = login("ada")
    page.goto("/tokens/")
    token = create_token(page, MARKUP_NAME)
    create_token(page, "my-agent")  # the page now shows this one's text; the first is listed
    assert api_status(app_server, token) == 200
    # The name is text everywhere: in the list, the button's label and the confirm question.
    row = token_row(page, MARKUP_NAME)
    assert row.locator("td.token-name").inner_text() == MARKUP_NAME
    assert page.locator("#tokens img, .token-created img").count() == 0
    revoke = row.get_by_role("button", name=f"Revoke “{MARKUP_NAME}”", exact=True)
    revokes: list[str] = []
    page.on("request", lambda r: revokes.append(r.url) if r.url.endswith("/revoke") else None)
    messages: list[str] = []

    # Dismissed: nothing is sent, the token still works.
    page.once("dialog", answer(messages, accept=False))
    revoke.click()
    assert messages == [f"Revoke “{MARKUP_NAME}”? Programs using it stop being let in at once."]
    assert api_status(app_server, token) == 200
    assert ApiToken.objects.get(user=user, name=MARKUP_NAME).revoked_at is None

    # Accepted: the list is swapped in with the row revoked; the token is refused at once.
    page.once("dialog", answer(messages, accept=True))
    revoke.click()
    row.filter(has_text="revoked").wait_for()
    assert len(messages) == 2
    assert len(revokes) == 1, revokes  # the dismissed dialog sent nothing
    assert row.locator("button.token-revoke").count() == 0
    assert "revoked" in (row.get_attribute("class") or "")
    assert re.fullmatch(f"revoked {SHORT_DATETIME}", row.locator("td").nth(4).inner_text())
    assert api_status(app_server, token) == 401
    assert ApiToken.objects.get(user=user, name=MARKUP_NAME).revoked_at is not None
    # The swap replaced the list alone (no page inside the page), with the other token still
    # active and listed first now; the names are still text.
    assert page.locator("#tokens").count() == 1
    assert page.locator("h1").count() == 1
    assert page.locator("#tokens td.token-name").all_inner_texts() == ["my-agent", MARKUP_NAME]
    assert token_row(page, "my-agent").locator("button.token-revoke").is_visible()
    assert page.locator("#tokens img").count() == 0
    assert page.evaluate("window.pwned") is None
    assert page.url.endswith("/tokens/")
    screenshot("revoked")

    # The list as the server now gives it says the same.
    page.goto("/tokens/")
    assert token_row(page, MARKUP_NAME).locator("td").nth(4).inner_text().startswith("revoked ")


def test_the_page_fits_a_phone_whatever_the_name(page: Any, login: Any, screenshot: Any) -> None:
    page.set_viewport_size(PHONE)
    login("ada")
    page.goto("/tokens/")
    name = LONG_WORD[:100]  # no space, nor hyphen, to break at
    create_token(page, name)
    screenshot("phone")
    created = page.evaluate(OVERFLOW_JS)
    create = page.get_by_role("button", name="Create token")
    assert create.is_visible()
    box = create.bounding_box()
    assert box is not None
    assert box["x"] >= 0
    assert box["x"] + box["width"] <= PHONE["width"]
    assert token_row(page, name).locator("td.token-name").inner_text() == name

    page.goto("/tokens/")  # the list alone
    listed = page.evaluate(OVERFLOW_JS)
    assert listed["scrollWidth"] <= listed["clientWidth"], listed
    # The row's Revoke button is in view, not off to the right of a scrolled table.
    revoke = token_row(page, name).locator("button.token-revoke").bounding_box()
    assert revoke is not None
    assert revoke["x"] + revoke["width"] <= PHONE["width"], revoke
    # The answer to the form, with the new token's text and the name in its message.
    assert created["scrollWidth"] <= created["clientWidth"], created


@pytest.fixture
def chinese_page(chromium: Any, app_server: str) -> Iterator[Any]:
    """A page of a browser set to Chinese (``Accept-Language: zh-CN``), as in
    test_browser_i18n.py."""
    context = chromium.new_context(base_url=app_server, viewport=DESKTOP, **CHINA)
    context.set_default_timeout(15_000)
    yield context.new_page()
    context.close()


def test_the_page_in_chinese(chinese_page: Any, django_user_model: Any) -> None:
    page = chinese_page
    browser_user(django_user_model, "ada")
    sign_in(page, "ada")
    page.locator("nav").get_by_role("link", name="API", exact=True).click()
    page.wait_for_url("**/tokens/")
    assert page.locator("html").get_attribute("lang") == "zh-hans"
    assert page.locator("h1").inner_text() == "API 令牌"
    assert page.title() == "API 令牌 · DevAssist"
    assert page.locator("#tokens .empty").inner_text() == "还没有令牌。"

    create_token(page, "my-agent", button="创建令牌")
    assert "令牌“my-agent”已创建。" in page.get_by_role("status").inner_text()
    messages: list[str] = []
    page.once("dialog", answer(messages, accept=True))
    token_row(page, "my-agent").get_by_role("button", name="撤销“my-agent”").click()
    token_row(page, "my-agent").filter(has_text="已于").wait_for()
    assert messages == ["撤销“my-agent”？使用它的程序将立即无法访问。"]
    assert token_row(page, "my-agent").locator("td").nth(4).inner_text().endswith("撤销")
