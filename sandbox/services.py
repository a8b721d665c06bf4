"""Running untrusted code: the safety scan, the sandbox (one container per execution, or one
per run: ``CodeSession``), the files the code writes (stored as the trace's artifacts), and the
trace that records a call of ``/api/sandbox/execute``."""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from functools import lru_cache, partial
from typing import Any, TypeVar

import structlog
from asgiref.sync import sync_to_async
from django.conf import settings

from sandbox.backends import get_sandbox
from sandbox.backends.base import ExecResult, SandboxSession, SkippedFile
from sandbox.exceptions import (
    DockerNotAvailable,
    SandboxCodeBlocked,
    SandboxCodeTooLarge,
    SandboxUnavailable,
)
from sandbox.files import InputFile
from sandbox.output import OutputSink
from sandbox.scanner import DEFAULT_POLICY, ScanPolicy, ScanReport, scan
from sandbox.slots import SlotClaim, get_sandbox_slots, slot_owner
from traces.artifacts import StoredArtifact, store_files
from traces.models import StepStatus, TraceMode, TraceStatus
from traces.store import StepCreate, get_trace_store

logger = structlog.get_logger(__name__)

T = TypeVar("T")

#: Receives a running program's output: ``(stream, text)``, ``stream`` ``stdout`` or ``stderr``.
OutputCallback = Callable[[str, str], Awaitable[None]]


@dataclass(frozen=True)
class CodeRun:
    """One execution through the scan: ``result`` None when the scan blocked the code;
    ``artifacts``, the output files stored for the trace (the result's ``files`` are then
    empty, and files the storage refused are among its ``skipped_files``)."""

    report: ScanReport
    result: ExecResult | None
    artifacts: tuple[StoredArtifact, ...] = ()


@dataclass(frozen=True)
class Execution:
    result: ExecResult
    report: ScanReport
    trace_id: uuid.UUID
    artifacts: tuple[StoredArtifact, ...] = ()


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


class CodeSession:
    """The sandbox of one run: with ``SANDBOX_STATE=run`` (``state``) its executions share
    one interpreter (variables, imports and files persist), in a container labelled with
    ``owner`` (the run's id: ``run_containers_remove`` finds it after a crash), started at
    the first execution and removed by ``close``; with ``call`` each execution starts from
    nothing. ``inputs`` are under ``/tmp/inputs`` for every execution; the files executions
    write are stored as artifacts of ``trace_id``. ``close`` must be awaited when the run
    ends, however it ends."""

    def __init__(
        self,
        *,
        owner: str,
        trace_id: uuid.UUID | None = None,
        inputs: tuple[InputFile, ...] = (),
        state: str | None = None,
    ) -> None:
        self.owner = owner
        self.trace_id = trace_id
        self.inputs = inputs
        self.state = state or settings.SANDBOX_STATE
        self._session: SandboxSession | None = None
        self._closed = False
        self._lock = threading.Lock()

    def run(
        self,
        *,
        code: str,
        timeout_s: float,
        cancel: threading.Event,
        on_output: OutputSink | None = None,
    ) -> ExecResult:
        """One execution, on a sandbox thread."""
        backend = get_sandbox()
        backend.start()
        if self.state != "run":
            return backend.run(
                code=code,
                timeout_s=timeout_s,
                cancel=cancel,
                on_output=on_output,
                inputs=self.inputs,
            )
        with self._lock:
            if self._closed:
                raise SandboxUnavailable("The run's sandbox is closed: the run has ended.")
            if self._session is None:
                self._session = backend.session(owner=self.owner, inputs=self.inputs)
            session = self._session
        return session.run(code=code, timeout_s=timeout_s, cancel=cancel, on_output=on_output)

    async def close(self) -> None:
        """Remove the session's container (even while an execution runs in it); idempotent,
        and never raises (a container it could not remove expires, and the reaper gets it)."""
        with self._lock:
            self._closed = True
            session, self._session = self._session, None
        if session is None:
            return
        try:
            await sync_to_async(session.close, thread_sensitive=False)()
        except Exception:
            logger.warning("sandbox_session_close_failed", owner=self.owner, exc_info=True)


def run_containers_remove(*, owner: str) -> int:
    """Remove the sandbox containers of ``owner``'s session (a run whose worker died), from
    any process; how many there were. Raises ``SandboxUnavailable``."""
    return get_sandbox().remove_owned(owner)


async def run_scanned(
    *,
    user: Any,
    code: str,
    timeout_s: float,
    on_output: OutputCallback | None = None,
    session: CodeSession | None = None,
) -> CodeRun:
    """Scan, then run for ``user`` unless blocked (in ``session`` when given, else in a
    fresh container): the result is None for blocked code. Raises ``SandboxBusy`` (before
    scanning) when ``user`` holds all their sandbox slots, and ``SandboxUnavailable``.
    Cancelling the awaiting task stops the container too.

    ``on_output`` is awaited in the caller's task with what the program prints while it runs
    (``sandbox.output.LiveOutput``: a few pieces a second, at most the output limit per
    stream, then a marker), one piece at a time and in order, every piece before this returns;
    pieces that arrive while it is busy are joined. If it raises, the error is logged and the
    rest of the output is not passed on; the result does not change."""
    if session is None:
        session = CodeSession(owner="", state="call")
    with get_sandbox_slots().claim(slot_owner(user)) as claim:
        return await _scan_and_run(
            claim, code=code, timeout_s=timeout_s, on_output=on_output, session=session
        )


