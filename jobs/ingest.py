"""spark-submit entry point: land KRaft metadata logs in Delta tables.

    spark-submit --py-files kraftlog.zip jobs/ingest.py --conf conf/cluster.toml s3a://kafka-archive/

Arguments: input roots (local paths or any file system Spark reads), ``--conf`` a TOML profile
(default: the embedded local profile), ``--warehouse`` to override where the tables go.
Prints the one-line run summary; exits non-zero if the run failed.
"""

from __future__ import annotations

import argparse
import logging
import sys

from kraftlog.config import Config
from kraftlog.spark.ingest import ingest
from kraftlog.spark.session import build_session


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Ingest KRaft metadata logs into Delta tables")
    ap.add_argument("inputs", nargs="+")
    ap.add_argument("--conf", help="TOML profile (conf/local.toml, conf/cluster.toml)")
    ap.add_argument("--warehouse", help="where the Delta tables live (overrides the profile)")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    overrides = {"warehouse": {"path": args.warehouse}} if args.warehouse else {}
    config = Config.load(args.conf, **overrides)
    spark = build_session(config)
    result = ingest(spark, args.inputs, config)
    print(result.line())
    return 0


if __name__ == "__main__":
    sys.exit(main())
