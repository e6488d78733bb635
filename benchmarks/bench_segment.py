"""Ingest of one big segment: seconds and peak worker memory as the segment grows towards Kafka's 1 GiB.

    python benchmarks/bench_segment.py [--records 5000000] [--sizes 60,240] [--nodes 1,3] [--cores 2]
                                       [--json out/bench-segment.json]

A KRaft controller rolls its metadata log at ``metadata.log.segment.bytes`` (1 GiB by default), so a busy
cluster's first ingest (and any backfill) reads segments of up to 1 GiB. The big cluster of ``bigcluster.py``
(``--records``, generated once and kept under ``out/``) has its segments joined into one log and cut at a batch
boundary to each of ``--sizes`` (MB); each size is ingested into a fresh warehouse on local[cores] from one data
directory and from ``--nodes`` data directories of the cluster holding the segment, each 1 MB behind the one before
(the first ingest of a live cluster: the copies are chosen among record by record). Reported: seconds, MB/s of
the log, and the peak resident memory of the Python workers, which should follow the reader's range
(``kraftlog.wire.columns.RANGE_BYTES``), not the segment.
"""

from __future__ import annotations

import argparse
import shutil
import time
from pathlib import Path
from typing import Any

from bench_fleet import batch_ends
from bigcluster import generated
from common import ROOT, WorkerMemory, jvm_pid, local_config, save_results, scratch_dir, with_warehouse


def joined_log(cluster: Path) -> bytes:
    """The cluster's segments, one after the other: one segment of its whole log (the offsets go on)."""
    return b"".join(p.read_bytes() for p in sorted((cluster / "__cluster_metadata-0").glob("*.log")))


LAG_BYTES = 1_000_000  # each further node's copy is this much behind the one before (followers lag)


def data_dirs(log: bytes, size: int, nodes: int, cluster: Path, dest: Path) -> int:
    """``nodes`` data directories of one cluster under ``dest``, each holding ``log`` cut at a batch boundary as its
    one segment: the first to at most ``size`` bytes, each further one ``LAG_BYTES`` shorter than the one before (the
    active segment of a live cluster, its followers a little behind); returns the first's size."""
    dest.mkdir(parents=True)
    (dest / "seg").write_bytes(log)
    ends = [end for end, _ in batch_ends(dest / "seg")]
    (dest / "seg").unlink()
    meta = (cluster / "meta.properties").read_text()
    cuts = [max((end for end in ends if end <= size - i * LAG_BYTES), default=0) for i in range(nodes)]
    for i, cut in enumerate(cuts):  # one top folder: one cluster (the benchmarks' identity is ``{top}:{cluster.id}``)
        d = dest / "cluster" / f"node-{i}"
        (d / "__cluster_metadata-0").mkdir(parents=True)
        (d / "meta.properties").write_text(meta.replace("node.id=3000", f"node.id={3000 + i}"))
        (d / "__cluster_metadata-0" / f"{0:020d}.log").write_bytes(log[:cut])
    return cuts[0]


def ingest_once(spark: Any, config: Any, inputs: Path) -> dict[str, Any]:
    from kraftlog.spark.ingest import ingest

    workers = WorkerMemory(jvm_pid(spark))
    workers.start()
    t = time.perf_counter()
    result = ingest(spark, [str(inputs)], config)
    seconds = time.perf_counter() - t
    workers.stop.set()
    workers.join()
    return {"seconds": round(seconds, 1), "records": result.records_decoded,
            "peak_worker_mb": workers.peak_kb // 1024}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=5_000_000, help="non-NoOp records of the generated cluster")
    ap.add_argument("--partitions", type=int, default=150_000)
    ap.add_argument("--sizes", default="60,240", help="segment sizes in MB (at most the cluster's log)")
    ap.add_argument("--nodes", default="1,3", help="data directories holding the segment")
    ap.add_argument("--cores", type=int, default=2)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)

    from kraftlog.spark.session import build_session

    where, _ = generated(ROOT / "out", args.records, args.partitions)
    log = joined_log(where / "node-3000")
    base = local_config(args.cores)
    spark = build_session(base)
    results: dict[str, Any] = {"cores": args.cores, "log_mb": round(len(log) / 1e6, 1)}
    with scratch_dir("kraftlog-segment-") as work:
        for mb in [int(s) for s in args.sizes.split(",") if s]:
            for nodes in [int(s) for s in args.nodes.split(",") if s]:
                name = f"{mb}MB x{nodes}"
                dest = work / name.replace(" ", "")
                size = data_dirs(log, mb * 1_000_000, nodes, where / "node-3000", dest)
                r = {"segment_mb": round(size / 1e6, 1), "nodes": nodes,
                     **ingest_once(spark, with_warehouse(base, work, name), dest)}
                r["mb_per_second"] = round(size / 1e6 / r["seconds"], 1)  # of the log (its copies: ``nodes`` times)
                results[name] = r
                print(name, r, flush=True)
                shutil.rmtree(dest)
        spark.stop()
    print(f"{'input':<12} {'segment MB':>10} {'records':>10} {'seconds':>8} {'MB/s':>6} {'worker MB':>9}")
    for name, r in results.items():
        if isinstance(r, dict):
            print(f"{name:<12} {r['segment_mb']:>10} {r['records']:>10,} {r['seconds']:>8} {r['mb_per_second']:>6} "
                  f"{r['peak_worker_mb']:>9}")
    save_results(args.json, results)


if __name__ == "__main__":
    main()
