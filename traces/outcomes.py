"""What a step's outcome was: one rule, shown the same way by the chat's step cards, the trace
browser, the debug panel and the admin.

A step's stored ``status`` says whether it ran, runs or was skipped; its ``error`` what went
wrong outside the tool. A tool's own verdict is in its ``result`` step's data: the structured
result (``data["result"]``, or the data itself for the sandbox's call traces) of a program that
exited non-zero, timed out, ran out of memory or was cancelled, or of code the safety scan
refused. ``step_outcome`` reads all of it, so a program that raised is ``failed`` whatever
status an older recorder gave its step.

The agent's recorder stores a result with the status ``result_status`` gives, so the status
(and with it the rollups ``error_count`` / ``subtree_error_count``, the trace browser's "next
error" and the debug panel's Error filter) agrees with the outcome from the moment it is
written. Steps recorded before that keep the status they were written with; the outcome shown
for them is still derived from their data.

This module imports nothing above ``traces`` and reads no database: ``OUTCOME_KEYS`` are the
only keys of a result's data it reads, and the store keeps them beside the data
(``Step.tool_facts``, written with it), so the skeleton reads (the trees, the API) show the
outcome without loading any data.

An outcome's words are English wherever it is data: the API, the stream's events and the run's
event log carry it so. Pages show it in the reader's language: ``localized_summary`` and
``localized_reason`` translate the label and the reasons this module words itself (an error
text is the program's, shown as it is).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from django.db.models import Q
from django.utils.translation import gettext, gettext_noop, pgettext_lazy

from traces.models import StepStatus, StepType


class OutcomeKind(StrEnum):
    OK = "ok"
    FAILED = "failed"
    BLOCKED = "blocked"
    TIMED_OUT = "timed_out"
    OOM = "oom"
    CANCELLED = "cancelled"
    RUNNING = "running"
    PENDING = "pending"


#: The kinds that count as an error of the trace. A cancellation is not one (as a cancelled
#: run's goal step is not: see docs/architecture.md, "One record").
ERROR_KINDS = frozenset(
    {OutcomeKind.FAILED, OutcomeKind.BLOCKED, OutcomeKind.TIMED_OUT, OutcomeKind.OOM}
)

#: The words on a step's badge, by kind.
LABELS: dict[OutcomeKind, str] = {
    OutcomeKind.OK: "ok",
    OutcomeKind.FAILED: "failed",
    OutcomeKind.BLOCKED: "blocked",
    OutcomeKind.TIMED_OUT: "timed out",
    OutcomeKind.OOM: "out of memory",
    OutcomeKind.CANCELLED: "cancelled",
    OutcomeKind.RUNNING: "running",
    OutcomeKind.PENDING: "pending",
}

#: The reasons this module words itself, with a value in them (``gettext_noop``: stored in
#: English, shown translated by ``localized_reason``).
EXIT_CODE = gettext_noop("exit code %(code)s")
BLOCKED_BY = gettext_noop("blocked: %(name)s")
TIMED_OUT_AFTER = gettext_noop("timed out after %(seconds)s s")
_REASONS = (EXIT_CODE, BLOCKED_BY, TIMED_OUT_AFTER)

#: The symbol before the label, by kind (the badge's colour comes from its ``st-<kind>`` class).
SYMBOLS: dict[OutcomeKind, str] = {
    OutcomeKind.OK: "✓",
    OutcomeKind.FAILED: "✗",
    OutcomeKind.BLOCKED: "⊘",
    OutcomeKind.TIMED_OUT: "⏱",
    OutcomeKind.OOM: "✗",
    OutcomeKind.CANCELLED: "■",
    OutcomeKind.RUNNING: "…",
    OutcomeKind.PENDING: "·",
}

#: The keys of a tool's structured result the rule reads.
OUTCOME_KEYS = (
    "blocked",
    "safety",
    "timed_out",
    "oom_killed",
    "cancelled",
    "exit_code",
    "duration_ms",
)

#: How long a reason gets, in characters.
REASON_MAX_CHARS = 120

_BLOCKED_LINE = re.compile(r"^\s*\[BLOCKED\]\s*(?:\(line \d+\)\s*)?(.*)$", re.MULTILINE)


@dataclass(frozen=True)
class Outcome:
    """A step's outcome: its ``kind`` (an ``OutcomeKind`` value), the ``label`` its badge
    shows, and the one-line ``reason`` its collapsed line shows (empty when there is nothing
    to add to the label: "exit code 1", "blocked: os.system", "timed out after 5 s")."""

    kind: str
    label: str
    reason: str

    @property
    def is_error(self) -> bool:
        return self.kind in ERROR_KINDS

    @property
    def summary(self) -> str:
        """The collapsed line's words: the reason when it says the label already ("blocked:
        os.system", "timed out after 5 s"), else the label and the reason ("failed · exit code
        1"), else the label."""
        if not self.reason or self.reason.startswith(self.label):
            return self.reason or self.label
        return f"{self.label} · {self.reason}"

    def as_dict(self) -> dict[str, Any]:
        """The outcome as the projections carry it: its fields, ``summary`` and
        ``is_error``."""
        # Not dataclasses.asdict: its deep copies were a third of a 10,000-step tree's time.
        return {
            "kind": self.kind,
            "label": self.label,
            "reason": self.reason,
            "summary": self.summary,
            "is_error": self.is_error,
        }


