"""Running untrusted code: the safety scan, the sandbox, and the trace that records the call."""

from __future__ import annotations

import asyncio
import threading
import uuid
from dataclasses import dataclass
from functools import lru_cache, partial
from typing import Any

import structlog
from django.conf import settings

from sandbox.backends import get_sandbox
from sandbox.backends.base import ExecResult
from sandbox.exceptions import (
    DockerNotAvailable,
    SandboxCodeBlocked,
    SandboxCodeTooLarge,
    SandboxUnavailable,
)
from sandbox.scanner import DEFAULT_POLICY, ScanPolicy, ScanReport, scan
from sandbox.slots import SlotClaim, get_sandbox_slots, slot_owner
from traces.models import StepStatus, TraceMode, TraceStatus
from traces.store import StepCreate, get_trace_store

logger = structlog.get_logger(__name__)


@dataclass(frozen=True)
class Execution:
    result: ExecResult
    report: ScanReport
    trace_id: uuid.UUID


@lru_cache(maxsize=1)
def scan_policy() -> ScanPolicy:
    """The default policy with ``settings.SANDBOX_SCAN_POLICY`` applied (checked once)."""
    return DEFAULT_POLICY.with_overrides(settings.SANDBOX_SCAN_POLICY)


def code_size_check(code: str) -> None:
    """Refuse code over the scan policy's size limit (413) before anything else happens."""
    limit = scan_policy().max_code_bytes
    size = len(code.encode("utf-8", errors="surrogatepass"))
    if size > limit:
        raise SandboxCodeTooLarge(
            f"Code is {size:,} bytes; the sandbox takes at most {limit:,}.",
            details={"max_bytes": limit, "bytes": size},
        )


async def run_scanned(
    *, user: Any, code: str, timeout_s: float
) -> tuple[ScanReport, ExecResult | None]:
    """Scan, then run for ``user`` unless blocked: ``(report, None)`` for blocked code. Raises
    ``SandboxBusy`` (before scanning) when ``user`` holds all their sandbox slots, and
    ``SandboxUnavailable``. Cancelling the awaiting task stops the container too."""
    with get_sandbox_slots().claim(slot_owner(user)) as claim:
        return await _scan_and_run(claim, code=code, timeout_s=timeout_s)


async def _scan_and_run(
    claim: SlotClaim, *, code: str, timeout_s: float
) -> tuple[ScanReport, ExecResult | None]:
    """The scan, then the run in a thread; the container is the thread's, so a cancelled
    task tells it to stop through an event (the one place a thread event stands for asyncio
    cancellation)."""
    report = scan(code, scan_policy())
    if report.blocked:
        return report, None
    backend = get_sandbox()
    cancel = threading.Event()
    try:
        result = await claim.run(
            partial(_run, backend, code=code, timeout_s=timeout_s, cancel=cancel)
        )
    except asyncio.CancelledError:
        cancel.set()
        raise
    return report, result


def _run(backend: Any, *, code: str, timeout_s: float, cancel: threading.Event) -> ExecResult:
    backend.start()
    return backend.run(code=code, timeout_s=timeout_s, cancel=cancel)


async def code_execute(*, user: Any, code: str, timeout_s: float) -> Execution:
    """Run ``code`` for ``user`` through the scan and the sandbox, recorded as a ``call``
    trace (goal → action ``execute_code`` → result). Raises ``SandboxCodeTooLarge`` and
    ``SandboxBusy`` (``user`` holds all their sandbox slots) before anything is recorded, then
    ``SandboxCodeBlocked`` (with the report in ``details``) and ``DockerNotAvailable``, which
    the trace records too."""
    code_size_check(code)
    with get_sandbox_slots().claim(slot_owner(user)) as claim:
        return await _execute_recorded(claim, user=user, code=code, timeout_s=timeout_s)


async def _execute_recorded(
    claim: SlotClaim, *, user: Any, code: str, timeout_s: float
) -> Execution:
    store = get_trace_store()
    first_line = next((line for line in code.splitlines() if line.strip()), "")[:200]
    trace = await store.create_trace(
        user=user, task=f"execute_code: {first_line}", mode=TraceMode.CALL, agent_type="sandbox"
    )
    goal = StepCreate(step_type="goal", name="execute_code", status=StepStatus.RUNNING)
    action = StepCreate(
        step_type="action",
        parent_id=goal.id,
        name="execute_code",
        status=StepStatus.RUNNING,
        data={"tool_name": "execute_code", "arguments": {"code": code, "timeout_s": timeout_s}},
    )
    await store.add_steps(trace.id, [goal, action])
    try:
        report, result = await _scan_and_run(claim, code=code, timeout_s=timeout_s)
    except SandboxUnavailable as exc:
        await _finish(trace.id, goal, action, error=str(exc), data={"hint": exc.hint})
        raise DockerNotAvailable(
            str(exc), details={"hint": exc.hint, "trace_id": str(trace.id)}
        ) from exc
    except BaseException as exc:
        await asyncio.shield(
            _finish(trace.id, goal, action, error=f"{type(exc).__name__}: {exc}", data={})
        )
        raise
    if result is None:
        await _finish(trace.id, goal, action, error=report.text, data={"safety": report.to_dict()})
        raise SandboxCodeBlocked(
            report.text, details={**report.to_dict(), "trace_id": str(trace.id)}
        )
    failed = result.timed_out or result.oom_killed or result.cancelled or result.exit_code != 0
    await _finish(
        trace.id,
        goal,
        action,
        error=_failure(result) if failed else "",
        data={**result.to_dict(), "safety": report.to_dict()},
        duration_ms=result.duration_ms,
        trace_status=TraceStatus.CANCELLED if result.cancelled else TraceStatus.COMPLETED,
    )
    logger.info(
        "code_executed",
        trace_id=str(trace.id),
        exit_code=result.exit_code,
        timed_out=result.timed_out,
        duration_ms=result.duration_ms,
    )
    return Execution(result=result, report=report, trace_id=trace.id)


def _failure(result: ExecResult) -> str:
    if result.timed_out:
        return "timed out"
    if result.oom_killed:
        return "killed: out of memory"
    if result.cancelled:
        return "cancelled"
    return f"exit code {result.exit_code}"


async def _finish(
    trace_id: uuid.UUID,
    goal: StepCreate,
    action: StepCreate,
    *,
    error: str,
    data: dict[str, Any],
    duration_ms: int | None = None,
    trace_status: str | None = None,
) -> None:
    store = get_trace_store()
    status = StepStatus.FAILED if error else StepStatus.COMPLETED
    await store.add_step(
        trace_id,
        StepCreate(
            step_type="result",
            parent_id=action.id,
            name="execute_code",
            status=status,
            error=error,
            data=data,
            duration_ms=duration_ms,
        ),
    )
    changes: dict[str, Any] = {"status": status}
    if duration_ms is not None:
        changes["duration_ms"] = duration_ms
    await store.update_step(trace_id, action.id, changes)
    await store.update_step(trace_id, goal.id, {"status": status})
    final = trace_status or (TraceStatus.FAILED if error else TraceStatus.COMPLETED)
    await store.complete_trace(trace_id, status=final)
