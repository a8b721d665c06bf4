"""The superuser debug panel's data: a conversation's messages joined to its runs' steps.

A run is recorded once, in its trace. The messages keep the text the model saw and point at the
step each one records (``Message.step``). ``conversation_debug`` reads the conversation's runs,
the steps of their traces and its messages, and ``debug_view`` joins them; ``debug_view`` and
everything below it are pure (rows in, no database).

Entries: every fact comes from one row, the text from the message, the timing, status, tokens,
tool, arguments and structured result from the steps, the run's error from its goal step (as
``agent.selectors.run_error`` reads it: a cancelled run's is "Cancelled." unless its goal step
says more), shown in the run's record too.

- the user's request: the run's ``goal`` step and the user's message;
- a memory read: a ``memory_read`` step, with the long-term memory message the model was given;
- a model call: a ``thought`` step and the model's raw output (until the run's transcript is
  stored, the step's own description: the thought the loop parsed);
- a tool call: an ``action`` step, its ``result`` step and the tool message (the observation
  the model was sent; until it is stored, the result's structured observation); a ``result``
  without an action (a reply the loop could not parse) is a tool call by itself;
- the answer: the ``response`` step and the answer message;
- the run's error, when it failed or was cancelled;
- a message without a step among those read (a message of no run, or one whose step was
  deleted) is an entry by itself.

Keys are stable ids, so that the panel's refresh finds the same entry again: ``step:<id>`` of
the entry's step (the action of a tool call) from the moment the step is stored, whenever its
message arrives; ``message:<id>`` for a message without a step; ``error:<run id>``. An entry's
``id`` is that bare id.

Order and groups: one group per run, ``run:<run id>``, in the order the runs were created.
Inside a run, its step entries in step ``seq`` order, then its error; a message of the run
without a step goes right before the first entry whose message comes after it in the
conversation. Messages of no run form "not linked to a run" groups, ``unlinked:<first message
id>``, placed the same way among the runs (a run's place is its first message). Messages of a
run not among the runs read (created after they were read) form a group under that run's id,
until the next read finds the run.

Times are ISO-8601 UTC strings ending in ``Z``, exactly as stored; ``duration_ms`` only ever
comes from a step's stored duration.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from itertools import groupby
from typing import Any

from django.db import connections
from django.db.models import QuerySet, TextField
from django.db.models.functions import Cast

from agent.models import FINAL_RUN_STATUSES, AgentRun, RunStatus
from agent.selectors import run_error
from chat.exceptions import ConversationNotFound, SuperuserRequired
from chat.models import Conversation, Message, MessageKind, MessageRole
from traces.models import Step, StepStatus, StepType
from traces.outcomes import step_outcome

#: Filter buttons, in the order ``counts`` lists them.
FILTERS = ("all", "user", "model", "tool", "error", "system")

#: How long a summary line gets, in characters.
SUMMARY_MAX_CHARS = 200

#: The steps the panel shows (a memory write, or feedback, belongs to the trace browser).
ENTRY_STEP_TYPES = (
    StepType.GOAL,
    StepType.MEMORY_READ,
    StepType.THOUGHT,
    StepType.ACTION,
    StepType.RESULT,
    StepType.RESPONSE,
)

#: The fields of a run, a message and a step the view reads (a run's answer and error are its
#: steps'; a step's tree bookkeeping and rollups belong to the trace browser): the keys of the
#: rows ``debug_view`` takes, as ``QuerySet.values`` gives them.
RUN_FIELDS = (
    "id",
    "request_id",
    "mode",
    "status",
    "input",
    "model",
    "error_code",
    "trace_id",
    "created_at",
    "started_at",
    "finished_at",
)
MESSAGE_FIELDS = (
    "id",
    "role",
    "kind",
    "content",
    "run_id",
    "step_id",
    "request_id",
    "sequence",
    "metadata",
    "created_at",
)
STEP_FIELDS = (
    "id",
    "trace_id",
    "parent_id",
    "seq",
    "step_type",
    "status",
    "name",
    "description",
    "data",
    "error",
    "started_at",
    "finished_at",
    "duration_ms",
    "tokens",
    "cost",
    "created_at",
)


#: The fields of those above that hold ids (``uuid`` columns).
ID_FIELDS = frozenset({"id", "trace_id", "parent_id", "run_id", "step_id"})


@dataclass(frozen=True)
class DebugEntry:
    """One row of the panel.

    ``key`` is the entry's stable identity, ``id`` the bare id in it (see the module
    docstring). ``role`` is ``user``, ``assistant``, ``tool``, ``system`` or ``error``; ``kind``
    the filter bucket (``user``, ``model``, ``tool``, ``system``, ``error``) and ``filters``
    every bucket it shows under (``error`` too when it failed; ``counts`` counts these).
    ``label``: ``User``, ``Memory · <name>``, ``Model``, ``Model · Tools`` (a model call that
    asked for a tool), ``Tool · <name>``, ``Answer``, ``System``, ``Error``. ``summary``: one
    line (a tool call: its error, else its output, else its input). ``model`` is a model
    call's or an answer's; ``usage`` (``prompt_tokens``, ``completion_tokens``,
    ``total_tokens``) a model call's. ``sequence`` is the message's, ``step_seq`` the step's.
    ``status``: the step's (a tool call's: its action's, ``failed`` when its result failed),
    ``completed`` for a message without a step, the run's for an error. ``outcome`` is the
    state shown on its line (``traces.outcomes.step_outcome`` of its step, a tool call's of its
    result, else of its action); an entry is under ``error`` exactly when that outcome is an
    error (a run's error entry is, unless the run was cancelled). Times and
    ``duration_ms`` are the step's (a tool call's: its action's); ``timed`` is whether they
    make a span on the timeline (a start, and an end, a duration, or still running). ``raw``
    holds the stored rows the entry comes from, by source: ``message``, ``step``, ``action``
    and ``result`` (a tool call's), ``run`` (an error's: the run's row with its ``error``)."""

    key: str
    id: str
    run_id: str | None
    role: str
    kind: str
    filters: tuple[str, ...]
    label: str
    summary: str
    model: str
    usage: dict[str, int] | None
    created_at: str | None
    started_at: str | None
    finished_at: str | None
    duration_ms: int | None
    sequence: int | None
    step_seq: int | None
    status: str
    outcome: dict[str, Any]
    timed: bool
    raw: dict[str, Any]


@dataclass(frozen=True)
class DebugGroup:
    """One run's entries (``run_id``), or consecutive messages of no run (``run_id`` None: "not
    linked to a run"). ``status``, ``mode``, ``model``, ``trace_id``, ``request_id`` and the
    times are the stored run's (None when there is no run row)."""

    key: str
    run_id: str | None
    request_id: str | None
    status: str | None
    mode: str | None
    model: str | None
    trace_id: str | None
    created_at: str | None
    started_at: str | None
    finished_at: str | None
    entries: tuple[DebugEntry, ...]


@dataclass(frozen=True)
class DebugView:
    """The conversation's panel: ``live`` while one of its runs is queued or running;
    ``counts`` the entries per filter (``FILTERS``)."""

    conversation_id: str
    title: str
    live: bool
    groups: tuple[DebugGroup, ...]
    counts: dict[str, int]


# --- reading ----------------------------------------------------------------------------------


def conversation_debug(*, user: Any, conversation_id: uuid.UUID) -> DebugView:
    """The debug view of one of ``user``'s conversations, in four queries whatever its size:
    the conversation, its runs, their steps, its messages (each message's step is joined from
    the steps read, as ``select_related("step")`` would, without reading a step twice). Each
    row is read straight into its JSON record (``_records``): the view shows the records, and
    model instances made the read about 40% slower (benchmarks/README.md).

    Raises ``SuperuserRequired`` (403) unless ``user`` is a superuser, before anything is read;
    ``ConversationNotFound`` (404, the same for a missing conversation and someone else's)
    unless the conversation is ``user``'s. The reads go runs, steps, messages, and a run stores
    its steps before the messages that record them and its transcript before it is marked
    finished: a run read as finished shows whole, and a message's step is among those read."""
    if not getattr(user, "is_superuser", False):
        raise SuperuserRequired("Only superusers can see the debug panel.")
    conversation = (
        Conversation.objects.owned_by(user).filter(pk=conversation_id).only("id", "title").first()
    )
    if conversation is None:
        raise ConversationNotFound("Conversation not found.")
    runs = AgentRun.objects.filter(conversation=conversation)
    return _view(
        conversation_id=conversation.id,
        title=conversation.title,
        runs=_records(runs.order_by("created_at", "id"), RUN_FIELDS, _run_record),
        steps=_records(
            Step.objects.filter(
                trace_id__in=runs.values("trace_id"), step_type__in=ENTRY_STEP_TYPES
            ).order_by("trace_id", "seq"),
            STEP_FIELDS,
            _step_record,
        ),
        # An empty answer without a step (a run that failed or was stopped before it wrote
        # any) records nothing the model saw: the run's error entry says what happened.
        messages=_records(
            Message.objects.filter(conversation=conversation)
            .exclude(kind=MessageKind.TURN, content="", step__isnull=True)
            .order_by("sequence"),
            MESSAGE_FIELDS,
            _message_record,
        ),
    )


def _records(
    queryset: QuerySet[Any], fields: tuple[str, ...], record: Callable[[Row], Record]
) -> list[Record]:
    """The JSON records of ``queryset``'s rows, ``record`` of each row of ``fields``.

    Why not ``[record(row) for row in queryset.values(*fields)]``: here each row becomes its
    record as it is read, and the ids (``ID_FIELDS``) come from the database as text, the way
    the records show them. For a run of 2,000 calls that is 5,000 row dicts and 15,000
    ``uuid.UUID`` objects fewer, made only to be copied or turned into strings; they all lived
    until the join ended, and the garbage collector's passes over them were 40% of the API's
    answer (about 95 of 245 ms of CPU). With this read it takes about 105 ms of CPU instead
    of 240 (benchmarks/README.md)."""
    # Without a uuid type (SQLite) the column holds hex without dashes: read it as Django does.
    as_text = connections[queryset.db].features.has_native_uuid_field
    columns = [
        Cast(name, TextField()) if as_text and name in ID_FIELDS else name for name in fields
    ]
    return [record(dict(zip(fields, row, strict=True))) for row in queryset.values_list(*columns)]


def debug_view_json(view: DebugView) -> dict[str, Any]:
    """``view`` as JSON-ready dicts and lists (what ``GET /api/conversations/{id}/debug``
    answers): ``{conversation_id, title, live, counts, groups: [{...group, entries: [...]}]}``
    with the fields of ``DebugView``, ``DebugGroup`` and ``DebugEntry``."""
    return {
        "conversation_id": view.conversation_id,
        "title": view.title,
        "live": view.live,
        "counts": dict(view.counts),
        "groups": [
            {
                "key": group.key,
                "run_id": group.run_id,
                "request_id": group.request_id,
                "status": group.status,
                "mode": group.mode,
                "model": group.model,
                "trace_id": group.trace_id,
                "created_at": group.created_at,
                "started_at": group.started_at,
                "finished_at": group.finished_at,
                "entries": [_entry_json(entry) for entry in group.entries],
            }
            for group in view.groups
        ],
    }


def _entry_json(entry: DebugEntry) -> dict[str, Any]:
    return {
        "key": entry.key,
        "id": entry.id,
        "run_id": entry.run_id,
        "role": entry.role,
        "kind": entry.kind,
        "filters": list(entry.filters),
        "label": entry.label,
        "summary": entry.summary,
        "model": entry.model,
        "usage": entry.usage,
        "created_at": entry.created_at,
        "started_at": entry.started_at,
        "finished_at": entry.finished_at,
        "duration_ms": entry.duration_ms,
        "sequence": entry.sequence,
        "step_seq": entry.step_seq,
        "status": entry.status,
        "outcome": entry.outcome,
        "timed": entry.timed,
        "raw": entry.raw,
    }


# --- the join (pure) ----------------------------------------------------------------------------

#: A stored row as ``QuerySet.values`` gives it.
Row = Mapping[str, Any]

#: A stored row as JSON (ids as strings, times in ISO-8601 UTC): what ``raw`` shows.
Record = dict[str, Any]


@dataclass(slots=True)
class _Joined:
    """One entry being joined: its step (the action of a tool call), a tool call's result, and
    the message that records it."""

    step: Record
    result: Record | None = None
    message: Record | None = None

    @property
    def anchor(self) -> int | None:
        return self.message["sequence"] if self.message is not None else None


def debug_view(
    *,
    conversation_id: uuid.UUID | str,
    title: str,
    runs: Iterable[Row],
    steps: Iterable[Row],
    messages: Iterable[Row],
) -> DebugView:
    """Join a conversation's rows into its view (the rules are in the module docstring).

    ``runs`` are the conversation's, ``steps`` steps of those runs' traces (other traces' and
    steps of other types are left out; a run's error is read from its goal step among them),
    ``messages`` the conversation's, each with the fields of ``RUN_FIELDS``, ``STEP_FIELDS``,
    ``MESSAGE_FIELDS`` (ids as ``uuid.UUID``s or as their text). Any order; linear but for
    sorting."""
    return _view(
        conversation_id=conversation_id,
        title=title,
        runs=[_run_record(run) for run in sorted(runs, key=lambda r: (r["created_at"], r["id"]))],
        steps=[_step_record(step) for step in steps],
        messages=[_message_record(message) for message in messages],
    )


def _view(
    *,
    conversation_id: uuid.UUID | str,
    title: str,
    runs: list[Record],
    steps: list[Record],
    messages: list[Record],
) -> DebugView:
    """``debug_view`` on the rows' records, ``runs`` in the order they were created (their
    times as text do not sort: a time on the second has no fraction); each run's record gets
    its ``error``."""
    run_of_trace = {r["trace_id"]: r["id"] for r in runs if r["trace_id"] is not None}
    step_records = sorted(
        (
            step
            for step in steps
            if step["step_type"] in ENTRY_STEP_TYPES and step["trace_id"] in run_of_trace
        ),
        key=lambda s: (s["trace_id"], s["seq"]),
    )
    goal_error: dict[str | None, str] = {}
    for step in step_records:
        if step["step_type"] == StepType.GOAL and step["parent_id"] is None:
            goal_error.setdefault(step["trace_id"], step["error"])
    for run in runs:
        run["error"] = run_error(
            status=run["status"], goal_error=goal_error.get(run["trace_id"], "")
        )
    by_id = {s["id"]: s for s in step_records}
    #: Each run's entries with a step, in step order.
    joined: dict[str, list[_Joined]] = {r["id"]: [] for r in runs}
    #: The entry each step is part of, for its message to join.
    joined_of: dict[str, _Joined] = {}
    asked_tools: set[str] = set()
    for step in step_records:
        parent = by_id.get(step["parent_id"]) if step["parent_id"] is not None else None
        if step["step_type"] == StepType.RESULT and parent is not None:
            tool_call = joined_of.get(parent["id"])
            if parent["step_type"] == StepType.ACTION and tool_call and tool_call.result is None:
                tool_call.result = step
                joined_of[step["id"]] = tool_call
                continue
        if step["step_type"] == StepType.ACTION and parent is not None:
            asked_tools.add(parent["id"])
        joined_of[step["id"]] = _Joined(step)
        joined[run_of_trace[step["trace_id"]]].append(joined_of[step["id"]])

    loose: dict[str | None, list[Record]] = {}
    first_message: dict[str, int] = {}
    for record in sorted(messages, key=lambda m: m["sequence"]):
        found = joined_of.get(record["step_id"]) if record["step_id"] is not None else None
        if found is not None and found.message is None:
            found.message = record
            run_id = run_of_trace[found.step["trace_id"]]
        else:
            run_id = record["run_id"]
            loose.setdefault(run_id if run_id in joined else None, []).append(record)
        if run_id is not None:
            first_message.setdefault(run_id, record["sequence"])

    # Runs in creation order, each placed by its first message; messages of no run (or of a
    # run not read) between them, in stretches of the same run (or of none).
    placed = _interleave(
        [(first_message.get(r["id"]), ("run", r)) for r in runs],
        [(m["sequence"], ("messages", m)) for m in loose.pop(None, [])],
    )
    groups: list[DebugGroup] = []
    for (what, _), items in groupby(placed, key=_group_of):
        records = [record for _, record in items]
        if what == "run":
            run = records[0]
            groups.append(_run_group(run, joined[run["id"]], loose.get(run["id"], []), asked_tools))
        else:
            groups.append(_message_group(records))

    counts = dict.fromkeys(FILTERS, 0)
    for group in groups:
        for entry in group.entries:
            counts["all"] += 1
            for name in entry.filters:
                counts[name] += 1
    return DebugView(
        conversation_id=str(conversation_id),
        title=title,
        live=any(run["status"] not in FINAL_RUN_STATUSES for run in runs),
        groups=tuple(groups),
        counts=counts,
    )


def _group_of(item: tuple[str, Record]) -> tuple[str, str | None]:
    what, record = item
    return what, record["id"] if what == "run" else record["run_id"]


def _interleave(items: list[tuple[int | None, Any]], loose: list[tuple[int, Any]]) -> list[Any]:
    """``items`` in their order, each ``loose`` one (sorted by its sequence) right before the
    first item whose sequence (None: has none) comes after it; those after every item last."""
    placed: list[Any] = []
    index = 0
    for anchor, item in items:
        while anchor is not None and index < len(loose) and loose[index][0] < anchor:
            placed.append(loose[index][1])
            index += 1
        placed.append(item)
    placed.extend(value for _, value in loose[index:])
    return placed


def _run_group(
    run: Record, entries_with_steps: list[_Joined], loose: list[Record], asked_tools: set[str]
) -> DebugGroup:
    """A run's group: its step entries in ``seq`` order, its messages without a step placed by
    sequence among them, its error last."""
    entries = [
        _step_entry(item, run_id=run["id"], run_model=run["model"], asked_tools=asked_tools)
        if isinstance(item, _Joined)
        else _message_entry(item)
        for item in _interleave(
            [(e.anchor, e) for e in entries_with_steps], [(m["sequence"], m) for m in loose]
        )
    ]
    if run["error"]:
        entries.append(_error_entry(run))
    return DebugGroup(
        key=f"run:{run['id']}",
        run_id=run["id"],
        request_id=run["request_id"],
        status=run["status"],
        mode=run["mode"],
        model=run["model"],
        trace_id=run["trace_id"],
        created_at=run["created_at"],
        started_at=run["started_at"],
        finished_at=run["finished_at"],
        entries=tuple(entries),
    )


def _message_group(messages: list[Record]) -> DebugGroup:
    """Consecutive messages of no run ("not linked to a run"), or of a run not read."""
    run_id = messages[0]["run_id"]
    return DebugGroup(
        key=f"run:{run_id}" if run_id is not None else f"unlinked:{messages[0]['id']}",
        run_id=run_id,
        request_id=None,
        status=None,
        mode=None,
        model=None,
        trace_id=None,
        created_at=None,
        started_at=None,
        finished_at=None,
        entries=tuple(_message_entry(m) for m in messages),
    )


# --- entries ------------------------------------------------------------------------------------


def _step_entry(
    joined: _Joined, *, run_id: str, run_model: str, asked_tools: set[str]
) -> DebugEntry:
    """The entry of a step: the request, a memory read, a model call or the answer (their text
    the message's, until it is stored the step's description; the answer's model the run's); a
    tool call (an action, or a result on its own) is ``_tool_entry``'s."""
    step, message = joined.step, joined.message
    step_type = step["step_type"]
    text = message["content"] if message is not None else (step["description"] or step["name"])
    usage = None
    model = ""
    if step_type == StepType.GOAL:
        role, kind, label = MessageRole.USER, "user", "User"
    elif step_type == StepType.MEMORY_READ:
        role, kind, label = MessageRole.SYSTEM, "system", f"Memory · {step['name']}"
    elif step_type == StepType.THOUGHT:
        role, kind = MessageRole.ASSISTANT, "model"
        label = "Model · Tools" if step["id"] in asked_tools else "Model"
        data = _object(step["data"])
        model = str(data.get("model") or "")
        usage = _usage_of(data)
    elif step_type == StepType.RESPONSE:
        role, kind, label = MessageRole.ASSISTANT, "model", "Answer"
        model = run_model
    else:
        return _tool_entry(joined, run_id=run_id)
    return _entry(
        key=f"step:{step['id']}",
        entry_id=step["id"],
        run_id=run_id,
        role=role,
        kind=kind,
        label=label,
        summary=text,
        model=model,
        usage=usage,
        timing=step,
        message=message,
        status=step["status"],
        outcome=_outcome_of(step),
        raw={"message": message, "step": step},
    )


def _outcome_of(step: Record) -> dict[str, Any]:
    return step_outcome(step["step_type"], step["status"], step["error"], step["data"]).as_dict()


def _usage_of(data: dict[str, Any]) -> dict[str, int] | None:
    """A model call's token counts as its step stores them (``usage``; steps written before
    it was one object keep ``prompt_tokens``/``completion_tokens`` beside it); None when the
    server reported none."""
    usage = data.get("usage")
    if not isinstance(usage, dict):
        usage = {
            name: data[name] for name in ("prompt_tokens", "completion_tokens") if name in data
        }
    counts = {name: value for name, value in usage.items() if isinstance(value, int)}
    if not counts:
        return None
    counts.setdefault(
        "total_tokens", counts.get("prompt_tokens", 0) + counts.get("completion_tokens", 0)
    )
    return counts


def _tool_entry(joined: _Joined, *, run_id: str) -> DebugEntry:
    """A tool call: its action (or, without one, its result) and the result's message."""
    if joined.step["step_type"] == StepType.ACTION:
        action, result = joined.step, joined.result
    else:
        action, result = None, joined.step
    action_data = _object(action["data"] if action else None)
    name = str(
        action_data.get("tool_name")
        or (action["name"] if action else "")
        or (result["name"] if result else "")
        or "tool"
    )
    error = result["error"] if result else ""
    summary = error or (joined.message["content"] if joined.message else "")
    if not summary and result is not None:
        summary = _text(_object(result["data"]).get("observation"))
    if not summary and "arguments" in action_data:
        summary = _text(action_data["arguments"])
    status = joined.step["status"]
    if result is not None and result["status"] == StepStatus.FAILED:
        status = StepStatus.FAILED
    outcome = _outcome_of(result if result is not None else joined.step)
    return _entry(
        key=f"step:{joined.step['id']}",
        entry_id=joined.step["id"],
        run_id=run_id,
        role=MessageRole.TOOL,
        kind="tool",
        label=f"Tool · {name}",
        summary=summary,
        model="",
        usage=None,
        timing=joined.step,
        message=joined.message,
        status=status,
        outcome=outcome,
        raw={"message": joined.message, "action": action, "result": result},
    )


def _message_entry(message: Record) -> DebugEntry:
    """A message without a step among those read."""
    kinds: dict[str, tuple[str, str]] = {
        MessageRole.USER: ("user", "User"),
        MessageRole.ASSISTANT: (
            "model",
            "Answer" if message["kind"] == MessageKind.TURN else "Model",
        ),
        MessageRole.TOOL: ("tool", "Tool"),
    }
    kind, label = kinds.get(message["role"], ("system", "System"))
    if message["kind"] == MessageKind.MEMORY:
        label = "Memory"
    return _entry(
        key=f"message:{message['id']}",
        entry_id=message["id"],
        run_id=message["run_id"],
        role=message["role"],
        kind=kind,
        label=label,
        summary=message["content"],
        model="",
        usage=None,
        timing=None,
        message=message,
        status=StepStatus.COMPLETED,
        outcome=step_outcome(StepType.RESPONSE, StepStatus.COMPLETED, "", None).as_dict(),
        raw={"message": message},
    )


def _error_entry(run: Record) -> DebugEntry:
    summary = f"{run['error_code']}: {run['error']}" if run["error_code"] else run["error"]
    # The run's end as its goal step records it: skipped when cancelled, failed otherwise.
    cancelled = run["status"] == RunStatus.CANCELLED
    goal_status = StepStatus.SKIPPED if cancelled else StepStatus.FAILED
    outcome = step_outcome(StepType.GOAL, goal_status, run["error"], None)
    return DebugEntry(
        key=f"error:{run['id']}",
        id=run["id"],
        run_id=run["id"],
        role="error",
        kind="error",
        filters=("error",),
        label="Error",
        summary=_one_line(summary),
        model="",
        usage=None,
        created_at=run["finished_at"],
        started_at=None,
        finished_at=None,
        duration_ms=None,
        sequence=None,
        step_seq=None,
        status=run["status"],
        outcome=outcome.as_dict(),
        timed=False,
        raw={"run": run},
    )


def _entry(
    *,
    key: str,
    entry_id: str,
    run_id: str | None,
    role: str,
    kind: str,
    label: str,
    summary: str,
    model: str,
    usage: dict[str, int] | None,
    timing: Record | None,
    message: Record | None,
    status: str,
    outcome: dict[str, Any],
    raw: dict[str, Record | None],
) -> DebugEntry:
    """An entry whose times are ``timing``'s (a step), its creation its message's, else its
    step's."""
    started_at = timing["started_at"] if timing is not None else None
    finished_at = timing["finished_at"] if timing is not None else None
    duration_ms = timing["duration_ms"] if timing is not None else None
    # A step stored finished with neither an end nor a duration (a memory read, the answer)
    # has no span to draw: it spans its run, as a message does.
    timed = started_at is not None and (
        finished_at is not None or duration_ms is not None or status == StepStatus.RUNNING
    )
    return DebugEntry(
        key=key,
        id=entry_id,
        run_id=run_id,
        role=str(role),
        kind=kind,
        filters=(kind, "error") if outcome["is_error"] else (kind,),
        label=label,
        summary=_one_line(summary),
        model=model,
        usage=usage,
        created_at=message["created_at"] if message is not None else _created(timing),
        started_at=started_at,
        finished_at=finished_at,
        duration_ms=duration_ms,
        sequence=message["sequence"] if message is not None else None,
        step_seq=timing["seq"] if timing is not None else None,
        status=str(status),
        outcome=outcome,
        timed=timed,
        raw={name: record for name, record in raw.items() if record is not None},
    )


def _created(step: Record | None) -> str | None:
    return step["created_at"] if step is not None else None


# --- records ------------------------------------------------------------------------------------


def _message_record(message: Row) -> Record:
    return {
        "id": str(message["id"]),
        "role": message["role"],
        "kind": message["kind"],
        "content": message["content"],
        "run_id": _id(message["run_id"]),
        "step_id": _id(message["step_id"]),
        "request_id": message["request_id"],
        "sequence": message["sequence"],
        "metadata": message["metadata"],
        "created_at": _iso(message["created_at"]),
    }


def _step_record(step: Row) -> Record:
    return {
        "id": str(step["id"]),
        "trace_id": str(step["trace_id"]),
        "parent_id": _id(step["parent_id"]),
        "seq": step["seq"],
        "step_type": step["step_type"],
        "status": step["status"],
        "name": step["name"],
        "description": step["description"],
        "data": step["data"],
        "error": step["error"],
        "started_at": _iso(step["started_at"]),
        "finished_at": _iso(step["finished_at"]),
        "duration_ms": step["duration_ms"],
        "tokens": step["tokens"],
        "cost": str(step["cost"]),
        "created_at": _iso(step["created_at"]),
    }


def _run_record(run: Row) -> Record:
    return {
        "id": str(run["id"]),
        "request_id": run["request_id"],
        "mode": run["mode"],
        "status": run["status"],
        "input": run["input"],
        "model": run["model"],
        "error_code": run["error_code"],
        "trace_id": _id(run["trace_id"]),
        "created_at": _iso(run["created_at"]),
        "started_at": _iso(run["started_at"]),
        "finished_at": _iso(run["finished_at"]),
    }


# --- small helpers ------------------------------------------------------------------------------


def _id(value: uuid.UUID | None) -> str | None:
    return str(value) if value is not None else None


def _object(value: Any) -> dict[str, Any]:
    """``value`` if it is a JSON object, else empty (stored JSON may be anything)."""
    return value if isinstance(value, dict) else {}


def _text(value: Any) -> str:
    """A stored value as text: a string as it is, anything else as JSON (None: empty)."""
    if value is None or isinstance(value, str):
        return value or ""
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def _one_line(text: str) -> str:
    """``text``'s whitespace collapsed, cut to ``SUMMARY_MAX_CHARS`` with an ellipsis (only
    the beginning of a long text is looked at)."""
    window = 4 * SUMMARY_MAX_CHARS
    line = " ".join(text[:window].split())
    if len(line) <= SUMMARY_MAX_CHARS and len(text) <= window:
        return line
    return line[: SUMMARY_MAX_CHARS - 1] + "…"


def _iso(value: datetime | None) -> str | None:
    """ISO-8601 in UTC with a ``Z`` (microseconds when there are any)."""
    if value is None:
        return None
    if value.tzinfo is not UTC:
        value = value.astimezone(UTC)
    return value.isoformat()[:-6] + "Z"
