"""History build time (``kraftlog reconstruct``) on local[2], for the corpus and a 10x copy of it.

    python benchmarks/bench_history.py [--copies 10] [--corpus ../shared/corpus/real]

Each input is first ingested into a fresh warehouse (not timed); then the entity histories are built
and written twice (the first build includes the JVM's warm-up of the plans, the second is the steady
state), and verified against every reachable snapshot once. Reported: seconds, history rows, the
ratio of the 10x time to the 1x time.
"""

from __future__ import annotations

import time
from typing import Any

from common import copy_corpus, corpus_arguments, local_config, save_results, scratch_dir, with_warehouse


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = corpus_arguments(__doc__, argv)

    from kraftlog.spark.history import reconstruct
    from kraftlog.spark.ingest import ingest
    from kraftlog.spark.session import build_session
    from kraftlog.spark.verify import verify_tables

    results: dict[str, Any] = {"cores": args.cores}
    with scratch_dir("kraftlog-bench-") as work:
        big = copy_corpus(args.corpus, work / f"corpus-x{args.copies}", args.copies)
        base = local_config(args.cores)
        spark = build_session(base)
        for name, inputs in (("corpus", args.corpus), (f"corpus x{args.copies}", big)):
            config = with_warehouse(base, work, name)
            landed = ingest(spark, [str(inputs)], config)
            first = reconstruct(spark, config)
            t = time.perf_counter()
            second = reconstruct(spark, config)
            steady = time.perf_counter() - t
            t = time.perf_counter()
            report = verify_tables(spark, config)
            verify_s = time.perf_counter() - t
            results[name] = {
                "records": landed.rows_added, "clusters": second.clusters, "history_rows": sum(second.rows.values()),
                "first_build_seconds": round(first.seconds, 1), "build_seconds": round(steady, 1),
                "verify_seconds": round(verify_s, 1),
                "snapshots_checked": sum(c.reachable for _, checks in report for c in checks),
                "snapshots_differing": sum(bool(c.differences) for _, checks in report for c in checks),
            }
        spark.stop()
    one, many = results["corpus"], results[f"corpus x{args.copies}"]
    results["build_time_ratio_for_10x_input"] = round(many["build_seconds"] / one["build_seconds"], 2)
    print(f"{'input':<14} {'records':>10} {'clusters':>8} {'history rows':>12} {'1st build s':>11} {'build s':>8} "
          f"{'verify s':>8} {'checked':>7} {'differ':>6}")
    for name in ("corpus", f"corpus x{args.copies}"):
        v = results[name]
        print(f"{name:<14} {v['records']:>10,} {v['clusters']:>8} {v['history_rows']:>12,} "
              f"{v['first_build_seconds']:>11} {v['build_seconds']:>8} {v['verify_seconds']:>8} "
              f"{v['snapshots_checked']:>7} {v['snapshots_differing']:>6}")
    print(f"{args.copies}x the input took {results['build_time_ratio_for_10x_input']}x the build time")
    save_results(args.json, results)
    return results


if __name__ == "__main__":
    main()
