"""Table tests of the debug panel's timeline layout (chat.debug_layout): runs end to end with the
idle time between them removed, and each entry placed from its stored times."""

from __future__ import annotations

from typing import Any

import pytest

from chat.debug import DebugEntry, DebugGroup, DebugView
from chat.debug_layout import MIN_GROUP_S, panel_layout
from traces.outcomes import step_outcome


def entry(key: str, *, started: str | None = None, **fields: Any) -> DebugEntry:
    values: dict[str, Any] = {
        "key": key,
        "id": key,
        "run_id": None,
        "role": "assistant",
        "kind": "model",
        "filters": ("model",),
        "label": "Model",
        "summary": "",
        "model": "",
        "usage": None,
        "created_at": None,
        "started_at": started,
        "finished_at": None,
        "duration_ms": None,
        "sequence": None,
        "step_seq": None,
        "status": "completed",
        "outcome": step_outcome("thought", "completed", "", {}).as_dict(),
        "timed": started is not None,
        "raw": {},
    }
    values.update(fields)
    return DebugEntry(**values)


def group(
    key: str, *entries: DebugEntry, started: str | None = None, finished: str | None = None
) -> DebugGroup:
    return DebugGroup(
        key=key,
        run_id=key if started else None,
        request_id=None,
        status="completed" if started else None,
        mode="agent" if started else None,
        model=None,
        trace_id=None,
        created_at=started,
        started_at=started,
        finished_at=finished,
        entries=entries,
    )


def view(*groups: DebugGroup) -> DebugView:
    return DebugView(conversation_id="c", title="t", live=False, groups=groups, counts={})


def spans(*groups: DebugGroup) -> dict[str, tuple[float, float, bool]]:
    """Every group's and entry's (start_s, end_s, timed), by key."""
    layout = panel_layout(view=view(*groups))
    placed = {}
    for g in layout.groups:
        placed[g.group.key] = (g.span.start_s, g.span.end_s, g.span.timed)
        for row in g.rows:
            placed[row.entry.key] = (row.span.start_s, row.span.end_s, row.span.timed)
    return placed


T = "2025-03-01T10:00:0"


def test_runs_are_laid_end_to_end_without_the_idle_time_between_them():
    first = group("run:a", started=f"{T}0Z", finished=f"{T}3Z")
    # An hour later: the hour is not on the timeline.
    second = group("run:b", started="2025-03-01T11:00:00Z", finished="2025-03-01T11:00:02.5Z")
    layout = panel_layout(view=view(first, second))
    assert layout.total_s == 5.5
    assert [(g.span.start_s, g.span.end_s) for g in layout.groups] == [(0, 3), (3, 5.5)]
    assert [(round(g.span.left, 3), round(g.span.width, 3)) for g in layout.groups] == [
        (0, 54.545),
        (54.545, 45.455),
    ]


@pytest.mark.parametrize(
    ("call", "expected"),
    [
        pytest.param(
            entry("tool", started=f"{T}1Z", finished_at=f"{T}2.5Z", duration_ms=1500),
            (1, 2.5, True),
            id="start and finish",
        ),
        pytest.param(
            entry("model", started=f"{T}1Z", duration_ms=500),
            (1, 1.5, True),
            id="a model call: start and stored duration, no finish",
        ),
        pytest.param(
            entry("running", started=f"{T}2Z", status="running"),
            (2, 4, True),
            id="still running: to the end of its run",
        ),
        pytest.param(
            entry("user", created_at=f"{T}0.5Z", timed=False),
            (0, 4, False),
            id="no stored start: spans its run",
        ),
    ],
)
def test_an_entry_is_placed_from_its_stored_times_within_its_run(call, expected):
    run = group("run:a", call, started=f"{T}0Z", finished=f"{T}4Z")
    assert spans(run)[call.key] == expected


def test_entries_are_placed_within_their_own_run_after_the_runs_before():
    first = group("run:a", started=f"{T}0Z", finished=f"{T}2Z")
    call = entry("tool", started="2025-03-01T12:00:01Z", finished_at="2025-03-01T12:00:03Z")
    second = group("run:b", call, started="2025-03-01T12:00:00Z", finished="2025-03-01T12:00:04Z")
    assert spans(first, second)["tool"] == (3, 5, True)


def test_stored_times_outside_the_run_widen_its_group():
    early = entry("early", started=f"{T}0Z", finished_at=f"{T}1Z")
    run = group("run:a", early, started=f"{T}0.5Z", finished=f"{T}3Z")
    assert spans(run) == {"run:a": (0, 3, True), "early": (0, 1, True)}


def test_groups_without_times_and_instant_runs_get_the_minimum_length():
    unlinked = group("unlinked:x", entry("system", kind="system", timed=False))
    instant = group("run:a", entry("m", started=f"{T}0Z"), started=f"{T}0Z", finished=f"{T}0Z")
    placed = spans(unlinked, instant)
    assert placed["unlinked:x"] == (0, MIN_GROUP_S, False)
    assert placed["system"] == (0, MIN_GROUP_S, False)
    assert placed["run:a"] == (MIN_GROUP_S, 2 * MIN_GROUP_S, True)
    # A call still running at the run's start reaches the end of its (minimum) segment.
    assert placed["m"] == (MIN_GROUP_S, 2 * MIN_GROUP_S, True)


def test_a_run_without_entries_keeps_its_segment():
    cancelled = group("run:a", started=f"{T}0Z", finished=f"{T}2Z")
    layout = panel_layout(view=view(cancelled))
    assert layout.groups[0].rows == ()
    assert (layout.groups[0].span.start_s, layout.groups[0].span.end_s) == (0, 2)


def test_an_empty_conversation_has_an_empty_timeline():
    layout = panel_layout(view=view())
    assert (layout.total_s, layout.groups) == (0, ())
