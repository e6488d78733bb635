"""spark-submit entry point: build the event tables (leader_elections, isr_changes, ...) from the histories.

    spark-submit ... jobs/analytics.py --profile conf/cluster.toml [--cluster ID ...]

Run after ``jobs/reconstruct.py``; each event table is replaced in one commit (only the given
clusters' rows with ``--cluster``).
"""

from __future__ import annotations

import argparse
import sys

from kraftlog.spark.analyze import analyze
from kraftlog.spark.session import job_arguments


def _options(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--cluster", action="append", help="only this cluster (repeatable)")


def main(argv: list[str] | None = None) -> int:
    args, config, spark = job_arguments("Build the kraftlog event tables", argv, _options)
    print(analyze(spark, config, clusters=args.cluster).line())
    return 0


if __name__ == "__main__":
    sys.exit(main())
