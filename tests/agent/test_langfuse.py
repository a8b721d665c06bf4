"""Langfuse: the export of runs to a local HTTP server standing in for Langfuse (a real
http.server answering the OTLP/HTTP endpoint and the projects API), the link API's permissions
over real HTTP, and the fail-closed URL rules."""

from __future__ import annotations

import gzip
import json
import threading
import uuid
from collections.abc import Iterator
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.utils import timezone
from opentelemetry import trace as otel_trace
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from agent.executor import run_start
from agent.langfuse import (
    ObservedLLM,
    http_origin,
    langfuse_link,
    langfuse_reset,
    langfuse_run_started,
    langfuse_trace_id,
    langfuse_wait_for_exports,
    url_has_origin,
)
from agent.llm import get_llm
from agent.models import AgentRun, RunStatus
from agent.services import run_cancel, run_create
from tests.conftest import token_client

OTLP_PATH = "/api/public/otel/v1/traces"
PROJECT_ID = "proj-devassist"


class LangfuseReceiver:
    """Langfuse's two endpoints DevAssist uses, on 127.0.0.1: OTLP/HTTP trace exports (each
    request decoded and kept in ``exports``) and ``GET /api/public/projects``. ``otlp_status``
    and ``projects_status`` make them fail."""

    def __init__(self) -> None:
        self.exports: list[ExportTraceServiceRequest] = []
        self.authorizations: list[str] = []
        self.otlp_status = HTTPStatus.OK
        self.projects_status = HTTPStatus.OK
        self.project_requests = 0
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                if self.path != OTLP_PATH:
                    self.send_error(HTTPStatus.NOT_FOUND)
                    return
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                receiver.authorizations.append(self.headers.get("Authorization", ""))
                if receiver.otlp_status != HTTPStatus.OK:
                    self.send_error(receiver.otlp_status)
                    return
                request = ExportTraceServiceRequest()
                request.ParseFromString(body)
                receiver.exports.append(request)
                self.send_response(HTTPStatus.OK)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def do_GET(self) -> None:
                if self.path != "/api/public/projects":
                    self.send_error(HTTPStatus.NOT_FOUND)
                    return
                receiver.project_requests += 1
                if receiver.projects_status != HTTPStatus.OK:
                    self.send_error(receiver.projects_status)
                    return
                project = {
                    "id": PROJECT_ID,
                    "name": "devassist",
                    "organization": {"id": "org-1", "name": "org"},
                    "metadata": {},
                }
                body = json.dumps({"data": [project]}).encode()
                self.send_response(HTTPStatus.OK)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base_url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> LangfuseReceiver:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()

    def spans(self, trace_id: str) -> list[Span]:
        wanted = bytes.fromhex(trace_id)
        return [
            span
            for request in self.exports
            for resource_spans in request.resource_spans
            for scope_spans in resource_spans.scope_spans
            for span in scope_spans.spans
            if span.trace_id == wanted
        ]


def attributes(span: Span) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for attribute in span.attributes:
        value = attribute.value
        kind = value.WhichOneof("value")
        values[attribute.key] = getattr(value, kind) if kind else None
    return values


@pytest.fixture(autouse=True)
def _no_langfuse_state_left() -> Iterator[None]:
    yield
    langfuse_reset()


@pytest.fixture
def receiver() -> Iterator[LangfuseReceiver]:
    with LangfuseReceiver() as receiver:
        yield receiver


@pytest.fixture
def langfuse_on(settings: Any, receiver: LangfuseReceiver) -> LangfuseReceiver:
    """Langfuse on, pointing at ``receiver`` (a public key of this test's own)."""
    settings.LANGFUSE_PUBLIC_KEY = f"pk-lf-{uuid.uuid4().hex}"
    settings.LANGFUSE_SECRET_KEY = "sk-lf-test"
    settings.LANGFUSE_BASE_URL = receiver.base_url
    return receiver


