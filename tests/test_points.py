"""Points of a log as people give them (``kraftlog.points``): offsets, times, ``now``, ``-1h``, ``latest``."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from kraftlog.errors import PointError
from kraftlog.points import parse_bound, parse_point, parse_time

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
