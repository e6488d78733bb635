"""Points of a log given by people: an offset, a time (ISO-8601, epoch milliseconds, ``now``, ``-1h``), or
``latest`` (the end of the log)."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

from kraftlog.errors import PointError

LATEST = "latest"  # the end of the log: the default of --at and --to
_RELATIVE = re.compile(r"-(\d+(?:\.\d+)?)\s*(s|sec|m|min|h|d|w)")
_UNIT_SECONDS = {"s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_FORMS = "ISO-8601 like 2026-11-21T03:14:00Z, ms:<epoch millis>, now, or a time ago like -30m, -1h, -7d"


def iso_ms(ms: int) -> str:
    """Epoch milliseconds as ISO-8601 UTC to the millisecond: ``2026-11-21T03:08:01.242Z``."""
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


def parse_time(text: str, now: datetime | None = None) -> datetime:
    """A time: ISO-8601 (``2026-11-21T03:14:00Z``; UTC when no zone is given), ``ms:<epoch millis>``, ``now``,
    or a time before now (``-90s``, ``-30m``, ``-1h``, ``-7d``, ``-2w``); ``now`` defaults to the clock."""
    t = text.strip().lower()
    if t == "now" or (m := _RELATIVE.fullmatch(t)):
        at = now or datetime.now(UTC)
        return at if t == "now" else at - timedelta(seconds=float(m[1]) * _UNIT_SECONDS[m[2]])  # type: ignore[index]
    if t.startswith("ms:"):
        try:
            return datetime.fromtimestamp(int(t[3:]) / 1000, UTC)
        except ValueError as e:
            raise PointError(f"{text!r} is not a time ({_FORMS})") from e
    try:
        when = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError as e:
        raise PointError(f"{text!r} is not a time ({_FORMS})") from e
    return when if when.tzinfo is not None else when.replace(tzinfo=UTC)


def parse_bound(text: str | None, now: datetime | None = None) -> datetime | None:
    """An end of a period: a time (``parse_time``), or None for ``latest`` or nothing (the end of the log)."""
    if text is None or text.strip().lower() == LATEST:
        return None
    return parse_time(text, now)


def parse_point(text: str | None, now: datetime | None = None) -> tuple[int | None, int | None]:
    """An offset (digits), ``latest`` or a time (see ``parse_time``), as (offset, epoch millis); (None, None)
    for the end of the log."""
    if text is None or text.strip().lower() == LATEST:
        return None, None
    t = text.strip()
    if t.isdigit():
        return int(t), None
    return None, int(parse_time(t, now).timestamp() * 1000)


def check_in_log(cluster_id: str, offset: int, floor: int, last: int, snapshot_id: str | None,
                 timestamp_ms: int | None = None) -> None:
    """Raise ``ValueError`` naming the log's range when ``offset`` (resolved from ``timestamp_ms`` if given) is
    outside what is known of ``cluster_id``: from ``floor`` (the base snapshot ``snapshot_id``'s offset, or the
    offset before the log's first) to ``last``."""
    start = f"offset {floor} (snapshot {snapshot_id})" if snapshot_id else f"offset {floor + 1}"
    known = f"its state is known from {start} to offset {last}"
    if timestamp_ms is not None and offset < 0:
        when = datetime.fromtimestamp(timestamp_ms / 1000, UTC).isoformat()
        raise PointError(f"{when} is before the first record of {cluster_id}'s log; {known}")
    if offset < floor or offset > last:
        raise PointError(f"offset {offset} is outside the log of {cluster_id}: {known}")
