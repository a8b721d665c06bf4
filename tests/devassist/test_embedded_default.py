"""The zero-setup default: SQLite under the var dir and the in-memory channel layer, served by
daphne exactly as `make run` does. The only tests that use SQLite."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator
from http import HTTPStatus
from pathlib import Path

import grpc
import httpx
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2_grpc import TraceServiceStub
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span
from websockets.sync.client import connect as ws_connect

from tests.servers import daphne_server, manage, otlp_grpc_process


@pytest.fixture(scope="module")
def embedded_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path, str]]:
    """(base url, var dir, demo password) of a daphne serving the embedded defaults, set up
    the way `make run` does it."""
    var_dir = tmp_path_factory.mktemp("embedded") / "var"
    env = {"DEVASSIST_VAR_DIR": str(var_dir), "DEBUG": "1", "LOG_LEVEL": "WARNING"}
    manage(env, "migrate", "--noinput")
    demo = re.search(r"Demo login: username demo  password (\S+)", manage(env, "ensure_demo_user"))
    assert demo is not None
    # Watches read the trace's log after a second of quiet (a gRPC process's spans).
    with daphne_server({**env, "SSE_HEARTBEAT_S": "1"}) as base_url:
        yield base_url, var_dir, demo.group(1)


def test_embedded_default_uses_sqlite_and_the_in_memory_channel_layer(
    embedded_server: tuple[str, Path, str],
) -> None:
    base_url, var_dir, _ = embedded_server

    response = httpx.get(f"{base_url}/healthz", timeout=10)

    report = response.json()
    assert report["checks"]["database"]["ok"] is True
    assert report["checks"]["database"]["vendor"] == "sqlite"
    assert report["checks"]["channel_layer"]["ok"] is True
    assert report["checks"]["channel_layer"]["backend"] == "InMemoryChannelLayer"
    assert response.status_code == HTTPStatus.OK
    assert report["status"] in {"ok", "degraded"}
    assert (var_dir / "devassist.sqlite3").is_file()
    assert (var_dir / "secret_key").is_file()


def test_embedded_default_demo_user_can_log_in(embedded_server: tuple[str, Path, str]) -> None:
    base_url, _, password = embedded_server

    with httpx.Client(base_url=base_url, timeout=10) as browser:
        assert browser.get("/").headers["location"] == "/login/?next=/"
        login_page = browser.get("/login/")
        csrf_token = login_page.cookies["csrftoken"]
        response = browser.post(
            "/login/",
            data={
                "username": "demo",
                "password": password,
                "csrfmiddlewaretoken": csrf_token,
                "next": "/",
            },
        )
        assert response.status_code == HTTPStatus.FOUND
        assert response.headers["location"] == "/"
        home = browser.get("/")

    assert home.status_code == HTTPStatus.OK
    assert "demo" in home.text


def test_embedded_default_serves_the_trace_api_on_sqlite(
    embedded_server: tuple[str, Path, str],
) -> None:
    """The trace reads format ids and timestamps in SQL; SQLite has its own forms of those."""
    base_url, var_dir, _ = embedded_server
    env = {"DEVASSIST_VAR_DIR": str(var_dir), "DEBUG": "1", "LOG_LEVEL": "WARNING"}
    token = manage(env, "create_api_token", "demo").strip()
    root_id = "00000000-0000-4000-8000-000000000001"
    with httpx.Client(
        base_url=base_url, headers={"Authorization": f"Bearer {token}"}, timeout=10
    ) as api:
        trace = api.post("/api/traces", json={"task": "sqlite"}).json()
        steps_url = f"/api/traces/{trace['trace_id']}/steps"
        added = api.post(
            steps_url,
            json=[
                {"id": root_id, "step_type": "goal", "cost": 0.5},
                {"parent_id": root_id, "step_type": "thought", "tokens": 7},
            ],
        )
        assert added.status_code == HTTPStatus.CREATED, added.text
        tree = api.get(f"/api/traces/{trace['trace_id']}/tree").json()
        top = api.get(f"/api/traces/{trace['trace_id']}/node/root").json()
        node = api.get(f"/api/traces/{trace['trace_id']}/node/{root_id}").json()
        single = api.get(f"/api/traces/{trace['trace_id']}/steps/{root_id}").json()

    (root,) = tree["root_steps"]
    assert root["step_id"] == top["children"][0]["step_id"] == node["step"]["step_id"] == root_id
    assert root["subtree_tokens"] == 7
    assert root["cost"] == 0.5
    assert root["started_at"].endswith("Z")
    assert root["started_at"] == single["started_at"]
    assert node["children"][0]["parent_id"] == root_id
    assert node["total_children"] == 1


def _otlp_span(trace_id: str, span_id: str, parent: str, name: str, start: int) -> dict:
    return {
        "traceId": trace_id,
        "spanId": span_id,
        "parentSpanId": parent,
        "name": name,
        "startTimeUnixNano": str(start),
        "endTimeUnixNano": str(start + 1_000_000),
        "attributes": [{"key": "openinference.span.kind", "value": {"stringValue": "CHAIN"}}],
    }


def test_embedded_default_takes_otlp_spans_sent_children_first(
    embedded_server: tuple[str, Path, str],
) -> None:
    """An OTel agent pointed at `make run`: a log record comes before its span, the spans
    arrive children first, one request each, and every waiting subtree moves under its parent
    with SQLite's forms of the path writes."""
    base_url, var_dir, _ = embedded_server
    env = {"DEVASSIST_VAR_DIR": str(var_dir), "DEBUG": "1", "LOG_LEVEL": "WARNING"}
    token = manage(env, "create_api_token", "demo").strip()
    trace_id = "5b8efff798038103d269b633813fc60c"
    ids = {name: f"{index + 1:016x}" for index, name in enumerate(["agent", "llm", "tool", "sub"])}
    parents = {"agent": "", "llm": ids["agent"], "tool": ids["llm"], "sub": ids["tool"]}
    start = 1_700_000_000_000_000_000
    with httpx.Client(
        base_url=base_url, headers={"Authorization": f"Bearer {token}"}, timeout=10
    ) as client:
        record = {
            "timeUnixNano": str(start),
            "eventName": "gen_ai.user.message",
            "traceId": trace_id,
            "spanId": ids["llm"],
            "body": {
                "kvlistValue": {
                    "values": [{"key": "content", "value": {"stringValue": "Hello from a log"}}]
                }
            },
        }
        logged = client.post(
            "/v1/logs", json={"resourceLogs": [{"scopeLogs": [{"logRecords": [record]}]}]}
        )
        assert logged.status_code == HTTPStatus.OK, logged.text
        assert logged.json() == {}
        waiting_url = f"/api/traces/{uuid.UUID(trace_id)}/waiting-log-records"
        waiting = client.get(waiting_url).json()
        assert [(s["span_id"], len(s["events"])) for s in waiting["spans"]] == [(ids["llm"], 1)]
        for offset, name in enumerate(["sub", "tool", "llm", "agent"]):
            body = {
                "resourceSpans": [
                    {
                        "resource": {
                            "attributes": [
                                {"key": "service.name", "value": {"stringValue": "agent"}}
                            ]
                        },
                        "scopeSpans": [
                            {
                                "spans": [
                                    _otlp_span(
                                        trace_id, ids[name], parents[name], name, start - offset
                                    )
                                ]
                            }
                        ],
                    }
                ]
            }
            response = client.post("/v1/traces", json=body)
            assert response.status_code == HTTPStatus.OK, response.text
            assert response.json() == {}
        tree = client.get(f"/api/traces/{uuid.UUID(trace_id)}/tree").json()
        assert client.get(waiting_url).json()["total_spans"] == 0

    assert tree["trace"]["status"] == "completed"
    assert tree["trace"]["total_steps"] == 4
    # The root had no input: the trace is named after what its model call was asked (a
    # look-up of the stored steps' data, in SQLite's JSON functions).
    assert tree["trace"]["task"] == "Hello from a log"
    (node,) = tree["root_steps"]
    chain = []
    while True:
        chain.append((node["name"], node["depth"], node["subtree_steps"], node["children_count"]))
        if not node["children"]:
            break
        (node,) = node["children"]
    assert chain == [("agent", 0, 4, 1), ("llm", 1, 3, 1), ("tool", 2, 2, 1), ("sub", 3, 1, 0)]
    (llm,) = tree["root_steps"][0]["children"]
    assert '"input":[{"role":"user","content":"Hello from a log"}]' in llm["data_preview"]


