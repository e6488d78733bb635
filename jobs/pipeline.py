"""spark-submit entry point: a whole scheduled run in one application (``kraftlog.spark.pipeline``).

    spark-submit ... jobs/pipeline.py --profile conf/cluster.toml s3://kafka-archive/ \\
        [--verify] [--report-dir s3://platform-lake/reports/2026-11-20T1400]

Ingests the inputs (local paths or URIs; also comma separated), brings the histories and event tables up to date
and, with ``--report-dir``, writes a report per cluster and an index: what ``jobs/ingest.py``,
``reconstruct.py``, ``analytics.py`` and ``report.py --out-dir`` do as four applications, in one. Exits 1 when
``--verify`` finds a snapshot that differs from the histories (after every step ran).
"""

from __future__ import annotations

import argparse
import sys

from kraftlog.analytics.report import Period
from kraftlog.points import parse_bound, parse_time
from kraftlog.spark.pipeline import Steps, run_pipeline
from kraftlog.spark.session import job_arguments, run_job


def _options(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("inputs", nargs="+", help="input roots (local, s3://, ...; also comma separated)")
    ap.add_argument("--verify", action="store_true", help="check the histories against every snapshot they reach")
    ap.add_argument("--report-dir", help="folder to write report-<cluster>.html and index.html into: a path or a URI")
    ap.add_argument("--from", dest="start", type=parse_time, help="start of the reports' period")
    ap.add_argument("--to", dest="end", type=parse_bound, help="end of the reports' period")
    ap.add_argument("--allow-empty", action="store_true", help="succeed when the inputs hold no data directory")


def main(argv: list[str] | None = None) -> int:
    args, config, spark = job_arguments("Ingest, reconstruct, analyze (and verify, report) in one run", argv,
                                        _options, check=lambda a: Period(a.start, a.end))  # (before Spark starts)
    roots = [root for arg in args.inputs for root in arg.split(",") if root]
    steps = Steps(args.verify, args.report_dir, Period(args.start, args.end), args.allow_empty)
    return 1 if run_pipeline(spark, config, roots, steps) else 0


if __name__ == "__main__":
    sys.exit(run_job(main))
