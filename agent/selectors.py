"""Reads of runs: one of yours, their steps as ``step`` events, the staff listing."""

from __future__ import annotations

import uuid
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from agent.exceptions import RunNotFound
from agent.models import AgentRun
from agent.projections import step_events_of
from traces.models import Step, StepType

#: The step types a ``step`` event is made of.
_ITERATION_TYPES = (StepType.THOUGHT, StepType.ACTION, StepType.RESULT)
_FIELDS = (
    "id",
    "trace_id",
    "parent_id",
    "seq",
    "step_type",
    "data",
    "error",
    "started_at",
    "finished_at",
)


async def run_get(*, user: Any, run_id: uuid.UUID) -> AgentRun:
    """The run, if the user may see it (their own; staff see every run). Raises
    ``RunNotFound``."""
    run = await AgentRun.objects.visible_to(user).filter(pk=run_id).afirst()
    if run is None:
        raise RunNotFound(f"Run {run_id} does not exist.")
    return run


def run_steps(runs: Sequence[AgentRun]) -> dict[uuid.UUID, list[dict[str, Any]]]:
    """Each run's ``step`` events, derived from its trace's steps (one query)."""
    run_of_trace = {run.trace_id: run.id for run in runs if run.trace_id is not None}
    steps: dict[uuid.UUID, list[Step]] = defaultdict(list)
    rows = Step.objects.filter(
        trace_id__in=list(run_of_trace), step_type__in=_ITERATION_TYPES
    ).only(*_FIELDS)
    for step in rows:
        steps[run_of_trace[step.trace_id]].append(step)
    return {run.id: step_events_of(steps[run.id]) for run in runs}


def runs_newest(*, offset: int, limit: int) -> tuple[list[AgentRun], bool]:
    """A page of every run, newest first, and whether more follow (staff only: the caller
    checks)."""
    window = list(AgentRun.objects.order_by("-created_at", "-id")[offset : offset + limit + 1])
    return window[:limit], len(window) > limit
