"""A real HTTP server speaking the OpenAI chat completions protocol, answering from a script.

The LLM is the one stand-in of the test suite, and it stands in over real HTTP so that the real
``openai`` client code runs. Each ``POST /v1/chat/completions`` takes the next reply of the
script; a reply is either a string (the assistant's content) or a dict:

``content`` (str)
    The assistant's content (default ``""``).
``chunks`` (list[str])
    The pieces a streamed answer is sent in (default: ``content`` split into words). When given,
    the content is their concatenation.
``delay_s`` (float)
    Wait this long before answering (the connection is watched meanwhile: a client that goes
    away is counted in ``disconnects`` and the reply is abandoned).
``chunk_delay_s`` (float)
    Streaming only: wait this long before each content chunk.
``delays_s`` (list[float])
    Streaming only: wait this long before each content chunk, one delay per chunk (a model
    that pauses mid-answer).
``tool_calls`` (list[dict])
    Native tool calls of the reply: each ``{"name", "arguments"}`` (a dict is sent as JSON,
    a string as it is) and optionally ``"id"``. Streamed after the content, each call's
    arguments in two pieces; the finish reason defaults to ``"tool_calls"``.
``status`` (int) and ``message`` (str)
    Answer with this error status and an OpenAI-style body ``{"error": {"message", "type",
    "code"}}``.
``headers`` (dict[str, str])
    Extra response headers (``Retry-After``...).
``usage`` (dict | None)
    The usage object to report; ``None`` reports none. Default: estimated token counts.
``finish_reason`` (str)
    Default ``"stop"``.
``model`` (str)
    The model the answer claims to come from (default: the requested one).
``drop`` (bool)
    Close the connection without answering.
``drop_after_chunks`` (int)
    Streaming only: close the connection after sending this many content chunks.
``ignore_stop`` (bool)
    Do not honour the request's ``stop`` (by default the content is cut at the first stop
    sequence, as real servers do).
``reject_stream_options`` (bool)
    Answer 400 to a request carrying ``stream_options`` without using up the reply, like servers
    that do not know that parameter.
``body`` (str)
    Send this raw body with status 200 (malformed answers).

When the script runs out, the server answers 500 with a message saying so. Every request body is
recorded in ``requests`` (and its headers in ``headers``).

``POST /v1/embeddings`` (and ``/embeddings``) answers without a script: each input gets a
deterministic unit vector, a signed hashed bag of its lower-cased words (``embedding_vector``), so
texts that share words are close in cosine distance and the same text always gets the same
vector. ``dimensions`` in the request sets the length (default ``EMBEDDING_DIMENSIONS``);
``encoding_format: "base64"`` is honoured; ``usage`` counts one token per word. Failures are
scripted apart from the chat replies, with ``.script_embeddings([...])``: each embeddings request
first takes the next of those replies, a dict with the keys ``status``, ``message``, ``code``,
``headers``, ``delay_s``, ``drop``, ``body`` and ``usage`` as above (``usage`` overrides the
counted one); once they are used up, requests are answered normally. Embeddings requests are
recorded in ``embedding_requests``, not in ``requests``.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import math
import re
import select
import socket
import struct
import sys
import threading
import time
from contextlib import suppress
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Reply = str | dict[str, Any]

#: The length of the fake embedding vectors when a request does not ask for ``dimensions``.
EMBEDDING_DIMENSIONS = 64
EMBEDDING_PATHS = ("/v1/embeddings", "/embeddings")

_DISCONNECTS = (BrokenPipeError, ConnectionResetError, ConnectionAbortedError, socket.timeout)


class FakeOpenAI:
    """The server and its state. Use as a context manager, or ``start()`` / ``stop()``."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._replies: list[Reply] = []
        self._embedding_replies: list[dict[str, Any]] = []
        self._closing = threading.Event()
        self.requests: list[dict[str, Any]] = []
        self.embedding_requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.disconnects = 0
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.fake = self
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name="fake-openai",
            daemon=True,
        )

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    def script(self, replies: list[Reply]) -> None:
        """Replace the replies still to come with ``replies`` (answered in order)."""
        with self._lock:
            self._replies = list(replies)

    def script_embeddings(self, replies: list[dict[str, Any]]) -> None:
        """Replace the embeddings replies still to come (errors, delays, drops) with ``replies``;
        requests beyond them are answered with computed vectors."""
        with self._lock:
            self._embedding_replies = [dict(reply) for reply in replies]

    async def wait_for_request(self, timeout_s: float = 10.0) -> None:
        """Until the server has received a request (the model call is under way and the server
        is working on its reply); fails the test after ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while not self.requests:
            if time.monotonic() > deadline:
                raise AssertionError("no request reached the fake model server")
            await asyncio.sleep(0.01)

    @property
    def remaining(self) -> int:
        """How many scripted replies have not been used yet."""
        with self._lock:
            return len(self._replies)

    def start(self) -> FakeOpenAI:
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving; replies waiting on a delay are abandoned at once."""
        self._closing.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> FakeOpenAI:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def _record(self, body: dict[str, Any], headers: dict[str, str]) -> int:
        with self._lock:
            self.requests.append(body)
            self.headers.append(headers)
            return len(self.requests)

    def _next_reply(self, body: dict[str, Any]) -> Reply | None:
        """The reply for this request, or None when the script has run out. A reply that rejects
        ``stream_options`` is left in place when it rejects this request."""
        with self._lock:
            if not self._replies:
                return None
            reply = self._replies[0]
            if (
                isinstance(reply, dict)
                and reply.get("reject_stream_options")
                and "stream_options" in body
            ):
                return reply
            return self._replies.pop(0)

    def _record_embedding(self, body: dict[str, Any]) -> dict[str, Any]:
        """Record an embeddings request; the scripted reply it takes, or {} to answer it."""
        with self._lock:
            self.embedding_requests.append(body)
            return self._embedding_replies.pop(0) if self._embedding_replies else {}

    def _disconnected(self) -> None:
        with self._lock:
            self.disconnects += 1


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    # socketserver's default backlog is 5: a burst of concurrent calls (benchmarks/
    # chat_stream.py opens 50 at once) would see refused connections, as no real endpoint does.
    request_queue_size = 128
    fake: FakeOpenAI

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that hangs up mid-answer is an expected event, not a server error.
        if isinstance(sys.exc_info()[1], _DISCONNECTS):
            self.fake._disconnected()
            return
        super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    # HTTP/1.0: one request per connection, a streamed body ends when the connection closes.
    protocol_version = "HTTP/1.0"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    @property
    def fake(self) -> FakeOpenAI:
        return self.server.fake

    def do_GET(self) -> None:
        if self.path.rstrip("/") == "/v1/models":
            self._json(
                HTTPStatus.OK,
                {
                    "object": "list",
                    "data": [
                        {"id": "fake-model", "object": "model", "created": 0, "owned_by": "fake"}
                    ],
                },
            )
            return
        self._error(HTTPStatus.NOT_FOUND, f"no route for GET {self.path}", "not_found")

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        if self.path.rstrip("/") in EMBEDDING_PATHS:
            self._embeddings(raw)
            return
        if self.path.rstrip("/") != "/v1/chat/completions":
            self._error(HTTPStatus.NOT_FOUND, f"no route for POST {self.path}", "not_found")
            return
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            self._error(HTTPStatus.BAD_REQUEST, "the request body is not JSON", "invalid_json")
            return
        number = self.fake._record(body, {k.lower(): v for k, v in self.headers.items()})
        reply = self.fake._next_reply(body)
        if reply is None:
            self._error(
                HTTPStatus.INTERNAL_SERVER_ERROR,
                f"fake_openai: the script has no reply left for request #{number}",
                "script_exhausted",
            )
            return
        options: dict[str, Any] = {"content": reply} if isinstance(reply, str) else dict(reply)
        if options.get("reject_stream_options") and "stream_options" in body:
            self._error(
                HTTPStatus.BAD_REQUEST,
                "Unrecognized request argument supplied: stream_options",
                "invalid_request_error",
            )
            return
        if not self._wait(float(options.get("delay_s", 0))):
            return
        if options.get("drop"):
            self._drop()
            return
        if "status" in options:
            self._error(
                HTTPStatus(options["status"]),
                options.get("message", f"fake error {options['status']}"),
                options.get("code", "fake_error"),
                headers=options.get("headers"),
            )
            return
        if "body" in options:
            self._send(HTTPStatus.OK, options["body"].encode(), "application/json")
            return
        if body.get("stream"):
            self._stream(body, options)
        else:
            self._complete(body, options)

    def _embeddings(self, raw: bytes) -> None:
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            self._error(HTTPStatus.BAD_REQUEST, "the request body is not JSON", "invalid_json")
            return
        options = self.fake._record_embedding(body)
        if not self._wait(float(options.get("delay_s", 0))):
            return
        if options.get("drop"):
            self._drop()
            return
        if "status" in options:
            self._error(
                HTTPStatus(options["status"]),
                options.get("message", f"fake error {options['status']}"),
                options.get("code", "fake_error"),
                headers=options.get("headers"),
            )
            return
        if "body" in options:
            self._send(HTTPStatus.OK, options["body"].encode(), "application/json")
            return
        texts = body.get("input")
        if isinstance(texts, str):
            texts = [texts]
        if not isinstance(texts, list) or not texts or not all(isinstance(t, str) for t in texts):
            self._error(
                HTTPStatus.BAD_REQUEST,
                "'input' must be a string or a non-empty list of strings",
                "invalid_request_error",
            )
            return
        if any(not text for text in texts):
            self._error(
                HTTPStatus.BAD_REQUEST, "'input' cannot contain an empty string", "invalid_input"
            )
            return
        dimensions = int(body.get("dimensions") or EMBEDDING_DIMENSIONS)
        as_base64 = body.get("encoding_format") == "base64"
        data = []
        for index, text in enumerate(texts):
            vector = embedding_vector(text, dimensions)
            encoded: list[float] | str = (
                base64.b64encode(struct.pack(f"<{dimensions}f", *vector)).decode()
                if as_base64
                else vector
            )
            data.append({"object": "embedding", "index": index, "embedding": encoded})
        tokens = sum(len(_WORD.findall(text)) for text in texts)
        usage = options.get("usage", {"prompt_tokens": tokens, "total_tokens": tokens})
        self._json(
            HTTPStatus.OK,
            {
                "object": "list",
                "data": data,
                "model": body.get("model", "fake-embedding-model"),
                "usage": usage,
            },
            headers=options.get("headers"),
        )

    def _complete(self, body: dict[str, Any], options: dict[str, Any]) -> None:
        content, finish_reason = _content(body, options)
        message: dict[str, Any] = {"role": "assistant", "content": content}
        calls = _tool_calls(options)
        if calls:
            message["tool_calls"] = calls
        answer: dict[str, Any] = {
            "id": "chatcmpl-fake",
            "object": "chat.completion",
            "created": 0,
            "model": options.get("model", body.get("model", "fake-model")),
            "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
        }
        usage = _usage(body, options, content)
        if usage is not None:
            answer["usage"] = usage
        self._json(HTTPStatus.OK, answer, headers=options.get("headers"))

    def _stream(self, body: dict[str, Any], options: dict[str, Any]) -> None:
        content, finish_reason = _content(body, options)
        pieces = _pieces(options, content)
        model = options.get("model", body.get("model", "fake-model"))

        def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
            return {
                "id": "chatcmpl-fake",
                "object": "chat.completion.chunk",
                "created": 0,
                "model": model,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
            }

        self.send_response(HTTPStatus.OK)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        for name, value in (options.get("headers") or {}).items():
            self.send_header(name, value)
        self.end_headers()
        try:
            self._event(chunk({"role": "assistant", "content": ""}))
            drop_after = options.get("drop_after_chunks")
            delays = list(options.get("delays_s") or [])
            for sent, piece in enumerate(pieces):
                if drop_after is not None and sent >= drop_after:
                    self._drop()
                    return
                delay = delays[sent] if sent < len(delays) else options.get("chunk_delay_s", 0)
                if not self._wait(float(delay)):
                    return
                self._event(chunk({"content": piece}))
            for index, call in enumerate(_tool_calls(options)):
                arguments = call["function"]["arguments"]
                half = len(arguments) // 2
                opening = {"index": index, "id": call["id"], "type": "function"}
                opening["function"] = {"name": call["function"]["name"], "arguments": ""}
                self._event(chunk({"tool_calls": [opening]}))
                for part in (arguments[:half], arguments[half:]):
                    piece_of_call = {"index": index, "function": {"arguments": part}}
                    self._event(chunk({"tool_calls": [piece_of_call]}))
            self._event(chunk({}, finish_reason))
            usage = _usage(body, options, content)
            if (body.get("stream_options") or {}).get("include_usage") and usage is not None:
                self._event({**chunk({}), "choices": [], "usage": usage})
            self.wfile.write(b"data: [DONE]\n\n")
            self.wfile.flush()
        except _DISCONNECTS:
            self.fake._disconnected()
            self.close_connection = True

    def _event(self, data: dict[str, Any]) -> None:
        self.wfile.write(b"data: " + json.dumps(data, ensure_ascii=False).encode() + b"\n\n")
        self.wfile.flush()

    def _wait(self, seconds: float) -> bool:
        """Sleep ``seconds`` while watching the client; False when it went away or the server
        is shutting down."""
        if seconds <= 0:
            return True
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            if self.fake._closing.wait(min(left, 0.02)):
                return False
            if self._client_gone():
                self.fake._disconnected()
                self.close_connection = True
                return False
        return True

    def _client_gone(self) -> bool:
        readable, _, _ = select.select([self.connection], [], [], 0)
        if not readable:
            return False
        try:
            return self.connection.recv(1, socket.MSG_PEEK) == b""
        except OSError:
            return True

    def _drop(self) -> None:
        self.close_connection = True
        with suppress(OSError):
            self.connection.shutdown(socket.SHUT_RDWR)

    def _error(
        self,
        status: HTTPStatus,
        message: str,
        code: str,
        *,
        headers: dict[str, str] | None = None,
    ) -> None:
        kind = "server_error" if status >= 500 else "invalid_request_error"
        self._json(
            status,
            {"error": {"message": message, "type": kind, "param": None, "code": code}},
            headers=headers,
        )

    def _json(
        self, status: HTTPStatus, data: Any, *, headers: dict[str, str] | None = None
    ) -> None:
        self._send(
            status, json.dumps(data, ensure_ascii=False).encode(), "application/json", headers
        )

    def _send(
        self,
        status: HTTPStatus,
        payload: bytes,
        content_type: str,
        headers: dict[str, str] | None = None,
    ) -> None:
        try:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(payload)))
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(payload)
            self.wfile.flush()
        except _DISCONNECTS:
            self.fake._disconnected()
            self.close_connection = True


