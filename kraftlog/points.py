"""Points of a log given by people: an offset, an ISO-8601 time, or epoch milliseconds."""

from __future__ import annotations

from datetime import UTC, datetime


def parse_time(text: str) -> datetime:
    """An ISO-8601 time (``2026-11-21T03:14:00Z``; UTC when no zone is given) or ``ms:<epoch millis>``."""
    t = text.strip()
    if t.startswith("ms:"):
        return datetime.fromtimestamp(int(t[3:]) / 1000, UTC)
    try:
        when = datetime.fromisoformat(t.replace("Z", "+00:00"))
    except ValueError as e:
        raise ValueError(f"{text!r} is not a time (ISO-8601 like 2026-11-21T03:14:00Z, or ms:<epoch millis>)") from e
    return when if when.tzinfo is not None else when.replace(tzinfo=UTC)


def parse_point(text: str | None) -> tuple[int | None, int | None]:
    """An offset (digits) or a time (see ``parse_time``), as (offset, epoch millis); (None, None) for None."""
    if text is None:
        return None, None
    t = text.strip()
    if t.lstrip("-").isdigit():
        return int(t), None
    return None, int(parse_time(t).timestamp() * 1000)


def check_in_log(cluster_id: str, offset: int, floor: int, last: int, snapshot_id: str | None,
                 timestamp_ms: int | None = None) -> None:
    """Raise ``ValueError`` naming the log's range when ``offset`` (resolved from ``timestamp_ms`` if given) is
    outside what is known of ``cluster_id``: from ``floor`` (the base snapshot ``snapshot_id``'s offset, or the
    offset before the log's first) to ``last``."""
    start = f"offset {floor} (snapshot {snapshot_id})" if snapshot_id else f"offset {floor + 1}"
    known = f"its state is known from {start} to offset {last}"
    if timestamp_ms is not None and offset < 0:
        when = datetime.fromtimestamp(timestamp_ms / 1000, UTC).isoformat()
        raise ValueError(f"{when} is before the first record of {cluster_id}'s log; {known}")
    if offset < floor or offset > last:
        raise ValueError(f"offset {offset} is outside the log of {cluster_id}: {known}")
