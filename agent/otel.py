"""OpenTelemetry export: every finished run, as a trace after the OTel GenAI semantic
conventions, to any OTLP backend (an OTel Collector, Jaeger, Tempo, Phoenix, Langfuse).

On when ``OTEL_EXPORTER_OTLP_ENDPOINT`` (or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``) is set,
unless ``OTEL_SDK_DISABLED`` is true; over OTLP/HTTP with protobuf, or OTLP/gRPC when
``OTEL_EXPORTER_OTLP_PROTOCOL`` (or ``OTEL_EXPORTER_OTLP_TRACES_PROTOCOL``) is ``grpc``. The
SDK reads the other standard variables itself (``OTEL_EXPORTER_OTLP_HEADERS``, ``_TIMEOUT``,
``_COMPRESSION``, ``_INSECURE``, ``OTEL_BSP_*``, ``OTEL_SERVICE_NAME``,
``OTEL_RESOURCE_ATTRIBUTES``, ``OTEL_TRACES_SAMPLER``), but for the queue's and the batch's
sizes, which the settings read (``_QueueRoom`` counts against the queue's). The only module
that imports the OTel SDK's exporters.

The run's trace is its single record, so the export is derived from it once the run has
finished (``otel_run_finished``, called by the recorder after the run's last write): its steps
are read in one query and become spans with the steps' own times and ids (the trace id is the
DevAssist trace id's 128 bits, a span id the last 64 bits of its step id), handed to the SDK's
``BatchSpanProcessor``. Its worker thread batches and sends them; a run never waits for it,
and a collector that is down or slow costs the run nothing (a run that finds the queue full
is left out, whole). Prompts and completions go out only when
``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`` allows it.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import threading
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

import structlog
from django.conf import settings
from opentelemetry.attributes import BoundedAttributes
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import Event, ReadableSpan, SpanLimits, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.sampling import Sampler
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags

from agent.llm import get_llm
from agent.models import AgentRun, RunStatus
from agent.projections import step_times_ns
from traces.models import Step, StepStatus, StepType
from traces.outcomes import step_outcome
from traces.projections import clip

logger = structlog.get_logger(__name__)

#: The instrumentation scope of the exported spans.
SCOPE = InstrumentationScope("devassist.agent", "1")
AGENT_NAME = "devassist"
AGENT_SPAN_NAME = f"invoke_agent {AGENT_NAME}"
#: The longest a span's name is made (a model's name is in a ``chat`` span's).
SPAN_NAME_CHARS = 200
#: ``error.type`` when no class of error is known, as the conventions name it.
OTHER_ERROR = "_OTHER"
_SAMPLED = TraceFlags(TraceFlags.SAMPLED)


@dataclass(frozen=True)
class Capture:
    """Which content leaves, by ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT``: the
    messages as span attributes (``gen_ai.input.messages``, ``gen_ai.output.messages``: the
    conventions' current form, which Phoenix and other newer backends read), as events
    (``gen_ai.content.prompt``, ``gen_ai.content.completion``: their earlier form), or both;
    the tools' arguments and results go with either."""

    attributes: bool = False
    events: bool = False

    @classmethod
    def of(cls, value: str) -> Capture:
        """``span_only``, ``event_only``, ``span_and_event``, or the older boolean (``true``:
        both forms, for backends of either age); anything else: nothing."""
        mode = value.strip().lower()
        if mode == "span_only":
            return cls(attributes=True)
        if mode == "event_only":
            return cls(events=True)
        if mode in ("span_and_event", "true", "1", "yes"):
            return cls(attributes=True, events=True)
        return cls()

    @property
    def any(self) -> bool:
        return self.attributes or self.events


@dataclass(frozen=True)
class OtelConfig:
    """Where and how runs are exported, from the settings (tests change them)."""

    endpoint: str
    capture: Capture
    service_name: str
    #: ``http/protobuf`` or ``grpc`` (``settings.OTLP_EXPORT_PROTOCOLS``).
    protocol: str
    #: The most spans waiting to go out (``OTEL_BSP_MAX_QUEUE_SIZE``), and the most sent
    #: in one batch (``OTEL_BSP_MAX_EXPORT_BATCH_SIZE``).
    queue_size: int = 2048
    batch_size: int = 512

    @classmethod
    def current(cls) -> OtelConfig | None:
        """The export's configuration; None when it is off."""
        if settings.OTEL_SDK_DISABLED:
            return None
        protocol = settings.OTEL_EXPORTER_OTLP_PROTOCOL
        endpoint = settings.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT
        if not endpoint and settings.OTEL_EXPORTER_OTLP_ENDPOINT:
            # OTLP/HTTP appends the signal's path to the base URL; gRPC names the service in
            # the call, so its endpoint is the collector's address as it is.
            endpoint = settings.OTEL_EXPORTER_OTLP_ENDPOINT
            if protocol == "http/protobuf":
                endpoint = endpoint.rstrip("/") + "/v1/traces"
        if not endpoint:
            return None
        return cls(
            protocol=protocol,
            endpoint=endpoint,
            capture=Capture.of(settings.OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT),
            service_name=_service_name(),
            queue_size=settings.OTEL_BSP_MAX_QUEUE_SIZE,
            # No bigger than the queue: the SDK refuses a bigger batch at every export.
            batch_size=min(
                settings.OTEL_BSP_MAX_EXPORT_BATCH_SIZE, settings.OTEL_BSP_MAX_QUEUE_SIZE
            ),
        )


def _service_name() -> str:
    """``service.name`` as the standard variables give it (``OTEL_SERVICE_NAME``, else
    ``OTEL_RESOURCE_ATTRIBUTES``), else ``devassist`` (rather than the SDK's
    ``unknown_service``)."""
    name = str(Resource.create().attributes.get(SERVICE_NAME) or "")
    return AGENT_NAME if not name or name.startswith("unknown_service") else name


class _QueueRoom:
    """The room left in the processor's queue, counted on both sides of it: the spans put in
    (``take``) and the spans its thread handed to the exporter (``left``). The SDK drops the
    oldest queued span for each one past its size, which tears earlier runs apart in the
    backend; so a run that does not fit is left out whole instead. The count errs on the full
    side (a batch is counted out when the exporter gets it, just after it left the queue)."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._put = 0
        self._out = 0
        self._lock = threading.Lock()

    def take(self, count: int) -> bool:
        """Room for ``count`` spans, taken; False (and nothing taken) when they do not fit."""
        with self._lock:
            if self._put - self._out + count > self.capacity:
                return False
            self._put += count
            return True

    def left(self, count: int) -> None:
        with self._lock:
            self._out += count


@dataclass(frozen=True)
class _Pipeline:
    config: OtelConfig
    processor: BatchSpanProcessor
    room: _QueueRoom
    resource: Resource
    #: Which runs go out: ``OTEL_TRACES_SAMPLER`` (and its ``_ARG``), as the SDK's tracer
    #: reads it (``parentbased_always_on``, every run, by default).
    sampler: Sampler


_pipeline: _Pipeline | None = None
_pipeline_lock = threading.Lock()


def _pipeline_for(config: OtelConfig) -> _Pipeline:
    """The processor and exporter for ``config`` (one per process; a new configuration shuts
    the old one down). The SDK reads headers, timeout, compression (and for gRPC whether the
    channel is plain, from the endpoint's scheme or ``OTEL_EXPORTER_OTLP_INSECURE``) and the
    processor's batch and queue sizes from the standard variables."""
    global _pipeline
    with _pipeline_lock:
        if _pipeline is not None and _pipeline.config == config:
            return _pipeline
        old, _pipeline = _pipeline, None
        if old is not None:
            old.processor.shutdown()
        exporter: SpanExporter
        if config.protocol == "grpc":
            # Imported only for gRPC: grpcio takes about 0.2 s to import, at every start.
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
                OTLPSpanExporter as GrpcSpanExporter,
            )

            exporter = GrpcSpanExporter(endpoint=config.endpoint)
        else:
            exporter = OTLPSpanExporter(endpoint=config.endpoint)
        room = _QueueRoom(config.queue_size)
        _pipeline = _Pipeline(
            config=config,
            processor=BatchSpanProcessor(
                _RequestsWithin(
                    exporter, EXPORT_REQUEST_BYTES, endpoint=config.endpoint, room=room
                ),
                max_queue_size=config.queue_size,
                max_export_batch_size=config.batch_size,
            ),
            room=room,
            resource=Resource.create({SERVICE_NAME: config.service_name}),
            sampler=TracerProvider(shutdown_on_exit=False).sampler,
        )
        return _pipeline


#: The most one export request may encode to: a collector's gRPC receiver takes 4 MiB a
#: message by default (grpcio's limit), and one run's captured messages can make a batch of
#: several runs larger; past it, the batch goes in smaller requests (``_RequestsWithin``).
EXPORT_REQUEST_BYTES = 3 * 1024 * 1024


class _RequestsWithin(SpanExporter):
    """``exporter``, with each batch the processor hands it split into requests that encode
    to at most ``max_bytes`` (halved until they do): one run whose messages are huge then
    fails its own request alone, not the other runs batched with it. A request the exporter
    gives up on (after the SDK's retries) is logged as ``otel_export_dropped`` with where it
    went and how many spans and runs it held: the SDK's own line names neither (a wrong path
    said only "405, Method Not Allowed"). Each batch it gets has left the queue ``room``
    counts."""

    def __init__(
        self, exporter: SpanExporter, max_bytes: int, *, endpoint: str, room: _QueueRoom
    ) -> None:
        self._exporter = exporter
        self._max_bytes = max_bytes
        self._room = room
        url = urlsplit(endpoint)  # without what a URL may hide in its user part or query
        self._endpoint = url._replace(netloc=url.netloc.rpartition("@")[2], query="").geturl()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self._room.left(len(spans))
        ok = True
        for part in self._parts(spans):
            if self._exporter.export(part) != SpanExportResult.SUCCESS:
                ok = False
                logger.warning(
                    "otel_export_dropped",
                    endpoint=self._endpoint,
                    spans=len(part),
                    runs=len({span.context.trace_id for span in part if span.context}),
                )
        return SpanExportResult.SUCCESS if ok else SpanExportResult.FAILURE

    def _parts(self, spans: Sequence[ReadableSpan]) -> list[Sequence[ReadableSpan]]:
        if len(spans) <= 1 or encode_spans(spans).ByteSize() <= self._max_bytes:
            return [spans]
        half = len(spans) // 2
        return [*self._parts(spans[:half]), *self._parts(spans[half:])]

    def shutdown(self) -> None:
        self._exporter.shutdown()

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return self._exporter.force_flush(timeout_millis)


def otel_flush(timeout_millis: int = 30_000) -> bool:
    """Send what is queued now (tests wait for it); True when it all went out in time."""
    pipeline = _pipeline
    return pipeline.processor.force_flush(timeout_millis) if pipeline is not None else True


def otel_reset() -> None:
    """Shut the process's exporter down and forget it: the next export builds one from the
    settings then in force."""
    global _pipeline
    with _pipeline_lock:
        old, _pipeline = _pipeline, None
    if old is not None:
        old.processor.shutdown()


#: How long a stopping process gives what is queued to go out.
EXIT_FLUSH_S = 5.0


@atexit.register
def _flush_at_exit() -> None:
    """Send what is queued and stop the exporter, for ``EXIT_FLUSH_S`` at most: in a thread
    waited for that long, since the SDK's ``force_flush`` ignores its timeout and sends every
    queued batch, each waiting up to ``OTEL_EXPORTER_OTLP_TIMEOUT`` (10 s) on a collector that
    hangs, and ``shutdown`` waits 30 s more (a container's stop kills it before)."""
    pipeline = _pipeline
    if pipeline is None:
        return

    def stop() -> None:
        pipeline.processor.force_flush()
        pipeline.processor.shutdown()

    stopping = threading.Thread(target=stop, name="otel-exit", daemon=True)
    stopping.start()
    stopping.join(EXIT_FLUSH_S)
    if stopping.is_alive():
        logger.warning("otel_exit_flush_timed_out", seconds=EXIT_FLUSH_S)


async def otel_run_finished(
    *, run: AgentRun, prompts: Mapping[uuid.UUID, Sequence[Mapping[str, Any]]]
) -> None:
    """Export ``run`` (finished: its trace holds its last steps) when the export is on: its
    steps are read here (one query) and its spans queued for the SDK's worker thread, which
    sends them; this returns without waiting. ``prompts``: the messages each model call was
    sent, by its step's id. Never raises."""
    config = OtelConfig.current()
    if config is None or run.trace_id is None:
        return
    try:
        pipeline = _pipeline_for(config)
        sampled = pipeline.sampler.should_sample(None, run.trace_id.int, AGENT_SPAN_NAME)
        if not sampled.decision.is_sampled():
            return
        steps = [step async for step in Step.objects.filter(trace_id=run.trace_id).order_by("seq")]
        spans = run_spans(
            run,
            steps,
            resource=pipeline.resource,
            capture=config.capture,
            model=model_attributes(get_llm().describe()),
            prompts=prompts,
        )
        if not pipeline.room.take(len(spans)):
            # The collector is down or slower than the runs end: this run waits for no room.
            logger.warning(
                "otel_run_dropped",
                run_id=str(run.id),
                spans=len(spans),
                queue_size=pipeline.room.capacity,
                reason="the export queue is full (OTEL_BSP_MAX_QUEUE_SIZE)"
                if len(spans) <= pipeline.room.capacity
                else "the run has more spans than the export queue holds (OTEL_BSP_MAX_QUEUE_SIZE)",
            )
            return
        for span in spans:
            pipeline.processor.on_end(span)
        logger.info("otel_run_queued", run_id=str(run.id), spans=len(spans))
    except Exception:
        logger.exception("otel_export_failed", run_id=str(run.id))


# --- the run as spans -------------------------------------------------------------------------


def _ns(moment: datetime | None) -> int | None:
    return int(moment.timestamp() * 1_000_000_000) if moment is not None else None


def span_id_of(step_id: uuid.UUID) -> int:
    """A step's span id: the last 64 bits of its UUID (never 0)."""
    return (step_id.int & (2**64 - 1)) or 1


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)


