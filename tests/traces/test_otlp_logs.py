"""OTLP/HTTP log ingestion at /v1/logs through the ASGI application: log records made by the
real OpenTelemetry SDK (protobuf, or OTLP/JSON) join their spans' steps as events, before or
after the spans themselves; the GenAI conventions' message events become the model call's
input and output; bad input is refused as for spans."""

from __future__ import annotations

import functools
import time
import uuid
from decimal import Decimal
from http import HTTPStatus
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.test import AsyncClient
from opentelemetry import trace as otel_trace
from opentelemetry._logs import Logger
from opentelemetry.trace import SpanKind

from tests.traces.otlp_clients import (
    JSON,
    PROTOBUF,
    gzipped,
    logs_body,
    logs_json_body,
    logs_request,
    partial_success,
    post_otlp,
    protobuf_body,
    sdk_spans_and_logs,
    watching,
)
from tests.traces.test_export import export
from tests.traces.test_otlp_ingest import (
    ingest_spans,
    one_waits_on_the_other,
    rpc_status,
    step_of,
    token_for,
    trace_of,
)
from traces import selectors
from traces.models import PendingLogEvents, Step, StepType, Trace, TraceEvent, TraceStatus
from traces.otlp import time_of
from traces.otlp_logs import with_log_events

pytestmark = pytest.mark.django_db(transaction=True)

GENAI = {"gen_ai.system": "openai"}


def legacy_chat(tracer: otel_trace.Tracer, logger: Logger) -> None:
    """An agent whose model call is recorded as ``opentelemetry-instrumentation-openai-v2``
    records it by default: a ``chat`` span, and what was asked and answered as log records
    emitted inside it."""
    with (
        tracer.start_as_current_span(
            "invoke_agent weather", attributes={"gen_ai.operation.name": "invoke_agent"}
        ),
        tracer.start_as_current_span(
            "chat gpt-4o",
            attributes={
                "gen_ai.operation.name": "chat",
                "gen_ai.request.model": "gpt-4o",
                "gen_ai.usage.input_tokens": 6,
                "gen_ai.usage.output_tokens": 3,
            },
        ),
    ):
        logger.emit(
            event_name="gen_ai.system.message", body={"content": "Be brief."}, attributes=GENAI
        )
        logger.emit(
            event_name="gen_ai.user.message",
            body={"content": "Weather in Paris?"},
            attributes=GENAI,
        )
        logger.emit(
            event_name="gen_ai.choice",
            body={
                "index": 0,
                "finish_reason": "stop",
                "message": {"role": "assistant", "content": "Rain <b>all</b> day."},
            },
            attributes=GENAI,
        )


LEGACY_INPUT = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Weather in Paris?"},
]
LEGACY_OUTPUT = [
    {"role": "assistant", "content": "Rain <b>all</b> day.", "finish_reason": "stop", "index": 0}
]


@sync_to_async
def chat_step(spans: list[Any]) -> Step:
    (chat,) = [s for s in spans if s.name == "chat gpt-4o"]
    return Step.objects.get(pk=step_of(chat))


@sync_to_async
def waiting_rows() -> int:
    return PendingLogEvents.objects.count()


@pytest.mark.parametrize("encoding", [PROTOBUF, JSON])
async def test_log_records_sent_before_their_span_join_its_step(user, encoding):
    spans, records = sdk_spans_and_logs(legacy_chat)
    token = await token_for(user)
    body = logs_body(records) if encoding == PROTOBUF else logs_json_body(records)
    response = await post_otlp(body, token=token, content_type=encoding, path="/v1/logs")
    assert response.status_code == HTTPStatus.OK, response.text
    assert response.headers["content-type"] == encoding
    assert partial_success(response, logs=True) == (0, "")
    # The trace is opened, as the token's, and the records wait for their span.
    trace = await Trace.objects.aget(pk=trace_of(spans))
    assert (trace.user_id, trace.status, trace.is_otlp) == (user.id, TraceStatus.RUNNING, True)
    assert await waiting_rows() == 1
    # Its pages show a running trace with no step yet.
    browser = AsyncClient()
    await browser.aforce_login(user)
    for url in ("/traces/", f"/traces/{trace.id}/"):
        assert (await browser.get(url)).status_code == HTTPStatus.OK

    response = await post_otlp(protobuf_body(spans), token=token)
    assert response.status_code == HTTPStatus.OK
    step = await chat_step(spans)
    assert step.step_type == StepType.THOUGHT
    assert step.data["input"] == LEGACY_INPUT
    assert step.data["output"] == LEGACY_OUTPUT
    assert [e["name"] for e in step.data["events"]] == [
        "gen_ai.system.message",
        "gen_ai.user.message",
        "gen_ai.choice",
    ]
    # Their content moved to the input and output: each event keeps its name, time and
    # attributes, and says it came from a log record.
    assert all("body" not in e and e["source"] == "log" for e in step.data["events"])
    assert step.data["events"][0]["attributes"] == GENAI
    assert step.data["otel_span"]["from_logs"] == ["input", "output"]
    assert "Weather in Paris?" in step.data_preview
    assert await waiting_rows() == 0
    trace = await Trace.objects.aget(pk=trace.pk)
    assert (trace.status, trace.total_steps, trace.total_tokens) == (TraceStatus.COMPLETED, 2, 9)
    # The root has no input: the trace is named after what its model call was asked, in the
    # records that waited for the call.
    assert trace.task == "Weather in Paris?"


