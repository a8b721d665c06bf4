"""The trace browser in the system Chromium against DevAssist under daphne: a 2,000-step trace,
lazy expansion and "show more", a deep link six levels down, the next error by keyboard, and a
step recorded through the ingestion API appearing live."""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import httpx
import pytest

from devassist.tokens import api_token_create
from tests.agent.test_live_events import QUIET_S
from tests.browser import PASSWORD
from tests.traces.factories import step
from traces.models import Trace
from traces.store import OrmTraceStore, StepCreate
from traces.templatetags.trace_format import cost

pytestmark = pytest.mark.django_db(transaction=True)


def make_trace(user: Any, task: str, **fields: Any) -> Trace:
    # Playwright keeps an event loop in this thread, so the store's sync cores are used.
    return Trace.objects.create(user=user, task=task, **fields)


def add(trace: Trace, *steps: StepCreate) -> None:
    OrmTraceStore().add_steps_sync(trace.id, steps)


def react_trace(user: Any, *, iterations: int, fail_at: int | None = None, **kwargs: Any) -> Trace:
    """A goal, ``iterations`` thought → action → result iterations, and a response, timed: a
    thought takes 0.8 s, a tool 40 ms (every tenth 12 s), and the run waits a minute after the
    second iteration."""
    trace = make_trace(user, task="Sum the primes below 1000", **kwargs)
    clock = datetime(2025, 6, 1, 9, 0, tzinfo=UTC)

    def timed(kind: str, parent: Any, ms: int, **fields: Any) -> StepCreate:
        nonlocal clock
        made = step(kind, parent=parent, started_at=clock, duration_ms=ms, **fields)
        clock += timedelta(milliseconds=ms)
        return made

    goal = step("goal", name="task", data={"task": "Sum the primes below 1000"}, started_at=clock)
    items = [goal]
    for i in range(iterations):
        thought = timed("thought", goal, 800, name=f"iteration {i + 1}", tokens=40)
        action = step(
            "action",
            parent=thought,
            name="execute_code",
            started_at=clock,
            data={"tool_name": "execute_code", "arguments": {"code": f"print({i % 5})"}},
        )
        failed = i == fail_at
        result = timed(
            "result",
            action,
            12_000 if i % 10 == 9 else 40,
            name="execute_code",
            status="failed" if failed else "completed",
            error="ZeroDivisionError: division by zero" if failed else "",
            data={"stdout": "" if failed else str(i % 5)},
        )
        items += [thought, action, result]
        if i == 1:
            clock += timedelta(minutes=1)
    items.append(timed("response", goal, 300, name="answer", data={"answer": "76127"}))
    for start in range(0, len(items), 1000):
        add(trace, *items[start : start + 1000])
    return trace


def rows(page: Any) -> int:
    return page.locator("#tree li.node").count()


def shown_rows(page: Any) -> list[str]:
    """The ids of the tree's rows that are shown (in open lists), in page order."""
    return page.evaluate(
        "Array.from(document.querySelectorAll('#tree li.node')).filter((li) => "
        "li.offsetParent !== null).map((li) => li.dataset.id)"
    )


def test_a_2000_step_trace_opens_bounded_and_expands_lazily(page, login, screenshot) -> None:
    user = login("ada")
    trace = react_trace(user, iterations=666, fail_at=400)
    trace.refresh_from_db()
    assert trace.total_steps == 2000

    page.goto(f"/traces/{trace.id}/")

    # goal, 50 iterations with their actions and results
    assert rows(page) == 151
    assert page.locator("#tree .iter").first.inner_text() == "#1"
    assert page.locator("#tree .badge.repeat").count() > 0
    more = page.get_by_role("link", name="show 617 more")
    screenshot("opened")

    more.click()
    page.wait_for_function("document.querySelectorAll('#tree li.node').length === 201")
    assert page.get_by_role("link", name="show 567 more").is_visible()

    sixtieth = page.locator("#tree li.t-thought").nth(59)
    assert sixtieth.get_attribute("aria-expanded") == "false"
    assert "2 steps" in sixtieth.locator(".rollup").first.inner_text()
    sixtieth.locator(":scope > .row .tog").click()
    sixtieth.locator("li.t-action").wait_for()
    assert sixtieth.get_attribute("aria-expanded") == "true"
    assert rows(page) == 202
    assert rows(page) < 2000
    screenshot("expanded")


