from __future__ import annotations

import uuid
from datetime import date

from django.http import QueryDict

from traces.filters import MAX_QUERY_INT, TreeQueryForm, parse_step_id, trace_filters


def test_the_list_filters_keep_what_parses_and_say_what_they_dropped() -> None:
    params = QueryDict("status=failed&mode=sleeping&since=2025-01-02&q=%20needle%20&user=bob")

    filters = trace_filters(params, staff=False)

    assert (filters.status, filters.mode, filters.since, filters.q) == (
        "failed",
        "",
        date(2025, 1, 2),
        "needle",
    )
    assert filters.user == ""
    assert [n.split(":")[0] for n in filters.notices] == ["Ignored mode", "Ignored user"]
    assert filters.query() == {"status": "failed", "q": "needle", "since": "2025-01-02"}


def test_staff_may_filter_by_user() -> None:
    assert trace_filters(QueryDict("user=bob"), staff=True).user == "bob"


def test_a_notice_does_not_echo_the_value_it_ignored() -> None:
    filters = trace_filters(QueryDict("status=%3Cscript%3E"), staff=False)

    assert filters.status == ""
    assert "<script>" not in " ".join(filters.notices)


def test_tree_parameters_read_malformed_values_as_none() -> None:
    step = uuid.uuid4()
    query = TreeQueryForm(QueryDict(f"step={step}&offset=-3&after={'9' * 40}"))

    assert query.step_id() == step
    assert query.number("offset") == 0
    assert query.number("after") == MAX_QUERY_INT
    assert TreeQueryForm(QueryDict("step=nope&offset=1e3")).step_id() is None
    assert TreeQueryForm(QueryDict("offset=1e3")).number("offset") == 0
    assert parse_step_id("root") is None
