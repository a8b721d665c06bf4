"""The admin: read-only trace browsing with constant queries, and API token revocation."""

from __future__ import annotations

import uuid
from http import HTTPStatus
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.contrib.auth.models import Permission, User
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from devassist.models import ApiToken
from devassist.tokens import api_token_create
from tests.traces.admin_pages import change_url, count_queries
from traces.models import PendingLogEvents, Step, Trace, TraceEvent
from traces.store import StepCreate, get_trace_store

SCRIPT = "<script>alert(1)</script>"
ESCAPED_SCRIPT = "&lt;script&gt;alert(1)&lt;/script&gt;"


def make_trace(user: User, *, steps: int = 0, data: Any = None) -> Trace:
    """A trace with a root goal step and ``steps - 1`` thought children under it, each step's
    data written again once it is stored: one logged event (``step_updated``) per step (a
    step is its own ``step_added``, which is not logged)."""
    store = get_trace_store()
    trace = async_to_sync(store.create_trace)(user=user, task="t")
    if steps:
        root = uuid.uuid4()
        batch = [StepCreate(step_type="goal", id=root, name="goal", data=data or {})]
        batch += [
            StepCreate(step_type="thought", parent_id=root, name=f"thought {i}")
            for i in range(steps - 1)
        ]
        async_to_sync(store.add_steps)(trace.id, batch)
        updates = {item.id: {"data": item.data} for item in batch}
        async_to_sync(store.add_steps)(trace.id, [], updates=updates)
    return trace


@pytest.mark.django_db
@pytest.mark.parametrize(
    "url",
    [
        "/admin/traces/trace/",
        "/admin/traces/step/",
        "/admin/traces/traceevent/",
        "/admin/devassist/apitoken/",
    ],
)
def test_changelists_open_for_a_superuser(admin_client: Client, user: User, url: str) -> None:
    make_trace(user, steps=3)
    api_token_create(user=user, name="t")

    response = admin_client.get(url)

    assert response.status_code == HTTPStatus.OK
    assert response.context["cl"].result_count >= 1


@pytest.mark.django_db
def test_change_pages_open_for_a_superuser(admin_client: Client, user: User) -> None:
    trace = make_trace(user, steps=2)
    step = Step.objects.get(trace=trace, step_type="thought")
    event = TraceEvent.objects.filter(trace=trace).first()
    token, _ = api_token_create(user=user, name="t")
    assert event is not None

    for obj in (trace, step, event, token):
        response = admin_client.get(change_url(obj))
        assert response.status_code == HTTPStatus.OK, change_url(obj)


@pytest.mark.django_db
def test_trace_change_page_links_to_steps_and_api(admin_client: Client, user: User) -> None:
    trace = make_trace(user, steps=2)

    content = admin_client.get(change_url(trace)).content.decode()

    assert f"../../step/?trace__id__exact={trace.id}" in content
    assert "2 steps" in content
    assert f"/api/traces/{trace.id}/tree" in content


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("url", "model"),
    [
        ("/admin/traces/trace/", Trace),
        ("/admin/traces/step/", Step),
        ("/admin/traces/traceevent/", TraceEvent),
    ],
)
def test_trace_changelists_use_constant_queries(
    admin_client: Client, user: User, url: str, model: type[Any]
) -> None:
    # Two traces of one step each: 2 traces, 2 steps, 2 events.
    make_trace(user, steps=1)
    make_trace(user, steps=1)
    admin_client.get(url)
    assert model.objects.count() == 2
    with_two = count_queries(admin_client, url)

    if model is Trace:
        for _ in range(18):
            make_trace(user, steps=1)
    else:
        make_trace(user, steps=18)
    assert model.objects.count() == 20
    with_twenty = count_queries(admin_client, url)

    assert with_twenty == with_two


@pytest.mark.django_db
def test_api_token_changelist_uses_constant_queries(
    admin_client: Client, django_user_model: type[User]
) -> None:
    def tokens_for(start: int, stop: int) -> None:
        for i in range(start, stop):
            owner = django_user_model.objects.create_user(username=f"owner{i}")
            api_token_create(user=owner, name=f"token {i}")

    url = "/admin/devassist/apitoken/"
    tokens_for(0, 2)
    admin_client.get(url)
    with_two = count_queries(admin_client, url)

    tokens_for(2, 20)
    assert ApiToken.objects.count() == 20
    with_twenty = count_queries(admin_client, url)

    assert with_twenty == with_two


@pytest.mark.django_db
def test_step_change_page_shows_data_as_escaped_pretty_json(
    admin_client: Client, user: User
) -> None:
    trace = make_trace(user, steps=1, data={"html": SCRIPT, "nested": {"n": 1}})
    step = Step.objects.get(trace=trace)

    content = admin_client.get(change_url(step)).content.decode()

    assert SCRIPT not in content
    assert ESCAPED_SCRIPT in content
    assert "<pre" in content
    # Indented, sorted keys: "html" first, then the nested object on its own lines.
    assert "\n  &quot;nested&quot;: {\n    &quot;n&quot;: 1\n  }" in content


