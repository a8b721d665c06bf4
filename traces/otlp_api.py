"""``POST /v1/traces``: OTLP/HTTP trace ingestion (protobuf or JSON, gzip).

A plain view, not part of the Ninja API: the protocol's bodies are protobuf as often as JSON
and its errors are ``google.rpc.Status`` messages, not the API's envelope. It authenticates
by an API token, as ``Authorization: Bearer <token>`` or ``x-api-key: <token>`` (what
``OTEL_EXPORTER_OTLP_HEADERS`` sends), parses the body (``traces.otlp``), stores the spans
(``traces.services.otlp_spans_ingest``) and answers in the request's encoding.
"""

from __future__ import annotations

from http import HTTPStatus
from typing import Any

import structlog
from asgiref.sync import sync_to_async
from django.contrib.auth.decorators import login_not_required
from django.core.exceptions import RequestDataTooBig
from django.db import DatabaseError
from django.http import HttpRequest, HttpResponse
from django.views.decorators.csrf import csrf_exempt

from devassist.tokens import api_token_authenticate
from traces.otlp import (
    JSON,
    PROTOBUF,
    Limits,
    OtlpError,
    decode_request,
    encoding_of,
    request_spans,
    status_body,
    success_body,
)
from traces.services import otlp_spans_ingest

logger = structlog.get_logger(__name__)


def _token(request: HttpRequest) -> str:
    authorization = request.headers.get("Authorization", "")
    scheme, _, value = authorization.partition(" ")
    if scheme.lower() == "bearer" and value.strip():
        return value.strip()
    return request.headers.get("X-Api-Key", "").strip()


def _user(request: HttpRequest) -> Any:
    """The active user of the request's API token; ``OtlpError`` (401) without one."""
    raw = _token(request)
    token = api_token_authenticate(raw=raw) if raw else None
    if token is None:
        raise OtlpError(
            HTTPStatus.UNAUTHORIZED,
            "Send a DevAssist API token: 'Authorization: Bearer <token>' or "
            "'x-api-key: <token>' (OTEL_EXPORTER_OTLP_HEADERS).",
        )
    return token.user


def _export(request: HttpRequest, body: bytes, encoding: str) -> HttpResponse:
    """Authenticate, decode and store one export request (a worker thread: the ORM)."""
    user = _user(request)
    limits = Limits.current()
    decoded = decode_request(
        body,
        encoding=encoding,
        content_encoding=request.headers.get("Content-Encoding", ""),
        max_bytes=limits.max_body_bytes,
    )
    outcome = otlp_spans_ingest(user=user, batch=request_spans(decoded, limits=limits))
    logger.info(
        "otlp_spans_ingested",
        accepted=outcome.accepted,
        rejected=outcome.rejected,
        user_id=user.pk,
    )
    if outcome.rejected and not outcome.accepted:
        status = HTTPStatus.FORBIDDEN if outcome.only_foreign else HTTPStatus.BAD_REQUEST
        raise OtlpError(status, outcome.message)
    return HttpResponse(
        success_body(rejected=outcome.rejected, message=outcome.message, encoding=encoding),
        content_type=encoding,
    )


def _answer(error: OtlpError, encoding: str) -> HttpResponse:
    response = HttpResponse(
        status_body(error, encoding=encoding), status=error.status, content_type=encoding
    )
    if error.status == HTTPStatus.UNAUTHORIZED:
        response["WWW-Authenticate"] = "Bearer"
    if error.status == HTTPStatus.METHOD_NOT_ALLOWED:
        response["Allow"] = "POST"
    return response


@csrf_exempt  # authenticated by a token header alone: no cookie, so no cross-site forgery
@login_not_required
async def otlp_traces(request: HttpRequest) -> HttpResponse:
    """Take an ``ExportTraceServiceRequest``. 200 with an ``ExportTraceServiceResponse``
    (``partial_success`` naming the rejected spans when some were); otherwise a
    ``google.rpc.Status``: 400 (undecodable, or every span rejected), 401, 403 (every span
    for other users' traces), 405, 413, 415, 503 (the database; retry)."""
    content_type = request.headers.get("Content-Type", "")
    answer_encoding = JSON if content_type.lower().startswith(JSON) else PROTOBUF
    try:
        if request.method != "POST":
            raise OtlpError(HTTPStatus.METHOD_NOT_ALLOWED, "Send the spans with POST.")
        encoding = encoding_of(content_type)
        try:
            body = request.body
        except RequestDataTooBig as exc:
            raise OtlpError(
                HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
                "The request body is larger than the server accepts (MAX_REQUEST_BYTES).",
            ) from exc
        return await sync_to_async(_export)(request, body, encoding)
    except OtlpError as error:
        return _answer(error, answer_encoding)
    except DatabaseError:
        logger.exception("otlp_ingest_failed")
        return _answer(
            OtlpError(HTTPStatus.SERVICE_UNAVAILABLE, "The trace store is unavailable; retry."),
            answer_encoding,
        )
