"""The one rule for a step's outcome (``traces.outcomes``), kind by kind, on plain values."""

from __future__ import annotations

import importlib
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from traces.models import Step
from traces.outcomes import (
    Outcome,
    result_status,
    step_outcome,
    tool_facts,
)
from traces.projections import step_dict, step_from_values, step_values
from traces.store import StepCreate, get_trace_store

BLOCKED_TEXT = (
    "Safety check BLOCKED:\n  [BLOCKED] (line 2) os.system is blocked: the sandbox cannot "
    "start processes or run shell commands. Compute the result in Python instead."
)


def program(**fields: Any) -> dict[str, Any]:
    """A result step's data as the agent's recorder stores an ``execute_code`` result."""
    result = {
        "stdout": "",
        "stderr": "",
        "exit_code": 0,
        "timed_out": False,
        "oom_killed": False,
        "cancelled": False,
        "truncated": False,
        "duration_ms": 120,
    }
    return {"result": {**result, **fields}, "truncated": False}


def outcome_of(data: Any, *, status: str = "completed", error: str = "") -> Outcome:
    return step_outcome("result", status, error, data)


def test_exit_code_zero_is_ok() -> None:
    assert outcome_of(program()) == Outcome(kind="ok", label="ok", reason="")


def test_exit_code_one_is_failed_with_the_code_as_reason() -> None:
    outcome = outcome_of(program(exit_code=1, stderr="ZeroDivisionError"))

    assert (outcome.kind, outcome.label, outcome.reason) == ("failed", "failed", "exit code 1")
    assert outcome.is_error


def test_code_the_safety_scan_refused_is_blocked_with_what_it_names() -> None:
    data = {"result": {"blocked": True, "safety": BLOCKED_TEXT, "findings": []}}

    outcome = outcome_of(data, status="failed")

    assert (outcome.kind, outcome.reason) == ("blocked", "blocked: os.system")
    assert outcome.is_error


def test_the_sandbox_call_traces_flat_result_is_read_too() -> None:
    blocked = {"safety": {"blocked": True, "text": BLOCKED_TEXT, "findings": []}}
    ran = {"exit_code": 3, "timed_out": False, "safety": {"blocked": False, "text": ""}}

    assert outcome_of(blocked, status="failed", error=BLOCKED_TEXT).kind == "blocked"
    assert outcome_of(ran, status="failed", error="exit code 3").reason == "exit code 3"


def test_timed_out_says_after_how_long() -> None:
    outcome = outcome_of(program(exit_code=None, timed_out=True, duration_ms=5012))

    assert (outcome.kind, outcome.label, outcome.reason) == (
        "timed_out",
        "timed out",
        "timed out after 5 s",
    )
    assert outcome.is_error


def test_out_of_memory() -> None:
    outcome = outcome_of(program(exit_code=137, oom_killed=True))

    assert (outcome.kind, outcome.label) == ("oom", "out of memory")
    assert outcome.is_error


def test_a_cancelled_program_and_a_skipped_step_are_cancelled_not_errors() -> None:
    for outcome in (
        outcome_of(program(exit_code=None, cancelled=True)),
        step_outcome("action", "skipped", "", {"tool_name": "execute_code"}),
        step_outcome("goal", "skipped", "", {}),
    ):
        assert (outcome.kind, outcome.reason) == ("cancelled", "cancelled")
        assert not outcome.is_error


def test_a_tool_error_is_failed_with_its_first_line() -> None:
    data = {"result": {"error": "execute_code failed: boom\nmore", "suggestion": "x"}}

    outcome = outcome_of(data, status="failed", error="execute_code failed: boom\nmore")

    assert (outcome.kind, outcome.reason) == ("failed", "execute_code failed: boom")


def test_a_failed_status_without_an_error_is_failed() -> None:
    assert step_outcome("action", "failed", "", {}).kind == "failed"


