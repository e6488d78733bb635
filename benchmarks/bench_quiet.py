"""The hourly run of a cluster with a long, quiet history, on local[2]: does its cost follow the hour or the history?

    python benchmarks/bench_quiet.py [--hours 100 400] [--json out/bench-quiet.json]

A KRaft controller writes a NoOpRecord every 500 ms, so a cluster that does nothing still logs ~7,000 records an
hour, 63M a year, and a snapshot an hour (``metadata.log.max.snapshot.interval.ms``, one hour by default). Per
history length, such a cluster (6 brokers, 50 topics, 150 partitions; ``bigcluster.Cluster``) is built up to its
last hour (ingest, reconstruct, verify, analyze); then its last hour lands (a new segment and its snapshot) and the
hourly run's steps are timed one by one, then ``analyze --full`` and ``verify --full`` for comparison. Each step of
the hour should cost the same at any history length.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from bigcluster import Cluster
from common import local_config, save_results, with_warehouse

PER_HOUR = 7100  # a NoOp every ~507 ms (LogWriter.noop)


def quiet_cluster(out: Path, hours: int) -> tuple[Path, list[Path]]:
    """A data directory of ``hours`` hours of NoOps with a snapshot at the end of each; returns it and the files of
    its last hour (its segment and its snapshot)."""
    c = Cluster(out, brokers=6, racks=3, topics=50, partitions=150, seed=1, segment_records=1 << 40)
    (out / "meta.properties").write_text(f"version=1\ncluster.id=quiet-{hours}h\nnode.id=1\n")
    c.bootstrap()
    c.create_topics(50, 3)
    for hour in range(hours):
        if hour == hours - 1:
            c.log._roll()
        for _ in range(PER_HOUR):
            c.log.noop()
        c.snapshot()
    c.log.close()
    log_dir = out / "__cluster_metadata-0"
    return out, [sorted(log_dir.glob("*.log"))[-1], sorted(log_dir.glob("*.checkpoint"))[-1]]


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hours", type=int, nargs="+", default=[100, 400])
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)

    from kraftlog.spark.analyze import analyze
    from kraftlog.spark.history import reconstruct
    from kraftlog.spark.ingest import ingest
    from kraftlog.spark.session import build_session
    from kraftlog.spark.verify import verify_tables

    work = Path(tempfile.mkdtemp(prefix="kraftlog-bench-quiet-"))
    base = local_config(2)
    spark = build_session(base)
    results: dict[str, Any] = {"cores": 2, "records_per_hour": PER_HOUR, "runs": []}
    steps = ("ingest", "reconstruct", "verify", "analyze")
    try:
        for hours in args.hours:
            source, last_hour = quiet_cluster(work / f"src-{hours}", hours)
            inputs = work / f"in-{hours}"
            shutil.copytree(source, inputs)
            for f in last_hour:
                (inputs / "__cluster_metadata-0" / f.name).unlink()
            config = with_warehouse(base, work, f"{hours}h")

            def run_step(step: str, full: bool = False, config: Any = config, inputs: Path = inputs) -> Any:
                if step == "ingest":
                    return ingest(spark, [str(inputs)], config)
                if step == "reconstruct":
                    return reconstruct(spark, config)
                if step == "verify":
                    return verify_tables(spark, config, full=full)
                return analyze(spark, config, full=full)

            for step in steps:  # every hour but the last
                run_step(step)
            for f in last_hour:  # the last hour lands
                shutil.copy(f, inputs / "__cluster_metadata-0" / f.name)
            run: dict[str, Any] = {"hours": hours, "records": PER_HOUR * hours, "snapshots": hours}
            for step in steps:
                t = time.perf_counter()
                out = run_step(step)
                run[f"hour_{step}_s"] = round(time.perf_counter() - t, 1)
                if step == "verify":
                    run["snapshots_checked"] = sum(c.reachable for _, checks in out for c in checks)
            for step in ("verify", "analyze"):
                t = time.perf_counter()
                run_step(step, full=True)
                run[f"full_{step}_s"] = round(time.perf_counter() - t, 1)
            run["hour_s"] = round(sum(run[f"hour_{s}_s"] for s in steps), 1)
            results["runs"].append(run)
            print(f"{hours} h ({PER_HOUR * hours:,} records, {hours} snapshots): the hour "
                  + ", ".join(f"{s} {run[f'hour_{s}_s']} s" for s in steps)
                  + f" = {run['hour_s']} s; verify --full {run['full_verify_s']} s, analyze --full "
                  f"{run['full_analyze_s']} s", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    save_results(args.json, results)
    return results


if __name__ == "__main__":
    main()