async def test_log_records_sent_after_their_span_update_its_step(user, settings):
    settings.TRACE_TREE_CACHE_MIN_STEPS = 1  # the finished trace's tree is kept once read
    spans, records = sdk_spans_and_logs(legacy_chat)
    token = await token_for(user)
    assert (await post_otlp(protobuf_body(spans), token=token)).status_code == HTTPStatus.OK
    trace = await Trace.objects.aget(pk=trace_of(spans))
    assert trace.status == TraceStatus.COMPLETED
    browser = AsyncClient()
    await browser.aforce_login(user)

    async def chat_preview() -> str:
        (root,) = (await browser.get(f"/api/traces/{trace.id}/tree")).json()["root_steps"]
        (chat,) = root["children"]
        return str(chat["data_preview"])

    assert "Weather in Paris?" not in await chat_preview()
    # One request per record, as a batch processor may send them.
    for record in records:
        response = await post_otlp(logs_body([record]), token=token, path="/v1/logs")
        assert response.status_code == HTTPStatus.OK
    step = await chat_step(spans)
    assert step.data["input"] == LEGACY_INPUT
    assert step.data["output"] == LEGACY_OUTPUT
    assert len(step.data["events"]) == 3
    assert "Weather in Paris?" in step.data_preview
    assert await waiting_rows() == 0
    # The tree kept before them is not read: each moved the trace's last_seq.
    assert "Weather in Paris?" in await chat_preview()
    # A finished trace takes them silently: no events after its trace_completed.
    after = await Trace.objects.aget(pk=trace.pk)
    assert (after.status, after.last_seq) == (TraceStatus.COMPLETED, trace.last_seq + 3)
    assert not await TraceEvent.objects.filter(trace=trace, seq__gt=trace.last_seq).aexists()
    # Its root has no input, and its model call had none when the spans came: it was named
    # after the root span, and is named after what the call was asked once the records say.
    assert (trace.task, after.task) == ("invoke_agent weather", "Weather in Paris?")
    assert "Weather in Paris?" in (await browser.get("/traces/")).content.decode()


def agent_asked_twice(tracer: otel_trace.Tracer, logger: Logger, *, given: str = "") -> None:
    """An agent whose two model calls' messages are log records, as Google ADK's (its content
    as events only) and Semantic Kernel's are, flushed after its spans when its tracing was
    set up first; its run given ``given`` as its input, when it is."""
    attributes = {"gen_ai.operation.name": "invoke_agent"}
    if given:
        attributes["input.value"] = given
    with tracer.start_as_current_span("invoke_agent weather", attributes=attributes):
        for question in ("Weather in Paris?", "And in Rome?"):
            with tracer.start_as_current_span(
                "chat gpt-4o", attributes={"gen_ai.operation.name": "chat"}
            ):
                logger.emit(
                    event_name="gen_ai.user.message", body={"content": question}, attributes=GENAI
                )


async def test_records_after_the_spans_name_the_trace_after_its_first_question(user):
    spans, records = sdk_spans_and_logs(agent_asked_twice)
    token = await token_for(user)
    await post_otlp(protobuf_body(spans), token=token)
    trace = await Trace.objects.aget(pk=trace_of(spans))
    assert (trace.status, trace.task) == (TraceStatus.COMPLETED, "invoke_agent weather")
    # Both calls' records in one request, the later one's first: the earlier call's question.
    await post_otlp(logs_body(records[::-1]), token=token, path="/v1/logs")
    trace = await Trace.objects.aget(pk=trace.pk)
    assert (trace.status, trace.task) == (TraceStatus.COMPLETED, "Weather in Paris?")
    browser = AsyncClient()
    await browser.aforce_login(user)
    assert (await browser.get(f"/api/traces/{trace.id}")).json()["task"] == "Weather in Paris?"


async def test_records_after_the_spans_rename_a_trace_once_and_only_one_its_root_named(user):
    """The first records that ask name the trace; those after them, and those of a trace
    named after its root's input, change no name."""
    spans, records = sdk_spans_and_logs(agent_asked_twice)
    token = await token_for(user)
    await post_otlp(protobuf_body(spans), token=token)
    first, later = records
    for record in (first, later):
        await post_otlp(logs_body([record]), token=token, path="/v1/logs")
        assert (await Trace.objects.aget(pk=trace_of(spans))).task == "Weather in Paris?"

    given, given_records = sdk_spans_and_logs(
        functools.partial(agent_asked_twice, given="Plan my week")
    )
    await post_otlp(protobuf_body(given), token=token)
    await post_otlp(logs_body(given_records), token=token, path="/v1/logs")
    assert (await Trace.objects.aget(pk=trace_of(given))).task == "Plan my week"
    calls = [step_of(span) for span in given if span.name == "chat gpt-4o"]
    stored = [await Step.objects.aget(pk=step_id) for step_id in calls]
    assert sorted(step.data["input"][0]["content"] for step in stored) == [
        "And in Rome?",
        "Weather in Paris?",
    ]