@pytest.mark.django_db
def test_trace_event_change_page_escapes_the_payload(admin_client: Client, user: User) -> None:
    trace = make_trace(user, steps=1, data={"html": SCRIPT})
    event = TraceEvent.objects.get(trace=trace, event="step_updated")
    assert SCRIPT in event.payload["updates"]["data_preview"]

    content = admin_client.get(change_url(event)).content.decode()

    assert SCRIPT not in content
    assert "step_updated" in content


@pytest.mark.django_db
def test_trace_metadata_is_escaped_on_the_change_page(admin_client: Client, user: User) -> None:
    trace = async_to_sync(get_trace_store().create_trace)(
        user=user, task="t", metadata={"note": SCRIPT}
    )

    content = admin_client.get(change_url(trace)).content.decode()

    assert SCRIPT not in content
    assert ESCAPED_SCRIPT in content


@pytest.mark.django_db
@pytest.mark.parametrize(
    "url", ["/admin/traces/trace/add/", "/admin/traces/step/add/", "/admin/traces/traceevent/add/"]
)
def test_traces_cannot_be_added_in_the_admin(admin_client: Client, url: str) -> None:
    assert admin_client.get(url).status_code == HTTPStatus.FORBIDDEN


@pytest.mark.django_db
def test_traces_cannot_be_changed_in_the_admin(admin_client: Client, user: User) -> None:
    trace = make_trace(user)

    response = admin_client.post(change_url(trace), {"task": "rewritten", "status": "failed"})

    assert response.status_code == HTTPStatus.FORBIDDEN
    trace.refresh_from_db()
    assert trace.task == "t"
    assert trace.status == "running"


@pytest.mark.django_db
def test_a_step_cannot_be_deleted_alone_in_the_admin(admin_client: Client, user: User) -> None:
    """By hand it would leave its ancestors' rollups, its trace's totals and every worker's
    kept tree of the trace (keyed on the trace's ``last_seq``) showing it."""
    trace = make_trace(user, steps=3)
    step = trace.steps.order_by("seq").last()
    assert step is not None

    page = admin_client.post(f"/admin/traces/step/{step.pk}/delete/", {"post": "yes"})
    selected = {"action": "delete_selected", "_selected_action": [step.pk], "post": "yes"}
    admin_client.post("/admin/traces/step/", selected)

    assert page.status_code == HTTPStatus.FORBIDDEN
    assert "delete_selected" not in admin_client.get("/admin/traces/step/").content.decode()
    assert Step.objects.filter(pk=step.pk).exists()


@pytest.mark.django_db
@pytest.mark.parametrize("how", ["page", "action"])
def test_a_trace_is_deleted_in_the_admin_with_its_steps(
    admin_client: Client, user: User, how: str
) -> None:
    trace = make_trace(user, steps=3)
    delete_page = f"/admin/traces/trace/{trace.pk}/delete/"

    assert "Step: " in admin_client.get(delete_page).content.decode()  # listed, not refused
    if how == "page":
        admin_client.post(delete_page, {"post": "yes"})
    else:
        selected = {"action": "delete_selected", "_selected_action": [trace.pk], "post": "yes"}
        admin_client.post("/admin/traces/trace/", selected)

    assert not Trace.objects.filter(pk=trace.pk).exists()
    assert not Step.objects.filter(trace_id=trace.pk).exists()


@pytest.mark.django_db
def test_deleting_a_trace_in_the_admin_takes_the_permission_to_delete_steps(
    staff_user: User, user: User
) -> None:
    trace = make_trace(user, steps=2)
    staff_user.user_permissions.add(
        *Permission.objects.filter(codename__in=["view_trace", "delete_trace", "delete_traceevent"])
    )
    client = Client()
    client.force_login(staff_user)
    delete_page = f"/admin/traces/trace/{trace.pk}/delete/"

    refused = client.post(delete_page, {"post": "yes"})
    staff_user.user_permissions.add(Permission.objects.get(codename="delete_step"))
    client.post(delete_page, {"post": "yes"})

    assert refused.status_code == HTTPStatus.FORBIDDEN  # "...permission to delete: step"
    assert not Trace.objects.filter(pk=trace.pk).exists()


@pytest.mark.django_db
def test_api_tokens_cannot_be_added_in_the_admin(admin_client: Client) -> None:
    assert admin_client.get("/admin/devassist/apitoken/add/").status_code == HTTPStatus.FORBIDDEN


@pytest.mark.django_db
def test_api_token_change_page_never_shows_the_token(admin_client: Client, user: User) -> None:
    token, raw = api_token_create(user=user, name="laptop")

    content = admin_client.get(change_url(token)).content.decode()

    assert raw not in content
    assert "laptop" in content
    assert token.prefix in content


