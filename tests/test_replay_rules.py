"""Pure rules shared by the local and the Spark replay: where replay starts, which snapshots it reaches,
and the redacted form of secret identifiers."""

from __future__ import annotations

from kraftlog.state.bases import Base, SnapshotRef, choose_base, parse_snapshot_id, run_start, snapshot_reach
from kraftlog.wire.redact import fingerprint


def snap(offset: int, epoch: int = 1) -> SnapshotRef:
    return SnapshotRef(f"{offset + 1:020d}-{epoch:010d}", offset, epoch, 1000 + offset)


def test_run_start_is_the_start_of_the_last_gap_free_run() -> None:
    assert run_start([]) is None
    assert run_start([0, 1, 2]) == 0
    assert run_start([0, 1, 5, 6, 7]) == 5
    assert run_start([3]) == 3


def test_a_complete_log_replays_from_nothing() -> None:
    assert choose_base(0, 10, [snap(4)], {4: 1}) == Base(None, 0)


def test_a_truncated_log_starts_from_the_earliest_snapshot_it_continues_from() -> None:
    snaps = [snap(3), snap(9), snap(15), snap(40)]
    base = choose_base(10, 30, snaps, {15: 1})
    assert base == Base(snap(9), 10)  # offset 9 = start - 1 bridges; 15 too, but 9 is earlier
    assert choose_base(10, 30, [snap(15)], {15: 1}).snapshot == snap(15)


def test_a_snapshot_of_another_history_does_not_bridge() -> None:
    base = choose_base(10, 30, [snap(15, epoch=7), snap(3)], {15: 2})
    assert base.snapshot == snap(3) and base.first == 10 and base.problem is not None
    assert "no snapshot bridges" in base.problem and "starting from snapshot" in base.problem
    unknown = choose_base(10, 30, [], {})
    assert unknown.snapshot is None and unknown.problem is not None and "unknown" in unknown.problem


def test_no_log_uses_the_latest_snapshot() -> None:
    assert choose_base(None, None, [snap(3), snap(8)], {}) == Base(snap(8), 9)


def test_which_snapshots_replay_reaches() -> None:
    base = Base(snap(9), 10)
    epochs = {12: 1, 20: 2}
    assert snapshot_reach(snap(9), base, 30, epochs) == (False, "the base snapshot")
    assert snapshot_reach(snap(12), base, 30, epochs) == (True, "")
    assert snapshot_reach(snap(40), base, 30, epochs)[1] == "not reachable from the available log"
    assert snapshot_reach(snap(5), base, 30, epochs)[1] == "not reachable from the available log"
    assert snapshot_reach(snap(20), base, 30, epochs)[1].startswith("another history")


def test_snapshot_ids() -> None:
    assert parse_snapshot_id("00000000000000001835-0000000003") == (1835, 3)
    assert parse_snapshot_id("bootstrap.checkpoint") is None


def test_secret_identifiers_keep_a_stable_fingerprint() -> None:
    a, b = fingerprint("token-a"), fingerprint("token-b")
    assert a == fingerprint("token-a") and a != b
    assert a.startswith("(redacted:") and "token-a" not in a and len(a) == len("(redacted:)") + 16
