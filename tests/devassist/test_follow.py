from __future__ import annotations

from typing import Any

from devassist.follow import LogFollower


def log_of(count: int) -> list[tuple[int, dict[str, Any]]]:
    return [(seq, {"seq": seq}) for seq in range(1, count + 1)]


def follower(log: list[tuple[int, dict[str, Any]]], after_seq: int, fetches: list[Any]):
    async def fetch(after: int, up_to: int | None) -> list[tuple[int, dict[str, Any]]]:
        fetches.append((after, up_to))
        rows = [row for row in log if row[0] > after and (up_to is None or row[0] <= up_to)]
        return rows[:2]

    return LogFollower(fetch, after_seq=after_seq, page_size=2)


async def collect(events: Any) -> list[int]:
    return [seq async for seq, _ in events]


async def test_backlog_pages_through_the_stored_events():
    fetches: list[Any] = []
    follow = follower(log_of(5), 0, fetches)
    assert await collect(follow.backlog()) == [1, 2, 3, 4, 5]
    assert fetches == [(0, None), (2, None), (4, None)]  # a short page ends it
    assert follow.last == 5


async def test_backlog_stops_at_up_to():
    follow = follower(log_of(5), 1, [])
    assert await collect(follow.backlog(up_to=3)) == [2, 3]


async def test_live_drops_what_was_delivered_and_fills_gaps_from_the_log():
    log = log_of(6)
    follow = follower(log, 2, [])
    assert await collect(follow.live(2, {"seq": 2})) == []
    assert await collect(follow.live(5, {"seq": 5})) == [3, 4, 5]
    assert await collect(follow.live(4, {"seq": 4})) == []
    assert await collect(follow.live(6, {"seq": 6})) == [6]
    assert follow.last == 6