@pytest.mark.django_db
def test_revoke_action_revokes_the_selected_tokens(admin_client: Client, user: User) -> None:
    first, first_raw = api_token_create(user=user, name="first")
    second, _ = api_token_create(user=user, name="second")
    _, kept_raw = api_token_create(user=user, name="kept")

    response = admin_client.post(
        "/admin/devassist/apitoken/",
        {"action": "revoke", "_selected_action": [first.pk, second.pk]},
        follow=True,
    )

    assert response.status_code == HTTPStatus.OK
    assert "Revoked 2 token(s)." in response.content.decode()
    revoked = set(ApiToken.objects.filter(revoked_at__isnull=False).values_list("pk", flat=True))
    assert revoked == {first.pk, second.pk}
    refused = Client(headers={"Authorization": f"Bearer {first_raw}"}).get("/api/traces")
    assert refused.status_code == HTTPStatus.UNAUTHORIZED
    accepted = Client(headers={"Authorization": f"Bearer {kept_raw}"}).get("/api/traces")
    assert accepted.status_code == HTTPStatus.OK


@pytest.mark.django_db
def test_staff_without_permissions_cannot_see_traces_in_the_admin(
    client: Client, staff_user: User, user: User
) -> None:
    trace = make_trace(user)
    client.force_login(staff_user)

    assert client.get("/admin/traces/trace/").status_code == HTTPStatus.FORBIDDEN
    assert client.get(change_url(trace)).status_code == HTTPStatus.FORBIDDEN


@pytest.mark.django_db
def test_log_records_waiting_for_their_spans_are_listed_escaped(
    admin_client: Client, user: User
) -> None:
    """An OTLP trace's page links to its waiting log records; their list and change page
    show them, escaped, and cannot change them."""
    trace = async_to_sync(get_trace_store().create_trace)(
        user=user, task="otlp", metadata={"otel": {}}
    )
    waiting = [
        PendingLogEvents.objects.create(
            trace=trace,
            step_id=uuid.uuid4(),
            span_id=f"{i:016x}",
            events=[{"name": "log", "body": SCRIPT}] * (i + 1),
        )
        for i in range(3)
    ]

    page = admin_client.get(change_url(trace)).content.decode()
    assert f"/api/traces/{trace.id}/waiting-log-records" in page
    assert f"../../pendinglogevents/?trace__id__exact={trace.id}" in page
    listed = admin_client.get(f"/admin/traces/pendinglogevents/?trace__id__exact={trace.id}")
    assert listed.context["cl"].result_count == 3
    assert "0000000000000002" in listed.content.decode()
    with_three = count_queries(admin_client, "/admin/traces/pendinglogevents/")
    PendingLogEvents.objects.bulk_create(
        PendingLogEvents(trace=trace, step_id=uuid.uuid4(), events=[]) for _ in range(10)
    )
    assert count_queries(admin_client, "/admin/traces/pendinglogevents/") == with_three
    content = admin_client.get(change_url(waiting[2])).content.decode()
    assert SCRIPT not in content
    assert ESCAPED_SCRIPT in content
    posted = admin_client.post(change_url(waiting[0]), {"span_id": "ffffffffffffffff"})
    assert posted.status_code == HTTPStatus.FORBIDDEN
    assert (
        "waiting log records" not in admin_client.get(change_url(make_trace(user))).content.decode()
    )


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("url", "field"),
    [
        ("/admin/traces/trace/", "id"),
        ("/admin/traces/step/", "id"),
        ("/admin/traces/step/", "trace_id"),
        ("/admin/traces/traceevent/", "trace_id"),
    ],
)
def test_an_id_searched_for_is_looked_up_by_its_index(
    admin_client: Client, user: User, url: str, field: str
) -> None:
    """An id pasted into the search box finds its rows by the id's index: Django's ``=id``
    search compared the ids' text (``UPPER(id::text)``), reading every row (a step's id among
    1.5 million steps took 3 s). Other words still search the text fields."""
    trace, other = make_trace(user, steps=3), make_trace(user, steps=2)
    model = admin_client.get(url).context["cl"].model
    row = trace if model is Trace else model.objects.filter(trace_id=trace.id).first()
    value = getattr(row, field)

    with CaptureQueriesContext(connection) as queries:
        found = admin_client.get(url, {"q": f" {value} "})
    assert found.status_code == HTTPStatus.OK
    rows = list(found.context["cl"].result_list)
    assert rows
    assert all(getattr(r, field) == value for r in rows)
    assert not any("UPPER" in query["sql"] for query in queries.captured_queries)
    if model is Trace:
        assert other not in rows
        assert admin_client.get(url, {"q": "t"}).context["cl"].result_count == 2
