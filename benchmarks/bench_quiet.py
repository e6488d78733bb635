"""An hourly ``analyze`` of a cluster with a long, quiet history, on local[2].

    python benchmarks/bench_quiet.py [--hours 100 400] [--json out/bench-quiet.json]

A KRaft controller writes a NoOpRecord every 500 ms, so a cluster that does nothing still logs ~7,000 records an
hour, 63M a year. Per history length, a cluster of that many hours of NoOps (``bigcluster.LogWriter``) is built
up to its last hour (ingest, reconstruct, analyze), then its last hour lands as a new segment: reported are the
seconds of that hour's ``analyze`` (it should not grow with the history) and of an ``analyze --full``.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from bigcluster import LogWriter
from common import local_config, save_results, with_warehouse

PER_HOUR = 7100  # a NoOp every ~507 ms (LogWriter.noop)


def quiet_cluster(out: Path, hours: int) -> Path:
    """A data directory of ``hours`` hours of NoOps: every hour but the last in one segment, the last in another."""
    log_dir = out / "__cluster_metadata-0"
    log_dir.mkdir(parents=True)
    (out / "meta.properties").write_text(f"version=1\ncluster.id=quiet-{hours}h\nnode.id=1\n")
    log = LogWriter(log_dir, segment_records=PER_HOUR * (hours - 1))
    for _ in range(PER_HOUR * hours):
        log.noop()
    log.close()
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hours", type=int, nargs="+", default=[100, 400])
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)

    from kraftlog.spark.analyze import analyze
    from kraftlog.spark.history import reconstruct
    from kraftlog.spark.ingest import ingest
    from kraftlog.spark.session import build_session

    work = Path(tempfile.mkdtemp(prefix="kraftlog-bench-quiet-"))
    base = local_config(2)
    spark = build_session(base)
    results: dict[str, Any] = {"cores": 2, "records_per_hour": PER_HOUR, "runs": []}
    try:
        for hours in args.hours:
            source = quiet_cluster(work / f"src-{hours}", hours)
            segments = sorted((source / "__cluster_metadata-0").glob("*.log"))
            inputs = work / f"in-{hours}"
            shutil.copytree(source, inputs)
            (inputs / "__cluster_metadata-0" / segments[-1].name).unlink()  # all but the last hour
            config = with_warehouse(base, work, f"{hours}h")
            ingest(spark, [str(inputs)], config)
            reconstruct(spark, config)
            analyze(spark, config)
            shutil.copy(segments[-1], inputs / "__cluster_metadata-0" / segments[-1].name)  # the last hour lands
            ingest(spark, [str(inputs)], config)
            reconstruct(spark, config)
            t = time.perf_counter()
            hour = analyze(spark, config)
            hour_s = time.perf_counter() - t
            t = time.perf_counter()
            analyze(spark, config, full=True)
            full_s = time.perf_counter() - t
            run = {"hours": hours, "records": PER_HOUR * hours, "hour_analyze_s": round(hour_s, 1),
                   "full_analyze_s": round(full_s, 1), "hour_rows": hour.rows}
            results["runs"].append(run)
            print(f"{hours} h ({PER_HOUR * hours:,} records): the hour's analyze {hour_s:.1f} s "
                  f"({hour.plan.line()}), analyze --full {full_s:.1f} s", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    save_results(args.json, results)
    return results


if __name__ == "__main__":
    main()
