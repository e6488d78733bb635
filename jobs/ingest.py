"""spark-submit entry point: land KRaft metadata logs in Delta tables.

    spark-submit --py-files kraftlog.zip jobs/ingest.py --conf conf/cluster.toml s3a://kafka-archive/

Arguments: input roots (local paths or any file system Spark reads), ``--conf`` a TOML profile
(default: the embedded local profile), ``--warehouse`` to override where the tables go.
Prints the one-line run summary; exits non-zero if the run failed.
"""

from __future__ import annotations

import sys

from kraftlog.spark.ingest import ingest
from kraftlog.spark.session import job_arguments


def main(argv: list[str] | None = None) -> int:
    args, config, spark = job_arguments("Ingest KRaft metadata logs into Delta tables", argv,
                                        lambda ap: ap.add_argument("inputs", nargs="+"))
    print(ingest(spark, args.inputs, config).line())
    return 0


if __name__ == "__main__":
    sys.exit(main())
