"""The debug panel's join of messages and steps (``chat.debug.debug_view``), on unsaved rows
shaped as the run recorder writes them (each message pointing at its step): no database."""

from __future__ import annotations

import json
import random
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from html.parser import HTMLParser
from typing import Any

import pytest
from django.template.loader import render_to_string

from agent.models import AgentRun
from chat.debug import (
    MESSAGE_FIELDS,
    RUN_FIELDS,
    STEP_FIELDS,
    DebugEntry,
    DebugView,
    debug_view,
    debug_view_json,
)
from chat.debug_layout import panel_layout
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
    """Rows of one conversation, written as the run recorder writes them."""

    id: uuid.UUID = field(default_factory=uuid.uuid4)
    messages: list[Message] = field(default_factory=list)
    runs: list[AgentRun] = field(default_factory=list)
    steps: list[Step] = field(default_factory=list)
    clock: float = 0.0
    step_seq: dict[uuid.UUID, int] = field(default_factory=dict)

    def tick(self) -> datetime:
        self.clock += 1
        return at(self.clock)

    def run(
        self,
        *,
        status: str = "completed",
        mode: str = "agent",
        error: str = "",
        error_code: str = "",
        text: str = "question",
    ) -> AgentRun:
        """A run with its trace's goal step (whose id is the run's, as ``run_create`` writes
        it, holding the run's ``error`` as the recorder writes it), asked ``text``: its user
        message is stored with it."""
        run = AgentRun(
            id=uuid.uuid4(),
            trace_id=uuid.uuid4(),
            request_id=uuid.uuid4().hex,
            mode=mode,
            status=status,
            input=text,
            model="fake-model",
            error_code=error_code,
            created_at=self.tick(),
            started_at=at(self.clock + 0.1),
            finished_at=at(self.clock + 50)
            if status in ("completed", "failed", "cancelled")
            else None,
        )
        self.runs.append(run)
        goal = self.step(
            run,
            "goal",
            id=run.id,
            name="task",
            description=text,
            error=error,
            status="running" if status == "running" else "completed",
            started_at=at(self.clock),
        )
        self.message("user", text, run=run, step=goal)
        return run

    def message(
        self,
        role: str,
        content: str,
        *,
        run: AgentRun | None = None,
        kind: str = "turn",
        step: Step | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> Message:
        message = Message(
            id=uuid.uuid4(),
            conversation_id=self.id,
            role=role,
            kind=kind,
            content=content,
            run_id=run.id if run else None,
            step_id=step.id if step else None,
            request_id=run.request_id if run else "",
            sequence=len(self.messages) + 1,
            metadata=metadata or {},
            created_at=self.tick(),
        )
        self.messages.append(message)
        return message

    def step(
        self, run: AgentRun, step_type: str, *, parent: Step | None = None, **fields: Any
    ) -> Step:
        assert run.trace_id is not None
        self.step_seq[run.id] = self.step_seq.get(run.id, 0) + 1
        fields.setdefault("id", uuid.uuid4())
        fields.setdefault("status", "completed")
        fields.setdefault("started_at", at(self.clock))  # the store gives every step a start
        step = Step(
            trace_id=run.trace_id,
            parent_id=parent.id if parent else run.id if step_type != "goal" else None,
            seq=self.step_seq[run.id],
            step_type=step_type,
            created_at=self.tick(),
            **fields,
        )
        self.steps.append(step)
        return step

    def memory(self, run: AgentRun, facts: str | None = None) -> tuple[Step, Step]:
        """The two memory reads; the long-term one given to the model as a message."""
        short = self.step(
            run, "memory_read", name="short-term memory", description="0 earlier turns"
        )
        long = self.step(run, "memory_read", name="long-term memory", description="1 facts")
        if facts is not None:
            self.message("system", facts, run=run, kind="memory", step=long)
        return short, long

    def thought(self, run: AgentRun, *, tokens: tuple[int, int] = (10, 5)) -> Step:
        return self.step(
            run,
            "thought",
            name="iteration",
            description="thinking",
            data={
                "thought": "thinking",
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
        observation: Any = '{"results": []}',
        error: str = "",
        store_messages: bool = True,
    ) -> tuple[Step, Step | None, Step]:
        """One ReAct iteration: thought, action (none when ``tool`` is None: an unparsable
        reply) and result, and the two step messages when ``store_messages`` (a finished run's
        transcript)."""
        thought = self.thought(run)
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
        if store_messages:
            self.transcript(run, thought, result)
        return thought, action, result

    def transcript(self, run: AgentRun, thought: Step, result: Step) -> None:
        reply = f"Thought: go\nAction: tool:{result.name}"
        self.message("assistant", reply, run=run, kind="step", step=thought)
        observation = result.data["observation"]
        text = observation if isinstance(observation, str) else json.dumps(observation)
        self.message("tool", text, run=run, kind="step", step=result)

    def answer(self, run: AgentRun, text: str = "the answer", *, store: bool = True) -> Step:
        response = self.step(run, "response", name="answer")
        if store:
            self.message(
                "assistant",
                text,
                run=run,
                step=response,
                metadata={"model": "fake-model", "mode": run.mode},
            )
        return response

    def view(self, **rows: Any) -> DebugView:
        return debug_view(
            conversation_id=self.id,
            title="t",
            runs=values(rows.get("runs", self.runs), RUN_FIELDS),
            steps=values(rows.get("steps", self.steps), STEP_FIELDS),
            messages=values(rows.get("messages", self.messages), MESSAGE_FIELDS),
        )


def values(objects: list[Any], fields: tuple[str, ...]) -> list[dict[str, Any]]:
    """Unsaved rows as ``QuerySet.values(*fields)`` reads them."""
    return [{name: getattr(obj, name) for name in fields} for obj in objects]


def entries(view: DebugView) -> list[DebugEntry]:
    return [entry for group in view.groups for entry in group.entries]


def labels(view: DebugView) -> list[str]:
    return [entry.label for entry in entries(view)]


def keys(view: DebugView) -> list[str]:
    return [entry.key for entry in entries(view)]


def group_shape(view: DebugView) -> list[tuple[str, int]]:
    return [(group.key, len(group.entries)) for group in view.groups]


def completed_agent_run(c: Conversation, **options: Any) -> AgentRun:
    run = c.run(**options)
    c.memory(run, "Long-term memory: likes tea")
    c.iteration(run)
    thought = c.thought(run)
    c.message(
        "assistant", "Thought: done\nAction: final: the answer", run=run, kind="step", step=thought
    )
    c.answer(run)
    return run


# --- entries --------------------------------------------------------------------------------------


def test_a_finished_agent_run_reads_in_step_order_each_step_with_its_message():
    c = Conversation()
    run = completed_agent_run(c)
    view = c.view()
    assert labels(view) == [
        "User",
        "Memory · short-term memory",
        "Memory · long-term memory",
        "Model · Tools",
        "Tool · search_docs",
        "Model",
        "Answer",
    ]
    goal, _, long_term, thought, action, result, _, response = c.steps
    assert keys(view) == [
        f"step:{goal.id}",
        f"step:{c.steps[1].id}",
        f"step:{long_term.id}",
        f"step:{thought.id}",
        f"step:{action.id}",
        f"step:{c.steps[6].id}",
        f"step:{response.id}",
    ]
    assert entries(view)[0].id == str(run.id)  # the goal step's id is the run's
    assert [e.sequence for e in entries(view)] == [1, None, 2, 3, 4, 5, 6]
    request, short, memory, model_call, tool_call, _, answer = entries(view)
    assert request.summary == "question"
    assert (short.summary, short.raw.keys()) == ("0 earlier turns", {"step"})
    assert memory.summary == "Long-term memory: likes tea"
    assert model_call.summary == "Thought: go Action: tool:search_docs"
    assert set(model_call.raw) == {"message", "step"}
    assert set(tool_call.raw) == {"message", "action", "result"}
    assert tool_call.raw["result"]["id"] == str(result.id)
    assert (answer.summary, answer.model, answer.role) == ("the answer", "fake-model", "assistant")
    # Stored finished with a start but neither an end nor a duration: no span of their own.
    assert [e.timed for e in entries(view)] == [False, False, False, True, True, True, False]
    assert view.counts == {"all": 7, "user": 1, "model": 3, "tool": 1, "error": 0, "system": 2}


def test_an_entry_carries_model_usage_times_in_utc_and_the_stored_duration_only():
    c = Conversation()
    completed_agent_run(c)
    model_call, tool_call = entries(c.view())[3:5]
    thought, action = c.steps[3:5]
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
    assert (tool_call.model, tool_call.usage, tool_call.step_seq) == ("", None, action.seq)


def test_a_duration_is_never_computed_from_wall_clock_times():
    c = Conversation()
    run = c.run()
    _, action, _ = c.iteration(run)
    assert action is not None
    action.duration_ms = None
    tool_call = entries(c.view())[2]
    assert (tool_call.started_at, tool_call.finished_at) != (None, None)
    assert tool_call.duration_ms is None


@pytest.mark.parametrize(
    ("error", "observation", "stored", "summary"),
    [
        ("boom", "some output", True, "boom"),
        ("", "some\n  output", True, "some output"),
        # Not in the transcript yet: the result's structured observation.
        ("", {"stdout": "4\n", "exit_code": 0}, False, '{"exit_code": 0, "stdout": "4\\n"}'),
        ("", "", True, '{"query": "q"}'),
    ],
)
def test_a_tool_call_summary_is_its_error_else_its_output_else_its_input(
    error, observation, stored, summary
):
    c = Conversation()
    run = c.run()
    c.iteration(run, error=error, observation=observation, store_messages=stored)
    tool_call = entries(c.view())[2]
    assert tool_call.summary == summary
    assert tool_call.status == ("failed" if error else "completed")
    assert tool_call.filters == (("tool", "error") if error else ("tool",))


def test_a_tool_still_running_shows_its_action_and_arguments():
    c = Conversation()
    run = c.run(status="running")
    thought = c.thought(run)
    action = c.step(
        run,
        "action",
        parent=thought,
        status="running",
        name="execute_code",
        data={"tool_name": "execute_code", "arguments": {"code": "print(4)"}},
        started_at=at(c.clock),
    )
    tool_call = entries(c.view())[-1]
    assert (tool_call.key, tool_call.status, tool_call.summary) == (
        f"step:{action.id}",
        "running",
        '{"code": "print(4)"}',
    )
    assert set(tool_call.raw) == {"action"}
    assert entries(c.view())[1].label == "Model · Tools"


def test_a_reply_the_loop_could_not_parse_is_a_model_call_and_a_failed_tool_call():
    c = Conversation()
    run = c.run()
    thought, action, result = c.iteration(run, tool=None)
    assert action is None
    model_call, tool_call = entries(c.view())[1:]
    assert (model_call.label, tool_call.label) == ("Model", "Tool · format")
    assert (model_call.key, tool_call.key) == (f"step:{thought.id}", f"step:{result.id}")
    assert tool_call.summary == "The reply has no Action."
    assert tool_call.filters == ("tool", "error")
    assert set(tool_call.raw) == {"message", "result"}


def test_a_summary_is_one_line_of_at_most_200_characters():
    c = Conversation()
    c.message("user", "line one\n\n  line two " + "x" * 300)
    (entry,) = entries(c.view())
    assert entry.summary.startswith("line one line two xxx")
    assert len(entry.summary) == 200
    assert entry.summary.endswith("…")


# --- failed, cancelled, running -----------------------------------------------------------------


def test_a_failed_run_ends_with_its_error():
    c = Conversation()
    run = c.run(status="failed", error="model down", error_code="llm_unavailable")
    c.iteration(run, tool="execute_code")
    view = c.view()
    assert labels(view) == ["User", "Model · Tools", "Tool · execute_code", "Error"]
    error = entries(view)[-1]
    assert (error.key, error.id, error.summary, error.status, error.role) == (
        f"error:{run.id}",
        str(run.id),
        "llm_unavailable: model down",
        "failed",
        "error",
    )
    assert set(error.raw) == {"run"}
    assert view.groups[0].status == "failed"
    # The request too: its goal step holds the run's error, so its outcome is failed.
    assert [e.label for e in entries(view) if "error" in e.filters] == ["User", "Error"]
    assert view.counts["error"] == 2


def test_a_cancelled_run_keeps_what_it_did_and_says_it_was_cancelled():
    c = Conversation()
    run = c.run(status="cancelled")  # the recorder writes no error: it is derived
    c.iteration(run)
    thought = c.thought(run)  # cancelled during the next model call: no message
    view = c.view()
    assert labels(view) == ["User", "Model · Tools", "Tool · search_docs", "Model", "Error"]
    cut_short = entries(view)[3]
    assert (cut_short.key, cut_short.summary, cut_short.sequence) == (
        f"step:{thought.id}",
        "thinking",
        None,
    )
    assert (entries(view)[-1].summary, entries(view)[-1].status) == ("Cancelled.", "cancelled")
    assert not view.live


def test_a_running_run_shows_its_steps_and_keeps_their_keys_once_its_messages_are_stored():
    c = Conversation()
    run = c.run(status="running", mode="agent")
    c.memory(run)
    first = c.iteration(run, store_messages=False)
    second = c.iteration(run, tool="execute_code", store_messages=False)
    live = c.view()
    assert live.live
    assert live.groups[0].status == "running"
    assert labels(live) == [
        "User",
        "Memory · short-term memory",
        "Memory · long-term memory",
        "Model · Tools",
        "Tool · search_docs",
        "Model · Tools",
        "Tool · execute_code",
    ]
    assert [e.sequence for e in entries(live)] == [1, None, None, None, None, None, None]
    assert entries(live)[3].summary == "thinking"  # the step's thought until the transcript
    assert entries(live)[0].status == "running"  # the goal step
    # The run ends: its transcript and answer stored, the same entries gain their messages.
    c.transcript(run, first[0], first[2])
    c.transcript(run, second[0], second[2])
    c.answer(run)
    run.status = "completed"
    done = c.view()
    assert not done.live
    assert keys(done)[:-1] == keys(live)
    assert labels(done)[-1] == "Answer"
    assert [e.sequence for e in entries(done)] == [1, None, None, 2, 3, 4, 5, 6]
    assert entries(done)[3].summary == "Thought: go Action: tool:search_docs"


def test_a_running_run_whose_answer_is_not_stored_yet():
    c = Conversation()
    run = c.run(status="running", mode="chat")
    call = c.step(
        run,
        "thought",
        name="chat",
        data={"model": "fake-model", "prompt_tokens": 3, "completion_tokens": 2},
        tokens=5,
        started_at=at(10),
        duration_ms=70,
    )
    response = c.answer(run, store=False)
    view = c.view()
    assert labels(view) == ["User", "Model", "Answer"]
    model_call, answer = entries(view)[1:]
    assert (model_call.key, model_call.summary) == (f"step:{call.id}", "chat")
    assert (answer.key, answer.sequence, set(answer.raw)) == (f"step:{response.id}", None, {"step"})
    assert view.live


# --- groups ---------------------------------------------------------------------------------------


def test_runs_are_groups_in_the_order_they_were_created_with_their_stored_fields():
    c = Conversation()
    first = completed_agent_run(c)
    second = c.run(status="failed", error="crashed", error_code="internal_error")
    c.iteration(second)
    view = c.view()
    assert group_shape(view) == [(f"run:{first.id}", 7), (f"run:{second.id}", 4)]
    assert [g.run_id for g in view.groups] == [str(first.id), str(second.id)]
    assert view.groups[1].entries[-2].status == "completed"
    assert (view.groups[1].status, view.groups[0].status) == ("failed", "completed")
    assert (view.groups[0].mode, view.groups[0].model, view.groups[0].trace_id) == (
        "agent",
        "fake-model",
        str(first.trace_id),
    )
    assert view.groups[0].request_id == first.request_id
    assert view.groups[0].started_at == "2025-03-01T12:00:01.100000Z"
    # The rows' own order does not matter.
    shuffled = random.Random(7)
    rows = {name: list(getattr(c, name)) for name in ("messages", "runs", "steps")}
    for name in rows:
        shuffled.shuffle(rows[name])
    assert debug_view_json(c.view(**rows)) == debug_view_json(view)


def test_two_runs_of_one_conversation_interleaved_in_time_stay_whole():
    c = Conversation()
    first, second = c.run(text="one"), c.run(text="two")
    # Both ran at once: their steps and messages alternate in time and in sequence.
    a = c.iteration(first, store_messages=False)
    b = c.iteration(second, store_messages=False)
    c.transcript(second, b[0], b[2])
    c.transcript(first, a[0], a[2])
    c.answer(second, "two done")
    c.answer(first, "one done")
    view = c.view()
    assert group_shape(view) == [(f"run:{first.id}", 4), (f"run:{second.id}", 4)]
    assert [e.summary for e in view.groups[0].entries] == [
        "one",
        "Thought: go Action: tool:search_docs",
        '{"results": []}',
        "one done",
    ]
    assert [e.summary for e in view.groups[1].entries][::3] == ["two", "two done"]
    assert {e.run_id for e in view.groups[0].entries} == {str(first.id)}


def test_messages_of_no_run_form_unlinked_groups_at_their_place():
    c = Conversation()
    history = c.message("user", "earlier, sent as history")
    c.message("assistant", "an earlier answer")
    first = completed_agent_run(c)
    note = c.message("system", "not from any run")
    second = completed_agent_run(c)
    view = c.view()
    assert group_shape(view) == [
        (f"unlinked:{history.id}", 2),
        (f"run:{first.id}", 7),
        (f"unlinked:{note.id}", 1),
        (f"run:{second.id}", 7),
    ]
    assert (view.groups[0].run_id, view.groups[0].status) == (None, None)
    assert labels(view)[:2] == ["User", "Answer"]
    assert entries(view)[0].key == f"message:{history.id}"
    assert labels(view)[9] == "System"


def test_a_message_whose_step_was_deleted_still_shows_at_its_place():
    c = Conversation()
    run = completed_agent_run(c)
    thought = c.steps[3]
    model_message = next(m for m in c.messages if m.step_id == thought.id)
    # The step deleted (the key set null), or never linked (an old row).
    model_message.step_id = None
    steps = [s for s in c.steps if s.id != thought.id]
    view = c.view(steps=steps)
    assert labels(view) == [
        "User",
        "Memory · short-term memory",
        "Memory · long-term memory",
        "Model",
        "Tool · search_docs",
        "Model",
        "Answer",
    ]
    lost = entries(view)[3]
    assert (lost.key, lost.run_id, lost.sequence, lost.timed) == (
        f"message:{model_message.id}",
        str(run.id),
        model_message.sequence,
        False,
    )
    assert lost.summary == "Thought: go Action: tool:search_docs"
    # A message naming a step that is not read joins nothing either.
    model_message.step_id = uuid.uuid4()
    assert keys(c.view(steps=steps)) == keys(view)


def test_two_messages_naming_one_step_both_show():
    c = Conversation()
    run = c.run()
    thought, _, _ = c.iteration(run)
    again = c.message("assistant", "a copy", run=run, kind="step", step=thought)
    view = c.view()
    assert keys(view)[-1] == f"message:{again.id}"
    assert len(entries(view)) == 4


def test_a_run_with_no_messages_gets_its_group_in_creation_order():
    c = Conversation()
    first = completed_agent_run(c)
    cancelled = AgentRun(
        id=uuid.uuid4(),
        trace_id=None,
        request_id="",
        mode="agent",
        status="cancelled",
        input="never asked",
        model="fake-model",
        error_code="",
        created_at=c.tick(),
    )
    c.runs.append(cancelled)
    third = completed_agent_run(c)
    view = c.view()
    assert group_shape(view) == [
        (f"run:{first.id}", 7),
        (f"run:{cancelled.id}", 1),
        (f"run:{third.id}", 7),
    ]
    assert labels(view)[7] == "Error"


def test_messages_of_a_run_not_read_yet_show_under_its_id():
    c = Conversation()
    first = completed_agent_run(c)
    newer = c.run(status="running")
    view = c.view(runs=[first])
    assert group_shape(view) == [(f"run:{first.id}", 7), (f"run:{newer.id}", 1)]
    assert (view.groups[1].status, entries(view)[-1].key) == (None, f"message:{c.messages[-1].id}")


# --- size and shape -------------------------------------------------------------------------------


def test_two_thousand_calls_in_one_run_join_into_one_group_in_order():
    c = Conversation()
    run = c.run(status="running")
    for index in range(1000):
        c.iteration(run, store_messages=index < 500)
    view = c.view()
    assert group_shape(view) == [(f"run:{run.id}", 2001)]
    calls = entries(view)[1:]
    assert [e.kind for e in calls] == ["model", "tool"] * 1000
    assert [e.step_seq for e in calls] == sorted(e.step_seq for e in calls)  # type: ignore[type-var]
    assert view.counts["model"] == view.counts["tool"] == 1000


def test_the_json_view_is_plain_json():
    c = Conversation()
    completed_agent_run(c)
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


class Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))


def test_hostile_text_is_escaped_in_the_panel_html():
    hostile = '"><script>window.pwned = 1</script><img src=x onerror="window.pwned = 2">'
    c = Conversation()
    run = c.run(status="failed", error=hostile, text=hostile)
    c.iteration(run, tool=hostile, observation=hostile)
    view = c.view()
    html = render_to_string(
        "chat/_debug_panel.html",
        {
            "view": view,
            "layout": panel_layout(view=view),
            "view_json": debug_view_json(view),
            "filters": [],
            "panel_url": "/panel/",
        },
    )
    parser = Tags()
    parser.feed(html)
    assert [attrs for tag, attrs in parser.tags if tag == "script"] == [
        {"id": "dbg-data", "type": "application/json"}
    ]
    assert not [tag for tag, attrs in parser.tags if tag == "img" or "onerror" in attrs]
    assert "&lt;script&gt;window.pwned = 1&lt;/script&gt;" in html
    start = html.index('<script id="dbg-data" type="application/json">')
    data = json.loads(html[html.index(">", start) + 1 : html.index("</script>", start)])
    assert data == debug_view_json(view)
