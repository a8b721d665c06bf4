"""The error envelope every API error uses: ``{"error": {code, message, details}, request_id}``."""

from __future__ import annotations

from http import HTTPStatus
from typing import Any

from django.http import HttpRequest, HttpResponse, JsonResponse

_CODES_BY_STATUS = {
    HTTPStatus.BAD_REQUEST: "bad_request",
    HTTPStatus.UNAUTHORIZED: "not_authenticated",
    HTTPStatus.FORBIDDEN: "forbidden",
    HTTPStatus.NOT_FOUND: "not_found",
    HTTPStatus.METHOD_NOT_ALLOWED: "method_not_allowed",
    HTTPStatus.CONFLICT: "conflict",
    HTTPStatus.REQUEST_ENTITY_TOO_LARGE: "payload_too_large",
    HTTPStatus.UNPROCESSABLE_ENTITY: "validation_error",
    HTTPStatus.TOO_MANY_REQUESTS: "rate_limited",
    HTTPStatus.INTERNAL_SERVER_ERROR: "internal_error",
}


def code_for_status(status: int) -> str:
    try:
        return _CODES_BY_STATUS.get(HTTPStatus(status), "error")
    except ValueError:
        return "error"


def error_body(
    request: HttpRequest, *, code: str, message: str, details: dict[str, Any] | None = None
) -> dict[str, Any]:
    return {
        "error": {"code": code, "message": message, "details": details or {}},
        "request_id": getattr(request, "request_id", None),
    }


def error_response(
    request: HttpRequest,
    *,
    status: int,
    code: str,
    message: str,
    details: dict[str, Any] | None = None,
) -> HttpResponse:
    return JsonResponse(
        error_body(request, code=code, message=message, details=details),
        status=status,
        json_dumps_params={"ensure_ascii": False},
    )


#: Where the API lives: answers are JSON, errors the envelope, and authentication is the API's
#: own (session with CSRF, or a bearer token) instead of the login page.
API_PREFIXES = ("/api/", "/agent", "/chat", "/admin/agent-traces")


def is_api_path(request: HttpRequest) -> bool:
    path = request.path_info
    return any(
        path.startswith(prefix)
        if prefix.endswith("/")
        else path == prefix or path.startswith(prefix + "/")
        for prefix in API_PREFIXES
    )


def enveloped(request: HttpRequest, response: HttpResponse) -> HttpResponse:
    """An API error response that something other than our handlers produced (Django's or
    django-ninja's plain-text 405, a CSRF failure page) rewritten into the envelope."""
    if (
        not is_api_path(request)
        or response.status_code < 400
        or getattr(response, "streaming", False)
        or response.get("Content-Type", "").startswith("application/json")
    ):
        return response
    status = response.status_code
    message = HTTPStatus(status).phrase if status in HTTPStatus._value2member_map_ else "Error"
    replacement = error_response(
        request, status=status, code=code_for_status(status), message=f"{message}."
    )
    if response.has_header("Allow"):
        replacement["Allow"] = response["Allow"]
    return replacement
