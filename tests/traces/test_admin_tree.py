"""A trace's step tree on its admin change page: nested, collapsible, windowed, each row with its
outcome and links, in a constant number of queries."""

from __future__ import annotations

import re
import uuid
from http import HTTPStatus
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.contrib.auth.models import User
from django.test import Client

from tests.traces.admin_pages import change_url, count_queries
from traces.admin import STEP_TREE_WINDOW
from traces.models import Trace
from traces.store import StepCreate, get_trace_store

pytestmark = pytest.mark.django_db


def window_url(trace: Trace, parent: object, offset: int = 0) -> str:
    return f"/admin/traces/trace/{trace.id}/tree/{parent}/?offset={offset}"


def agent_trace(user: User, *, thoughts: int) -> tuple[Trace, dict[str, uuid.UUID]]:
    """A goal with ``thoughts`` model calls under it; the first calls a tool whose program
    exits with 1, the second one that runs fine."""
    store = get_trace_store()
    trace = async_to_sync(store.create_trace)(user=user, task="tree")
    ids = {name: uuid.uuid4() for name in ("goal", "thought", "action", "result", "ok_action")}
    steps = [StepCreate(step_type="goal", id=ids["goal"], name="goal")]
    for i in range(thoughts):
        thought_id = ids["thought"] if i == 0 else uuid.uuid4()
        steps.append(
            StepCreate(step_type="thought", id=thought_id, parent_id=ids["goal"], name=f"t{i}")
        )
        if i < 2:
            action = ids["action"] if i == 0 else ids["ok_action"]
            steps.append(
                StepCreate(
                    step_type="action",
                    id=action,
                    parent_id=thought_id,
                    name="execute_code",
                    status="failed" if i == 0 else "completed",
                    duration_ms=1500,
                )
            )
            steps.append(
                StepCreate(
                    step_type="result",
                    id=ids["result"] if i == 0 else uuid.uuid4(),
                    parent_id=action,
                    name="execute_code",
                    status="failed" if i == 0 else "completed",
                    data={"result": {"exit_code": 1 - i, "stdout": "", "stderr": ""}},
                )
            )
    async_to_sync(store.add_steps)(trace.id, steps)
    return trace, ids


def node_ids(html: str) -> list[str]:
    return re.findall(r'<li class="step-tree-node[^"]*" data-id="([^"]+)"', html)


def test_the_change_page_shows_the_tree_nested_and_windowed(
    admin_client: Client, user: User
) -> None:
    trace, ids = agent_trace(user, thoughts=STEP_TREE_WINDOW + 5)

    html = admin_client.get(change_url(trace)).content.decode()

    tree = html[html.index('<div class="step-tree"') :]
    shown = node_ids(tree)
    # The goal, the first window of its thoughts, and the two actions: three levels open.
    assert shown[:3] == [str(ids["goal"]), str(ids["thought"]), str(ids["action"])]
    assert len(shown) == 1 + STEP_TREE_WINDOW + 2
    assert str(ids["result"]) not in shown  # the fourth level loads on demand
    assert f'href="{window_url(trace, ids["goal"], STEP_TREE_WINDOW)}"' in tree
    assert "show 5 more of 30" in tree
    assert f'href="/admin/traces/trace/{trace.id}/tree/{ids["action"]}/"' in tree
    assert "<details open><summary>" in tree
    assert f'href="/traces/{trace.id}/?step={ids["action"]}"' in tree
    assert f'href="/admin/traces/step/{ids["action"]}/change/"' in tree
    action_row = tree[tree.index(f'data-id="{ids["action"]}"') :]
    assert 'class="outcome st-failed"' in action_row[: action_row.index("</summary>")]
    assert "1.5 s" in action_row[: action_row.index("</summary>")]
    assert "/static/traces/admin_tree.js" in html


def test_a_window_loads_the_next_rows_with_their_outcome(admin_client: Client, user: User) -> None:
    trace, ids = agent_trace(user, thoughts=STEP_TREE_WINDOW + 5)

    more = admin_client.get(window_url(trace, ids["goal"], STEP_TREE_WINDOW)).content.decode()
    below = admin_client.get(window_url(trace, ids["action"])).content.decode()

    assert len(node_ids(more)) == 5
    assert "show" not in more.replace("step-tree", "")  # the last window: no "more" link
    assert node_ids(below) == [str(ids["result"])]
    assert re.search(
        r'class="outcome st-failed"[^>]*>.*?<span class="outcome-text">failed · exit code 1<',
        below,
    )


def test_the_top_level_is_windowed_too(admin_client: Client, user: User) -> None:
    store = get_trace_store()
    trace = async_to_sync(store.create_trace)(user=user, task="flat")
    steps = [StepCreate(step_type="feedback", name=f"f{i}") for i in range(STEP_TREE_WINDOW + 1)]
    async_to_sync(store.add_steps)(trace.id, steps)

    html = admin_client.get(change_url(trace)).content.decode()
    rest = admin_client.get(window_url(trace, "root", STEP_TREE_WINDOW)).content.decode()

    assert f'href="{window_url(trace, "root", STEP_TREE_WINDOW)}"' in html
    assert node_ids(rest) == [str(steps[-1].id)]


@pytest.mark.parametrize("parent", ["not-a-uuid", str(uuid.uuid4())])
def test_an_unknown_or_malformed_step_is_404(admin_client: Client, user: User, parent: str) -> None:
    trace, _ = agent_trace(user, thoughts=1)

    assert admin_client.get(window_url(trace, parent)).status_code == HTTPStatus.NOT_FOUND


def test_only_staff_with_the_permission_see_windows(client: Client, user: User) -> None:
    trace, ids = agent_trace(user, thoughts=1)
    client.force_login(user)

    response = client.get(window_url(trace, ids["goal"]))

    assert response.status_code == HTTPStatus.FOUND
    assert "/admin/login/" in response["Location"]


def test_the_change_page_takes_the_same_queries_whatever_the_tree(
    admin_client: Client, user: User
) -> None:
    small, _ = agent_trace(user, thoughts=2)
    large, _ = agent_trace(user, thoughts=STEP_TREE_WINDOW * 3)
    admin_client.get(change_url(small))

    assert count_queries(admin_client, change_url(large)) == count_queries(
        admin_client, change_url(small)
    )


def test_a_window_takes_a_constant_number_of_queries(
    admin_client: Client, user: User, django_assert_num_queries: Any
) -> None:
    trace, ids = agent_trace(user, thoughts=STEP_TREE_WINDOW * 3)
    admin_client.get(window_url(trace, ids["goal"]))

    # Session, user, the parent step (its count of children), its window of children; for
    # the top level the trace's root count instead of the parent.
    with django_assert_num_queries(4):
        response = admin_client.get(window_url(trace, ids["goal"], STEP_TREE_WINDOW))
    with django_assert_num_queries(4):
        admin_client.get(window_url(trace, "root"))

    assert len(node_ids(response.content.decode())) == STEP_TREE_WINDOW