def test_a_deep_link_opens_a_step_six_levels_down(page, login, screenshot) -> None:
    user = login("ada")
    trace = make_trace(user, task="nested agents")
    parent = step("goal", name="root")
    items = [parent]
    for level in range(6):
        siblings = [
            step("thought", parent=parent, name=f"level {level + 1} / {i}") for i in range(80)
        ]
        items += siblings
        parent = siblings[70]
    add(trace, *items)

    page.goto(f"/traces/{trace.id}/?step={parent.id}")

    selected = page.locator("#tree li.node.selected")
    selected.wait_for()
    assert selected.get_attribute("id") == f"s-{parent.id}"
    assert selected.is_visible()
    page.locator("#detail h2").filter(has_text="level 6 / 70").wait_for()
    screenshot("deep-link")

    # Search reaches a step in a collapsed subtree and jumps to it.
    page.keyboard.press("/")
    page.keyboard.type("level 5 / 75")
    result = page.locator("#search-results [data-jump-to]")
    result.wait_for()
    assert result.count() == 1
    result.click()
    page.locator("#tree li.node.selected .name").filter(has_text="level 5 / 75").wait_for()
    assert page.locator("#tree li.node.selected").is_visible()


def test_the_keyboard_reaches_the_next_error_in_a_collapsed_subtree(
    page, login, screenshot
) -> None:
    user = login("ada")
    trace = react_trace(user, iterations=300, fail_at=250, status="running")

    page.goto(f"/traces/{trace.id}/")
    page.locator("#tree li.node").first.wait_for()
    page.keyboard.press("j")
    page.locator("#tree li.node.selected").wait_for()
    page.keyboard.press("e")

    failed = page.locator("#tree li.node.selected.err")
    failed.wait_for()
    assert "ZeroDivisionError" in failed.inner_text()
    page.locator("#detail .step-error").filter(has_text="ZeroDivisionError").wait_for()
    assert re.search(r"\?step=[0-9a-f-]{36}$", page.url)
    assert failed.is_visible()

    page.keyboard.press("k")
    assert page.locator("#tree li.node.selected.t-action").count() == 1
    screenshot("next-error")

    page.get_by_role("button", name="Timeline").click()
    page.locator("#timeline .wf-bar").first.wait_for()
    page.get_by_role("link", name="Compress idle gaps").click()
    page.locator("#timeline").filter(has_text="Idle gaps compressed").wait_for()
    screenshot("timeline")


def test_a_step_recorded_through_the_api_appears_live(page, login, screenshot, app_server) -> None:
    user = login("ada")
    _, token = api_token_create(user=user, name="agent")
    trace = react_trace(user, iterations=2)
    goal = trace.steps.get(step_type="goal")

    page.goto(f"/traces/{trace.id}/")
    page.locator("#live-state").filter(has_text="live").wait_for()
    assert rows(page) == 8

    headers = {"Authorization": f"Bearer {token}"}
    with httpx.Client(base_url=app_server, headers=headers, timeout=10) as api:
        response = api.post(
            f"/api/traces/{trace.id}/steps",
            json={
                "parent_id": str(goal.id),
                "step_type": "thought",
                "name": "iteration 3 <live>",
                "status": "running",
                "tokens": 7,
            },
        )
        assert response.status_code == 201, response.text

        added = page.locator("#tree li.node > .row", has_text="iteration 3 <live>")
        added.wait_for()
        assert added.locator(".elapsed").count() == 1
        page.locator('[data-total="total_steps"]').filter(has_text="9").wait_for()
        screenshot("live")

        step_id = response.json()["steps"][0]["step_id"]
        api.patch(f"/api/traces/{trace.id}/steps/{step_id}", json={"status": "completed"})
        api.post(f"/api/traces/{trace.id}/complete", json={"status": "completed"})

    page.locator("#trace-status").filter(has_text="completed").wait_for()
    page.locator(f"#s-{step_id} > .row .outcome.st-ok").filter(has_text="ok").wait_for()
    assert rows(page) == 9