def test_embedded_default_takes_otlp_grpc_beside_daphne(
    embedded_server: tuple[str, Path, str],
) -> None:
    """`make otlp-grpc` beside `make run`: a process of its own on the same SQLite file, whose
    spans the web server's API reads."""
    base_url, var_dir, _ = embedded_server
    env = {"DEVASSIST_VAR_DIR": str(var_dir), "DEBUG": "1", "LOG_LEVEL": "WARNING"}
    token = manage(env, "create_api_token", "demo").strip()
    trace_id = "6b8efff798038103d269b633813fc60c"
    span = Span(
        trace_id=bytes.fromhex(trace_id),
        span_id=bytes.fromhex("00000000000000a1"),
        name="grpc agent",
        start_time_unix_nano=1_700_000_000_000_000_000,
        end_time_unix_nano=1_700_000_001_000_000_000,
    )
    request = ExportTraceServiceRequest(
        resource_spans=[ResourceSpans(scope_spans=[ScopeSpans(spans=[span])])]
    )
    with otlp_grpc_process(env) as address, grpc.insecure_channel(address) as channel:
        answer = TraceServiceStub(channel).Export(
            request, metadata=[("authorization", f"Bearer {token}")], timeout=30
        )
    assert not answer.HasField("partial_success")
    tree = httpx.get(
        f"{base_url}/api/traces/{uuid.UUID(trace_id)}/tree",
        headers={"Authorization": f"Bearer {token}"},
        timeout=10,
    ).json()
    assert tree["trace"]["status"] == "completed"
    assert [node["name"] for node in tree["root_steps"]] == ["grpc agent"]


