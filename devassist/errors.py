"""Domain errors that the API turns into the error envelope.

Services raise these; ``devassist.api`` maps them (and every other exception) to
``{"error": {"code", "message", "details"}, "request_id"}`` with the error's status.
"""

from __future__ import annotations

from http import HTTPStatus
from typing import Any


class ApiError(Exception):
    status: HTTPStatus = HTTPStatus.BAD_REQUEST
    code: str = "bad_request"

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        details: dict[str, Any] | None = None,
        status: int | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        if status is not None:
            self.status = HTTPStatus(status)
        self.details = details or {}


class BadRequest(ApiError):
    status = HTTPStatus.BAD_REQUEST
    code = "bad_request"


class NotFound(ApiError):
    status = HTTPStatus.NOT_FOUND
    code = "not_found"


class Forbidden(ApiError):
    status = HTTPStatus.FORBIDDEN
    code = "forbidden"


class Conflict(ApiError):
    status = HTTPStatus.CONFLICT
    code = "conflict"


class PayloadTooLarge(ApiError):
    status = HTTPStatus.REQUEST_ENTITY_TOO_LARGE
    code = "payload_too_large"