@pytest.mark.parametrize(
    "sends",
    [
        ("spans", "records", "records"),
        ("records", "records", "spans"),
        ("records", "spans", "records as JSON"),
    ],
)
async def test_log_records_sent_again_are_kept_once(user, sends):
    """An exporter retries a request the server had stored when its answer was lost (a
    proxy's timeout, a worker killed after the commit): the records it sends again are left
    out, whether they waited for their span or joined its step, as a re-sent span is."""
    spans, records = sdk_spans_and_logs(legacy_chat)
    token = await token_for(user)
    bodies = {
        "spans": (protobuf_body(spans), PROTOBUF, "/v1/traces"),
        "records": (logs_body(records), PROTOBUF, "/v1/logs"),
        "records as JSON": (logs_json_body(records), JSON, "/v1/logs"),
    }
    for send in sends:
        body, encoding, path = bodies[send]
        response = await post_otlp(body, token=token, content_type=encoding, path=path)
        assert response.status_code == HTTPStatus.OK, response.text
    step = await chat_step(spans)
    assert step.data["input"] == LEGACY_INPUT
    assert step.data["output"] == LEGACY_OUTPUT
    assert len(step.data["events"]) == 3
    assert len({event["uid"] for event in step.data["events"]}) == 3
    assert await waiting_rows() == 0


def test_a_record_is_told_from_a_re_send_by_its_content_or_its_uid():
    def user_says(text: str, uid: str) -> dict[str, Any]:
        return {
            "name": "gen_ai.user.message",
            "time": "2026-12-05T10:00:00.000000Z",
            "attributes": {},
            "body": {"content": text},
            "source": "log",
            "uid": uid,
        }

    # Two records alike but for their bodies (a clock that ticks coarsely) are two messages.
    merged = with_log_events({}, [user_says("one", "u1"), user_says("two", "u2")], max_events=9)
    later = [user_says("two", "u2"), user_says("three", "u3")]
    again = with_log_events(merged, later, max_events=9)
    assert [m["content"] for m in again["input"]] == ["one", "two", "three"]
    assert [e["uid"] for e in again["events"]] == ["u1", "u2", "u3"]


async def test_records_with_one_log_record_uid_are_one_record(user):
    """A record that carries the conventions' ``log.record.uid`` is that record, however its
    re-send differs (an exporter that stamps the time it observed it at each attempt)."""

    def logged_twice(tracer: otel_trace.Tracer, logger: Logger) -> None:
        with tracer.start_as_current_span("tool"):
            for _ in range(2):
                logger.emit(body="cache miss", attributes={"log.record.uid": "01JEXAMPLE"})
            logger.emit(body="cache miss", attributes={"log.record.uid": "01JOTHER"})

    spans, records = sdk_spans_and_logs(logged_twice)
    token = await token_for(user)
    await post_otlp(protobuf_body(spans), token=token)
    response = await post_otlp(logs_body(records), token=token, path="/v1/logs")
    assert response.status_code == HTTPStatus.OK
    step = await Step.objects.aget(pk=step_of(spans[0]))
    assert [e["attributes"]["log.record.uid"] for e in step.data["events"]] == [
        "01JEXAMPLE",
        "01JOTHER",
    ]


async def test_log_records_of_a_running_trace_reach_its_watchers(user, layer):
    spans, records = sdk_spans_and_logs(legacy_chat)
    chat, _root = spans
    token = await token_for(user)
    assert (await post_otlp(protobuf_body([chat]), token=token)).status_code == HTTPStatus.OK
    async with watching(trace_of(spans), token) as watcher:
        response = await post_otlp(logs_body(records), token=token, path="/v1/logs")
        assert response.status_code == HTTPStatus.OK
        updated = await watcher.receive_json_from(timeout=10)
        assert updated["event"] == "step_updated"
        assert updated["step_id"] == str(step_of(chat))
        assert "Weather in Paris?" in updated["updates"]["data_preview"]


def operation_details(tracer: otel_trace.Tracer, logger: Logger) -> None:
    """The later conventions (``OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai_latest_experimental``
    with content as events): one ``gen_ai.client.inference.operation.details`` record with
    the messages as structured attributes."""
    with tracer.start_as_current_span("chat gpt-4o", attributes={"gen_ai.operation.name": "chat"}):
        logger.emit(
            event_name="gen_ai.client.inference.operation.details",
            attributes={
                "gen_ai.operation.name": "chat",
                "gen_ai.system_instructions": ({"type": "text", "content": "Be brief."},),
                "gen_ai.input.messages": (
                    {"role": "user", "parts": ({"type": "text", "content": "Paris?"},)},
                ),
                "gen_ai.output.messages": (
                    {
                        "role": "assistant",
                        "parts": ({"type": "text", "content": "Rain."},),
                        "finish_reason": "stop",
                    },
                ),
            },
        )


async def test_the_later_conventions_details_event_gives_the_messages(user):
    spans, records = sdk_spans_and_logs(operation_details)
    token = await token_for(user)
    assert (await post_otlp(protobuf_body(spans), token=token)).status_code == HTTPStatus.OK
    response = await post_otlp(logs_body(records), token=token, path="/v1/logs")
    assert response.status_code == HTTPStatus.OK
    step = await chat_step(spans)
    assert step.data["input"] == [
        {"role": "user", "parts": [{"type": "text", "content": "Paris?"}]}
    ]
    assert step.data["output"][0]["parts"] == [{"type": "text", "content": "Rain."}]
    assert step.data["system_instructions"] == [{"type": "text", "content": "Be brief."}]
    assert step.data["otel_span"]["from_logs"] == ["input", "output", "system_instructions"]
    (event,) = step.data["events"]
    assert event["name"] == "gen_ai.client.inference.operation.details"
    assert event["attributes"] == {"gen_ai.operation.name": "chat"}