def _messages(transcript: Sequence[Mapping[str, Any]], *, finish_reason: str | None = None) -> str:
    """``transcript`` (chat messages as the model is sent them: ``{"role", "content"}``, an
    assistant's with the ``tool_calls`` it asked for, a tool's result with its
    ``tool_call_id``) in the form of
    ``gen_ai.input.messages``, or with ``finish_reason`` (which an output message must carry)
    of ``gen_ai.output.messages``: each message's content as parts, a tool call it asks for as
    a ``tool_call`` (a reply that only asks for tools has no text part: it said nothing), a
    tool's result as a ``tool_call_response``."""
    messages = []
    for message in transcript:
        content = message.get("content")
        shown: dict[str, Any] = {"role": message["role"]}
        if message["role"] == "tool":
            response: dict[str, Any] = {"type": "tool_call_response", "response": content}
            if message.get("tool_call_id"):
                response["id"] = message["tool_call_id"]
            shown["parts"] = [response]
        else:
            text = _text(content if content is not None else "")
            calls = [_tool_call_part(call) for call in message.get("tool_calls") or []]
            shown["parts"] = [{"type": "text", "content": text}] if text or not calls else []
            shown["parts"] += calls
        if finish_reason is not None:
            shown["finish_reason"] = finish_reason
        messages.append(shown)
    return _text(messages)