def finished_run(user: Any, **fields: Any) -> AgentRun:
    run = AgentRun.objects.create(
        user=user, input="hi", status=RunStatus.COMPLETED, finished_at=timezone.now()
    )
    run.langfuse_trace_id = fields.pop("langfuse_trace_id", langfuse_trace_id(run_id=run.id))
    for name, value in fields.items():
        setattr(run, name, value)
    run.save()
    return run


# --- URL rules ------------------------------------------------------------------------------

BASE = "https://cloud.langfuse.com"


@pytest.mark.parametrize(
    ("url", "base_url", "allowed"),
    [
        (f"{BASE}/project/p/traces/t", BASE, True),
        ("https://CLOUD.langfuse.com:443/project/p/traces/t", BASE, True),
        ("http://127.0.0.1:3000/project/p", "http://127.0.0.1:3000/", True),
        ("http://lf.internal/project/p", "http://lf.internal:80", True),
        ("https://lf.example.com/langfuse/project/p", "https://lf.example.com/langfuse", True),
        ("javascript:alert(document.cookie)", BASE, False),
        ("JavaScript://cloud.langfuse.com/%0aalert(1)", BASE, False),
        ("data:text/html,<script>alert(1)</script>", BASE, False),
        ("https://evil.example.com/project/p/traces/t", BASE, False),
        ("https://cloud.langfuse.com.evil.example.com/project/p", BASE, False),
        ("https://cloud.langfuse.com:8443/project/p/traces/t", BASE, False),
        ("http://cloud.langfuse.com/project/p/traces/t", BASE, False),
        ("https://cloud.langfuse.com/project/p", "http://cloud.langfuse.com", False),
        ("https://user:pw@cloud.langfuse.com/project/p", BASE, False),
        ("https://cloud.langfuse.com@evil.example.com/project/p", BASE, False),
        ("https://evil.example.com\\@cloud.langfuse.com/project/p", BASE, False),
        ("https://cloud.langfuse.com/project/p\n", BASE, False),
        ("//cloud.langfuse.com/project/p", BASE, False),
        ("/project/p/traces/t", BASE, False),
        ("https://cloud.langfuse.com:99999/project/p", BASE, False),
        # A misconfigured base URL allows nothing, not even itself.
        ("https://cloud.langfuse.com/project/p", "cloud.langfuse.com", False),
        ("cloud.langfuse.com/project/p", "cloud.langfuse.com", False),
        ("ftp://cloud.langfuse.com/project/p", "ftp://cloud.langfuse.com", False),
        ("https://cloud.langfuse.com:99999/p", "https://cloud.langfuse.com:99999", False),
        ("https://cloud.langfuse.com/p", "", False),
        ("https://a@cloud.langfuse.com/p", "https://a@cloud.langfuse.com", False),
    ],
)
def test_a_url_is_allowed_only_with_the_base_urls_origin(url, base_url, allowed):
    assert url_has_origin(url, base_url=base_url) is allowed


def test_origins_fill_in_default_ports():
    assert http_origin("HTTPS://Cloud.Langfuse.com/x") == ("https", "cloud.langfuse.com", 443)
    assert http_origin("http://[::1]:3000") == ("http", "::1", 3000)
    assert http_origin("mailto:someone@example.com") is None


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("public_key", "secret_key", "base_url", "reason"),
    [
        ("", "", None, "langfuse_unavailable"),
        ("pk-lf-1", "", None, "langfuse_unavailable"),
        ("", "sk-lf-1", None, "langfuse_unavailable"),
        ("pk-lf-1", "sk-lf-1", "langfuse.example.com", "langfuse_unavailable"),
        ("pk-lf-1", "sk-lf-1", "javascript:alert(1)", "langfuse_unavailable"),
        ("pk-lf-1", "sk-lf-1", "https://lf.example.com:0x50", "langfuse_unavailable"),
    ],
)
def test_no_link_without_a_usable_configuration(
    settings, user, public_key, secret_key, base_url, reason
):
    settings.LANGFUSE_PUBLIC_KEY, settings.LANGFUSE_SECRET_KEY = public_key, secret_key
    if base_url is not None:
        settings.LANGFUSE_BASE_URL = base_url
    run = finished_run(user)
    link = langfuse_link(run=run)
    assert (link.run_id, link.available, link.url, link.reason) == (run.id, False, None, reason)