_WORD = re.compile(r"\w+")


def embedding_vector(text: str, dimensions: int = EMBEDDING_DIMENSIONS) -> list[float]:
    """The fake server's embedding of ``text``: each lower-cased word adds +1 or -1 at a position
    both taken from its BLAKE2 hash, then the vector is scaled to unit length (a text without
    words gets the first unit vector)."""
    vector = [0.0] * dimensions
    for word in _WORD.findall(text.lower()):
        digest = hashlib.blake2b(word.encode(), digest_size=8).digest()
        number = int.from_bytes(digest, "little")
        vector[number % dimensions] += 1.0 if (number >> 32) & 1 else -1.0
    norm = math.sqrt(sum(value * value for value in vector))
    if norm == 0:
        return [1.0] + [0.0] * (dimensions - 1)
    return [value / norm for value in vector]


def _content(body: dict[str, Any], options: dict[str, Any]) -> tuple[str, str]:
    """The content to send and its finish reason, cut at the first stop sequence unless the
    reply ignores ``stop``."""
    content = "".join(options["chunks"]) if "chunks" in options else options.get("content", "")
    default_finish = "tool_calls" if options.get("tool_calls") else "stop"
    finish_reason = options.get("finish_reason", default_finish)
    stop = body.get("stop") or []
    stops = [stop] if isinstance(stop, str) else list(stop)
    if not options.get("ignore_stop"):
        cuts = [content.find(s) for s in stops if s and s in content]
        if cuts:
            content, finish_reason = content[: min(cuts)], "stop"
    return content, finish_reason