def test_embedded_default_shows_otlp_grpc_spans_on_a_watched_trace(
    embedded_server: tuple[str, Path, str],
) -> None:
    """The gRPC process shares no in-memory channel layer with daphne: its spans reach a
    watcher of the trace when the watch reads the trace's log on a quiet period
    (``SSE_HEARTBEAT_S``, 1 s here), not only on reload."""
    base_url, var_dir, _ = embedded_server
    env = {"DEVASSIST_VAR_DIR": str(var_dir), "DEBUG": "1", "LOG_LEVEL": "WARNING"}
    token = manage(env, "create_api_token", "demo").strip()
    trace_id = "7b8efff798038103d269b633813fc60c"

    def export(span_id: str, name: str, parent: str = "") -> None:
        span = Span(
            trace_id=bytes.fromhex(trace_id),
            span_id=bytes.fromhex(span_id),
            parent_span_id=bytes.fromhex(parent) if parent else b"",
            name=name,
            start_time_unix_nano=1_700_000_000_000_000_000,
            end_time_unix_nano=1_700_000_001_000_000_000,
        )
        request = ExportTraceServiceRequest(
            resource_spans=[ResourceSpans(scope_spans=[ScopeSpans(spans=[span])])]
        )
        answer = TraceServiceStub(channel).Export(
            request, metadata=[("authorization", f"Bearer {token}")], timeout=30
        )
        assert not answer.HasField("partial_success")

    url = f"ws{base_url.removeprefix('http')}/api/traces/{uuid.UUID(trace_id)}/watch"
    with otlp_grpc_process(env) as address, grpc.insecure_channel(address) as channel:
        export("00000000000000b2", "first tool", parent="00000000000000b1")
        with ws_connect(
            url, additional_headers={"Authorization": f"Bearer {token}"}, open_timeout=10
        ) as socket:
            assert json.loads(socket.recv(timeout=10))["event"] == "connected"
            export("00000000000000b3", "second tool", parent="00000000000000b1")
            added = json.loads(socket.recv(timeout=20))
            assert (added["event"], added["step"]["name"]) == ("step_added", "second tool")
            export("00000000000000b1", "agent")
            events = [json.loads(socket.recv(timeout=20))["event"] for _ in range(4)]
    # The root came: the two steps that waited for it moved under it, and the trace ended.
    assert events == ["step_added", "step_updated", "step_updated", "trace_completed"]
