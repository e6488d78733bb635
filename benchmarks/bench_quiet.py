"""The hourly run of a cluster with a long, quiet history, on local[2]: does its cost follow the hour or the history?

    python benchmarks/bench_quiet.py [--hours 100 400] [--json out/bench-quiet.json]

A KRaft controller writes a NoOpRecord every 500 ms, so a cluster that does nothing still logs ~7,000 records an
hour, 63M a year, and a snapshot an hour (``metadata.log.max.snapshot.interval.ms``, one hour by default); every
controller and broker holds a copy of the log. Per history length, such a cluster (6 brokers, 50 topics, 150
partitions; ``bigcluster.Cluster``) on ``--nodes`` data directories is built up to its last hour (ingest,
reconstruct, verify, analyze); then its last hour lands (each node's active segment grows, a snapshot more) and the
hourly run's steps are timed one by one, then ``analyze --full`` and ``verify --full`` for comparison. Each step of
the hour should cost the same at any history length.
"""

from __future__ import annotations

import argparse
import shutil
import time
from pathlib import Path
from typing import Any

from bigcluster import Cluster
from common import local_config, save_results, scratch_dir, with_warehouse

PER_HOUR = 7100  # a NoOp every ~507 ms (LogWriter.noop)


def quiet_cluster(out: Path, hours: int, nodes: int) -> tuple[Path, int]:
    """``nodes`` data directories (``node-<id>``, each a copy of the cluster's metadata log, as its controllers and
    brokers hold it) of ``hours`` hours of NoOps with a snapshot at the end of each, in one segment; returns the root
    and the segment's size before the last hour."""
    first = out / "node-1"
    c = Cluster(first, brokers=6, racks=3, topics=50, partitions=150, seed=1, segment_records=1 << 40)
    c.bootstrap()
    c.create_topics(50, 3)
    cut = 0
    for hour in range(hours):
        if hour == hours - 1:
            c.log._out.flush()
            cut = c.log._out.tell()
        for _ in range(PER_HOUR):
            c.log.noop()
        c.snapshot()
    c.log.close()
    for n in range(1, nodes + 1):
        node = out / f"node-{n}"
        if n > 1:
            shutil.copytree(first, node)
        (node / "meta.properties").write_text(f"version=1\ncluster.id=quiet-{hours}h\nnode.id={n}\n")
    return out, cut


def until_last_hour(source: Path, dest: Path, cut: int) -> list[tuple[Path, Path]]:
    """``source`` in ``dest`` as it was before its last hour: each node's segment cut at ``cut``, its last snapshot
    (if it has any) absent; returns the (source, destination) pairs of the files the last hour changes."""
    shutil.copytree(source, dest)
    changed = []
    for log_dir in sorted(source.glob("node-*/__cluster_metadata-0")):
        target = dest / log_dir.relative_to(source)
        segment = sorted(log_dir.glob("*.log"))[-1]
        with open(target / segment.name, "r+b") as fh:
            fh.truncate(cut)
        changed.append((segment, target / segment.name))
        for snapshot in sorted(log_dir.glob("*.checkpoint"))[-1:]:
            (target / snapshot.name).unlink()
            changed.append((snapshot, target / snapshot.name))
    return changed


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hours", type=int, nargs="+", default=[100, 400])
    ap.add_argument("--nodes", type=int, default=3, help="data directories holding the log (controllers, brokers)")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)

    from kraftlog.config import Config
    from kraftlog.spark.analyze import analyze
    from kraftlog.spark.history import reconstruct
    from kraftlog.spark.ingest import ingest
    from kraftlog.spark.session import build_session
    from kraftlog.spark.verify import verify_tables

    base = local_config(2)
    spark = build_session(base)
    results: dict[str, Any] = {"cores": 2, "records_per_hour": PER_HOUR, "runs": []}
    steps = ("ingest", "reconstruct", "verify", "analyze")
    with scratch_dir("kraftlog-bench-quiet-") as work:
        for hours in args.hours:
            source, cut = quiet_cluster(work / f"src-{hours}", hours, args.nodes)
            inputs = work / f"in-{hours}"
            last_hour = until_last_hour(source, inputs, cut)
            config = Config.load(**{**with_warehouse(base, work, f"{hours}h").data,  # the nodes are one cluster
                                    "identity": {"cluster": "{cluster.id}"}})

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
            for f, target in last_hour:  # the last hour lands: each node's segment grows, a snapshot more
                shutil.copy(f, target)
            run: dict[str, Any] = {"hours": hours, "records": PER_HOUR * hours, "snapshots": hours,
                                   "nodes": args.nodes}
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
            print(f"{hours} h ({PER_HOUR * hours:,} records, {hours} snapshots, {args.nodes} nodes): the hour "
                  + ", ".join(f"{s} {run[f'hour_{s}_s']} s" for s in steps)
                  + f" = {run['hour_s']} s; verify --full {run['full_verify_s']} s, analyze --full "
                  f"{run['full_analyze_s']} s", flush=True)
    save_results(args.json, results)
    return results


if __name__ == "__main__":
    main()
