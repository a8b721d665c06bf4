"""The superuser debug panel's data: what really happened in a conversation, from stored facts.

``conversation_debug`` reads the conversation's stored messages, its runs, the model and tool
calls of their traces (``thought`` steps; ``action`` steps with their ``result``) and the events
of its unfinished runs, and ``debug_view`` merges them into one list of entries grouped by run.
Everything below ``debug_view`` is pure: it takes rows (saved or not) and touches no database.

Identity (``DebugEntry.key``); two rows merge into one entry only when their keys are equal:

- ``message:<uuid>``: a stored message that is none of the below;
- ``request:<request_id>``: a user's request, its stored user message and its queued run alike.
  When the request has no id, or another request (another run, another message) holds that key
  already (a client reusing ``X-Request-ID``), ``request:run:<run_id>``; a user message with
  neither falls back to ``message:<uuid>``;
- ``call:<run_id>:model:<operation_id>``: a model call; the operation id is its ``thought`` step's
  id. Its step message (``metadata.step_id``) and the run's live ``step`` event merge into it;
- ``call:<run_id>:tool:<operation_id>``: a tool call; the operation id is its ``action`` step's id
  (the ``thought``'s, for a result written without an action: a reply the loop could not parse).
  Its result step and its tool message (``metadata.step_id`` names the result) merge into it;
- ``answer:<run_id>``: the answer of an unfinished run as its ``delta`` events carry it, until the
  run's answer message is stored;
- ``error:<run_id>``: a run's stored error (failed or cancelled).

Where the same fact comes from several rows, the fuller content wins (the longest text). Merging
is a union of rows keyed by identity: linear, and idempotent (the same rows twice, or one row
from two reads, give the same view).

Order: stored messages in ``sequence`` order. A call with a stored message takes its place;
another call goes right after the previous call of its run (by step ``seq``), or, the first ones
of a run, after the run's request (its user and memory messages). A run's live answer and its
error end its run. A run with no stored message at all (queued, or cancelled before its request
was stored) gets its entries inserted as a block just before the first entry of the next run
created after it, or at the end; nothing else moves.

Groups: consecutive entries of the same run form a group; consecutive entries without a run
form one "not linked to a run" group (never guessed into a run). Group keys are stable across
refreshes: ``request:<request_id>`` for a run with a request id (the same key from the moment
the request is queued to its run's end), else ``run:<run_id>``; ``unlinked:<first entry key>``
for entries without a run; a key seen in an earlier group gets ``#2``, ``#3``... (two stretches
of the same run, when two runs of the conversation ran at once).

Times are ISO-8601 UTC strings ending in ``Z``, exactly as stored (none is computed); a model
call's step stores its start and its duration but no finish: its bar ends at ``started_at`` +
``duration_ms``. ``duration_ms`` only ever comes from a step's stored duration (a monotonic
measurement), never from wall-clock times.

Changes to the interface first agreed with the panel's UI: ``DebugEntry`` gained ``role``,
``filters`` (the filter buttons an entry shows under: its ``kind``, and ``"error"`` too when it
failed; ``counts`` counts these) and ``step_seq``; ``DebugGroup`` gained ``request_id``,
``model``, ``trace_id`` and ``created_at``.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from agent.models import FINAL_RUN_STATUSES, AgentRun, RunEvent, RunStatus
from chat.models import Conversation, Message, MessageKind, MessageRole
from chat.selectors import ConversationNotFound
from devassist.errors import Forbidden
from traces.models import Step, StepStatus, StepType

#: Filter buttons, in the order ``counts`` lists them.
FILTERS = ("all", "user", "model", "tool", "error", "system")

#: How long a summary line gets, in characters.
SUMMARY_MAX_CHARS = 200

#: The step types that are calls: model calls (thought), tool calls (action) and their results.
CALL_STEP_TYPES = (StepType.THOUGHT, StepType.ACTION, StepType.RESULT)

#: The fields of a run and of a step the view shows (a run's output is its answer message; a
#: step's tree bookkeeping and rollups belong to the trace browser).
RUN_FIELDS = (
    "id",
    "request_id",
    "mode",
    "status",
    "input",
    "model",
    "error",
    "error_code",
    "trace_id",
    "created_at",
    "started_at",
    "finished_at",
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


class SuperuserRequired(Forbidden):
    code = "superuser_required"


@dataclass(frozen=True)
class DebugEntry:
    """One row of the panel.

    ``key`` is the entry's identity (see the module docstring); ``id`` the message, step or
    request id people see (the run id for ``answer:`` and ``error:`` entries). ``role`` is
    ``user``, ``assistant``, ``tool``, ``system`` or ``error``; ``kind`` the filter bucket
    (``user``, ``model``, ``tool``, ``system``, ``error``) and ``filters`` every bucket it
    shows under. ``label``: ``User``, ``Model``, ``Model · Tools`` (a model call that asked for
    a tool), ``Tool · <name>``, ``System``, ``Error``. ``summary``: one line (a tool call: its
    error, else its output, else its input). ``model`` is empty unless stored with a model call
    or an answer; ``usage`` (``prompt_tokens``, ``completion_tokens``, ``total_tokens``) only
    from a stored model call step. ``sequence`` is the stored message's, ``step_seq`` the
    call's step's. ``status``: a call's step status (``running``, ``completed``, ``failed``,
    ``skipped``...), ``completed`` for a stored message (``failed`` for a tool message carrying
    an error), ``queued`` for a request whose run is queued, ``running`` for a live answer, the
    run's status for an error. ``timed`` is whether ``started_at`` is stored. ``raw`` holds the
    stored rows the entry comes from, by source: ``message``, ``request`` (the queued run),
    ``step`` (a model call's), ``action``, ``result``, ``event`` (the live ``step`` event),
    ``events`` (a live answer's deltas), ``run`` (an error's run)."""

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
    timed: bool
    raw: dict[str, Any]


@dataclass(frozen=True)
class DebugGroup:
    """Consecutive entries of one run (``run_id``), or without a run (``run_id`` None: "not
    linked to a run"). ``status``, ``mode``, ``model``, ``trace_id``, ``request_id`` and the
    times are the stored run's (None when there is no run row), never guessed from the
    entries."""

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
    """The debug view of one of ``user``'s conversations, in five queries whatever its size.

    Raises ``SuperuserRequired`` (403) unless ``user`` is a superuser, before anything is read;
    ``ConversationNotFound`` (404, the same for a missing conversation and someone else's)
    unless the conversation is ``user``'s. The reads go runs, steps, events, messages: each
    later read sees at least what the earlier ones did (a run stores its messages before it is
    marked finished), so a run finishing meanwhile shows merged, never twice."""
    if not getattr(user, "is_superuser", False):
        raise SuperuserRequired("Only superusers can see the debug panel.")
    conversation = (
        Conversation.objects.owned_by(user).filter(pk=conversation_id).only("id", "title").first()
    )
    if conversation is None:
        raise ConversationNotFound("Conversation not found.")
    runs = list(
        AgentRun.objects.filter(conversation=conversation)
        .only(*RUN_FIELDS)
        .order_by("created_at", "id")
    )
    steps = list(
        Step.objects.filter(
            trace_id__in=AgentRun.objects.filter(conversation=conversation).values("trace_id"),
            step_type__in=CALL_STEP_TYPES,
        )
        .only(*STEP_FIELDS)
        .order_by("trace_id", "seq")
    )
    events = list(
        RunEvent.objects.filter(
            run__conversation=conversation,
            run__status__in=(RunStatus.QUEUED, RunStatus.RUNNING),
            type__in=("step", "delta"),
        )
        .only("run_id", "seq", "type", "payload", "created_at")
        .order_by("run_id", "seq")
    )
    messages = list(Message.objects.filter(conversation=conversation).order_by("sequence"))
    return debug_view(
        conversation_id=conversation.id,
        title=conversation.title,
        messages=messages,
        runs=runs,
        steps=steps,
        events=events,
    )


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
        "timed": entry.timed,
        "raw": entry.raw,
    }


# --- merging (pure) -----------------------------------------------------------------------------

#: A stored row as JSON (ids as strings, times in ISO-8601 UTC): what ``raw`` shows. Each row is
#: read into one once, and everything after works on these.
Record = dict[str, Any]


def debug_view(
    *,
    conversation_id: uuid.UUID | str,
    title: str,
    messages: Iterable[Message],
    runs: Iterable[AgentRun],
    steps: Iterable[Step],
    events: Iterable[RunEvent],
) -> DebugView:
    """Merge a conversation's rows into its view (the rules are in the module docstring).

    ``messages`` are the conversation's, ``runs`` its runs, ``steps`` the ``thought``,
    ``action`` and ``result`` steps of those runs' traces (others are ignored), ``events`` the
    ``step`` and ``delta`` events of its unfinished runs. Any order, duplicates allowed; linear
    but for sorting."""
    merge = _Merge(runs)
    merge.add_steps(steps)
    merge.add_messages(messages)
    merge.add_events(events)
    merge.add_runs()
    groups = merge.groups(merge.ordered())
    counts = dict.fromkeys(FILTERS, 0)
    for group in groups:
        for entry in group.entries:
            counts["all"] += 1
            for name in entry.filters:
                counts[name] += 1
    return DebugView(
        conversation_id=str(conversation_id),
        title=title,
        live=any(run["status"] not in FINAL_RUN_STATUSES for run in merge.runs.values()),
        groups=groups,
        counts=counts,
    )


#: What a slot stands for; decides how its entry is built and where it goes.
_USER, _MESSAGE, _MODEL, _TOOL, _ANSWER, _ERROR = (
    "user",
    "message",
    "model",
    "tool",
    "answer",
    "error",
)


@dataclass(slots=True)
class _Slot:
    """Every stored row known for one identity, gathered while merging. A source met twice
    keeps one row: the one later in its own order (``sequence``, ``seq``, then id), so the
    result does not depend on the order rows come in."""

    key: str
    what: str
    run_id: str | None
    operation_id: str = ""
    message: Record | None = None
    request: Record | None = None
    step: Record | None = None
    result: Record | None = None
    event: Record | None = None
    deltas: dict[int, Record] = field(default_factory=dict)
    run: Record | None = None

    @property
    def anchor(self) -> int | None:
        return self.message["sequence"] if self.message is not None else None

    def call_order(self) -> tuple[int, int]:
        """A call's place among its run's calls: its step's ``seq``, else its event's after
        every stepped call."""
        step = self.step or self.result
        if step is not None:
            return (0, step["seq"])
        return (1, self.event["seq"] if self.event is not None else 0)


def _later(old: Record | None, new: Record, order: str) -> Record:
    if old is None:
        return new
    return new if (new[order], new.get("id", "")) > (old[order], old.get("id", "")) else old


class _Merge:
    """One merge: slots keyed by identity, filled source by source."""

    def __init__(self, runs: Iterable[AgentRun]) -> None:
        #: The runs oldest first (the order requests claim their keys in), by id.
        self.runs: dict[str, Record] = {}
        self.run_ids: dict[uuid.UUID, str] = {}
        self.run_of_trace: dict[uuid.UUID, Record] = {}
        for run in sorted(runs, key=lambda run: (run.created_at, str(run.id))):
            record = _run_record(run)
            self.runs[record["id"]] = record
            self.run_ids[run.id] = record["id"]
            if run.trace_id is not None:
                self.run_of_trace[run.trace_id] = record
        self.slots: dict[str, _Slot] = {}
        self.steps: dict[str, Record] = {}
        #: The action step under each thought that has one.
        self.action_of: dict[str, str] = {}
        #: Model calls that asked for a tool (an action step under them, or a live step event
        #: naming a tool).
        self.asked_tools: set[str] = set()
        #: Request keys taken: by which run and by which stored message.
        self.claims: dict[str, tuple[str | None, str | None]] = {}
        #: Runs whose answer message is stored (their deltas are no longer live).
        self.answered: set[str] = set()

    def run_id(self, value: uuid.UUID | None) -> str | None:
        if value is None:
            return None
        return self.run_ids.get(value) or str(value)

    def slot(self, key: str, what: str, run_id: str | None, operation_id: str = "") -> _Slot:
        found = self.slots.get(key)
        if found is None:
            found = self.slots[key] = _Slot(key, what, run_id, operation_id)
        elif found.run_id is None:
            found.run_id = run_id
        return found

    def call(self, what: str, run_id: str, operation_id: str) -> _Slot:
        return self.slot(f"call:{run_id}:{what}:{operation_id}", what, run_id, operation_id)

    # sources ----------------------------------------------------------------------------------

    def add_steps(self, steps: Iterable[Step]) -> None:
        mine: list[tuple[str, Record]] = []
        for step in steps:
            run = self.run_of_trace.get(step.trace_id)
            if run is None or step.step_type not in CALL_STEP_TYPES:
                continue
            record = _step_record(step, trace_id=run["trace_id"])
            self.steps[record["id"]] = record
            mine.append((run["id"], record))
        for run_id, record in mine:
            if record["step_type"] == StepType.THOUGHT:
                slot = self.call(_MODEL, run_id, record["id"])
                slot.step = _later(slot.step, record, "seq")
            elif record["step_type"] == StepType.ACTION:
                slot = self.call(_TOOL, run_id, record["id"])
                slot.step = _later(slot.step, record, "seq")
                if record["parent_id"] is not None:
                    self.action_of[record["parent_id"]] = record["id"]
                    self.asked_tools.add(record["parent_id"])
            else:
                operation = self._tool_operation_of_result(record["id"])
                if operation is not None:
                    slot = self.call(_TOOL, run_id, operation)
                    slot.result = _later(slot.result, record, "seq")

    def _tool_operation_of_result(self, result_id: str) -> str | None:
        """The tool call a result step belongs to: its action, or the thought it answers when
        no action was written (an unparsable reply); None when that step is unknown."""
        result = self.steps.get(result_id)
        if result is None or result["parent_id"] is None:
            return None
        parent = self.steps.get(result["parent_id"])
        if parent is None or parent["step_type"] not in (StepType.ACTION, StepType.THOUGHT):
            return None
        return str(parent["id"])

    def add_messages(self, messages: Iterable[Message]) -> None:
        records = sorted(
            (_message_record(m, run_id=self.run_id(m.run_id)) for m in messages),
            key=lambda record: (record["sequence"], record["id"]),
        )
        for record in records:
            role, kind, run_id = record["role"], record["kind"], record["run_id"]
            step_id = _metadata(record).get("step_id")
            slot: _Slot | None = None
            if role == MessageRole.USER and kind == MessageKind.TURN:
                key = self._request_key(record["request_id"], run_id, record["id"])
                slot = self.slot(key or f"message:{record['id']}", _USER, run_id)
            elif kind == MessageKind.STEP and run_id is not None and isinstance(step_id, str):
                if role == MessageRole.ASSISTANT:
                    slot = self.call(_MODEL, run_id, step_id)
                elif role == MessageRole.TOOL:
                    operation = self._tool_operation_of_result(step_id)
                    if operation is not None:
                        slot = self.call(_TOOL, run_id, operation)
            if slot is None:
                slot = self.slot(f"message:{record['id']}", _MESSAGE, run_id)
            slot.message = _later(slot.message, record, "sequence")
            if run_id is not None and role == MessageRole.ASSISTANT and kind == MessageKind.TURN:
                self.answered.add(run_id)

    def _request_key(
        self, request_id: str, run_id: str | None, message_id: str | None = None
    ) -> str | None:
        """The key of a user's request: ``request:<request_id>``, else ``request:run:<run_id>``,
        the first of them no other request holds (a request is its run and its one stored
        message); None when neither is free."""
        candidates = []
        if request_id:
            candidates.append(f"request:{request_id}")
        if run_id is not None:
            candidates.append(f"request:run:{run_id}")
        for key in candidates:
            claimed_run, claimed_message = self.claims.get(key, (None, None))
            if claimed_run is not None and run_id is not None and claimed_run != run_id:
                continue
            if claimed_message and message_id and claimed_message != message_id:
                continue
            self.claims[key] = (claimed_run or run_id, claimed_message or message_id)
            return key
        return None

    def add_events(self, events: Iterable[RunEvent]) -> None:
        for event in events:
            run_id = self.run_id(event.run_id)
            assert run_id is not None
            record = _event_record(event, run_id=run_id)
            if record["type"] == "delta":
                self.slot(f"answer:{run_id}", _ANSWER, run_id).deltas[record["seq"]] = record
            elif record["type"] == "step":
                self._add_step_event(record, run_id)

    def _add_step_event(self, event: Record, run_id: str) -> None:
        """A live ``step`` event names its model call's thought (a ReAct iteration) or its tool
        call's action (a retrieval). It joins the calls the steps say it reports; with its
        steps unknown, what its own fields show: a model call when it carries the model's
        reply, a tool call when it carries a tool or an observation."""
        payload = _payload(event)
        step_id = payload.get("step_id")
        if not isinstance(step_id, str) or not step_id:
            return
        step = self.steps.get(step_id)
        step_type = step["step_type"] if step is not None else None
        if step_type == StepType.ACTION:
            self._join(self.call(_TOOL, run_id, step_id), event)
            return
        if step is not None and step_type != StepType.THOUGHT:
            return
        tool_named = bool(payload.get("tool_name"))
        if step is not None or payload.get("action_raw") or payload.get("thought"):
            self._join(self.call(_MODEL, run_id, step_id), event)
            if tool_named:
                self.asked_tools.add(step_id)
        if tool_named or payload.get("observation") or payload.get("error"):
            operation = self.action_of.get(step_id, step_id)
            self._join(self.call(_TOOL, run_id, operation), event)

    @staticmethod
    def _join(slot: _Slot, event: Record) -> None:
        slot.event = _later(slot.event, event, "seq")

    def add_runs(self) -> None:
        """Queued requests (one with its user message stored is that message's entry), and
        the runs' stored errors."""
        for run in self.runs.values():
            if run["status"] == RunStatus.QUEUED:
                key = self._request_key(run["request_id"], run["id"])
                if key is not None:
                    self.slot(key, _USER, run["id"]).request = run
            if run["error"]:
                self.slot(f"error:{run['id']}", _ERROR, run["id"]).run = run

    # order -----------------------------------------------------------------------------------

    def ordered(self) -> list[_Slot]:
        """Every slot in the panel's order (module docstring)."""
        slots = [
            s for s in self.slots.values() if not (s.what == _ANSWER and s.run_id in self.answered)
        ]
        anchored = sorted((s for s in slots if s.anchor is not None), key=lambda s: s.anchor or 0)
        calls: dict[str | None, list[_Slot]] = {}
        early: dict[str | None, list[_Slot]] = {}
        tails: dict[str | None, list[_Slot]] = {}
        for s in slots:
            if s.what in (_MODEL, _TOOL):
                calls.setdefault(s.run_id, []).append(s)
            elif s.anchor is None and s.what in (_ANSWER, _ERROR):
                tails.setdefault(s.run_id, []).append(s)
            elif s.anchor is None:  # a request not stored as a message yet
                early.setdefault(s.run_id, []).append(s)
        for stretch in tails.values():
            stretch.sort(key=lambda s: s.what != _ANSWER)
        after: dict[str, list[_Slot]] = {}
        for run_id, run_calls in calls.items():
            previous: str | None = None
            for s in sorted(run_calls, key=_Slot.call_order):
                if s.anchor is not None:
                    previous = s.key
                elif previous is not None:
                    after.setdefault(previous, []).append(s)
                else:
                    early.setdefault(run_id, []).append(s)
        # A run's request: its user and memory messages before its first output.
        head: dict[str, str] = {}
        first: dict[str, str] = {}
        opened: set[str] = set()
        for s in anchored:
            if s.run_id is None:
                continue
            first.setdefault(s.run_id, s.key)
            role = s.message["role"] if s.message is not None else ""
            if s.what in (_MODEL, _TOOL) or role in (MessageRole.ASSISTANT, MessageRole.TOOL):
                opened.add(s.run_id)
            elif s.run_id not in opened:
                head[s.run_id] = s.key
        before: dict[str, list[_Slot]] = {}
        floating: dict[str | None, list[_Slot]] = {}
        for run_id, stretch in early.items():
            if run_id is not None and run_id in head:
                after.setdefault(head[run_id], [])[:0] = stretch
            elif run_id is not None and run_id in first:
                before[first[run_id]] = stretch
            else:
                floating[run_id] = stretch
        base: list[_Slot] = []
        for s in anchored:
            base.extend(before.get(s.key, ()))
            base.append(s)
            base.extend(after.get(s.key, ()))
        return self._with_tails_and_unplaced_runs(base, tails, floating)

    def _with_tails_and_unplaced_runs(
        self,
        base: list[_Slot],
        tails: dict[str | None, list[_Slot]],
        floating: dict[str | None, list[_Slot]],
    ) -> list[_Slot]:
        """``base`` with each run's tail after its last entry, and the entries of each run that
        has none in ``base`` as one block, inserted before the first entry of the next run
        (created after it) that has; at the end when none has, or when the run is unknown."""
        first_index: dict[str, int] = {}
        last_index: dict[str, int] = {}
        for index, s in enumerate(base):
            if s.run_id is not None:
                first_index.setdefault(s.run_id, index)
                last_index[s.run_id] = index
        blocks = {
            run_id: [*floating.get(run_id, ()), *tails.get(run_id, ())]
            for run_id in {*floating, *tails}
            if run_id is None or run_id not in last_index
        }
        inserts: dict[int, list[_Slot]] = {}
        trailing: list[_Slot] = []
        next_placed: int | None = None
        for run_id in reversed(self.runs):
            if run_id in first_index:
                next_placed = first_index[run_id]
            elif run_id in blocks:
                place = trailing if next_placed is None else inserts.setdefault(next_placed, [])
                place[:0] = blocks.pop(run_id)
        for unknown in sorted(blocks, key=str):
            trailing.extend(blocks[unknown])
        ordered: list[_Slot] = []
        for index, s in enumerate(base):
            ordered.extend(inserts.get(index, ()))
            ordered.append(s)
            if s.run_id is not None and last_index[s.run_id] == index:
                ordered.extend(tails.get(s.run_id, ()))
        ordered.extend(trailing)
        return ordered

    # groups ----------------------------------------------------------------------------------

    def groups(self, slots: Sequence[_Slot]) -> tuple[DebugGroup, ...]:
        """Consecutive slots of the same run (or of none) as groups with stable keys."""
        stretches: list[tuple[str | None, list[_Slot]]] = []
        for s in slots:
            if stretches and stretches[-1][0] == s.run_id:
                stretches[-1][1].append(s)
            else:
                stretches.append((s.run_id, [s]))
        seen: dict[str, int] = {}
        groups = []
        for run_id, members in stretches:
            run = self.runs.get(run_id) if run_id is not None else None
            if run_id is None:
                key = f"unlinked:{members[0].key}"
            elif run is not None and run["request_id"]:
                key = f"request:{run['request_id']}"
            else:
                key = f"run:{run_id}"
            seen[key] = seen.get(key, 0) + 1
            if seen[key] > 1:
                key = f"{key}#{seen[key]}"
            run = run or {}
            groups.append(
                DebugGroup(
                    key=key,
                    run_id=run_id,
                    request_id=run.get("request_id"),
                    status=run.get("status"),
                    mode=run.get("mode"),
                    model=run.get("model"),
                    trace_id=run.get("trace_id"),
                    created_at=run.get("created_at"),
                    started_at=run.get("started_at"),
                    finished_at=run.get("finished_at"),
                    entries=tuple(self.entry(s) for s in members),
                )
            )
        return tuple(groups)

    # entries ---------------------------------------------------------------------------------

    def entry(self, s: _Slot) -> DebugEntry:
        if s.what == _MODEL:
            return self._model_call(s)
        if s.what == _TOOL:
            return self._tool_call(s)
        if s.what == _ANSWER:
            return self._live_answer(s)
        if s.what == _ERROR:
            return self._error(s)
        if s.what == _USER:
            return self._request(s)
        return self._message(s)

    def _model_call(self, s: _Slot) -> DebugEntry:
        step, message, payload = s.step, s.message, _payload(s.event)
        data = _data(step)
        content = _fullest(
            message["content"] if message else None,
            data.get("action_raw"),
            payload.get("action_raw"),
        )
        if not content and step is not None:
            content = step["description"] or step["name"]
        if not content:
            content = str(payload.get("thought") or "")
        usage = None
        if step is not None:
            usage = {
                name: data[name]
                for name in ("prompt_tokens", "completion_tokens")
                if isinstance(data.get(name), int)
            }
            usage["total_tokens"] = step["tokens"]
        return _entry(
            s,
            entry_id=s.operation_id,
            role=MessageRole.ASSISTANT,
            kind="model",
            label="Model · Tools" if s.operation_id in self.asked_tools else "Model",
            summary=content,
            model=str(data.get("model") or ""),
            usage=usage,
            created_at=_first_time(message, step, s.event),
            started_at=step["started_at"] if step else _iso_ms(payload.get("started_at_ms")),
            finished_at=step["finished_at"] if step else None,
            duration_ms=step["duration_ms"] if step else None,
            step_seq=step["seq"] if step else None,
            status=step["status"] if step else StepStatus.COMPLETED,
            failed=bool(step and step["status"] == StepStatus.FAILED),
            raw={"message": message, "step": step, "event": s.event},
        )

    def _tool_call(self, s: _Slot) -> DebugEntry:
        action, result, message, payload = s.step, s.result, s.message, _payload(s.event)
        metadata = _metadata(message)
        action_data = _data(action)
        name = str(
            action_data.get("tool_name")
            or (action["name"] if action else "")
            or metadata.get("tool_name")
            or payload.get("tool_name")
            or (result["name"] if result else "")
            or "tool"
        )
        error = (result["error"] if result else "") or metadata.get("error") or payload.get("error")
        output = _fullest(
            _data(result).get("observation"),
            message["content"] if message else None,
            payload.get("observation"),
        )
        summary = str(error or "") or output
        if not summary:
            arguments = action_data.get("arguments", payload.get("tool_args"))
            if arguments is not None:
                summary = json.dumps(arguments, ensure_ascii=False, sort_keys=True)
        timing = action or result
        if timing is not None:
            status = timing["status"]
        else:
            status = StepStatus.FAILED if error else StepStatus.COMPLETED
        return _entry(
            s,
            entry_id=s.operation_id,
            role=MessageRole.TOOL,
            kind="tool",
            label=f"Tool · {name}",
            summary=summary,
            model="",
            usage=None,
            created_at=_first_time(message, timing, s.event),
            started_at=timing["started_at"] if timing else None,
            finished_at=timing["finished_at"] if timing else None,
            duration_ms=timing["duration_ms"] if timing else None,
            step_seq=timing["seq"] if timing else None,
            status=status,
            failed=bool(error) or status == StepStatus.FAILED,
            raw={"message": message, "action": action, "result": result, "event": s.event},
        )

    def _live_answer(self, s: _Slot) -> DebugEntry:
        deltas = [s.deltas[seq] for seq in sorted(s.deltas)]
        run = self.runs.get(s.run_id) if s.run_id else None
        return _entry(
            s,
            entry_id=str(s.run_id),
            role=MessageRole.ASSISTANT,
            kind="model",
            label="Model",
            summary="".join(str(_payload(d).get("content") or "") for d in deltas),
            model=run["model"] if run else "",
            usage=None,
            created_at=deltas[0]["created_at"] if deltas else None,
            status=RunStatus.RUNNING,
            raw={"events": deltas},
        )

    def _error(self, s: _Slot) -> DebugEntry:
        run = s.run
        assert run is not None
        summary = f"{run['error_code']}: {run['error']}" if run["error_code"] else run["error"]
        return _entry(
            s,
            entry_id=run["id"],
            role="error",
            kind="error",
            label="Error",
            summary=summary,
            model="",
            usage=None,
            created_at=run["finished_at"],
            status=run["status"],
            raw={"run": run},
        )

    def _request(self, s: _Slot) -> DebugEntry:
        """A user's request: its stored message, its queued run, or both."""
        message, request = s.message, s.request
        if message is not None:
            entry_id, content, created = message["id"], message["content"], message["created_at"]
        else:
            assert request is not None
            entry_id = request["request_id"] or request["id"]
            content, created = request["input"], request["created_at"]
        return _entry(
            s,
            entry_id=entry_id,
            role=MessageRole.USER,
            kind="user",
            label="User",
            summary=content,
            model="",
            usage=None,
            created_at=created,
            status=RunStatus.QUEUED if request is not None else StepStatus.COMPLETED,
            raw={"message": message, "request": request},
        )

    def _message(self, s: _Slot) -> DebugEntry:
        message = s.message
        assert message is not None
        metadata = _metadata(message)
        role = message["role"]
        error = metadata.get("error") if role == MessageRole.TOOL else None
        kinds: dict[str, tuple[str, str]] = {
            MessageRole.USER: ("user", "User"),
            MessageRole.ASSISTANT: ("model", "Model"),
            MessageRole.TOOL: ("tool", f"Tool · {metadata.get('tool_name') or 'tool'}"),
        }
        kind, label = kinds.get(role, ("system", "System"))
        return _entry(
            s,
            entry_id=message["id"],
            role=role,
            kind=kind,
            label=label,
            summary=str(error or "") or message["content"],
            model=str(metadata.get("model") or "") if role == MessageRole.ASSISTANT else "",
            usage=None,
            created_at=message["created_at"],
            status=StepStatus.FAILED if error else StepStatus.COMPLETED,
            failed=bool(error),
            raw={"message": message},
        )


def _entry(
    s: _Slot,
    *,
    entry_id: str,
    role: str,
    kind: str,
    label: str,
    summary: str,
    model: str,
    usage: dict[str, int] | None,
    created_at: str | None,
    status: str,
    raw: dict[str, Any],
    started_at: str | None = None,
    finished_at: str | None = None,
    duration_ms: int | None = None,
    step_seq: int | None = None,
    failed: bool = False,
) -> DebugEntry:
    return DebugEntry(
        key=s.key,
        id=entry_id,
        run_id=s.run_id,
        role=str(role),
        kind=kind,
        filters=(kind, "error") if failed and kind != "error" else (kind,),
        label=label,
        summary=_one_line(summary),
        model=model,
        usage=usage,
        created_at=created_at,
        started_at=started_at,
        finished_at=finished_at,
        duration_ms=duration_ms,
        sequence=s.anchor,
        step_seq=step_seq,
        status=str(status),
        timed=started_at is not None,
        raw={name: record for name, record in raw.items() if record is not None},
    )


# --- records ------------------------------------------------------------------------------------


def _message_record(message: Message, *, run_id: str | None) -> Record:
    return {
        "id": str(message.id),
        "role": message.role,
        "kind": message.kind,
        "content": message.content,
        "run_id": run_id,
        "request_id": message.request_id,
        "sequence": message.sequence,
        "metadata": message.metadata,
        "created_at": _iso(message.created_at),
    }


def _step_record(step: Step, *, trace_id: str) -> Record:
    parent_id = step.parent_id
    return {
        "id": str(step.id),
        "trace_id": trace_id,
        "parent_id": str(parent_id) if parent_id is not None else None,
        "seq": step.seq,
        "step_type": step.step_type,
        "status": step.status,
        "name": step.name,
        "description": step.description,
        "data": step.data,
        "error": step.error,
        "started_at": _iso(step.started_at),
        "finished_at": _iso(step.finished_at),
        "duration_ms": step.duration_ms,
        "tokens": step.tokens,
        "cost": str(step.cost),
        "created_at": _iso(step.created_at),
    }


def _event_record(event: RunEvent, *, run_id: str) -> Record:
    return {
        "run_id": run_id,
        "seq": event.seq,
        "type": event.type,
        "payload": event.payload,
        "created_at": _iso(event.created_at),
    }


def _run_record(run: AgentRun) -> Record:
    return {
        "id": str(run.id),
        "request_id": run.request_id,
        "mode": run.mode,
        "status": run.status,
        "input": run.input,
        "model": run.model,
        "error": run.error,
        "error_code": run.error_code,
        "trace_id": str(run.trace_id) if run.trace_id else None,
        "created_at": _iso(run.created_at),
        "started_at": _iso(run.started_at),
        "finished_at": _iso(run.finished_at),
    }


# --- small helpers ------------------------------------------------------------------------------


def _payload(event: Record | None) -> dict[str, Any]:
    payload = event["payload"] if event is not None else None
    return payload if isinstance(payload, dict) else {}


def _data(step: Record | None) -> dict[str, Any]:
    data = step["data"] if step is not None else None
    return data if isinstance(data, dict) else {}


def _metadata(message: Record | None) -> dict[str, Any]:
    metadata = message["metadata"] if message is not None else None
    return metadata if isinstance(metadata, dict) else {}


def _fullest(*texts: Any) -> str:
    """The longest of the texts given (the first of equals): where a stored row and a live row
    tell the same thing, the fuller one wins."""
    best = ""
    for text in texts:
        if isinstance(text, str) and len(text) > len(best):
            best = text
    return best


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


def _iso_ms(value: Any) -> str | None:
    if not isinstance(value, int | float) or isinstance(value, bool):
        return None
    return _iso(datetime.fromtimestamp(value / 1000, tz=UTC))


def _first_time(*records: Record | None) -> str | None:
    for record in records:
        if record is not None and record["created_at"] is not None:
            return str(record["created_at"])
    return None
