"""spark-submit entry point: land KRaft metadata logs in Delta tables.

    spark-submit ... jobs/ingest.py --profile conf/cluster.toml s3://kafka-archive/

Arguments: input roots (local paths or URIs: s3://, gs://, abfss://, hdfs://; also comma separated), ``--profile``
a TOML profile
(default: the embedded local profile), ``--warehouse`` to override where the tables go.
Prints the one-line run summary; exits non-zero if the run failed.
"""

from __future__ import annotations

import argparse
import sys

from kraftlog.spark.ingest import ingest
from kraftlog.spark.session import job_arguments, run_job


def _options(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("inputs", nargs="+", help="input roots (local, s3a://, ...; also comma separated)")
    ap.add_argument("--allow-empty", action="store_true", help="succeed when the inputs hold no data directory")


def main(argv: list[str] | None = None) -> int:
    args, config, spark = job_arguments("Ingest KRaft metadata logs into Delta tables", argv, _options)
    roots = [root for arg in args.inputs for root in arg.split(",") if root]  # "a,b" from a scheduler template
    print(ingest(spark, roots, config, allow_empty=args.allow_empty).line())
    return 0


if __name__ == "__main__":
    sys.exit(run_job(main))
