"""Where replay starts and which snapshots it reaches: one set of rules for local and Spark replay.

A cluster's log may have been truncated (Kafka deletes segments once a snapshot covers them), and
copies from several nodes may leave holes. Replay needs a gap-free stretch of log:

* it uses the **last gap-free run** of log offsets, ``[run_start, last]``;
* from offset 0 when the run starts there; otherwise from the **base snapshot**: the earliest
  snapshot the run continues from (its offset in ``[run_start - 1, last]`` and, where the log holds
  its offset, the same epoch as the log there: a snapshot is ``(endOffset, epoch)``, and one with
  another epoch belongs to another history of the directory). The earliest gives the longest history;
* without such a snapshot, from the newest older one (the state between it and the run is unknown,
  which is reported) or from nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class SnapshotRef:
    """A snapshot: state as of ``offset`` (its endOffset - 1) written in ``epoch``."""

    snapshot_id: str
    offset: int
    epoch: int
    timestamp: int  # last_contained_log_timestamp of its header (ms)


@dataclass(frozen=True)
class Base:
    """Where replay starts: the snapshot loaded first (if any), the first log offset applied after it."""

    snapshot: SnapshotRef | None
    first: int
    problem: str | None = None


def run_start(offsets: Iterable[int]) -> int | None:
    """The first offset of the last gap-free run of ``offsets`` (sorted ascending); None when empty."""
    start = prev = None
    for o in offsets:
        if prev is None or o != prev + 1:
            start = o
        prev = o
    return start


def choose_base(start: int | None, last: int | None, snapshots: Iterable[SnapshotRef],
                log_epochs: Mapping[int, int]) -> Base:
    """The base of replay for a log whose last gap-free run is ``[start, last]``.

    ``log_epochs`` maps a log offset to the batch epoch the log holds there (at least for the
    snapshots' offsets).
    """
    snaps = sorted(snapshots, key=lambda s: (s.offset, s.snapshot_id))
    if start is None or last is None:
        latest = snaps[-1] if snaps else None
        return Base(latest, latest.offset + 1 if latest else 0)
    if start == 0:
        return Base(None, 0)
    bridging = [s for s in snaps if start - 1 <= s.offset <= last and log_epochs.get(s.offset, s.epoch) == s.epoch]
    if bridging:
        return Base(bridging[0], bridging[0].offset + 1)
    older = [s for s in snaps if s.offset < start - 1]
    problem = f"the log starts at offset {start} and no snapshot bridges the gap"
    if not older:
        return Base(None, start, problem + f"; state before {start} is unknown")
    return Base(older[-1], start, problem + f"; starting from snapshot {older[-1].snapshot_id}")


def snapshot_reach(s: SnapshotRef, base: Base, last: int | None, log_epochs: Mapping[int, int]) -> tuple[bool, str]:
    """Whether replay from ``base`` reaches snapshot ``s`` (and, if not, why)."""
    if base.snapshot is not None and s.snapshot_id == base.snapshot.snapshot_id:
        return False, "the base snapshot"
    if last is None or not base.first - 1 <= s.offset <= last:
        return False, "not reachable from the available log"
    if s.offset in log_epochs:
        known: int | None = log_epochs[s.offset]
    else:
        known = base.snapshot.epoch if base.snapshot is not None and base.snapshot.offset == s.offset else None
    if known is not None and known != s.epoch:
        return False, f"another history: the log has epoch {known} at offset {s.offset}, the snapshot epoch {s.epoch}"
    return True, ""


def parse_snapshot_id(snapshot_id: str) -> tuple[int, int] | None:
    """``(endOffset, epoch)`` of ``<endOffset>-<epoch>``; None for other labels (bootstrap.checkpoint)."""
    parts = snapshot_id.split("-")
    if len(parts) != 2 or not all(p.isdigit() for p in parts):
        return None
    return int(parts[0]), int(parts[1])