async def test_plain_log_records_in_a_span_are_its_events(user):
    def logging_tool(tracer: otel_trace.Tracer, logger: Logger) -> None:
        with tracer.start_as_current_span("fetch page"):
            logger.emit(body="cache miss", severity_text="WARN", attributes={"url": "/a"})

    spans, records = sdk_spans_and_logs(logging_tool)
    token = await token_for(user)
    response = await post_otlp(
        gzipped(logs_body(records)),
        token=token,
        path="/v1/logs",
        headers={"Content-Encoding": "gzip"},
    )
    assert response.status_code == HTTPStatus.OK
    await post_otlp(protobuf_body(spans), token=token)
    step = await Step.objects.aget(pk=step_of(spans[0]))
    (event,) = step.data["events"]
    assert {k: event[k] for k in ("name", "body", "severity", "attributes", "source")} == {
        "name": "log",
        "body": "cache miss",
        "severity": "WARN",
        "attributes": {"url": "/a"},
        "source": "log",
    }
    assert "input" not in step.data


async def test_a_waiting_record_with_what_json_columns_cannot_hold_is_kept(user):
    """A record whose body holds NUL and an infinite number, sent before its span: it waits
    with both made storable (PostgreSQL's JSON takes neither) and joins the step."""

    def odd_tool(tracer: otel_trace.Tracer, logger: Logger) -> None:
        with tracer.start_as_current_span("fetch page"):
            logger.emit(body={"text": "a\x00b", "took": float("inf")})

    spans, records = sdk_spans_and_logs(odd_tool)
    token = await token_for(user)
    response = await post_otlp(logs_body(records), token=token, path="/v1/logs")
    assert response.status_code == HTTPStatus.OK, response.text
    assert await waiting_rows() == 1
    await post_otlp(protobuf_body(spans), token=token)
    step = await Step.objects.aget(pk=step_of(spans[0]))
    (event,) = step.data["events"]
    assert event["body"] == {"text": "a\ufffdb", "took": "Infinity"}
    assert await waiting_rows() == 0


@pytest.mark.parametrize("span_first", [True, False])
async def test_messages_nested_past_what_a_step_holds_stay_text(user, span_first):
    """A record's messages as JSON text nested 1,000 levels deep (past what Python's JSON
    encoder and a step's data can nest), before or after its span: the text is kept as the
    input, and the span, sent twice, is stored once."""
    deep = "[" * 1000 + "]" * 1000

    def deep_chat(tracer: otel_trace.Tracer, logger: Logger) -> None:
        with tracer.start_as_current_span("chat", attributes={"gen_ai.operation.name": "chat"}):
            logger.emit(
                event_name="gen_ai.client.inference.operation.details",
                attributes={"gen_ai.input.messages": deep},
            )

    spans, records = sdk_spans_and_logs(deep_chat)
    token = await token_for(user)
    requests = [(protobuf_body(spans), "/v1/traces"), (logs_body(records), "/v1/logs")]
    requests += [(protobuf_body(spans), "/v1/traces")]
    for body, path in requests if span_first else requests[1:]:
        response = await post_otlp(body, token=token, path=path)
        assert response.status_code == HTTPStatus.OK, response.text
        assert partial_success(response, logs=path == "/v1/logs") == (0, "")
    step = await Step.objects.aget(pk=step_of(spans[0]))
    assert step.data["input"] == [deep]
    assert await waiting_rows() == 0
    browser = AsyncClient()
    await browser.aforce_login(user)
    tree = await browser.get(f"/api/traces/{step.trace_id}/tree")
    assert tree.status_code == HTTPStatus.OK
    assert "[[[[" in tree.json()["root_steps"][0]["data_preview"]


# --- the merge ----------------------------------------------------------------------------------


def test_a_span_s_own_messages_stand_and_the_record_keeps_its_content():
    data = {"input": [{"role": "user", "content": "from the span"}], "events": []}
    event = {
        "name": "gen_ai.user.message",
        "time": "2026-12-05T10:00:00.000000Z",
        "attributes": {},
        "body": {"content": "from the record"},
        "source": "log",
    }
    merged = with_log_events(data, [event], max_events=10)
    assert merged["input"] == [{"role": "user", "content": "from the span"}]
    assert merged["events"] == [event]
    assert "otel_span" not in merged


def test_records_of_several_requests_append_in_order_among_the_span_s_events():
    span_event = {"name": "retry", "time": "2026-12-05T10:00:01.000000Z", "attributes": {}}
    data = {"events": [span_event], "otel_span": {"span_id": "ab"}}

    def user_says(text: str, second: int) -> dict[str, Any]:
        return {
            "name": "gen_ai.user.message",
            "time": f"2026-12-05T10:00:0{second}.000000Z",
            "attributes": {},
            "body": {"content": text},
            "source": "log",
        }

    first = with_log_events(data, [user_says("one", 0)], max_events=10)
    both = with_log_events(first, [user_says("two", 2)], max_events=10)
    assert both["input"] == [{"role": "user", "content": "one"}, {"role": "user", "content": "two"}]
    assert [e["name"] for e in both["events"]] == [
        "gen_ai.user.message",
        "retry",
        "gen_ai.user.message",
    ]
    assert both["otel_span"] == {"span_id": "ab", "from_logs": ["input"]}
    assert data == {"events": [span_event], "otel_span": {"span_id": "ab"}}  # not changed


# --- bad input ----------------------------------------------------------------------------------


def no_span(tracer: otel_trace.Tracer, logger: Logger) -> None:
    logger.emit(body="outside any span")
    with tracer.start_as_current_span("inside"):
        logger.emit(body="inside a span")