@pytest.mark.django_db
def test_no_link_for_a_run_without_a_trace_id_or_still_running(langfuse_on, user):
    without = finished_run(user, langfuse_trace_id="")
    malformed = finished_run(user, langfuse_trace_id="javascript:alert(1)")
    running = finished_run(user, status=RunStatus.RUNNING, finished_at=None)
    for run in (without, malformed, running):
        link = langfuse_link(run=run)
        assert (link.available, link.url, link.reason) == (False, None, "trace_not_available")
    assert langfuse_on.project_requests == 0


@pytest.mark.django_db
def test_link_needs_the_project_and_caches_it(langfuse_on, user):
    run = finished_run(user)
    langfuse_on.projects_status = HTTPStatus.INTERNAL_SERVER_ERROR
    assert langfuse_link(run=run).reason == "langfuse_unavailable"
    langfuse_on.projects_status = HTTPStatus.OK
    link = langfuse_link(run=run)
    expected = f"{langfuse_on.base_url}/project/{PROJECT_ID}/traces/{run.langfuse_trace_id}"
    assert (link.available, link.url, link.reason) == (True, expected, None)
    requests = langfuse_on.project_requests
    assert langfuse_link(run=run).url == expected
    assert langfuse_on.project_requests == requests


@pytest.mark.django_db
def test_a_base_url_with_a_trailing_slash_still_links(langfuse_on, settings, user):
    run = finished_run(user)
    settings.LANGFUSE_BASE_URL = langfuse_on.base_url + "/"
    link = langfuse_link(run=run)
    expected = f"{langfuse_on.base_url}/project/{PROJECT_ID}/traces/{run.langfuse_trace_id}"
    assert (link.available, link.url) == (True, expected)


# --- the link API over HTTP -----------------------------------------------------------------


@pytest.mark.django_db
def test_link_api_is_for_superusers_only(langfuse_on, user):
    run = finished_run(user)
    response = token_client(user).get(f"/api/runs/{run.id}/langfuse")
    assert response.status_code == HTTPStatus.FORBIDDEN
    assert response.json()["error"]["code"] == "forbidden"


@pytest.mark.django_db
def test_link_api_needs_authentication(client, user):
    run = finished_run(user)
    assert client.get(f"/api/runs/{run.id}/langfuse").status_code == HTTPStatus.UNAUTHORIZED


@pytest.mark.django_db
def test_another_superusers_run_is_404_like_a_missing_one(langfuse_on, superuser, other_superuser):
    theirs = finished_run(other_superuser)
    api = token_client(superuser)
    foreign = api.get(f"/api/runs/{theirs.id}/langfuse")
    missing_id = uuid.uuid4()
    missing = api.get(f"/api/runs/{missing_id}/langfuse")
    assert foreign.status_code == missing.status_code == HTTPStatus.NOT_FOUND
    assert "trace" not in foreign.content.decode().lower()
    foreign_error, missing_error = foreign.json()["error"], missing.json()["error"]
    assert foreign_error["code"] == missing_error["code"] == "run_not_found"
    assert foreign_error["message"].replace(str(theirs.id), "?") == missing_error[
        "message"
    ].replace(str(missing_id), "?")
    assert langfuse_on.project_requests == 0


@pytest.mark.django_db
def test_link_api_says_why_there_is_no_link(settings, superuser):
    api = token_client(superuser)
    settings.LANGFUSE_PUBLIC_KEY = settings.LANGFUSE_SECRET_KEY = ""
    run = finished_run(superuser, langfuse_trace_id="")
    assert api.get(f"/api/runs/{run.id}/langfuse").json() == {
        "run_id": str(run.id),
        "available": False,
        "reason": "langfuse_unavailable",
    }
    settings.LANGFUSE_PUBLIC_KEY, settings.LANGFUSE_SECRET_KEY = "pk-lf-x", "sk-lf-x"
    assert api.get(f"/api/runs/{run.id}/langfuse").json() == {
        "run_id": str(run.id),
        "available": False,
        "reason": "trace_not_available",
    }


