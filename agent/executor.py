"""Executing runs: each created run (``agent.services``) runs as a task of the event loop,
independent of any HTTP connection, and is stopped by cancelling that task.

This module owns the process's registry of running runs, their cancel relay (a cancel asked
on another worker arrives on the channel layer) and their leases (``agent.leases``).
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Sequence
from dataclasses import dataclass

import structlog
from asgiref.sync import ThreadSensitiveContext, sync_to_async

from agent.conversation import RunConversation
from agent.events import RunEvents, run_control_group
from agent.exceptions import (
    AgentFormatErrors,
    AgentMaxIterations,
    LLMTimeout,
    LLMUnavailable,
    RunCancelled,
    RunFailed,
)
from agent.langfuse import langfuse_run_started
from agent.leases import LeaseKeeper
from agent.llm import get_llm
from agent.models import RUN_CANCELLED_MESSAGE, AgentRun, RunStatus
from agent.modes import answer
from agent.recorder import RunEnd, RunRecorder
from agent.selectors import run_outcomes
from agent.slots import RunSlot
from devassist.connections import in_thread, release_connection
from devassist.exceptions import DomainError
from devassist.follow import GroupListener, LayerFailed
from sandbox.files import InputFile
from sandbox.services import CodeSession

logger = structlog.get_logger(__name__)


@dataclass
class _Local:
    """A run executing in this process. It is cancelled at most once, and never while its end
    is being stored (``stoppable``); a stop asked before its task began is ``pending``, seen
    when it begins (a task cancelled before its first step would never store its end)."""

    task: asyncio.Task[None]
    began: bool = False
    stoppable: bool = True
    pending: bool = False


_running: dict[uuid.UUID, _Local] = {}


def run_start(
    run: AgentRun,
    *,
    conversation: RunConversation | None = None,
    collection: str | None = None,
    inputs: Sequence[InputFile] = (),
) -> asyncio.Task[None]:
    """Execute ``run`` as a task of the running loop; it goes on when the caller goes away.
    ``conversation``: the conversation the run answers in (its history, and where its
    transcript goes); ``collection``: the knowledge collection a ``rag`` run answers from and
    the agent's ``search_docs`` searches by default (default:
    ``settings.KNOWLEDGE_DEFAULT_COLLECTION``); ``inputs``: files for the run's code
    (``sandbox.files.input_files``, the same ones ``run_create`` recorded), read-only under
    ``/tmp/inputs`` for its executions, and named to the model. The run's ``execute_code``
    calls share one sandbox (``SANDBOX_STATE``), removed when the run ends, however it ends.
    The task never raises: the run's outcome is stored on the run."""
    sandbox = CodeSession(owner=str(run.id), trace_id=run.trace_id, inputs=tuple(inputs))
    task = asyncio.get_running_loop().create_task(
        _execute_apart(run, conversation, collection, sandbox), name=f"run-{run.id}"
    )
    _running[run.id] = _Local(task)
    task.add_done_callback(lambda _: _running.pop(run.id, None))
    _lease_keeper.ensure_started()
    return task


def stop_local(run_id: uuid.UUID) -> asyncio.Task[None] | None:
    """Cancel the run if it executes in this process (its model call, its tool, its loop);
    returns its task, None when it is not this process's."""
    local = _running.get(run_id)
    if local is None:
        return None
    if local.stoppable:
        local.stoppable = False
        if local.began:
            local.task.cancel()
        else:
            local.pending = True
    return local.task


def _stop_from_thread(run_id: uuid.UUID) -> None:
    """``stop_local`` from another thread (the lease keeper's), on the run's own loop."""
    local = _running.get(run_id)
    if local is not None:
        local.task.get_loop().call_soon_threadsafe(stop_local, run_id)


#: This process's run leases (``agent.leases``): started with the server
#: (``devassist.asgi``), or with the first run of a process that is not one.
_lease_keeper = LeaseKeeper(local_runs=lambda: list(_running), stop=_stop_from_thread)


def run_leases_start() -> None:
    """Start this process's heartbeat: it renews its runs' leases and fails the runs of
    workers that are gone, whether or not this process runs anything itself."""
    _lease_keeper.ensure_started()


#: The error a failed run is reported as, by its stored code (anything else is ``RunFailed``
#: with that code).
_FAILURES: dict[str, type[DomainError]] = {
    error.code: error
    for error in (AgentMaxIterations, AgentFormatErrors, LLMUnavailable, LLMTimeout)
}


