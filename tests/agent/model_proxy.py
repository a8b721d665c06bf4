"""A recording HTTP proxy in front of a model server that nobody can script: what the model was
asked, what it answered, and when its answer ended or its client hung up.

DevAssist talks to the proxy as to any OpenAI-compatible endpoint; the proxy passes every
request on to ``upstream`` and every byte of the answer back as it comes, and records a
``ModelCall`` per request. It speaks just enough HTTP for that: one request per connection (the
answer says ``Connection: close``), the request body by its ``Content-Length``, and the request
sent on as HTTP/1.0, so that the server answers without chunked framing and a streamed answer
ends when the server closes the connection. The proxy reads the answer's text as it passes (the
``data:`` events of a stream, or the JSON of a whole answer) without changing it.

Times are ``time.monotonic()`` of this process, so a test can compare them with its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

#: Request headers not passed on: the proxy's connection to the server is its own.
_HOP_BY_HOP = {"connection", "keep-alive", "host", "proxy-connection", "transfer-encoding"}


@dataclass
class ModelCall:
    """One request the proxy passed on, and what came back."""

    method: str
    path: str
    #: The request's JSON body ({} when it had none).
    body: dict[str, Any]
    #: When the request had reached the proxy.
    received_at: float
    #: The server's HTTP status (None until its answer began, or if it never did).
    status: int | None = None
    #: When the server's answer had ended (it closed the connection); None if it did not.
    ended_at: float | None = None
    #: When the client hung up before the answer ended; None if it did not.
    client_gone_at: float | None = None
    #: When the first non-empty piece of the answer's text was passed on.
    first_content_at: float | None = None
    #: The answer's text as the server sent it (the streamed pieces joined).
    content: str = ""
    finish_reason: str | None = None
    #: The usage the server reported, None when it reported none.
    usage: dict[str, Any] | None = None

    @property
    def is_completion(self) -> bool:
        return self.method == "POST" and self.path.rstrip("/").endswith("/chat/completions")


class _Answer:
    """Reads the answer's text, finish reason and usage from its bytes as they pass."""

    def __init__(self, call: ModelCall, content_type: str) -> None:
        self.call = call
        self.streamed = content_type.startswith("text/event-stream")
        self._pending = b""

    def feed(self, data: bytes) -> None:
        self._pending += data
        if not self.streamed:
            return
        *lines, self._pending = self._pending.split(b"\n")
        for line in lines:
            text = line.decode(errors="replace").rstrip("\r")
            if text.startswith("data:") and text[5:].strip() != "[DONE]":
                with contextlib.suppress(ValueError):
                    self._take(json.loads(text[5:]), "delta")

    def end(self) -> None:
        if not self.streamed and self._pending:
            with contextlib.suppress(ValueError):
                self._take(json.loads(self._pending), "message")

    def _take(self, event: Any, key: str) -> None:
        if not isinstance(event, dict):
            return
        for choice in event.get("choices") or []:
            piece = (choice.get(key) or {}).get("content") or ""
            if piece and self.call.first_content_at is None:
                self.call.first_content_at = time.monotonic()
            self.call.content += piece
            self.call.finish_reason = choice.get("finish_reason") or self.call.finish_reason
        if event.get("usage"):
            self.call.usage = event["usage"]


