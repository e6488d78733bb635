"""A spark-submit application for the deployment tests: the live session's settings, as a job sees them, and
the Python interpreter each executor task ran in; then, given ``--then JOB ARGS...``, kraftlog's ``jobs/JOB.py``
with ``ARGS`` in the same application (one start of the executors and their packed environment, not two); then,
given ``--pages DIR`` (with or without a job), pages of several clusters drawn and written to ``DIR`` by the
executors (``write_pages``): copies of the report of the first cluster of ``--warehouse`` under other ids."""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa

from kraftlog.spark.session import describe, job_arguments


def _where(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    import kraftlog

    for b in batches:
        yield pa.RecordBatch.from_pylist([{"python": sys.executable, "kraftlog": kraftlog.__file__}] * b.num_rows)


def main() -> int:
    argv, then = sys.argv[1:], []
    if "--then" in argv:
        argv, then = argv[:argv.index("--then")], argv[argv.index("--then") + 1:]
    args, config, spark = job_arguments("deployment probe", argv, _options)
    rows = spark.range(0, 4, 1, 4).mapInArrow(_where, "python string, kraftlog string").collect()
    print("PROBE " + json.dumps({"session": describe(spark), "python": sorted({r["python"] for r in rows}),
                                 "kraftlog": sorted({r["kraftlog"] for r in rows})}), flush=True)
    code = _run_job(then) if then else 0
    if args.pages:
        from kraftlog.analytics.report import Period
        from kraftlog.spark.reports import DRIVER_PAGES, build_reports, write_pages
        from kraftlog.spark.store import open_store

        store = open_store(spark, config.warehouse)
        first = build_reports(store, None, Period())[0]
        many = [dataclasses.replace(first, cluster_id=f"c{i}") for i in range(DRIVER_PAGES + 2)]
        print("PAGES " + json.dumps(write_pages(store, many, args.pages)), flush=True)
    return code


def _run_job(then: list[str]) -> int:
    """kraftlog's ``jobs/JOB.py`` with ``ARGS`` (``then``: ``[JOB, *ARGS]``) in this application: its exit code."""
    job = Path(__file__).resolve().parents[1] / "jobs" / f"{then[0]}.py"
    spec = importlib.util.spec_from_file_location(f"job_{then[0]}", job)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return int(module.main(then[1:]) or 0)


def _options(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--pages", help="after the job, write pages of several clusters here, drawn by the executors")


if __name__ == "__main__":
    sys.exit(main())
