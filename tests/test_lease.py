"""The warehouse lease: one writer at a time, a clear 'busy' error, a killed holder's lease expires."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from kraftlog.lease import Lease, LeaseLost, WarehouseBusy
from kraftlog.storage import Storage


def _lease(wh: Path, run: str, **kw: float) -> Lease:
    return Lease(Storage(), str(wh), run, "ingest", **kw)  # type: ignore[arg-type]


def test_a_second_run_is_told_who_holds_the_warehouse(tmp_path: Path) -> None:
    with _lease(tmp_path, "run-a"):
        with pytest.raises(WarehouseBusy) as e:
            _lease(tmp_path, "run-b").acquire()
        assert "busy since" in str(e.value) and "by ingest run run-a" in str(e.value)
        assert str(tmp_path) in str(e.value)
    # released: the next run takes the next generation at once
    with _lease(tmp_path, "run-b") as b:
        assert b.generation == 2
    current = _lease(tmp_path, "x").current()
    assert current is not None and current.released and current.run == "run-b"


def test_a_waiting_run_gets_the_lease_when_the_holder_finishes(tmp_path: Path) -> None:
    a = _lease(tmp_path, "run-a").acquire()
    threading.Timer(0.5, a.release).start()
    t0 = time.time()
    with _lease(tmp_path, "run-b", wait_s=30, poll_s=0.1) as b:
        assert b.generation == 2
    assert 0.4 < time.time() - t0 < 10


def test_a_waiting_run_says_so_once_a_minute_not_at_every_look(tmp_path: Path,
                                                              caplog: pytest.LogCaptureFixture) -> None:
    """A run waits up to ``lease_wait_seconds`` (an hour by default) looking every 2 s: it says whom it waits for when
    it starts waiting and when the holder changes, then once a minute (it was a line at every look, 1,800 an hour)."""
    import logging

    a = _lease(tmp_path, "run-a").acquire()
    threading.Timer(0.6, a.release).start()
    with caplog.at_level(logging.INFO, logger="kraftlog"), _lease(tmp_path, "run-b", wait_s=30, poll_s=0.05):
        pass
    waits = [r.getMessage() for r in caplog.records if "; waiting up to" in r.getMessage()]
    assert len(waits) == 1 and "by ingest run run-a" in waits[0] and "waiting up to 30 s more" in waits[0], waits


def test_a_killed_holders_lease_expires_and_the_holder_then_knows_it_lost(tmp_path: Path) -> None:
    dead = _lease(tmp_path, "killed", ttl_s=0.6).acquire()
    dead._stop.set()  # a kill -9: it stops renewing and never releases
    with pytest.raises(WarehouseBusy):
        _lease(tmp_path, "early").acquire()
    time.sleep(0.8)
    with _lease(tmp_path, "next", ttl_s=30) as nxt:
        assert nxt.generation == 2
        with pytest.raises(LeaseLost):  # had the dead run come back, it could not commit
            dead.check()
        nxt.check()


def test_the_holder_renews_its_lease(tmp_path: Path) -> None:
    with _lease(tmp_path, "long", ttl_s=0.6):
        time.sleep(1.5)  # more than twice the lease: renewed every 0.2 s
        with pytest.raises(WarehouseBusy):
            _lease(tmp_path, "other").acquire()


def test_of_runs_racing_for_a_lease_exactly_one_wins(tmp_path: Path) -> None:
    winners, busy = [], []
    barrier = threading.Barrier(8)

    def race(i: int) -> None:
        lease = _lease(tmp_path, f"r{i}")
        barrier.wait()
        try:
            lease.acquire()
            winners.append(i)
        except WarehouseBusy:
            busy.append(i)

    threads = [threading.Thread(target=race, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(winners) == 1 and len(busy) == 7


def test_create_if_absent_is_exclusive(tmp_path: Path) -> None:
    target = f"file:{tmp_path}/x/y.json"
    assert Storage().create(target, b"1")
    assert not Storage().create(target, b"2")
    assert (tmp_path / "x" / "y.json").read_bytes() == b"1"


def test_a_file_written_over_a_folder_fails_and_leaves_nothing_beside_it(tmp_path: Path) -> None:
    """``write_bytes`` writes a local file aside, then renames it over the target: when the rename cannot be done
    (the target a folder) the file written aside is removed, not left next to the target."""
    (tmp_path / "d").mkdir()
    with pytest.raises(IsADirectoryError):
        Storage().write_bytes(f"file:{tmp_path}/d", b"page")
    assert [p.name for p in tmp_path.iterdir()] == ["d"] and not any((tmp_path / "d").iterdir())
    Storage().write_bytes(f"file:{tmp_path}/d/page.html", b"page")
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["d", "page.html"]


def test_a_store_checks_the_lease_only_while_the_run_holds_it(tmp_path: Path) -> None:
    from kraftlog.config import Config
    from kraftlog.spark.store import DeltaRsStore, Manifest, writing

    store = DeltaRsStore(None, str(tmp_path))  # type: ignore[arg-type]  # commits need no Spark
    with writing(store, Config.load(), "run-a", "ingest") as lease:
        assert store.lease is lease
        Storage().create(f"file:{tmp_path}/_kraftlog/lease/{(lease.generation or 0) + 1:020d}.json", b"{}")
        with pytest.raises(LeaseLost):  # another run took the warehouse: this one commits nothing more
            store.commit(Manifest("run-a", 1))
    assert store.lease is None
    store.commit(Manifest("run-b", 2))  # after the run, the store is not tied to its released lease
