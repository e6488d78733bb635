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
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from bench_quiet import quiet_cluster, until_last_hour
from common import local_config, rss_kb, save_results, scratch_dir, with_warehouse

OWN_SHARE = 10  # one synthetic row in ten is an older version of the cluster's own files
CLUSTERS = 50


def history(landed: pa.Table, rows: int, start: int = 0) -> pa.Table:
    """``rows`` ledger rows of history made of the landed ones (``landed``, the ``files`` table): the versions of the
    fleet's other clusters' files (their paths and cluster ids of their own), and, one in ``OWN_SHARE``, older
    versions of the cluster's own files (their offsets and sizes smaller, landed a day before)."""
    n = landed.num_rows
    idx = pa.array([i % n for i in range(start, start + rows)], pa.int64())
    out = landed.take(idx)
    seq = pa.array(range(start, start + rows), pa.int64())
    own = pc.equal(pc.remainder(seq, OWN_SHARE), 0)
    version = pc.cast(pc.divide(seq, n), pa.string())
    fleet = pc.binary_join_element_wise("s3://archive/fleet-", pc.cast(pc.remainder(pc.divide(seq, n), CLUSTERS),
                                                                         pa.string()), "")
    prefix = pc.binary_join_element_wise(fleet, "/v", version, "/", "")

    def column(name: str, values: Any) -> None:
        nonlocal out
        out = out.set_column(out.schema.get_field_index(name), name, pc.cast(values, out.schema.field(name).type))

    column("path", pc.if_else(own, out["path"], pc.binary_join_element_wise(prefix, out["path"], "")))
    column("data_dir", pc.if_else(own, out["data_dir"], pc.binary_join_element_wise(prefix, out["data_dir"], "")))
    column("cluster_id", pc.if_else(own, out["cluster_id"], fleet))
    for name in ("last_offset", "size"):
        column(name, pc.if_else(own, pc.divide(out[name], 2), out[name]))
    day = pa.scalar(86_400_000_000, pa.int64())
    column("ingested_at", pc.cast(pc.subtract(pc.cast(out["ingested_at"], pa.int64()), day),
                                  out.schema.field("ingested_at").type))
    return out


def add_history(warehouse: Path, rows: int, chunk: int = 500_000) -> None:
    """Append ``rows`` rows of history (``history``) to the ``files`` table of ``warehouse``."""
    from deltalake import DeltaTable, write_deltalake

    table = str(warehouse / "files")
    landed = DeltaTable(table).to_pyarrow_table()
    for start in range(0, rows, chunk):
        write_deltalake(table, history(landed, min(chunk, rows - start), start), mode="append")


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
            inputs, warehouse = work / f"in-{rows}", work / f"wh-{rows}"
            shutil.copytree(before_hour, inputs)
            shutil.copytree(built.warehouse, warehouse)
            add_history(warehouse, rows)
            for f, target in last_hour:
                shutil.copy(f, inputs / target.relative_to(before_hour))
            config = Config.load(**{**built.data, "warehouse": {"path": str(warehouse)}})
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