def _tool_call_part(call: Any) -> dict[str, Any]:
    """A tool call the model asked for (a thought step's ``tool_calls`` entry: ``id``,
    ``name`` and ``arguments``, the JSON text the model wrote; or as it is sent back to the
    model, with ``name`` and ``arguments`` under ``function``) as a ``tool_call`` part, its
    arguments parsed when they parse."""
    call = call if isinstance(call, dict) else {}
    function = call.get("function")
    named = function if isinstance(function, dict) else call
    arguments = named.get("arguments")
    if isinstance(arguments, str):
        with contextlib.suppress(ValueError):  # else as the model wrote them
            arguments = json.loads(arguments)
    return {
        "type": "tool_call",
        "id": call.get("id"),
        "name": named.get("name"),
        "arguments": arguments,
    }


def _bounded(
    attributes: Mapping[str, Any], limits: SpanLimits, *, event: bool = False
) -> BoundedAttributes:
    """``attributes`` within the SDK's limits, as its tracer keeps a span's and an event's
    (the runs' spans are made here, not by the tracer): ``OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT``,
    ``OTEL_EVENT_ATTRIBUTE_COUNT_LIMIT``, and ``OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT`` /
    ``OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT``, which cut long texts (messages, tool results)."""
    if event:
        count, length = limits.max_event_attributes, limits.max_attribute_length
    else:
        count, length = limits.max_span_attributes, limits.max_span_attribute_length
    return BoundedAttributes(maxlen=count, attributes=attributes, max_value_len=length)


