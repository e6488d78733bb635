"""The pipeline on a big cluster (``bigcluster.py``) and on the 10x corpus: full build and an hourly increment.

    python benchmarks/bench_fleet.py [--records 1250000] [--scales 1,4] [--cores 2] [--json out/bench-fleet.json]

For each input, on local[cores]:

* **full**: the input minus its last 1% of records (by offset: the segments after that point left out, the one
  holding it cut at a batch boundary) is ingested, reconstructed and analysed into a fresh warehouse;
* **increment**: the segments grow back to their full length (the next hour's 1%), and ingest,
  reconstruct and analyse run again on the same warehouse, then the reports of the clusters over the hour's period
  (from the full build's last record on, as the DAG writes them: ``report_seconds``, outside the target's
  reconstruct + analyze); after the last of them, the hour's pages written as the DAG writes them
  (``write_reports``: a page per cluster, drawn by executors past two, and the index: ``increment_pages_seconds``);
  ``--increments N`` times (default 10), each from a copy
  of the warehouse and input the full build left, in this process. Reported (by reconstruct + analyze): the median
  of the first three runs, a process's first hours (its JVM warmed by the full build, but its JIT still compiling
  the hour's own code paths), and the median of the last three as the **steady** hour (``STEADY_AFTER`` runs
  before them), what each hour of a process or Spark Connect server kept up costs once its JIT has settled: on
  the 5M cluster the JIT's CPU in an hour's analysis fell from 15 to 4-5 CPU-seconds over its first ten hours. One
  run's seconds vary by a quarter on a shared 2-core machine;
* **increment as scheduled**: the same increment once more, run as an hourly schedule runs it: ``kraftlog run`` in
  a process of its own, a fresh JVM whose JIT compiles Spark's code anew (the runs above share this process's JVM,
  warmed by the full build); then once more with its driver's JVM started from a class-data archive of the classes
  a run loads, its JIT stopped at C1 (``kraftlog jvm-archive``'s options; the archive written first, from the bundled
  sample; ``--no-class-archive``: not run);
* **increment through Spark Connect**: as the DAG's ``connect`` shape runs it: one Spark Connect server (local[cores],
  the profile's settings) kept up for ``--connect-runs`` hours, each ``kraftlog run`` a fresh client of it; the first
  hour finds the server cold, the median of the next three is reported, and the steady hour as above.

Reported per step: seconds, non-NoOp records per second per core, peak resident memory of the
driver's JVM and Python and of the Python workers. The big cluster is generated once per size and
kept under ``out/bigcluster-v<generator>-<records>-<partitions>-<topics>`` (``bigcluster.generated``;
``--scales 1,4``: the log at 1x and 4x ``--records``).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import struct
import sys
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bigcluster import generated
from common import (
    ROOT,
    WorkerMemory,
    copy_corpus,
    jvm_cpu,
    jvm_cpu_between,
    jvm_pid,
    local_config,
    profile_toml,
    python_cpu,
    python_cpu_between,
    rss_kb,
    run_command,
    save_results,
    scratch_dir,
    with_warehouse,
)

from kraftlog.wire.files import classify

sys.path.insert(0, str(ROOT / "tests"))
from services import connect_server


class DriverMemory(threading.Thread):
    """Peak resident memory of this process and of its Spark JVM (process ``jvm``)."""

    def __init__(self, jvm: int) -> None:
        super().__init__(daemon=True)
        self.jvm = jvm
        self.python_kb = self.jvm_kb = 0
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            self.python_kb = max(self.python_kb, rss_kb(os.getpid()))
            self.jvm_kb = max(self.jvm_kb, rss_kb(self.jvm))
            self.stop.wait(0.2)


def base_offset(segment: Path) -> int:
    """The base offset a segment's name carries."""
    info = classify(segment.name)
    if info is None or info.base_offset is None:
        raise ValueError(f"{segment}: not a segment of the metadata log")
    return info.base_offset


