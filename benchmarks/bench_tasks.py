"""The fixed cost of a Python task, in a plain PySpark worker and in one that loaded kraftlog.

    python benchmarks/bench_tasks.py [--tasks 200] [--repeat 3] [--cores 2] [--json out/bench-tasks.json]

Jobs of ``--tasks`` one-row ``mapInArrow`` tasks on local[cores]: first with a function that loads nothing (each
task's ``importlib.invalidate_caches()`` reads pyspark's and py4j's zip archives again, CPython gh-103200 on 3.10
and 3.11), then with one that loads ``kraftlog.spark`` (``kraftlog.spark.workers``: an unchanged archive is not
read again). Reported: the best of ``--repeat`` jobs of each, in seconds and milliseconds per task.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from common import best_of, local_config, save_results


def job_seconds(spark: Any, tasks: int, load_kraftlog: bool, repeat: int) -> float:
    """The best of ``repeat`` jobs of ``tasks`` tasks (after one that starts the workers)."""

    def task(batches: Iterator[Any]) -> Iterator[Any]:
        if load_kraftlog:
            import kraftlog.spark  # noqa: F401  (what kraftlog's functions load in a worker)
        yield from batches

    frame = spark.range(tasks, numPartitions=tasks)
    frame.mapInArrow(task, "id long").collect()
    return best_of(frame.mapInArrow(task, "id long").collect, repeat)[0]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", type=int, default=200)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--cores", type=int, default=2)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    from kraftlog.spark.session import build_session

    spark = build_session(local_config(args.cores))
    results: dict[str, Any] = {"tasks": args.tasks, "cores": args.cores, "python": sys.version.split()[0]}
    # the plain workers first: a worker that loaded kraftlog stays as kraftlog left it
    for name, load in (("plain worker", False), ("kraftlog worker", True)):
        s = job_seconds(spark, args.tasks, load, args.repeat)
        results[name] = {"seconds": round(s, 2), "ms_per_task": round(1000 * s * args.cores / args.tasks, 1)}
        print(f"{name:<16} {args.tasks} tasks: {s:6.2f} s, {results[name]['ms_per_task']:6.1f} ms per task (core)",
              flush=True)
    spark.stop()
    save_results(args.json, results)


if __name__ == "__main__":
    main()