async def test_records_that_name_no_span_are_rejected_the_others_kept(user):
    _spans, records = sdk_spans_and_logs(no_span)
    response = await post_otlp(logs_body(records), token=await token_for(user), path="/v1/logs")
    assert response.status_code == HTTPStatus.OK
    rejected, message = partial_success(response, logs=True)
    assert rejected == 1
    assert "1 log record(s) rejected" in message
    assert "names no span" in message
    assert await waiting_rows() == 1


async def test_a_record_with_ids_of_all_zeros_names_no_span(user):
    """All zeros is OTel's invalid id: a record outside any span, as some SDKs write it."""
    _spans, records = sdk_spans_and_logs(no_span)
    request = logs_request(records)
    outside, inside = request.resource_logs[0].scope_logs[0].log_records
    assert not outside.span_id
    assert inside.span_id
    outside.trace_id, outside.span_id = bytes(16), bytes(8)
    response = await post_otlp(
        request.SerializeToString(), token=await token_for(user), path="/v1/logs"
    )
    assert response.status_code == HTTPStatus.OK
    rejected, message = partial_success(response, logs=True)
    assert rejected == 1
    assert "names no span" in message
    assert await waiting_rows() == 1


async def test_a_request_whose_every_record_names_no_span_is_400(user):
    _, records = sdk_spans_and_logs(no_span)
    response = await post_otlp(logs_body(records[:1]), token=await token_for(user), path="/v1/logs")
    assert response.status_code == HTTPStatus.BAD_REQUEST
    assert "names no span" in rpc_status(response)[1]
    assert not await Trace.objects.aexists()


async def test_records_for_another_users_trace_are_refused_and_it_is_left_untouched(
    user, other_user
):
    spans, records = sdk_spans_and_logs(legacy_chat)
    assert (await post_otlp(protobuf_body(spans), token=await token_for(user))).status_code == 200
    before = await chat_step(spans)
    response = await post_otlp(
        logs_body(records), token=await token_for(other_user), path="/v1/logs"
    )
    assert response.status_code == HTTPStatus.FORBIDDEN
    assert rpc_status(response)[0] == 7  # PERMISSION_DENIED
    after = await chat_step(spans)
    assert after.data == before.data
    assert await waiting_rows() == 0


async def test_a_trace_recorded_another_way_takes_no_log_records(user):
    spans, records = sdk_spans_and_logs(legacy_chat)
    await sync_to_async(Trace.objects.create)(id=trace_of(spans), user=user, task="API trace")
    response = await post_otlp(logs_body(records), token=await token_for(user), path="/v1/logs")
    assert response.status_code == HTTPStatus.BAD_REQUEST
    assert "not recorded over OTLP" in rpc_status(response)[1]
    assert await waiting_rows() == 0


async def test_log_bodies_are_checked_as_span_bodies_are(user, settings):
    token = await token_for(user)
    for body, headers, status in (
        (b"\xff\xff\xff\xff", {}, HTTPStatus.BAD_REQUEST),
        (b"x", {"Content-Encoding": "br"}, HTTPStatus.UNSUPPORTED_MEDIA_TYPE),
    ):
        response = await post_otlp(body, token=token, headers=headers, path="/v1/logs")
        assert response.status_code == status
    assert (await post_otlp(b"", token=None, path="/v1/logs")).status_code == 401
    settings.OTLP_MAX_SPANS = 2
    _, records = sdk_spans_and_logs(legacy_chat)
    response = await post_otlp(logs_body(records), token=token, path="/v1/logs")
    assert response.status_code == HTTPStatus.REQUEST_ENTITY_TOO_LARGE
    assert "3 log records" in rpc_status(response)[1]
    assert "OTEL_BLRP_MAX_EXPORT_BATCH_SIZE" in rpc_status(response)[1]
    assert not await Trace.objects.aexists()


async def test_a_record_past_the_limits_is_rejected(user, settings):
    settings.OTLP_MAX_VALUE_CHARS = 40  # the resource's values are shorter

    def long_body(tracer: otel_trace.Tracer, logger: Logger) -> None:
        with tracer.start_as_current_span("step"):
            logger.emit(body="x" * 41)
            logger.emit(body="short")

    _, records = sdk_spans_and_logs(long_body)
    response = await post_otlp(logs_body(records), token=await token_for(user), path="/v1/logs")
    assert response.status_code == HTTPStatus.OK
    rejected, message = partial_success(response, logs=True)
    assert rejected == 1
    assert "41 characters" in message


async def test_a_record_whose_trace_is_new_opens_it_once(user):
    """Two requests of records for one new trace: one trace, both waiting rows."""
    spans, records = sdk_spans_and_logs(legacy_chat)
    token = await token_for(user)
    for record in records[:2]:
        response = await post_otlp(logs_body([record]), token=token, path="/v1/logs")
        assert response.status_code == HTTPStatus.OK
    assert await Trace.objects.acount() == 1
    assert await waiting_rows() == 2
    await post_otlp(protobuf_body(spans), token=token)
    step = await chat_step(spans)
    assert step.data["input"] == LEGACY_INPUT
    assert "output" not in step.data
    assert await waiting_rows() == 0
    assert (await Trace.objects.aget(pk=uuid.UUID(int=spans[0].context.trace_id))).task


