"""spark-submit entry point: build the event tables (leader_elections, isr_changes, ...) from the histories.

    spark-submit ... jobs/analytics.py --profile conf/cluster.toml [--cluster ID ...]

Run after ``jobs/reconstruct.py``. Clusters whose histories only went on go on from their last
analysis (``--full``: every cluster's events rebuilt); only the given clusters with ``--cluster``.
"""

from __future__ import annotations

import argparse
import sys

from kraftlog.spark.analyze import analyze
from kraftlog.spark.session import job_arguments, run_job


def _options(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--cluster", action="append", help="only this cluster (repeatable)")
    ap.add_argument("--full", action="store_true", help="rebuild every cluster's events (default: go on from "
                    "the last analysis where the histories only went on)")


def main(argv: list[str] | None = None) -> int:
    args, config, spark = job_arguments("Build the kraftlog event tables", argv, _options)
    print(analyze(spark, config, clusters=args.cluster, full=args.full).line())
    return 0


if __name__ == "__main__":
    sys.exit(run_job(main))