def batch_ends(path: Path) -> list[tuple[int, int]]:
    """(end byte position, base offset) of each RecordBatch of a segment."""
    data = path.read_bytes()
    out, pos = [], 0
    while pos + 12 <= len(data):
        base, length = struct.unpack_from(">qi", data, pos)
        pos += 12 + length
        out.append((pos, base))
    return out


def split_input(source: Path, dest: Path, fraction: float = 0.01) -> tuple[Path, int]:
    """``source``'s data directories copied to ``dest`` without the last ``fraction`` of each one's log (by offset):
    the segments that begin after that point left out, the one holding it cut at a batch boundary, and the snapshots
    of offsets the cut log does not reach yet (a controller writes a snapshot of what its log holds: the hour that
    brings those offsets brings the snapshot); returns the copy and the number of bytes left out."""
    shutil.copytree(source, dest)
    cut = 0
    for log_dir in dest.rglob("__cluster_metadata-0"):
        segments = sorted((base_offset(p), p) for p in log_dir.glob("*.log"))
        if not segments:
            continue
        last = batch_ends(segments[-1][1])
        end_offset = last[-1][1] if last else segments[-1][0]
        target = end_offset - int((end_offset - segments[0][0]) * fraction)
        held_from = None  # the first offset left out
        for offset, segment in reversed(segments):
            size = segment.stat().st_size
            if offset >= target:
                segment.unlink()
                cut += size
                held_from = offset
                continue
            ends = last if segment == segments[-1][1] else batch_ends(segment)
            keep_at = max((p for p, b in ends if b < target), default=0)
            held_from = min((b for _, b in ends if b >= target), default=held_from)
            with open(segment, "r+b") as fh:
                fh.truncate(keep_at)
            cut += size - keep_at
            break
        for snapshot in log_dir.glob("*.checkpoint"):
            info = classify(snapshot.name)
            if held_from is not None and info is not None and (info.end_offset or 0) > held_from:
                cut += snapshot.stat().st_size
                snapshot.unlink()
    return dest, cut


def grow(source: Path, dest: Path) -> None:
    """Bring the segments of ``dest`` cut or left out back to their length in ``source``, and the snapshots left out
    (the log grew)."""
    for f in [*source.rglob("*.log"), *source.rglob("*.checkpoint")]:
        target = dest / f.relative_to(source)
        if not target.exists() or target.stat().st_size != f.stat().st_size:
            shutil.copyfile(f, target)


def pipeline(spark: Any, config: Any, inputs: Path, report_from: datetime | None = None) -> dict[str, Any]:
    """Ingest, reconstruct and analyze ``inputs`` (and, from ``report_from`` on, the reports of every cluster, as
    the DAG's hourly run writes them for its period), each step's seconds, CPU and peak memory."""
    from kraftlog.analytics.report import Period
    from kraftlog.spark.analyze import analyze
    from kraftlog.spark.history import reconstruct
    from kraftlog.spark.ingest import ingest
    from kraftlog.spark.reports import build_reports
    from kraftlog.spark.store import store_for

    out: dict[str, Any] = {}
    jvm = jvm_pid(spark)
    driver = DriverMemory(jvm)
    driver.start()
    peaks = []
    steps: list[tuple[str, Callable[[], Any]]] = [("ingest", lambda: ingest(spark, [str(inputs)], config)),
                                                  ("reconstruct", lambda: reconstruct(spark, config)),
                                                  ("analyze", lambda: analyze(spark, config))]
    if report_from is not None:
        steps.append(("report", lambda: build_reports(store_for(spark, config), None, Period(report_from))))
    for step, run in steps:
        workers = WorkerMemory(jvm)  # per step: which step's tasks need the memory
        workers.start()
        cpu, py = jvm_cpu(jvm), python_cpu(jvm, (driver, workers), workers.cpu)
        t = time.perf_counter()
        run()
        out[f"{step}_seconds"] = round(time.perf_counter() - t, 1)
        # what the CPU went to: the JVM's by what its threads do (on two cores a small step is bound by it), the
        # Python workers' (the decode, the replay) and the driver's Python
        out[f"jvm_cpu_{step}"] = {k: round(v, 1) for k, v in jvm_cpu_between(cpu, jvm_cpu(jvm)).items()}
        out[f"python_cpu_{step}"] = {k: round(v, 1) for k, v in
                                     python_cpu_between(py, python_cpu(jvm, (driver, workers), workers.cpu)).items()}
        workers.stop.set()
        workers.join()
        out[f"peak_worker_mb_{step}"] = workers.peak_kb // 1024
        peaks.append(workers.peak_kb)
    driver.stop.set()
    out.update({
        "total_seconds": round(sum(out[f"{s}_seconds"] for s in ("ingest", "reconstruct", "analyze")), 1),
        "peak_driver_jvm_mb": driver.jvm_kb // 1024, "peak_driver_python_mb": driver.python_kb // 1024,
        "peak_worker_mb": max(peaks) // 1024,
    })
    return out


