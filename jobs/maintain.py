"""spark-submit entry point: table upkeep (compact small files clustered by cluster and time, optionally z-order,
vacuum).

    spark-submit ... jobs/maintain.py --profile conf/cluster.toml [--z-order] [--retention-hours 168]

Runs through delta-rs on the driver under the warehouse's lease; no row changes. Schedule it after the
hourly steps (the DAG does), or daily.
"""

from __future__ import annotations

import argparse
import sys

from kraftlog.spark.maintenance import DEFAULT_RETENTION_HOURS, check_retention, maintain
from kraftlog.spark.session import job_arguments, run_job
from kraftlog.spark.store import store_for


def _options(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--z-order", action="store_true", help="z-order by cluster and time instead of compacting")
    ap.add_argument("--retention-hours", type=float, default=DEFAULT_RETENTION_HOURS,
                    help="vacuum files unreferenced for longer than this (default: 7 days)")
    ap.add_argument("--no-vacuum", action="store_true", help="compact only")


def main(argv: list[str] | None = None) -> int:
    args, config, spark = job_arguments("kraftlog table upkeep", argv, _options,
                                        check=lambda a: check_retention(a.retention_hours))
    print(maintain(store_for(spark, config), config, z_order=args.z_order, vacuum=not args.no_vacuum,
                   retention_hours=args.retention_hours).line())
    return 0


if __name__ == "__main__":
    sys.exit(run_job(main))
