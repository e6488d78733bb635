"""The big-cluster generator of the benchmarks writes a log Kafka's rules replay without a problem, and snapshots
that replay reproduces exactly; the benchmarks' own parts (the hour's input, the CPU and memory they read, the
interpreted benchmark's count and forced modes) measure what they say."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT
from event_oracle import evaluated, under_min_isr_rows
from services import land_build_analyze

from kraftlog.state.local import load_clusters, replay, verify

sys.path.insert(0, str(ROOT / "benchmarks"))
from bigcluster import generate, generated


def test_a_generated_cluster_replays_cleanly_and_matches_its_snapshots(tmp_path: Path) -> None:
    written = generate(tmp_path / "node", brokers=12, racks=3, topics=40, partitions=240, records=20_000, seed=3,
                       segment_records=6_000)
    assert written["records"] >= 20_000 and written["partitions"] == 240
    (cluster,) = load_clusters([tmp_path])
    assert len(list((tmp_path / "node" / "__cluster_metadata-0").glob("*.log"))) >= 3
    types = Counter(e.decoded.type for e in cluster.log.values())
    for t in ("PARTITION_CHANGE_RECORD", "BROKER_REGISTRATION_CHANGE_RECORD", "REGISTER_BROKER_RECORD",
              "REMOVE_TOPIC_RECORD", "CONFIG_RECORD", "CLIENT_QUOTA_RECORD", "BEGIN_TRANSACTION_RECORD",
              "PRODUCER_IDS_RECORD", "LeaderChange", "NO_OP_RECORD"):
        assert types[t] > 0, t
    assert replay(cluster).problems == []
    checks = verify(cluster)
    assert len(checks) == 2 and all(c.reachable and c.differences == [] for c in checks)
    # ``bench_replay`` makes the same history rows whether it counts them or converts them to Arrow as a task does
    from bench_replay import _replay
    assert _replay(cluster, arrow=True) == _replay(cluster) > written["records"] // 2


@pytest.mark.spark
def test_the_generated_min_insync_replicas_make_the_windows_evaluated_point_by_point(spark: Any, tmp_path: Path
                                                                                    ) -> None:
    """The generated configs of min.insync.replicas (the cluster default 2, topics at 1 or 3, a broker's own, their
    churn) put partitions under it while a replica is out: the Spark-built ``under_min_isr`` windows are those
    evaluated point by point, and there are windows from a topic's config."""
    generate(tmp_path / "in" / "node", brokers=12, racks=3, topics=100, partitions=600, records=30_000, seed=3,
             segment_records=10_000)
    (cluster,) = load_clusters([tmp_path / "in"])
    set_at = Counter((e.decoded.data["resource_type"], e.decoded.data["resource_name"] == "")
                     for e in cluster.log.values()
                     if e.decoded.type == "CONFIG_RECORD" and e.decoded.data["name"] == "min.insync.replicas")
    assert set_at[(2, False)] > 0 and set_at[(4, True)] == 1 and set_at[(4, False)] > 0  # topics, default, brokers
    wh = tmp_path / "wh"
    land_build_analyze(spark, tmp_path / "in", wh)
    windows = under_min_isr_rows(wh)
    assert windows == evaluated(wh)
    assert "topic" in {w[9] for w in windows}, windows[:3]


def test_the_benchmarks_reuse_a_generated_cluster_only_once_it_is_complete(tmp_path: Path) -> None:
    """A generation killed midway (SIGKILL once its log has begun) leaves nothing a later run takes as the cluster:
    the next run generates it whole, and the one after reuses that."""
    size = {"records": 40_000, "partitions": 240, "topics": 40}
    code = (f"import sys; sys.path.insert(0, {str(ROOT / 'benchmarks')!r}); from bigcluster import generated; "
            f"generated(__import__('pathlib').Path({str(tmp_path)!r}), **{size!r})")
    run = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while not any(p.suffix == ".log" for p in tmp_path.rglob("*")) and run.poll() is None:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    run.kill()
    assert run.wait() == -signal.SIGKILL, "the generation ended before it could be killed: make it bigger"
    where, written = generated(tmp_path, **size)
    assert written is not None and written["records"] >= 40_000
    (cluster,) = load_clusters([where])
    assert sum(1 for e in cluster.log.values() if e.decoded.type != "NO_OP_RECORD") >= 40_000
    assert generated(tmp_path, **size) == (where, None)  # kept, not written again
    assert [p.name for p in tmp_path.iterdir()] == [where.name]


