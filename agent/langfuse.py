"""Langfuse: agent runs exported as Langfuse traces, and links to them.

On when both ``LANGFUSE_PUBLIC_KEY`` and ``LANGFUSE_SECRET_KEY`` are set; ``LANGFUSE_BASE_URL``
names the Langfuse server. The only module that imports the ``langfuse`` SDK.

A run's life with Langfuse on (``agent.executor`` and ``agent.recorder`` make the two calls):

- ``langfuse_run_started`` before the model is called: the run's Langfuse trace id is fixed
  (derived from the run id) and stored in ``AgentRun.langfuse_trace_id``, and the run's model
  provider is wrapped so that every call's messages, reply, usage and timing are kept;
- ``langfuse_run_finished`` once the run is finished: the run is exported under that trace id,
  the run as the root span, each model call as a generation and each tool call (from the run's
  stored trace) as a tool span. The spans go out over OTLP/HTTP from a worker thread, never
  from the run's event loop; a failure is logged and never fails the run.

``langfuse_link`` gives a superuser the Langfuse URL of a run's trace, accepted only when it has
the configured base URL's origin (fail closed).
"""

from __future__ import annotations

import re
import threading
import time
import uuid
from collections.abc import AsyncGenerator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import aclosing
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal
from urllib.parse import urlsplit

import structlog
from django.conf import settings
from langfuse import (
    Langfuse,
    LangfuseGeneration,
    LangfuseOtelSpanAttributes,
    LangfuseSpan,
    LangfuseTool,
    propagate_attributes,
)
from langfuse.types import SpanLevel
from opentelemetry import trace as otel_trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.id_generator import RandomIdGenerator

from agent.exceptions import RunNotFound
from agent.llm.base import ChatMessage, LLMChunk, LLMProvider, LLMResponse, ToolDefinition
from agent.models import AgentRun, RunStatus
from agent.projections import step_times_ns
from devassist.exceptions import Forbidden
from traces.models import Step, StepStatus

logger = structlog.get_logger(__name__)

#: The OpenTelemetry instrumentation scope of DevAssist's spans; the Langfuse span processor
#: exports exactly these.
TRACER_NAME = "devassist.agent"

LinkReason = Literal["trace_not_available", "langfuse_unavailable"]

_TRACE_ID_RE = re.compile(r"[0-9a-f]{32}")
#: The level of a run's root span by its final status (a completed run has the default).
_RUN_LEVELS: dict[str, SpanLevel] = {RunStatus.FAILED: "ERROR", RunStatus.CANCELLED: "WARNING"}
_DEFAULT_PORTS = {"http": 80, "https": 443}


def langfuse_enabled() -> bool:
    """Whether runs are exported: both keys are set."""
    return bool(settings.LANGFUSE_PUBLIC_KEY and settings.LANGFUSE_SECRET_KEY)


def langfuse_trace_id(*, run_id: uuid.UUID) -> str:
    """The Langfuse trace id of a run: 32 lowercase hex digits, always the same for a run."""
    return Langfuse.create_trace_id(seed=str(run_id))


# --- recording a run's model calls ----------------------------------------------------------


@dataclass
class _Call:
    """One model call as it happens (event loop only)."""

    messages: list[ChatMessage]
    started_ns: int
    started: float
    first_output_at: datetime | None = None
    text: str = ""
    response: LLMResponse | None = None
    error: str | None = None
    ended: float | None = None

    def output(self, delta: str) -> None:
        if self.first_output_at is None:
            self.first_output_at = datetime.now(UTC)
        self.text += delta

    def finished(self, response: LLMResponse) -> None:
        self.response, self.ended = response, time.monotonic()

    def failed(self, error: str) -> None:
        self.error, self.ended = error, time.monotonic()


@dataclass
class _Observation:
    """What the export of one run needs from its start: the trace id, when the run started
    (wall clock for the start, monotonic for durations) and its model calls."""

    trace_id: str
    started_ns: int
    started: float
    calls: list[_Call] = field(default_factory=list)

    def call_started(self, messages: Sequence[ChatMessage]) -> _Call:
        call = _Call(messages=list(messages), started_ns=time.time_ns(), started=time.monotonic())
        self.calls.append(call)
        return call