async def test_a_trace_opened_by_records_started_when_the_earliest_was_emitted(user):
    """Records delivered late, before their span (a log processor exports sooner than a span
    processor): the trace they open started when they were emitted, not when they arrived."""
    spans, records = sdk_spans_and_logs(legacy_chat)
    request = logs_request(records)
    emitted = time.time_ns() - 86_400 * 10**9
    for offset, record in enumerate(request.resource_logs[0].scope_logs[0].log_records):
        record.time_unix_nano = emitted + offset * 10**9
    response = await post_otlp(
        request.SerializeToString(), token=await token_for(user), path="/v1/logs"
    )
    assert response.status_code == HTTPStatus.OK
    trace = await Trace.objects.aget(pk=uuid.UUID(int=spans[0].context.trace_id))
    assert trace.created_at == time_of(emitted)


async def test_records_of_spans_left_out_by_the_sampler_are_rejected(user):
    """An unsampled span is never exported: its records would open a trace that never fills."""
    from opentelemetry.sdk.trace.sampling import ALWAYS_OFF

    spans, records = sdk_spans_and_logs(no_span, sampler=ALWAYS_OFF)
    assert not spans
    response = await post_otlp(logs_body(records), token=await token_for(user), path="/v1/logs")
    assert response.status_code == HTTPStatus.BAD_REQUEST
    assert "not sampled" in rpc_status(response)[1]
    assert not await Trace.objects.aexists()


def test_a_step_keeps_at_most_the_events_a_span_may_have_and_counts_the_rest():
    data = {"events": [{"name": "own", "time": "2026-12-05T10:00:00.000000Z", "attributes": {}}]}

    def line(index: int) -> dict[str, Any]:
        return {"name": "log", "time": f"2026-12-05T10:00:{index:02d}.000000Z", "body": index}

    first = with_log_events(data, [line(1), line(2), line(3)], max_events=3)
    again = with_log_events(first, [line(4)], max_events=3)
    assert [e.get("body") for e in again["events"]] == [None, 1, 2]
    assert again["otel_span"]["dropped"] == {"log_records": 2}


def plain_chat(tracer: otel_trace.Tracer, logger: Logger) -> None:
    """A plain script's model call as the instrumentation records it: the chat span is the
    trace's root, its messages log records."""
    with tracer.start_as_current_span("chat gpt-4o", attributes={"gen_ai.operation.name": "chat"}):
        logger.emit(
            event_name="gen_ai.user.message",
            body={"content": "Weather in Paris?"},
            attributes=GENAI,
        )


async def test_a_root_model_call_is_named_after_the_messages_that_came_before_it(user):
    spans, records = sdk_spans_and_logs(plain_chat)
    token = await token_for(user)
    await post_otlp(logs_body(records), token=token, path="/v1/logs")
    await post_otlp(protobuf_body(spans), token=token)
    trace = await Trace.objects.aget(pk=trace_of(spans))
    assert trace.status == TraceStatus.COMPLETED
    assert trace.task == "Weather in Paris?"  # its messages' last user message
    # Without records before it, the root's name, until its records come.
    later, later_records = sdk_spans_and_logs(plain_chat)
    await post_otlp(protobuf_body(later), token=token)
    assert (await Trace.objects.aget(pk=trace_of(later))).task == "chat gpt-4o"
    await post_otlp(logs_body(later_records), token=token, path="/v1/logs")
    assert (await Trace.objects.aget(pk=trace_of(later))).task == "Weather in Paris?"


def plain_chat_asking(tracer: otel_trace.Tracer, logger: Logger, *, question: str) -> None:
    with tracer.start_as_current_span("chat gpt-4o", attributes={"gen_ai.operation.name": "chat"}):
        logger.emit(event_name="gen_ai.user.message", body={"content": question}, attributes=GENAI)


@pytest.mark.parametrize("records_first", [True, False])
async def test_a_long_question_names_its_trace_in_its_first_thousand_characters(
    user, records_first
):
    question = "Why? " * 1000
    spans, records = sdk_spans_and_logs(functools.partial(plain_chat_asking, question=question))
    token = await token_for(user)
    sends = [(protobuf_body(spans), "/v1/traces"), (logs_body(records), "/v1/logs")]
    for body, path in sends[::-1] if records_first else sends:
        assert (await post_otlp(body, token=token, path=path)).status_code == HTTPStatus.OK
    trace = await Trace.objects.aget(pk=trace_of(spans))
    assert trace.task == question[:1000]
    chat = await Step.objects.aget(trace=trace)
    assert chat.data["input"] == [{"role": "user", "content": question}]  # kept whole


# --- records whose span does not arrive ---------------------------------------------------------


def two_tools(tracer: otel_trace.Tracer, logger: Logger) -> None:
    """An agent whose two tool calls log what they do."""
    with tracer.start_as_current_span(
        "agent", attributes={"gen_ai.operation.name": "invoke_agent"}
    ):
        for tool in ("search", "fetch"):
            with tracer.start_as_current_span(
                f"execute_tool {tool}", attributes={"gen_ai.operation.name": "execute_tool"}
            ):
                logger.emit(body=f"{tool}: <script>alert(1)</script>", severity_text="WARN")
                logger.emit(event_name="tool.detail", attributes={"tool": tool, "try": 1})


def span_hex(span: Any) -> str:
    return f"{span.context.span_id:016x}"


