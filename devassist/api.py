"""The one NinjaAPI: routers by app, authentication, and the error envelope for every failure."""

from __future__ import annotations

from http import HTTPStatus
from typing import Any

import structlog
from django.contrib.auth.decorators import login_required
from django.core.exceptions import (
    BadRequest,
    PermissionDenied,
    RequestDataTooBig,
    SuspiciousOperation,
)
from django.http import Http404, HttpRequest, HttpResponse
from django.http.multipartparser import MultiPartParserError
from ninja import NinjaAPI
from ninja.errors import AuthenticationError, HttpError, ValidationError

from devassist.auth import InvalidCredentials, api_auth
from devassist.envelope import code_for_status, error_response
from devassist.exceptions import (
    Busy,
    Conflict,
    DomainError,
    Forbidden,
    Internal,
    InvalidInput,
    InvalidValue,
    NotFound,
    OutOfTime,
    TooLarge,
    Unavailable,
    UpstreamFailed,
    UpstreamTimeout,
)
from devassist.parser import StorableParser
from devassist.responses import OrjsonRenderer
from devassist.storable import storable_text

logger = structlog.get_logger(__name__)


api = NinjaAPI(
    title="DevAssist API",
    version="1",
    urls_namespace="api",
    auth=api_auth,
    renderer=OrjsonRenderer(),
    parser=StorableParser(),
    docs_url="/api/docs",
    openapi_url="/api/openapi.json",
    # The docs and the OpenAPI schema are pages: anonymous visitors go to the login page.
    docs_decorator=login_required,
)


def _validation_details(errors: list[dict[str, Any]]) -> dict[str, Any]:
    cleaned = []
    for err in errors:
        # A location can hold a key of the input, which may not even be valid Unicode.
        location = [storable_text(str(part)) for part in err.get("loc", ())]
        message = storable_text(str(err.get("msg", "")))
        cleaned.append({"loc": location, "msg": message, "type": err.get("type", "")})
    return {"errors": cleaned}


#: The one mapping from the kinds of domain error (``devassist.exceptions``) to HTTP.
HTTP_STATUS_OF: dict[type[DomainError], HTTPStatus] = {
    InvalidInput: HTTPStatus.BAD_REQUEST,
    Forbidden: HTTPStatus.FORBIDDEN,
    NotFound: HTTPStatus.NOT_FOUND,
    OutOfTime: HTTPStatus.REQUEST_TIMEOUT,
    Conflict: HTTPStatus.CONFLICT,
    TooLarge: HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
    InvalidValue: HTTPStatus.UNPROCESSABLE_ENTITY,
    Busy: HTTPStatus.TOO_MANY_REQUESTS,
    Internal: HTTPStatus.INTERNAL_SERVER_ERROR,
    UpstreamFailed: HTTPStatus.BAD_GATEWAY,
    Unavailable: HTTPStatus.SERVICE_UNAVAILABLE,
    UpstreamTimeout: HTTPStatus.GATEWAY_TIMEOUT,
}


def http_status(error: DomainError) -> HTTPStatus:
    """The HTTP status of ``error``: that of the first kind in its class's MRO (an error that
    is two kinds at once, such as ``EmbeddingsTimeout``, takes the one it names first)."""
    for kind in type(error).__mro__:
        status = HTTP_STATUS_OF.get(kind)
        if status is not None:
            return status
    return HTTPStatus.INTERNAL_SERVER_ERROR


@api.exception_handler(DomainError)
def _domain_error(request: HttpRequest, exc: DomainError) -> HttpResponse:
    return error_response(
        request, status=http_status(exc), code=exc.code, message=exc.message, details=exc.details
    )


@api.exception_handler(ValidationError)
def _validation_error(request: HttpRequest, exc: ValidationError) -> HttpResponse:
    details = _validation_details(list(exc.errors))
    first = details["errors"][0] if details["errors"] else None
    message = "Invalid request"
    if first:
        message = f"Invalid request: {'.'.join(first['loc'])}: {first['msg']}"
    return error_response(
        request, status=422, code="validation_error", message=message, details=details
    )


@api.exception_handler(AuthenticationError)
def _authentication_error(request: HttpRequest, exc: AuthenticationError) -> HttpResponse:
    message = "Authentication required: log in or send 'Authorization: Bearer <token>'."
    if isinstance(exc, InvalidCredentials):
        message = exc.message
    response = error_response(request, status=401, code="not_authenticated", message=message)
    response["WWW-Authenticate"] = "Bearer"
    return response


@api.exception_handler(HttpError)
def _http_error(request: HttpRequest, exc: HttpError) -> HttpResponse:
    if isinstance(exc.__cause__, ValidationError):
        # The parser refused a value in the body (``StorableParser``).
        return _validation_error(request, exc.__cause__)
    code = code_for_status(exc.status_code)
    return error_response(request, status=exc.status_code, code=code, message=exc.message)


@api.exception_handler(Http404)
def _not_found(request: HttpRequest, exc: Http404) -> HttpResponse:
    return error_response(request, status=404, code="not_found", message="Not found.")


@api.exception_handler(PermissionDenied)
def _permission_denied(request: HttpRequest, exc: PermissionDenied) -> HttpResponse:
    return error_response(request, status=403, code="forbidden", message="Permission denied.")


@api.exception_handler(RequestDataTooBig)
def _too_big(request: HttpRequest, exc: RequestDataTooBig) -> HttpResponse:
    return error_response(
        request,
        status=413,
        code="payload_too_large",
        message="Request body is larger than the server accepts.",
    )


@api.exception_handler(MultiPartParserError)
def _bad_multipart(request: HttpRequest, exc: MultiPartParserError) -> HttpResponse:
    return error_response(
        request, status=400, code="invalid_multipart", message=f"Malformed multipart body: {exc}"
    )


@api.exception_handler(SuspiciousOperation)
@api.exception_handler(BadRequest)
def _bad_request(request: HttpRequest, exc: Exception) -> HttpResponse:
    # Django's own refusals of a request (too many fields or files, a malformed body part);
    # their text is written for people.
    return error_response(
        request, status=400, code="bad_request", message=str(exc) or "Bad request."
    )


@api.exception_handler(Exception)
def _unhandled(request: HttpRequest, exc: Exception) -> HttpResponse:
    logger.exception("api_request_failed", path=request.path, method=request.method)
    return error_response(
        request, status=500, code="internal_error", message="Internal server error."
    )


api.add_router("/api/tokens", "devassist.tokens_api.router")
api.add_router("/api/traces", "traces.api.router")
api.add_router("/api/sandbox", "sandbox.api.router")
api.add_router("/agent", "chat.api.agent_router")
api.add_router("/api/runs", "agent.api.runs_router")
api.add_router("/admin/agent-traces", "agent.api.staff_router")
api.add_router("/api/collections", "agent.knowledge.api.router")
api.add_router("/chat", "chat.api.router")
api.add_router("/api/conversations", "chat.api.debug_router")
