"""spark-submit entry point: build the entity histories (``<kind>_history`` tables) from the landed tables.

    spark-submit ... jobs/reconstruct.py --profile conf/cluster.toml [--verify] [--full]

``--cluster`` (repeatable) limits the build to some clusters; ``--verify`` then checks the histories
against every snapshot they reach and exits 1 when any differs (a data-quality gate for schedulers).
"""

from __future__ import annotations

import argparse
import sys

from kraftlog.spark.history import reconstruct
from kraftlog.spark.session import job_arguments, run_job
from kraftlog.spark.verify import verify_tables
from kraftlog.state.local import verify_lines


def _options(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--cluster", action="append", help="only this cluster (repeatable)")
    ap.add_argument("--verify", action="store_true", help="verify against every reachable snapshot afterwards")
    ap.add_argument("--full", action="store_true", help="replay every cluster from its base (default: go on from "
                    "the last build where the log only grew)")


def main(argv: list[str] | None = None) -> int:
    args, config, spark = job_arguments("Build KRaft entity histories", argv, _options)
    print(reconstruct(spark, config, clusters=args.cluster, full=args.full).line())
    if not args.verify:
        return 0
    lines, differing = verify_lines(verify_tables(spark, config, clusters=args.cluster), quiet=True)
    print("\n".join(lines))
    return 1 if differing else 0


if __name__ == "__main__":
    sys.exit(run_job(main))
