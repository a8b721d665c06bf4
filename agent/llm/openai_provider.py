"""The provider for any OpenAI-compatible chat completions endpoint (OpenAI, vLLM, Ollama,
llama.cpp server, LM Studio...), on the official async ``openai`` SDK.

Retries are ours, not the SDK's (``max_retries=0`` there), so that what is retried, how often
and how long we wait is explicit: connection errors, timeouts, 429 and 5xx are retried at most
``max_retries`` times with exponential backoff and jitter (a small ``Retry-After`` wins); every
other failure is final at once. Stop sequences are enforced on our side as well, since some
servers ignore ``stop``.
"""

from __future__ import annotations

import asyncio
import threading
import time
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

import openai
import structlog

from agent.llm.base import ChatMessage, LLMChunk, LLMResponse, LLMTimeout, LLMUnavailable, Usage
from agent.llm.endpoint import OpenAIEndpoint, ms_since
from agent.slots import slot_released

logger = structlog.get_logger(__name__)

T = TypeVar("T")

#: The OpenAI API rejects more stop sequences than this; the rest are enforced client-side only.
MAX_SERVER_STOPS = 4
#: How often a ``cancel`` event is looked at while a request is in flight.
CANCEL_POLL_S = 0.05

_END = object()
#: Put in a stream's queue when its ``cancel`` event is set.
_CANCELLED = object()