@pytest.mark.parametrize("server_url", ["memory", "redis"], indirect=True)
def test_new_iterations_arrive_live_opened_as_a_reload_opens_them(
    page, login, screenshot, server_url
) -> None:
    user = login("ada")
    _, token = api_token_create(user=user, name="agent")
    trace = react_trace(user, iterations=2)
    goal = trace.steps.get(step_type="goal")
    page.goto(f"/traces/{trace.id}/")
    page.locator("#live-state").filter(has_text="live").wait_for()
    assert rows(page) == 8

    def post(body: Any) -> list[str]:
        response = api.post(f"/api/traces/{trace.id}/steps", json=body)
        assert response.status_code == 201, response.text
        return [s["step_id"] for s in response.json()["steps"]]

    headers = {"Authorization": f"Bearer {token}"}
    with httpx.Client(base_url=server_url, headers=headers, timeout=10) as api:
        # One iteration step by step, as the agent records it: the thought and its running
        # tool call, then the result.
        thought_id = str(uuid.uuid4())
        _, action = post(
            [
                {
                    "id": thought_id,
                    "parent_id": str(goal.id),
                    "step_type": "thought",
                    "name": "iteration 3",
                },
                {
                    "parent_id": thought_id,
                    "step_type": "action",
                    "name": "execute_code",
                    "status": "running",
                },
            ]
        )
        page.locator(f"#s-{action} .row").wait_for()
        # The tool runs in silence for longer than the channel layer's read timeouts: the
        # page's websocket stays open through it and brings the result.
        socket = "document.getElementById('trace-view').socket"
        page.evaluate(f"window.quietSocket = {socket}")
        page.wait_for_timeout(QUIET_S * 1000)
        (result,) = post({"parent_id": action, "step_type": "result", "name": "execute_code"})
        page.locator(f"#s-{result} .row").wait_for()
        assert page.evaluate(f"{socket} === window.quietSocket")
        api.patch(f"/api/traces/{trace.id}/steps/{action}", json={"status": "completed"})
        # Another, each step on its own.
        (thought,) = post({"parent_id": str(goal.id), "step_type": "thought", "name": "iter 4"})
        (action,) = post({"parent_id": thought, "step_type": "action", "name": "search_docs"})
        (result,) = post({"parent_id": action, "step_type": "result", "name": "search_docs"})
        page.locator(f"#s-{result} .row").wait_for()
        page.locator('[data-total="total_steps"]').filter(has_text="14").wait_for()
        screenshot("live")
        live = rows(page)
        shown = shown_rows(page)
    page.reload()
    page.locator("#tree li.node").first.wait_for()
    assert live == rows(page) == 14
    assert shown == shown_rows(page)


def _a_thought_then_its_action_live(
    page: Any, login: Any, app_server: str, hold: Callable[[Any, str], None]
) -> None:
    """Open a running trace's page with ``hold(route, thought_id)`` handling its row
    requests, then add a thought and, 400 ms later, an action under it; the action must land
    under the thought."""
    user = login("ada")
    _, token = api_token_create(user=user, name="agent")
    trace = react_trace(user, iterations=1)
    goal = trace.steps.get(step_type="goal")
    thought_id = str(uuid.uuid4())
    page.route("**/rows/?ids=*", lambda route: hold(route, thought_id))
    page.goto(f"/traces/{trace.id}/")
    page.locator("#live-state").filter(has_text="live").wait_for()
    headers = {"Authorization": f"Bearer {token}"}
    with httpx.Client(base_url=app_server, headers=headers, timeout=10) as api:
        steps = f"/api/traces/{trace.id}/steps"
        thought = {"id": thought_id, "parent_id": str(goal.id), "step_type": "thought"}
        assert api.post(steps, json=thought).status_code == 201
        page.wait_for_timeout(400)  # the thought's rows are asked for, and held back
        action = {"parent_id": thought_id, "step_type": "action", "name": "execute_code"}
        response = api.post(steps, json=action)
        assert response.status_code == 201, response.text
    (action_id,) = [s["step_id"] for s in response.json()["steps"]]
    page.locator(f"#s-{action_id} .row").wait_for()
    assert page.locator(f"#s-{thought_id} > ul.children > #s-{action_id}").count() == 1
    # A request still held back must not outlive the page (its handler would fail later).
    page.unroute_all(behavior="ignoreErrors")


def test_a_child_announced_later_is_placed_even_when_its_rows_come_back_first(
    page, login, app_server
) -> None:
    """The rows of the new thought are asked for first and come back late; its action's,
    asked for after, come back first."""

    def slow_thought_rows(route: Any, thought_id: str) -> None:
        if thought_id in route.request.url:
            page.wait_for_timeout(800)
        route.continue_()

    _a_thought_then_its_action_live(page, login, app_server, slow_thought_rows)


def test_a_child_is_placed_when_its_parents_rows_were_read_before_it_existed(
    page, login, app_server
) -> None:
    """The thought's rows are read at once (it has no children then) but reach the page
    late; its action, announced meanwhile, still lands under it: the flush that asks for the
    action's rows settles what to ask for once the thought is in the page, and asks for the
    thought's rows again, now with a child to open."""
    held: list[str] = []

    def late_thought_rows(route: Any, thought_id: str) -> None:
        answer = route.fetch()
        if thought_id in route.request.url and not held:
            held.append(route.request.url)  # the first answer with the thought: read now, late
            page.wait_for_timeout(800)
        route.fulfill(response=answer)

    _a_thought_then_its_action_live(page, login, app_server, late_thought_rows)