class ObservedLLM:
    """An ``LLMProvider`` that passes every call on to ``inner`` and keeps its messages, reply,
    usage and timing in ``observation``. Errors and cancellations reach the caller unchanged."""

    def __init__(self, inner: LLMProvider, observation: _Observation) -> None:
        self.inner = inner
        self.model = inner.model
        self.writes_free_text = inner.writes_free_text
        self.observation = observation

    async def complete(
        self,
        messages: Sequence[ChatMessage],
        *,
        stop: Sequence[str] | None = None,
        tools: Sequence[ToolDefinition] | None = None,
    ) -> LLMResponse:
        call = self.observation.call_started(messages)
        try:
            response = await self.inner.complete(messages, stop=stop, tools=tools)
        except BaseException as exc:
            call.failed(_describe(exc))
            raise
        call.finished(response)
        return response

    async def stream(
        self,
        messages: Sequence[ChatMessage],
        *,
        stop: Sequence[str] | None = None,
        tools: Sequence[ToolDefinition] | None = None,
    ) -> AsyncGenerator[LLMChunk, None]:
        call = self.observation.call_started(messages)
        try:
            # Closing this stream closes the inner one (its HTTP response) at once.
            async with aclosing(self.inner.stream(messages, stop=stop, tools=tools)) as inner:
                async for chunk in inner:
                    if chunk.response is not None:
                        call.finished(chunk.response)
                    elif chunk.delta:
                        call.output(chunk.delta)
                    yield chunk
        except BaseException as exc:
            if call.ended is None:
                call.failed(_describe(exc))
            raise
        if call.ended is None:
            call.finished(LLMResponse(content=call.text, model=self.model))

    def describe(self) -> dict[str, Any]:
        return self.inner.describe()


def _describe(exc: BaseException) -> str:
    if isinstance(exc, GeneratorExit):
        return "Abandoned by the caller."
    message = getattr(exc, "message", None) or str(exc)
    return f"{type(exc).__name__}: {message}" if message else type(exc).__name__


#: Runs of this process being observed, by run id (from their start to their export).
_observed: dict[uuid.UUID, _Observation] = {}


async def langfuse_run_started(*, run: AgentRun, llm: LLMProvider) -> LLMProvider:
    """Call as ``run`` starts, before its model is called; returns the provider the run must
    use. With Langfuse off: ``llm`` itself, and nothing is stored. On: the run's trace id is
    stored in ``AgentRun.langfuse_trace_id`` (and set on ``run``), and an ``ObservedLLM``
    around ``llm`` is returned. Never raises: a run whose trace id could not be stored goes on
    unobserved."""
    if not langfuse_enabled():
        return llm
    trace_id = langfuse_trace_id(run_id=run.id)
    try:
        await AgentRun.objects.filter(pk=run.id).aupdate(langfuse_trace_id=trace_id)
    except Exception:
        logger.exception("langfuse_trace_id_not_stored", run_id=str(run.id))
        return llm
    run.langfuse_trace_id = trace_id
    observation = _Observation(
        trace_id=trace_id, started_ns=time.time_ns(), started=time.monotonic()
    )
    _observed[run.id] = observation
    return ObservedLLM(llm, observation)


# --- the export -----------------------------------------------------------------------------


@dataclass(frozen=True)
class GenerationExport:
    """A model call as Langfuse receives it. Times in nanoseconds since the epoch; the end is
    the start plus the monotonic duration."""

    name: str
    model: str
    messages: list[ChatMessage]
    output: str
    usage: dict[str, int]
    started_ns: int
    ended_ns: int
    completion_start: datetime | None
    error: str | None


@dataclass(frozen=True)
class ToolExport:
    """A tool call from the run's trace: its action step and its result step."""

    name: str
    arguments: Any
    output: Any
    error: str | None
    started_ns: int
    ended_ns: int
    step_id: str