def outcome_symbol(kind: str) -> str:
    """The symbol a badge shows before its label ("" for an unknown kind)."""
    try:
        return SYMBOLS[OutcomeKind(kind)]
    except ValueError:
        return ""


def _outcome(kind: OutcomeKind, reason: str = "") -> Outcome:
    return Outcome(kind=kind.value, label=LABELS[kind], reason=_one_line(reason))


def _one_line(text: str) -> str:
    line = next((line.strip() for line in text.splitlines() if line.strip()), "")
    return line if len(line) <= REASON_MAX_CHARS else line[: REASON_MAX_CHARS - 1] + "…"


def tool_facts(data: Any) -> dict[str, Any]:
    """The ``OUTCOME_KEYS`` of a result step's data: each from its structured result
    (``data["result"]``, when that is an object holding the key) or else from the data itself
    (the sandbox's call traces store the result flat); keys without a value (absent or JSON
    null) are left out, and so is an ``exit_code`` that is not an integer. Data that is not an
    object has none."""
    if not isinstance(data, dict):
        return {}
    nested = data.get("result")
    facts: dict[str, Any] = {}
    for key in OUTCOME_KEYS:
        value = nested[key] if isinstance(nested, dict) and key in nested else data.get(key)
        if key == "exit_code" and (not isinstance(value, int) or isinstance(value, bool)):
            continue  # only a number is an exit code (and so the SQL twin can compare it)
        if value is not None:
            facts[key] = value
    return facts


def step_outcome(step_type: str, status: str, error: str, data: Any) -> Outcome:
    """The outcome of a step, from its type, stored status, error text and data (the whole
    data, or just its ``tool_facts``: the answer is the same). Never raises, whatever
    ``data`` holds.

    In order: a running step is ``running`` (``pending`` when only planned), a skipped one
    ``cancelled``; a ``result`` step's tool verdict (blocked by the safety scan, timed out,
    out of memory, cancelled, a non-zero exit code); an error text is ``failed`` with its
    first line; a ``failed`` status without one is ``failed``; anything else ``ok``."""
    if status == StepStatus.RUNNING:
        return _outcome(OutcomeKind.RUNNING)
    if status == StepStatus.PLANNED:
        return _outcome(OutcomeKind.PENDING)
    if status == StepStatus.SKIPPED:
        return _outcome(OutcomeKind.CANCELLED, "cancelled")
    if step_type == StepType.RESULT:
        verdict = _tool_verdict(tool_facts(data))
        if verdict is not None:
            return verdict
    if error:
        return _outcome(OutcomeKind.FAILED, error)
    if status == StepStatus.FAILED:
        return _outcome(OutcomeKind.FAILED)
    return _outcome(OutcomeKind.OK)


def _fact(path: str) -> Q:
    """``tool_facts`` holds ``true`` at ``path`` (``safety__blocked``); false, not unknown, when
    the key is missing."""
    *outer, key = path.split("__")
    lookup = "__".join(["tool_facts", *outer])
    return Q(**{f"{lookup}__has_key": key, f"tool_facts__{path}": True})


def error_condition() -> Q:
    """``step_outcome(...).is_error`` as a query condition on the step's columns (its
    ``tool_facts`` standing for its data), for what is looked up in SQL: "next error" and the
    error filters. It follows ``step_outcome`` branch by branch; tests hold the two to the same
    answers. Each key is tested for presence before its value, so a missing key is false,
    never SQL's unknown, and negations mean what they say."""
    finished = Q(status__in=[StepStatus.COMPLETED, StepStatus.FAILED])
    result = Q(step_type=StepType.RESULT)
    stopped = _fact("blocked") | _fact("safety__blocked") | _fact("timed_out") | _fact("oom_killed")
    cancelled = _fact("cancelled")
    exit_code = Q(tool_facts__has_key="exit_code") & ~Q(tool_facts__exit_code=0)
    return finished & (
        (result & stopped)
        | (
            ~(result & cancelled)
            & ((result & exit_code) | ~Q(error="") | Q(status=StepStatus.FAILED))
        )
    )


