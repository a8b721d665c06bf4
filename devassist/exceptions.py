"""The kinds of domain error every app's ``exceptions.py`` builds on.

Services raise domain errors: a stable ``code`` for programs, a ``message`` for people and
``details`` for both. They say what went wrong, not how HTTP spells it: ``devassist.api`` holds
the one mapping from these kinds to HTTP statuses and turns every error into the envelope
``{"error": {"code", "message", "details"}, "request_id"}``.
"""

from __future__ import annotations

from typing import Any


class DomainError(Exception):
    code: str = "error"

    def __init__(
        self, message: str, *, code: str | None = None, details: dict[str, Any] | None = None
    ) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        self.details = details or {}


class InvalidInput(DomainError):
    """The request cannot be served as written (a missing field, a path outside its root)."""

    code = "bad_request"


class InvalidValue(DomainError):
    """A value of the request fails validation, as a schema's validation error would."""

    code = "validation_error"


class NotFound(DomainError):
    code = "not_found"


class Forbidden(DomainError):
    code = "forbidden"


class Conflict(DomainError):
    """The request clashes with the state of what it names (a finished run, a taken id)."""

    code = "conflict"


class TooLarge(DomainError):
    code = "payload_too_large"


class Busy(DomainError):
    """No capacity right now; the same request may succeed later."""

    code = "busy"


class Unavailable(DomainError):
    """A service this one needs (the Docker engine, an embeddings model) is not there."""

    code = "unavailable"


class UpstreamFailed(DomainError):
    """A server this one called (the model endpoint) failed or answered nonsense."""

    code = "upstream_failed"


class UpstreamTimeout(DomainError):
    """A server this one called did not answer in time."""

    code = "upstream_timeout"


class OutOfTime(DomainError):
    """The work used up its budget (iterations, time) without finishing."""

    code = "out_of_time"


class Internal(DomainError):
    """A failure inside DevAssist (a tool that raised, a programming error)."""

    code = "internal_error"