def cpu_line(run: dict[str, Any]) -> str:
    """What a run's steps used the CPU for: the JVM by what its threads do, the Python workers, the driver's Python."""
    parts = []
    for step in [s for s in ("ingest", "reconstruct", "analyze", "report") if f"{s}_seconds" in run]:
        jvm, py = run[f"jvm_cpu_{step}"], run[f"python_cpu_{step}"]
        parts.append(f"{step} {run[f'{step}_seconds']} s: JVM {sum(jvm.values()):.1f} ("
                     + ", ".join(f"{k} {v:.1f}" for k, v in jvm.items())
                     + f"), Python workers {py['workers']:.1f}, driver Python {py['driver']:.1f}")
    return "CPU-seconds by step: " + "; ".join(parts)


def as_scheduled(config: Any, inputs: Path, work: Path, remote: str | None = None) -> dict[str, Any]:
    """The increment as an hourly schedule runs it: ``kraftlog run`` (the steps in one session) in a process of its
    own, a fresh JVM whose JIT compiles Spark's code anew (``remote``: a client of that Spark Connect server);
    seconds from start to exit, and the seconds of reconstruct and analyze as it reports them. (The warm runs share
    this process's JVM, its code compiled by the full build.)"""
    profile = profile_toml(config.data, work / "profile.toml")
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, **({"SPARK_REMOTE": remote} if remote else {})}
    seconds, out = run_command([str(Path(sys.executable).parent / "kraftlog"), "run", "--profile", str(profile),
                                "--quiet", str(inputs)], env)
    result = {"run_seconds": round(seconds, 1)}
    for step, rows in (("reconstruct", "history"), ("analyze", "event")):
        found = re.search(rf"{rows} rows written in ([0-9.]+)s", out)
        if found is None:
            raise RuntimeError(f"kraftlog run printed no {step} summary:\n{out[-4000:]}")
        result[f"{step}_seconds"] = float(found.group(1))
    return result


def build_seconds(run: dict[str, Any]) -> float:
    """A run's reconstruct + analyze seconds (what the increment's share compares)."""
    return float(run["reconstruct_seconds"] + run["analyze_seconds"])


