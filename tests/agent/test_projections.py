"""The ``step`` events derived from a trace's steps: one per ``result``, in ``seq`` order, the
same shape whether the steps are stored rows or the ones the recorder is writing."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from agent.projections import step_event, step_events_of

START = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


@dataclass
class Row:
    """A stored step, as the projection reads it."""

    seq: int
    step_type: str
    parent_id: uuid.UUID | None = None
    data: Any = field(default_factory=dict)
    error: str = ""
    status: str = "completed"
    started_at: datetime | None = None
    finished_at: datetime | None = None
    id: uuid.UUID = field(default_factory=uuid.uuid4)


def trace() -> list[Row]:
    goal = Row(1, "goal")
    thought = Row(
        2,
        "thought",
        goal.id,
        {"thought": "run it", "output": "Action: tool:execute_code"},
        started_at=START,
    )
    action = Row(3, "action", thought.id, {"tool_name": "execute_code", "arguments": {"code": "1"}})
    result = Row(
        4,
        "result",
        action.id,
        {"result": {"stdout": "1\n", "exit_code": 0}},
        finished_at=START + timedelta(milliseconds=250),
    )
    unparsed = Row(5, "thought", goal.id, {"thought": "", "output": "hm"}, started_at=START)
    format_error = Row(
        6, "result", unparsed.id, {"result": {"error": "no Action"}}, error="no Action"
    )
    retrieval = Row(
        7,
        "action",
        goal.id,
        {"tool_name": "search_docs", "arguments": {"query": "q"}},
        started_at=START,
    )
    found = Row(8, "result", retrieval.id, {"result": {"results": []}}, finished_at=START)
    answer = Row(9, "response", goal.id, {"answer": "done"})
    return [goal, thought, action, result, unparsed, format_error, retrieval, found, answer]


def test_each_result_is_one_event_in_seq_order_whatever_the_rows_order():
    rows = trace()
    events = step_events_of(reversed(rows))

    assert [e["step_index"] for e in events] == [1, 2, 3]
    assert [e["step_id"] for e in events] == [str(rows[1].id), str(rows[4].id), str(rows[6].id)]


def test_a_tool_call_carries_its_thought_arguments_and_structured_result():
    rows = trace()
    (event, _, _) = step_events_of(rows)

    assert event == {
        "type": "step",
        "step_index": 1,
        "step_id": str(rows[1].id),
        "action_id": str(rows[2].id),
        "thought": "run it",
        "action_raw": "Action: tool:execute_code",
        "tool_name": "execute_code",
        "tool_args": {"code": "1"},
        "observation": {"stdout": "1\n", "exit_code": 0},
        "error": None,
        "status": "completed",
        "outcome": {
            "kind": "ok",
            "label": "ok",
            "reason": "",
            "summary": "ok",
            "is_error": False,
        },
        "started_at_ms": int(START.timestamp() * 1000),
        "finished_at_ms": int(START.timestamp() * 1000) + 250,
        "latency_ms": 250,
    }


def test_a_reply_without_a_tool_and_a_retrieval_have_their_own_shapes():
    _, unparsed, retrieval = step_events_of(trace())

    assert (unparsed["tool_name"], unparsed["error"]) == (None, "no Action")
    assert unparsed["observation"] == {"error": "no Action"}
    assert unparsed["finished_at_ms"] == unparsed["started_at_ms"]  # no end stored: no latency
    assert (retrieval["thought"], retrieval["tool_name"]) == ("", "search_docs")
    assert retrieval["tool_args"] == {"query": "q"}


def test_rows_whose_data_is_not_an_object_still_project():
    goal = Row(1, "goal")
    thought = Row(2, "thought", goal.id, data=["not", "an", "object"])
    result = Row(3, "result", thought.id, data="text")

    (event,) = step_events_of([goal, thought, result])

    assert (event["thought"], event["observation"], event["tool_args"]) == ("", None, None)
    assert step_event(1, thought=None, action=None, result=result)["step_id"] == str(result.id)


def test_a_failing_program_carries_its_outcome():
    rows = trace()
    rows[3].data = {"result": {"stdout": "", "stderr": "ZeroDivisionError", "exit_code": 1}}
    rows[3].status = "failed"

    (event, _, _) = step_events_of(rows)

    assert event["status"] == "failed"
    assert (event["outcome"]["kind"], event["outcome"]["summary"]) == (
        "failed",
        "failed · exit code 1",
    )


def test_a_tool_call_cut_short_is_an_event_of_its_own_in_its_actions_place():
    goal = Row(1, "goal", status="skipped")
    thought = Row(2, "thought", goal.id, {"thought": "sleep"}, started_at=START)
    action = Row(
        3,
        "action",
        thought.id,
        {"tool_name": "execute_code", "arguments": {"code": "import time"}},
        status="skipped",
        finished_at=START + timedelta(seconds=2),
    )
    running = Row(4, "action", thought.id, {"tool_name": "wait"}, status="running")

    (event,) = step_events_of([goal, thought, action, running])

    assert (event["tool_name"], event["thought"], event["observation"]) == (
        "execute_code",
        "sleep",
        None,
    )
    assert event["status"] == "skipped"
    assert event["outcome"]["kind"] == "cancelled"
    assert event["latency_ms"] == 2000
