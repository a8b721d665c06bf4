"""A run's answer and error are stored once, in its trace (the ``response`` step, the goal
step), and every reader answers them from there, with the keys and values it always had, in a
constant number of queries."""

from __future__ import annotations

from http import HTTPStatus
from typing import Any

import pytest
from django.db import connection
from django.test import Client
from django.utils import timezone

from agent.models import AgentRun, RunStatus
from agent.selectors import run_outcomes
from agent.services import run_create_sync
from chat.selectors import display_messages
from chat.services import NewMessage, conversation_create, messages_append
from traces.models import Step, StepStatus, Trace, TraceStatus
from traces.store import StepCreate, get_trace_store

pytestmark = pytest.mark.django_db

#: The keys of ``GET /api/runs/{id}``, as they were when the run row held the answer and error.
RUN_KEYS = {
    "run_id",
    "trace_id",
    "conversation_id",
    "mode",
    "status",
    "input",
    "answer",
    "error",
    "error_code",
    "tools",
    "model",
    "created_at",
    "started_at",
    "first_output_at",
    "finished_at",
}


#: A run's trace ends with the run's status (anything else is a failure).
TRACE_END: dict[str, str] = {
    RunStatus.COMPLETED: TraceStatus.COMPLETED,
    RunStatus.CANCELLED: TraceStatus.CANCELLED,
}


def ended_run(
    user: Any, status: str, *, answer: str = "", error: str = "", conversation: Any = None
) -> AgentRun:
    """A run ended as the recorder ends one: a completed run's ``response`` step under its
    goal, a failed run's error on its goal step, a cancelled run's goal step skipped (no
    error)."""
    run = run_create_sync(
        user=user, message="q", conversation_id=conversation.id if conversation else None
    )
    assert run.trace_id is not None
    if conversation is not None:
        messages_append(
            conversation_id=conversation.id, messages=[NewMessage("user", "q")], run_id=run.id
        )
    steps = []
    goal: dict[str, Any] = {"status": StepStatus.SKIPPED}
    if status == RunStatus.COMPLETED:
        steps = [StepCreate(step_type="response", parent_id=run.id, data={"answer": answer})]
        goal = {"status": StepStatus.COMPLETED}
    elif status == RunStatus.FAILED:
        goal = {"status": StepStatus.FAILED, "error": error}
    get_trace_store().add_steps_sync(
        run.trace_id,
        steps,
        {run.id: goal},
        complete=TRACE_END.get(status, TraceStatus.FAILED),
    )
    code = "llm_unavailable" if status == RunStatus.FAILED else ""
    AgentRun.objects.filter(pk=run.id).update(
        status=status, error_code=code, finished_at=timezone.now()
    )
    return AgentRun.objects.get(pk=run.id)


def test_the_run_row_has_no_copy_of_the_answer_or_the_error():
    fields = {field.name for field in AgentRun._meta.get_fields()}
    with connection.cursor() as cursor:
        columns = {
            column.name
            for column in connection.introspection.get_table_description(
                cursor, AgentRun._meta.db_table
            )
        }
    assert not {"output", "error", "answer"} & (fields | columns)
    assert {"status", "error_code"} <= fields


def test_the_run_api_answers_the_steps_answer_and_error(api: Client, user: Any):
    completed = ended_run(user, RunStatus.COMPLETED, answer="forty-two")
    failed = ended_run(user, RunStatus.FAILED, error="The model is down.")
    cancelled = ended_run(user, RunStatus.CANCELLED)
    running = run_create_sync(user=user, message="still going")

    runs = (completed, failed, cancelled, running)
    bodies = {run.id: api.get(f"/api/runs/{run.id}").json() for run in runs}

    assert all(set(body) == RUN_KEYS for body in bodies.values())
    response = Step.objects.get(parent_id=completed.id, step_type="response")
    assert (bodies[completed.id]["answer"], bodies[completed.id]["error"]) == (
        response.data["answer"],
        "",
    )
    assert (bodies[failed.id]["answer"], bodies[failed.id]["error"]) == (
        "",
        Step.objects.get(pk=failed.id).error,
    )
    assert bodies[failed.id]["error"] == "The model is down."
    # A cancellation is no error of the trace; its message comes from the run's status.
    assert Step.objects.get(pk=cancelled.id).error == ""
    assert Trace.objects.get(run=cancelled).error_count == 0
    assert (bodies[cancelled.id]["answer"], bodies[cancelled.id]["error"]) == ("", "Cancelled.")
    assert (bodies[running.id]["answer"], bodies[running.id]["error"]) == ("", "")


def test_a_run_that_did_not_complete_has_no_answer_even_with_a_response_step(user: Any):
    # Stopped between writing its answer and ending: the answer is not the run's.
    run = ended_run(user, RunStatus.CANCELLED)
    trace = Trace.objects.get(run=run)
    Step.objects.create(trace=trace, parent_id=run.id, seq=99, depth=1, step_type="response")
    assert run_outcomes([run])[run.id].answer == ""


def test_a_run_whose_trace_was_deleted_has_neither(user: Any):
    run = ended_run(user, RunStatus.FAILED, error="gone")
    Trace.objects.filter(run=run).delete()
    run.refresh_from_db()
    outcome = run_outcomes([run])[run.id]
    assert (outcome.answer, outcome.error) == ("", "")


def test_the_staff_listing_reads_answers_and_errors_in_constant_queries(
    staff_api: Client, user: Any, django_assert_num_queries: Any
):
    def runs_of_each_status() -> None:
        ended_run(user, RunStatus.COMPLETED, answer="yes")
        ended_run(user, RunStatus.FAILED, error="no")
        ended_run(user, RunStatus.CANCELLED)

    runs_of_each_status()
    staff_api.get("/admin/agent-traces")  # the token's first use is stored once
    # The token (with its user), the runs, their steps, their answers and errors.
    with django_assert_num_queries(4):
        first = staff_api.get("/admin/agent-traces?limit=100")
    for _ in range(3):
        runs_of_each_status()
    with django_assert_num_queries(4):
        listing = staff_api.get("/admin/agent-traces?limit=100").json()
    assert first.status_code == HTTPStatus.OK
    by_status = {(run["status"], run["answer"], run["error"]) for run in listing["runs"]}
    assert by_status == {
        ("completed", "yes", ""),
        ("failed", "", "no"),
        ("cancelled", "", "Cancelled."),
    }


def test_the_chat_reads_its_turns_errors_in_one_more_query(
    user: Any, django_assert_num_queries: Any
):
    conversation = conversation_create(owner=user)
    for _ in range(3):
        ended_run(user, RunStatus.FAILED, error="no", conversation=conversation)
        ended_run(user, RunStatus.CANCELLED, conversation=conversation)
    # The turns with their runs and steps, their files, then the errors of the runs that failed.
    with django_assert_num_queries(3):
        shown = display_messages(conversation=conversation)
    assert [(m.run_status, m.error) for m in shown] == [
        ("failed", "no"),
        ("cancelled", "Cancelled."),
    ] * 3
