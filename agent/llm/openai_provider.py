"""The provider for any OpenAI-compatible chat completions endpoint (OpenAI, vLLM, Ollama,
llama.cpp server, LM Studio...), on the official async ``openai`` SDK.

Retries are the SDK's (``max_retries``; see ``agent.llm.endpoint``), its failures mapped to
``LLMUnavailable`` / ``LLMTimeout``. A call is stopped by cancelling the task that awaits it:
the SDK abandons its HTTP request, and a stream closes its HTTP response. Stop sequences are
enforced on our side as well, since some servers ignore ``stop``.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
import weakref
from collections.abc import AsyncGenerator, Sequence
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Any

import openai
import structlog

from agent.exceptions import LLMUnavailable
from agent.llm.base import (
    ChatMessage,
    LLMChunk,
    LLMResponse,
    ToolCallRequest,
    ToolDefinition,
    Usage,
)
from agent.llm.endpoint import OpenAIEndpoint, ms_since

logger = structlog.get_logger(__name__)

#: The OpenAI API rejects more stop sequences than this; the rest are enforced client-side only.
MAX_SERVER_STOPS = 4
#: Text a stream has passed on is followed, this long after, by a flush chunk (``LLMChunk``)
#: unless the stream ended first: what its consumer holds goes out at most this late, however
#: slowly the next token comes, and a steady stream is flushed this often, not once per token.
FLUSH_S = 0.05


class OpenAIProvider(OpenAIEndpoint):
    """``LLMProvider`` for an OpenAI-compatible endpoint.

    ``timeout_s`` bounds connecting and each wait for data (so a stream may last longer as long
    as it keeps producing); ``max_retries`` is the number of extra attempts the SDK makes after
    the first.
    """

    writes_free_text = True
    label = "model endpoint"
    failure_event = "llm_call_failed"
    status_hints = {
        401: "check LLM_API_KEY",
        403: "check LLM_API_KEY and the key's permissions",
        404: "check LLM_MODEL, and that LLM_BASE_URL ends with /v1",
    }

    def __init__(
        self,
        *,
        base_url: str | None,
        api_key: str | None,
        model: str,
        timeout_s: float = 60.0,
        max_retries: int = 2,
        temperature: float = 0.0,
        max_tokens: int = 1024,
    ) -> None:
        self._endpoint_setup(
            base_url=base_url,
            api_key=api_key,
            model=model,
            timeout_s=timeout_s,
            max_retries=max_retries,
        )
        self.temperature = float(temperature)
        self.max_tokens = int(max_tokens)
        self._api_key = api_key or "not-needed"
        # The SDK's HTTP connections belong to the event loop that opened them, and one provider
        # serves every loop of the process (get_llm() is cached), so each loop gets its own client.
        self._clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, openai.AsyncOpenAI]
        self._clients = weakref.WeakKeyDictionary()
        self._clients_lock = threading.Lock()
        self._stream_usage_supported = True

    def describe(self) -> dict[str, Any]:
        return {"provider": "openai", "model": self.model, "base_url": self._display_url}

    async def complete(
        self,
        messages: Sequence[ChatMessage],
        *,
        stop: Sequence[str] | None = None,
        tools: Sequence[ToolDefinition] | None = None,
    ) -> LLMResponse:
        """One non-streamed chat completion, its content cut at the first stop sequence.

        Raises ``LLMUnavailable`` / ``LLMTimeout`` (once the SDK's retries are used up).
        Cancelling the awaiting task abandons the HTTP request (``asyncio.CancelledError``
        propagates).
        """
        started = time.monotonic()
        stops = _stops(stop)
        try:
            raw = await self._client().chat.completions.with_raw_response.create(
                **self._params(messages, stops, tools), stream=False
            )
            completion = raw.parse()
        except asyncio.CancelledError:
            logger.info("llm_call_cancelled", model=self.model, latency_ms=ms_since(started))
            raise
        except (openai.OpenAIError, ValueError) as exc:
            raise self._logged(self._error(exc), started) from exc
        attempts = raw.retries_taken + 1
        try:
            choice = completion.choices[0]
            content = choice.message.content or ""
            finish_reason = choice.finish_reason
            usage = _usage(completion.usage)
            model = completion.model or self.model
            calls = tuple(
                ToolCallRequest(
                    id=call.id or f"call_{index}",
                    name=call.function.name or "",
                    arguments=call.function.arguments or "",
                )
                for index, call in enumerate(choice.message.tool_calls or (), start=1)
            )
        except (AttributeError, IndexError, TypeError) as exc:
            raise self._logged(
                LLMUnavailable(
                    f"The model endpoint at {self._display_url} sent a malformed answer "
                    "(no choices with a message).",
                    details=self._details(None, attempts),
                ),
                started,
            ) from exc
        content, cut = _cut_at_stop(content, stops)
        response = LLMResponse(
            content=content,
            model=str(model),
            usage=usage,
            finish_reason="stop" if cut else finish_reason,
            latency_ms=ms_since(started),
            tool_calls=calls,
        )
        self._log_finished(response, attempts, stream=False)
        return response

    async def stream(
        self,
        messages: Sequence[ChatMessage],
        *,
        stop: Sequence[str] | None = None,
        tools: Sequence[ToolDefinition] | None = None,
    ) -> AsyncGenerator[LLMChunk, None]:
        """Content deltas in order, then one chunk with the whole ``LLMResponse``.

        Text that might be the start of a stop sequence is held back until it is not; at a stop
        sequence the stream ends. When text has arrived and the server then sends nothing for
        ``FLUSH_S`` after text was passed on, a flush chunk is yielded (then not again before
        more text). Native tool calls are gathered
        from their pieces; from the first of them every chunk says ``calling_tools``. The HTTP
        response is closed before the last chunk is yielded (consumers often stop iterating
        there without closing the generator), and when the awaiting task is cancelled while
        waiting for the next piece. Only the opening of the stream is retried; a failure after
        that raises ``LLMUnavailable`` / ``LLMTimeout``. Close the generator
        (``contextlib.aclosing``) when leaving it early.
        """
        started = time.monotonic()
        stops = _stops(stop)
        state = _StreamState()
        cutter = _StopCutter(stops)
        stopped = False
        try:
            pauses = _Flushes(FLUSH_S)
            async with (
                await self._open_stream(messages, stops, tools, state) as sdk_stream,
                aclosing(pauses.over(sdk_stream)) as chunks,
            ):
                async for chunk in chunks:
                    if chunk is None:
                        yield LLMChunk(calling_tools=state.calling_tools)
                        continue
                    delta = _absorb(chunk, state)
                    if state.calling_tools and not state.announced:
                        state.announced = True
                        yield LLMChunk(calling_tools=True)
                    if not delta:
                        continue
                    text, stopped = cutter.feed(delta)
                    if text:
                        pauses.text_passed()
                        yield LLMChunk(delta=text, calling_tools=state.calling_tools)
                    if stopped:
                        break
        except asyncio.CancelledError:
            logger.info("llm_call_cancelled", model=self.model, latency_ms=ms_since(started))
            raise
        except openai.OpenAIError as exc:
            raise self._logged(self._error(exc), started) from exc
        except (AttributeError, IndexError, TypeError, ValueError) as exc:
            raise self._logged(
                LLMUnavailable(
                    f"The model endpoint at {self._display_url} sent a malformed stream chunk.",
                    details=self._details(None, state.attempts),
                ),
                started,
            ) from exc
        if not stopped:
            if state.finish_reason is None:
                raise self._logged(
                    LLMUnavailable(
                        f"The model endpoint at {self._display_url} ended the stream before "
                        "the answer was finished.",
                        details=self._details(None, state.attempts),
                    ),
                    started,
                )
            rest = cutter.flush()
            if rest:
                yield LLMChunk(delta=rest, calling_tools=state.calling_tools)
        response = LLMResponse(
            content=cutter.text,
            model=state.model or self.model,
            usage=state.usage,
            finish_reason="stop" if stopped else state.finish_reason,
            latency_ms=ms_since(started),
            tool_calls=state.tool_calls(),
        )
        self._log_finished(response, state.attempts, stream=True)
        yield LLMChunk(response=response, calling_tools=state.calling_tools)

    # -- requests ---------------------------------------------------------------------------

    def _client(self) -> openai.AsyncOpenAI:
        loop = asyncio.get_running_loop()
        with self._clients_lock:
            client = self._clients.get(loop)
            if client is None:
                client = openai.AsyncOpenAI(
                    base_url=self.base_url,
                    api_key=self._api_key,
                    timeout=self.timeout_s,
                    max_retries=self.max_retries,
                )
                self._clients[loop] = client
            return client

    def _params(
        self,
        messages: Sequence[ChatMessage],
        stops: list[str],
        tools: Sequence[ToolDefinition] | None,
    ) -> dict[str, Any]:
        params: dict[str, Any] = {
            "model": self.model,
            "messages": [_message(m) for m in messages],
            "temperature": self.temperature,
            "max_tokens": self.max_tokens,
        }
        if stops:
            params["stop"] = stops[:MAX_SERVER_STOPS]
        if tools:
            params["tools"] = list(tools)
        return params

    async def _open_stream(
        self,
        messages: Sequence[ChatMessage],
        stops: list[str],
        tools: Sequence[ToolDefinition] | None,
        state: _StreamState,
    ) -> openai.AsyncStream[Any]:
        """The SDK's stream, opened with its retries; ``state.attempts`` says how many
        requests it took."""
        params = {**self._params(messages, stops, tools), "stream": True}
        asked_usage = self._stream_usage_supported
        if asked_usage:
            try:
                return await self._create_stream(
                    params | {"stream_options": {"include_usage": True}}, state
                )
            except openai.BadRequestError:
                # Servers that do not know stream_options answer 400: ask again without it
                # (a 400 for another reason comes back the same way and is reported then).
                pass
        sdk_stream = await self._create_stream(params, state)
        if asked_usage:
            self._stream_usage_supported = False
            logger.info(
                "llm_stream_options_unsupported", model=self.model, base_url=self._display_url
            )
        return sdk_stream

    async def _create_stream(
        self, params: dict[str, Any], state: _StreamState
    ) -> openai.AsyncStream[Any]:
        raw = await self._client().chat.completions.with_raw_response.create(**params)
        state.attempts = raw.retries_taken + 1
        sdk_stream: openai.AsyncStream[Any] = raw.parse()
        return sdk_stream

    def _log_finished(self, response: LLMResponse, attempts: int, *, stream: bool) -> None:
        logger.info(
            "llm_call_finished",
            model=response.model,
            latency_ms=response.latency_ms,
            prompt_tokens=response.usage.prompt_tokens if response.usage else None,
            completion_tokens=response.usage.completion_tokens if response.usage else None,
            finish_reason=response.finish_reason,
            tool_calls=len(response.tool_calls),
            attempt=attempts,
            stream=stream,
        )


@dataclass
class _StreamState:
    """What the stream learnt besides the text."""

    attempts: int = 1
    model: str | None = None
    finish_reason: str | None = None
    usage: Usage | None = None
    #: Native tool calls as their pieces arrive, by index: [id, name, arguments].
    calls: dict[int, list[str]] = field(default_factory=dict)
    calling_tools: bool = False
    announced: bool = False

    def tool_calls(self) -> tuple[ToolCallRequest, ...]:
        return tuple(
            ToolCallRequest(id=call_id or f"call_{index + 1}", name=name, arguments=arguments)
            for index, (call_id, name, arguments) in sorted(self.calls.items())
        )


class _StopCutter:
    """Cuts streamed text at the first stop sequence, holding back any tail that could still
    become one."""

    def __init__(self, stops: list[str]) -> None:
        self._stops = stops
        self._longest = max((len(s) for s in stops), default=0)
        self._received = ""
        self._sent = 0
        self.text = ""

    def feed(self, delta: str) -> tuple[str, bool]:
        """The text that can be passed on now, and whether a stop sequence was reached."""
        self._received += delta
        hits = [i for s in self._stops if (i := self._received.find(s, self._sent)) >= 0]
        if hits:
            return self._emit(min(hits)), True
        held = 0
        for size in range(min(self._longest - 1, len(self._received) - self._sent), 0, -1):
            tail = self._received[-size:]
            if any(s.startswith(tail) for s in self._stops):
                held = size
                break
        return self._emit(len(self._received) - held), False

    def flush(self) -> str:
        """The held-back text, once the stream has ended without completing a stop."""
        return self._emit(len(self._received))

    def _emit(self, end: int) -> str:
        text = self._received[self._sent : end]
        self._sent = end
        self.text = self._received[:end]
        return text


def _stops(stop: Sequence[str] | None) -> list[str]:
    if isinstance(stop, str):
        stop = [stop]
    return [s for s in (stop or ()) if s]


def _cut_at_stop(content: str, stops: Sequence[str]) -> tuple[str, bool]:
    """``content`` up to the first stop sequence, and whether one was found."""
    hits = [i for s in stops if (i := content.find(s)) >= 0]
    if not hits:
        return content, False
    return content[: min(hits)], True


def _absorb(chunk: Any, state: _StreamState) -> str:
    """Note a stream chunk's model, usage, finish reason and tool call pieces; return its
    content delta."""
    if chunk.model:
        state.model = chunk.model
    if chunk.usage is not None:
        state.usage = _usage(chunk.usage)
    if not chunk.choices:
        return ""
    choice = chunk.choices[0]
    if choice.finish_reason:
        state.finish_reason = choice.finish_reason
    delta = choice.delta
    if delta is None:
        return ""
    for piece in delta.tool_calls or ():
        state.calling_tools = True
        call = state.calls.setdefault(int(piece.index or 0), ["", "", ""])
        if piece.id:
            call[0] = piece.id
        function = piece.function
        if function is not None:
            # OpenAI sends the name once; llama.cpp's server repeats it in every piece.
            if function.name and function.name != call[1]:
                call[1] += function.name
            call[2] += function.arguments or ""
    return delta.content or ""


class _Flushes:
    """Reads a stream's chunks, giving None when ``flush_s`` has passed since the consumer
    first passed text on after the last None (``text_passed``): a flush is due. The read of
    the next chunk goes on across flushes; it is cancelled (and awaited) when the consumer
    stops or is cancelled."""

    def __init__(self, flush_s: float) -> None:
        self.flush_s = flush_s
        self._due: float | None = None

    def text_passed(self) -> None:
        if self._due is None:
            self._due = time.monotonic() + self.flush_s

    async def over(self, source: openai.AsyncStream[Any]) -> AsyncGenerator[Any | None, None]:
        iterator = source.__aiter__()
        pending: asyncio.Future[Any] | None = None
        try:
            while True:
                if pending is None:
                    pending = asyncio.ensure_future(anext(iterator, _END))
                timeout = None if self._due is None else max(0.0, self._due - time.monotonic())
                done, _ = await asyncio.wait({pending}, timeout=timeout)
                if not done:
                    self._due = None
                    yield None
                    continue
                chunk, pending = pending.result(), None
                if chunk is _END:
                    return
                yield chunk
        finally:
            if pending is not None and not pending.done():
                pending.cancel()
                with contextlib.suppress(BaseException):
                    await pending


_END = object()


def _message(message: ChatMessage) -> dict[str, Any]:
    """``message`` as the API takes it (only the keys it has)."""
    sent: dict[str, Any] = {"role": message["role"], "content": message["content"]}
    if message.get("tool_calls"):
        sent["tool_calls"] = message["tool_calls"]
    if "tool_call_id" in message:
        sent["tool_call_id"] = message["tool_call_id"]
    return sent


def _usage(usage: Any) -> Usage | None:
    if usage is None:
        return None
    return Usage(
        prompt_tokens=int(getattr(usage, "prompt_tokens", 0) or 0),
        completion_tokens=int(getattr(usage, "completion_tokens", 0) or 0),
    )