async def test_records_whose_span_never_came_are_shown_listed_and_exported(
    user, other_user, monkeypatch
):
    """A span's records wait for it (an exporter that dropped the span never sends it): the
    trace page says so and shows them, escaped, the API pages through them, the JSON export
    holds them; when the span comes they are its step's."""
    spans, records = sdk_spans_and_logs(two_tools)
    search, fetch, root = spans
    token = await token_for(user)
    assert (await post_otlp(logs_body(records), token=token, path="/v1/logs")).status_code == 200
    trace_id = trace_of(spans)
    browser = AsyncClient()
    await browser.aforce_login(user)

    page = (await browser.get(f"/traces/{trace_id}/")).content.decode()
    assert "Log records wait for 2 spans that have not arrived." in page
    assert f"span {span_hex(search)}" in page
    assert f"span {span_hex(fetch)}" in page
    assert "search: &lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "<script>alert" not in page
    assert "{&quot;try&quot;:1,&quot;tool&quot;:&quot;fetch&quot;}" in page  # no body: attributes
    assert '<span class="severity">WARN</span>' in page

    api = f"/api/traces/{trace_id}/waiting-log-records"
    first = (await browser.get(api, {"limit": 1})).json()
    assert (first["total_spans"], first["next_offset"]) == (2, 1)
    (waiting,) = first["spans"]
    assert (waiting["span_id"], waiting["step_id"]) == (span_hex(search), str(step_of(search)))
    assert [(e["name"], e.get("body"), e.get("severity")) for e in waiting["events"]] == [
        ("log", "search: <script>alert(1)</script>", "WARN"),
        ("tool.detail", None, None),
    ]
    second = (await browser.get(api, {"offset": 1, "limit": 1})).json()
    assert [s["span_id"] for s in second["spans"]] == [span_hex(fetch)]
    assert second["next_offset"] is None
    bad = await browser.get(api, {"limit": 0})
    assert bad.status_code == HTTPStatus.UNPROCESSABLE_ENTITY
    assert bad.json()["error"]["code"] == "validation_error"

    # The search span and the root arrive; the fetch span never does.
    assert (await post_otlp(protobuf_body([search, root]), token=token)).status_code == 200
    assert [
        e["name"]
        for e in (await sync_to_async(Step.objects.get)(pk=step_of(search))).data["events"]
    ] == ["log", "tool.detail"]
    page = (await browser.get(f"/traces/{trace_id}/")).content.decode()
    assert "Log records came for 1 span that never arrived." in page
    assert f"span {span_hex(search)}" not in page
    assert f"span {span_hex(fetch)}" in page
    chinese = await browser.get(f"/traces/{trace_id}/", headers={"Accept-Language": "zh-CN"})
    assert "有日志记录属于 1 个始终没有到达的 span。" in chinese.content.decode()
    # Fetched alone when a span the page lists arrives (the live page's request).
    fragment = await browser.get(
        f"/traces/{trace_id}/", headers={"HX-Request": "true", "HX-Target": "waiting-logs"}
    )
    assert fragment.content.decode().lstrip().startswith('<div id="waiting-logs">')
    assert "<html" not in fragment.content.decode()

    trace = await Trace.objects.aget(pk=trace_id)
    document, _ = await export(browser, trace)
    assert len(document["steps"]) == 2
    assert [s["span_id"] for s in document["waiting_log_records"]] == [span_hex(fetch)]
    assert document["waiting_log_records"][0]["events"][0]["body"] == (
        "fetch: <script>alert(1)</script>"
    )

    # Someone else sees nothing of it.
    other = AsyncClient()
    await other.aforce_login(other_user)
    assert (await other.get(api)).status_code == HTTPStatus.NOT_FOUND


async def test_the_export_streams_waiting_records_in_chunks(user, monkeypatch):
    monkeypatch.setattr(selectors, "EXPORT_CHUNK", 1)
    spans, records = sdk_spans_and_logs(two_tools)
    token = await token_for(user)
    await post_otlp(logs_body(records), token=token, path="/v1/logs")
    browser = AsyncClient()
    await browser.aforce_login(user)

    document, chunks = await export(browser, await Trace.objects.aget(pk=trace_of(spans)))

    assert document["steps"] == []
    assert [s["span_id"] for s in document["waiting_log_records"]] == [
        span_hex(spans[0]),
        span_hex(spans[1]),
    ]
    assert (
        chunks == 4
    )  # the head, one span's records each (the steps' end before the first), the end


async def test_a_trace_without_waiting_records_lists_none(user):
    spans, records = sdk_spans_and_logs(legacy_chat)
    token = await token_for(user)
    await post_otlp(logs_body(records), token=token, path="/v1/logs")
    await post_otlp(protobuf_body(spans), token=token)
    browser = AsyncClient()
    await browser.aforce_login(user)
    listed = await browser.get(f"/api/traces/{trace_of(spans)}/waiting-log-records")
    assert listed.json() == {"spans": [], "total_spans": 0, "next_offset": None}
    page = (await browser.get(f"/traces/{trace_of(spans)}/")).content.decode()
    assert '<div id="waiting-logs"></div>' in page
    document, _ = await export(browser, await Trace.objects.aget(pk=trace_of(spans)))
    assert "waiting_log_records" not in document


def service_asking(tracer: otel_trace.Tracer, logger: Logger, *, count: int, costly: int) -> None:
    """A service's ``count`` requests, each a trace: a server span over a model call whose
    question is a log record; request ``costly``'s two spans cost more than a trace may hold."""
    for index in range(count):
        costs = {"gen_ai.usage.cost": 6e11} if index == costly else {}
        with (
            tracer.start_as_current_span(
                f"POST /ask/{index}", kind=SpanKind.SERVER, attributes=costs
            ),
            tracer.start_as_current_span(
                "chat",
                attributes={"gen_ai.operation.name": "chat", "gen_ai.usage.cost": 0.001, **costs},
            ),
        ):
            logger.emit(
                event_name="gen_ai.user.message",
                body={"content": f"Question {index}?"},
                attributes=GENAI,
            )