# --- the export -----------------------------------------------------------------------------


@pytest.mark.django_db
def test_a_run_is_exported_under_its_stored_trace_id(langfuse_on, scripted, superuser):
    usage = {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}
    scripted.script(
        [
            {
                "content": 'Thought: run it\nAction: tool:execute_code\nargs: {"timeout_s": 0}',
                "usage": usage,
            },
            {"content": "Thought: done\nAction: final: 42", "usage": usage},
        ]
    )
    api = token_client(superuser)
    response = api.post(
        "/agent", data=json.dumps({"message": "What is 6*7?"}), content_type="application/json"
    )
    assert response.status_code == HTTPStatus.OK, response.content
    langfuse_wait_for_exports()

    run = AgentRun.objects.get(pk=response.json()["run_id"])
    assert run.langfuse_trace_id == langfuse_trace_id(run_id=run.id)
    spans = langfuse_on.spans(run.langfuse_trace_id)
    by_type: dict[str, list[Span]] = {}
    for span in spans:
        by_type.setdefault(attributes(span)["langfuse.observation.type"], []).append(span)
    assert sorted((kind, len(found)) for kind, found in by_type.items()) == [
        ("generation", 2),
        ("span", 1),
        ("tool", 1),
    ]
    assert langfuse_on.authorizations[0].startswith("Basic ")
    # The SDK ran on a tracer provider of its own: the process's global one was never set.
    assert isinstance(otel_trace.get_tracer_provider(), otel_trace.ProxyTracerProvider)

    (root,) = by_type["span"]
    root_attributes = attributes(root)
    # Strings go as they are, anything else as JSON (the SDK's serialisation).
    assert root_attributes["langfuse.observation.input"] == "What is 6*7?"
    assert root_attributes["langfuse.observation.output"] == "42"
    assert root_attributes["langfuse.internal.as_root"] is True
    assert root_attributes["langfuse.trace.name"] == "devassist agent run"
    assert root_attributes["user.id"] == str(superuser.id)
    assert json.loads(root_attributes["langfuse.observation.metadata.status"]) == "completed"
    assert json.loads(root_attributes["langfuse.observation.metadata.run_id"]) == str(run.id)

    first, second = sorted(by_type["generation"], key=lambda span: span.start_time_unix_nano)
    for generation in (first, second):
        assert generation.parent_span_id == root.span_id
        assert root.start_time_unix_nano <= generation.start_time_unix_nano
        assert generation.start_time_unix_nano <= generation.end_time_unix_nano
        assert generation.end_time_unix_nano <= root.end_time_unix_nano
        values = attributes(generation)
        assert values["langfuse.observation.model.name"] == "fake-model"
        assert json.loads(values["langfuse.observation.usage_details"]) == {
            "input": 11,
            "output": 7,
            "total": 18,
        }
    first_values, second_values = attributes(first), attributes(second)
    messages = json.loads(first_values["langfuse.observation.input"])
    assert [m["role"] for m in messages] == ["system", "user"]
    assert messages[1]["content"] == "What is 6*7?"
    assert "execute_code" in first_values["langfuse.observation.output"]
    second_messages = json.loads(second_values["langfuse.observation.input"])
    assert [m["role"] for m in second_messages] == ["system", "user", "assistant", "user"]
    assert second_messages[-1]["content"].startswith("Observation:")

    (tool,) = by_type["tool"]
    tool_values = attributes(tool)
    assert tool.name == "execute_code"
    assert tool.parent_span_id == root.span_id
    assert json.loads(tool_values["langfuse.observation.input"]) == {"timeout_s": 0}
    assert tool_values["langfuse.observation.level"] == "ERROR"
    assert "code" in tool_values["langfuse.observation.status_message"]
    assert "code" in json.loads(tool_values["langfuse.observation.output"])["error"]

    link = api.get(f"/api/runs/{run.id}/langfuse")
    assert link.status_code == HTTPStatus.OK
    assert link.json() == {
        "run_id": str(run.id),
        "available": True,
        "url": f"{langfuse_on.base_url}/project/{PROJECT_ID}/traces/{run.langfuse_trace_id}",
    }


