"""The hourly run of a cluster with a broker down for days, on local[2]: does the hour follow the hour, or how long
ago the broker went down?

    python benchmarks/bench_window.py [--rounds 4 16 64] [--json out/bench-window.json]

A broker that is lost and not replaced (a host awaiting repair) leaves every partition it holds a replica of under
its replication factor, and ``under_replicated`` (and, under ``min.insync.replicas``, ``under_min_isr``) keeps a
window open on each until it is back: for weeks, while the other brokers go on restarting. An analysis carries each
open window forward from its row as the last analysis left it (``kraftlog.analytics.events.open_windows``) and reads
the partitions the hour touched from the hour on, not from where a window began: the versions the hour's partition
events read, and its time, should stay the same at any number of rolling restarts since the broker went.

Per ``--rounds``: a cluster of 9 brokers in 3 racks, 300 topics of 6 partitions (replication factor 3;
``bigcluster.Cluster``) loses a broker, then goes through that many rolling restarts of the 8 others; then the last
hour lands (two more brokers restarted) and its reconstruct and analyze are timed, with the partition versions its
events read (``partition_inputs``) and, for comparison, ``analyze --full``.
"""

from __future__ import annotations

import argparse
import functools
import shutil
import time
from pathlib import Path
from typing import Any

from bench_quiet import until_last_hour
from bigcluster import Cluster, metadata
from common import local_config, save_results, scratch_dir, with_warehouse


def down_for_rounds(out: Path, rounds: int) -> tuple[Path, int, dict[str, int]]:
    """The cluster's data directory under ``out``: a broker lost after start-up, then ``rounds`` rolling restarts of
    the others, then the last hour (two of them restarted); returns it, the segment's size before the last hour, and
    what was written."""
    c = Cluster(out / "node-1", brokers=9, racks=3, topics=300, partitions=1800, seed=1, segment_records=1 << 40)
    c.bootstrap()
    for _ in range(3):
        c.create_topics(100, 6)
    lost = c.brokers[min(c.brokers)]
    lost.fenced = True  # fenced by the controller (its session expired), its replicas out of every ISR, never back
    c.log.append([metadata("BROKER_REGISTRATION_CHANGE_RECORD", broker_id=lost.broker_id, broker_epoch=lost.epoch,
                           fenced=1)])
    c._leave(lost.broker_id)
    alive = [b for b in c.brokers.values() if b is not lost]
    for _ in range(rounds):
        for b in alive:
            c.restart(b)
            c.log.noop()
    c.log._out.flush()
    cut = c.log._out.tell()
    before = c.log.records
    for b in alive[:2]:
        c.restart(b)
        c.log.noop()
    c.log.close()
    (out / "node-1" / "meta.properties").write_text(f"version=1\ncluster.id=down-{rounds}\nnode.id=1\n")
    return out, cut, {"records_before_hour": before, "hour_records": c.log.records - before}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, nargs="+", default=[4, 16, 64])
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)

    from pyspark.sql import DataFrame

    from kraftlog.analytics.definitions import WINDOW, event_tables, increment_of
    from kraftlog.config import Config
    from kraftlog.spark.analyze import analyze, partition_inputs, plan_events
    from kraftlog.spark.history import reconstruct
    from kraftlog.spark.ingest import ingest
    from kraftlog.spark.session import build_session
    from kraftlog.spark.store import store_for

    base = local_config(2)
    spark = build_session(base)
    results: dict[str, Any] = {"cores": 2, "runs": []}
    with scratch_dir("kraftlog-bench-window-") as work:
        for rounds in args.rounds:
            source, cut, written = down_for_rounds(work / f"src-{rounds}", rounds)
            inputs = work / f"in-{rounds}"
            last_hour = until_last_hour(source, inputs, cut)
            config = Config.load(**{**with_warehouse(base, work, f"{rounds}r").data,
                                    "identity": {"cluster": "{cluster.id}"}})
            ingest(spark, [str(inputs)], config)  # every round but the last hour
            reconstruct(spark, config)
            analyze(spark, config)
            for f, target in last_hour:  # the last hour lands
                shutil.copy(f, target)
            run: dict[str, Any] = {"rounds": rounds, **written}
            t = time.perf_counter()
            ingest(spark, [str(inputs)], config)
            run["hour_ingest_s"] = round(time.perf_counter() - t, 1)
            t = time.perf_counter()
            reconstruct(spark, config)
            run["hour_reconstruct_s"] = round(time.perf_counter() - t, 1)
            store = store_for(spark, config)
            plan = plan_events(store, None, False)
            read = partition_inputs(store, plan)
            assert read.opened is not None  # (the cluster goes on)
            run["open_window_partitions"] = functools.reduce(DataFrame.unionByName, [
                read.opened(name).select("topic_id", "partition_id") for name, t in event_tables().items()
                if increment_of(t) == WINDOW]).distinct().count()
            run["partition_versions_read"] = read.history("partitions").count()
            t = time.perf_counter()
            analyze(spark, config)
            run["hour_analyze_s"] = round(time.perf_counter() - t, 1)
            t = time.perf_counter()
            analyze(spark, config, full=True)
            run["full_analyze_s"] = round(time.perf_counter() - t, 1)
            results["runs"].append(run)
            print(f"{rounds} rolling restarts since the broker went ({written['records_before_hour']:,} records), "
                  f"{run['open_window_partitions']} partitions with a window open: the hour "
                  f"({written['hour_records']:,} records) reads {run['partition_versions_read']:,} partition "
                  f"versions; reconstruct {run['hour_reconstruct_s']} s, analyze {run['hour_analyze_s']} s; "
                  f"analyze --full {run['full_analyze_s']} s", flush=True)
    save_results(args.json, results)
    return results


if __name__ == "__main__":
    main()