def median_run(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The median of ``runs`` by ``build_seconds`` (the later of the two middle ones where they are even)."""
    return sorted(runs, key=build_seconds)[len(runs) // 2]


def hours_of(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Of the hours ``runs`` of one process or server, in order: the median of the first three (``hour``), the
    median of the last three where at least ``STEADY_AFTER`` ran before them (``steady``), and every hour's
    seconds."""
    out = {"hour": median_run(runs[:3]), "hours_build_seconds": [round(build_seconds(r), 1) for r in runs]}
    if len(runs) >= STEADY_AFTER + 3:
        out["steady"] = median_run(runs[-3:])
    return out


# the hours of one process that come before the three whose median is its steady hour (``hours_of``): on the 5M
# cluster the JIT's CPU in an hour's analysis went 15, 13, 11, 9, 8, 6, 5, 4.5, 4.4 CPU-seconds over a process's
# hours 2-10, and reconstruct + analyze from 19.7 s to 14.1-14.5 s in hours 8-10
STEADY_AFTER = 7


def through_connect(config: Any, inputs: Path, work: Path, hour: Callable[[], None], runs: int) -> dict[str, Any]:
    """The increment as an hourly schedule runs it on a Spark Connect server that stays up between runs (the DAG's
    ``connect`` shape): the server started with the profile's Spark settings, then ``runs`` hours, each ``kraftlog
    run`` as a fresh client process after ``hour()`` (the full build's warehouse and the grown input). The first
    hour finds the server's JVM cold: the others are reported (``hours_of``)."""
    with connect_server(work, config.spark["master"], {k: str(v) for k, v in config.spark.get("conf", {}).items()},
                        long_lived=True) as url:
        hours = []
        for _ in range(runs):
            hour()
            hours.append(as_scheduled(config, inputs, work, url))
    return {"first_hour": hours[0], **hours_of(hours[1:] or hours)}


def pages_seconds(spark: Any, config: Any, start: datetime, out_dir: Path) -> float:
    """Seconds to write every cluster's page of the period from ``start`` on, and the index, as the DAG's hourly
    run writes them (the events read, the pages drawn and written)."""
    from kraftlog.analytics.report import Period
    from kraftlog.spark.reports import write_reports
    from kraftlog.spark.store import store_for

    t = time.perf_counter()
    write_reports(store_for(spark, config), None, Period(start), str(out_dir))
    return round(time.perf_counter() - t, 1)


def last_record_time(spark: Any, config: Any) -> datetime:
    """Just after the earliest of the clusters' last records built: where an hourly run's reports begin."""
    from kraftlog.spark.history import built_clusters
    from kraftlog.spark.store import store_for

    last_ms = min(r["last_ms"] for r in built_clusters(store_for(spark, config)).values() if r["last_ms"] is not None)
    return datetime.fromtimestamp((last_ms + 1) / 1000, UTC)


def non_noop_records(spark: Any, config: Any) -> int:
    from pyspark.sql import functions as F

    from kraftlog.spark.store import store_for
    from kraftlog.tables.definitions import catalog

    records = store_for(spark, config).read(catalog()["records"])
    return records.filter((F.col("source") == "log") & (F.col("record_type") != "NO_OP_RECORD")).count()


def with_driver_options(config: Any, options: str) -> Any:
    """``config`` whose driver JVM starts with the Java ``options`` (where kraftlog starts it: a fresh application)."""
    from kraftlog.config import Config

    spark = config.data["spark"]
    return Config.load(**{**config.data, "spark": {**spark, "conf": {
        **spark.get("conf", {}), "spark.driver.extraJavaOptions": options}}})


def run_input(spark: Any, base: Any, work: Path, name: str, source: Path, cores: int, increments: int = 1,
              connect_runs: int = 0, driver_options: str | None = None) -> dict[str, Any]:
    """The full build, then the increment ``increments`` times in this process, each from the warehouse and input
    the full build left (reported by reconstruct + analyze: the median of the first three runs, and where at least
    ``STEADY_AFTER`` ran before the last three, their median as the steady hour; every run's seconds listed beside),
    once as scheduled (a fresh application; with ``driver_options``, once more with its driver's JVM started with
    them: ``kraftlog jvm-archive``'s) and ``connect_runs`` times through a Spark Connect server that stays up."""
    config = with_warehouse(base, work, name)
    warehouse = Path(config.warehouse)
    inputs, cut = split_input(source, work / f"in-{name}")
    result: dict[str, Any] = {"left_out_bytes": cut}
    result["full"] = pipeline(spark, config, inputs)
    full_records = non_noop_records(spark, config)
    kept = work / f"kept-{name}"
    shutil.copytree(warehouse, kept / "wh")
    shutil.copytree(inputs, kept / "in")

    def from_the_full_build() -> None:
        for here, there in ((warehouse, kept / "wh"), (inputs, kept / "in")):
            shutil.rmtree(here)
            shutil.copytree(there, here)

    hour_from = last_record_time(spark, config)  # the hour's reports cover what landed after the full build
    runs = []
    for i in range(increments):
        if i:
            from_the_full_build()
        grow(source, inputs)
        runs.append(pipeline(spark, config, inputs, hour_from))
    result["increment_pages_seconds"] = pages_seconds(spark, config, hour_from, work / f"pages-{name}")

    def next_hour() -> None:
        from_the_full_build()
        grow(source, inputs)

    next_hour()
    result["increment_as_scheduled"] = as_scheduled(config, inputs, work)
    if driver_options:
        next_hour()
        result["increment_as_scheduled_archived"] = as_scheduled(with_driver_options(config, driver_options), inputs,
                                                                 work)
    if connect_runs:
        result["increment_through_connect"] = through_connect(config, inputs, work, next_hour, connect_runs)
    hours = hours_of(runs)
    result["increment"] = hours["hour"]
    if "steady" in hours:
        result["increment_steady"] = hours["steady"]
    result["increment_runs_build_seconds"] = hours["hours_build_seconds"]
    result["increment_runs_report_seconds"] = [r["report_seconds"] for r in runs]
    all_records = non_noop_records(spark, config)
    new = all_records - full_records
    for part, n in (("full", full_records), ("increment", new), ("increment_steady", new)):
        r = result.get(part)
        if r is None:
            continue
        r["non_noop_records"] = n
        r["records_per_second_per_core"] = round(n / r["total_seconds"] / cores) if r["total_seconds"] else None
    for part in ("increment", "increment_steady"):
        if part in result:
            result[f"{part}_build_share"] = round(build_seconds(result[part]) / build_seconds(result["full"]), 3)
    for part in ("increment_as_scheduled", "increment_as_scheduled_archived"):
        if part in result:
            result[f"{part}_build_share"] = round(build_seconds(result[part]) / build_seconds(result["full"]), 3)
    for part in ("hour", "steady"):
        if part in result.get("increment_through_connect", {}):
            result[f"increment_through_connect_{part}_build_share"] = round(
                build_seconds(result["increment_through_connect"][part]) / build_seconds(result["full"]), 3)
    return result


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=1_250_000,
                    help="non-NoOp records of the 1x big cluster (the 4x: 5M, the size the targets are for)")
    ap.add_argument("--scales", default="1,4", help="sizes of the big cluster, as multiples of --records")
    ap.add_argument("--partitions", type=int, default=150_000)
    ap.add_argument("--topics", type=int, default=10_000)
    ap.add_argument("--corpus", type=Path, default=ROOT.parent / "shared" / "corpus" / "real")
    ap.add_argument("--copies", type=int, default=10, help="copies of the corpus (0: skip the corpus)")
    ap.add_argument("--cores", type=int, default=2)
    ap.add_argument("--increments", type=int, default=STEADY_AFTER + 3,
                    help="runs of the increment in this process, each from the full build's warehouse (the median of "
                    f"the first three is reported, and of the last three where at least {STEADY_AFTER} ran before "
                    "them)")
    ap.add_argument("--connect-runs", type=int, default=1 + STEADY_AFTER + 3,
                    help="hourly runs of the increment through one Spark Connect server (the first finds it cold; "
                    "0: none)")
    ap.add_argument("--no-class-archive", action="store_true",
                    help="skip the hour as scheduled with its driver started from a class-data archive (kraftlog "
                    "jvm-archive of the bundled sample, written first: about a minute) and its JIT at C1")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)

    from kraftlog.spark.session import build_session

    results: dict[str, Any] = {"cores": args.cores}
    inputs: list[tuple[str, Path]] = []
    for scale in [int(s) for s in args.scales.split(",") if s]:
        n = args.records * scale
        where, written = generated(ROOT / "out", n, args.partitions, args.topics)
        if written is not None:
            results[f"generated {n}"] = written
        inputs.append((f"big x{scale}", where))
    with scratch_dir("kraftlog-fleet-") as work:
        options = None
        if not args.no_class_archive:
            from kraftlog.spark.class_archive import write_archive

            t = time.perf_counter()
            archive = write_archive(work / "kraftlog.jsa", [str(ROOT / "samples" / "scenario-a")])
            results["class_archive"] = {"classes": archive.classes, "seconds": round(time.perf_counter() - t, 1),
                                        "options": archive.options}
            options = archive.options
        if args.copies and args.corpus.exists():
            inputs.append((f"corpus x{args.copies}", copy_corpus(args.corpus, work / "corpus", args.copies)))
        base = local_config(args.cores)
        spark = build_session(base)
        for name, source in inputs:
            print(f"{name} ...", flush=True)
            results[name] = run_input(spark, base, work, name.replace(" ", ""), source, args.cores,
                                      args.increments, args.connect_runs, options)
            print(results[name], flush=True)
        spark.stop()
    print(f"{'input':<12} {'part':<10} {'records':>10} {'ingest s':>8} {'recon s':>8} {'analyze s':>9} "
          f"{'rec/s/core':>10} {'driver JVM MB':>13} {'worker MB':>9}")
    for name, _ in inputs:
        parts = [p for p in ("full", "increment", "increment_steady") if p in results[name]]
        for part in parts:
            r = results[name][part]
            print(f"{name:<12} {part:<10} {r['non_noop_records']:>10,} {r['ingest_seconds']:>8} "
                  f"{r['reconstruct_seconds']:>8} {r['analyze_seconds']:>9} {r['records_per_second_per_core']:>10} "
                  f"{r['peak_driver_jvm_mb']:>13} {r['peak_worker_mb']:>9}")
        for part in parts:
            print(f"{name} {part}: {cpu_line(results[name][part])}")
        cold = results[name]["increment_as_scheduled"]
        steady = (f", steady (the median of hours {len(results[name]['increment_runs_build_seconds']) - 2}-"
                  f"{len(results[name]['increment_runs_build_seconds'])} of one process) "
                  f"{results[name]['increment_steady_build_share']:.1%}" if "increment_steady" in results[name] else "")
        print(f"{name}: the increment's reconstruct + analyze took {results[name]['increment_build_share']:.1%} "
              f"of the full build's in a process's first three hours{steady}; as scheduled (kraftlog run, a fresh "
              f"JVM) {results[name]['increment_as_scheduled_build_share']:.1%}, the run {cold['run_seconds']} s")
        if "increment_as_scheduled_archived" in results[name]:
            archived = results[name]["increment_as_scheduled_archived"]
            print(f"{name}: as scheduled, its driver started from the class-data archive with the JIT at C1 "
                  f"({results['class_archive']['options']}): "
                  f"{results[name]['increment_as_scheduled_archived_build_share']:.1%}, the run "
                  f"{archived['run_seconds']} s")
        print(f"{name}: the increment's runs, reconstruct + analyze: {results[name]['increment_runs_build_seconds']}; "
              f"the reports of the hour's period: {results[name]['increment_runs_report_seconds']}, its pages "
              f"written (the last hour): {results[name]['increment_pages_seconds']} s")
        if "increment_through_connect" in results[name]:
            connect = results[name]["increment_through_connect"]
            steady = (f", steady {results[name]['increment_through_connect_steady_build_share']:.1%} (the run "
                      f"{connect['steady']['run_seconds']} s)" if "steady" in connect else "")
            print(f"{name}: through a Spark Connect server that stays up (a fresh client an hour) "
                  f"{results[name]['increment_through_connect_hour_build_share']:.1%} in its first hours after the "
                  f"cold one (the run {connect['hour']['run_seconds']} s){steady}; its hours, reconstruct + analyze: "
                  f"{connect['hours_build_seconds']} after the first {build_seconds(connect['first_hour']):.1f}")
    save_results(args.json, results)
    return results


if __name__ == "__main__":
    main()
