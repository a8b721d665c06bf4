"""Sandbox REST API: run Python in an isolated container."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest
from ninja import Router

from devassist.auth import api_user
from sandbox.schemas import ExecuteIn, ExecuteOut
from sandbox.services import code_execute
from traces.artifacts import artifact_url

router = Router(tags=["sandbox"])


@router.post("/execute", response=ExecuteOut, url_name="sandbox_execute")
async def execute(request: HttpRequest, payload: ExecuteIn) -> dict[str, Any]:
    """Scan, then run ``code`` in a fresh container (no state is kept between calls); the
    files it writes under ``/tmp/outputs`` and its matplotlib figures come back as
    ``artifacts``, with URLs for the caller (and staff). A timeout is a result
    (``timed_out: true``); blocked code is 400 ``sandbox_code_blocked`` with the safety report
    in ``details``; a user who already has ``SANDBOX_USER_SLOTS`` executions running is 429
    ``sandbox_busy``; no Docker engine is 503 ``docker_not_available``."""
    execution = await code_execute(
        user=api_user(request), code=payload.code, timeout_s=payload.timeout_s
    )
    return {
        **execution.result.to_dict(),
        "safety": execution.report.to_dict(),
        "trace_id": execution.trace_id,
        "artifacts": [
            {**artifact.as_dict(), "url": artifact_url(execution.trace_id, artifact.id)}
            for artifact in execution.artifacts
        ],
    }