def test_running_and_planned_steps() -> None:
    assert step_outcome("action", "running", "", {}).kind == "running"
    assert step_outcome("action", "planned", "", {}).kind == "pending"


@pytest.mark.parametrize(
    "data",
    [None, [], [1, 2], "text", 3, {"result": None}, {"result": [1]}, {"result": "exit code 1"}],
)
def test_data_that_is_not_an_object_is_neutral(data: Any) -> None:
    assert outcome_of(data) == Outcome(kind="ok", label="ok", reason="")
    assert tool_facts(data) == {}


def test_odd_values_do_not_count() -> None:
    assert outcome_of(program(exit_code=True)).kind == "ok"
    assert outcome_of(program(exit_code="1")).kind == "ok"
    assert outcome_of(program(timed_out="yes")).kind == "ok"
    assert outcome_of({"result": {"blocked": True, "safety": 3}}).reason == "blocked"


def test_only_result_steps_carry_a_tool_verdict() -> None:
    assert step_outcome("action", "completed", "", program(exit_code=1)).kind == "ok"


def test_long_reasons_are_cut_to_one_line() -> None:
    outcome = outcome_of({}, status="failed", error="x" * 500 + "\nsecond line")

    assert len(outcome.reason) == 120
    assert outcome.reason.endswith("…")


def test_facts_alone_give_the_same_outcome_as_the_whole_data() -> None:
    for data in (
        program(exit_code=1, stdout="x" * 10_000),
        program(timed_out=True, exit_code=None, duration_ms=9000),
        {"result": {"blocked": True, "safety": BLOCKED_TEXT}},
        {"safety": {"blocked": True, "text": BLOCKED_TEXT}},
        {"result": {"exit_code": None}, "exit_code": 2},
    ):
        assert outcome_of(tool_facts(data)) == outcome_of(data)


def test_result_status_is_what_the_recorder_stores() -> None:
    assert result_status(error="", data=program()) == "completed"
    assert result_status(error="", data=program(exit_code=1)) == "failed"
    assert result_status(error="", data={"result": {"blocked": True}}) == "failed"
    assert result_status(error="no such tool", data={"result": {"error": "x"}}) == "failed"
    assert result_status(error="", data=program(cancelled=True, exit_code=None)) == "skipped"
    assert result_status(error="", data={"result": [1, 2]}) == "completed"


@pytest.mark.django_db
def test_the_outcome_from_the_facts_kept_on_write_is_the_one_from_the_whole_data(
    user: Any,
) -> None:
    store = get_trace_store()
    trace = async_to_sync(store.create_trace)(user=user, task="outcomes")
    shapes: list[tuple[str, Any, str, str]] = [
        ("result", program(), "completed", ""),
        ("result", program(exit_code=1, stdout="x" * 50_000), "completed", ""),
        ("result", program(timed_out=True, exit_code=None, duration_ms=2100), "failed", ""),
        ("result", program(oom_killed=True), "failed", ""),
        ("result", program(cancelled=True, exit_code=None), "skipped", ""),
        ("result", {"result": {"blocked": True, "safety": BLOCKED_TEXT}}, "failed", ""),
        ("result", {"safety": {"blocked": True, "text": BLOCKED_TEXT}}, "failed", "x"),
        ("result", {"result": {"exit_code": None}, "exit_code": 2}, "completed", ""),
        ("result", {"result": "exit_code"}, "completed", ""),
        ("result", {"result": {"error": "no tool"}}, "failed", "no tool"),
        ("result", [1, "exit_code"], "completed", ""),
        ("result", 3, "completed", ""),
        ("result", "text", "completed", ""),
        ("action", program(exit_code=1), "completed", ""),
        ("goal", {}, "failed", "model down"),
    ]
    steps = [
        StepCreate(step_type=step_type, data=data, status=status, error=error)
        for step_type, data, status, error in shapes
    ]
    async_to_sync(store.add_steps)(trace.id, steps)

    by_sql = {
        row["step_id"]: step_from_values(row)["outcome"]
        for row in step_values(Step.objects.for_trace(trace.id))
    }
    by_data = {
        str(s.id): step_outcome(s.step_type, s.status, s.error, s.data).as_dict()
        for s in Step.objects.for_trace(trace.id)
    }

    assert by_sql == by_data
    assert by_data == {str(s.id): step_dict(s)["outcome"] for s in Step.objects.for_trace(trace.id)}
    kinds = [by_sql[str(s.id)]["kind"] for s in steps]
    assert kinds == [
        "ok",
        "failed",
        "timed_out",
        "oom",
        "cancelled",
        "blocked",
        "blocked",
        "ok",
        "ok",
        "failed",
        "ok",
        "ok",
        "ok",
        "ok",
        "failed",
    ]