@pytest.mark.parametrize("server_url", ["memory", "redis"], indirect=True)
def test_a_step_whose_children_came_first_opens_as_a_reload_opens_it(
    page, login, server_url
) -> None:
    """A thought's row is read after its action was recorded, so the page loads the thought's
    children itself; that window is read after the action's result was recorded, and reaches
    the page after the action's own row. The result still shows, under the opened action, and
    the page ends as a reload shows it (the window used to replace the rows placed meanwhile
    and to come with the action closed, hiding the result until a reload)."""
    user = login("ada")
    _, token = api_token_create(user=user, name="agent")
    trace = react_trace(user, iterations=1)
    goal = trace.steps.get(step_type="goal")
    thought_id, action_id, result_id = (str(uuid.uuid4()) for _ in range(3))
    headers = {"Authorization": f"Bearer {token}"}
    api = httpx.Client(base_url=server_url, headers=headers, timeout=10)
    steps = f"/api/traces/{trace.id}/steps"

    def record(body: dict[str, Any]) -> None:
        response = api.post(steps, json=body)
        assert response.status_code == 201, response.text

    def rows(route: Any) -> None:
        if thought_id in route.request.url and action_id not in route.request.url:
            record({"id": action_id, "parent_id": thought_id, "step_type": "action"})
        route.continue_()

    def window(route: Any) -> None:
        if f"/children/{thought_id}/" in route.request.url:
            record({"id": result_id, "parent_id": action_id, "step_type": "result"})
            page.wait_for_timeout(800)  # the action's own row is placed meanwhile
        route.continue_()

    page.route("**/rows/?ids=*", rows)
    page.route("**/children/**", window)
    page.goto(f"/traces/{trace.id}/")
    page.locator("#live-state").filter(has_text="live").wait_for()
    page.evaluate(
        "(thought) => document.body.addEventListener('htmx:afterSettle', (event) => {"
        "  if (event.detail.requestConfig.path.includes('/children/' + thought + '/'))"
        "    window.thoughtsChildrenIn = true; })",
        thought_id,
    )
    with api:
        record({"id": thought_id, "parent_id": str(goal.id), "step_type": "thought"})
        page.wait_for_function("window.thoughtsChildrenIn === true")
    page.locator('[data-total="total_steps"]').filter(has_text="8").wait_for()
    page.locator(f"#s-{result_id} .row").wait_for()
    page.unroute_all(behavior="ignoreErrors")
    opened = "#s-{}.open > ul.children > #s-{}.open > ul.children > #s-{}"
    assert page.locator(opened.format(thought_id, action_id, result_id)).count() == 1
    shown = shown_rows(page)
    page.reload()
    page.locator("#tree li.node").first.wait_for()
    assert shown == shown_rows(page)


def test_steps_opened_together_all_load_their_children(page, login) -> None:
    """Three closed steps opened while the first one's children are still on their way: each
    loads its children (the page's loads shared one htmx request lock, and the second of three
    started together never ran)."""
    user = login("ada")
    trace = make_trace(user, task="deep")
    level = [step("goal", name="root")]
    items = list(level)
    for _ in range(4):  # two children a step, four levels down
        level = [step("thought", parent=p, name=f"n{i}") for p in level for i in range(2)]
        items += level
    add(trace, *items)

    def slow(route: Any) -> None:
        page.wait_for_timeout(300)
        route.continue_()

    page.route("**/children/**", slow)
    page.goto(f"/traces/{trace.id}/")
    closed = page.locator("#tree li.node[aria-expanded=false]")
    assert closed.count() == 8  # the fourth level, which the first render leaves closed
    ids = [closed.nth(i).get_attribute("data-id") for i in range(3)]
    for step_id in ids:
        page.locator(f"#s-{step_id} > .row .tog").click()
    for step_id in ids:
        page.locator(f"#s-{step_id} > ul.children > li.node").nth(1).wait_for()
        assert page.locator(f"#s-{step_id} > ul.children > li.node").count() == 2
    page.unroute_all(behavior="ignoreErrors")


def two_runs(user: Any, *, failed_task: str) -> Trace:
    """A running trace and a failed one (``failed_task``), which it returns."""
    react_trace(user, iterations=2)
    failed = react_trace(user, iterations=3, fail_at=1)
    Trace.objects.filter(pk=failed.pk).update(status="failed", task=failed_task)
    return failed


def test_the_list_filters_and_opens_a_failed_trace(page, login, screenshot) -> None:
    user = login("ada")
    failed = two_runs(user, failed_task="The failing run")

    page.goto("/traces/")
    assert page.locator("tr.trace-row").count() == 2
    page.select_option("select[name=status]", "failed")
    page.wait_for_function("document.querySelectorAll('tr.trace-row').length === 1")
    assert "status=failed" in page.url
    screenshot("list")

    page.get_by_role("link", name="The failing run").click()
    page.wait_for_url(re.compile(rf"/traces/{failed.id}/$"))
    page.keyboard.press("e")
    page.locator("#tree li.node.selected.err").wait_for()


