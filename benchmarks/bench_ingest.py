"""End-to-end ingest throughput (files to Delta) on local[2], for the corpus and a 10x copy of it.

    python benchmarks/bench_ingest.py [--copies 10] [--corpus ../shared/corpus/real]

The 10x input is the corpus copied ten times under other top-level names, so every copy is a cluster
of its own (identity template ``{top}:{cluster.id}``). Each input is ingested into a fresh warehouse.
Reported beside the pure decoder's one-core rate over the same files (best of three passes; and the
land pass's own work, decode + columns + Parquet, on one core without Spark): records/s, records/s per
core, seconds, the run's phases, and peak resident memory of the driver (Python and JVM) and of the
Python workers (sampled from /proc every 100 ms). Each input is ingested ``--repeat`` times (default 2,
each into a fresh warehouse, in one session); rates use the best run, as the decoder's do, and every
run's seconds are kept (the first run of a size also pays for the JVM and the workers warming up).
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path
from typing import Any

from common import (
    WorkerMemory,
    best_of,
    copy_corpus,
    corpus_arguments,
    jvm_pid,
    local_config,
    rss_kb,
    save_results,
    scratch_dir,
    with_warehouse,
)


def _decoder_rate(inputs: Path) -> tuple[float, int]:
    from kraftlog.wire.discover import log_files
    from kraftlog.wire.files import read_log
    from kraftlog.wire.messages import default_codec

    default_codec()
    datas = [(p.read_bytes(), str(p)) for p, _ in log_files([inputs])]
    best, n = best_of(lambda: sum(read_log(d, s).record_count for d, s in datas), 3)
    return n / best, n


def _lander_rate(inputs: Path, out: Path) -> float:
    """One core, no Spark: what the land pass does per file (decode, build columns, write Parquet), with the Arrow
    memory pool of kraftlog's workers."""
    from kraftlog.spark.staging import StreamingWriter
    from kraftlog.spark.workers import retaining_arrow_pool
    from kraftlog.storage import Storage
    from kraftlog.tables.definitions import catalog
    from kraftlog.tables.rows import FileIdentity, FileLander, FileRef, KeepSpec
    from kraftlog.wire.discover import log_files

    retaining_arrow_pool()
    cat = catalog()
    refs = [(FileRef(str(p), p.read_bytes(), 0, FileIdentity("c", 1, "d"), i), KeepSpec())
            for i, (p, _) in enumerate(log_files([inputs]))]
    best, n = float("inf"), 0
    for attempt in range(2):
        shutil.rmtree(out, ignore_errors=True)
        writers: dict[str, Any] = {}
        t = time.perf_counter()
        n = 0
        for chunk in FileLander("bench").land(refs):
            n += chunk["records"].num_rows if "records" in chunk else 0
            for name, table in chunk.items():
                if name not in writers:
                    writers[name] = StreamingWriter(name, f"file://{out}/{name}/{attempt}", cat[name].schema, "",
                                                    Storage())
                writers[name].write(table)
        for w in writers.values():
            w.close()
        best = min(best, time.perf_counter() - t)
    return n / best


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = corpus_arguments(__doc__, argv)

    from kraftlog.spark.ingest import ingest
    from kraftlog.spark.session import build_session

    results: dict[str, Any] = {"cores": args.cores}
    with scratch_dir("kraftlog-bench-") as work:
        big = copy_corpus(args.corpus, work / f"corpus-x{args.copies}", args.copies)
        rate, _ = _decoder_rate(args.corpus)
        results["decoder_records_per_s_one_core"] = round(rate)
        results["land_pass_records_per_s_one_core"] = round(_lander_rate(args.corpus, work / "lander"))
        config = local_config(args.cores)
        spark = build_session(config)
        spark.range(4).repartition(args.cores).mapInArrow(lambda it: it, "id long").collect()  # start workers
        jvm = jvm_pid(spark)
        for name, inputs in (("corpus", args.corpus), (f"corpus x{args.copies}", big)):
            runs = []
            peak_kb = 0
            for attempt in range(args.repeat):
                sampler = WorkerMemory(jvm)
                sampler.start()
                t = time.perf_counter()
                r = ingest(spark, [str(inputs)], with_warehouse(config, work, f"{name}-{attempt}"))
                runs.append((time.perf_counter() - t, r))
                sampler.stop.set()
                sampler.join()
                peak_kb = max(peak_kb, sampler.peak_kb)
            secs, r = min(runs, key=lambda x: x[0])
            results[name] = {
                "seconds": round(secs, 2), "seconds_each_run": [round(s, 2) for s, _ in runs],
                "records": r.records_decoded, "rows_added": r.rows_added,
                "records_per_s": round(r.records_decoded / secs),
                "records_per_s_per_core": round(r.records_decoded / secs / args.cores),
                "python_worker_peak_mb": round(peak_kb / 1024),
                "driver_python_peak_mb": round(rss_kb(os.getpid(), "VmHWM") / 1024),
                "driver_jvm_peak_mb": round(rss_kb(jvm, "VmHWM") / 1024),
                "files": r.files_ingested, "clean": r.files_clean, "contested": r.files_contested,
                "phases_s": r.phases,
            }
        spark.stop()
    one, many = results["corpus"], results[f"corpus x{args.copies}"]
    results["time_ratio_for_10x_input"] = round(many["seconds"] / one["seconds"], 2)
    decoder = results["decoder_records_per_s_one_core"]
    results["per_core_vs_decoder"] = round(many["records_per_s_per_core"] / decoder, 3)
    print(f"pure decoder, one core: {results['decoder_records_per_s_one_core']:,} records/s; the land pass without "
          f"Spark (decode, columns, Parquet), one core: {results['land_pass_records_per_s_one_core']:,} records/s")
    print(f"{'input':<14} {'records':>10} {'seconds':>8} {'rec/s':>9} {'rec/s/core':>10} {'worker MB':>9} "
          f"{'driver py MB':>12} {'driver JVM MB':>13}")
    for name in ("corpus", f"corpus x{args.copies}"):
        v = results[name]
        print(f"{name:<14} {v['records']:>10,} {v['seconds']:>8.1f} {v['records_per_s']:>9,} "
              f"{v['records_per_s_per_core']:>10,} {v['python_worker_peak_mb']:>9} {v['driver_python_peak_mb']:>12} "
              f"{v['driver_jvm_peak_mb']:>13}")
    for name in ("corpus", f"corpus x{args.copies}"):
        print(f"{name}: runs " + ", ".join(f"{s:.1f}" for s in results[name]["seconds_each_run"]) + " s; best: "
              + ", ".join(f"{k} {v:.1f} s" for k, v in results[name]["phases_s"].items()))
    print(f"{args.copies}x the input took {results['time_ratio_for_10x_input']}x the time; per core the ingest "
          f"runs at {results['per_core_vs_decoder']:.2f}x the pure decoder's rate (target: >= 0.5)")
    save_results(args.json, results)
    return results


if __name__ == "__main__":
    main()