def _content(
    capture: Capture,
    prompt: Sequence[Mapping[str, Any]],
    reply: Sequence[Mapping[str, Any]] | None,
    *,
    start: int,
    end: int,
    limits: SpanLimits,
    finish_reason: str = "stop",
) -> tuple[dict[str, Any], list[Event]]:
    """The attributes and events that carry a call's ``prompt`` and ``reply`` (None: it has
    none; it ended for ``finish_reason``), as ``capture`` allows."""
    attributes: dict[str, Any] = {}
    events: list[Event] = []
    if capture.attributes:
        attributes["gen_ai.input.messages"] = _messages(prompt)
        if reply is not None:
            attributes["gen_ai.output.messages"] = _messages(reply, finish_reason=finish_reason)
    if capture.events:
        prompted = _bounded({"gen_ai.prompt": _text(prompt)}, limits, event=True)
        events.append(Event("gen_ai.content.prompt", prompted, start))
        if reply is not None:
            replied = _bounded({"gen_ai.completion": _text(reply)}, limits, event=True)
            events.append(Event("gen_ai.content.completion", replied, end))
    return attributes, events


def model_attributes(described: Mapping[str, Any]) -> dict[str, Any]:
    """The GenAI conventions' attributes of the model provider that served the runs
    (``LLMProvider.describe()``): ``gen_ai.provider.name``, and ``gen_ai.system``, its name
    before the conventions' 1.37, which backends still read (DevAssist speaks the OpenAI
    protocol: ``openai`` whatever server answers, as the conventions ask of an OpenAI client);
    ``server.address`` and ``server.port`` of its endpoint."""
    attributes: dict[str, Any] = {}
    provider = str(described.get("provider") or "")
    if provider:
        attributes["gen_ai.provider.name"] = attributes["gen_ai.system"] = provider
    url = urlsplit(str(described.get("base_url") or ""))
    if url.hostname:
        attributes["server.address"] = url.hostname
        port = url.port or {"http": 80, "https": 443}.get(url.scheme)
        if port:
            attributes["server.port"] = port
    return attributes