def test_a_running_trace_updates_in_place_in_the_list(page, login, app_server) -> None:
    user = login("ada")
    _, token = api_token_create(user=user, name="agent")
    trace = react_trace(user, iterations=1)
    goal = trace.steps.get(step_type="goal")

    page.goto("/traces/")
    row = page.locator(f"#t-{trace.id}")
    assert row.locator('[data-total="total_steps"]').inner_text() == "5"

    headers = {"Authorization": f"Bearer {token}"}
    with httpx.Client(base_url=app_server, headers=headers, timeout=10) as api:
        # The list's socket may still be connecting: the replay from its after_seq covers that.
        added = api.post(
            f"/api/traces/{trace.id}/steps",
            json={"parent_id": str(goal.id), "step_type": "thought", "status": "failed"},
        )
        assert added.status_code == 201, added.text
        row.locator('[data-total="total_steps"]').filter(has_text="6").wait_for()
        row.locator('[data-total="error_count"]').filter(has_text="1").wait_for()
        api.post(f"/api/traces/{trace.id}/complete", json={"status": "failed"})

    page.locator(f"#t-{trace.id} .status-badge").filter(has_text="failed").wait_for()
    assert page.url.endswith("/traces/")


@pytest.mark.parametrize("server_url", ["memory", "redis"], indirect=True)
def test_running_traces_ending_together_each_refresh_their_own_row_once(
    page, login, server_url
) -> None:
    """Twelve running rows end at once while their refreshes are slow: each row is read once
    and the list stays one list. A row being refreshed was watched again by the next scan
    (another row's swap), that socket replayed the end after the refresh had replaced the row,
    and the row was refreshed from the page's own URL: a whole list page inside a row, whose
    running rows did the same (a service sending traces hung the page in minutes)."""
    user = login("ada")
    _, token = api_token_create(user=user, name="agent")
    traces = [make_trace(user, task=f"run {i}") for i in range(12)]
    fetched: list[str] = []

    def slow_row(route: Any) -> None:
        fetched.append(route.request.url)
        page.wait_for_timeout(400)
        route.continue_()

    page.route("**/traces/*/row/", slow_row)
    page.goto(f"{server_url}/traces/?status=running")
    assert page.locator("tr.trace-row[data-running]").count() == 12
    page.wait_for_timeout(500)  # the sockets open (a late one replays the end)
    with httpx.Client(base_url=server_url, headers={"Authorization": f"Bearer {token}"}) as api:
        for trace in traces:
            answer = api.post(f"/api/traces/{trace.id}/complete", json={"status": "completed"})
            assert answer.status_code == 200, answer.text
    page.wait_for_function(
        "document.querySelectorAll('tr.trace-row.st-completed').length === 12", timeout=20_000
    )
    page.wait_for_timeout(1500)  # what a second socket would still do
    assert page.locator("tr.trace-row").count() == 12
    assert page.locator("h1").count() == 1
    assert sorted(fetched) == sorted(f"{server_url}/traces/{t.id}/row/" for t in traces)
    page.unroute_all(behavior="ignoreErrors")


def test_the_list_closes_the_sockets_of_rows_it_no_longer_shows(page, login) -> None:
    """Running rows replaced by another filter's list close their watch sockets (they stayed
    open until their trace sent something, forever for a stuck or rootless one)."""
    user = login("ada")
    for i in range(3):
        make_trace(user, task=f"run {i}")
    page.add_init_script(
        "window.opened = []; const Native = window.WebSocket;"
        " window.WebSocket = function (url) { const s = new Native(url);"
        " window.opened.push(s); return s; };"
        " window.WebSocket.prototype = Native.prototype;"
    )
    page.goto("/traces/?status=running")
    page.wait_for_function(
        "window.opened.length === 3 && window.opened.every((s) => s.readyState === 1)"
    )
    page.select_option("select[name=status]", "completed")
    page.wait_for_function("document.querySelectorAll('tr.trace-row').length === 0")
    page.wait_for_function("window.opened.every((s) => s.readyState === 3)")  # closed
    assert page.evaluate("window.opened.length") == 3


