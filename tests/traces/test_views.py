"""The trace browser's pages and fragments: access, filters, windows, deep links, search,
jumps, the detail pane and the timeline, with pinned query counts."""

from __future__ import annotations

import json
import re
import uuid
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from http import HTTPStatus
from typing import Any

import pytest
from django.conf import settings
from django.contrib.auth.models import User
from django.test import Client

from tests.traces.factories import add, build_tree, make_trace, step
from traces import selectors
from traces.models import PendingLogEvents, Step, Trace
from traces.store import StepCreate
from traces.templatetags import trace_format

SCRIPT = "<script>alert(1)</script>"
ESCAPED = "&lt;script&gt;alert(1)&lt;/script&gt;"

pytestmark = pytest.mark.django_db


def rows(html: str) -> list[str]:
    """The step ids of the rows rendered in ``html``."""
    return re.findall(r'<li class="node[^"]*" id="s-([0-9a-f-]{36})"', html)


@pytest.fixture
def signed_in(client: Client, user: User) -> Client:
    client.force_login(user)
    return client


def react_trace(user: User, iterations: int = 3, *, fail_at: int | None = None) -> Trace:
    """A goal with ``iterations`` thought → action → result iterations and a response."""
    trace = make_trace(user, task="Add two numbers")
    goal = step("goal", name="task")
    items = [goal]
    for i in range(iterations):
        thought = step("thought", parent=goal, name=f"iteration {i + 1}", tokens=10)
        action = step(
            "action", parent=thought, name="execute_code", data={"arguments": {"code": "1+1"}}
        )
        failed = fail_at == i
        result = step(
            "result",
            parent=action,
            name="execute_code",
            status="failed" if failed else "completed",
            error="boom" if failed else "",
        )
        items += [thought, action, result]
    items.append(step("response", parent=goal, name="answer", data={"answer": "2"}))
    add(trace, *items)
    return trace


# --- access -------------------------------------------------------------------------------------


def test_pages_need_a_login(client: Client, user: User) -> None:
    trace = make_trace(user)

    for url in ("/traces/", f"/traces/{trace.id}/"):
        response = client.get(url)
        assert response.status_code == HTTPStatus.FOUND
        assert "/login/" in response["Location"]


def test_someone_elses_or_an_unknown_trace_is_a_404_page(
    client: Client, user: User, other_user: User
) -> None:
    foreign = react_trace(other_user)
    client.force_login(user)

    for url in (
        f"/traces/{foreign.id}/",
        f"/traces/{uuid.uuid4()}/",
        f"/traces/{foreign.id}/children/root/",
        f"/traces/{foreign.id}/export.json",
        f"/traces/{foreign.id}/search/?q=x",
        "/traces/not-a-uuid/",
    ):
        response = client.get(url)
        assert response.status_code == HTTPStatus.NOT_FOUND, url
        assert "text/html" in response["Content-Type"]


def test_staff_open_everyones_traces(client: Client, staff_user: User, user: User) -> None:
    trace = react_trace(user)
    client.force_login(staff_user)

    assert client.get(f"/traces/{trace.id}/").status_code == HTTPStatus.OK
    assert trace.task in client.get("/traces/").content.decode()


# --- the list -----------------------------------------------------------------------------------


def test_the_list_shows_only_the_users_own_traces_with_totals(
    signed_in: Client, user: User, other_user: User
) -> None:
    mine = react_trace(user, fail_at=1)
    make_trace(other_user, task="someone else's")

    content = signed_in.get("/traces/").content.decode()

    assert f"/traces/{mine.id}/" in content
    assert "someone else" not in content
    mine.refresh_from_db()
    assert f'data-total="total_steps">{mine.total_steps}<' in content
    assert 'data-total="error_count">1<' in content


def test_an_empty_list_says_how_traces_come_and_a_filtered_one_that_none_match(
    signed_in: Client, user: User, other_user: User
) -> None:
    make_trace(other_user, task="someone else's")

    empty = signed_in.get("/traces/").content.decode()
    filtered = signed_in.get("/traces/?q=deploy").content.decode()

    assert "No traces yet." in empty
    assert 'a token from the <a href="/tokens/">API page</a>' in empty
    assert "No traces match." not in empty
    assert "No traces match." in filtered
    assert "No traces yet." not in filtered


def test_the_list_filters_by_status_mode_agent_type_task_and_time(
    signed_in: Client, user: User
) -> None:
    failed = make_trace(user, task="deploy the parser", agent_type="ci")
    Trace.objects.filter(pk=failed.pk).update(status="failed")
    make_trace(user, task="write docs", mode="call")
    old = make_trace(user, task="old one")
    Trace.objects.filter(pk=old.pk).update(created_at=datetime(2020, 1, 1, tzinfo=UTC))

    def listed(query: str) -> set[str]:
        html = signed_in.get(f"/traces/?{query}").content.decode()
        return set(re.findall(r'<tr id="t-([0-9a-f-]{36})"', html))

    assert listed("status=failed") == {str(failed.id)}
    assert listed("q=PARSER") == {str(failed.id)}
    assert listed("agent_type=ci") == {str(failed.id)}
    assert len(listed("mode=call")) == 1
    assert listed("until=2020-01-01") == {str(old.id)}
    assert str(old.id) not in listed("since=2021-01-01")


def test_staff_filter_the_list_by_user(
    client: Client, staff_user: User, user: User, other_user: User
) -> None:
    mine = make_trace(user)
    make_trace(other_user)
    client.force_login(staff_user)

    html = client.get("/traces/?user=alice").content.decode()

    assert re.findall(r'<tr id="t-([0-9a-f-]{36})"', html) == [str(mine.id)]


@pytest.mark.parametrize(
    ("query", "notice"),
    [
        ("status=exploded", "Ignored status"),
        ("mode=%00", "Ignored mode"),
        ("since=yesterday", "Ignored since"),
        ("since=2025-13-45", "Ignored since"),
        ("since=2025-02-01&until=2025-01-01", "Ignored the time range"),
        ("cursor=%%%", "Ignored cursor"),
        ("cursor=bm90IGEgY3Vyc29y", "Ignored cursor"),
        ("user=bob", "Ignored user"),
        (f"q={'x' * 600}", "Ignored q"),
        ("q=a%00b", "Ignored q"),
        ("agent_type=%00", "Ignored agent_type"),
    ],
)
def test_malformed_list_parameters_are_ignored_with_a_notice(
    signed_in: Client, user: User, query: str, notice: str
) -> None:
    trace = make_trace(user)

    response = signed_in.get(f"/traces/?{query}")

    assert response.status_code == HTTPStatus.OK
    content = response.content.decode()
    assert notice in content
    assert f"/traces/{trace.id}/" in content


def test_the_list_pages_with_a_cursor(signed_in: Client, user: User) -> None:
    made = [make_trace(user, task=f"task {i}") for i in range(selectors.TRACE_PAGE_SIZE + 5)]

    first = signed_in.get("/traces/?status=running").content.decode()
    cursor = re.search(r'cursor=([^"&]+)"', first)
    assert cursor is not None
    second = signed_in.get(f"/traces/?status=running&cursor={cursor.group(1)}").content.decode()

    first_ids = re.findall(r'<tr id="t-([0-9a-f-]{36})"', first)
    second_ids = re.findall(r'<tr id="t-([0-9a-f-]{36})"', second)
    assert len(first_ids) == selectors.TRACE_PAGE_SIZE
    assert len(second_ids) == 5
    assert set(first_ids) | set(second_ids) == {str(t.id) for t in made}
    assert "Older traces" not in second
    assert '<a href="/traces/?status=running" hx-get="/traces/?status=running"' in second
    assert "Newest traces" in second
    assert "Newest traces" not in first


def test_the_list_uses_constant_queries(
    signed_in: Client, user: User, django_assert_num_queries: Any
) -> None:
    for i in range(3):
        make_trace(user, task=f"t{i}")
    # session, user, the page, the agent types the filter suggests, the user's theme
    with django_assert_num_queries(5):
        signed_in.get("/traces/")
    for i in range(20):
        make_trace(user, task=f"more {i}")
    with django_assert_num_queries(5):
        signed_in.get("/traces/?q=more&status=running")
    # A list the filters redraw: no form, no suggestions.
    with django_assert_num_queries(3):
        signed_in.get("/traces/?q=more", headers={"HX-Request": "true", "HX-Target": "trace-list"})


