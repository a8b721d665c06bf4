"""What the clients of OpenAI-compatible endpoints (chat completions, embeddings) share.

Retries are the SDK's own (``max_retries`` on the client): connection errors, timeouts, 408,
409, 429 and 5xx are retried with exponential backoff and jitter (0.5 s doubling up to 8 s, or
the server's ``Retry-After``), every other failure is final at once. What is left here is the
error mapping: SDK failures become ``LLMUnavailable`` / ``LLMTimeout`` saying what happened,
with the status, the server's own message and the number of attempts, never the API key.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from http import HTTPStatus
from typing import Any, ClassVar
from urllib.parse import urlsplit, urlunsplit

import openai
import structlog

from agent.exceptions import LLMTimeout, LLMUnavailable

logger = structlog.get_logger(__name__)

DEFAULT_BASE_URL = "https://api.openai.com/v1"
#: The header the SDK sends with every request: how many retries came before it.
RETRY_COUNT_HEADER = "x-stainless-retry-count"


class OpenAIEndpoint:
    """Error mapping and failure logs of a client of one endpoint.

    Subclasses set ``label`` (how messages name the endpoint), ``failure_event`` (their log
    event) and ``status_hints`` (a hint per HTTP status, naming the settings to check), and
    call ``_endpoint_setup``.
    """

    label: ClassVar[str]
    failure_event: ClassVar[str]
    status_hints: ClassVar[Mapping[int, str]] = {}

    model: str
    base_url: str
    timeout_s: float
    max_retries: int
    _secret: str
    _display_url: str

    def _endpoint_setup(
        self,
        *,
        base_url: str | None,
        api_key: str | None,
        model: str,
        timeout_s: float,
        max_retries: int,
    ) -> None:
        self.base_url = (base_url or DEFAULT_BASE_URL).rstrip("/")
        self.model = model
        self.timeout_s = float(timeout_s)
        self.max_retries = max(0, int(max_retries))
        self._secret = api_key or ""
        self._display_url = display_url(self.base_url)

    def _error(self, exc: Exception) -> LLMUnavailable | LLMTimeout:
        """The domain error for an SDK failure (raised once the SDK's retries are used up):
        what happened, the status and the server's own message, never the API key."""
        where = self._display_url
        attempts = attempts_of(exc)
        tried = f" (after {attempts} attempts)" if attempts > 1 else ""
        if isinstance(exc, openai.APITimeoutError):
            return LLMTimeout(
                f"The {self.label} at {where} did not answer within {self.timeout_s:g} s{tried}.",
                details=self._details(None, attempts),
            )
        if isinstance(exc, openai.APIConnectionError):
            cause = exc.__cause__ or exc.__context__
            why = f": {self._redact(str(cause))}" if cause and str(cause) else "."
            return LLMUnavailable(
                f"Could not reach the {self.label} at {where}{tried}{why}",
                details=self._details(None, attempts),
            )
        if isinstance(exc, openai.APIStatusError):
            status = exc.status_code
            try:
                phrase = f"{status} {HTTPStatus(status).phrase}"
            except ValueError:
                phrase = str(status)
            message = f"The {self.label} at {where} answered {phrase}{tried}"
            said = server_message(exc.body)
            if said:
                message += f": {self._redact(said)}"
            hint = self.status_hints.get(status)
            if hint:
                message += f" ({hint})"
            return LLMUnavailable(message, details=self._details(status, attempts))
        if isinstance(exc, openai.APIError):
            # An error event inside a stream, or an answer that does not parse.
            return LLMUnavailable(
                f"The {self.label} at {where} reported an error: {self._redact(exc.message)}",
                details=self._details(None, attempts),
            )
        return LLMUnavailable(
            f"The {self.label} at {where} sent a malformed answer: "
            f"{self._redact(str(exc)) or type(exc).__name__}",
            details=self._details(None, attempts),
        )

    def _details(self, status: int | None, attempts: int) -> dict[str, Any]:
        return {"status": status, "base_url": self._display_url, "attempts": attempts}

    def _redact(self, text: str) -> str:
        if len(self._secret) >= 4:
            text = text.replace(self._secret, "[redacted]")
        return text[:1000]

    def _logged(
        self, error: LLMUnavailable | LLMTimeout, started: float
    ) -> LLMUnavailable | LLMTimeout:
        logger.warning(
            self.failure_event,
            model=self.model,
            code=error.code,
            status=error.details.get("status"),
            attempt=error.details.get("attempts"),
            latency_ms=ms_since(started),
            error=error.message,
        )
        return error


def attempts_of(exc: Exception) -> int:
    """How many requests the SDK sent for the call that ended in ``exc``: its last request
    says how many retries came before it (1 when the failure carries no request)."""
    request = getattr(exc, "request", None)
    try:
        return int(request.headers.get(RETRY_COUNT_HEADER, 0)) + 1  # type: ignore[union-attr]
    except (AttributeError, TypeError, ValueError):
        return 1


def server_message(body: object) -> str:
    if isinstance(body, dict):
        message = body.get("message") or body.get("detail") or body.get("error")
        if isinstance(message, dict):
            message = message.get("message")
        return str(message) if message else ""
    # A proxy's HTML error page or a plain-text body: one line, short.
    return " ".join(str(body).split())[:500] if body else ""


def display_url(url: str) -> str:
    """``url`` without credentials or query, safe to show and log."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    if parts.port:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path, "", ""))


def ms_since(started: float) -> int:
    return int((time.monotonic() - started) * 1000)