@dataclass(frozen=True)
class RunExport:
    """Everything one run's export sends, taken on the event loop and sent from a thread."""

    run_id: uuid.UUID
    trace_id: str
    name: str
    user_id: str
    session_id: str | None
    input: str
    output: str
    status: str
    error: str
    metadata: dict[str, str]
    started_ns: int
    ended_ns: int
    generations: list[GenerationExport]
    tools: list[ToolExport]


@dataclass(frozen=True)
class LangfuseConfig:
    public_key: str
    secret_key: str
    base_url: str

    @classmethod
    def current(cls) -> LangfuseConfig:
        return cls(
            public_key=settings.LANGFUSE_PUBLIC_KEY,
            secret_key=settings.LANGFUSE_SECRET_KEY,
            base_url=settings.LANGFUSE_BASE_URL.rstrip("/"),
        )


#: Exports leave the event loop here, one at a time.
_exporter = ThreadPoolExecutor(max_workers=1, thread_name_prefix="langfuse-export")


async def langfuse_run_finished(
    *, run: AgentRun, status: str, output: str = "", error: str = ""
) -> None:
    """Call once ``run`` is finished (``status`` is its final ``RunStatus``). Exports it if it
    was observed since ``langfuse_run_started``: reads its tool calls from its trace here,
    sends from a worker thread and returns without waiting for Langfuse. Never raises."""
    observation = _observed.pop(run.id, None)
    if observation is None:
        return
    try:
        export = RunExport(
            run_id=run.id,
            trace_id=observation.trace_id,
            name=f"devassist {run.mode} run",
            user_id=str(run.user_id),
            session_id=str(run.conversation_id) if run.conversation_id else None,
            input=run.input,
            output=output,
            status=status,
            error=error,
            metadata={
                "run_id": str(run.id),
                "devassist_trace_id": str(run.trace_id),
                "mode": run.mode,
            },
            started_ns=observation.started_ns,
            ended_ns=_end_ns(observation.started_ns, observation.started),
            generations=[_generation(index, call) for index, call in enumerate(observation.calls)],
            tools=await _tool_calls(run),
        )
        _exporter.submit(_send, export, LangfuseConfig.current())
    except Exception:
        logger.exception("langfuse_export_failed", run_id=str(run.id))


def _end_ns(started_ns: int, started: float, ended: float | None = None) -> int:
    return started_ns + int(((ended or time.monotonic()) - started) * 1e9)


def _generation(index: int, call: _Call) -> GenerationExport:
    response = call.response
    usage = response.usage if response else None
    return GenerationExport(
        name=f"model call {index + 1}",
        model=response.model if response else "",
        messages=call.messages,
        output=response.content if response else call.text,
        usage={
            "input": usage.prompt_tokens,
            "output": usage.completion_tokens,
            "total": usage.total_tokens,
        }
        if usage
        else {},
        started_ns=call.started_ns,
        ended_ns=_end_ns(call.started_ns, call.started, call.ended),
        completion_start=call.first_output_at,
        error=call.error or (None if call.ended else "Unfinished when the run ended."),
    )


async def _tool_calls(run: AgentRun) -> list[ToolExport]:
    """The run's tool calls from its trace: each ``action`` step with its ``result``."""
    if run.trace_id is None:
        return []
    steps = [
        step
        async for step in Step.objects.filter(
            trace_id=run.trace_id, step_type__in=("action", "result")
        )
        .order_by("seq")
        .only(
            "id",
            "parent_id",
            "step_type",
            "name",
            "status",
            "data",
            "error",
            "started_at",
            "finished_at",
            "duration_ms",
            "created_at",
        )
    ]
    results = {step.parent_id: step for step in steps if step.step_type == "result"}
    tools = []
    for action in (step for step in steps if step.step_type == "action"):
        result = results.get(action.id)
        started_ns, ended_ns = step_times_ns(action)
        failed = action.status == StepStatus.FAILED or (
            result is not None and result.status == StepStatus.FAILED
        )
        error = (result.error if result else "") or action.error
        tools.append(
            ToolExport(
                name=action.data.get("tool_name") or action.name,
                arguments=action.data.get("arguments"),
                output=result.data.get("result") if result else None,
                error=(error or "Failed.") if failed else None,
                started_ns=started_ns,
                ended_ns=ended_ns,
                step_id=str(action.id),
            )
        )
    return tools