def test_the_agent_filter_suggests_the_viewers_agent_types(
    signed_in: Client, user: User, other_user: User
) -> None:
    make_trace(user, agent_type="support-bot")
    make_trace(user, agent_type="my-agent")
    make_trace(user, agent_type="my-agent")
    make_trace(other_user, agent_type="someone-elses")
    make_trace(user, agent_type=SCRIPT)

    html = signed_in.get("/traces/").content.decode()

    datalist = html.split('<datalist id="agent-types">')[1].split("</datalist>")[0]
    assert re.findall(r'<option value="([^"]*)">', datalist) == [ESCAPED, "my-agent", "support-bot"]
    assert 'list="agent-types"' in html


def test_the_task_search_has_a_trigram_index(signed_in: Client, user: User) -> None:
    """The list's ``q`` (``UPPER(task) LIKE``) finds a rare word by the index, not by reading
    every trace (benchmarks/trace_list.py); the plan is checked with sequential scans off, as
    a table of a few rows would otherwise be read whole."""
    from django.db import connection

    trace = make_trace(user, task="Deploy the parser")
    with connection.cursor() as cursor:
        cursor.execute("SELECT indexdef FROM pg_indexes WHERE indexname = 'trace_task_trgm'")
        (definition,) = cursor.fetchone()
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute("SET LOCAL enable_indexscan = off")  # the ordered scan of trace_newest
        sql, params = (
            Trace.objects.filter(task__icontains="parser").values("id").query.sql_with_params()
        )
        cursor.execute(f"EXPLAIN {sql}", params)
        plan = "\n".join(row[0] for row in cursor.fetchall())

    assert "gin (upper(task) gin_trgm_ops)" in definition
    assert "trace_task_trgm" in plan
    assert f'id="t-{trace.id}"' in signed_in.get("/traces/?q=PARSER").content.decode()


# --- the list's notice of new traces ------------------------------------------------------------


def poll_url(html: str) -> str:
    """The URL the first page polls for new traces."""
    found = re.search(r'<div id="new-traces" hx-get="([^"]+)"', html)
    assert found is not None, "the page does not poll for new traces"
    return found.group(1).replace("&amp;", "&")


def test_the_first_page_polls_for_new_traces_and_says_how_many_came(
    signed_in: Client, user: User, other_user: User
) -> None:
    make_trace(user, task="before")
    url = poll_url(signed_in.get("/traces/").content.decode())

    assert signed_in.get(url).status_code == HTTPStatus.NO_CONTENT  # nothing new: no swap
    make_trace(user, task="after")
    make_trace(other_user, task="someone else's")
    answer = signed_in.get(url)

    assert answer.status_code == HTTPStatus.OK
    html = answer.content.decode()
    assert "Show 1 new trace<" in html.replace("\n", "").replace("  ", "")
    assert 'hx-get="/traces/"' in html
    assert 'id="new-traces-said"' in html  # said once, out of band, for screen readers
    assert "New traces have arrived." in html
    again = poll_url(html)  # it asks on, knowing it shows 1
    assert signed_in.get(again).status_code == HTTPStatus.NO_CONTENT
    make_trace(user, task="and another")
    more = signed_in.get(again).content.decode()
    assert "Show 2 new traces" in more
    assert "new-traces-said" not in more  # the count changes, nothing is said again


def test_the_notice_speaks_the_readers_language(signed_in: Client, user: User) -> None:
    signed_in.cookies[settings.LANGUAGE_COOKIE_NAME] = "zh-hans"
    url = poll_url(signed_in.get("/traces/").content.decode())
    for i in range(2):
        make_trace(user, task=f"new {i}")

    assert "显示 2 条新的追踪记录" in signed_in.get(url).content.decode()


def test_new_traces_are_counted_within_the_filters_and_link_to_them(
    signed_in: Client, user: User
) -> None:
    url = poll_url(signed_in.get("/traces/?q=deploy&mode=agent").content.decode())
    make_trace(user, task="write docs")
    assert signed_in.get(url).status_code == HTTPStatus.NO_CONTENT

    make_trace(user, task="Deploy the parser")
    html = signed_in.get(url).content.decode()

    assert "Show 1 new trace" in html
    assert 'hx-get="/traces/?mode=agent&amp;q=deploy" hx-target="#trace-list"' in html


def test_a_full_page_counts_traces_that_opened_below_its_top(signed_in: Client, user: User) -> None:
    """An OTLP trace starts when its earliest span did: one that opens now may belong below
    the page's top row, and shows there once the page is reloaded."""
    made = [make_trace(user, task=f"task {i}") for i in range(selectors.TRACE_PAGE_SIZE + 2)]
    page = signed_in.get("/traces/").content.decode()
    url = poll_url(page)
    assert "last=" in url

    late = make_trace(user, task="opened late")
    between = made[10].created_at + (made[11].created_at - made[10].created_at) / 2
    Trace.objects.filter(pk=late.pk).update(created_at=between)  # on the first page
    older = make_trace(user, task="older than the page")
    Trace.objects.filter(pk=older.pk).update(created_at=datetime(2020, 1, 1, tzinfo=UTC))

    assert "Show 1 new trace" in signed_in.get(url).content.decode()
    reloaded = signed_in.get("/traces/").content.decode()
    assert f'id="t-{late.id}"' in reloaded
    assert f'id="t-{older.id}"' not in reloaded


def test_show_new_traces_shows_every_new_one_with_the_rows_the_page_had(
    signed_in: Client, user: User
) -> None:
    """A page of 25 showed 25 of "Show 40 new traces": the rest were among the older pages."""
    shown = [make_trace(user, task=f"old {i}") for i in range(selectors.TRACE_PAGE_SIZE + 5)]
    url = poll_url(signed_in.get("/traces/?mode=agent").content.decode())
    new = [make_trace(user, task=f"new {i}") for i in range(40)]

    html = signed_in.get(url).content.decode()
    assert "Show 40 new traces" in html
    assert '<button type="button" class="new-traces-link"' in html
    found = re.search(r'hx-get="([^"]+)" hx-target="#trace-list"', html)
    assert found is not None
    list_url = found.group(1).replace("&amp;", "&")
    assert list_url == "/traces/?mode=agent&limit=65"

    current = "http://testserver/traces/?mode=agent"
    headers = {"HX-Request": "true", "HX-Target": "trace-list", "HX-Current-URL": current}
    answer = signed_in.get(list_url, headers=headers)

    listed = re.findall(r'id="t-([0-9a-f-]{36})"', answer.content.decode())
    expected = [t.id for t in [*reversed(new), *reversed(shown)]][:65]
    assert listed == [str(i) for i in expected]
    assert answer.headers["HX-Replace-Url"] == "/traces/?mode=agent"  # the filters, as before
    older = re.search(r'hx-get="(/traces/\?[^"]*cursor=[^"]+)"', answer.content.decode())
    assert older is not None
    assert "limit" not in older.group(1)  # older pages are pages of 25 again


