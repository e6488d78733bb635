"""spark-submit entry point: self-contained HTML reports of clusters' events over a period.

    spark-submit --py-files kraftlog.zip jobs/report.py --conf conf/cluster.toml \\
        --from 2026-11-20T00:00:00Z --to 2026-11-21T00:00:00Z --out-dir reports/2026-11-20

``--out FILE`` writes one cluster's page (``--cluster``, or the only cluster); ``--out-dir DIR`` writes
``DIR/report-<cluster>.html`` for each ``--cluster`` given, or for every cluster built, and ``DIR/index.html``:
one row per cluster with its summary figures (alarming ones in red), linking to its page. Reads the event tables
(run ``jobs/analytics.py`` first); only a cluster's rows in the period reach the driver.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from kraftlog.analytics.report import Period, build_report, build_reports, render_index, report_name, write_report
from kraftlog.points import parse_time
from kraftlog.spark.session import job_arguments
from kraftlog.spark.store import open_store


def _options(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--cluster", action="append", help="cluster id (repeatable)")
    ap.add_argument("--from", dest="start", type=parse_time, help="start of the period (ISO-8601 or ms:<millis>)")
    ap.add_argument("--to", dest="end", type=parse_time, help="end of the period")
    out = ap.add_mutually_exclusive_group(required=True)
    out.add_argument("--out", type=Path, help="HTML file to write (one cluster)")
    out.add_argument("--out-dir", type=Path, help="folder to write <cluster>.html into, for every cluster")


def main(argv: list[str] | None = None) -> int:
    args, config, spark = job_arguments("Write kraftlog HTML reports", argv, _options)
    store = open_store(spark, config.warehouse, config.writer)
    period = Period(args.start, args.end)
    if args.out is not None:
        if args.cluster and len(args.cluster) > 1:
            raise SystemExit("--out writes one cluster's report; use --out-dir for several")
        report = build_report(store, args.cluster[0] if args.cluster else None, period)
        print(f"report of {report.cluster_id} ({period.text()}): {write_report(report, args.out)}")
        return 0
    pages = []
    for report in build_reports(store, args.cluster, period):
        name = report_name(report.cluster_id)
        print(f"report of {report.cluster_id} ({period.text()}): {write_report(report, args.out_dir / name)}")
        pages.append((report, name))
    index = args.out_dir / "index.html"
    index.write_text(render_index(pages, period), encoding="utf-8")
    print(f"overview of {len(pages)} cluster(s): {index}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