@dataclass(frozen=True)
class _Sdk:
    client: Langfuse
    provider: TracerProvider
    tracer: otel_trace.Tracer


_sdks: dict[LangfuseConfig, _Sdk] = {}
_sdk_lock = threading.Lock()


def _is_devassist_span(span: ReadableSpan) -> bool:
    return span.instrumentation_scope is not None and span.instrumentation_scope.name == (
        TRACER_NAME
    )


def _sdk(config: LangfuseConfig) -> _Sdk:
    """The Langfuse client for ``config`` (one per process), on a tracer provider of its own:
    the global OpenTelemetry provider is left alone."""
    with _sdk_lock:
        sdk = _sdks.get(config)
        if sdk is None:
            provider = TracerProvider()
            client = Langfuse(
                public_key=config.public_key,
                secret_key=config.secret_key,
                base_url=config.base_url,
                tracer_provider=provider,
                should_export_span=_is_devassist_span,
            )
            sdk = _Sdk(client=client, provider=provider, tracer=provider.get_tracer(TRACER_NAME))
            _sdks[config] = sdk
        return sdk


def _send(export: RunExport, config: LangfuseConfig) -> None:
    """Build the run's spans with their recorded times and flush them to Langfuse (worker
    thread). Logs and swallows every failure."""
    try:
        sdk = _sdk(config)
        with propagate_attributes(
            user_id=export.user_id,
            session_id=export.session_id,
            trace_name=export.name,
            metadata=export.metadata,
        ):
            # The fixed trace id enters as a remote parent, as the SDK's own trace_context does.
            parent = otel_trace.set_span_in_context(
                otel_trace.NonRecordingSpan(
                    otel_trace.SpanContext(
                        trace_id=int(export.trace_id, 16),
                        span_id=RandomIdGenerator().generate_span_id(),
                        is_remote=True,
                        trace_flags=otel_trace.TraceFlags(otel_trace.TraceFlags.SAMPLED),
                    )
                )
            )
            root_span = sdk.tracer.start_span(
                export.name,
                context=parent,
                start_time=export.started_ns,
                attributes={LangfuseOtelSpanAttributes.AS_ROOT: True},
            )
            root = LangfuseSpan(
                otel_span=root_span,
                langfuse_client=sdk.client,
                input=export.input,
                output=export.output or None,
                metadata={**export.metadata, "status": export.status},
                level=_RUN_LEVELS.get(export.status),
                status_message=export.error or None,
            )
            inside = otel_trace.set_span_in_context(root_span, parent)
            for generation in export.generations:
                LangfuseGeneration(
                    otel_span=sdk.tracer.start_span(
                        generation.name, context=inside, start_time=generation.started_ns
                    ),
                    langfuse_client=sdk.client,
                    input=generation.messages,
                    output=generation.output,
                    model=generation.model or None,
                    usage_details=generation.usage or None,
                    completion_start_time=generation.completion_start,
                    level="ERROR" if generation.error else None,
                    status_message=generation.error,
                ).end(end_time=generation.ended_ns)
            for tool in export.tools:
                LangfuseTool(
                    otel_span=sdk.tracer.start_span(
                        tool.name, context=inside, start_time=tool.started_ns
                    ),
                    langfuse_client=sdk.client,
                    input=tool.arguments,
                    output=tool.output,
                    metadata={"step_id": tool.step_id},
                    level="ERROR" if tool.error else None,
                    status_message=tool.error,
                ).end(end_time=tool.ended_ns)
            root.end(end_time=export.ended_ns)
        sdk.client.flush()
        logger.info(
            "langfuse_run_exported",
            run_id=str(export.run_id),
            langfuse_trace_id=export.trace_id,
            generations=len(export.generations),
            tools=len(export.tools),
        )
    except Exception:
        logger.exception("langfuse_export_failed", run_id=str(export.run_id))


