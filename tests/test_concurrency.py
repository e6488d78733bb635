"""Runs that overlap on one warehouse (a slow hourly run and the next one, a manual backfill) never
duplicate or lose a row: the second waits for the warehouse's lease (``kraftlog.lease``).

Each run is a separate ``kraftlog`` process with its own Spark, as a scheduler would start them.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import SAMPLE
from services import create_bucket, moto_s3, spark_env

pytestmark = [pytest.mark.slow, pytest.mark.spark]

KRAFTLOG = str(Path(sys.executable).parent / "kraftlog")


@pytest.fixture(scope="module")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    with moto_s3(tmp_path_factory.mktemp("moto")) as env:
        create_bucket(env, "kraftlog")
        yield env


def _start(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.Popen[str]:
    return subprocess.Popen([KRAFTLOG, *args], env=spark_env(env), cwd=cwd, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def _finish(proc: subprocess.Popen[str]) -> str:
    out, _ = proc.communicate(timeout=600)
    assert proc.returncode == 0, out[-4000:]
    return out


def _count(uri: str, env: dict[str, str], table: str) -> int:
    from deltalake import DeltaTable

    from kraftlog.storage import Storage

    storage = Storage.from_environment(environ=env)
    return int(DeltaTable(storage.table_uri(f"{uri}/{table}"), storage_options=storage.delta_options()).count())


@pytest.mark.parametrize("where", ["local", "s3"])
def test_two_concurrent_ingests_land_every_row_once(where: str, tmp_path: Path, sample_warehouse: Any,
                                                    request: pytest.FixtureRequest) -> None:
    env: dict[str, str] = request.getfixturevalue("s3") if where == "s3" else {}
    wh = f"s3://kraftlog/concurrent-{time.time_ns()}" if where == "s3" else str(tmp_path / "wh")
    _, one_run = sample_warehouse
    procs = [_start(["ingest", str(SAMPLE), "--warehouse", wh], env, tmp_path)]
    time.sleep(0.5)  # as in the report that found the bug: started half a second apart
    procs.append(_start(["ingest", str(SAMPLE), "--warehouse", wh], env, tmp_path))
    outputs = [_finish(p) for p in procs]
    added = sorted(int(o.split("new rows ")[1].split(",")[0]) for o in outputs)
    assert added == [0, one_run.rows_added], outputs  # one landed everything, the other found nothing new
    assert any("waiting" in o for o in outputs)  # the later one waited for the lease
    assert _count(wh, env, "records") == one_run.table_rows["records"]
    assert _count(wh, env, "files") == one_run.table_rows["files"]


def test_ingest_and_reconstruct_overlapping(tmp_path: Path, sample: Any) -> None:
    """A reconstruct started while an ingest holds the warehouse waits for it (when its Spark starts before the
    ingest ends, as it does here), then builds from everything landed: the histories of one clean build."""
    _, history_rows = sample
    wh = str(tmp_path / "wh")
    ingest = _start(["ingest", str(SAMPLE), "--warehouse", wh], {}, tmp_path)
    deadline = time.time() + 120
    while not (Path(wh) / "_kraftlog" / "lease").is_dir() and time.time() < deadline:
        time.sleep(0.1)  # the ingest holds the lease
    reconstruct = _start(["reconstruct", "--warehouse", wh], {}, tmp_path)
    _finish(ingest)
    _finish(reconstruct)
    for table, n in history_rows.items():
        assert _count(wh, {}, table) == n, table


def test_a_run_killed_with_sigkill_while_committing_is_completed_by_the_next(tmp_path: Path,
                                                                             sample_warehouse: Any) -> None:
    """kill -9 between the manifest and the last commit: the dead run's lease expires, the next run takes it over,
    rolls the staged work forward, and the tables equal one clean run's."""
    import signal

    _, one_run = sample_warehouse
    wh = tmp_path / "wh"
    profile = tmp_path / "p.toml"
    profile.write_text("[warehouse]\nlease_ttl_seconds = 6.0\n")
    args = ["ingest", str(SAMPLE), "--warehouse", str(wh), "--profile", str(profile)]
    victim = _start(args, {}, tmp_path)
    pending = wh / "_kraftlog" / "pending"
    while not (pending.is_dir() and any(pending.glob("*.json"))):
        assert victim.poll() is None, "the run ended before it could be killed while committing"
        time.sleep(0.01)
    os.kill(victim.pid, signal.SIGKILL)
    victim.wait(30)
    out = _finish(_start(args, {}, tmp_path))
    assert "taking over the lease" in out and "recovered 1 interrupted run" in out
    assert _count(str(wh), {}, "records") == one_run.table_rows["records"]
    assert _count(str(wh), {}, "files") == one_run.table_rows["files"]


def test_a_stores_calls_in_threads_run_at_once_their_results_in_order() -> None:
    """``in_threads`` (the histories' commits, the tables' checks) runs its calls ``jobs`` at a time: three calls that
    each wait for the other two all end; the results come in order, and a call's exception is raised once every call
    ended."""
    import threading

    from kraftlog.spark.session import in_threads

    together = threading.Barrier(3, timeout=30)
    ended: list[int] = []

    def call(i: int) -> int:
        together.wait()  # (a BrokenBarrierError where the three do not run at once)
        ended.append(i)
        if i == 4:
            raise ValueError(i)
        return i * 10

    assert in_threads(call, [3, 1, 2], 3) == [30, 10, 20]
    together.reset()
    ended.clear()
    with pytest.raises(ValueError):
        in_threads(call, [4, 5, 6], 3)
    assert sorted(ended) == [4, 5, 6] and in_threads(call, [], 3) == []
