"""Reads of runs: one of yours, their steps as ``step`` events, their answers and errors (from
their traces), the staff listing."""

from __future__ import annotations

import uuid
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from django.db.models import Q
from django.db.models.fields.json import KT

from agent.exceptions import RunNotFound
from agent.models import RUN_CANCELLED_MESSAGE, AgentRun, RunStatus
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
    "status",
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


@dataclass(frozen=True)
class RunOutcome:
    """What a run came to, as its trace records it (the run's row keeps no copy): ``answer``
    is the text of a completed run's ``response`` step (the child of its goal step), empty for
    any other run or when the step is missing (a deleted trace); ``error`` is a failed or
    cancelled run's error (``run_error``), empty for any other run."""

    answer: str = ""
    error: str = ""


def run_error(*, status: str, goal_error: str) -> str:
    """A run's error from its status and its goal step's ``error``: a failed run's is its goal
    step's; a cancelled run's too, and ``RUN_CANCELLED_MESSAGE`` when the goal step has none (a
    cancellation is not counted as an error of the trace, so the recorder writes none); any
    other run has none."""
    if status == RunStatus.CANCELLED:
        return goal_error or RUN_CANCELLED_MESSAGE
    return goal_error if status == RunStatus.FAILED else ""


def run_outcomes(runs: Sequence[AgentRun], *, answers: bool = True) -> dict[uuid.UUID, RunOutcome]:
    """Each run's ``RunOutcome`` (read ``status`` and ``trace_id`` with the runs), by run id,
    in one query; none when no run has an answer or an error to read. The goal step is the
    root ``goal`` step of the run's trace, the answer the ``response`` step under it (a run's
    trace has one root); with ``answers=False`` only the errors are read."""
    ended = (RunStatus.FAILED, RunStatus.CANCELLED)
    errors_of = [r.trace_id for r in runs if r.trace_id and r.status in ended]
    answers_of = [r.trace_id for r in runs if r.trace_id and r.status == RunStatus.COMPLETED]
    # An empty side drops out of the query, and with both empty there is no query at all.
    rows = (
        Step.objects.filter(
            Q(trace_id__in=errors_of, parent__isnull=True, step_type=StepType.GOAL)
            | Q(trace_id__in=answers_of if answers else [], depth=1, step_type=StepType.RESPONSE)
        )
        .order_by("seq")
        .values_list("trace_id", "step_type", "error", KT("data__answer"))
    )
    goal_error: dict[uuid.UUID | None, str] = {}
    answer: dict[uuid.UUID | None, str] = {}
    for trace_id, step_type, error, text in rows:
        if step_type == StepType.GOAL:
            goal_error.setdefault(trace_id, error)
        else:
            answer.setdefault(trace_id, text or "")
    return {
        run.id: RunOutcome(
            answer=answer.get(run.trace_id, "") if run.status == RunStatus.COMPLETED else "",
            error=run_error(status=run.status, goal_error=goal_error.get(run.trace_id, "")),
        )
        for run in runs
    }


def runs_newest(*, offset: int, limit: int) -> tuple[list[AgentRun], bool]:
    """A page of every run, newest first, and whether more follow (staff only: the caller
    checks)."""
    window = list(AgentRun.objects.order_by("-created_at", "-id")[offset : offset + limit + 1])
    return window[:limit], len(window) > limit
