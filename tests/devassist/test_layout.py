"""Layout and themes in the system Chromium: every page (chat, trace list, trace page, debug
panel, login) fits a 390 px phone and a 1440 px desktop in light and dark without horizontal
overflow, whatever the titles and code; every visible text and control reaches WCAG AA contrast
on the colours the browser computed; the chat's sidebar is a drawer on a phone with the composer
kept at the bottom; the theme switch is remembered per user on the server."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from chat.models import Conversation
from chat.services import NewMessage, messages_append
from devassist.models import UserPreferences
from tests.browser import ARTIFACTS, PASSWORD, browser_user
from traces.models import PendingLogEvents, Step, Trace
from traces.store import OrmTraceStore, StepCreate

pytestmark = pytest.mark.django_db(transaction=True)

PHONE = {"width": 390, "height": 844}
DESKTOP = {"width": 1440, "height": 900}
LONG_WORD = "Supercalifragilistic" * 15  # 300 characters, no space to break at
LONG_LINE = "values = [" + ", ".join(["1234567"] * 44) + "]"  # over 400 characters
ANSWER = f"""Here is the long line:

```python
{LONG_LINE[:400]}
print(len(values))
```

| {" | ".join(f"column {i}" for i in range(14))} |
|{"---|" * 14}
| {" | ".join(f"value {i}" for i in range(14))} |

