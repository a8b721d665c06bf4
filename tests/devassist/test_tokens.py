"""API tokens a user makes and revokes themselves: the page at /tokens/ and /api/tokens."""

from __future__ import annotations

import threading
from http import HTTPStatus
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client
from django.utils import timezone

from devassist.exceptions import Conflict
from devassist.models import ApiToken
from devassist.tokens import MAX_ACTIVE_TOKENS, api_token_create, api_token_revoke
from tests.traces.otlp_clients import protobuf_body, sdk_spans
from traces.models import Trace

pytestmark = pytest.mark.django_db


@pytest.fixture
def browser(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def bearer(raw: str) -> Client:
    return Client(headers={"Authorization": f"Bearer {raw}"})


def created_token(response: Any) -> str:
    """The token text the page shows once, read from its input."""
    html = response.content.decode()
    start = html.index('id="token-text" value="') + len('id="token-text" value="')
    return html[start : html.index('"', start)]


def send_a_span(raw: str) -> Any:
    """An OTLP/HTTP export of one span made by the OTel SDK, as an agent given the page's two
    variables sends it (the token in ``x-api-key``)."""
    spans = sdk_spans(lambda tracer: tracer.start_span("agent run").end(), service="my-agent")
    return Client().post(
        "/v1/traces",
        protobuf_body(spans),
        content_type="application/x-protobuf",
        headers={"x-api-key": raw},
    )


# -- the page ------------------------------------------------------------------------------------


def test_a_created_token_is_shown_once_with_the_variables_that_send_traces_here(
    browser: Client, user: User
) -> None:
    response = browser.post("/tokens/", {"name": "my-agent"})

    assert response.status_code == HTTPStatus.OK
    raw = created_token(response)
    assert raw.startswith("da_")
    html = response.content.decode()
    assert "export OTEL_EXPORTER_OTLP_ENDPOINT=http://testserver\n" in html
    assert f'export OTEL_EXPORTER_OTLP_HEADERS="x-api-key={raw}"' in html
    # Python's zero-code instrumentation sends gRPC unless told: the page says how to send HTTP.
    assert "OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf" in html
    assert "no-store" in response["Cache-Control"]
    # The variables work: the agent's span is the user's trace.
    assert send_a_span(raw).status_code == HTTPStatus.OK
    assert Trace.objects.get().user == user
    # Listed by its name and first characters, never again in full.
    again = browser.get("/tokens/")
    assert raw not in again.content.decode()
    assert "my-agent" in again.content.decode()
    assert raw[:10] in again.content.decode()
    token = ApiToken.objects.get()
    assert (token.user, token.name, token.last_used_at is not None) == (user, "my-agent", True)


def test_the_list_shows_the_user_s_own_tokens_active_ones_first(
    browser: Client, user: User, other_user: User, django_assert_num_queries: Any
) -> None:
    old, _ = api_token_create(user=user, name="old-laptop")
    api_token_revoke(token=old)
    api_token_create(user=user, name="ci")
    api_token_create(user=user, name="my-agent")
    api_token_create(user=other_user, name="someone-else")

    # The session's user and preferences, the tokens.
    with django_assert_num_queries(4):
        html = browser.get("/tokens/").content.decode()

    assert html.index("my-agent") < html.index("ci") < html.index("old-laptop")
    assert "someone-else" not in html
    assert html.count("token-revoke") == 2  # the revoked one has no button
    assert "revoked" in html


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("", "This field is required."),
        ("   ", "This field is required."),
        ("x" * 101, "Ensure this value has at most 100 characters (it has 101)."),
    ],
)
def test_a_bad_name_is_the_form_s_error_and_creates_nothing(
    browser: Client, name: str, message: str
) -> None:
    response = browser.post("/tokens/", {"name": name})

    assert response.status_code == HTTPStatus.BAD_REQUEST
    assert f'<p class="error" id="token-error" role="alert">{message}</p>' in (
        response.content.decode()
    )
    assert 'id="token-text"' not in response.content.decode()
    assert not ApiToken.objects.exists()


