"""The debug panel's merge and grouping rules (``chat.debug.debug_view``), on unsaved rows shaped
as the run recorder writes them: no database."""

from __future__ import annotations

import json
import random
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from agent.models import AgentRun, RunEvent
from chat.debug import DebugEntry, DebugView, debug_view, debug_view_json
from chat.models import Message
from traces.models import Step

T0 = datetime(2025, 3, 1, 12, 0, 0, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def z(value: datetime | None) -> str:
    """A stored time as the view shows it: ISO-8601 in UTC with a ``Z``."""
    assert value is not None
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")


@dataclass
class Conversation:
    """Rows of one conversation, written in the order the run recorder writes them."""

    id: uuid.UUID = field(default_factory=uuid.uuid4)
    messages: list[Message] = field(default_factory=list)
    runs: list[AgentRun] = field(default_factory=list)
    steps: list[Step] = field(default_factory=list)
    events: list[RunEvent] = field(default_factory=list)
    clock: float = 0.0
    step_seq: dict[uuid.UUID, int] = field(default_factory=dict)
    event_seq: dict[uuid.UUID, int] = field(default_factory=dict)

    def tick(self) -> datetime:
        self.clock += 1
        return at(self.clock)

    def run(
        self,
        request_id: str = "",
        *,
        status: str = "completed",
        mode: str = "agent",
        error: str = "",
        error_code: str = "",
        text: str = "question",
    ) -> AgentRun:
        run = AgentRun(
            id=uuid.uuid4(),
            trace_id=uuid.uuid4(),
            request_id=request_id,
            mode=mode,
            status=status,
            input=text,
            model="fake-model",
            error=error,
            error_code=error_code,
            created_at=self.tick(),
            started_at=None if status == "queued" else at(self.clock + 0.1),
            finished_at=at(self.clock + 50)
            if status in ("completed", "failed", "cancelled")
            else None,
        )
        self.runs.append(run)
        return run

    def message(
        self,
        role: str,
        content: str,
        *,
        run: AgentRun | None = None,
        kind: str = "turn",
        metadata: dict[str, Any] | None = None,
        request_id: str | None = None,
    ) -> Message:
        message = Message(
            id=uuid.uuid4(),
            conversation_id=self.id,
            role=role,
            kind=kind,
            content=content,
            run_id=run.id if run else None,
            request_id=request_id if request_id is not None else (run.request_id if run else ""),
            sequence=len(self.messages) + 1,
            metadata=metadata or {},
            created_at=self.tick(),
        )
        self.messages.append(message)
        return message

    def ask(self, run: AgentRun) -> Message:
        return self.message("user", run.input, run=run)

    def step(
        self, run: AgentRun, step_type: str, *, parent: Step | None = None, **fields: Any
    ) -> Step:
        assert run.trace_id is not None
        self.step_seq[run.id] = self.step_seq.get(run.id, 0) + 1
        step = Step(
            id=uuid.uuid4(),
            trace_id=run.trace_id,
            parent_id=parent.id if parent else None,
            seq=self.step_seq[run.id],
            step_type=step_type,
            created_at=self.tick(),
            **fields,
        )
        self.steps.append(step)
        return step

    def thought(self, run: AgentRun, reply: str, *, tokens: tuple[int, int] = (10, 5)) -> Step:
        return self.step(
            run,
            "thought",
            status="completed",
            name="iteration",
            description="thinking",
            data={
                "thought": "thinking",
                "action_raw": reply,
                "model": "fake-model",
                "prompt_tokens": tokens[0],
                "completion_tokens": tokens[1],
            },
            tokens=sum(tokens),
            started_at=at(self.clock),
            duration_ms=120,
        )

    def iteration(
        self,
        run: AgentRun,
        *,
        tool: str | None = "search_docs",
        arguments: dict[str, Any] | None = None,
        observation: str = '{"results": []}',
        error: str = "",
        store_messages: bool = True,
        event: bool = False,
    ) -> tuple[Step, Step | None, Step]:
        """One ReAct iteration: thought, action (none when ``tool`` is None: an unparsable
        reply) and result, the step event when ``event``, and the two step messages when
        ``store_messages`` (a finished run's transcript)."""
        reply = f"Thought: go\nAction: tool:{tool}" if tool else "I forgot the format"
        thought = self.thought(run, reply)
        action = None
        if tool is not None:
            action = self.step(
                run,
                "action",
                parent=thought,
                status="failed" if error else "completed",
                name=tool,
                data={"tool_name": tool, "arguments": arguments or {"query": "q"}},
                started_at=at(self.clock),
                finished_at=at(self.clock + 0.5),
                duration_ms=40,
            )
        result = self.step(
            run,
            "result",
            parent=action or thought,
            status="failed" if error or tool is None else "completed",
            name=tool or "format",
            error=error or ("The reply has no Action." if tool is None else ""),
            data={"observation": observation},
        )
        if event:
            self.event(
                run,
                "step",
                step_id=str(thought.id),
                thought="thinking",
                action_raw=reply,
                tool_name=tool,
                tool_args=arguments or {"query": "q"},
                observation=observation,
                error=error or None,
                started_at_ms=int(at(self.clock).timestamp() * 1000),
                finished_at_ms=int(at(self.clock + 1).timestamp() * 1000),
                latency_ms=900,
            )
        if store_messages:
            self.transcript(run, thought, result)
        return thought, action, result

    def transcript(self, run: AgentRun, thought: Step, result: Step) -> None:
        self.message(
            "assistant",
            thought.data["action_raw"],
            run=run,
            kind="step",
            metadata={"step_id": str(thought.id)},
        )
        self.message(
            "tool",
            result.data["observation"],
            run=run,
            kind="step",
            metadata={
                "step_id": str(result.id),
                "tool_name": result.name,
                "error": result.error or None,
            },
        )

    def event(self, run: AgentRun, type_: str, **payload: Any) -> RunEvent:
        self.event_seq[run.id] = self.event_seq.get(run.id, 0) + 1
        event = RunEvent(
            run_id=run.id,
            seq=self.event_seq[run.id],
            type=type_,
            payload={"type": type_, **payload},
            created_at=self.tick(),
        )
        self.events.append(event)
        return event

    def answer(self, run: AgentRun, text: str = "the answer") -> Message:
        return self.message(
            "assistant", text, run=run, metadata={"model": "fake-model", "mode": run.mode}
        )

    def view(self, **rows: Any) -> DebugView:
        return debug_view(
            conversation_id=self.id,
            title="t",
            messages=rows.get("messages", self.messages),
            runs=rows.get("runs", self.runs),
            steps=rows.get("steps", self.steps),
            events=rows.get("events", self.events),
        )


def entries(view: DebugView) -> list[DebugEntry]:
    return [entry for group in view.groups for entry in group.entries]


def labels(view: DebugView) -> list[str]:
    return [entry.label for entry in entries(view)]


def summaries(view: DebugView) -> list[str]:
    return [entry.summary for entry in entries(view)]


def group_shape(view: DebugView) -> list[tuple[str, int]]:
    return [(group.key, len(group.entries)) for group in view.groups]


def completed_agent_run(c: Conversation, request_id: str = "r1") -> AgentRun:
    run = c.run(request_id)
    c.ask(run)
    c.iteration(run)
    c.thought(run, "Thought: done\nAction: final: the answer")
    c.message(
        "assistant",
        "Thought: done\nAction: final: the answer",
        run=run,
        kind="step",
        metadata={"step_id": str(c.steps[-1].id)},
    )
    c.answer(run)
    return run


# --- entries --------------------------------------------------------------------------------------


def test_a_finished_agent_run_reads_in_stored_order_with_its_calls_merged_into_its_messages():
    c = Conversation()
    run = completed_agent_run(c)
    view = c.view()
    assert labels(view) == ["User", "Model · Tools", "Tool · search_docs", "Model", "Model"]
    assert [e.sequence for e in entries(view)] == [1, 2, 3, 4, 5]
    model_call, tool_call = entries(view)[1:3]
    thought, action, result = c.steps[:3]
    assert (model_call.key, model_call.id) == (f"call:{run.id}:model:{thought.id}", str(thought.id))
    assert (tool_call.key, tool_call.id) == (f"call:{run.id}:tool:{action.id}", str(action.id))
    assert set(model_call.raw) == {"message", "step"}
    assert set(tool_call.raw) == {"message", "action", "result"}
    assert tool_call.raw["result"]["id"] == str(result.id)
    assert view.counts == {"all": 5, "user": 1, "model": 3, "tool": 1, "error": 0, "system": 0}


def test_an_entry_carries_model_usage_times_in_utc_and_the_stored_duration_only():
    c = Conversation()
    completed_agent_run(c)
    model_call, tool_call = entries(c.view())[1:3]
    thought, action, _ = c.steps[:3]
    assert model_call.model == "fake-model"
    assert model_call.usage == {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
    assert model_call.started_at == z(thought.started_at)
    assert model_call.finished_at is None  # a model call's step stores no finish
    assert (model_call.duration_ms, model_call.timed) == (120, True)
    assert tool_call.started_at == z(action.started_at)
    assert tool_call.finished_at == z(action.finished_at)
    assert tool_call.finished_at.endswith(".500000Z")
    # The stored duration, not finished - started (500 ms).
    assert tool_call.duration_ms == action.duration_ms == 40
    assert (tool_call.model, tool_call.usage) == ("", None)


def test_a_duration_is_never_computed_from_wall_clock_times():
    c = Conversation()
    run = c.run("r1")
    c.ask(run)
    _, action, _ = c.iteration(run)
    assert action is not None
    action.duration_ms = None
    tool_call = entries(c.view())[2]
    assert (tool_call.started_at, tool_call.finished_at) != (None, None)
    assert tool_call.duration_ms is None


@pytest.mark.parametrize(
    ("error", "observation", "arguments", "summary"),
    [
        ("boom", "some output", {"query": "q"}, "boom"),
        ("", "some\n  output", {"query": "q"}, "some output"),
        ("", "", {"query": "q"}, '{"query": "q"}'),
    ],
)
def test_a_tool_call_summary_is_its_error_else_its_output_else_its_input(
    error, observation, arguments, summary
):
    c = Conversation()
    run = c.run("r1")
    c.ask(run)
    c.iteration(run, error=error, observation=observation, arguments=arguments)
    tool_call = entries(c.view())[2]
    assert tool_call.summary == summary
    assert tool_call.status == ("failed" if error else "completed")
    assert tool_call.filters == (("tool", "error") if error else ("tool",))


def test_labels_of_every_kind_of_entry():
    c = Conversation()
    history = c.message("user", "earlier, sent as history")
    run = c.run("r1", status="failed", error="model down", error_code="llm_unavailable")
    c.ask(run)
    c.message("system", "Long-term memory: likes tea", run=run, kind="memory")
    c.iteration(run, tool="execute_code")
    view = c.view()
    assert labels(view) == [
        "User",
        "User",
        "System",
        "Model · Tools",
        "Tool · execute_code",
        "Error",
    ]
    assert [e.role for e in entries(view)] == [
        "user",
        "user",
        "system",
        "assistant",
        "tool",
        "error",
    ]
    assert entries(view)[0].key == f"message:{history.id}"
    error = entries(view)[-1]
    assert (error.key, error.summary, error.status) == (
        f"error:{run.id}",
        "llm_unavailable: model down",
        "failed",
    )
    assert view.counts == {"all": 6, "user": 2, "model": 1, "tool": 1, "error": 1, "system": 1}


def test_a_summary_is_one_line_of_at_most_200_characters():
    c = Conversation()
    c.message("user", "line one\n\n  line two " + "x" * 300)
    (entry,) = entries(c.view())
    assert entry.summary.startswith("line one line two xxx")
    assert len(entry.summary) == 200
    assert entry.summary.endswith("…")


# --- de-duplication -----------------------------------------------------------------------------


def with_a_live_run(*deltas: str) -> Conversation:
    """A completed agent run, then a run in progress: asked, one iteration only in its events,
    and ``deltas`` of its answer so far."""
    c = Conversation()
    completed_agent_run(c)
    running = c.run("r2", status="running")
    c.ask(running)
    c.iteration(running, store_messages=False, event=True)
    for text in deltas:
        c.event(running, "delta", content=text)
    return c


def test_merging_is_idempotent_and_ignores_the_order_rows_come_in():
    c = with_a_live_run("partial ", "answer")
    once = debug_view_json(c.view())
    twice = debug_view_json(
        c.view(
            messages=c.messages * 2,
            runs=c.runs * 2,
            steps=c.steps + c.steps,
            events=c.events * 2,
        )
    )
    assert twice == once
    shuffled = random.Random(7)
    rows = {name: list(getattr(c, name)) for name in ("messages", "runs", "steps", "events")}
    for name in rows:
        shuffled.shuffle(rows[name])
    assert debug_view_json(c.view(**rows)) == once


def test_entries_are_never_deduplicated_by_position_or_content():
    c = Conversation()
    for request_id in ("r1", "r2"):
        run = c.run(request_id, text="hi")
        c.ask(run)
        c.answer(run, "hello")
    view = c.view()
    assert summaries(view) == ["hi", "hello", "hi", "hello"]
    assert len({e.key for e in entries(view)}) == 4


def test_requests_sharing_a_request_id_stay_apart():
    c = Conversation()
    first, second = c.run("reused"), c.run("reused")
    c.ask(first)
    c.ask(second)
    third = c.run("reused", status="queued")
    c.message("user", "a message without a run", request_id="reused")
    view = c.view()
    assert [e.key for e in entries(view)] == [
        "request:reused",
        f"request:run:{second.id}",
        f"message:{c.messages[2].id}",
        f"request:run:{third.id}",
    ]
    assert [e.status for e in entries(view)] == ["completed", "completed", "completed", "queued"]


def test_a_model_call_and_a_tool_call_sharing_an_operation_id_stay_two_entries():
    c = Conversation()
    run = c.run("r1")
    c.ask(run)
    thought, action, result = c.iteration(run, tool=None)
    assert action is None
    assert result.parent_id == thought.id
    model_call, tool_call = entries(c.view())[1:]
    assert (model_call.label, tool_call.label) == ("Model", "Tool · format")
    assert model_call.id == tool_call.id == str(thought.id)
    assert model_call.key != tool_call.key
    assert tool_call.summary == "The reply has no Action."
    assert tool_call.filters == ("tool", "error")


@pytest.mark.parametrize(
    ("stored", "live", "shown"),
    [
        (
            "Thought: go\nAction: tool:search_docs",
            "Thought: go",
            "Thought: go Action: tool:search_docs",
        ),
        (
            "Thought: go",
            "Thought: go\nAction: tool:search_docs",
            "Thought: go Action: tool:search_docs",
        ),
    ],
)
def test_a_stored_and_a_live_row_of_one_model_call_become_one_entry_the_fuller_winning(
    stored, live, shown
):
    c = Conversation()
    run = c.run("r1", status="running")
    c.ask(run)
    thought, _, _ = c.iteration(run, store_messages=False)
    thought.data["action_raw"] = stored
    c.event(run, "step", step_id=str(thought.id), action_raw=live, tool_name="search_docs")
    view = c.view()
    model_calls = [e for e in entries(view) if e.kind == "model"]
    assert len(model_calls) == 1
    assert model_calls[0].summary == shown
    assert set(model_calls[0].raw) == {"step", "event"}
    tool_calls = [e for e in entries(view) if e.kind == "tool"]
    assert len(tool_calls) == 1
    assert set(tool_calls[0].raw) == {"action", "result", "event"}


def test_a_live_step_event_without_its_steps_shows_what_it_carries():
    c = Conversation()
    run = c.run("r1", status="running")
    c.ask(run)
    step_id = uuid.uuid4()
    c.event(
        run,
        "step",
        step_id=str(step_id),
        action_raw="Thought: x\nAction: tool:execute_code",
        tool_name="execute_code",
        observation="4",
        error=None,
        started_at_ms=int(at(100).timestamp() * 1000),
    )
    _, model_call, tool_call = entries(c.view())
    assert (model_call.label, model_call.started_at, model_call.status) == (
        "Model · Tools",
        "2025-03-01T12:01:40Z",
        "completed",
    )
    assert (tool_call.label, tool_call.summary, tool_call.timed) == (
        "Tool · execute_code",
        "4",
        False,
    )
    assert model_call.key == f"call:{run.id}:model:{step_id}"
    assert tool_call.key == f"call:{run.id}:tool:{step_id}"


def test_a_live_answer_shows_until_the_answer_message_is_stored():
    c = Conversation()
    run = c.run("r1", status="running", mode="chat")
    c.ask(run)
    c.event(run, "delta", content="Hello ")
    c.event(run, "delta", content="world")
    view = c.view()
    assert labels(view) == ["User", "Model"]
    live = entries(view)[-1]
    assert (live.key, live.summary, live.status, live.model) == (
        f"answer:{run.id}",
        "Hello world",
        "running",
        "fake-model",
    )
    assert [e["seq"] for e in live.raw["events"]] == [1, 2]
    c.answer(run, "Hello world")
    view = c.view()
    assert labels(view) == ["User", "Model"]
    assert entries(view)[-1].key == f"message:{c.messages[-1].id}"


# --- placement ------------------------------------------------------------------------------------


def test_calls_without_messages_follow_the_request_in_step_order():
    c = Conversation()
    run = c.run("r1", status="running")
    c.ask(run)
    c.message("system", "memory", run=run, kind="memory")
    first = c.iteration(run, store_messages=False)
    second = c.iteration(run, tool="execute_code", store_messages=False)
    view = c.view()
    assert labels(view) == [
        "User",
        "System",
        "Model · Tools",
        "Tool · search_docs",
        "Model · Tools",
        "Tool · execute_code",
    ]
    assert [e.step_seq for e in entries(view)[2:]] == [
        first[0].seq,
        first[1].seq,  # type: ignore[union-attr]
        second[0].seq,
        second[1].seq,  # type: ignore[union-attr]
    ]
    assert [e.sequence for e in entries(view)] == [1, 2, None, None, None, None]


def test_a_chat_runs_model_call_sits_between_the_question_and_the_answer():
    c = Conversation()
    run = c.run("r1", mode="chat")
    c.ask(run)
    call = c.step(
        run,
        "thought",
        name="chat",
        data={"model": "fake-model", "prompt_tokens": 3, "completion_tokens": 2},
        tokens=5,
        started_at=at(10),
        duration_ms=70,
    )
    c.answer(run, "hi there")
    view = c.view()
    assert labels(view) == ["User", "Model", "Model"]
    assert entries(view)[1].key == f"call:{run.id}:model:{call.id}"
    assert entries(view)[1].summary == "chat"


def test_a_call_without_its_message_goes_after_the_previous_call_of_its_run():
    c = Conversation()
    run = c.run("r1")
    c.ask(run)
    first = c.iteration(run, store_messages=False)
    second = c.iteration(run, store_messages=False)
    c.transcript(run, first[0], first[2])  # only the first iteration's messages are stored
    c.answer(run)
    del second
    assert labels(c.view()) == [
        "User",
        "Model · Tools",
        "Tool · search_docs",
        "Model · Tools",
        "Tool · search_docs",
        "Model",
    ]
    assert [e.sequence for e in entries(c.view())] == [1, 2, 3, None, None, 4]


# --- groups ---------------------------------------------------------------------------------------


def test_consecutive_entries_of_a_run_form_a_group_with_the_runs_stored_status():
    c = Conversation()
    first = completed_agent_run(c, "r1")
    second = c.run("r2", status="failed", error="crashed", error_code="internal_error")
    c.ask(second)
    c.iteration(second)
    view = c.view()
    assert group_shape(view) == [("request:r1", 5), ("request:r2", 4)]
    assert [g.run_id for g in view.groups] == [str(first.id), str(second.id)]
    # The failed run's last message is a successful tool call; its status is the run's.
    assert view.groups[1].entries[-2].status == "completed"
    assert view.groups[1].status == "failed"
    assert view.groups[0].status == "completed"
    assert (view.groups[0].mode, view.groups[0].model, view.groups[0].trace_id) == (
        "agent",
        "fake-model",
        str(first.trace_id),
    )
    assert view.groups[0].started_at == "2025-03-01T12:00:01.100000Z"


def test_an_unlinked_system_message_between_two_runs_forms_its_own_group():
    c = Conversation()
    completed_agent_run(c, "r1")
    note = c.message("system", "not from any run")
    completed_agent_run(c, "r2")
    view = c.view()
    assert group_shape(view) == [
        ("request:r1", 5),
        (f"unlinked:message:{note.id}", 1),
        ("request:r2", 5),
    ]
    assert (view.groups[1].run_id, view.groups[1].status) == (None, None)


def test_a_run_without_a_request_id_is_keyed_by_its_run_id():
    c = Conversation()
    run = c.run("")
    c.ask(run)
    assert group_shape(c.view()) == [(f"run:{run.id}", 1)]
    assert entries(c.view())[0].key == f"request:run:{run.id}"


def test_two_stretches_of_the_same_run_get_distinct_group_keys():
    c = Conversation()
    first, second = c.run("r1"), c.run("r2")
    c.ask(first)
    c.ask(second)  # the second request arrived while the first ran
    c.answer(first)
    c.answer(second)
    view = c.view()
    assert group_shape(view) == [
        ("request:r1", 1),
        ("request:r2", 1),
        ("request:r1#2", 1),
        ("request:r2#2", 1),
    ]


def test_a_run_with_no_messages_gets_its_group_without_moving_the_others():
    c = Conversation()
    completed_agent_run(c, "r1")
    cancelled = c.run("r2", status="cancelled", error="Cancelled.")
    completed_agent_run(c, "r3")
    before = [e.key for e in entries(c.view()) if e.run_id != str(cancelled.id)]
    view = c.view()
    assert group_shape(view) == [("request:r1", 5), ("request:r2", 1), ("request:r3", 5)]
    assert labels(view)[5] == "Error"
    assert view.groups[1].status == "cancelled"
    assert [e.key for e in entries(view) if e.run_id != str(cancelled.id)] == before


def test_a_run_with_no_messages_but_calls_shows_them_in_its_group():
    c = Conversation()
    completed_agent_run(c, "r1")
    cancelled = c.run("r2", status="cancelled", error="Cancelled.")
    c.iteration(cancelled, store_messages=False)
    view = c.view()
    assert group_shape(view) == [("request:r1", 5), ("request:r2", 3)]
    assert labels(view)[5:] == ["Model · Tools", "Tool · search_docs", "Error"]


def test_a_queued_request_keeps_its_entry_and_group_key_when_its_run_arrives():
    c = Conversation()
    completed_agent_run(c, "r1")
    queued = c.run("r2", status="queued", text="next question")
    # Queued, its user message not stored yet.
    view = c.view()
    assert group_shape(view) == [("request:r1", 5), ("request:r2", 1)]
    request = entries(view)[-1]
    assert (request.key, request.label, request.summary, request.status, request.sequence) == (
        "request:r2",
        "User",
        "next question",
        "queued",
        None,
    )
    assert set(request.raw) == {"request"}
    assert view.live
    # Its message stored, still queued: one entry.
    c.ask(queued)
    view = c.view()
    assert group_shape(view) == [("request:r1", 5), ("request:r2", 1)]
    assert (entries(view)[-1].key, entries(view)[-1].status) == ("request:r2", "queued")
    assert set(entries(view)[-1].raw) == {"message", "request"}
    # Running, then finished.
    queued.status = "running"
    c.iteration(queued, store_messages=False)
    view = c.view()
    assert group_shape(view) == [("request:r1", 5), ("request:r2", 3)]
    assert (entries(view)[5].key, entries(view)[5].status) == ("request:r2", "completed")
    queued.status = "completed"
    c.answer(queued)
    view = c.view()
    assert group_shape(view) == [("request:r1", 5), ("request:r2", 4)]
    assert not view.live


def test_a_queued_run_created_before_another_goes_before_it():
    c = Conversation()
    queued = c.run("r1", status="queued")
    later = c.run("r2", status="running")
    c.ask(later)
    view = c.view()
    assert group_shape(view) == [("request:r1", 1), ("request:r2", 1)]
    assert view.groups[0].run_id == str(queued.id)


# --- size -----------------------------------------------------------------------------------------


def test_two_thousand_calls_in_one_run_merge_into_one_group_in_order():
    c = Conversation()
    run = c.run("r1", status="running")
    c.ask(run)
    for index in range(1000):
        # Half the transcript is stored, half only live: every source is merged.
        c.iteration(run, store_messages=index < 500, event=index >= 250)
    view = c.view()
    assert group_shape(view) == [("request:r1", 2001)]
    calls = entries(view)[1:]
    assert [e.kind for e in calls] == ["model", "tool"] * 1000
    assert [e.step_seq for e in calls] == sorted(e.step_seq for e in calls)  # type: ignore[type-var]
    assert view.counts["model"] == view.counts["tool"] == 1000


def test_the_json_view_is_plain_json():
    c = with_a_live_run("so far")
    body = debug_view_json(c.view())
    assert json.loads(json.dumps(body)) == body
    assert set(body) == {"conversation_id", "title", "live", "counts", "groups"}
    assert set(body["groups"][0]) == {
        "key",
        "run_id",
        "request_id",
        "status",
        "mode",
        "model",
        "trace_id",
        "created_at",
        "started_at",
        "finished_at",
        "entries",
    }
    assert set(body["groups"][0]["entries"][0]) == set(DebugEntry.__dataclass_fields__)