A long word `{LONG_WORD}` and a link <https://example.com/{LONG_WORD}>.
"""
AGENT_TURN = [
    'Thought: look it up\nAction: tool:search_docs\nargs: {"query": "sandbox memory"}',
    "Thought: done\nAction: final: The sandbox has **256 MB**; see `SANDBOX_MEMORY`.",
]

CONTRAST_JS = (Path(__file__).parent / "contrast.js").read_text()

# The focused element's ring (drawn outside it, on its parent's background): its contrast, or 0
# when it has none. Needs CONTRAST_JS to have run on the page.
FOCUS_RING_JS = r"""
() => {
  const el = document.activeElement;
  if (!el || el === document.body) return null;
  const style = getComputedStyle(el);
  const w = window.wcag;
  if (style.outlineStyle === "none" || parseFloat(style.outlineWidth) < 1) {
    return { name: w.name(el), ratio: 0 };
  }
  const around = w.background(el.parentElement);
  const ring = w.over(w.parse(style.outlineColor), around);
  return { name: w.name(el), ratio: w.ratio(ring, around) };
}
"""

OVERFLOW_JS = """
() => {
  const root = document.scrollingElement;
  const wide = [...document.body.querySelectorAll("*")]
    .filter((el) => el.getBoundingClientRect().right > root.clientWidth + 1 && el.checkVisibility())
    .slice(0, 5).map((el) => el.tagName + "." + el.className);
  return { scrollWidth: root.scrollWidth, clientWidth: root.clientWidth, wide };
}
"""


TARGETS = (
    "button, input:not([type=hidden]), select, textarea, .topbar a, .new-chat,"
    " .conversation-link, .trace-toolbar .tool"
)


def small_targets(page: Any) -> list[str]:
    """The visible controls smaller than 40 × 40 px (links and link-like buttons inside a
    sentence are exempt, as WCAG exempts inline targets)."""
    return page.eval_on_selector_all(
        TARGETS,
        """els => els.filter(e => e.checkVisibility({visibilityProperty: true}))
            .filter(e => !e.matches("p button.link"))
            .map(e => [e.id || e.className || e.tagName, e.getBoundingClientRect()])
            .filter(([, r]) => r.height < 40 || r.width < 40)
            .map(([n, r]) => `${n} ${Math.round(r.width)}x${Math.round(r.height)}`)""",
    )


def sign_in(page: Any, username: str) -> None:
    page.goto("/login/")
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(re.compile(r"^(?!.*/login/).*$"))


@pytest.fixture
def browse(chromium: Any, app_server: str) -> Iterator[Any]:
    """``browse(viewport, scheme)``: a page in a fresh context of that size whose system colour
    scheme is ``scheme``."""
    contexts: list[Any] = []

    def open_page(viewport: dict[str, int], scheme: str) -> Any:
        context = chromium.new_context(
            base_url=app_server, viewport=viewport, color_scheme=scheme, reduced_motion="reduce"
        )
        context.set_default_timeout(15_000)
        contexts.append(context)
        return context.new_page()

    yield open_page
    for context in contexts:
        context.close()


def save(page: Any, name: str) -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    path = ARTIFACTS / f"layout-{name}.png"
    page.screenshot(path=str(path))
    return path


def long_trace(user: Any) -> tuple[Trace, uuid.UUID]:
    """A trace with a long task, agent type (an OTel service's name, as long as it may be) and
    step name (no spaces), a failed step with a long error and data with a long line; returns
    it and the failed step's id."""
    trace = Trace.objects.create(user=user, task=LONG_WORD, agent_type=LONG_WORD[:100])
    goal, thought, action, result = (uuid.uuid4() for _ in range(4))
    OrmTraceStore().add_steps_sync(
        trace.id,
        [
            StepCreate(step_type="goal", id=goal, name="answer the question", tokens=12),
            StepCreate(step_type="thought", id=thought, parent_id=goal, name=LONG_WORD[:200]),
            StepCreate(
                step_type="action",
                id=action,
                parent_id=goal,
                name="execute_code",
                status="failed",
                error="NameError: " + LONG_WORD,
                data={"code": LONG_LINE, "stdout": "line\n" * 3},
                duration_ms=1234,
            ),
            StepCreate(step_type="result", id=result, parent_id=goal, data={"text": LONG_LINE}),
        ],
    )
    Trace.objects.filter(pk=trace.pk).update(status="failed")
    return trace, action


def long_otlp_trace(user: Any) -> Trace:
    """A running trace recorded over OTLP whose spans and log records wait for parents and
    spans that have not arrived, with long names, ids and bodies."""
    trace = Trace.objects.create(user=user, task=LONG_WORD, metadata={"otel": {}})
    waiting = [
        StepCreate(
            step_type="action",
            name=LONG_WORD[:200],
            data={"otel_span": {"parent_span_id": LONG_WORD}},
        ),
        StepCreate(step_type="memory_read", name="retrieve", description=LONG_LINE),
    ]
    OrmTraceStore().add_steps_sync(trace.id, waiting)
    Step.objects.filter(trace=trace).update(pending_parent_id=uuid.uuid4())
    PendingLogEvents.objects.create(
        trace=trace, step_id=uuid.uuid4(), span_id="f" * 16, events=[{"body": LONG_LINE}]
    )
    return trace


def chat_with_long_content(page: Any, live_model: Any, user: Any) -> str:
    """An agent turn (a step card and an answer) sent through the page, then a turn with a
    400-character code line and a wide table, and the longest title the conversation can hold
    (no spaces); returns the conversation's URL."""
    live_model.script(AGENT_TURN)
    page.goto("/")
    page.select_option("#route-select", "agent")
    page.fill("#composer-input", "how much memory does the sandbox get?")
    page.press("#composer-input", "Enter")
    page.locator(".turn.assistant:not(.live) .answer-body .markdown").wait_for()
    conversation = Conversation.objects.get(owner=user)
    messages_append(
        conversation_id=conversation.id,
        messages=[
            NewMessage(role="user", content="Show me a long line\n" + LONG_WORD),
            NewMessage(role="assistant", content=ANSWER),
        ],
    )
    longest = Conversation._meta.get_field("title").max_length
    Conversation.objects.filter(pk=conversation.pk).update(title=(LONG_WORD * 2)[:longest])
    return f"/c/{conversation.id}/"


def site(page: Any, live_model: Any, django_user_model: Any) -> dict[str, Any]:
    """A superuser with a long chat and a long trace, signed in on ``page``; the pages to
    visit (callables that open each on a page and wait for it to be ready)."""
    user = browser_user(django_user_model, "root", is_superuser=True, is_staff=True)
    sign_in(page, "root")
    chat_url = chat_with_long_content(page, live_model, user)
    trace, failed = long_trace(user)
    otlp = long_otlp_trace(user)

    def chat(p: Any) -> None:
        p.goto(chat_url)
        p.locator(".codeblock").first.wait_for()

    def trace_list(p: Any) -> None:
        p.goto("/traces/")
        p.locator(".trace-table").wait_for()

    def trace_page(p: Any) -> None:
        p.goto(f"/traces/{trace.id}/")
        p.locator(f"#s-{failed} a.name").click()
        p.locator("#detail .step-detail").wait_for()
        p.click("#timeline-toggle")
        p.locator("#timeline .timeline").wait_for()

    def otlp_trace_page(p: Any) -> None:
        p.goto(f"/traces/{otlp.id}/")
        for summary in (p.locator("#waiting-steps summary"), p.locator("#waiting-logs summary")):
            summary.click()
        p.locator("#waiting-logs .waiting-span").wait_for()

    def debug_panel(p: Any) -> None:
        p.goto(chat_url)
        switch = p.locator("#debug-mode-switch")
        if switch.get_attribute("aria-checked") != "true":
            switch.click()
        p.locator("#debug-open").click()
        p.locator("#debug-panel .dbg-group").first.wait_for()

    def api_tokens(p: Any) -> None:
        # A new token's answer (its text and variables) over the list, a long name in both.
        p.goto("/tokens/")
        p.locator("#token-name").fill(LONG_WORD[:100])
        p.locator(".token-form button[type=submit]").click()  # in either language
        p.locator("#token-env").wait_for()

    return {
        "chat": chat,
        "trace list": trace_list,
        "trace": trace_page,
        "otlp trace": otlp_trace_page,
        "debug": debug_panel,
        "api tokens": api_tokens,
    }


def login_page(browse: Any, viewport: dict[str, int], scheme: str) -> Any:
    page = browse(viewport, scheme)
    page.goto("/login/")
    return page


@pytest.mark.parametrize("scheme", ["light", "dark"])
@pytest.mark.parametrize("viewport", [PHONE, DESKTOP], ids=["phone", "desktop"])
def test_no_page_overflows_horizontally(browse, live_model, django_user_model, viewport, scheme):
    page = browse(viewport, scheme)
    pages = site(page, live_model, django_user_model)
    for name, visit in pages.items():
        visit(page)
        overflow = page.evaluate(OVERFLOW_JS)
        assert overflow["scrollWidth"] <= overflow["clientWidth"], (name, overflow)
        if viewport == PHONE:
            assert small_targets(page) == [], name
        if name in ("chat", "trace", "otlp trace"):
            save(
                page,
                f"{name.replace(' ', '-')}-{'phone' if viewport == PHONE else 'desktop'}-{scheme}",
            )
    login = login_page(browse, viewport, scheme)
    overflow = login.evaluate(OVERFLOW_JS)
    assert overflow["scrollWidth"] <= overflow["clientWidth"], ("login", overflow)
    if viewport == PHONE:
        assert small_targets(login) == []


def contrast_failures(page: Any, scheme: str) -> list[str]:
    report = page.evaluate(CONTRAST_JS)
    assert report["texts"] > 3
    assert report["controls"] > 0
    assert report["dark"] == (scheme == "dark")
    failures: list[str] = report["failures"]
    # Keyboard focus: the ring of each of the first stops reaches 3:1 where it is drawn.
    for _ in range(4):
        page.keyboard.press("Tab")
        ring = page.evaluate(FOCUS_RING_JS)
        if ring is not None and ring["ratio"] < 3:
            failures.append(f"focus ring of {ring['name']}: {ring['ratio']:.2f}")
    return failures


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_every_text_and_control_reaches_aa_contrast(browse, live_model, django_user_model, scheme):
    page = browse(DESKTOP, scheme)
    pages = site(page, live_model, django_user_model)
    failures: dict[str, list[str]] = {}
    for name, visit in pages.items():
        visit(page)
        if name == "chat":
            page.locator(".step summary").first.click()  # the card's body too
            page.locator("#help-button").click()  # and the shortcuts popover
        failures[name] = contrast_failures(page, scheme)
    phone = browse(PHONE, scheme)
    sign_in(phone, "root")
    pages["chat"](phone)
    phone.click("#drawer-toggle")
    failures["chat drawer"] = contrast_failures(phone, scheme)
    failures["login"] = contrast_failures(login_page(browse, DESKTOP, scheme), scheme)

    assert {name: found for name, found in failures.items() if found} == {}


def test_on_a_phone_the_sidebar_is_a_drawer_and_the_composer_stays_at_the_bottom(
    browse, django_user_model
):
    browser_user(django_user_model, "ada")
    page = browse(PHONE, "light")
    sign_in(page, "ada")
    page.goto("/")
    toggle = page.locator("#drawer-toggle")
    sidebar = page.locator("#sidebar")
    assert sidebar.is_hidden()
    assert toggle.get_attribute("aria-expanded") == "false"
    composer = page.locator("#composer").bounding_box()
    assert abs(composer["y"] + composer["height"] - PHONE["height"]) <= 1
    assert page.locator("#send-button").is_visible()

    # The keyboard opens it (focus inside), Escape closes it (focus back, nothing stopped).
    toggle.focus()
    page.keyboard.press("Enter")
    sidebar.wait_for(state="visible")
    assert toggle.get_attribute("aria-expanded") == "true"
    assert page.evaluate("document.activeElement.closest('#sidebar') !== null")
    assert page.locator(".chat-main").evaluate("e => e.inert")
    box = sidebar.bounding_box()
    assert box["x"] == 0
    assert box["width"] < PHONE["width"]
    page.keyboard.press("Escape")
    sidebar.wait_for(state="hidden")
    assert toggle.get_attribute("aria-expanded") == "false"
    assert page.evaluate("document.activeElement.id") == "drawer-toggle"

    # The backdrop closes it too.
    toggle.click()
    sidebar.wait_for(state="visible")
    page.mouse.click(PHONE["width"] - 10, PHONE["height"] // 2)
    sidebar.wait_for(state="hidden")
    assert not page.locator(".chat-main").evaluate("e => e.inert")

    # Touch targets on a phone: every control at least 40 px (the drawer's too).
    toggle.click()
    sidebar.wait_for(state="visible")
    save(page, "chat-phone-drawer")
    assert small_targets(page) == []

    # On a desktop the sidebar is beside the chat and the button is gone.
    page.set_viewport_size(DESKTOP)
    assert sidebar.is_visible()
    assert toggle.is_hidden()


def test_the_theme_switch_is_remembered_for_the_user_only(browse, django_user_model):
    ada = browser_user(django_user_model, "ada")
    browser_user(django_user_model, "bob")
    page = browse(DESKTOP, "light")
    sign_in(page, "ada")
    assert page.locator("html").get_attribute("data-theme") == "system"
    background = "getComputedStyle(document.body).backgroundColor"
    light = page.evaluate(background)

    page.get_by_role("button", name="Dark theme").click()
    page.wait_for_function("document.documentElement.dataset.theme === 'dark'")
    assert page.evaluate(background) != light
    assert page.get_by_role("button", name="Dark theme").get_attribute("aria-pressed") == "true"
    assert UserPreferences.objects.get(user=ada).theme == "dark"

    # Rendered by the server: dark from the first byte after a reload, on every page.
    page.reload()
    assert page.locator("html").get_attribute("data-theme") == "dark"
    assert 'data-theme="dark"' in page.request.get("/traces/").text()
    page.goto("/traces/")
    assert page.locator("html").get_attribute("data-theme") == "dark"

    other = browse(DESKTOP, "light")
    sign_in(other, "bob")
    assert other.locator("html").get_attribute("data-theme") == "system"
    assert other.evaluate(background) == light

    page.get_by_role("button", name="System theme").click()
    page.wait_for_function("document.documentElement.dataset.theme === 'system'")
    assert page.evaluate(background) == light
