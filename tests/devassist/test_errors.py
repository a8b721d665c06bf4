"""The error envelope every API failure uses, and request ids."""

from __future__ import annotations

import json
import re
from http import HTTPStatus
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client, override_settings

from devassist.tokens import api_token_create

HEX_ID = re.compile(r"^[0-9a-f]{32}$")


def assert_envelope(response: Any, status: HTTPStatus, code: str) -> dict[str, Any]:
    assert response.status_code == status
    assert response["Content-Type"] == "application/json"
    body: dict[str, Any] = response.json()
    assert set(body) == {"error", "request_id"}
    assert set(body["error"]) == {"code", "message", "details"}
    assert body["error"]["code"] == code
    assert isinstance(body["error"]["message"], str)
    assert body["error"]["message"]
    assert isinstance(body["error"]["details"], dict)
    assert body["request_id"] == response["X-Request-ID"]
    return body


def error_locations(body: dict[str, Any]) -> list[list[str]]:
    return [error["loc"] for error in body["error"]["details"]["errors"]]


@pytest.mark.django_db
def test_malformed_uuid_in_path_is_a_validation_error(api: Client) -> None:
    body = assert_envelope(
        api.get("/api/traces/not-a-uuid"), HTTPStatus.UNPROCESSABLE_ENTITY, "validation_error"
    )

    assert error_locations(body) == [["path", "trace_id"]]
    assert "trace_id" in body["error"]["message"]


@pytest.mark.django_db
@pytest.mark.parametrize("limit", ["0", "101", "many"])
def test_out_of_range_query_param_is_a_validation_error(api: Client, limit: str) -> None:
    body = assert_envelope(
        api.get(f"/api/traces?limit={limit}"), HTTPStatus.UNPROCESSABLE_ENTITY, "validation_error"
    )

    assert error_locations(body) == [["query", "limit"]]
    error = body["error"]["details"]["errors"][0]
    assert error["msg"]
    assert error["type"]


@pytest.mark.django_db
@pytest.mark.parametrize("limit", ["1", "100"])
def test_limit_at_the_bounds_is_accepted(api: Client, limit: str) -> None:
    assert api.get(f"/api/traces?limit={limit}").status_code == HTTPStatus.OK


@pytest.mark.django_db
def test_invalid_body_fields_are_listed_with_their_locations(api: Client) -> None:
    response = api.post("/api/traces", {"task": 5, "mode": "nope"}, content_type="application/json")

    body = assert_envelope(response, HTTPStatus.UNPROCESSABLE_ENTITY, "validation_error")
    assert error_locations(body) == [["body", "payload", "task"], ["body", "payload", "mode"]]


@pytest.mark.django_db
@pytest.mark.parametrize("path", ["/api/nope", "/api/traces/extra/deep/path/x"])
def test_unknown_api_path_is_a_404_envelope(api: Client, path: str) -> None:
    body = assert_envelope(api.get(path), HTTPStatus.NOT_FOUND, "not_found")

    assert body["error"]["details"] == {}


@pytest.mark.django_db
def test_unknown_api_path_is_a_404_envelope_for_anonymous_users(client: Client) -> None:
    assert_envelope(client.get("/api/nope"), HTTPStatus.NOT_FOUND, "not_found")


@pytest.mark.django_db
def test_missing_trace_is_a_404_envelope(api: Client) -> None:
    response = api.get("/api/traces/00000000-0000-0000-0000-000000000000")

    assert_envelope(response, HTTPStatus.NOT_FOUND, "trace_not_found")


@pytest.mark.django_db
def test_invalid_json_body_is_a_400_envelope(api: Client) -> None:
    response = api.post("/api/traces", "{not json", content_type="application/json")

    assert_envelope(response, HTTPStatus.BAD_REQUEST, "bad_request")


@pytest.mark.django_db
@override_settings(DATA_UPLOAD_MAX_MEMORY_SIZE=1000)
def test_body_over_the_size_limit_is_a_413_envelope(api: Client) -> None:
    response = api.post(
        "/api/traces", json.dumps({"task": "x" * 5000}), content_type="application/json"
    )

    assert_envelope(response, HTTPStatus.REQUEST_ENTITY_TOO_LARGE, "payload_too_large")


@pytest.mark.django_db
@override_settings(DATA_UPLOAD_MAX_MEMORY_SIZE=1000)
def test_body_under_the_size_limit_is_accepted(api: Client) -> None:
    response = api.post(
        "/api/traces", json.dumps({"task": "x" * 500}), content_type="application/json"
    )

    assert response.status_code == HTTPStatus.CREATED


@pytest.mark.django_db
def test_unhandled_exception_is_a_500_envelope_without_traceback(
    user: User, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(**kwargs: object) -> None:
        raise RuntimeError("secret internals at /srv/app.py")

    monkeypatch.setattr("traces.selectors.trace_list_for", broken)
    _, raw = api_token_create(user=user, name="t")
    client = Client(raise_request_exception=False, headers={"Authorization": f"Bearer {raw}"})

    response = client.get("/api/traces")

    body = assert_envelope(response, HTTPStatus.INTERNAL_SERVER_ERROR, "internal_error")
    assert body["error"]["details"] == {}
    content = response.content.decode()
    assert "Traceback" not in content
    assert "RuntimeError" not in content
    assert "secret internals" not in content


@pytest.mark.django_db
def test_wrong_method_is_a_405_envelope(api: Client) -> None:
    response = api.delete("/api/traces")
    assert_envelope(response, HTTPStatus.METHOD_NOT_ALLOWED, "method_not_allowed")
    assert set(response["Allow"].split(", ")) == {"GET", "POST"}


@pytest.mark.django_db
def test_request_id_is_created_when_the_client_sends_none(api: Client) -> None:
    response = api.get("/api/traces")

    assert HEX_ID.match(response["X-Request-ID"])


@pytest.mark.django_db
def test_request_ids_differ_between_requests(api: Client) -> None:
    first = api.get("/api/traces")["X-Request-ID"]
    second = api.get("/api/traces")["X-Request-ID"]

    assert first != second


@pytest.mark.django_db
@pytest.mark.parametrize("request_id", ["abc-123", "svc.a:b_c-1", "x" * 128])
def test_safe_client_request_id_is_echoed(client: Client, request_id: str) -> None:
    response = client.get("/api/nope", headers={"X-Request-ID": request_id})

    assert response["X-Request-ID"] == request_id
    assert response.json()["request_id"] == request_id


@pytest.mark.django_db
@pytest.mark.parametrize(
    "request_id", ["has spaces", "x" * 129, "a" * 200, "<script>", "semi;colon", ""]
)
def test_unsafe_client_request_id_is_replaced(client: Client, request_id: str) -> None:
    response = client.get("/api/traces", headers={"X-Request-ID": request_id})

    echoed = response["X-Request-ID"]
    assert echoed != request_id
    assert HEX_ID.match(echoed)
    assert response.json()["request_id"] == echoed


@pytest.mark.django_db
def test_pages_carry_a_request_id_too(client: Client) -> None:
    response = client.get("/login/", headers={"X-Request-ID": "page-1"})

    assert response["X-Request-ID"] == "page-1"