@pytest.mark.django_db
def test_a_failed_run_is_exported_as_an_error(langfuse_on, scripted, superuser):
    scripted.script([{"status": 500}] * 5)
    response = token_client(superuser).post(
        "/agent", data=json.dumps({"message": "hi"}), content_type="application/json"
    )
    assert response.status_code == HTTPStatus.BAD_GATEWAY
    langfuse_wait_for_exports()
    run = AgentRun.objects.get(pk=response.json()["error"]["details"]["run_id"])
    spans = langfuse_on.spans(run.langfuse_trace_id)
    levels = {
        attributes(span)["langfuse.observation.type"]: attributes(span).get(
            "langfuse.observation.level"
        )
        for span in spans
    }
    assert levels == {"span": "ERROR", "generation": "ERROR"}


@pytest.mark.django_db
def test_langfuse_failing_never_fails_the_run(langfuse_on, scripted, superuser):
    langfuse_on.otlp_status = HTTPStatus.BAD_REQUEST
    scripted.script(["Thought: done\nAction: final: fine"])
    response = token_client(superuser).post(
        "/agent", data=json.dumps({"message": "hi"}), content_type="application/json"
    )
    assert response.status_code == HTTPStatus.OK
    assert response.json()["answer"] == "fine"
    langfuse_wait_for_exports()
    assert langfuse_on.authorizations  # it was tried
    assert langfuse_on.exports == []


@pytest.mark.django_db
def test_with_langfuse_off_nothing_is_stored_or_wrapped(settings, api, scripted):
    settings.LANGFUSE_PUBLIC_KEY = settings.LANGFUSE_SECRET_KEY = ""
    scripted.script(["Thought: done\nAction: final: fine"])
    body = api.post(
        "/agent", data=json.dumps({"message": "hi"}), content_type="application/json"
    ).json()
    assert AgentRun.objects.get(pk=body["run_id"]).langfuse_trace_id == ""


@pytest.mark.django_db(transaction=True)
async def test_the_trace_id_is_fixed_before_the_model_is_called(langfuse_on, user):
    run = await sync_to_async(AgentRun.objects.create)(user=user, input="hi")
    llm = await langfuse_run_started(run=run, llm=get_llm())
    assert isinstance(llm, ObservedLLM)
    stored = await AgentRun.objects.aget(pk=run.id)
    assert stored.langfuse_trace_id == run.langfuse_trace_id == langfuse_trace_id(run_id=run.id)
    assert len(run.langfuse_trace_id) == 32


@pytest.mark.django_db(transaction=True)
async def test_a_cancelled_run_is_exported_with_its_unfinished_model_call(
    langfuse_on, scripted, superuser
):
    scripted.script([{"content": "Thought: slow\nAction: final: late", "delay_s": 10}])
    run = await run_create(user=superuser, message="take your time")
    task = run_start(run)
    await scripted.wait_for_request()  # the model call is under way
    await run_cancel(user=superuser, run=run)
    await task
    await sync_to_async(langfuse_wait_for_exports)()

    run = await AgentRun.objects.aget(pk=run.id)
    assert run.status == RunStatus.CANCELLED
    levels = sorted(
        (
            attributes(span)["langfuse.observation.type"],
            attributes(span).get("langfuse.observation.level"),
        )
        for span in langfuse_on.spans(run.langfuse_trace_id)
    )
    assert levels == [("generation", "ERROR"), ("span", "WARNING")]
