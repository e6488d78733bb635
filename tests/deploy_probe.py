"""A spark-submit application for the deployment tests: the live session's settings, as a job sees them, and
the Python interpreter each executor task ran in."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator

import pyarrow as pa

from kraftlog.spark.session import describe, job_arguments


def _where(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    import kraftlog

    for b in batches:
        yield pa.RecordBatch.from_pylist([{"python": sys.executable, "kraftlog": kraftlog.__file__}] * b.num_rows)


def main() -> None:
    _, _, spark = job_arguments("deployment probe", sys.argv[1:])
    rows = spark.range(0, 4, 1, 4).mapInArrow(_where, "python string, kraftlog string").collect()
    print("PROBE " + json.dumps({"session": describe(spark), "python": sorted({r["python"] for r in rows}),
                                 "kraftlog": sorted({r["kraftlog"] for r in rows})}))


if __name__ == "__main__":
    main()