async def _scan_and_run(
    claim: SlotClaim,
    *,
    code: str,
    timeout_s: float,
    session: CodeSession,
    on_output: OutputCallback | None = None,
) -> CodeRun:
    """The scan, then the run in ``session`` in a thread; the container is the thread's, so
    a cancelled task tells it to stop through an event (the one place a thread event stands
    for asyncio cancellation). The output files are stored for the session's trace (none:
    not stored) on that thread too."""
    report = scan(code, scan_policy())
    if report.blocked:
        return CodeRun(report=report, result=None)
    cancel = threading.Event()
    job = partial(_run_and_store, session, code=code, timeout_s=timeout_s, cancel=cancel)
    try:
        if on_output is None:
            result, artifacts = await claim.run(job)
        else:
            relay = _OutputRelay(on_output)
            result, artifacts = await relay.around(claim.run(partial(job, on_output=relay.put)))
    except asyncio.CancelledError:
        cancel.set()
        raise
    return CodeRun(report=report, result=result, artifacts=artifacts)


def _run_and_store(
    session: CodeSession,
    *,
    code: str,
    timeout_s: float,
    cancel: threading.Event,
    on_output: OutputSink | None = None,
) -> tuple[ExecResult, tuple[StoredArtifact, ...]]:
    result = session.run(code=code, timeout_s=timeout_s, cancel=cancel, on_output=on_output)
    if session.trace_id is None or not result.files:
        return result, ()
    files = ((f.name, f.data) for f in result.files)
    stored, failed = store_files(files, trace_id=session.trace_id)
    refused = tuple(SkippedFile(name=f.name, reason=f.reason) for f in failed)
    return replace(result, files=(), skipped_files=result.skipped_files + refused), tuple(stored)


class _OutputRelay:
    """Brings a sandbox thread's output pieces to the task that awaits the execution."""

    def __init__(self, on_output: OutputCallback) -> None:
        self._on_output: OutputCallback | None = on_output
        self._loop = asyncio.get_running_loop()
        self._pieces: asyncio.Queue[tuple[str, str] | None] = asyncio.Queue()

    def put(self, stream: str, text: str) -> None:
        """A piece, from the sandbox thread."""
        self._loop.call_soon_threadsafe(self._pieces.put_nowait, (stream, text))

    async def around(self, execution: Awaitable[T]) -> T:
        """Await ``execution`` while passing its pieces on; every piece the thread put before
        it ended is passed on before this returns (they were queued before its end was)."""
        job = asyncio.ensure_future(execution)
        job.add_done_callback(lambda _: self._pieces.put_nowait(None))
        try:
            ended = False
            while not ended:
                batch = [await self._pieces.get()]
                while not self._pieces.empty():
                    batch.append(self._pieces.get_nowait())
                ended = batch[-1] is None
                joined: dict[str, str] = {}
                for piece in batch:
                    if piece is not None:
                        joined[piece[0]] = joined.get(piece[0], "") + piece[1]
                for stream, text in joined.items():
                    await self._pass_on(stream, text)
            return await job
        finally:
            if not job.done():
                job.cancel()

    async def _pass_on(self, stream: str, text: str) -> None:
        if self._on_output is None:
            return
        try:
            await self._on_output(stream, text)
        except Exception:
            logger.exception("sandbox_output_relay_failed")
            self._on_output = None


async def code_execute(*, user: Any, code: str, timeout_s: float) -> Execution:
    """Run ``code`` for ``user`` through the scan and a fresh container, recorded as a
    ``call`` trace (goal → action ``execute_code`` → result, whose data lists the files the
    code wrote, stored as the trace's artifacts: readable by ``user`` and staff). Raises
    ``SandboxCodeTooLarge`` and ``SandboxBusy`` (``user`` holds all their sandbox slots)
    before anything is recorded, then ``SandboxCodeBlocked`` (with the report in ``details``)
    and ``DockerNotAvailable``, which the trace records too."""
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
        one_off = CodeSession(owner="", trace_id=trace.id, state="call")
        ran = await _scan_and_run(claim, code=code, timeout_s=timeout_s, session=one_off)
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
    report, result = ran.report, ran.result
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
        data={
            **result.to_dict(),
            "artifacts": [artifact.as_dict() for artifact in ran.artifacts],
            "safety": report.to_dict(),
        },
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
    return Execution(result=result, report=report, trace_id=trace.id, artifacts=ran.artifacts)


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