def run_spans(
    run: AgentRun,
    steps: list[Step],
    *,
    resource: Resource,
    capture: Capture,
    model: Mapping[str, Any],
    prompts: Mapping[uuid.UUID, Sequence[Mapping[str, Any]]] | None = None,
) -> list[ReadableSpan]:
    """The spans of ``run`` from its trace's ``steps`` (in seq order): the run as an
    ``invoke_agent`` span (its goal step), each model call (``thought``) as a ``chat`` span
    and each tool call (``action``, with its ``result``) as an ``execute_tool`` span under
    it, memory lookups and writes as spans of their own; as ``capture`` allows, each model
    call's messages (the ones it was sent, ``prompts`` by its step's id, else the ones its
    step recorded; and its reply) as attributes and/or events, and the tools' arguments and
    results as attributes. ``model``: the provider's attributes (``model_attributes``), on the
    model calls and the run's span."""
    prompts = prompts or {}
    assert run.trace_id is not None
    limits = SpanLimits()  # from the standard variables, as the SDK's tracer reads them
    trace_id = run.trace_id.int
    goal = next((s for s in steps if s.step_type == StepType.GOAL and s.parent_id is None), None)
    results = {s.parent_id: s for s in steps if s.step_type == StepType.RESULT}
    root_context = SpanContext(
        trace_id, span_id_of(goal.id if goal else run.id), is_remote=False, trace_flags=_SAMPLED
    )

    def context(step: Step) -> SpanContext:
        return SpanContext(trace_id, span_id_of(step.id), is_remote=False, trace_flags=_SAMPLED)

    def span(
        name: str,
        step: Step,
        attributes: dict[str, Any],
        *,
        kind: SpanKind = SpanKind.INTERNAL,
        events: list[Event] | None = None,
        error: str | None = None,
    ) -> ReadableSpan:
        start, end = step_times_ns(step)
        status = Status(StatusCode.ERROR, error) if error is not None else Status(StatusCode.UNSET)
        if error is not None:
            # Required of a failed operation by the GenAI conventions: the error's code where
            # the step keeps one (a model call the run failed in), else none is known.
            data = step.data if isinstance(step.data, dict) else {}
            attributes = {**attributes, "error.type": str(data.get("error_code") or OTHER_ERROR)}
        return ReadableSpan(
            name=name,
            context=context(step),
            parent=root_context,
            resource=resource,
            # The step's name tells the model calls apart ("iteration 2", "title"); its status
            # tells a call the user stopped (skipped) from one that ended.
            attributes=_bounded(
                {
                    "devassist.step_id": str(step.id),
                    "devassist.step_name": step.name,
                    "devassist.step_status": str(step.status),
                    **attributes,
                },
                limits,
            ),
            events=events or [],
            kind=kind,
            status=status,
            start_time=start,
            end_time=end,
            instrumentation_scope=SCOPE,
        )

    spans: list[ReadableSpan] = []
    for step in steps:
        if step.step_type == StepType.THOUGHT:
            data = step.data if isinstance(step.data, dict) else {}
            # A call that failed or was stopped has no reply (its step has no ``output``),
            # and its ``model`` is the one it asked.
            reply: dict[str, Any] | None = None
            if "output" in data:
                reply = {"role": "assistant", "content": data["output"]}
                if isinstance(data.get("tool_calls"), list):
                    reply["tool_calls"] = data["tool_calls"]
            requested = run.model or data.get("model") or ""
            attributes: dict[str, Any] = {
                "gen_ai.operation.name": "chat",
                **model,
                "gen_ai.request.model": requested,
            }
            if reply is not None:
                attributes["gen_ai.response.model"] = data.get("model") or requested
            usage = data.get("usage")
            if isinstance(usage, dict):
                attributes["gen_ai.usage.input_tokens"] = usage.get("prompt_tokens") or 0
                attributes["gen_ai.usage.output_tokens"] = usage.get("completion_tokens") or 0
            if data.get("finish_reason"):
                attributes["gen_ai.response.finish_reasons"] = [str(data["finish_reason"])]
            # The messages it was sent: as the run held them, or as its step recorded them
            # (the conversation's title, asked after the run).
            sent = prompts.get(step.id)
            if sent is None and isinstance(data.get("input"), list):
                sent = data["input"]
            prompt = [m for m in sent or () if isinstance(m, Mapping) and "role" in m]
            start, end = step_times_ns(step)
            content, events = _content(
                capture,
                prompt,
                [reply] if reply is not None else None,
                start=start,
                end=end,
                limits=limits,
                finish_reason=str(data.get("finish_reason") or "stop"),
            )
            attributes.update(content)
            failed = step.status == StepStatus.FAILED
            spans.append(
                span(
                    # The conventions' name, from the model asked for: the one answering is
                    # the model server's word (any text), and often a dated version of it.
                    clip(f"chat {requested}".strip(), SPAN_NAME_CHARS),
                    step,
                    attributes,
                    kind=SpanKind.CLIENT,
                    events=events,
                    error=(step.error or "The model call failed.") if failed else None,
                )
            )
        elif step.step_type == StepType.ACTION:
            data = step.data if isinstance(step.data, dict) else {}
            tool = str(data.get("tool_name") or step.name)
            result = results.get(step.id)
            attributes = {
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": tool,
                "gen_ai.tool.type": "function",
            }
            if data.get("call_id"):
                attributes["gen_ai.tool.call.id"] = str(data["call_id"])
            outcome = None
            if result is not None and isinstance(result.data, dict):
                outcome = result.data.get("result")
            if capture.any:
                attributes["gen_ai.tool.call.arguments"] = _text(data.get("arguments"))
                if result is not None:
                    attributes["gen_ai.tool.call.result"] = _text(outcome)
            error = None
            if step.is_error or (result is not None and result.is_error):
                # Its outcome says what the trace page says: "exit code 1", "timed out after
                # 5 s", "blocked: os.system" (a result without an error text of its own).
                reason = (
                    step_outcome(result.step_type, result.status, "", result.tool_facts).reason
                    if result is not None
                    else ""
                )
                error = (
                    (result.error if result else "")
                    or reason
                    or step.error
                    or "The tool call failed."
                )
            spans.append(span(f"execute_tool {tool}", step, attributes, error=error))
        elif step.step_type in (StepType.MEMORY_READ, StepType.MEMORY_WRITE):
            spans.append(
                span(
                    step.name or step.step_type,
                    step,
                    {"devassist.step_type": step.step_type},
                    error=(step.error or "Failed.") if step.is_error else None,
                )
            )
    answer = next((s for s in reversed(steps) if s.step_type == StepType.RESPONSE), None)
    spans.append(
        _agent_span(
            run, goal, answer, root_context, resource, capture=capture, model=model, limits=limits
        )
    )
    return spans


