"""``AgentRun.output`` and ``AgentRun.error`` are dropped: a run's answer is its ``response``
step and its error its goal step's (``agent.selectors.run_outcomes``).

First, what only those columns held goes into the steps, run by run (the goal step is the root
``goal`` step of the run's trace, as the readers find it):

- a failed or cancelled run's error goes onto its goal step when that has none, except a
  cancelled run's "Cancelled.", which the readers derive from the status. A goal step that did
  not count as an error (one not ``failed``) counts from then on: its own and its ancestors'
  ``subtree_error_count`` and the trace's ``error_count`` grow by one;
- a completed run with an answer and no ``response`` step under its goal step gets one, written
  as the trace store writes it: the trace's next ``seq`` (``last_seq + 1``), the depth and path
  under the goal, ``data`` ``{"answer": …}`` with its preview and size, started when the run
  finished; the trace's ``last_seq`` and ``total_steps``, the goal's ``children_count`` and the
  ``subtree_steps`` of the goal and its ancestors grow by one. No ``step_added`` event is
  logged: the trace's event log ends with its ``trace_completed``, where replays stop.

A run whose trace was deleted, or has no goal step, keeps neither: the trace is the run's record.

Backwards, the columns come back filled from the steps as the readers read them (the steps
written going forwards stay).
"""

from __future__ import annotations

import uuid
from typing import Any

from django.db import migrations
from django.db.models import F, Q
from django.utils import timezone

from traces.projections import data_summary

#: Runs read per round.
BATCH = 500

#: What the readers say for a cancelled run whose goal step has no error.
CANCELLED = "Cancelled."


def _goals(Step: Any, trace_ids: set[uuid.UUID]) -> dict[uuid.UUID, Any]:
    """The goal step of each trace (its first root ``goal`` step)."""
    goals: dict[uuid.UUID, Any] = {}
    rows = Step.objects.filter(trace_id__in=trace_ids, parent__isnull=True, step_type="goal")
    for goal in rows.order_by("seq"):
        goals.setdefault(goal.trace_id, goal)
    return goals


def _responses(Step: Any, goals: dict[uuid.UUID, Any]) -> dict[uuid.UUID, Any]:
    """The ``response`` step under each goal step, by trace."""
    responses: dict[uuid.UUID, Any] = {}
    rows = Step.objects.filter(
        parent_id__in=[goal.pk for goal in goals.values()], step_type="response"
    )
    for response in rows.order_by("seq"):
        responses.setdefault(response.trace_id, response)
    return responses


def _batches(runs: Any) -> Any:
    """``runs`` in batches of ``BATCH`` by primary key, each read whole before it is written."""
    after: uuid.UUID | None = None
    while True:
        page = runs.order_by("pk")
        if after is not None:
            page = page.filter(pk__gt=after)
        batch = list(page[:BATCH])
        if not batch:
            return
        after = batch[-1].pk
        yield batch


def _set_goal_error(Step: Any, Trace: Any, goal: Any, error: str) -> None:
    counted = goal.status == "failed"
    Step.objects.filter(pk=goal.pk).update(error=error)
    if counted:
        return
    Step.objects.filter(trace_id=goal.trace_id, seq__in=[*goal.path, goal.seq]).update(
        subtree_error_count=F("subtree_error_count") + 1
    )
    Trace.objects.filter(pk=goal.trace_id).update(error_count=F("error_count") + 1)


def _add_response(Step: Any, Trace: Any, goal: Any, answer: str, started_at: Any) -> None:
    trace = Trace.objects.select_for_update().get(pk=goal.trace_id)
    data = {"answer": answer}
    preview, size = data_summary(data)
    Step.objects.create(
        trace_id=trace.pk,
        parent_id=goal.pk,
        seq=trace.last_seq + 1,
        depth=goal.depth + 1,
        path=[*goal.path, goal.seq],
        step_type="response",
        status="completed",
        name="answer",
        data=data,
        data_preview=preview,
        data_bytes=size,
        started_at=started_at or timezone.now(),
    )
    Trace.objects.filter(pk=trace.pk).update(
        last_seq=F("last_seq") + 1, total_steps=F("total_steps") + 1
    )
    Step.objects.filter(trace_id=trace.pk, seq__in=[*goal.path, goal.seq]).update(
        subtree_steps=F("subtree_steps") + 1
    )
    Step.objects.filter(pk=goal.pk).update(children_count=F("children_count") + 1)


def move_outcomes_to_steps(apps: Any, schema_editor: Any) -> None:
    """Write into the steps the errors and answers only the run rows hold."""
    AgentRun = apps.get_model("agent", "AgentRun")
    Step = apps.get_model("traces", "Step")
    Trace = apps.get_model("traces", "Trace")
    runs = (
        AgentRun.objects.filter(trace__isnull=False)
        .filter(
            Q(status__in=["failed", "cancelled"]) & ~Q(error="")
            | Q(status="completed") & ~Q(output="")
        )
        # The answer is read only for a run that lacks its response step.
        .only("id", "trace_id", "status", "error", "finished_at")
    )
    for batch in _batches(runs):
        goals = _goals(Step, {run.trace_id for run in batch})
        responses = _responses(Step, goals)
        for run in batch:
            goal = goals.get(run.trace_id)
            if goal is None:
                continue
            if run.status == "completed":
                if run.trace_id not in responses:
                    _add_response(Step, Trace, goal, run.output, run.finished_at)
            elif not goal.error and not (run.status == "cancelled" and run.error == CANCELLED):
                _set_goal_error(Step, Trace, goal, run.error)


def restore_columns(apps: Any, schema_editor: Any) -> None:
    """Fill ``output`` and ``error`` back from the steps (the readers' rule)."""
    AgentRun = apps.get_model("agent", "AgentRun")
    Step = apps.get_model("traces", "Step")
    runs = AgentRun.objects.filter(
        trace__isnull=False, status__in=["completed", "failed", "cancelled"]
    ).only("id", "trace_id", "status")
    for batch in _batches(runs):
        goals = _goals(Step, {run.trace_id for run in batch})
        responses = _responses(Step, goals)
        for run in batch:
            goal, response = goals.get(run.trace_id), responses.get(run.trace_id)
            data = response.data if response is not None else None
            answer = data.get("answer") if isinstance(data, dict) else None
            if run.status == "completed":
                run.output = answer if isinstance(answer, str) else ""
                run.error = ""
            else:
                run.output = ""
                run.error = (goal.error if goal is not None else "") or (
                    CANCELLED if run.status == "cancelled" else ""
                )
        AgentRun.objects.bulk_update(batch, ["output", "error"])


class Migration(migrations.Migration):
    dependencies = [
        ("agent", "0007_storable_fields"),
        ("traces", "0002_step_parent_index"),
    ]

    operations = [
        migrations.RunPython(move_outcomes_to_steps, restore_columns),
        migrations.RemoveField(model_name="agentrun", name="error"),
        migrations.RemoveField(model_name="agentrun", name="output"),
    ]