class OpenAIProvider(OpenAIEndpoint):
    """``LLMProvider`` for an OpenAI-compatible endpoint.

    ``timeout_s`` bounds connecting and each wait for data (so a stream may last longer as long
    as it keeps producing); ``max_retries`` is the number of extra attempts after the first;
    ``backoff_s`` is the first backoff delay, doubled per retry up to 8 s, with jitter.
    """

    writes_free_text = True
    label = "model endpoint"
    retry_event = "llm_call_retrying"
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
        backoff_s: float = 0.5,
    ) -> None:
        self._endpoint_setup(
            base_url=base_url,
            api_key=api_key,
            model=model,
            timeout_s=timeout_s,
            max_retries=max_retries,
            backoff_s=backoff_s,
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
        cancel: threading.Event | None = None,
    ) -> LLMResponse:
        """One non-streamed chat completion, its content cut at the first stop sequence.

        Raises ``LLMUnavailable`` / ``LLMTimeout`` (after the retries), and
        ``asyncio.CancelledError`` when ``cancel`` is set (checked every 50 ms) or the awaiting
        task is cancelled; either way the HTTP request is abandoned.
        """
        _raise_if_cancelled(cancel)
        async with slot_released():
            return await _until_cancelled(self._complete(messages, _stops(stop)), cancel)

    async def stream(
        self,
        messages: Sequence[ChatMessage],
        *,
        stop: Sequence[str] | None = None,
        cancel: threading.Event | None = None,
    ) -> AsyncIterator[LLMChunk]:
        """Content deltas in order, then one chunk with the whole ``LLMResponse``.

        Text that might be the start of a stop sequence is held back until it is not; at a stop
        sequence the stream ends (and the HTTP stream is closed). Only the opening of the stream
        is retried; a failure after that raises ``LLMUnavailable`` / ``LLMTimeout``. ``cancel``
        and task cancellation raise ``asyncio.CancelledError`` as in ``complete()``. Close the
        generator (``contextlib.aclosing``) when leaving it early.
        """
        _raise_if_cancelled(cancel)
        started = time.monotonic()
        stops = _stops(stop)
        state = _StreamState()
        queue: asyncio.Queue[object] = asyncio.Queue()
        pump = asyncio.create_task(self._pump(messages, stops, queue, state), name="llm-stream")
        # One watcher per stream rather than a cancellable wait per chunk: chunks come often.
        watcher = (
            asyncio.create_task(_signal_cancel(cancel, queue), name="llm-cancel-watch")
            if cancel
            else None
        )
        cutter = _StopCutter(stops)
        stopped = False
        try:
            while not stopped:
                if queue.empty():
                    async with slot_released():
                        item = await queue.get()
                else:
                    item = queue.get_nowait()
                if item is _END:
                    break
                if item is _CANCELLED:
                    raise asyncio.CancelledError
                if isinstance(item, BaseException):
                    raise item
                text, stopped = cutter.feed(cast(str, item))
                if text:
                    yield LLMChunk(delta=text)
            if not stopped:
                if state.finish_reason is None:
                    raise self._logged(
                        LLMUnavailable(
                            f"The model endpoint at {self._display_url} ended the stream before "
                            "the answer was finished.",
                            details=self._details(None, state.attempts),
                        ),
                        started,
                        state.attempts,
                    )
                rest = cutter.flush()
                if rest:
                    yield LLMChunk(delta=rest)
            # Close the HTTP stream (and stop watching) now: consumers often stop iterating at
            # the response without closing the generator, and the server may still be
            # generating.
            await _cancel(pump)
            if watcher is not None:
                await _cancel(watcher)
            response = LLMResponse(
                content=cutter.text,
                model=state.model or self.model,
                usage=state.usage,
                finish_reason="stop" if stopped else state.finish_reason,
                latency_ms=ms_since(started),
            )
            self._log_finished(response, state.attempts, stream=True)
            yield LLMChunk(response=response)
        except asyncio.CancelledError:
            logger.info("llm_call_cancelled", model=self.model, latency_ms=ms_since(started))
            raise
        finally:
            if watcher is not None:
                await _cancel(watcher)
            await _cancel(pump)

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
                    max_retries=0,
                )
                self._clients[loop] = client
            return client

    def _params(self, messages: Sequence[ChatMessage], stops: list[str]) -> dict[str, Any]:
        params: dict[str, Any] = {
            "model": self.model,
            "messages": [{"role": m["role"], "content": m["content"]} for m in messages],
            "temperature": self.temperature,
            "max_tokens": self.max_tokens,
        }
        if stops:
            params["stop"] = stops[:MAX_SERVER_STOPS]
        return params

    async def _complete(self, messages: Sequence[ChatMessage], stops: list[str]) -> LLMResponse:
        started = time.monotonic()
        client = self._client()
        params = self._params(messages, stops)
        attempts = 0

        async def create() -> Any:
            nonlocal attempts
            attempts += 1
            return await client.chat.completions.create(**params, stream=False)

        try:
            completion = await self._with_retries(create, started=started)
        except asyncio.CancelledError:
            logger.info("llm_call_cancelled", model=self.model, latency_ms=ms_since(started))
            raise
        try:
            choice = completion.choices[0]
            content = choice.message.content or ""
            finish_reason = choice.finish_reason
            usage = _usage(completion.usage)
            model = completion.model or self.model
        except (AttributeError, IndexError, TypeError) as exc:
            raise self._logged(
                LLMUnavailable(
                    f"The model endpoint at {self._display_url} sent a malformed answer "
                    "(no choices with a message).",
                    details=self._details(None, attempts),
                ),
                started,
                attempts,
            ) from exc
        content, cut = _cut_at_stop(content, stops)
        response = LLMResponse(
            content=content,
            model=str(model),
            usage=usage,
            finish_reason="stop" if cut else finish_reason,
            latency_ms=ms_since(started),
        )
        self._log_finished(response, attempts, stream=False)
        return response

    async def _pump(
        self,
        messages: Sequence[ChatMessage],
        stops: list[str],
        queue: asyncio.Queue[object],
        state: _StreamState,
    ) -> None:
        """Run the whole SDK stream in this one task, handing content deltas to ``queue``, then
        ``_END``, or the exception that ended it."""
        started = time.monotonic()
        try:
            sdk_stream = await self._open_stream(messages, stops, state, started)
            try:
                async for chunk in sdk_stream:
                    text = _absorb(chunk, state)
                    if text:
                        queue.put_nowait(text)
            finally:
                await sdk_stream.close()
        except openai.OpenAIError as exc:
            queue.put_nowait(
                self._logged(self._error(exc, state.attempts), started, state.attempts)
            )
        except (AttributeError, IndexError, TypeError, ValueError) as exc:
            error = LLMUnavailable(
                f"The model endpoint at {self._display_url} sent a malformed stream chunk.",
                details=self._details(None, state.attempts),
            )
            error.__cause__ = exc
            queue.put_nowait(self._logged(error, started, state.attempts))
        except (LLMUnavailable, LLMTimeout) as exc:
            queue.put_nowait(exc)
        else:
            queue.put_nowait(_END)

    async def _open_stream(
        self,
        messages: Sequence[ChatMessage],
        stops: list[str],
        state: _StreamState,
        started: float,
    ) -> Any:
        client = self._client()
        params = {**self._params(messages, stops), "stream": True}
        with_usage = self._stream_usage_supported

        async def create() -> Any:
            nonlocal with_usage
            state.attempts += 1
            if with_usage:
                try:
                    return await client.chat.completions.create(
                        **params, stream_options={"include_usage": True}
                    )
                except openai.BadRequestError:
                    # Servers that do not know stream_options answer 400: ask again without it
                    # (a 400 for another reason comes back the same way and is reported then).
                    with_usage = False
            return await client.chat.completions.create(**params)

        sdk_stream = await self._with_retries(create, started=started)
        if not with_usage and self._stream_usage_supported:
            self._stream_usage_supported = False
            logger.info(
                "llm_stream_options_unsupported", model=self.model, base_url=self._display_url
            )
        return sdk_stream

    async def _with_retries(self, call: Callable[[], Awaitable[T]], *, started: float) -> T:
        """``call()`` with up to ``max_retries`` retries of the retryable failures; raises the
        mapped ``LLMUnavailable`` / ``LLMTimeout`` (already logged)."""
        attempt = 0
        while True:
            attempt += 1
            try:
                return await call()
            except (openai.OpenAIError, ValueError) as exc:
                delay = self._retry_delay(exc, attempt)
                if delay is None:
                    raise self._logged(self._error(exc, attempt), started, attempt) from exc
                self._log_retry(exc, attempt, delay)
                await asyncio.sleep(delay)

    def _log_finished(self, response: LLMResponse, attempts: int, *, stream: bool) -> None:
        logger.info(
            "llm_call_finished",
            model=response.model,
            latency_ms=response.latency_ms,
            prompt_tokens=response.usage.prompt_tokens,
            completion_tokens=response.usage.completion_tokens,
            finish_reason=response.finish_reason,
            attempt=attempts,
            stream=stream,
        )


