"""Points of a log given by people: an offset, a time (ISO-8601, epoch milliseconds, ``now``, ``-1h``), or
``latest`` (the end of the log)."""

from __future__ import annotations

import re
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

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
                 timestamp_ms: int | None = None, times: Callable[[], tuple[int | None, int | None]] | None = None
                 ) -> None:
    """Raise ``PointError`` naming the log's range when ``offset`` (resolved from ``timestamp_ms`` if given) is
    outside what is known of ``cluster_id``: from ``floor`` (the base snapshot ``snapshot_id``'s offset, or the
    offset before the log's first) to ``last``. ``times``, asked only then: the epoch milliseconds of the first log
    record past ``floor`` and of the last, which the error names too (a time asked for is easier to correct)."""
    if not (timestamp_ms is not None and offset < 0) and floor <= offset <= last:
        return
    start = f"offset {floor} (snapshot {snapshot_id})" if snapshot_id else f"offset {floor + 1}"
    known = f"its state is known from {start} to offset {last}"
    first_ms, last_ms = times() if times is not None else (None, None)
    if first_ms is not None and last_ms is not None:
        known += f", its log records from {iso_ms(first_ms)} to {iso_ms(last_ms)}"
    if timestamp_ms is not None and offset < 0:
        raise PointError(f"{iso_ms(timestamp_ms)} is before the first record of {cluster_id}'s log; {known}")
    raise PointError(f"offset {offset} is outside the log of {cluster_id}: {known}")


# -- the log offset at a time ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Records:
    """Of one cluster's log records, those with an offset in ``[offset_from, offset_below)`` and a time (epoch
    milliseconds) in ``(time_after, time_to]``; a bound of None is open."""

    offset_from: int | None = None
    offset_below: int | None = None
    time_after: int | None = None
    time_to: int | None = None

    def conditions(self, field: Callable[[str], Any], time: Callable[[int], Any]) -> list[Any]:
        """The bounds as conditions on the ``log_offset`` and ``timestamp`` columns, in the terms of a query engine
        whose column expressions compare with ``>=``, ``<``, ``>``, ``<=`` (a Spark ``Column``, an Arrow
        ``Expression``): ``field`` makes a column's, ``time`` the literal of a time in epoch milliseconds."""
        offset, at = field("log_offset"), field("timestamp")
        out = []
        if self.offset_from is not None:
            out.append(offset >= self.offset_from)
        if self.offset_below is not None:
            out.append(offset < self.offset_below)
        if self.time_after is not None:
            out.append(at > time(self.time_after))
        if self.time_to is not None:
            out.append(at <= time(self.time_to))
        return out


LEAST, GREATEST, ANY = "least", "greatest", "any"


@dataclass(frozen=True)
class Ask:
    """A question about one cluster's log ``records``: their ``least`` or ``greatest`` offset, or ``any`` one's."""

    records: Records
    what: str  # LEAST, GREATEST or ANY


class RecordOffsets(Protocol):
    """What ``last_offsets_at`` asks of clusters' log records: a round of questions, at most one per cluster, each
    read where its bounds reach (the records table's row groups are pruned by their offset and time statistics)."""

    def answer(self, asks: Mapping[str, Ask]) -> dict[str, int | None]:
        """By cluster id: the offset its question asks for; None, or no entry, where its records are none."""


def _offset_at(timestamp_ms: int, known: int | None, span: int) -> Generator[Ask, int | None, int]:
    """The questions ``last_offset_at`` asks of one cluster's records, one at a time (each sent its answer), and
    the offset they lead to."""
    after = yield Ask(Records(time_after=timestamp_ms), LEAST)
    if after is None:  # every record is at or before the time: the last one
        last = None if known is None else (yield Ask(Records(offset_from=known), GREATEST))
        if last is None:
            last = yield Ask(Records(), GREATEST)
        return -1 if last is None else last
    later = yield Ask(Records(offset_from=after, time_to=timestamp_ms), GREATEST)
    if later is not None:
        return later
    while True:
        lo = after - span
        before = yield Ask(Records(offset_from=lo, offset_below=after), GREATEST)
        if before is not None:
            return before
        if lo <= 0 or (yield Ask(Records(offset_below=lo), ANY)) is None:
            return -1
        span *= 16


def last_offsets_at(log: RecordOffsets, times: Mapping[str, tuple[int, int | None]], span: int = 1024
                    ) -> dict[str, int]:
    """By cluster id: the last log offset whose record time is at or before the cluster's time (epoch
    milliseconds; -1 if none), read from the records at the end of its log, not from every record (a cluster's log
    grows by a NoOp record every half second, for years). ``times``: by cluster id, (the time, an offset its log
    holds or None). The clusters' questions are asked together, a round at a time: a report of dozens of clusters
    asks as many rounds as one cluster would (three, most often).

    The first record after the time: every record before it is at or before the time, so the one just before it is
    the answer, unless a later record is back at or before the time (times grow with offsets, but go back where a
    controller's clock was behind); the one before it is looked for ``span`` offsets back, further only where the
    log has a gap there. Where no record is after the time the last record is the one: looked for from the known
    offset on, else (or where none is there) among every record."""
    running = {c: _offset_at(ms, known, span) for c, (ms, known) in times.items()}
    asks = {c: next(steps) for c, steps in running.items()}
    found: dict[str, int] = {}
    while asks:
        answers = log.answer(asks)
        going: dict[str, Ask] = {}
        for c in asks:
            try:
                going[c] = running[c].send(answers.get(c))
            except StopIteration as done:
                found[c] = done.value
        asks = going
    return found


def last_offset_at(log: RecordOffsets, cluster_id: str, timestamp_ms: int, known: int | None = None,
                   span: int = 1024) -> int:
    """``last_offsets_at`` of one cluster."""
    return last_offsets_at(log, {cluster_id: (timestamp_ms, known)}, span)[cluster_id]