def result_status(*, error: str, data: Any) -> StepStatus:
    """The status a finished ``result`` step is stored with: ``failed`` when its outcome is
    an error (an error text, or a tool verdict such as a non-zero exit code), ``skipped``
    when the tool was cancelled, ``completed`` otherwise."""
    outcome = step_outcome(StepType.RESULT, StepStatus.COMPLETED, error, data)
    if outcome.is_error:
        return StepStatus.FAILED
    if outcome.kind == OutcomeKind.CANCELLED:
        return StepStatus.SKIPPED
    return StepStatus.COMPLETED


def _tool_verdict(facts: dict[str, Any]) -> Outcome | None:
    safety = facts.get("safety")
    report = safety if isinstance(safety, dict) else {}
    if facts.get("blocked") is True or report.get("blocked") is True:
        text = report.get("text") if report else safety
        reason = BLOCKED_BY % {"name": _blocked_reason(text)}
        return _outcome(OutcomeKind.BLOCKED, reason.rstrip(": "))
    if facts.get("timed_out") is True:
        return _outcome(OutcomeKind.TIMED_OUT, _timed_out(facts.get("duration_ms")))
    if facts.get("oom_killed") is True:
        return _outcome(OutcomeKind.OOM, "out of memory")
    if facts.get("cancelled") is True:
        return _outcome(OutcomeKind.CANCELLED, "cancelled")
    code = facts.get("exit_code")
    if isinstance(code, int) and not isinstance(code, bool) and code != 0:
        return _outcome(OutcomeKind.FAILED, EXIT_CODE % {"code": code})
    return None


def _blocked_reason(text: Any) -> str:
    """What the first blocked finding of a safety report names: "os.system" of "os.system is
    blocked: …"; the finding's first sentence when it names nothing so."""
    if not isinstance(text, str):
        return ""
    match = _BLOCKED_LINE.search(text)
    if match is None:
        return ""
    finding = match.group(1).strip()
    named, found, _ = finding.partition(" is blocked")
    return named if found and named else finding


def _timed_out(duration_ms: Any) -> str:
    if isinstance(duration_ms, int | float) and not isinstance(duration_ms, bool):
        return TIMED_OUT_AFTER % {"seconds": round(duration_ms / 1000)}
    return "timed out"


# --- in the reader's language -------------------------------------------------------------------


#: The badges' labels (``LABELS`` values) as pages show them, looked up when shown.
_LABEL_WORDS = {
    "ok": pgettext_lazy("outcome", "ok"),
    "failed": pgettext_lazy("outcome", "failed"),
    "blocked": pgettext_lazy("outcome", "blocked"),
    "timed out": pgettext_lazy("outcome", "timed out"),
    "out of memory": pgettext_lazy("outcome", "out of memory"),
    "cancelled": pgettext_lazy("outcome", "cancelled"),
    "running": pgettext_lazy("outcome", "running"),
    "pending": pgettext_lazy("outcome", "pending"),
}


def _label_words(label: str) -> str:
    """A badge's label (a ``LABELS`` value) in the active language."""
    return str(_LABEL_WORDS.get(label, label))


def _pattern(template: str) -> re.Pattern[str]:
    """``template`` (``"exit code %(code)s"``) as a pattern with a named group per value."""
    pieces = re.split(r"%\((\w+)\)s", template)
    return re.compile(
        "".join(re.escape(p) if i % 2 == 0 else f"(?P<{p}>.*)" for i, p in enumerate(pieces))
    )


_REASON_PATTERNS = tuple((template, _pattern(template)) for template in _REASONS)


def localized_reason(outcome: Mapping[str, Any]) -> str:
    """The ``reason`` of an outcome (``Outcome.as_dict()``) in the active language: the words
    this module chose translated, any other text (an error's first line) as it is."""
    reason: str = outcome.get("reason") or ""
    if reason in LABELS.values():
        return _label_words(reason)
    for template, pattern in _REASON_PATTERNS:
        match = pattern.fullmatch(reason)
        if match:
            return gettext(template) % match.groupdict()
    return reason


def localized_summary(outcome: Mapping[str, Any]) -> str:
    """``Outcome.summary`` of an outcome (``Outcome.as_dict()``) in the active language, in
    the same shape: the reason when it says the label already, else the label and the reason,
    else the label."""
    label: str = outcome.get("label") or ""
    reason: str = outcome.get("reason") or ""
    if not reason:
        return _label_words(label)
    if reason.startswith(label):
        return localized_reason(outcome)
    return f"{_label_words(label)} · {localized_reason(outcome)}"