def test_show_new_traces_stops_at_a_hundred_rows(
    signed_in: Client, user: User, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(selectors, "NEW_TRACES_CAP", 90)
    for i in range(selectors.TRACE_PAGE_SIZE):
        make_trace(user, task=f"old {i}")
    url = poll_url(signed_in.get("/traces/").content.decode())
    for i in range(90):
        make_trace(user, task=f"new {i}")

    html = signed_in.get(url).content.decode()

    assert "Show 90+ new traces" in html
    assert 'hx-get="/traces/?limit=100"' in html
    too_many = signed_in.get("/traces/?limit=101").content.decode()
    assert "Ignored limit" in too_many
    assert len(re.findall(r'id="t-[0-9a-f-]{36}"', too_many)) == selectors.TRACE_PAGE_SIZE


def test_a_trace_that_comes_to_match_the_filter_counts_and_one_that_leaves_does_not(
    signed_in: Client, user: User
) -> None:
    shown = make_trace(user, task="shown")
    elsewhere = make_trace(user, task="elsewhere")
    Trace.objects.filter(pk=elsewhere.pk).update(status="completed")
    url = poll_url(signed_in.get("/traces/?status=running").content.decode())

    Trace.objects.filter(pk=shown.pk).update(status="completed")  # leaves: not new
    assert signed_in.get(url).status_code == HTTPStatus.NO_CONTENT
    Trace.objects.filter(pk=elsewhere.pk).update(status="running")  # comes: new to this list
    assert "Show 1 new trace" in signed_in.get(url).content.decode()


def test_the_count_stops_at_the_cap_and_so_does_the_polling(
    signed_in: Client, user: User, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(selectors, "NEW_TRACES_CAP", 3)
    url = poll_url(signed_in.get("/traces/").content.decode())
    for i in range(5):
        make_trace(user, task=f"new {i}")

    html = signed_in.get(url).content.decode()

    assert "Show 3+ new traces" in html
    assert "hx-get" not in html.split('<div id="new-traces"')[1].split(">")[0]  # no more polls
    assert "hx-trigger" not in html


def test_only_the_first_page_polls(signed_in: Client, user: User) -> None:
    for i in range(selectors.TRACE_PAGE_SIZE + 1):
        make_trace(user, task=f"task {i}")
    first = signed_in.get("/traces/").content.decode()
    cursor = re.search(r'cursor=([^"&]+)"', first)
    assert cursor is not None

    assert 'id="new-traces"' in first
    assert (
        'id="new-traces"'
        not in signed_in.get(f"/traces/?cursor={cursor.group(1)}").content.decode()
    )


@pytest.mark.parametrize(
    "query",
    ["last=bm90IGEgY3Vyc29y", "last=%%%", "seen=-1", "seen=many", f"shown={'x' * 5000}"],
)
def test_a_poll_the_page_did_not_ask_stops_polling(
    signed_in: Client, user: User, query: str
) -> None:
    make_trace(user)

    response = signed_in.get(f"/traces/new/?{query}")

    assert response.status_code == 286  # htmx ends the element's polling
    assert response.content == b""


def test_malformed_ids_and_filters_in_a_poll_are_dropped(signed_in: Client, user: User) -> None:
    shown = make_trace(user)

    response = signed_in.get(f"/traces/new/?shown={shown.id},nope,{SCRIPT}&status=exploded")

    assert response.status_code == HTTPStatus.NO_CONTENT  # the one trace is shown


def test_a_poll_uses_one_query_past_the_session_and_user(
    signed_in: Client, user: User, django_assert_num_queries: Any
) -> None:
    for i in range(selectors.TRACE_PAGE_SIZE + 3):
        make_trace(user, task=f"t{i}")
    url = poll_url(signed_in.get("/traces/?q=t").content.decode())
    for i in range(3):
        make_trace(user, task=f"t new {i}")
    # session, user, the count
    with django_assert_num_queries(3):
        assert "Show 3 new traces" in signed_in.get(url).content.decode()
    with django_assert_num_queries(3):
        assert signed_in.get(url.replace("seen=0", "seen=3")).status_code == HTTPStatus.NO_CONTENT


def test_a_signed_out_poll_sends_the_page_to_the_login_and_back(client: Client) -> None:
    page = "http://testserver/traces/?status=running"
    headers = {"HX-Request": "true", "HX-Current-URL": page}

    response = client.get("/traces/new/", headers=headers)

    assert response.status_code == HTTPStatus.OK  # htmx follows HX-Redirect, not a 302
    assert response.headers["HX-Redirect"] == "/login/?next=/traces/%3Fstatus%3Drunning"
    assert response.content == b""
    elsewhere = {"HX-Request": "true", "HX-Current-URL": "https://evil.example/traces/"}
    redirect = client.get("/traces/new/", headers=elsewhere).headers["HX-Redirect"]
    assert redirect == "/login/?next=/"
    assert client.get("/traces/new/").status_code == HTTPStatus.FOUND  # a plain request as ever


def test_an_htmx_list_pushes_the_filters_that_are_set_into_the_address_bar(
    signed_in: Client, user: User
) -> None:
    """The filter form sends every field, blank ones too: the address bar (and a bookmark,
    and a login's way back) shows only those set."""
    make_trace(user)
    headers = {"HX-Request": "true", "HX-Target": "trace-list"}

    answer = signed_in.get("/traces/?q=&status=running&mode=&since=&until=", headers=headers)

    assert answer.headers["HX-Push-Url"] == "/traces/?status=running"
    blank = signed_in.get("/traces/?q=&status=&mode=", headers=headers)
    assert blank.headers["HX-Push-Url"] == "/traces/"
    assert "HX-Push-Url" not in signed_in.get("/traces/?q=").headers  # a page load
    # The same list again ("Show 3 new traces") replaces the entry: Back leaves it.
    again = {**headers, "HX-Current-URL": "http://testserver/traces/?status=running"}
    shown = signed_in.get("/traces/?status=running", headers=again)
    assert shown.headers["HX-Replace-Url"] == "/traces/?status=running"
    assert "HX-Push-Url" not in shown.headers


def test_an_htmx_request_gets_only_the_list(signed_in: Client, user: User) -> None:
    make_trace(user)

    headers = {"HX-Request": "true", "HX-Target": "trace-list"}
    content = signed_in.get("/traces/", headers=headers).content.decode()

    assert content.lstrip().startswith('<div id="trace-list">')
    assert "<html" not in content


def test_an_htmx_request_for_the_tree_gets_only_the_tree(signed_in: Client, user: User) -> None:
    trace = react_trace(user)
    step_id = Step.objects.filter(trace=trace, step_type="result").values_list("id", flat=True)[1]
    headers = {"HX-Request": "true", "HX-Target": "tree"}

    content = signed_in.get(f"/traces/{trace.id}/?step={step_id}", headers=headers).content.decode()
    page = signed_in.get(f"/traces/{trace.id}/", headers={"HX-Request": "true"}).content.decode()

    assert content.lstrip().startswith('<div id="tree"')
    assert f'data-selected="{step_id}"' in content
    assert "<html" in page


def test_an_htmx_request_for_the_header_gets_only_the_header(signed_in: Client, user: User) -> None:
    """What the live page reloads when the trace ends: its status, totals and task."""
    trace = react_trace(user)
    Trace.objects.filter(pk=trace.pk).update(status="completed", task="<b>Sum</b> the column")
    headers = {"HX-Request": "true", "HX-Target": "trace-header"}

    content = signed_in.get(f"/traces/{trace.id}/", headers=headers).content.decode()

    assert content.lstrip().startswith('<header class="trace-header" id="trace-header"')
    assert 'id="tree"' not in content
    assert "&lt;b&gt;Sum&lt;/b&gt; the column</h1>" in content
    assert 'data-title="&lt;b&gt;Sum&lt;/b&gt; the column"' in content
    assert "st-completed" in content


def test_a_running_trace_row_carries_what_the_live_list_needs(
    signed_in: Client, user: User
) -> None:
    trace = react_trace(user)
    trace.refresh_from_db()

    content = signed_in.get(f"/traces/{trace.id}/row/").content.decode()

    assert f'data-running="{trace.last_seq}"' in content
    assert f'data-row-url="/traces/{trace.id}/row/"' in content


# --- the trace page -----------------------------------------------------------------------------


def test_the_trace_page_shows_the_header_and_the_opened_iterations(
    signed_in: Client, user: User
) -> None:
    trace = react_trace(user, iterations=3, fail_at=2)

    content = signed_in.get(f"/traces/{trace.id}/").content.decode()

    assert "Add two numbers" in content
    assert 'id="trace-status">running<' in content
    # goal + 3 × (thought, action, result) + response, all opened by the first render
    assert len(rows(content)) == 11
    assert 'title="ReAct iteration 3">#3<' in content
    # the second and third calls repeat the first one's tool and arguments
    assert content.count("repeated call</span>") == 2
    assert 'data-error="1"' in content
    assert f'data-watch="/api/traces/{trace.id}/watch"' in content


#: The queries of a running OTLP trace's page with nothing waiting: session, user, trace,
#: roots, repeated calls, when its last span came, the waiting spans, the waiting steps, the
#: theme.
QUERIES_OTLP_PAGE = 9


def otlp_trace(user: User, *, quiet_for: timedelta) -> Trace:
    """A running trace recorded over OTLP whose last span arrived ``quiet_for`` ago."""
    trace = make_trace(user, task="", agent_type="my-agent", metadata={"otel": {}})
    add(trace, step("action", name="search"))
    Step.objects.filter(trace=trace).update(created_at=datetime.now(UTC) - quiet_for)
    trace.refresh_from_db()
    return trace


def test_a_quiet_otlp_trace_says_its_root_span_may_never_come(
    signed_in: Client, user: User
) -> None:
    """An OTLP trace runs until its root span arrives; an agent stopped before its end
    never sends it. The page says so once no span has come for a while."""
    quiet = otlp_trace(user, quiet_for=timedelta(hours=2))
    content = signed_in.get(f"/traces/{quiet.id}/").content.decode()
    assert 'id="trace-quiet"' in content
    assert re.search(r"No span has arrived for 2\shours\.", content)
    chinese = signed_in.get(
        f"/traces/{quiet.id}/", headers={"Accept-Language": "zh-CN,zh;q=0.9"}
    ).content.decode()
    assert "没有收到新的 span" in chinese

    recent = otlp_trace(user, quiet_for=timedelta(seconds=30))
    assert 'id="trace-quiet"' not in signed_in.get(f"/traces/{recent.id}/").content.decode()
    Trace.objects.filter(pk=quiet.pk).update(status="completed")
    assert 'id="trace-quiet"' not in signed_in.get(f"/traces/{quiet.id}/").content.decode()
    # A run of DevAssist's own is watched by its worker's lease, not by this.
    own = react_trace(user)
    Step.objects.filter(trace=own).update(created_at=datetime.now(UTC) - timedelta(hours=2))
    assert 'id="trace-quiet"' not in signed_in.get(f"/traces/{own.id}/").content.decode()


def test_the_list_marks_quiet_otlp_traces_in_one_query(
    signed_in: Client, user: User, django_assert_num_queries: Any
) -> None:
    """The list says which running OTLP traces have had no span for a while (a stopped
    agent's, whose root span never comes), with one query for all of them."""
    quiet = [otlp_trace(user, quiet_for=timedelta(hours=2)) for _ in range(2)]
    recent = otlp_trace(user, quiet_for=timedelta(seconds=30))
    empty = make_trace(user, task="", metadata={"otel": {}})  # opened by log records alone
    Trace.objects.filter(pk=empty.pk).update(created_at=datetime.now(UTC) - timedelta(hours=3))
    own = react_trace(user)
    Step.objects.filter(trace=own).update(created_at=datetime.now(UTC) - timedelta(hours=2))

    # session, user, the page, the quiet traces, the agent types, the user's theme
    with django_assert_num_queries(6):
        content = signed_in.get("/traces/").content.decode()

    marked = {
        row_id: "quiet-mark" in row
        for row_id, row in re.findall(r'<tr id="t-([0-9a-f-]+)"(.*?)</tr>', content, re.S)
    }
    assert marked == {
        str(quiet[0].id): True,
        str(quiet[1].id): True,
        str(recent.id): False,
        str(empty.id): True,
        str(own.id): False,
    }
    assert re.search(r"no span for 2\shours<", content)
    assert re.search(r"no span for 3\shours<", content)
    chinese = signed_in.get("/traces/", headers={"Accept-Language": "zh-CN,zh;q=0.9"})
    assert re.search(r"已有 2\s小时没有新的 span", chinese.content.decode())
    # The row a finished trace is reloaded as has no mark; a quiet one's keeps it.
    assert "quiet-mark" in signed_in.get(f"/traces/{quiet[0].id}/row/").content.decode()
    Trace.objects.filter(pk=quiet[0].pk).update(status="completed")
    assert "quiet-mark" not in signed_in.get(f"/traces/{quiet[0].id}/row/").content.decode()


def test_an_otlp_trace_page_lists_waiting_log_records_in_constant_queries(
    signed_in: Client, user: User, django_assert_num_queries: Any
) -> None:
    """Log records waiting for spans: a count, then the first spans' records, however many."""
    trace = otlp_trace(user, quiet_for=timedelta(seconds=30))
    with django_assert_num_queries(QUERIES_OTLP_PAGE):
        signed_in.get(f"/traces/{trace.id}/")
    PendingLogEvents.objects.bulk_create(
        PendingLogEvents(
            trace=trace,
            step_id=uuid.uuid4(),
            span_id=f"{i:016x}" if i else "",
            events=[{"name": "log", "body": f"line {i}"}] * (25 if i == 0 else 1),
        )
        for i in range(30)
    )
    # ... the window of spans, their records
    with django_assert_num_queries(QUERIES_OTLP_PAGE + 2):
        content = signed_in.get(f"/traces/{trace.id}/").content.decode()
    assert "Log records wait for 30 spans that have not arrived." in content
    assert content.count('class="waiting-span"') == 20
    assert "a span (its id was not recorded)" in content  # a row stored before ids were kept
    assert content.count("line 0<") == 20
    assert "and 5 more records" in content
    assert "The records of 10 more spans are in the JSON export and the API." in content


def test_waiting_log_records_of_any_shape_do_not_break_the_page(
    signed_in: Client, user: User
) -> None:
    """Rows are written as lists of event objects; one that is not still reads."""
    trace = otlp_trace(user, quiet_for=timedelta(seconds=30))
    for events in ({"body": "<b>not a list</b>"}, ["<i>text</i>", 5, None, [1]], []):
        PendingLogEvents.objects.create(trace=trace, step_id=uuid.uuid4(), events=events)

    response = signed_in.get(f"/traces/{trace.id}/")

    assert response.status_code == HTTPStatus.OK
    content = response.content.decode()
    assert "Log records wait for 3 spans that have not arrived." in content
    assert "&lt;b&gt;not a list&lt;/b&gt;" in content
    assert "&lt;i&gt;text&lt;/i&gt;" in content
    assert "<i>text</i>" not in content
    listed = signed_in.get(f"/api/traces/{trace.id}/waiting-log-records").json()
    assert [len(span["events"]) for span in listed["spans"]] == [1, 4, 0]


def test_an_otlp_trace_page_lists_steps_waiting_for_their_parent_in_constant_queries(
    signed_in: Client, user: User, django_assert_num_queries: Any
) -> None:
    """Steps stored at the top level to wait for a parent span: a count, the first ones (each
    a link to it, with the span it waits for), however many; names escaped; a row whose
    data holds no span id (or not an object) still reads."""
    trace = otlp_trace(user, quiet_for=timedelta(seconds=30))
    add(
        trace,
        *(
            step(
                "action",
                name=f"<b>tool {i}</b>",
                data={"otel_span": {"parent_span_id": f"{i:016x}"}},
            )
            for i in range(24)
        ),
        step("memory_read", name="no span id", data={"otel_span": ["not", "an", "object"]}),
    )
    Step.objects.filter(trace=trace).exclude(name="search").update(pending_parent_id=uuid.uuid4())
    with django_assert_num_queries(QUERIES_OTLP_PAGE + 1):  # ... the window of waiting steps
        content = signed_in.get(f"/traces/{trace.id}/").content.decode()
    assert (
        "25 steps wait at the top level for their parent spans, which have not arrived." in content
    )
    listed = content.split('class="waiting-list"')[1].split("</ol>")[0]
    assert listed.count("<li>") == 20
    assert "&lt;b&gt;tool 0&lt;/b&gt;" in listed
    assert "<b>tool" not in listed
    assert "waits for span <code>0000000000000013</code>" in listed
    assert "5 more steps wait: the API lists them all." in content
    first = Step.objects.get(trace=trace, name="<b>tool 0</b>")
    assert f'data-jump-to="{first.id}"' in listed

    # The partial the page reloads as steps come, move and its trace ends; in Chinese too.
    Trace.objects.filter(pk=trace.pk).update(status="completed")
    partial = signed_in.get(
        f"/traces/{trace.id}/", headers={"HX-Request": "true", "HX-Target": "waiting-steps"}
    )
    assert partial.content.decode().strip().startswith('<div id="waiting-steps">')
    assert (
        "25 steps stay at the top level: their parent spans never arrived."
        in partial.content.decode()
    )
    chinese = signed_in.get(
        f"/traces/{trace.id}/",
        headers={
            "HX-Request": "true",
            "HX-Target": "waiting-steps",
            "Accept-Language": "zh-CN,zh;q=0.9",
        },
    ).content.decode()
    assert "25 个步骤" in chinese

    api = signed_in.get(f"/api/traces/{trace.id}/waiting-steps", {"offset": 20}).json()
    assert (api["total_steps"], api["next_offset"], len(api["steps"])) == (25, None, 5)
    assert api["steps"][-1]["name"] == "no span id"
    assert api["steps"][-1]["parent_span_id"] is None
    assert api["steps"][0]["parent_span_id"] == f"{20:016x}"


def test_a_trace_not_recorded_over_otlp_has_no_waiting_steps(signed_in: Client, user: User) -> None:
    trace = react_trace(user, iterations=1)
    assert 'id="waiting-steps"' not in signed_in.get(f"/traces/{trace.id}/").content.decode()
    listed = signed_in.get(f"/api/traces/{trace.id}/waiting-steps").json()
    assert listed == {"steps": [], "total_steps": 0, "next_offset": None}


def test_the_trace_page_uses_constant_queries(
    signed_in: Client, user: User, django_assert_num_queries: Any
) -> None:
    small = react_trace(user, iterations=2)
    big = react_trace(user, iterations=40)
    # session, user, trace, roots, 3 levels, repeated calls, the user's theme
    with django_assert_num_queries(9):
        signed_in.get(f"/traces/{small.id}/")
    with django_assert_num_queries(9):
        signed_in.get(f"/traces/{big.id}/")


def test_a_big_trace_renders_a_bounded_skeleton_with_show_more(
    signed_in: Client, user: User
) -> None:
    trace = make_trace(user)
    root = step("goal")
    children = [step("thought", parent=root, name=f"t{i}") for i in range(999)]
    add(trace, root, *children)
    add(trace, *[step("thought", parent=root, name=f"u{i}") for i in range(1000)])

    content = signed_in.get(f"/traces/{trace.id}/").content.decode()

    shown = rows(content)
    assert len(shown) == 1 + selectors.CHILD_WINDOW
    assert f"show {1999 - selectors.CHILD_WINDOW} more" in content
    assert "data_preview" not in content


def test_show_more_loads_the_next_window(
    signed_in: Client, user: User, django_assert_num_queries: Any
) -> None:
    trace = make_trace(user)
    root = step("goal")
    add(trace, root, *[step("thought", parent=root, name=f"t{i}") for i in range(120)])
    url = f"/traces/{trace.id}/children/{root.id}/?offset=50&dir=next"

    # session, user, trace, parent, window, the thoughts before it (no actions: no repeats)
    with django_assert_num_queries(6):
        content = signed_in.get(url).content.decode()

    names = re.findall(r'data-detail="[^"]+">(t\d+)</a>', content)
    assert names == [f"t{i}" for i in range(50, 100)]
    assert "show 20 more" in content
    assert "show earlier" not in content


@pytest.mark.parametrize("offset", ["-5", "junk", "9" * 40, "1e3"])
def test_a_bad_offset_is_read_as_a_safe_one(signed_in: Client, user: User, offset: str) -> None:
    trace = react_trace(user)

    response = signed_in.get(f"/traces/{trace.id}/children/root/?offset={offset}")
    jump = signed_in.get(f"/traces/{trace.id}/next/?kind=error&after={offset}")

    assert response.status_code == HTTPStatus.OK
    assert jump.status_code == HTTPStatus.OK


def test_expanding_a_collapsed_node_loads_its_first_window(signed_in: Client, user: User) -> None:
    trace = make_trace(user)
    steps = build_tree(trace, depth=5, fanout=2)
    deep = steps[-1]
    parent = Step.objects.get(pk=deep.parent_id)

    content = signed_in.get(f"/traces/{trace.id}/children/{parent.id}/").content.decode()

    assert len(rows(content)) == 2
    assert str(deep.id) in rows(content)


def test_a_window_asked_for_open_opens_the_levels_a_reload_opens(
    signed_in: Client, user: User, django_assert_num_queries: Any
) -> None:
    """The live page loads a step that arrived after children of its own with ``open=true``:
    the window shows what a reload shows under that step."""
    trace = react_trace(user, iterations=2)
    goal = trace.steps.get(step_type="goal")
    url = f"/traces/{trace.id}/children/{goal.id}/"
    reload = rows(signed_in.get(f"/traces/{trace.id}/").content.decode())

    # session, user, trace, parent, window, thoughts' children, actions' children, repeats
    with django_assert_num_queries(8):
        opened = rows(signed_in.get(url + "?open=true").content.decode())
    plain = rows(signed_in.get(url).content.decode())
    unreadable = rows(signed_in.get(url + "?open=junk").content.decode())

    assert opened == reload[1:]  # all but the goal: thoughts, their actions and results
    assert len(opened) == 2 * 3 + 1
    direct = [str(pk) for pk in goal.children.order_by("seq").values_list("pk", flat=True)]
    assert plain == unreadable == direct  # the thoughts and the response, closed
    assert len(direct) == 3


def test_a_deep_link_opens_the_path_to_a_step_six_levels_down(
    signed_in: Client, user: User
) -> None:
    trace = make_trace(user)
    # Six levels under the root, 60 siblings per level on the path, the path at the end.
    parent = step("goal", name="root")
    items = [parent]
    path = [parent]
    for level in range(6):
        siblings = [step("thought", parent=parent, name=f"l{level}-{i}") for i in range(60)]
        items += siblings
        parent = siblings[-1]
        path.append(parent)
    add(trace, *items)
    target = path[-1]

    content = signed_in.get(f"/traces/{trace.id}/?step={target.id}").content.decode()

    shown = rows(content)
    assert str(target.id) in shown
    assert f'data-selected="{target.id}"' in content
    for ancestor in path[:-1]:
        assert re.search(rf'class="node[^"]* open" id="s-{ancestor.id}"', content)
    assert "show earlier steps" in content
    assert len(shown) <= 1 + 6 * selectors.CHILD_WINDOW


def test_a_deep_link_uses_queries_in_proportion_to_depth_only(
    signed_in: Client, user: User, django_assert_num_queries: Any
) -> None:
    trace = make_trace(user)
    steps = build_tree(trace, depth=4, fanout=3)
    target = steps[-1]
    # session, user, trace, target, ranks, roots window, 4 windows, repeated calls, the theme
    with django_assert_num_queries(11):
        signed_in.get(f"/traces/{trace.id}/?step={target.id}")


@pytest.mark.parametrize("value", ["nonsense", str(uuid.uuid4())])
def test_a_bad_step_parameter_shows_the_trace_with_a_notice(
    signed_in: Client, user: User, value: str
) -> None:
    trace = react_trace(user)

    response = signed_in.get(f"/traces/{trace.id}/?step={value}")

    assert response.status_code == HTTPStatus.OK
    assert "showing the trace from the top" in response.content.decode()


def test_untrusted_text_is_escaped_everywhere(signed_in: Client, user: User) -> None:
    trace = make_trace(user, task=SCRIPT)
    bad = step("thought", name=SCRIPT, description=SCRIPT, error=SCRIPT, data={SCRIPT: SCRIPT})
    add(trace, bad)

    pages = [
        f"/traces/{trace.id}/",
        "/traces/",
        f"/traces/{trace.id}/steps/{bad.id}/",
        f"/traces/{trace.id}/search/?q=script",
        f"/traces/{trace.id}/timeline/",
        f"/traces/{trace.id}/rows/?ids={bad.id}",
    ]
    for url in pages:
        content = signed_in.get(url).content.decode()
        assert SCRIPT not in content, url
        assert "&lt;script&gt;" in content, url


# --- detail, download -----------------------------------------------------------------------------


def test_the_detail_shows_full_data_and_previews_large_values(
    signed_in: Client, user: User, django_assert_num_queries: Any
) -> None:
    trace = make_trace(user)
    big = "x" * (selectors.VALUE_PREVIEW_CHARS * 3)
    item = step("result", data={"stdout": big, "exit_code": 0}, description="ran it")
    add(trace, item)

    with django_assert_num_queries(4):
        content = signed_in.get(f"/traces/{trace.id}/steps/{item.id}/").content.decode()

    assert "ran it" in content
    assert "exit_code" in content
    assert "x" * selectors.VALUE_PREVIEW_CHARS in content
    assert big not in content
    assert f"/traces/{trace.id}/steps/{item.id}/data.json?key=stdout" in content


def test_the_detail_shows_a_model_conversation_as_its_messages(
    signed_in: Client, user: User
) -> None:
    """The three shapes the conventions give messages: ``content`` text (OpenAI, OpenLLMetry),
    GenAI ``parts``, a list of content blocks (the Vercel AI SDK); what is not text (a tool
    call) shown beside the text as JSON; untrusted text escaped."""
    trace = make_trace(user)
    item = step(
        "thought",
        data={
            "input": [
                {"role": "system", "content": "Be <b>brief</b>."},
                {"role": "user", "parts": [{"type": "text", "content": "Weather in Paris?"}]},
            ],
            "output": [
                {
                    "role": "assistant",
                    "content": [
                        {"type": "text", "text": "Let me look."},
                        {"type": "tool-call", "toolName": "getWeather"},
                    ],
                }
            ],
            "documents": [{"id": "d1"}],
        },
    )
    add(trace, item)

    content = signed_in.get(f"/traces/{trace.id}/steps/{item.id}/").content.decode()

    roles = re.findall(r'<span class="role role-(\w+)">', content)
    assert roles == ["system", "user", "assistant"]
    assert "<pre>Be &lt;b&gt;brief&lt;/b&gt;.</pre>" in content
    assert "<pre>Weather in Paris?</pre>" in content
    assert "<pre>Let me look.</pre>" in content
    assert "getWeather" in content
    assert "<b>brief</b>" not in content
    # A list of objects without roles stays JSON.
    assert "&quot;id&quot;: &quot;d1&quot;" in content


def test_the_detail_shows_what_a_model_was_asked_and_answered_first(
    signed_in: Client, user: User
) -> None:
    """An OpenInference model call's data (stored in PostgreSQL, which keeps keys shortest
    first): its messages before the request's raw JSON beside them, the span's attributes and
    facts last, the keys of no known place between, as stored."""
    trace = make_trace(user)
    item = step(
        "thought",
        data={
            "otel_span": {"kind": "internal"},
            "attributes": {"llm.system": "openai"},
            "tools": [{"json_schema": "{}"}],
            "usage": {"total_tokens": 7},
            "output": {"generations": []},
            "input": {"messages": [[{"lc": 1}]]},
            "output_messages": [{"role": "assistant", "content": "Rain."}],
            "input_messages": [{"role": "user", "content": "Weather in Paris?"}],
            "model": "gpt-4o",
        },
    )
    add(trace, item)

    _, shown = selectors.step_detail(trace=trace, step_id=item.id)

    assert [value.key for value in shown] == [
        "model",
        "input_messages",
        "output_messages",
        "input",
        "output",
        "usage",
        "tools",
        "attributes",
        "otel_span",
    ]
    content = signed_in.get(f"/traces/{trace.id}/steps/{item.id}/").content.decode()
    assert content.index("Weather in Paris?") < content.index("&quot;lc&quot;")


def test_lists_that_are_not_conversations_are_not_messages() -> None:
    assert selectors._messages([]) is None
    assert selectors._messages([{"role": "user"}, {"content": "no role"}]) is None
    assert selectors._messages(["user"]) is None
    assert selectors._messages({"role": "user"}) is None
    shown = selectors._messages([{"role": "tool", "content": {"temp": 14}, "id": "c1"}])
    assert shown is not None
    (message,) = shown
    assert (message.role, message.text) == ("tool", "")
    assert json.loads(message.extra) == {"content": [{"temp": 14}], "id": "c1"}


def test_a_value_downloads_whole(signed_in: Client, user: User) -> None:
    trace = make_trace(user)
    big = "y" * 100_000
    item = step("result", data={"stdout": big})
    add(trace, item)

    value = signed_in.get(f"/traces/{trace.id}/steps/{item.id}/data.json?key=stdout")
    whole = signed_in.get(f"/traces/{trace.id}/steps/{item.id}/data.json")
    missing = signed_in.get(f"/traces/{trace.id}/steps/{item.id}/data.json?key=nope")

    assert json.loads(value.content) == big
    assert "attachment" in value["Content-Disposition"]
    assert json.loads(whole.content) == {"stdout": big}
    assert missing.status_code == HTTPStatus.NOT_FOUND


def test_a_value_with_an_odd_key_downloads_under_a_safe_name(signed_in: Client, user: User) -> None:
    trace = make_trace(user)
    key = 'a"b\r\nSet-Cookie: x=1/ünï'
    item = step("result", data={key: 1})
    add(trace, item)

    response = signed_in.get(f"/traces/{trace.id}/steps/{item.id}/data.json", {"key": key})

    assert response.status_code == HTTPStatus.OK
    assert (
        response["Content-Disposition"]
        == f'attachment; filename="step-{item.id}-abSet-Cookiex1n.json"'
    )
    assert json.loads(response.content) == 1


def test_a_search_with_a_nul_character_is_not_an_error(signed_in: Client, user: User) -> None:
    trace = react_trace(user)

    response = signed_in.get(f"/traces/{trace.id}/search/?q=iter%00ation")

    assert response.status_code == HTTPStatus.OK
    assert "match" in response.content.decode()


def test_a_step_of_another_trace_is_a_404(signed_in: Client, user: User) -> None:
    trace = react_trace(user)
    other = react_trace(user)
    foreign = Step.objects.filter(trace=other).first()
    assert foreign is not None

    assert signed_in.get(f"/traces/{trace.id}/steps/{foreign.id}/").status_code == 404
    assert signed_in.get(f"/traces/{trace.id}/children/{foreign.id}/").status_code == 404
    assert signed_in.get(f"/traces/{trace.id}/children/nonsense/").status_code == 404


# --- search and jumps ---------------------------------------------------------------------------


def test_search_finds_steps_in_collapsed_subtrees(signed_in: Client, user: User) -> None:
    trace = make_trace(user)
    steps = build_tree(trace, depth=5, fanout=2)
    deep = steps[-1]
    Step.objects.filter(pk=deep.pk).update(description="the needle is here")

    content = signed_in.get(f"/traces/{trace.id}/search/?q=NEEDLE").content.decode()

    assert f'data-jump-to="{deep.id}"' in content
    assert "1 step match" in content
    assert deep.id not in [
        uuid.UUID(r) for r in rows(signed_in.get(f"/traces/{trace.id}/").content.decode())
    ]


def test_next_error_and_next_slow_wrap_round(signed_in: Client, user: User) -> None:
    trace = make_trace(user)
    first = step("thought", status="failed")
    slow = step("thought", duration_ms=5000)
    second = step("thought", error="bad")
    add(trace, first, slow, second)
    first_seq = Step.objects.get(pk=first.id).seq
    second_seq = Step.objects.get(pk=second.id).seq

    def jump(kind: str, after: int) -> str | None:
        url = f"/traces/{trace.id}/next/?kind={kind}&after={after}"
        return signed_in.get(url).json()["step_id"]

    assert jump("error", 0) == str(first.id)
    assert jump("error", first_seq) == str(second.id)
    assert jump("error", second_seq) == str(first.id)
    assert jump("slow", 0) == str(slow.id)
    assert jump("error", "junk") == str(first.id)  # type: ignore[arg-type]


def test_no_error_to_jump_to_is_null(signed_in: Client, user: User) -> None:
    trace = react_trace(user)

    assert signed_in.get(f"/traces/{trace.id}/next/?kind=error").json() == {"step_id": None}


# --- live rows and the timeline -----------------------------------------------------------------


def test_rows_render_new_steps_for_the_live_view(signed_in: Client, user: User) -> None:
    trace = react_trace(user, iterations=2)
    thoughts = list(Step.objects.filter(trace=trace, step_type="thought").order_by("seq"))

    url = f"/traces/{trace.id}/rows/?ids={thoughts[1].id},junk,{uuid.uuid4()}"
    content = signed_in.get(url).content.decode()

    assert content.count("<template") == 1
    assert f'data-parent="{thoughts[1].parent_id}"' in content
    assert "#2<" in content


def test_layout_compresses_idle_gaps() -> None:
    t0 = datetime(2025, 1, 1, tzinfo=UTC)

    def at(offset_s: float, duration_ms: int) -> dict[str, Any]:
        start = (t0 + timedelta(seconds=offset_s)).isoformat()
        return {"started_at": start, "finished_at": None, "duration_ms": duration_ms}

    steps = [at(0, 1000), at(0.5, 500), at(100, 1000)]
    real = selectors.layout_timeline(steps, compress=False)
    compressed = selectors.layout_timeline(steps, compress=True)

    assert real.span_ms == 101_000
    assert real.gaps == []
    assert real.bars[2].left == pytest.approx(100 / 101 * 100, abs=0.01)
    assert len(compressed.gaps) == 1
    assert compressed.gaps[0].idle_ms == 99_000
    # two busy seconds share what the one drawn gap leaves
    assert compressed.bars[2].left == pytest.approx(50 + selectors.GAP_DRAWN_SHARE * 50, abs=1)
    assert compressed.bars[0].width == pytest.approx(compressed.bars[2].width, abs=0.01)


def test_the_timeline_fragment_lays_out_bars(signed_in: Client, user: User) -> None:
    trace = make_trace(user)
    t0 = datetime(2025, 1, 1, tzinfo=UTC)
    add(
        trace,
        StepCreate(step_type="thought", started_at=t0, duration_ms=1000),
        StepCreate(step_type="thought", started_at=t0 + timedelta(seconds=60), duration_ms=1000),
    )

    real = signed_in.get(f"/traces/{trace.id}/timeline/").content.decode()
    compressed = signed_in.get(f"/traces/{trace.id}/timeline/?compress=1").content.decode()

    assert real.count('class="wf-bar') == 2
    assert "Compress idle gaps" in real
    assert 'class="gap"' in compressed
    assert "Idle gaps compressed (1)" in compressed


def test_a_step_hundreds_of_levels_deep_opens_in_the_tree(client: Client, user: User) -> None:
    """A deep link to a step 300 levels down (OTLP spans can nest so: the template no longer
    renders itself a level at a time, which failed 40 levels down) and the tree's JSON, deeper
    than orjson nests, all of it nested as stored."""
    trace = make_trace(user)
    chain = [step("thought", name="level 0")]
    for level in range(1, 300):
        chain.append(step("thought", parent=chain[-1].id, name=f"level {level}"))
    add(trace, *chain)
    client.force_login(user)

    page = client.get(f"/traces/{trace.id}/?step={chain[-1].id}")

    assert page.status_code == HTTPStatus.OK
    html = page.content.decode()
    assert html.count('<li class="node') == 300
    assert html.index(f'id="s-{chain[-2].id}"') < html.index(f'id="s-{chain[-1].id}"')
    assert html.count('<ul class="children" role="group" data-loaded="1">') == 299

    tree = client.get(f"/api/traces/{trace.id}/tree")
    assert tree.status_code == HTTPStatus.OK
    node = tree.json()["root_steps"][0]
    for level in range(1, 300):
        (node,) = node["children"]
        assert node["name"] == f"level {level}"
    assert node["children"] == []


def test_a_window_read_after_steps_moved_offers_no_window_past_them(user: User) -> None:
    """The trace's row is read in a statement of its own, before its top level: a parent span
    that arrives in between takes the steps that waited for it off the top level, and the
    ``root_count`` read counts them still. The window holds what is there, and offers no
    window after it (a page reloaded then showed "show 29 more" under its one root, which
    loaded nothing)."""
    trace = make_trace(user)
    add(trace, step("goal"))
    read_before = Trace.objects.get(pk=trace.pk)
    read_before.root_count = 30  # as read before the parent's write committed
    view = selectors.tree_view(trace=read_before)
    assert len(view.roots) == 1
    assert view.next_offset is None


#: A LangGraph ReAct agent's state as OpenInference records it (LangChain's ``{"type", "data"}``
#: messages; recorded from langgraph 1.2 with openinference-instrumentation-langchain 0.1.80,
#: metadata trimmed).
LANGGRAPH_STATE = {
    "messages": [
        {"type": "human", "data": {"id": "07f6", "type": "human", "content": "Weather in Paris?"}},
        {
            "type": "ai",
            "data": {
                "type": "ai",
                "content": "",
                "name": None,
                "tool_calls": [{"id": "call_7", "args": {"city": "Paris"}, "name": "get_weather"}],
                "response_metadata": {"finish_reason": "tool_calls"},
            },
        },
        {
            "type": "tool",
            "data": {
                "type": "tool",
                "name": "get_weather",
                "content": "It is 18°C and raining in Paris.",
                "tool_call_id": "call_7",
                "status": "success",
            },
        },
        {"type": "ai", "data": {"type": "ai", "content": "Rain, <i>18°C</i>.", "tool_calls": []}},
    ],
    "remaining_steps": 10006,
}


def test_the_detail_shows_langchain_messages_and_tool_calls_as_a_conversation(
    signed_in: Client, user: User
) -> None:
    """What LangChain and LangGraph agents record of their messages (their own serialisations,
    in an object beside other state, or LangChain's batch of one prompt) and what LlamaIndex
    records (OpenInference's ``contents``) is shown as a conversation: each message's text,
    the tools it calls as ``name(arguments)``, what else it holds, and the object's other keys;
    the value as recorded a click away. These showed as raw JSON."""
    trace = make_trace(user)
    item = step(
        "thought",
        data={
            "input": LANGGRAPH_STATE,
            "output": {
                "messages": [
                    [
                        {
                            "lc": 1,
                            "type": "constructor",
                            "id": ["langchain", "schema", "messages", "SystemMessage"],
                            "kwargs": {"type": "system", "content": "Be brief."},
                        },
                        {
                            "lc": 1,
                            "type": "constructor",
                            "id": ["langchain", "schema", "messages", "AIMessageChunk"],
                            "kwargs": {"type": "AIMessageChunk", "content": "Rain."},
                        },
                    ]
                ]
            },
            "output_messages": [
                {
                    "role": "assistant",
                    "contents": [{"message_content": {"text": "", "type": "text"}}],
                    "tool_calls": [
                        {"id": "call_0", "function": {"name": "add", "arguments": '{"a": 2}'}}
                    ],
                }
            ],
        },
    )
    add(trace, item)

    _, shown = selectors.step_detail(trace=trace, step_id=item.id)
    values = {value.key: value for value in shown}
    state = values["input"]
    assert state.messages is not None
    assert [(m.role, m.text) for m in state.messages] == [
        ("user", "Weather in Paris?"),
        ("assistant", ""),
        ("tool", "It is 18°C and raining in Paris."),
        ("assistant", "Rain, <i>18°C</i>."),
    ]
    assert state.messages[1].calls == ['get_weather({"city": "Paris"})']
    assert state.messages[1].extra == ""  # the calls were all it held besides
    assert (state.messages[2].about, state.messages[2].extra) == ("get_weather · call_7", "")
    assert json.loads(state.besides) == {"remaining_steps": 10006}
    batch = values["output"]
    assert batch.messages is not None
    assert [(m.role, m.text) for m in batch.messages] == [
        ("system", "Be brief."),
        ("assistant", "Rain."),
    ]
    assert batch.besides == ""
    (called,) = values["output_messages"].messages or []
    assert (called.text, called.calls, called.extra) == ("", ['add({"a": 2})'], "")

    content = signed_in.get(f"/traces/{trace.id}/steps/{item.id}/").content.decode()
    assert "<code>get_weather({&quot;city&quot;: &quot;Paris&quot;})</code>" in content
    assert '<span class="muted about">get_weather · call_7</span>' in content
    assert "<pre>Rain, &lt;i&gt;18°C&lt;/i&gt;.</pre>" in content  # escaped
    assert "<i>18°C</i>" not in content
    assert "&quot;remaining_steps&quot;: 10006" in content
    assert "besides the messages" in content
    # The value as recorded, with what the conversation leaves out (LangChain's metadata).
    assert content.count('<details class="raw">') == 3
    assert "&quot;finish_reason&quot;: &quot;tool_calls&quot;" in content


def test_tool_calls_of_no_known_shape_stay_json() -> None:
    shown = selectors._messages(
        [{"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "kind": "odd"}]}]
    )
    assert shown is not None
    (message,) = shown
    assert message.calls == []
    assert json.loads(message.extra) == {"tool_calls": [{"id": "c1", "kind": "odd"}]}
    # A list of several prompts (a LangChain batch) and messages of unknown types stay JSON.
    assert selectors._messages([[{"role": "user"}], [{"role": "user"}]]) is None
    assert selectors._messages([{"type": "human", "data": {}}, {"type": "robot"}]) is None
    # The tools offered to a model, in OpenAI's shape, are no messages.
    assert selectors._messages([{"type": "function", "function": {"name": "add"}}]) is None


def test_tool_calls_and_answers_in_message_parts_show_as_calls_and_text(
    signed_in: Client, user: User
) -> None:
    """Tool calls and their answers as parts of messages (the GenAI conventions', as
    OpenTelemetry's OpenAI instrumentation and Pydantic AI record them; the Vercel AI SDK's;
    Anthropic's) show as calls and as the answers' text, with the call's id beside the role:
    they showed as an empty message over a block of JSON. A system prompt kept apart
    (``system_instructions``) is a system message; null fields (the OpenAI Agents SDK's) say
    nothing and are not shown; why an answer ended is beside its role."""
    trace = make_trace(user)
    item = step(
        "thought",
        data={
            "system_instructions": [{"type": "text", "content": "Be brief."}],
            "input": [
                {"role": "user", "parts": [{"type": "text", "content": "Weather in Paris?"}]},
                {
                    "role": "assistant",
                    "parts": [
                        {
                            "type": "tool_call",
                            "id": "c1",
                            "name": "get_weather",
                            "arguments": {"city": "Paris"},
                        }
                    ],
                },
                {
                    "role": "tool",
                    "parts": [{"type": "tool_call_response", "id": "c1", "response": "Rain."}],
                },
                # Pydantic AI: the answer under result, from the user.
                {
                    "role": "user",
                    "parts": [{"type": "tool_call_response", "id": "c2", "result": {"mm": 4}}],
                },
                # The Vercel AI SDK, and Anthropic.
                {
                    "role": "assistant",
                    "content": [
                        {"type": "tool-call", "toolCallId": "v1", "toolName": "now", "input": {}},
                        {"type": "tool_use", "id": "a1", "name": "sum", "input": {"a": 1}},
                    ],
                },
                {
                    "role": "tool",
                    "content": [{"type": "tool-result", "toolCallId": "v1", "output": "noon"}],
                },
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "tool_result",
                            "tool_use_id": "a1",
                            "content": [{"type": "text", "text": "1"}],
                        },
                        {"type": "image", "url": "https://example.com/a.png"},
                    ],
                },
            ],
            "output": [
                {
                    "role": "assistant",
                    "audio": None,
                    "refusal": None,
                    "annotations": [],
                    "content": "Rain all day.",
                    "finish_reason": "stop",
                }
            ],
        },
    )
    add(trace, item)

    _, shown = selectors.step_detail(trace=trace, step_id=item.id)
    values = {value.key: value for value in shown}
    assert [value.key for value in shown][:3] == ["system_instructions", "input", "output"]
    (system,) = values["system_instructions"].messages or []
    assert (system.role, system.text) == ("system", "Be brief.")
    asked = values["input"].messages or []
    assert [(m.role, m.about, m.text, m.calls) for m in asked] == [
        ("user", "", "Weather in Paris?", []),
        ("assistant", "", "", ['get_weather({"city": "Paris"})']),
        ("tool", "c1", "Rain.", []),
        ("user", "c2", '{\n  "mm": 4\n}', []),
        ("assistant", "", "", ["now({})", 'sum({"a": 1})']),
        ("tool", "v1", "noon", []),
        ("user", "a1", "1", []),
    ]
    assert [m.extra for m in asked[:6]] == [""] * 6
    assert json.loads(asked[6].extra) == {
        "content": [{"type": "image", "url": "https://example.com/a.png"}]
    }
    (answer,) = values["output"].messages or []
    assert (answer.about, answer.text, answer.extra) == ("stop", "Rain all day.", "")

    content = signed_in.get(f"/traces/{trace.id}/steps/{item.id}/").content.decode()
    assert "<code>get_weather({&quot;city&quot;: &quot;Paris&quot;})</code>" in content
    assert '<span class="muted about">c1</span><pre>Rain.</pre>' in content


def test_an_agent_run_s_conversation_shows_after_its_answer(signed_in: Client, user: User) -> None:
    """An agent run's whole conversation (``messages``: Pydantic AI's
    ``pydantic_ai.all_messages``) shows as messages, after what the run answered."""
    trace = make_trace(user)
    item = step(
        "goal",
        data={
            "attributes": {"gen_ai.agent.name": "agent"},
            "messages": [
                {"role": "user", "parts": [{"type": "text", "content": "Weather in <Paris>?"}]},
                {"role": "assistant", "parts": [{"type": "text", "content": "Rain."}]},
            ],
            "output": "Rain.",
        },
    )
    add(trace, item)

    _, shown = selectors.step_detail(trace=trace, step_id=item.id)
    assert [value.key for value in shown] == ["output", "messages", "attributes"]
    messages = shown[1].messages or []
    assert [(m.role, m.text) for m in messages] == [
        ("user", "Weather in <Paris>?"),
        ("assistant", "Rain."),
    ]
    content = signed_in.get(f"/traces/{trace.id}/steps/{item.id}/").content.decode()
    assert "<pre>Weather in &lt;Paris&gt;?</pre>" in content


@pytest.mark.parametrize(
    ("value", "number", "dollars"),
    [
        (Decimal(0), "0.0000", ""),
        (Decimal("0.0021"), "0.0021", "$0.0021"),
        (Decimal("0.001"), "0.0010", "$0.0010"),
        (Decimal("0.00099"), "0.00099", "$0.00099"),
        (Decimal("0.00002"), "0.000020", "$0.000020"),
        (Decimal("0.0000476"), "0.000048", "$0.000048"),
        (Decimal("0.00000001"), "0.00000001", "$0.00000001"),
        (Decimal("1234.5"), "1234.5000", "$1,234.50"),
    ],
)
def test_a_cost_shows_its_first_significant_digits(value, number, dollars) -> None:
    """Below a tenth of a cent a cost shows its first two significant digits (a model call of a
    small model's showed $0.0000, as if it cost nothing), at most 8 decimals (what is stored)."""
    assert trace_format.cost(value) == number
    assert trace_format.usd(value) == dollars


def test_the_list_and_the_trace_show_a_small_cost(signed_in: Client, user: User) -> None:
    trace = make_trace(user)
    Trace.objects.filter(id=trace.id).update(total_cost=Decimal("0.00002"))
    for url in ("/traces/", f"/traces/{trace.id}/"):
        assert 'data-total="total_cost">0.000020<' in signed_in.get(url).content.decode()


def test_a_chat_completion_shows_its_answers_as_messages(signed_in: Client, user: User) -> None:
    """A model call's whole response as instrumentations record it (OpenAI's ChatCompletion:
    Instructor's, LiteLLM's) shows its choices' messages, each with why it ended, and the
    rest of the response below them."""
    completion = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "model": "gpt-4o",
        "choices": [
            {
                "index": 0,
                "finish_reason": "tool_calls",
                "message": {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "call_1",
                            "type": "function",
                            "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                        }
                    ],
                },
            }
        ],
        "usage": {"prompt_tokens": 6, "completion_tokens": 1, "total_tokens": 7},
    }
    trace = make_trace(user)
    item = step("thought", data={"output": completion})
    add(trace, item)

    _, (shown,) = selectors.step_detail(trace=trace, step_id=item.id)
    (answer,) = shown.messages or []
    assert (answer.role, answer.about, answer.calls) == (
        "assistant",
        "tool_calls",
        ['get_weather({"city": "Paris"})'],
    )
    assert "choices" not in json.loads(shown.besides)
    assert json.loads(shown.besides)["usage"]["total_tokens"] == 7
    # Not a response: a choice without a message, or a message without a role.
    assert selectors._messages(None) is None
    for odd in ({"choices": [{"text": "hi"}]}, {"choices": [{"message": {"content": "x"}}]}):
        item = step("thought", data={"output": odd})
        add(trace, item)
        _, (shown,) = selectors.step_detail(trace=trace, step_id=item.id)
        assert shown.messages is None


def test_a_request_that_repeats_the_messages_shown_is_folded(signed_in: Client, user: User) -> None:
    """OpenInference records a model call's messages flattened (``input_messages``) beside
    the request that holds them again (``input``): the conversation shows once, the request
    folded away as recorded. An input that is no conversation stays as it is."""
    asked = [{"role": "user", "content": "Weather in Paris?"}]
    trace = make_trace(user)
    item = step(
        "thought",
        data={
            "input_messages": asked,
            "input": {"messages": asked, "model": "gpt-4o"},
            "output_messages": [{"role": "assistant", "content": "Rain."}],
            "output": "Rain.",
        },
    )
    add(trace, item)

    _, shown = selectors.step_detail(trace=trace, step_id=item.id)
    values = {value.key: value for value in shown}
    assert values["input_messages"].messages
    assert (values["input"].messages, values["input"].folded) == (None, True)
    assert json.loads(values["input"].text)["model"] == "gpt-4o"
    assert (values["output"].text, values["output"].folded) == ("Rain.", False)
    content = signed_in.get(f"/traces/{trace.id}/steps/{item.id}/").content.decode()
    assert content.count("<pre>Weather in Paris?</pre>") == 1
    assert "as recorded (JSON): the messages above, again" in content
