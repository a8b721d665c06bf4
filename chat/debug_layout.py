"""The debug panel's layout: the conversation's groups and entries as the panel lists them,
each placed on the timeline overview, where runs are laid end to end with the idle time between
them removed.

Times on the timeline are *compressed seconds*: 0 is the start of the first group, and each
group lasts as long as its run did, one after the other in the panel's order. The panel selects
a range of compressed seconds and keeps the entries whose span overlaps it, so the list and the
bars agree by construction: both come from ``panel_layout``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from chat.debug import DebugEntry, DebugGroup, DebugView

#: A group lasts at least this long on the timeline (compressed seconds), so that one without
#: stored times, or a run that took no measurable time, is still visible and can be selected.
MIN_GROUP_S = 1.0


@dataclass(frozen=True)
class Span:
    """A stretch of the timeline: ``start_s``/``end_s`` in compressed seconds, ``left``/``width``
    the same as percentages of the whole. ``timed`` is False when it does not come from stored
    times (an entry without them spans its group; a group without any lasts ``MIN_GROUP_S``)."""

    start_s: float
    end_s: float
    left: float
    width: float
    timed: bool


@dataclass(frozen=True)
class PanelRow:
    entry: DebugEntry
    span: Span


@dataclass(frozen=True)
class PanelGroup:
    group: DebugGroup
    span: Span
    rows: tuple[PanelRow, ...]


@dataclass(frozen=True)
class PanelLayout:
    total_s: float
    groups: tuple[PanelGroup, ...]


def _parse(value: str | None) -> datetime | None:
    return datetime.fromisoformat(value.replace("Z", "+00:00")) if value else None


def _group_origin_and_length(group: DebugGroup) -> tuple[datetime, float] | None:
    """The earliest stored time of the group (its run's start and finish, its timed entries'
    start and end) and the seconds to the latest; None when nothing in the group has a time."""
    times = [_parse(group.started_at), _parse(group.finished_at)]
    for entry in group.entries:
        if entry.timed:
            times += (_parse(entry.started_at), _entry_end(entry))
    known = [t for t in times if t is not None]
    if not known:
        return None
    origin = min(known)
    return origin, (max(known) - origin).total_seconds()


def _entry_end(entry: DebugEntry) -> datetime | None:
    """When the entry ended: its stored finish, else its start plus its stored duration (a
    model call stores no finish); None while it runs."""
    finished = _parse(entry.finished_at)
    started = _parse(entry.started_at)
    if finished is None and started is not None and entry.duration_ms is not None:
        return started + timedelta(milliseconds=entry.duration_ms)
    return finished


def _entry_seconds(
    entry: DebugEntry, origin: datetime, length: float
) -> tuple[float, float] | None:
    """The entry's start and end in seconds from ``origin``; a call with a start and no end
    (still running) reaches ``length``; None for an entry without a stored start."""
    started = _parse(entry.started_at)
    if not entry.timed or started is None:
        return None
    ended = _entry_end(entry)
    start = (started - origin).total_seconds()
    end = (ended - origin).total_seconds() if ended is not None else length
    return start, max(start, end)


def panel_layout(*, view: DebugView) -> PanelLayout:
    """``view``'s groups end to end in their order. A group lasts from the earliest to the
    latest stored time in it, at least ``MIN_GROUP_S``; the wall-clock time between groups is
    left out. A timed entry spans its start to its finish (or its start plus its stored
    duration; a call still running reaches the end of its group); an untimed one spans its whole
    group, ``timed`` False. O(entries)."""
    placed: list[tuple[DebugGroup, float, float, bool, list[tuple[DebugEntry, float, float, bool]]]]
    placed = []
    offset = 0.0
    for group in view.groups:
        found = _group_origin_and_length(group)
        length = max(found[1], MIN_GROUP_S) if found else MIN_GROUP_S
        rows = []
        for entry in group.entries:
            seconds = _entry_seconds(entry, found[0], length) if found else None
            if seconds is None:
                rows.append((entry, offset, offset + length, False))
            else:
                rows.append((entry, offset + seconds[0], offset + seconds[1], True))
        placed.append((group, offset, offset + length, found is not None, rows))
        offset += length
    total = offset

    def span(start: float, end: float, timed: bool) -> Span:
        def pct(seconds: float) -> float:
            return seconds / total * 100 if total else 0.0

        return Span(start_s=start, end_s=end, left=pct(start), width=pct(end - start), timed=timed)

    return PanelLayout(
        total_s=total,
        groups=tuple(
            PanelGroup(
                group=group,
                span=span(start, end, timed),
                rows=tuple(PanelRow(entry=e, span=span(s, t, x)) for e, s, t, x in rows),
            )
            for group, start, end, timed, rows in placed
        ),
    )