def test_a_name_that_cannot_be_stored_is_the_form_s_error(browser: Client) -> None:
    response = browser.post("/tokens/", {"name": "my\x00agent"})

    assert response.status_code == HTTPStatus.BAD_REQUEST
    assert "Null characters are not allowed." in response.content.decode()
    assert not ApiToken.objects.exists()


def test_a_name_is_text_in_the_page_never_markup(browser: Client) -> None:
    name = '<script>alert("x")</script>'

    html = browser.post("/tokens/", {"name": name}).content.decode()

    assert name not in html
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in html
    assert ApiToken.objects.get().name == name


def test_a_user_holding_the_most_active_tokens_revokes_one_before_making_another(
    browser: Client, user: User
) -> None:
    tokens = [api_token_create(user=user, name=f"t{i}")[0] for i in range(MAX_ACTIVE_TOKENS)]

    refused = browser.post("/tokens/", {"name": "one more"})

    assert refused.status_code == HTTPStatus.CONFLICT
    assert "revoke one you no longer use first" in refused.content.decode()
    assert ApiToken.objects.count() == MAX_ACTIVE_TOKENS
    api_token_revoke(token=tokens[0])
    assert browser.post("/tokens/", {"name": "one more"}).status_code == HTTPStatus.OK


def test_revoking_a_token_locks_its_programs_out(browser: Client, user: User) -> None:
    token, raw = api_token_create(user=user, name="my-agent")

    response = browser.post(f"/tokens/{token.pk}/revoke")

    assert response.status_code == HTTPStatus.FOUND
    assert response["Location"] == "/tokens/"
    assert send_a_span(raw).status_code == HTTPStatus.UNAUTHORIZED
    assert bearer(raw).get("/api/traces").status_code == HTTPStatus.UNAUTHORIZED
    assert not Trace.objects.exists()


def test_another_user_s_token_cannot_be_revoked(browser: Client, other_user: User) -> None:
    token, raw = api_token_create(user=other_user, name="theirs")

    assert browser.post(f"/tokens/{token.pk}/revoke").status_code == HTTPStatus.NOT_FOUND
    assert bearer(raw).get("/api/traces").status_code == HTTPStatus.OK


def test_revoking_takes_a_post(browser: Client, user: User) -> None:
    token, _ = api_token_create(user=user, name="my-agent")

    assert browser.get(f"/tokens/{token.pk}/revoke").status_code == HTTPStatus.METHOD_NOT_ALLOWED
    assert ApiToken.objects.get().is_active


def test_the_page_needs_a_signed_in_user(client: Client) -> None:
    response = client.get("/tokens/")

    assert response.status_code == HTTPStatus.FOUND
    assert response["Location"].startswith("/login/")
    assert client.post("/tokens/", {"name": "x"}).status_code == HTTPStatus.FOUND
    assert not ApiToken.objects.exists()


def test_the_page_in_chinese(browser: Client) -> None:
    browser.cookies["django_language"] = "zh-hans"

    html = browser.post("/tokens/", {"name": ""}, headers={"Accept-Language": "zh-hans"})

    text = html.content.decode()
    assert "API 令牌" in text
    assert "这个字段是必填项。" in text  # Django's own message, in Chinese


# -- the API -------------------------------------------------------------------------------------


def test_the_api_creates_a_token_for_a_signed_in_user_once(browser: Client, user: User) -> None:
    response = browser.post("/api/tokens", {"name": "ci"}, content_type="application/json")

    assert response.status_code == HTTPStatus.CREATED
    body = response.json()
    assert body["token"].startswith("da_")
    assert (body["name"], body["prefix"], body["active"]) == ("ci", body["token"][:10], True)
    assert bearer(body["token"]).get("/api/traces").status_code == HTTPStatus.OK
    listed = browser.get("/api/tokens").json()
    assert [t["name"] for t in listed] == ["ci"]
    assert "token" not in listed[0]