async def run_outcome(run: AgentRun, task: asyncio.Task[None]) -> AgentRun:
    """Wait for ``task`` (the run goes on if the caller goes away) and return the finished
    run. A run that did not complete raises ``RunCancelled``, or its failure's error (by its
    stored code: ``LLMUnavailable``…, else ``RunFailed``) whose message is the run's error
    (``agent.selectors.run_error``), with the run, its trace and its conversation in
    ``details``."""
    await asyncio.shield(asyncio.wait([task]))
    run = await AgentRun.objects.aget(pk=run.id)
    if run.status == RunStatus.COMPLETED:
        return run
    details = {"run_id": str(run.id), "trace_id": str(run.trace_id)}
    if run.conversation_id is not None:
        details["conversation_id"] = str(run.conversation_id)
    outcome = (await sync_to_async(run_outcomes)([run], answers=False))[run.id]
    message = outcome.error or f"Run {run.status}."
    if run.status == RunStatus.CANCELLED:
        raise RunCancelled(message, details=details)
    failure = _FAILURES.get(run.error_code)
    if failure is not None:
        raise failure(message, details=details)
    raise RunFailed(message, code=run.error_code or None, details=details)


async def _execute_apart(
    run: AgentRun,
    conversation: RunConversation | None,
    collection: str | None,
    sandbox: CodeSession,
) -> None:
    """``_execute`` with its synchronous work (database, sandbox) in a thread of its own, not
    in the thread of the request that started it (which ends with the request), and its
    connection back in the pool at the end."""
    async with ThreadSensitiveContext():
        try:
            await _execute(run, conversation, collection, sandbox)
        finally:
            await in_thread(release_connection)


async def _execute(
    run: AgentRun,
    conversation: RunConversation | None,
    collection: str | None,
    sandbox: CodeSession,
) -> None:
    local = _running[run.id]
    local.began = True
    watcher = asyncio.create_task(_watch_for_cancel(run.id))
    # Held while the run works, free while it waits on the model or a tool (agent.slots).
    slot = RunSlot()
    recorder = RunRecorder(run, RunEvents(run.id, last_seq=1), get_llm())  # 1 is meta
    structlog.contextvars.bind_contextvars(run_id=str(run.id), trace_id=str(run.trace_id))
    try:
        if local.pending:
            raise asyncio.CancelledError
        await slot.take()  # a Stop meanwhile cancels the wait at once
        # The slot's wrapper outermost: Langfuse times the model's calls, not the waits for
        # the slot after them.
        recorder.llm = slot.model(await langfuse_run_started(run=run, llm=recorder.llm))
        history = await conversation.history(run) if conversation is not None else []
        text = await answer(
            run,
            history=history,
            llm=recorder.llm,
            recorder=recorder,
            collection=collection,
            slot=slot,
            sandbox=sandbox,
        )
        end = RunEnd(RunStatus.COMPLETED, output=text)
    except asyncio.CancelledError:
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            task.uncancel()  # handled: the run ends as cancelled, and its end is stored
        end = RunEnd(RunStatus.CANCELLED, error=RUN_CANCELLED_MESSAGE)
    except DomainError as exc:
        end = RunEnd(RunStatus.FAILED, error=exc.message, code=exc.code)
    except Exception as exc:
        logger.exception("agent_run_crashed")
        end = RunEnd(
            RunStatus.FAILED, error=f"Internal error: {type(exc).__name__}", code="internal_error"
        )
    local.stoppable = False
    # The run's container goes while its end is stored; the task ends after both.
    closing = asyncio.ensure_future(sandbox.close())
    try:
        await recorder.finish(end, conversation=conversation)
    finally:
        slot.give_back()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.shield(closing)
        watcher.cancel()
        with contextlib.suppress(BaseException):
            await watcher  # retrieve its end, whatever the layer raised on the way out
        structlog.contextvars.unbind_contextvars("run_id", "trace_id")


async def _watch_for_cancel(run_id: uuid.UUID) -> None:
    """Stops the run when another worker relays a cancel request. Without a channel layer
    the stored request reaches the run on its worker's next heartbeat (``agent.leases``)."""
    listener = GroupListener(run_control_group(run_id))
    try:
        await listener.join()
        while True:
            message = await listener.receive()
            if message is not None and message.get("type") == "run.cancel":
                stop_local(run_id)
    except LayerFailed as exc:
        logger.warning("run_cancel_watch_failed", run_id=str(run_id), error=str(exc))
    finally:
        await listener.leave()