def langfuse_wait_for_exports() -> None:
    """Block until the exports submitted so far are done (tests wait for them; at exit the
    export thread finishes its queue by itself)."""
    _exporter.submit(lambda: None).result()


def langfuse_reset() -> None:
    """Flush and shut down every Langfuse client of this process and forget them, so the next
    export builds a client from the settings then in force (tests change them)."""
    # The SDK keeps its resources (span processor, threads) in a per-public-key registry that
    # outlives the client: reset it, or a new client would reuse the old base URL.
    from langfuse._client.resource_manager import LangfuseResourceManager

    langfuse_wait_for_exports()
    with _sdk_lock:
        sdks = list(_sdks.values())
        _sdks.clear()
    for sdk in sdks:
        sdk.client.shutdown()
        sdk.provider.shutdown()
    LangfuseResourceManager.reset()
    _observed.clear()


# --- links ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class LangfuseLink:
    """``available`` with ``url``, or not, with ``reason``."""

    run_id: uuid.UUID
    available: bool
    url: str | None = None
    reason: LinkReason | None = None


def http_origin(url: str) -> tuple[str, str, int] | None:
    """``(scheme, host, port)`` of an http(s) URL, default ports filled in; None for anything
    else: another scheme, no host, credentials in the URL, an invalid port, whitespace, control
    or non-ASCII characters, backslashes (which browsers read as slashes)."""
    if not url.isascii() or not url.isprintable() or any(c in url for c in " \\"):
        return None
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORTS or not parts.hostname:
        return None
    if parts.username is not None or parts.password is not None:
        return None
    return scheme, parts.hostname.lower(), port or _DEFAULT_PORTS[scheme]


def url_has_origin(url: str, *, base_url: str) -> bool:
    """Whether ``url`` is an http(s) URL with exactly the origin of ``base_url`` (scheme, host,
    port). False whenever either is not a valid http(s) URL."""
    origin = http_origin(base_url)
    return origin is not None and http_origin(url) == origin


def langfuse_link(*, run: AgentRun) -> LangfuseLink:
    """The Langfuse URL of ``run``'s trace, or why there is none: ``langfuse_unavailable`` when
    Langfuse is off, its base URL is not an http(s) URL, the project could not be looked up
    (``/api/public/projects``, once per process when it succeeds) or the URL the SDK builds
    does not have exactly the base URL's origin; ``trace_not_available`` when the run has no
    Langfuse trace id or is not finished (its export happens when it finishes). Blocking (one
    HTTP request until the project is known): call it from a thread."""
    unavailable = LangfuseLink(run_id=run.id, available=False, reason="langfuse_unavailable")
    if not langfuse_enabled():
        return unavailable
    config = LangfuseConfig.current()
    if http_origin(config.base_url) is None:
        return unavailable
    if not _TRACE_ID_RE.fullmatch(run.langfuse_trace_id) or not run.is_finished:
        return LangfuseLink(run_id=run.id, available=False, reason="trace_not_available")
    try:
        url = _sdk(config).client.get_trace_url(trace_id=run.langfuse_trace_id)
    except Exception as exc:
        logger.warning("langfuse_project_lookup_failed", error=_describe(exc))
        return unavailable
    if url is None or not url_has_origin(url, base_url=config.base_url):
        logger.warning("langfuse_url_refused", run_id=str(run.id))
        return unavailable
    return LangfuseLink(run_id=run.id, available=True, url=url)


async def run_get_for_langfuse(*, user: Any, run_id: uuid.UUID) -> AgentRun:
    """The run whose Langfuse link ``user`` asks for. Raises ``Forbidden`` (403) unless the
    user is a superuser, and ``NotFound`` (404 ``run_not_found``) for a run that is not the
    user's own, with the same message whether or not it exists."""
    if not getattr(user, "is_superuser", False):
        raise Forbidden("Superusers only.")
    run = await AgentRun.objects.filter(pk=run_id, user=user).afirst()
    if run is None:
        raise RunNotFound(f"Run {run_id} does not exist.")
    return run
