"""agent 0008: the answers and errors that only ``AgentRun.output`` / ``AgentRun.error`` held
move into the runs' steps (with every counter the trace store keeps right) before the columns
go; backwards, the columns come back filled from the steps."""

from __future__ import annotations

import importlib
import uuid
from typing import Any

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.test import Client

from traces.models import Step, Trace

BEFORE = [("agent", "0007_storable_fields")]
AFTER = [("agent", "0008_run_outcome_in_steps")]
LOST = "Cancelled (the worker running it had stopped)."


def migrate(targets: list[tuple[str, str]]) -> Any:
    """Migrate to ``targets``; returns the apps as they were there."""
    executor = MigrationExecutor(connection)
    executor.migrate(targets)
    return executor.loader.project_state(targets).apps


class OldRuns:
    """Runs, traces and goal steps written with the models of ``apps`` (before 0008)."""

    def __init__(self, apps: Any, user: Any) -> None:
        self.AgentRun = apps.get_model("agent", "AgentRun")
        self.Trace = apps.get_model("traces", "Trace")
        self.Step = apps.get_model("traces", "Step")
        self.user = user

    def run(
        self,
        status: str,
        *,
        output: str = "",
        error: str = "",
        goal_status: str | None = None,
        goal_error: str = "",
        response: str | None = None,
        goal_id: uuid.UUID | None = None,
        trace: bool = True,
    ) -> Any:
        """A run whose trace holds its goal step (the run's id unless ``goal_id``: runs from
        before it had the run's id) and, with ``response``, its response step; the trace's
        counters as the store kept them (two events per step, and ``trace_completed``)."""
        run_id = uuid.uuid4()
        stored = None
        if trace:
            goal_status = goal_status or {"completed": "completed", "failed": "failed"}.get(
                status, "skipped"
            )
            failed = goal_status == "failed" or bool(goal_error)
            steps = 2 if response is not None else 1
            stored = self.Trace.objects.create(
                task="q",
                user_id=self.user.pk,
                status={"completed": "completed", "cancelled": "cancelled"}.get(status, "failed"),
                total_steps=steps,
                root_count=1,
                error_count=1 if failed else 0,
                last_seq=2 * steps + 1,
            )
            goal = self.Step.objects.create(
                id=goal_id or run_id,
                trace=stored,
                seq=1,
                step_type="goal",
                status=goal_status,
                error=goal_error,
                children_count=steps - 1,
                subtree_steps=steps,
                subtree_error_count=1 if failed else 0,
            )
            if response is not None:
                self.Step.objects.create(
                    trace=stored,
                    parent=goal,
                    seq=2,
                    depth=1,
                    path=[1],
                    step_type="response",
                    data={"answer": response},
                )
        return self.AgentRun.objects.create(
            id=run_id,
            user_id=self.user.pk,
            trace=stored,
            input="q",
            status=status,
            output=output,
            error=error,
        )


def outcome(client: Client, run: Any) -> tuple[str, str]:
    body = client.get(f"/api/runs/{run.id}").json()
    return body["answer"], body["error"]


@pytest.mark.django_db(transaction=True)
def test_answers_and_errors_only_the_runs_held_move_into_their_steps(user, api, monkeypatch):
    # Two runs per round: the batches' paging is exercised too.
    monkeypatch.setattr(
        importlib.import_module("agent.migrations.0008_run_outcome_in_steps"), "BATCH", 2
    )
    old = OldRuns(migrate(BEFORE), user)
    try:
        unanswered = old.run("completed", output="forty-two")
        answered = old.run("completed", output="forty-two", response="forty-two")
        before_goal_ids = old.run("completed", output="old answer", goal_id=uuid.uuid4())
        failed = old.run("failed", error="The model is down.")
        never_closed = old.run("failed", error="Trace closed.", goal_status="running")
        said_more = old.run("failed", error="short", goal_error="The whole story.")
        cancelled = old.run("cancelled", error="Cancelled.")
        lost = old.run("cancelled", error=LOST)
        traceless = old.run("completed", output="nowhere", trace=False)
        empty = old.run("completed")
    finally:
        migrate(AFTER)

    # An answer becomes its run's response step, as the trace store writes one.
    response = Step.objects.get(trace_id=unanswered.trace_id, step_type="response")
    goal = Step.objects.get(pk=unanswered.id)
    trace = Trace.objects.get(pk=unanswered.trace_id)
    assert (response.parent_id, response.seq, response.depth, response.path) == (goal.id, 4, 1, [1])
    assert (response.status, response.name, response.data) == (
        "completed",
        "answer",
        {"answer": "forty-two"},
    )
    assert (response.data_preview, response.data_bytes) == ('{"answer":"forty-two"}', 22)
    assert (response.subtree_steps, response.children_count, response.started_at is not None) == (
        1,
        0,
        True,
    )
    assert (trace.last_seq, trace.total_steps, trace.root_count, trace.error_count) == (4, 2, 1, 0)
    assert (goal.children_count, goal.subtree_steps) == (1, 2)
    assert outcome(api, unanswered) == ("forty-two", "")
    # A run that had its response step keeps it alone.
    assert Step.objects.filter(trace_id=answered.trace_id).count() == 2
    assert Trace.objects.get(pk=answered.trace_id).last_seq == 5
    assert outcome(api, answered) == ("forty-two", "")
    # A run from before its goal step had its id: the answer goes under its trace's goal.
    assert Step.objects.get(trace_id=before_goal_ids.trace_id, step_type="response").depth == 1
    assert outcome(api, before_goal_ids) == ("old answer", "")

    # An error goes onto the goal step; one that did not count as an error now counts.
    assert outcome(api, failed) == ("", "The model is down.")
    assert Trace.objects.get(pk=failed.trace_id).error_count == 1
    assert outcome(api, never_closed) == ("", "Trace closed.")
    goal = Step.objects.get(pk=never_closed.id)
    assert (goal.error, goal.subtree_error_count) == ("Trace closed.", 1)
    assert Trace.objects.get(pk=never_closed.trace_id).error_count == 1
    assert outcome(api, said_more) == ("", "The whole story.")  # the goal's was the record
    # "Cancelled." is derived from the status, a worker's lost cancellation is stored.
    assert Step.objects.get(pk=cancelled.id).error == ""
    assert Trace.objects.get(pk=cancelled.trace_id).error_count == 0
    assert outcome(api, cancelled) == ("", "Cancelled.")
    assert Step.objects.get(pk=lost.id).error == LOST
    assert Trace.objects.get(pk=lost.trace_id).error_count == 1
    assert outcome(api, lost) == ("", LOST)

    # Without a trace there is no record to keep them in.
    assert outcome(api, traceless) == ("", "")
    assert not Step.objects.filter(trace_id=empty.trace_id, step_type="response").exists()


@pytest.mark.django_db(transaction=True)
def test_going_back_fills_the_columns_from_the_steps(user):
    old = OldRuns(migrate(BEFORE), user)
    try:
        completed = old.run("completed", output="forty-two")
        failed = old.run("failed", error="The model is down.")
        cancelled = old.run("cancelled", error="Cancelled.")
        migrate(AFTER)
        old = OldRuns(migrate(BEFORE), user)
        restored = {run.id: (run.output, run.error) for run in old.AgentRun.objects.all()}
    finally:
        migrate(AFTER)

    assert restored == {
        completed.id: ("forty-two", ""),
        failed.id: ("", "The model is down."),
        cancelled.id: ("", "Cancelled."),
    }
