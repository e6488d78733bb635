"""Points of a log as people give them (``kraftlog.points``): offsets, times, ``now``, ``-1h``, ``latest``."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kraftlog.errors import PointError
from kraftlog.points import ANY, GREATEST, Ask, last_offset_at, last_offsets_at, parse_bound, parse_point, parse_time

NOW = datetime(2026, 11, 24, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(("text", "ago"), [("now", 0), ("-90s", 90), ("-30m", 1800), ("-1h", 3600),
                                           ("-1.5h", 5400), ("-7d", 7 * 86400), ("-2w", 14 * 86400)])
def test_times_relative_to_now(text: str, ago: int) -> None:
    assert parse_time(text, NOW) == NOW - timedelta(seconds=ago)
    assert parse_point(text, NOW) == (None, int((NOW - timedelta(seconds=ago)).timestamp() * 1000))


def test_absolute_times_offsets_and_the_end() -> None:
    assert parse_time("2026-11-21T03:14:00Z") == datetime(2026, 11, 21, 3, 14, tzinfo=UTC)
    assert parse_time("2026-11-21T03:14:00") == datetime(2026, 11, 21, 3, 14, tzinfo=UTC)  # UTC when no zone
    assert parse_time("ms:1700000000000") == datetime.fromtimestamp(1_700_000_000, UTC)
    assert parse_point("1834") == (1834, None)
    assert parse_point("latest") == parse_point(None) == (None, None)
    assert parse_bound("latest") is None and parse_bound(None) is None and parse_bound("-1h", NOW) == NOW - timedelta(
        hours=1)


@pytest.mark.parametrize("text", ["yesterday", "-1y", "1h", "-h", "ms:abc", "-5"])
def test_what_is_not_a_point_is_an_error_naming_the_forms(text: str) -> None:
    with pytest.raises(PointError, match="now, or a time ago like -30m"):
        parse_point(text, NOW)


class ListedOffsets:
    """``RecordOffsets`` over (offset, time) pairs by cluster, keeping each round of questions asked."""

    def __init__(self, rows: dict[str, list[tuple[int, int]]]):
        self.rows = rows
        self.rounds: list[dict[str, Ask]] = []

    def answer(self, asks: Mapping[str, Ask]) -> dict[str, int | None]:
        self.rounds.append(dict(asks))
        found: dict[str, int | None] = {}
        for c, ask in asks.items():
            r = ask.records
            offsets = [o for o, t in self.rows[c] if (r.offset_from is None or o >= r.offset_from)
                       and (r.offset_below is None or o < r.offset_below) and (r.time_after is None or t > r.time_after)
                       and (r.time_to is None or t <= r.time_to)]
            if offsets:
                found[c] = offsets[-1] if ask.what == ANY else (max if ask.what == GREATEST else min)(offsets)
        return found


def log_rows(steps: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """(offset, time) of a log whose each record comes ``gap`` offsets and ``step`` milliseconds after the last."""
    rows, offset, ms = [], -1, 100
    for gap, step in steps:
        offset, ms = offset + gap + 1, ms + step
        rows.append((offset, ms))
    return rows


def last_at(rows: list[tuple[int, int]], at: int) -> int:
    return max((o for o, t in rows if t <= at), default=-1)


LOGS = st.lists(st.tuples(st.sampled_from([0, 0, 0, 1, 5, 40, 3000]), st.integers(-15, 20)), max_size=60)


@given(steps=LOGS, near=st.tuples(st.integers(0, 59), st.integers(-3, 3)), span=st.sampled_from([1, 2, 3, 1024]),
       known=st.sampled_from([None, 0, -1]))
def test_the_offset_at_a_time_is_the_last_record_at_or_before_it_read_from_the_end(
        steps: list[tuple[int, int]], near: tuple[int, int], span: int, known: int | None) -> None:
    """``last_offset_at``: the last offset among every record at or before the time, where offsets skip (a gap in
    the log) and times go back (a controller's clock behind); and never a question without a bound on where to read
    (every record) while a record is after the time or the last offset is known."""
    rows = log_rows(steps)
    at = rows[near[0] % len(rows)][1] + near[1] if rows else 100  # about a record's time
    log = ListedOffsets({"c": rows})
    hint = None if known is None or not rows else rows[known][0]  # the first or the last offset
    assert last_offset_at(log, "c", at, hint, span) == last_at(rows, at)
    unbounded = [a for r in log.rounds for a in r.values()
                 if a.what != ANY and a.records.offset_from is None and a.records.time_after is None]
    if any(t > at for _, t in rows) or (hint is not None and hint == rows[-1][0]):
        assert unbounded == [], unbounded


@given(logs=st.lists(LOGS, min_size=1, max_size=5), at=st.integers(60, 400), span=st.sampled_from([1, 2, 1024]))
def test_the_offsets_at_a_time_of_several_clusters_are_asked_together(
        logs: list[list[tuple[int, int]]], at: int, span: int) -> None:
    """``last_offsets_at`` of several clusters: each cluster's answer is its own alone, found by the same questions,
    in as many rounds as the cluster that asks most asks alone (each round at most one question per cluster)."""
    rows = {f"c{i}": log_rows(steps) for i, steps in enumerate(logs)}
    together = ListedOffsets(rows)
    found = last_offsets_at(together, {c: (at, None) for c in rows}, span)
    assert found == {c: last_at(r, at) for c, r in rows.items()}
    most = 0
    for c in rows:
        alone = ListedOffsets(rows)
        last_offset_at(alone, c, at, None, span)
        most = max(most, len(alone.rounds))
        assert [r[c] for r in together.rounds if c in r] == [r[c] for r in alone.rounds]
    assert len(together.rounds) == most