async def test_the_spans_of_many_stored_traces_each_go_in_on_their_own_terms(user, other_user):
    """A service's log records open its traces before their spans come, so the spans of its
    20 traces, in one request, go to stored traces, added together: each takes its steps, its
    record's question joining its model call. The one whose cost passes the limit is refused
    alone, its record still waiting for it; the one another user's service opened first is
    refused as theirs and left untouched."""
    spans, records = sdk_spans_and_logs(functools.partial(service_asking, count=20, costly=7))
    by_request = {
        int(span.name.rsplit("/", 1)[1]): trace_of([span])
        for span in spans
        if span.name.startswith("POST /ask/")
    }
    theirs = [span for span in spans if trace_of([span]) == by_request[12]]
    other = await token_for(other_user)
    assert (await post_otlp(protobuf_body(theirs), token=other)).status_code == HTTPStatus.OK
    token = await token_for(user)
    response = await post_otlp(logs_body(records), token=token, path="/v1/logs")
    assert partial_success(response, logs=True)[0] == 1  # trace 12's record: not the user's
    assert await waiting_rows() == 19

    response = await post_otlp(protobuf_body(spans), token=token)
    assert response.status_code == HTTPStatus.OK, response.text
    rejected, message = partial_success(response)
    assert rejected == 4  # trace 7's two spans (their cost), trace 12's two (another user's)
    assert "cost" in message
    assert "belongs to another user" in message

    @sync_to_async
    def state() -> tuple[dict[int, Trace], dict[uuid.UUID, Step], list[uuid.UUID]]:
        traces = {i: Trace.objects.get(pk=trace_id) for i, trace_id in by_request.items()}
        chats = {step.trace_id: step for step in Step.objects.filter(name="chat")}
        return traces, chats, list(PendingLogEvents.objects.values_list("trace_id", flat=True))

    traces, chats, waiting = await state()
    assert waiting == [by_request[7]]
    assert (traces[7].total_steps, traces[7].status) == (0, TraceStatus.RUNNING)
    assert (traces[12].user_id, traces[12].total_steps) == (other_user.id, 2)
    assert "input" not in chats[by_request[12]].data
    for index, trace in traces.items():
        if index in (7, 12):
            continue
        assert (trace.status, trace.total_steps, trace.root_count) == (
            TraceStatus.COMPLETED,
            2,
            1,
        )
        assert trace.total_cost == Decimal("0.00100000")
        chat = chats[trace.id]
        assert chat.data["input"] == [{"role": "user", "content": f"Question {index}?"}]
        assert chat.depth == 1


@pytest.mark.parametrize("records_first", [True, False], ids=["records first", "spans first"])
def test_records_and_spans_opening_one_trace_at_once_meet(user, records_first):
    """A request of a trace's log records and one of its spans, neither finding the trace
    stored: the second waits to open it behind the first, then looks again and adds to what
    the first stored. Either way the records reach their model call, none left waiting."""
    from traces.otlp import Limits
    from traces.otlp_logs import request_log_records
    from traces.services import otlp_logs_ingest

    spans, records = sdk_spans_and_logs(legacy_chat)

    def records_in() -> Any:
        batch = request_log_records(logs_request(records), limits=Limits.current())
        return otlp_logs_ingest(user=user, batch=batch)

    def spans_in() -> Any:
        return ingest_spans(user, spans)

    outcomes = one_waits_on_the_other(
        *((records_in, spans_in) if records_first else (spans_in, records_in))
    )
    assert [(o.accepted, o.rejected) for o in outcomes] == (
        [(3, 0), (2, 0)] if records_first else [(2, 0), (3, 0)]
    )
    chat = Step.objects.get(name="chat gpt-4o")
    assert (chat.data["input"], chat.data["output"]) == (LEGACY_INPUT, LEGACY_OUTPUT)
    assert not PendingLogEvents.objects.exists()
    assert Trace.objects.get().status == TraceStatus.COMPLETED


async def test_records_after_the_spans_of_many_traces_each_go_in_on_their_own_terms(
    user, other_user
):
    """The records of 20 stored traces, in one request, after their spans: added together,
    each joins its model call; the one whose trace another user's service sent is refused
    as theirs, and that trace is left untouched."""
    spans, records = sdk_spans_and_logs(functools.partial(service_asking, count=20, costly=-1))
    foreign = trace_of([next(s for s in spans if s.name == "POST /ask/12")])
    theirs = [span for span in spans if trace_of([span]) == foreign]
    token = await token_for(user)
    assert (
        await post_otlp(protobuf_body(theirs), token=await token_for(other_user))
    ).status_code == 200
    mine = [span for span in spans if trace_of([span]) != foreign]
    assert (await post_otlp(protobuf_body(mine), token=token)).status_code == HTTPStatus.OK

    response = await post_otlp(logs_body(records), token=token, path="/v1/logs")
    assert response.status_code == HTTPStatus.OK, response.text
    rejected, message = partial_success(response, logs=True)
    assert rejected == 1
    assert "belongs to another user" in message
    assert await waiting_rows() == 0

    @sync_to_async
    def chats() -> dict[uuid.UUID, Step]:
        return {step.trace_id: step for step in Step.objects.filter(name="chat")}

    stored = await chats()
    assert "input" not in stored[foreign].data
    asked = {
        step.data["input"][0]["content"] for trace_id, step in stored.items() if trace_id != foreign
    }
    assert asked == {f"Question {index}?" for index in range(20) if index != 12}