def _tool_calls(options: dict[str, Any]) -> list[dict[str, Any]]:
    """The reply's native tool calls in the API's shape."""
    calls = []
    for index, call in enumerate(options.get("tool_calls") or [], start=1):
        arguments = call.get("arguments", {})
        if not isinstance(arguments, str):
            arguments = json.dumps(arguments, ensure_ascii=False)
        calls.append(
            {
                "id": call.get("id", f"call_{index}"),
                "type": "function",
                "function": {"name": call["name"], "arguments": arguments},
            }
        )
    return calls


def _pieces(options: dict[str, Any], content: str) -> list[str]:
    """The streamed pieces of ``content``: the scripted chunks (cut with the content), else
    words with their trailing spaces."""
    if "chunks" not in options:
        return re.findall(r"^\s+|\S+\s*", content)
    pieces: list[str] = []
    left = len(content)
    for piece in options["chunks"]:
        if left <= 0:
            break
        pieces.append(piece[:left])
        left -= len(piece)
    return pieces


def _usage(body: dict[str, Any], options: dict[str, Any], content: str) -> dict[str, Any] | None:
    if "usage" in options:
        usage: dict[str, Any] | None = options["usage"]
        return usage
    prompt = sum(len(str(m.get("content", ""))) for m in body.get("messages", [])) // 4
    completion = max(1, len(content) // 4)
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }
