"""The ``step`` event of a run, derived from the steps of its trace.

One ReAct iteration is recorded as a ``thought`` step (the model call), its ``action`` child
(the tool call) and the action's ``result`` (the tool's structured result); a reply the loop
could not parse has its ``result`` right under the ``thought``, and a RAG run's retrieval is an
``action`` under the goal with its ``result``. Each ``result`` step is one ``step`` event, in
``seq`` order: the recorder sends it live from the steps it writes, and readers (the chat page,
``POST /agent``, the staff listing) derive the same dicts from the stored rows. A tool call the
run cut short (an ``action`` that ended without a result: skipped when the run was stopped,
failed when it failed) is a ``step`` event of its own for those readers, in its action's place.

Each event carries its ``status`` (the result step's, or the cut-short action's) and its
``outcome`` (``traces.outcomes.step_outcome``), so every reader shows the same state.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any, Protocol

from traces.models import StepStatus, StepType
from traces.outcomes import step_outcome


class StepLike(Protocol):
    """What the projection reads of a step: a stored ``Step`` or a ``StepCreate``."""

    @property
    def id(self) -> Any: ...
    @property
    def data(self) -> Any: ...
    @property
    def step_type(self) -> str: ...
    @property
    def status(self) -> str: ...
    @property
    def error(self) -> str: ...
    @property
    def started_at(self) -> datetime | None: ...
    @property
    def finished_at(self) -> datetime | None: ...


def step_event(
    index: int, *, thought: StepLike | None, action: StepLike | None, result: StepLike
) -> dict[str, Any]:
    """The ``step`` event of one iteration (ARCHITECTURE.md §4): ``observation`` is the
    result step's structured result; times are epoch milliseconds, from the thought's start
    (the action's, without one) to the result's end. ``result`` is the cut-short action itself
    for a tool call that has no result (``observation`` None). ``step_id`` is the iteration's
    first step (its model call: the calls of one native-tool-calling reply share it);
    ``action_id`` the tool call's ``action`` step (the ``step_id`` of its ``step_started`` and
    ``output`` events), None for a reply that called no tool."""
    thought_data = _data(thought)
    action_data = _data(action)
    first = thought if thought is not None else action if action is not None else result
    started = _ms(first.started_at)
    finished = _ms(result.finished_at) or started
    outcome = step_outcome(result.step_type, result.status, result.error, result.data)
    return {
        "type": "step",
        "step_index": index,
        "step_id": str(first.id),
        "action_id": str(action.id) if action is not None else None,
        "thought": str(thought_data.get("thought", "")),
        "action_raw": str(thought_data.get("output", "")),
        "tool_name": action_data.get("tool_name"),
        "tool_args": action_data.get("arguments"),
        "observation": _data(result).get("result") if result is not action else None,
        "error": result.error or None,
        "status": result.status,
        "outcome": outcome.as_dict(),
        "started_at_ms": started,
        "finished_at_ms": finished,
        "latency_ms": max(0, finished - started),
    }


def step_started_event(index: int, *, action: StepLike) -> dict[str, Any]:
    """The ``step_started`` event of a tool call (an extension of the stream): the ``action``
    step's id, the ``step_index`` its ``step`` event will have, the tool and its arguments,
    and when it started (epoch milliseconds)."""
    data = _data(action)
    return {
        "type": "step_started",
        "step_index": index,
        "step_id": str(action.id),
        "tool_name": data.get("tool_name"),
        "tool_args": data.get("arguments"),
        "started_at_ms": _ms(action.started_at),
    }


def step_events_of(steps: Iterable[Any]) -> list[dict[str, Any]]:
    """The ``step`` events of one trace's stored steps (any order; ``Step`` rows with ``id``,
    ``parent_id``, ``seq``, ``step_type``, ``status``, ``data``, ``error``, ``started_at``,
    ``finished_at``)."""
    rows = sorted(steps, key=lambda step: step.seq)
    by_id = {step.id: step for step in rows}
    answered = {step.parent_id for step in rows if step.step_type == StepType.RESULT}
    events: list[dict[str, Any]] = []
    for step in rows:
        if step.step_type == StepType.RESULT:
            parent = by_id.get(step.parent_id)
            action = parent if parent is not None and parent.step_type == StepType.ACTION else None
        elif step.step_type == StepType.ACTION and step.id not in answered and step.status in _CUT:
            parent, action = step, step
        else:
            continue
        above = by_id.get(action.parent_id) if action is not None else parent
        thought = above if above is not None and above.step_type == StepType.THOUGHT else None
        events.append(step_event(len(events) + 1, thought=thought, action=action, result=step))
    return events


#: The statuses of a tool call the run ended before its result.
_CUT = frozenset({StepStatus.SKIPPED, StepStatus.FAILED})


def _data(step: StepLike | None) -> dict[str, Any]:
    data = step.data if step is not None else None
    return data if isinstance(data, dict) else {}


def _ms(moment: datetime | None) -> int:
    return int(moment.timestamp() * 1000) if moment is not None else 0


def step_times_ns(step: Any) -> tuple[int, int]:
    """A stored step's (start, end) in ns since the epoch, as the exporters (OTel, Langfuse)
    send it: its start plus its duration, or its finish (never before its start)."""
    start = int((step.started_at or step.created_at).timestamp() * 1_000_000_000)
    if step.duration_ms is not None:
        return start, start + step.duration_ms * 1_000_000
    if step.finished_at is None:
        return start, start
    return start, max(start, int(step.finished_at.timestamp() * 1_000_000_000))
