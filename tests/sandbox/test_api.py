from __future__ import annotations

import json
from http import HTTPStatus

import pytest
from django.test import Client

from sandbox.backends.docker import DockerSandbox
from traces.models import Step, Trace

pytestmark = pytest.mark.django_db


def execute(client: Client, body: object):
    return client.post(
        "/api/sandbox/execute", data=json.dumps(body), content_type="application/json"
    )


def assert_error(response, status: int, code: str) -> dict:
    assert response.status_code == status, response.content
    body = response.json()
    assert body["error"]["code"] == code
    assert body["request_id"] == response["X-Request-ID"]
    return body


def test_execute_runs_code_and_records_a_call_trace(api, sandbox_image):
    response = execute(api, {"code": "print(1 + 1)"})
    assert response.status_code == HTTPStatus.OK, response.content
    body = response.json()
    assert body["stdout"] == "2\n"
    assert body["exit_code"] == 0
    assert body["timed_out"] is False
    assert body["backend"] == "docker"
    assert body["safety"] == {
        "blocked": False,
        "text": "No safety issues detected.",
        "findings": [],
    }

    trace = Trace.objects.get(pk=body["trace_id"])
    assert (trace.mode, trace.status, trace.agent_type) == ("call", "completed", "sandbox")
    steps = list(Step.objects.filter(trace=trace).order_by("seq"))
    assert [s.step_type for s in steps] == ["goal", "action", "result"]
    assert steps[1].data["arguments"] == {"code": "print(1 + 1)", "timeout_s": 5.0}
    assert steps[2].parent_id == steps[1].id
    assert steps[2].data["stdout"] == "2\n"
    assert all(s.status == "completed" for s in steps)


def test_a_timeout_is_a_result_not_an_error(api, sandbox_image):
    response = execute(api, {"code": "while True: pass", "timeout_s": 1})
    assert response.status_code == HTTPStatus.OK
    body = response.json()
    assert body["timed_out"] is True
    assert body["exit_code"] is None
    result = Step.objects.get(trace_id=body["trace_id"], step_type="result")
    assert result.status == "failed"
    assert result.error == "timed out"


def test_warnings_are_reported_and_the_code_still_runs(api, sandbox_image):
    body = execute(api, {"code": "print(eval('2 * 3'))"}).json()
    assert body["stdout"] == "6\n"
    assert body["safety"]["blocked"] is False
    assert body["safety"]["text"].startswith("Safety check WARNING:")
    assert body["safety"]["findings"][0]["rule_id"] == "dynamic.eval"


def test_blocked_code_is_400_with_the_report_and_is_recorded(api, user):
    response = execute(
        api, {"code": "import socket\nsocket.create_connection(('example.com', 80))"}
    )
    body = assert_error(response, HTTPStatus.BAD_REQUEST, "sandbox_code_blocked")
    details = body["error"]["details"]
    assert details["blocked"] is True
    assert details["text"].startswith("Safety check BLOCKED:")
    assert "  [BLOCKED] (line 1)" in details["text"]
    assert details["findings"][0]["rule_id"].startswith("network.")
    trace = Trace.objects.get(pk=details["trace_id"])
    assert trace.status == "failed"
    assert trace.error_count >= 1
    result = Step.objects.get(trace=trace, step_type="result")
    assert result.error.startswith("Safety check BLOCKED:")


@pytest.mark.parametrize(
    "body",
    [
        {"code": ""},
        {"code": "   \n"},
        {"code": 42},
        {"code": None},
        {},
        {"code": "print(1)", "timeout_s": 0},
        {"code": "print(1)", "timeout_s": 61},
        {"code": "print(1)", "timeout_s": "soon"},
        {"code": "print(1)", "extra": True},
        ["print(1)"],
    ],
)
def test_invalid_requests_are_422(api, body):
    assert_error(execute(api, body), HTTPStatus.UNPROCESSABLE_ENTITY, "validation_error")
    assert Trace.objects.count() == 0


def test_oversize_code_is_413(api):
    body = assert_error(
        execute(api, {"code": "x = 1\n" * 20_000}),
        HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
        "sandbox_code_too_large",
    )
    assert body["error"]["details"]["max_bytes"] == 100 * 1024


def test_no_engine_is_503_with_a_hint_and_the_failure_is_recorded(api, settings, monkeypatch):
    settings.DOCKER_HOST = "unix:///nonexistent/docker.sock"
    unreachable = DockerSandbox(pool_size=0)
    monkeypatch.setattr("sandbox.services.get_sandbox", lambda: unreachable)
    response = execute(api, {"code": "print(1)"})
    body = assert_error(response, HTTPStatus.SERVICE_UNAVAILABLE, "docker_not_available")
    assert "sandbox_image build" in body["error"]["details"]["hint"]
    trace = Trace.objects.get(pk=body["error"]["details"]["trace_id"])
    assert trace.status == "failed"


def test_anonymous_cannot_execute(client):
    assert_error(
        execute(client, {"code": "print(1)"}), HTTPStatus.UNAUTHORIZED, "not_authenticated"
    )
