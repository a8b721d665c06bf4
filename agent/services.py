"""Writes of runs: create one (with its trace and its first event), cancel one.

A run has a mode (``agent.models.RunMode``): ``agent`` runs the ReAct loop with tools; ``chat``
streams the model's answer; ``rag`` answers from a knowledge collection with sources. Every
mode is recorded in the run's trace and emits the same SSE events (``meta``, ``step``s,
``delta``s, ``error``, ``done``). ``agent.executor`` executes a created run.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence
from typing import Any

import structlog
from asgiref.sync import sync_to_async
from django.db import transaction
from django.utils import timezone

from agent import executor
from agent.events import run_control_group
from agent.exceptions import AgentInputInvalid, RunFinished, RunNotYours, ToolNotFound
from agent.leases import cancel_lost, worker_id
from agent.llm import get_llm
from agent.models import AgentRun, RunEvent, RunMode, RunStatus
from agent.tools.registry import default_registry
from devassist.follow import broadcast
from sandbox.files import InputFile
from traces.models import StepStatus, Trace, TraceMode
from traces.store import StepCreate, get_trace_store

logger = structlog.get_logger(__name__)

#: How long a cancel of a run of this process waits for it to end, to answer ``cancelled``
#: rather than ``cancelling``.
CANCEL_WAIT_S = 2.0


def run_create_sync(
    *,
    user: Any,
    message: str,
    mode: str = RunMode.AGENT,
    tools: list[str] | None = None,
    request_id: str = "",
    conversation_id: uuid.UUID | None = None,
    inputs: Sequence[InputFile] = (),
) -> AgentRun:
    """A running run, owned by this worker, with its trace (whose root ``goal`` step has the
    run's id) and its first event, ``meta``, stored in the caller's transaction (or one of its
    own): ready to follow and to start (``agent.executor.run_start``). ``conversation_id``
    names the conversation the run answers in (its caller stores the messages). ``inputs``,
    files for the run's code (from ``sandbox.files.input_files``, which refuses them past the
    limits), are described in the goal step (name, path, size, media type, SHA-256); give
    ``run_start`` the same ones. Only ``agent``
    runs use tools (``tools``: a subset of the registry's, all by default). Raises
    ``AgentInputInvalid`` for an empty message, an unknown mode or tool name."""
    if not message or not message.strip():
        raise AgentInputInvalid("The message is empty.")
    if mode not in RunMode.values:
        raise AgentInputInvalid(f"Unknown run mode {mode!r}.", details={"modes": RunMode.values})
    registry = default_registry()
    if tools is not None:
        try:
            registry.subset(tools)
        except ToolNotFound as exc:
            raise AgentInputInvalid(
                exc.message, details={"tools": list(tools), "available": registry.names()}
            ) from exc
    now = timezone.now()
    run = AgentRun(
        user=user,
        conversation_id=conversation_id,
        request_id=request_id,
        mode=mode,
        status=RunStatus.RUNNING,
        input=message,
        tools=[]
        if mode != RunMode.AGENT
        else registry.names()
        if tools is None
        else sorted(set(tools)),
        model=get_llm().model,
        started_at=now,
        owner=worker_id(),
        heartbeat_at=now,
    )
    run.trace = Trace(
        user=user,
        task=message,
        mode=TraceMode.AGENT,
        agent_type="devassist",
        metadata={"run_mode": mode},
    )
    goal = StepCreate(
        id=run.id,
        step_type="goal",
        name="task",
        status=StepStatus.RUNNING,
        description=message,
        data={"task": message, "tools": run.tools, "model": run.model},
    )
    if inputs:
        goal.data["inputs"] = [item.describe() for item in inputs]
    with transaction.atomic():
        get_trace_store().open_trace_sync(run.trace, [goal])
        run.save(force_insert=True)
        RunEvent.objects.create(run=run, seq=1, type="meta", payload=run_meta(run))
    return run


#: ``run_create_sync`` from async code (the same typed keyword arguments).
run_create = sync_to_async(run_create_sync)


def run_meta(run: AgentRun) -> dict[str, Any]:
    """The run's first event, ``meta`` (seq 1), as ``run_create_sync`` stores it."""
    return {
        "type": "meta",
        "conversation_id": str(run.conversation_id) if run.conversation_id else None,
        "run_id": str(run.id),
        "trace_id": str(run.trace_id),
        "agent": run.mode == RunMode.AGENT,
        "rag": run.mode == RunMode.RAG,
        "model": run.model,
    }


async def run_cancel(*, user: Any, run: AgentRun) -> AgentRun:
    """Stop the run: its model call, its tool (the sandbox container) and the loop. Only its
    owner may (staff browse other people's runs, they do not steer them). Works from any
    worker: the request travels on the channel layer, and is stored, so the run's own worker
    sees it on its next heartbeat if the relay cannot reach it; a run whose worker is gone is
    cancelled at once. Returns the run as it is after the request, finished when it stopped
    within ``CANCEL_WAIT_S``. Raises ``RunNotYours`` (someone else's run), ``RunFinished``."""
    if run.user_id != user.pk:
        raise RunNotYours("Only the user who started a run can cancel it.")
    if run.is_finished:
        raise RunFinished(f"Run {run.id} is already {run.status}.", details={"status": run.status})
    await AgentRun.objects.filter(pk=run.id).aupdate(cancel_requested_at=timezone.now())
    task = executor.stop_local(run.id)
    if task is not None:
        await asyncio.wait([task], timeout=CANCEL_WAIT_S)
    elif not await sync_to_async(cancel_lost)(run):
        try:
            await broadcast(run_control_group(run.id), {"type": "run.cancel"})
        except Exception:
            # Stored: the run's worker sees it on its next heartbeat (``agent.leases``).
            logger.warning("run_cancel_relay_failed", run_id=str(run.id), exc_info=True)
    return await AgentRun.objects.aget(pk=run.id)