def test_new_traces_are_announced_on_the_list_and_shown_on_a_click(page, login, screenshot) -> None:
    user = login("ada")
    two_runs(user, failed_task="Plot the latency histogram")
    page.goto("/traces/?mode=agent")
    assert page.locator("tr.trace-row").count() == 2

    first_row = page.locator("tr.trace-row").first.bounding_box()

    for task in ("Summarise the release notes", "Why does the CSV import fail?"):
        make_trace(user, task=task)  # the page asks every 5 s
    notice = page.locator("#new-traces button.new-traces-link")
    notice.filter(has_text="Show 2 new traces").wait_for(timeout=12_000)
    screenshot("list-new-traces")
    assert page.locator("tr.trace-row").first.bounding_box() == first_row  # no row moved
    box = notice.bounding_box()
    assert box is not None
    assert box["y"] + box["height"] > 800 - 60  # at the bottom of the window
    assert page.locator("#new-traces-said").inner_text() == "New traces have arrived."
    notice.focus()
    page.keyboard.press(" ")  # a button: Space as well as Enter (Space scrolled the link's page)

    page.get_by_role("link", name="Why does the CSV import fail?").wait_for()
    assert page.locator("tr.trace-row").count() == 4
    assert page.locator("#new-traces button").count() == 0  # a new list, a new count
    assert page.url.endswith("/traces/?mode=agent")
    page.wait_for_function(  # the focus is on the list's first trace (once it settles)
        "document.activeElement.textContent === 'Why does the CSV import fail?'"
    )


def test_on_a_phone_the_new_traces_button_covers_nothing_and_keeps_the_focus(page, login) -> None:
    """At the bottom of a full page the floating button leaves the pager uncovered; a new count
    redraws it without taking the focus away (the poll replaces it whole)."""
    page.set_viewport_size({"width": 390, "height": 844})
    user = login("ada")
    for i in range(26):
        make_trace(user, task=f"run {i}")
    page.goto("/traces/")
    page.evaluate("window.scrollTo(0, document.body.scrollHeight)")

    make_trace(user, task="a new run")
    button = page.locator("#new-traces button.new-traces-link")
    button.filter(has_text="Show 1 new trace").wait_for(timeout=12_000)
    pager = page.get_by_role("link", name="Older traces →").bounding_box()
    box = button.bounding_box()
    assert pager is not None
    assert box is not None
    assert pager["y"] + pager["height"] <= box["y"]  # the pager above the button, uncovered

    button.focus()
    make_trace(user, task="another new run")
    button.filter(has_text="Show 2 new traces").wait_for(timeout=12_000)
    assert page.evaluate("document.activeElement.classList.contains('new-traces-link')")


def test_back_and_forward_restore_the_filters_with_the_list(page, login) -> None:
    user = login("ada")
    make_trace(user, task="a run")
    failed = make_trace(user, task="a failed run")
    Trace.objects.filter(pk=failed.pk).update(status="failed")
    page.goto("/traces/")
    page.select_option("select[name=status]", "failed")
    page.wait_for_url(re.compile(r"\?status=failed$"))
    page.select_option("select[name=mode]", "agent")
    page.wait_for_url(re.compile(r"\?mode=agent&status=failed$"))

    page.go_back()
    page.wait_for_url(re.compile(r"\?status=failed$"))
    page.wait_for_function("document.querySelector('select[name=mode]').value === ''")
    assert page.locator("select[name=status]").input_value() == "failed"
    page.go_back()
    page.wait_for_url(re.compile(r"/traces/$"))
    page.wait_for_function("document.querySelector('select[name=status]').value === ''")
    page.go_forward()
    page.wait_for_function("document.querySelector('select[name=status]').value === 'failed'")
    assert page.locator("tr.trace-row").count() == 1


def test_a_trace_page_signed_out_elsewhere_goes_to_the_login_at_its_next_step(
    page, login, app_server
) -> None:
    """Its rows are fetched, not asked by htmx: redirected to the login page, they placed
    nothing while the header went on counting steps."""
    user = login("ada")
    _, token = api_token_create(user=user, name="agent")
    trace = react_trace(user, iterations=1)
    goal = trace.steps.get(step_type="goal")
    page.goto(f"/traces/{trace.id}/")
    page.locator("#live-state").filter(has_text="live").wait_for()

    page.context.clear_cookies()  # signed out in another tab; the websocket stays open
    with httpx.Client(base_url=app_server, headers={"Authorization": f"Bearer {token}"}) as api:
        added = api.post(
            f"/api/traces/{trace.id}/steps",
            json={"parent_id": str(goal.id), "step_type": "thought", "name": "later"},
        )
        assert added.status_code == 201, added.text

    page.wait_for_url(re.compile(r"/login/\?next="), timeout=10_000)
    assert page.url.endswith(f"next=%2Ftraces%2F{trace.id}%2F")


