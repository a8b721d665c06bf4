"""What the clients of OpenAI-compatible endpoints (chat completions, embeddings) share.

Retries are ours, not the SDK's (``max_retries=0`` there), so that what is retried, how often
and how long we wait is explicit: connection errors, timeouts, 429 and 5xx are retried at most
``max_retries`` times with exponential backoff and jitter (a small ``Retry-After`` wins); every
other failure is final at once. Failures become ``LLMUnavailable`` / ``LLMTimeout`` saying what
happened, with the status and the server's own message, never the API key.
"""

from __future__ import annotations

import email.utils
import random
import time
from collections.abc import Mapping
from http import HTTPStatus
from typing import Any, ClassVar
from urllib.parse import urlsplit, urlunsplit

import openai
import structlog

from agent.llm.base import LLMTimeout, LLMUnavailable

logger = structlog.get_logger(__name__)

DEFAULT_BASE_URL = "https://api.openai.com/v1"
#: A ``Retry-After`` up to this long is honoured; a longer one falls back to our own backoff.
MAX_RETRY_AFTER_S = 20.0
MAX_BACKOFF_S = 8.0


class OpenAIEndpoint:
    """Retry policy, error mapping and failure logs of a client of one endpoint.

    Subclasses set ``label`` (how messages name the endpoint), ``retry_event`` and
    ``failure_event`` (their log events) and ``status_hints`` (a hint per HTTP status, naming
    the settings to check), and call ``_endpoint_setup``.
    """

    label: ClassVar[str]
    retry_event: ClassVar[str]
    failure_event: ClassVar[str]
    status_hints: ClassVar[Mapping[int, str]] = {}

    model: str
    base_url: str
    timeout_s: float
    max_retries: int
    backoff_s: float
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
        backoff_s: float,
    ) -> None:
        self.base_url = (base_url or DEFAULT_BASE_URL).rstrip("/")
        self.model = model
        self.timeout_s = float(timeout_s)
        self.max_retries = max(0, int(max_retries))
        self.backoff_s = float(backoff_s)
        self._secret = api_key or ""
        self._display_url = display_url(self.base_url)

    def _retry_delay(self, exc: Exception, attempt: int) -> float | None:
        """Seconds to wait before the next attempt, or None when ``exc`` is final."""
        if attempt > self.max_retries:
            return None
        if isinstance(exc, openai.APIStatusError):
            status = exc.status_code
            if status != HTTPStatus.TOO_MANY_REQUESTS and status < 500:
                return None
            retry_after = retry_after_s(exc)
            if retry_after is not None and 0 <= retry_after <= MAX_RETRY_AFTER_S:
                return retry_after
        elif not isinstance(exc, openai.APIConnectionError):  # includes APITimeoutError
            return None
        backoff = min(MAX_BACKOFF_S, self.backoff_s * 2 ** (attempt - 1))
        return backoff / 2 + random.uniform(0, backoff / 2)  # noqa: S311 - jitter, not secrecy

    def _log_retry(self, exc: Exception, attempt: int, delay: float) -> None:
        logger.info(
            self.retry_event,
            model=self.model,
            attempt=attempt,
            delay_s=round(delay, 3),
            reason=reason(exc),
        )

    def _error(self, exc: Exception, attempts: int) -> LLMUnavailable | LLMTimeout:
        """The domain error for an SDK failure: what happened, the status and the server's own
        message, never the API key."""
        where = self._display_url
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
            # An error event inside a stream.
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
        self, error: LLMUnavailable | LLMTimeout, started: float, attempts: int
    ) -> LLMUnavailable | LLMTimeout:
        logger.warning(
            self.failure_event,
            model=self.model,
            code=error.code,
            status=error.details.get("status"),
            attempt=attempts,
            latency_ms=ms_since(started),
            error=error.message,
        )
        return error


def server_message(body: object) -> str:
    if isinstance(body, dict):
        message = body.get("message") or body.get("detail") or body.get("error")
        if isinstance(message, dict):
            message = message.get("message")
        return str(message) if message else ""
    # A proxy's HTML error page or a plain-text body: one line, short.
    return " ".join(str(body).split())[:500] if body else ""


def retry_after_s(exc: openai.APIStatusError) -> float | None:
    headers = exc.response.headers
    try:
        if "retry-after-ms" in headers:
            return float(headers["retry-after-ms"]) / 1000
        value = headers.get("retry-after")
        if value is None:
            return None
        try:
            return float(value)
        except ValueError:
            when = email.utils.parsedate_to_datetime(value)
            return when.timestamp() - time.time()
    except (TypeError, ValueError):
        return None


def reason(exc: Exception) -> str:
    if isinstance(exc, openai.APIStatusError):
        return f"status {exc.status_code}"
    return type(exc).__name__


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