class ModelProxy:
    """The proxy on a free port of 127.0.0.1, serving from a thread of its own. Use as a context
    manager. ``upstream`` (``http://host:port``) may be changed between requests."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream
        self._calls: list[ModelCall] = []
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="model-proxy")
        self._server: asyncio.Server | None = None
        self._handlers: set[asyncio.Task[None]] = set()
        self._open: set[asyncio.StreamWriter] = set()

    @property
    def base_url(self) -> str:
        """The OpenAI base URL to give DevAssist (``.../v1``)."""
        assert self._server is not None
        port = self._server.sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}/v1"

    @property
    def calls(self) -> list[ModelCall]:
        """Every request so far, in the order they arrived."""
        with self._lock:
            return list(self._calls)

    @property
    def completions(self) -> list[ModelCall]:
        """The chat completions requests so far (the model calls), in order."""
        return [call for call in self.calls if call.is_completion]

    def clear(self) -> None:
        """Forget the calls recorded so far."""
        with self._lock:
            self._calls.clear()

    def wait_for(self, condition: Callable[[], bool], *, timeout_s: float = 30.0) -> None:
        """Until ``condition()`` is true; fails the test after ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while not condition():
            if time.monotonic() > deadline:
                raise AssertionError(f"the model proxy did not see that within {timeout_s} s")
            time.sleep(0.01)

    async def until(self, condition: Callable[[], bool], *, timeout_s: float = 30.0) -> None:
        """``wait_for`` for a test whose event loop runs DevAssist meanwhile."""
        deadline = time.monotonic() + timeout_s
        while not condition():
            if time.monotonic() > deadline:
                raise AssertionError(f"the model proxy did not see that within {timeout_s} s")
            await asyncio.sleep(0.01)

    def __enter__(self) -> ModelProxy:
        self._thread.start()
        self._server = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self._handle, "127.0.0.1", 0), self._loop
        ).result(timeout=10)
        return self

    def __exit__(self, *exc_info: object) -> None:
        async def shut() -> None:
            assert self._server is not None
            self._server.close()
            # Closing the connections ends their handlers (cancelling a handler of
            # asyncio.start_server makes Python 3.11 log a spurious error).
            for writer in self._open:
                writer.close()
            if self._handlers:
                await asyncio.wait(self._handlers, timeout=10)

        asyncio.run_coroutine_threadsafe(shut(), self._loop).result(timeout=15)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        handler = asyncio.current_task()
        assert handler is not None
        self._handlers.add(handler)
        self._open.add(writer)
        upstream_writer: asyncio.StreamWriter | None = None
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            request_line, *header_lines = head.decode("latin-1").split("\r\n")
            method, target, _ = request_line.split(" ", 2)
            headers = [line.split(":", 1) for line in header_lines if ":" in line]
            length = sum(int(v) for k, v in headers if k.strip().lower() == "content-length")
            raw = await reader.readexactly(length)
            try:
                body = json.loads(raw) if raw else {}
            except ValueError:
                body = {}
            call = ModelCall(
                method, target, body if isinstance(body, dict) else {}, time.monotonic()
            )
            with self._lock:
                self._calls.append(call)

            where = urlsplit(self.upstream)
            host, port = where.hostname or "127.0.0.1", where.port or 80
            upstream_reader, upstream_writer = await asyncio.open_connection(host, port)
            self._open.add(upstream_writer)
            kept = "".join(
                f"{k}:{v}\r\n" for k, v in headers if k.strip().lower() not in _HOP_BY_HOP
            )
            upstream_writer.write(
                f"{method} {target} HTTP/1.0\r\nHost: {host}:{port}\r\nConnection: close\r\n"
                f"{kept}\r\n".encode("latin-1")
                + raw
            )
            await upstream_writer.drain()

            relay = asyncio.ensure_future(self._relay(upstream_reader, writer, call))
            hangup = asyncio.ensure_future(reader.read(1))
            await asyncio.wait({relay, hangup}, return_when=asyncio.FIRST_COMPLETED)
            if not relay.done():
                # The client sends nothing after its request: readable now means it hung up.
                call.client_gone_at = time.monotonic()
                relay.cancel()
            if hangup.done() and not hangup.cancelled():
                hangup.exception()  # a reset is a hang-up too
            hangup.cancel()
            with contextlib.suppress(asyncio.CancelledError, ConnectionError):
                await relay
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError, OSError):
            pass
        finally:
            if upstream_writer is not None:
                upstream_writer.close()
                self._open.discard(upstream_writer)
            writer.close()
            self._open.discard(writer)
            self._handlers.discard(handler)

    async def _relay(
        self, upstream: asyncio.StreamReader, client: asyncio.StreamWriter, call: ModelCall
    ) -> None:
        """The server's answer to the client as it comes; ``call`` learns what it said."""
        head = await upstream.readuntil(b"\r\n\r\n")
        status_line, *header_lines = head.decode("latin-1").split("\r\n")
        call.status = int(status_line.split(" ", 2)[1])
        headers = [line.split(":", 1) for line in header_lines if ":" in line]
        content_type = next(
            (v.strip() for k, v in headers if k.strip().lower() == "content-type"), ""
        )
        kept = "".join(f"{k}:{v}\r\n" for k, v in headers if k.strip().lower() != "connection")
        client.write(f"{status_line}\r\n{kept}Connection: close\r\n\r\n".encode("latin-1"))
        answer = _Answer(call, content_type)
        while data := await upstream.read(65536):
            answer.feed(data)
            client.write(data)
            await client.drain()
        answer.end()
        call.ended_at = time.monotonic()