def test_the_language_switch_leaves_the_list_and_its_address_alone(page, login) -> None:
    """The filters apply as their selects change, and only theirs: the header's language
    select reloaded the list too and pushed the blank filters into the address bar."""
    user = login("ada")
    make_trace(user, task="a run")
    page.goto("/traces/?status=running")
    lists: list[str] = []
    page.on("request", lambda r: lists.append(r.url) if "/traces/?" in r.url else None)

    with page.expect_navigation():
        page.select_option("#language-switch select", "zh-hans")

    assert page.url.endswith("/traces/?status=running")
    assert lists == [page.url]  # the page's reload in Chinese, no filter request before it
    page.select_option("select[name=mode]", "agent")  # the filters' own selects still apply
    page.wait_for_url(
        re.compile(r"/traces/\?status=running&mode=agent$|/traces/\?mode=agent&status=running$")
    )


def test_a_list_signed_out_elsewhere_goes_to_the_login_and_back(page, login) -> None:
    user = login("ada")
    make_trace(user, task="a run")
    page.goto("/traces/?status=running")

    page.context.clear_cookies()  # signed out in another tab
    page.wait_for_url(re.compile(r"/login/\?next="), timeout=12_000)  # at the next poll

    assert page.locator("#trace-list").count() == 0  # the whole page, not a fragment in it
    page.fill("input[name=username]", "ada")
    page.fill("input[name=password]", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(re.compile(r"/traces/\?status=running$"))


def test_the_tree_keeps_about_2000_rows_however_far_one_loads(page, login) -> None:
    user = login("ada")
    trace = make_trace(user, task="a very long run")
    goal = step("goal", name="goal")
    thoughts = [step("thought", parent=goal, name=f"t{i}") for i in range(2199)]
    for start in range(0, 2200, 1000):
        add(trace, *[goal, *thoughts][start : start + 1000])

    page.goto(f"/traces/{trace.id}/")
    assert rows(page) == 51
    for _ in range(43):
        more = page.locator("#tree li.more:not(.prev) a")
        if more.count() == 0:
            break
        before = page.locator("#tree li.node").last.get_attribute("id")
        more.click()
        page.wait_for_function(
            f"Array.from(document.querySelectorAll('#tree li.node')).pop().id !== '{before}'"
        )
        assert rows(page) <= 2000 + 1

    assert page.locator("#tree li.more").count() == 1
    assert page.locator("#tree li.node .name").last.inner_text() == "t2198"
    earlier = page.locator("#tree li.more.prev a")
    assert earlier.inner_text() == "show earlier steps"
    first_shown = int(page.locator("#tree li.t-thought").first.get_attribute("data-index"))
    assert first_shown > 0
    assert first_shown % 50 == 0

    earlier.click()
    page.locator(f"#tree li.t-thought[data-index='{first_shown - 50}']").wait_for()
    names = page.locator("#tree li.t-thought .name").all_inner_texts()
    assert names[:2] == [f"t{first_shown - 50}", f"t{first_shown - 49}"]
    # The latest window gave way this time, behind a link that loads it again.
    assert rows(page) <= 2000 + 1
    assert page.locator("#tree li.more:not(.prev) a").inner_text() == "show more steps"


def test_on_a_phone_a_tapped_step_shows_its_details(page, login, screenshot) -> None:
    """On a phone the details are below the tree (one column): a tap on a step scrolls to
    them (they loaded out of sight, so a tap seemed to do nothing); keys and live updates do
    not move the page."""
    page.set_viewport_size({"width": 390, "height": 844})
    user = login("ada")
    trace = react_trace(user, iterations=20, fail_at=12)
    page.goto(f"/traces/{trace.id}/")
    detail = page.locator("#detail")
    assert detail.bounding_box()["y"] > 844  # below the tree, out of sight

    page.locator("#tree li.t-thought").nth(12).locator(":scope > .row a.name").click()
    page.locator("#detail h2").filter(has_text="iteration 13").wait_for()
    # The details' heading is on the screen.
    page.wait_for_function(
        "(() => { const r = document.querySelector('#detail h2').getBoundingClientRect();"
        " return r.top >= 0 && r.bottom <= window.innerHeight; })()"
    )
    screenshot("phone-detail")


def test_on_a_phone_a_steps_row_shows_its_outcome_duration_and_tokens(page, login) -> None:
    """A long step name gives way on a phone (cut with an ellipsis) so that its outcome,
    duration and tokens stay on the screen: the row was clipped by the tree's edge, its
    figures reached only by scrolling the tree sideways."""
    page.set_viewport_size({"width": 390, "height": 844})
    user = login("ada")
    trace = make_trace(user, task="phone rows")
    goal = step("goal", name="agent run", duration_ms=7)
    thought = step(
        "thought",
        parent=goal,
        name="ChatCompletion with a long model name",
        duration_ms=1_250,
        tokens=38_771,
    )
    action = step("action", parent=thought, name="search_the_team_documentation", duration_ms=9)
    add(trace, goal, thought, action)
    page.goto(f"/traces/{trace.id}/")
    page.locator(f"#s-{action.id} > .row").wait_for()
    for shown, figures in ((thought, 3), (action, 2)):  # the action counts no tokens
        fits = page.evaluate(
            "(id) => { const row = document.querySelector('#s-' + id + ' > .row');"
            " const pane = document.querySelector('.tree-pane').getBoundingClientRect();"
            " return [...row.querySelectorAll('.outcome, .dur, .tok')].map("
            "   (el) => el.getBoundingClientRect().right <= pane.right); }",
            str(shown.id),
        )
        assert len(fits) == figures
        assert all(fits), (shown.name, fits)
    assert page.evaluate(
        "(id) => { const name = document.querySelector('#s-' + id + ' > .row .name');"
        " return name.scrollWidth > name.clientWidth; }",
        str(thought.id),
    )  # its name is cut


def test_a_long_error_gives_way_to_the_steps_name(page, login, screenshot) -> None:
    """A failed step's error is cut before its name is: with a long error on a wide screen, the
    name of the step ("iteration 1") shrank to "iter…" beside it, so the failed step could not
    be told from the others."""
    page.set_viewport_size({"width": 1400, "height": 900})
    user = login("ada")
    trace = make_trace(user, task="a model that is down")
    error = (
        "llm_unavailable: the model server at http://127.0.0.1:8080/v1 did not answer within "
        "60 s after 3 attempts (ConnectTimeout: timed out while connecting to 127.0.0.1:8080)"
    )
    goal = step("goal", name="agent run", status="failed", error=error, duration_ms=60_000)
    thought = step(
        "thought", parent=goal, name="iteration 1", status="failed", error=error, duration_ms=60_000
    )
    long_name = step(
        "action",
        parent=thought,
        name="search_the_team_documentation_for_the_deployment_runbook_of_the_billing_service",
        status="failed",
        error=error,
        duration_ms=9,
    )
    add(trace, goal, thought, long_name)
    Trace.objects.filter(id=trace.id).update(status="failed")
    page.goto(f"/traces/{trace.id}/")
    row = page.locator(f"#s-{thought.id} > .row")
    row.wait_for()
    for shown in (goal, thought):
        sizes = page.evaluate(
            "(id) => { const row = document.querySelector('#s-' + id + ' > .row');"
            " const name = row.querySelector('.name'), outcome = row.querySelector('.outcome');"
            " const text = document.createRange(); text.selectNodeContents(name);"
            " const cut = text.getBoundingClientRect().width > name.getBoundingClientRect().width;"
            " return {cut, outcome: outcome.clientWidth,"
            " outcomeCut: outcome.scrollWidth > outcome.clientWidth}; }",
            str(shown.id),
        )
        assert not sizes["cut"], (shown.name, sizes)  # the whole name is shown
        assert sizes["outcomeCut"], sizes  # the error gave way
        assert sizes["outcome"] > 40, sizes  # and still shows its start
    assert "iteration 1" in row.locator(".name").inner_text()
    # A long name is cut at 60% of its row, and the error beside it still shows its start, and
    # the duration stays in the tree.
    parts = page.evaluate(
        "(id) => { const row = document.querySelector('#s-' + id + ' > .row');"
        " const width = (sel) => row.querySelector(sel).getBoundingClientRect().width;"
        " const pane = document.querySelector('.tree-pane').getBoundingClientRect();"
        " return {row: row.getBoundingClientRect().width, name: width('.name'),"
        " outcome: width('.outcome'),"
        " durInside: row.querySelector('.dur').getBoundingClientRect().right <= pane.right}; }",
        str(long_name.id),
    )
    assert parts["name"] <= 0.6 * parts["row"] + 1, parts
    assert parts["outcome"] > 40, parts
    assert parts["durInside"], parts
    screenshot("long-error")


COSTS = [0, 0.5, 0.0021, 0.001, 0.00099, 0.0005, 0.00002, 0.0000476, 0.00000001, 12.5]


def test_a_small_cost_shows_its_digits_live_as_on_a_reload(page, login) -> None:
    """A trace's cost below a tenth of a cent (a model call of a small model's) shows its
    first significant digits, not 0.0000: the page's script (live totals) writes every cost
    as the server does."""
    user = login("ada")
    trace = make_trace(user, task="a cheap call")
    Trace.objects.filter(id=trace.id).update(total_cost=Decimal("0.00002"))
    page.goto(f"/traces/{trace.id}/")
    shown = page.locator('[data-total="total_cost"]')
    assert shown.inner_text() == "0.000020"
    written = page.evaluate("(costs) => costs.map((c) => costText(c))", COSTS)
    assert written == [cost(Decimal(str(c))) for c in COSTS]