@pytest.mark.django_db
def test_changed_data_changes_the_facts(user: Any) -> None:
    store = get_trace_store()
    trace = async_to_sync(store.create_trace)(user=user, task="update")
    step = StepCreate(step_type="result", status="running", data={})
    async_to_sync(store.add_steps)(trace.id, [step])

    async_to_sync(store.update_step)(
        trace.id, step.id, {"status": "completed", "data": program(exit_code=3)}
    )

    stored = Step.objects.get(pk=step.id)
    assert stored.tool_facts["exit_code"] == 3
    row = step_values(Step.objects.filter(pk=step.id)).get()
    assert step_from_values(row)["outcome"]["reason"] == "exit code 3"


def migrate_to_latest() -> None:
    """Every migration applied again (the later ones too: the tests after these use the
    current models)."""
    executor = MigrationExecutor(connection)
    executor.migrate(executor.loader.graph.leaf_nodes())


@pytest.mark.django_db(transaction=True)
def test_the_migration_fills_the_facts_of_results_stored_before(
    user: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(
        importlib.import_module("traces.migrations.0003_step_tool_facts"), "BATCH", 2
    )
    executor = MigrationExecutor(connection)
    before = [("traces", "0002_step_parent_index")]
    executor.migrate(before)
    try:
        apps = executor.loader.project_state(before).apps
        trace = apps.get_model("traces", "Trace").objects.create(task="old", user_id=user.pk)
        old_step = apps.get_model("traces", "Step")
        datas = [program(exit_code=1), program(), {"result": [1]}, program(timed_out=True)]
        ids = [
            old_step.objects.create(trace=trace, seq=seq, step_type="result", data=data).pk
            for seq, data in enumerate(datas, start=1)
        ]
        goal = old_step.objects.create(trace=trace, seq=9, step_type="goal", data=program()).pk
    finally:
        migrate_to_latest()

    facts = dict(Step.objects.filter(trace_id=trace.pk).values_list("pk", "tool_facts"))
    assert [facts[pk] for pk in ids] == [tool_facts(data) for data in datas]
    assert facts[ids[0]]["exit_code"] == 1
    assert facts[goal] == {}


# -- the rule in SQL, the counts and "next error" -----------------------------------------------

#: Data of every shape the rule tells apart, and odd ones.
DATAS: list[Any] = [
    {},
    program(),
    program(exit_code=1),
    program(exit_code=-9),
    program(exit_code=True),
    program(exit_code="1"),
    program(timed_out=True, exit_code=None),
    program(oom_killed=True, exit_code=137),
    program(cancelled=True, exit_code=None),
    program(cancelled=True, timed_out=True),
    {"result": {"blocked": True, "safety": BLOCKED_TEXT}},
    {"safety": {"blocked": True, "text": BLOCKED_TEXT}},
    {"result": {"exit_code": None}, "exit_code": 2},
    {"result": [1, "exit_code"]},
    "text",
]


@pytest.mark.django_db
def test_next_error_and_the_counts_follow_the_outcome_for_every_shape(user: Any) -> None:
    """The SQL twin of the rule (``StepQuerySet.failed``), ``Step.is_error`` and the rollups
    agree with ``step_outcome`` on every combination of type, status, error text and data."""
    store = get_trace_store()
    trace = async_to_sync(store.create_trace)(user=user, task="every shape")
    root = StepCreate(step_type="goal")
    steps = [
        StepCreate(step_type=step_type, status=status, error=error, data=data, parent_id=root.id)
        for step_type in ("result", "action", "goal")
        for status in ("completed", "failed", "skipped", "running")
        for error in ("", "went wrong")
        for data in DATAS
    ]
    async_to_sync(store.add_steps)(trace.id, [root, *steps])

    stored = {s.pk: s for s in Step.objects.for_trace(trace.id)}
    by_rule = {
        pk
        for pk, s in stored.items()
        if step_outcome(s.step_type, s.status, s.error, s.data).is_error
    }
    assert set(Step.objects.for_trace(trace.id).failed().values_list("pk", flat=True)) == by_rule
    assert {pk for pk, s in stored.items() if s.is_error} == by_rule
    trace.refresh_from_db()
    assert trace.error_count == len(by_rule) == stored[root.id].subtree_error_count
    assert 0 < len(by_rule) < len(steps)


@pytest.mark.django_db
def test_an_ingested_result_whose_program_failed_is_an_error_though_its_status_says_completed(
    user: Any,
) -> None:
    from traces.selectors import next_step

    store = get_trace_store()
    trace = async_to_sync(store.create_trace)(user=user, task="ingested")
    goal = StepCreate(step_type="goal")
    action = StepCreate(step_type="action", parent_id=goal.id, name="execute_code")
    result = StepCreate(
        step_type="result", parent_id=action.id, status="completed", data=program(exit_code=1)
    )
    cancelled = StepCreate(
        step_type="goal", status="skipped", error="Cancelled (the worker running it had stopped)."
    )
    async_to_sync(store.add_steps)(trace.id, [goal, action, result, cancelled])

    trace.refresh_from_db()
    assert trace.error_count == 1
    assert Step.objects.get(pk=goal.id).subtree_error_count == 1
    assert next_step(trace=trace, after_seq=0, kind="error") == str(result.id)
    assert next_step(trace=trace, after_seq=3, kind="error") == str(result.id)


@pytest.mark.django_db(transaction=True)
def test_the_migration_corrects_the_counts_stored_under_the_earlier_rule(user: Any) -> None:
    executor = MigrationExecutor(connection)
    before = [("traces", "0003_step_tool_facts")]
    executor.migrate(before)
    try:
        apps = executor.loader.project_state(before).apps
        trace = apps.get_model("traces", "Trace").objects.create(
            task="old", user_id=user.pk, error_count=1, total_steps=4
        )
        old_step = apps.get_model("traces", "Step")

        def make(seq: int, path: list[int], step_type: str, **fields: Any) -> Any:
            return old_step.objects.create(
                trace=trace, seq=seq, path=path, depth=len(path), step_type=step_type, **fields
            )

        # Stored with the old rule's counts: the failed program not counted (its status said
        # completed), the cancelled goal counted (it had a message).
        goal = make(1, [], "goal", status="skipped", error="Cancelled.", subtree_error_count=1)
        action = make(2, [1], "action", status="completed")
        failed = make(3, [1, 2], "result", status="completed", tool_facts={"exit_code": 1})
        odd = make(4, [1], "result", status="completed", tool_facts={"exit_code": "1"})
    finally:
        migrate_to_latest()

    counts = dict(Step.objects.filter(trace_id=trace.pk).values_list("pk", "subtree_error_count"))
    assert counts == {goal.pk: 1, action.pk: 1, failed.pk: 1, odd.pk: 0}
    assert Step.objects.get(pk=odd.pk).tool_facts == {}
    assert apps.get_model("traces", "Trace").objects.get(pk=trace.pk).error_count == 1