def test_the_increment_of_the_benchmarks_is_the_last_hundredth_of_the_log_over_segments(tmp_path: Path) -> None:
    """``bench_fleet`` leaves out the last 1% of the log by offset (here more than the last segment holds: the
    segments after the cut left out, the one holding it cut at a batch) and the snapshots of offsets it no longer
    holds, and growing it back restores every file."""
    from bench_fleet import base_offset, grow, split_input

    source = tmp_path / "src"
    generate(source / "node", brokers=6, racks=3, topics=10, partitions=60, records=6_000, seed=5,
             segment_records=2_000)
    (whole,) = load_clusters([source])
    segments = sorted((source / "node" / "__cluster_metadata-0").glob("*.log"))
    end = max(whole.log)
    assert end - base_offset(segments[-1]) < 0.2 * end  # the last segment holds less than 20%

    inputs, cut = split_input(source, tmp_path / "in", fraction=0.2)
    (kept,) = load_clusters([inputs])
    assert cut > 0 and max(kept.log) < 0.8 * end <= max(kept.log) + 200  # up to the batch before the cut point
    assert set(kept.log) == {o for o in whole.log if o <= max(kept.log)}
    assert len(list((inputs / "node" / "__cluster_metadata-0").glob("*.log"))) < len(segments)
    # the snapshot half-way stays, the one at the end waits for the log to reach it
    snapshots = {s.snapshot_id: s.offset for s in whole.snapshots.values()}
    assert len(snapshots) == 2
    reached = {i for i, at in snapshots.items() if at <= max(kept.log)}
    assert {s.snapshot_id for s in kept.snapshots.values()} == reached and 0 < len(reached) < 2
    grow(source, inputs)
    files = [*source.rglob("*.log"), *source.rglob("*.checkpoint")]
    assert sorted(p.relative_to(inputs) for p in inputs.rglob("*") if p.is_file()) == sorted(
        p.relative_to(source) for p in source.rglob("*") if p.is_file())
    for f in files:
        assert (inputs / f.relative_to(source)).read_bytes() == f.read_bytes()


def test_the_benchmarks_split_the_jvms_cpu_by_what_its_threads_do(spark: Any) -> None:
    """``bench_fleet`` reports what a step's JVM CPU went to (the JIT, Spark's tasks, the garbage collector, the
    rest): a job's tasks are counted as tasks, and the parts add up to the JVM's CPU in between."""
    from common import JVM_THREADS, jvm_cpu, jvm_cpu_between, jvm_pid

    pid = jvm_pid(spark)
    before = jvm_cpu(pid)
    # (the compilers' threads are there from the start; the collector's are not, with the tests' serial GC)
    assert {kind for kind, _ in before[1].values()} >= {"jit", "other"}
    spark.range(0, 10_000_000, numPartitions=2).selectExpr("sum(id * id % 7) AS s").collect()
    after = jvm_cpu(pid)
    used = jvm_cpu_between(before, after)
    assert set(used) == {*JVM_THREADS, "other"} and min(used.values()) >= 0
    assert used["tasks"] > 0.05
    assert abs(sum(used.values()) - (after[0] - before[0])) < 1e-6


def test_the_benchmarks_count_the_python_workers_cpu_and_the_drivers_apart(spark: Any) -> None:
    """``bench_fleet`` reports the CPU of the Python workers (the decode, the replay) and of the driver's Python
    beside the JVM's: two tasks that each spin a CPU-second in a worker are counted as the workers', and a thread of
    the benchmark's own (a memory sampler) is not counted as the driver's."""
    import threading

    from common import jvm_pid, python_cpu, python_cpu_between

    def busy(batches: Any) -> Any:
        start = time.process_time()
        while time.process_time() - start < 1.0:
            pass
        yield from batches

    stop = threading.Event()

    def spin() -> None:
        while not stop.is_set():
            pass

    sampler = threading.Thread(target=spin, daemon=True)
    pid = jvm_pid(spark)
    sampler.start()
    driver = time.process_time()
    before = python_cpu(pid, [sampler])
    spark.range(2, numPartitions=2).mapInArrow(busy, "id long").collect()
    after = python_cpu(pid, [sampler])
    driver = time.process_time() - driver
    stop.set()
    sampler.join()
    used = python_cpu_between(before, after)
    assert used["workers"] >= 1.8
    assert used["driver"] < 0.8 and driver - used["driver"] > 0.5  # (the sampler spun all along)


# plays PySpark's daemon: ignores SIGCHLD (so the kernel reaps its forks), forks a worker that spins half a
# CPU-second, says so, and once told spins half a second more and ends
_DAEMON = """
import os, signal, sys, time
from pathlib import Path
d = Path(sys.argv[1])
signal.signal(signal.SIGCHLD, signal.SIG_IGN)

def spin():
    start = time.process_time()
    while time.process_time() - start < 0.5:
        pass

if os.fork() == 0:
    spin()
    (d / "spun.tmp").write_text(str(os.getpid()))
    os.rename(d / "spun.tmp", d / "spun")  # (whole or not there: the test reads it as soon as it exists)
    while not (d / "go").exists():
        time.sleep(0.01)
    spin()
    time.sleep(0.3)
    os._exit(0)
while not (d / "end").exists():
    time.sleep(0.01)
"""


