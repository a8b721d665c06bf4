"""``POST /v1/traces`` and ``POST /v1/logs``: OTLP/HTTP ingestion (protobuf or JSON, gzip);
``POST /v1/metrics`` takes metrics to refuse them (DevAssist keeps none), and any other path
under ``/v1/`` says where OTLP goes.

Plain views, not part of the Ninja API: the protocol's bodies are protobuf as often as JSON
and its errors are ``google.rpc.Status`` messages, not the API's envelope. They authenticate
by an API token, as ``Authorization: Bearer <token>`` or ``x-api-key: <token>`` (what
``OTEL_EXPORTER_OTLP_HEADERS`` sends), parse the body (``traces.otlp``, ``traces.otlp_logs``),
store the spans or log records (``traces.services``) and answer in the request's encoding.
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
    LOGS,
    METRICS,
    TRACES,
    Limits,
    OtlpError,
    Signal,
    decode_request,
    encode,
    encoding_of,
    metrics_refused,
    status_body,
    success_body,
)
from traces.services import IngestOutcome, otlp_export_ingest

logger = structlog.get_logger(__name__)


def _token(request: HttpRequest) -> str:
    authorization = request.headers.get("Authorization", "")
    scheme, _, value = authorization.partition(" ")
    if scheme.lower() == "bearer" and value.strip():
        return value.strip()
    return request.headers.get("X-Api-Key", "").strip()


def token_user(raw: str) -> Any:
    """The active user of the API token ``raw``; ``OtlpError`` (401) without one."""
    token = api_token_authenticate(raw=raw) if raw else None
    if token is None:
        raise OtlpError(
            HTTPStatus.UNAUTHORIZED,
            "Send a DevAssist API token: 'Authorization: Bearer <token>' or "
            "'x-api-key: <token>' (OTEL_EXPORTER_OTLP_HEADERS).",
        )
    return token.user


def refused_whole(outcome: IngestOutcome) -> OtlpError | None:
    """The error of a request whose every item was refused (403 when each was for someone
    else's trace), or None."""
    if outcome.rejected and not outcome.accepted:
        status = HTTPStatus.FORBIDDEN if outcome.only_foreign else HTTPStatus.BAD_REQUEST
        return OtlpError(status, outcome.message)
    return None


def _export(request: HttpRequest, signal: Signal) -> HttpResponse:
    """Authenticate, decode and store one export request (a worker thread: the ORM). The token
    is checked first: a client without a good one learns that, whatever its body."""
    user = token_user(_token(request))
    encoding = encoding_of(request.headers.get("Content-Type", ""))
    try:
        body = request.body
    except RequestDataTooBig as exc:
        raise OtlpError(
            HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
            "The request body is larger than the server accepts (MAX_REQUEST_BYTES).",
        ) from exc
    decoded = decode_request(
        body,
        encoding=encoding,
        content_encoding=request.headers.get("Content-Encoding", ""),
        max_bytes=Limits.current().max_body_bytes,
        signal=signal,
    )
    if signal is METRICS:
        return HttpResponse(encode(metrics_refused(decoded), encoding), content_type=encoding)
    outcome = otlp_export_ingest(user=user, request=decoded, signal=signal)
    error = refused_whole(outcome)
    if error is not None:
        raise error
    return HttpResponse(
        success_body(
            rejected=outcome.rejected, message=outcome.message, encoding=encoding, signal=signal
        ),
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


async def _receive(request: HttpRequest, signal: Signal) -> HttpResponse:
    answer_encoding = _error_encoding(request)
    try:
        if request.method != "POST":
            raise OtlpError(HTTPStatus.METHOD_NOT_ALLOWED, f"Send the {signal.items} with POST.")
        return await sync_to_async(_export)(request, signal)
    except OtlpError as error:
        return _answer(error, answer_encoding)
    except DatabaseError:
        logger.exception("otlp_ingest_failed", items=signal.items)
        return _answer(
            OtlpError(HTTPStatus.SERVICE_UNAVAILABLE, "The trace store is unavailable; retry."),
            answer_encoding,
        )


@csrf_exempt  # authenticated by a token header alone: no cookie, so no cross-site forgery
@login_not_required
async def otlp_traces(request: HttpRequest) -> HttpResponse:
    """Take an ``ExportTraceServiceRequest``. 200 with an ``ExportTraceServiceResponse``
    (``partial_success`` naming the rejected spans when some were); otherwise a
    ``google.rpc.Status``: 400 (undecodable, or every span rejected), 401, 403 (every span
    for other users' traces), 405, 413, 415, 503 (the database; retry)."""
    return await _receive(request, TRACES)


@csrf_exempt
@login_not_required
async def otlp_logs(request: HttpRequest) -> HttpResponse:
    """Take an ``ExportLogsServiceRequest``: each log record joins the events of its span's
    step. Answers as ``otlp_traces`` does, with an ``ExportLogsServiceResponse``
    (``rejected_log_records``: those that name no span among them)."""
    return await _receive(request, LOGS)


@csrf_exempt
@login_not_required
async def otlp_metrics(request: HttpRequest) -> HttpResponse:
    """Take an ``ExportMetricsServiceRequest`` to refuse it (``metrics_refused``): 200 with
    every data point rejected and how to stop sending them; the errors of ``otlp_traces``
    (a token, a body that decodes)."""
    return await _receive(request, METRICS)


#: The longest a path is quoted back (``otlp_elsewhere``).
PATH_QUOTED_CHARS = 200


@csrf_exempt
@login_not_required
async def otlp_elsewhere(request: HttpRequest, rest: str) -> HttpResponse:
    """404 with a ``google.rpc.Status`` that says where OTLP goes, for any other path under
    ``/v1/``: most often a base URL variable given the signal's path too, which the exporter
    then adds again (``/v1/traces/v1/traces``). It was Django's 404 page (20 KB of HTML with
    ``DEBUG``)."""
    path = request.path[:PATH_QUOTED_CHARS]
    message = (
        f"No OTLP endpoint at {path}: DevAssist takes spans at /v1/traces and log records at "
        "/v1/logs. OTEL_EXPORTER_OTLP_ENDPOINT is the server's base URL (http://host:port), "
        "to which the exporter adds /v1/traces itself; a full URL goes in "
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT."
    )
    return _answer(OtlpError(HTTPStatus.NOT_FOUND, message), _error_encoding(request))


def _error_encoding(request: HttpRequest) -> str:
    """The encoding an error is answered in: the request's (``encoding_of``), else JSON, which
    someone trying the endpoint with curl can read (a 415 for ``text/plain`` was protobuf)."""
    try:
        return encoding_of(request.headers.get("Content-Type", ""))
    except OtlpError:
        return JSON
