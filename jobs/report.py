"""spark-submit entry point: self-contained HTML reports of clusters' events over a period.

    spark-submit ... jobs/report.py --profile conf/cluster.toml \\
        --from 2026-11-20T00:00:00Z --to 2026-11-21T00:00:00Z --out-dir s3://platform-lake/reports/2026-11-20

``--out FILE`` writes one cluster's page (``--cluster``, or the only cluster); ``--out-dir DIR`` writes
``DIR/report-<cluster>.html`` for each ``--cluster`` given, or for every cluster built, and ``DIR/index.html``:
one row per cluster with its summary figures (alarming ones in red), linking to its page. Reads the event tables
(run ``jobs/analytics.py`` first); only a cluster's rows in the period reach the driver. ``--out`` and ``--out-dir``
are local paths or URIs (``s3://``, ``gs://``, ``abfss://``, ``hdfs://``): in cluster deploy mode the driver's disk
is lost with it, so write to the warehouse's storage.
"""

from __future__ import annotations

import argparse
import sys

from kraftlog.analytics.report import Period
from kraftlog.points import parse_bound, parse_time
from kraftlog.spark.reports import write_report, write_reports
from kraftlog.spark.session import job_arguments, run_job
from kraftlog.spark.store import store_for


def _options(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--cluster", action="append", help="cluster id (repeatable)")
    ap.add_argument("--from", dest="start", type=parse_time,
                    help="start of the period (ISO-8601, ms:<millis>, now, or ago: -1h, -7d)")
    ap.add_argument("--to", dest="end", type=parse_bound, help="end of the period (the same, or latest)")
    out = ap.add_mutually_exclusive_group(required=True)
    out.add_argument("--out", help="HTML file to write (one cluster): a path or a URI (s3://...), or a folder to "
                     "write report-<cluster>.html into")
    out.add_argument("--out-dir", help="folder to write <cluster>.html into, for every cluster: a path or a URI")


def main(argv: list[str] | None = None) -> int:
    args, config, spark = job_arguments("Write kraftlog HTML reports", argv, _options,
                                        check=lambda a: Period(a.start, a.end))  # (before Spark starts)
    store = store_for(spark, config)
    period = Period(args.start, args.end)
    if args.out is not None:
        if args.cluster and len(args.cluster) > 1:
            raise SystemExit("--out writes one cluster's report; use --out-dir for several")
        print(write_report(store, args.cluster[0] if args.cluster else None, period, args.out))
        return 0
    print("\n".join(write_reports(store, args.cluster, period, args.out_dir)))
    return 0


if __name__ == "__main__":
    sys.exit(run_job(main))