def test_the_benchmarks_count_a_worker_that_ended_as_last_seen_and_never_below_zero(tmp_path: Path) -> None:
    """A Python worker that ends between two readings (PySpark's daemon lets the kernel reap it, so its CPU goes to
    no one) takes nothing away from what the workers used, and what it used since the first reading is counted when
    a sampler (``WorkerMemory``) read it while it lived."""
    from common import WorkerMemory, python_cpu, python_cpu_between

    launcher = subprocess.Popen([sys.executable, "-c", "import subprocess, sys; subprocess.run(sys.argv[1:])",
                                 sys.executable, "-c", _DAEMON, str(tmp_path)])  # (plays the JVM)
    sampler = WorkerMemory(launcher.pid)
    try:
        deadline = time.monotonic() + 60
        while not (tmp_path / "spun").exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        worker = int((tmp_path / "spun").read_text())
        sampler.start()
        before = python_cpu(launcher.pid)
        assert max(v for (pid, _), v in before[0].items() if pid == worker) >= 0.45
        (tmp_path / "go").touch()
        while Path(f"/proc/{worker}").exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not Path(f"/proc/{worker}").exists()  # (reaped at once: no zombie keeps its CPU)
        unseen = python_cpu_between(before, python_cpu(launcher.pid))["workers"]
        seen = python_cpu_between(before, python_cpu(launcher.pid, seen=sampler.cpu))["workers"]
    finally:
        (tmp_path / "end").touch()
        sampler.stop.set()
        launcher.wait(60)
    assert -0.05 < unseen < 0.2
    assert 0.45 <= seen < 0.7


def test_the_benchmarks_sample_the_memory_of_this_sessions_workers_alone(spark: Any, tmp_path: Path) -> None:
    """``WorkerMemory`` reads the peak memory of the session's own Python workers: a task holding 300 MB in its
    worker is seen, and a process that is not the JVM's (here one named like a PySpark daemon, holding 600 MB, as
    another application's worker on the same machine would be) is not."""
    import subprocess
    import sys

    from common import WorkerMemory, jvm_pid

    def hold(batches: Any) -> Any:
        held = bytearray(300 << 20)
        held[::4096] = b"x" * len(held[::4096])  # (touched: resident)
        time.sleep(1.0)
        yield from batches

    ready = tmp_path / "ready"
    other = subprocess.Popen([sys.executable, "-c", "import sys, time; held = bytearray(600 << 20); "
                              "held[::4096] = b'x' * len(held[::4096]); open(sys.argv[1], 'w').close(); "
                              "time.sleep(60)", str(ready), "pyspark.daemon"])
    try:
        while not ready.exists():
            time.sleep(0.05)
        sampler = WorkerMemory(jvm_pid(spark))
        sampler.start()
        spark.range(1, numPartitions=1).mapInArrow(hold, "id long").collect()
        sampler.stop.set()
        sampler.join()
    finally:
        other.kill()
        other.wait()
    assert 300 << 10 <= sampler.peak_kb < 600 << 10


def test_the_interpreted_benchmark_counts_as_a_first_build_does_and_forces_each_mode(spark: Any, tmp_path: Path
                                                                                    ) -> None:
    """``bench_interpreted`` counts a landed warehouse's records as the first build of it counts them (every record
    landed, NoOps and snapshots' too: the rows of ``records``), says the mode the threshold picks on either side of
    it, and its forced thresholds make reconstruct and analyze each run in the mode forced (its self-check)."""
    from bench_interpreted import MODES, counted, default_mode, first_build
    from deltalake import DeltaTable

    from kraftlog.config import Config
    from kraftlog.spark.ingest import ingest

    generate(tmp_path / "in" / "node", brokers=6, racks=3, topics=10, partitions=60, records=3_000, seed=7,
             segment_records=1_000)
    landing = Config.load(warehouse={"path": str(tmp_path / "landed")}, identity={"cluster": "{cluster.id}"})
    ingest(spark, [str(tmp_path / "in")], landing)
    landed = Path(landing.warehouse)
    n = counted(spark, landed, tmp_path)
    assert n == DeltaTable(str(landed / "records")).to_pyarrow_dataset().count_rows() > 3_000
    assert not (landed / "replay_state").exists()  # (counted on a copy: the landed warehouse is left as it was)
    assert (default_mode(spark, n, n + 1), default_mode(spark, n, n)) == ("interpreted", "compiled")
    built = Config.load(warehouse={"path": str(tmp_path / "built")}, identity={"cluster": "{cluster.id}"})
    for mode, below in MODES.items():
        seconds, ran = first_build(spark, landed, built, below)
        assert ran == (mode == "interpreted",) * 2 and seconds > 0, (mode, ran)