def test_a_token_cannot_make_tokens(user: User) -> None:
    _, raw = api_token_create(user=user, name="leaked")

    response = bearer(raw).post("/api/tokens", {"name": "more"}, content_type="application/json")

    assert response.status_code == HTTPStatus.FORBIDDEN
    assert response.json()["error"]["code"] == "forbidden"
    assert "sign in" in response.json()["error"]["message"]
    assert ApiToken.objects.count() == 1
    # It may list and revoke its user's tokens.
    assert [t["name"] for t in bearer(raw).get("/api/tokens").json()] == ["leaked"]


@pytest.mark.parametrize(
    "body",
    [
        {"name": " "},
        {"name": "x" * 101},
        {"name": "a\x00b"},  # refused at the door, by the API's parser
        {},
        {"name": None},
        {"name": "a", "extra": 1},
        [1],
    ],
)
def test_a_bad_request_to_make_a_token_is_refused_in_the_envelope(
    browser: Client, body: Any
) -> None:
    response = browser.post("/api/tokens", body, content_type="application/json")

    assert response.status_code == HTTPStatus.UNPROCESSABLE_ENTITY
    error = response.json()["error"]
    assert error["code"] == "validation_error"
    assert error["message"]
    assert not ApiToken.objects.exists()


def test_the_api_refuses_a_token_past_the_most_a_user_holds(browser: Client, user: User) -> None:
    for i in range(MAX_ACTIVE_TOKENS):
        api_token_create(user=user, name=f"t{i}")

    response = browser.post("/api/tokens", {"name": "more"}, content_type="application/json")

    assert response.status_code == HTTPStatus.CONFLICT
    assert response.json()["error"]["code"] == "too_many_tokens"


def test_the_api_revokes_the_user_s_own_tokens_only(
    browser: Client, user: User, other_user: User
) -> None:
    mine, raw = api_token_create(user=user, name="mine")
    theirs, _ = api_token_create(user=other_user, name="theirs")

    revoked = browser.post(f"/api/tokens/{mine.pk}/revoke")

    assert revoked.status_code == HTTPStatus.OK
    assert revoked.json()["active"] is False
    assert revoked.json()["revoked_at"] is not None
    assert bearer(raw).get("/api/tokens").status_code == HTTPStatus.UNAUTHORIZED
    for token_id in (theirs.pk, 10**30, -1):
        response = browser.post(f"/api/tokens/{token_id}/revoke")
        assert response.status_code == HTTPStatus.NOT_FOUND, token_id
        assert response.json()["error"]["code"] == "not_found"
    theirs.refresh_from_db()
    assert theirs.is_active
    # Revoking again keeps the first time.
    first = ApiToken.objects.get(pk=mine.pk).revoked_at
    assert browser.post(f"/api/tokens/{mine.pk}/revoke").json()["active"] is False
    assert ApiToken.objects.get(pk=mine.pk).revoked_at == first
    assert first is not None
    assert first <= timezone.now()


@pytest.mark.django_db(transaction=True)
def test_two_tokens_made_at_once_at_the_cap_give_one(user: User) -> None:
    """Two requests making a user's last allowed token at the same moment: the count is taken
    under a lock of the user's row, so one is made and the other refused."""
    for i in range(MAX_ACTIVE_TOKENS - 1):
        api_token_create(user=user, name=f"t{i}")
    start = threading.Barrier(2)
    outcomes: list[str] = []

    def make(name: str) -> None:
        start.wait()
        try:
            api_token_create(user=user, name=name)
            outcomes.append("made")
        except Conflict:
            outcomes.append("refused")
        finally:
            connection.close()

    threads = [threading.Thread(target=make, args=(f"last{i}",)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert sorted(outcomes) == ["made", "refused"]
    assert ApiToken.objects.active().filter(user=user).count() == MAX_ACTIVE_TOKENS
