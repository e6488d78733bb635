"""The hourly ingest of a fleet whose ledger holds years of file versions, on local[2]: does it follow the hour?

    python benchmarks/bench_ledger.py [--rows 0 1000000 4000000] [--json out/bench-ledger.json]

The ``files`` ledger gains a row per file version landed: every hour each node's grown active segment and its new
snapshot (``metadata.log.max.snapshot.interval.ms``, an hour by default). A fleet of 50 clusters of 5 nodes adds some
4.4M rows a year. A quiet cluster (``bench_quiet.quiet_cluster``: 24 hours on 3 nodes) is landed up to its last hour;
then, per ``--rows``, a copy of that warehouse gets that many ledger rows of history (nine in ten the versions of
other clusters' files, one in ten older versions of the cluster's own segments and snapshots, as earlier hours left
them), and the last hour lands (each node's segment grew, a snapshot more). Timed: the hour's ingest, its phases, the
driver's peak memory (Python) during it. Each should be the same at any ledger length.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from bench_quiet import quiet_cluster, until_last_hour
from common import ROOT, local_config, rss_kb, save_results, scratch_dir, with_warehouse

sys.path.insert(0, str(ROOT / "tests"))
from ledger_history import add_history


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, nargs="+", default=[0, 1_000_000, 4_000_000])
    ap.add_argument("--hours", type=int, default=24)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)

    from kraftlog.config import Config
    from kraftlog.spark.ingest import ingest
    from kraftlog.spark.session import build_session

    base = local_config(2)
    spark = build_session(base)
    results: dict[str, Any] = {"cores": 2, "hours": args.hours, "runs": []}
    with scratch_dir("kraftlog-bench-ledger-") as work:
        source, cut = quiet_cluster(work / "src", args.hours, 3)
        before_hour = work / "in"
        last_hour = until_last_hour(source, before_hour, cut)
        built = Config.load(**{**with_warehouse(base, work, "built").data, "identity": {"cluster": "{cluster.id}"}})
        ingest(spark, [str(before_hour)], built)
        for rows in args.rows:
            config = with_warehouse(built, work, str(rows))
            inputs, warehouse = work / f"in-{rows}", Path(config.warehouse)
            shutil.copytree(before_hour, inputs)
            shutil.copytree(built.warehouse, warehouse)
            add_history(warehouse, rows)
            for f, target in last_hour:
                shutil.copy(f, inputs / target.relative_to(before_hour))
            Path("/proc/self/clear_refs").write_text("5")  # the peak resident size starts again from here
            start_mb = round(rss_kb(os.getpid()) / 1024)
            t = time.perf_counter()
            out = ingest(spark, [str(inputs)], config)
            run = {"ledger_rows": rows, "hour_ingest_s": round(time.perf_counter() - t, 1),
                   "phases_s": out.phases, "rows_added": out.rows_added,
                   "driver_start_mb": start_mb, "driver_peak_mb": round(rss_kb(os.getpid(), "VmHWM") / 1024)}
            results["runs"].append(run)
            print(f"ledger of {rows:,} rows: the hour's ingest {run['hour_ingest_s']} s ("
                  + ", ".join(f"{k} {v:.1f}" for k, v in out.phases.items())
                  + f"), {out.rows_added:,} rows landed, driver {start_mb} MB before, "
                  f"{run['driver_peak_mb']} MB at the peak", flush=True)
            shutil.rmtree(warehouse)
            shutil.rmtree(inputs)
    save_results(args.json, results)
    return results


if __name__ == "__main__":
    main()