def _agent_span(
    run: AgentRun,
    goal: Step | None,
    answer: Step | None,
    context: SpanContext,
    resource: Resource,
    *,
    capture: Capture,
    model: Mapping[str, Any],
    limits: SpanLimits,
) -> ReadableSpan:
    """The run's own span, ``invoke_agent devassist``, from its goal step (the run's times
    when it has none), with its user's id (as the Langfuse export sends it); as ``capture``
    allows, its task and its answer (``answer``, the run's last ``response`` step), also as
    OpenInference's ``input.value`` / ``output.value``, the run's question and answer in
    Phoenix's lists of traces and sessions (which showed ``--`` for every run)."""
    if goal is not None:
        start, end = step_times_ns(goal)
    else:
        start = _ns(run.started_at or run.created_at) or 0
        end = max(start, _ns(run.finished_at) or start)
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": AGENT_NAME,
        **model,
        "devassist.run_id": str(run.id),
        "devassist.trace_id": str(run.trace_id),
        "devassist.run.mode": run.mode,
        "devassist.run.status": run.status,
    }
    if run.model:
        attributes["gen_ai.request.model"] = run.model
    if run.conversation_id:
        attributes["gen_ai.conversation.id"] = str(run.conversation_id)
    if run.user_id is not None:
        attributes["user.id"] = str(run.user_id)
    data = answer.data if answer is not None and isinstance(answer.data, dict) else {}
    if capture.attributes:
        attributes["input.value"] = run.input
        if "answer" in data:
            attributes["output.value"] = _text(data["answer"])
    content, events = _content(
        capture,
        [{"role": "user", "content": run.input}],
        [{"role": "assistant", "content": data["answer"]}] if "answer" in data else None,
        start=start,
        end=end,
        limits=limits,
        # A failed or stopped run's answer is what it wrote of one before it ended.
        finish_reason={"completed": "stop", "failed": "error"}.get(run.status, run.status),
    )
    attributes.update(content)
    error = None
    if run.status == RunStatus.FAILED:
        error = (goal.error if goal else "") or run.error_code or "The run failed."
        attributes["error.type"] = run.error_code or OTHER_ERROR
    return ReadableSpan(
        name=AGENT_SPAN_NAME,
        context=context,
        parent=None,
        resource=resource,
        attributes=_bounded(attributes, limits),
        events=events,
        kind=SpanKind.INTERNAL,
        status=Status(StatusCode.ERROR, error) if error else Status(StatusCode.UNSET),
        start_time=start,
        end_time=end,
        instrumentation_scope=SCOPE,
    )
