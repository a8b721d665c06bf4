"""OTLP/gRPC ingestion: the OTel Collector's ``TraceService`` and ``LogsService`` on a port of
their own (``manage.py otlp_grpc``, 4317 by default, as a Collector's).

For the senders whose default is gRPC: Python's zero-code ``opentelemetry-instrument``, .NET's
SDK, a Collector's ``otlp`` exporter. Each ``Export`` call is what a ``POST /v1/traces`` or
``POST /v1/logs`` is (``traces.otlp_api``): the same token (the ``authorization: Bearer`` or
``x-api-key`` metadata that ``OTEL_EXPORTER_OTLP_HEADERS`` sends), the same limits and the same
store write (``traces.services.otlp_export_ingest``); gRPC's own status codes where the HTTP
endpoint answers a ``google.rpc.Status`` (``UNAVAILABLE``, which exporters retry, when the
database is). gRPC inflates gzip requests itself and refuses a message over
``MAX_REQUEST_BYTES`` with ``RESOURCE_EXHAUSTED``.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import grpc
import structlog
from django.conf import settings
from django.db import DatabaseError, close_old_connections

from traces.otlp import (
    LOGS,
    METRICS,
    PROTOBUF,
    TRACES,
    Limits,
    OtlpError,
    Signal,
    decode_request,
    metrics_refused,
    success_response,
)
from traces.otlp_api import refused_whole, token_user
from traces.services import otlp_export_ingest

logger = structlog.get_logger(__name__)

#: gRPC's status codes by their numbers (``google.rpc.Code``, which ``OtlpError`` carries).
_STATUS_CODES = {code.value[0]: code for code in grpc.StatusCode}


def _token(context: grpc.ServicerContext) -> str:
    """The API token in the call's metadata (gRPC lowercases the keys)."""
    metadata = {
        key: value for key, value in context.invocation_metadata() if isinstance(value, str)
    }
    scheme, _, value = metadata.get("authorization", "").partition(" ")
    if scheme.lower() == "bearer" and value.strip():
        return value.strip()
    return metadata.get("x-api-key", "").strip()


def export(body: bytes, context: grpc.ServicerContext, signal: Signal) -> Any:
    """Authenticate, decode and store one ``Export`` call's request (its message's bytes:
    decoded here, as ``POST /v1/traces`` does, so a message that does not decode is
    ``INVALID_ARGUMENT`` with the reason, not gRPC's own ``INTERNAL``); its response (with
    ``partial_success`` naming refused items), or the call aborted with the status of
    ``OtlpError`` (``UNAUTHENTICATED``, ``INVALID_ARGUMENT``, ``PERMISSION_DENIED``,
    ``RESOURCE_EXHAUSTED``) or ``UNAVAILABLE``. Runs in a thread of the server's pool: its
    database connection is closed before and after when it is unusable or too old, as
    Django does around a request."""
    close_old_connections()
    try:
        user = token_user(_token(context))
        request = decode_request(
            body,
            encoding=PROTOBUF,
            content_encoding="",
            max_bytes=Limits.current().max_body_bytes,
            signal=signal,
        )
        if signal is METRICS:
            return metrics_refused(request)
        outcome = otlp_export_ingest(user=user, request=request, signal=signal)
        error = refused_whole(outcome)
        if error is not None:
            raise error
        return success_response(rejected=outcome.rejected, message=outcome.message, signal=signal)
    except OtlpError as error:
        context.abort(_STATUS_CODES.get(error.code, grpc.StatusCode.UNKNOWN), error.message)
    except DatabaseError:
        logger.exception("otlp_ingest_failed", items=signal.items, protocol="grpc")
        context.abort(grpc.StatusCode.UNAVAILABLE, "The trace store is unavailable; retry.")
    finally:
        close_old_connections()


def _export_service(name: str, signal: Signal) -> grpc.GenericRpcHandler:
    """The service ``name``'s ``Export`` method, given its request's bytes (``export``)."""

    def call(body: bytes, context: grpc.ServicerContext) -> Any:
        return export(body, context, signal)

    handler = grpc.unary_unary_rpc_method_handler(
        call, response_serializer=lambda response: response.SerializeToString()
    )
    return grpc.method_handlers_generic_handler(name, {"Export": handler})


def otlp_grpc_server(address: str, *, workers: int = 4) -> tuple[grpc.Server, int]:
    """A gRPC server of both services bound to ``address`` (``host:port``; port 0 takes a
    free one), not started, and its port. ``workers`` calls are served at once (each holds a
    database connection while it runs)."""
    server = grpc.server(
        ThreadPoolExecutor(max_workers=workers, thread_name_prefix="otlp-grpc"),
        options=[("grpc.max_receive_message_length", settings.DATA_UPLOAD_MAX_MEMORY_SIZE)],
    )
    server.add_generic_rpc_handlers(
        (
            _export_service("opentelemetry.proto.collector.trace.v1.TraceService", TRACES),
            _export_service("opentelemetry.proto.collector.logs.v1.LogsService", LOGS),
            # Taken to be refused, every data point (``traces.otlp.metrics_refused``).
            _export_service("opentelemetry.proto.collector.metrics.v1.MetricsService", METRICS),
        )
    )
    port = server.add_insecure_port(address)
    if not port:
        raise OSError(f"Cannot listen on {address}.")
    return server, port