@dataclass
class _StreamState:
    """What the stream pump learnt besides the text; read by the generator at the end."""

    attempts: int = 0
    model: str | None = None
    finish_reason: str | None = None
    usage: Usage = field(default_factory=Usage)


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
    """Note a stream chunk's model, usage and finish reason; return its content delta."""
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
    return (delta.content or "") if delta is not None else ""


def _usage(usage: Any) -> Usage:
    if usage is None:
        return Usage()
    return Usage(
        prompt_tokens=int(getattr(usage, "prompt_tokens", 0) or 0),
        completion_tokens=int(getattr(usage, "completion_tokens", 0) or 0),
    )


def _raise_if_cancelled(cancel: threading.Event | None) -> None:
    if cancel is not None and cancel.is_set():
        raise asyncio.CancelledError("the LLM call was cancelled")


async def _until_cancelled(awaitable: Awaitable[T], cancel: threading.Event | None) -> T:
    """Await ``awaitable``; when ``cancel`` gets set first, cancel it and raise
    ``asyncio.CancelledError``. Cancelling the caller cancels it too."""
    if cancel is None:
        return await awaitable
    task = asyncio.ensure_future(awaitable)
    try:
        while True:
            done, _ = await asyncio.wait({task}, timeout=CANCEL_POLL_S)
            if done:
                return task.result()
            _raise_if_cancelled(cancel)
    finally:
        await _cancel(task)


async def _signal_cancel(cancel: threading.Event, queue: asyncio.Queue[object]) -> None:
    """Put ``_CANCELLED`` in ``queue`` once ``cancel`` is set (checked every
    ``CANCEL_POLL_S``)."""
    # ``cancel`` is a thread's event (tools in threads wait on it too): polled, not awaited.
    while not cancel.is_set():  # noqa: ASYNC110
        await asyncio.sleep(CANCEL_POLL_S)
    queue.put_nowait(_CANCELLED)


async def _cancel(task: asyncio.Future[Any]) -> None:
    """Cancel ``task`` if it is still running and wait until it has unwound (which closes its
    HTTP connection)."""
    if not task.done():
        task.cancel()
        await asyncio.wait({task})
