"""The per-record Python paths on one core, without Spark: the land pass and the replay of a big cluster's log, and
the cost of deleting topics from a big image.

    python benchmarks/bench_replay.py [--records 1250000] [--deletes 2000] [--json out/bench-replay.json]

* **land**: ``FileLander.land`` over the generated cluster's segments (``bigcluster.py``; what an ingest task does
  with a file's bytes: read column-wise, decode, Kafka JSON, typed rows as Arrow), records per second;
* **replay**: the cluster's log through ``Replayer`` and ``Versions`` (the local replay, what a reconstruct task does
  with its stream but for reading it: the history rows made but not converted to Arrow), records per second; then
  the same with the rows converted to Arrow as the task converts them;
* **topic deletions**: ``--deletes`` RemoveTopic records applied to an image of 10,000 topics and 150,000
  partitions (Kafka deletes a topic's partitions with it: the cost should follow the topic's partitions, not the
  image's).

Best of ``--repeat`` runs each.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from bigcluster import generated, uid
from common import ROOT, best_of, save_results


def _land(data_dir: Path) -> int:
    from kraftlog.tables.rows import FileIdentity, FileLander, FileRef, KeepSpec

    ident = FileIdentity("bench", 3000, str(data_dir))
    files = sorted((data_dir / "__cluster_metadata-0").glob("*.log"))
    refs = [(FileRef(str(p), p.read_bytes(), 0, ident, i), KeepSpec()) for i, p in enumerate(files)]
    return sum(chunk["records"].num_rows for chunk in FileLander("bench").land(refs) if "records" in chunk)


def _replay(cluster: Any, arrow: bool = False) -> int:
    """The cluster's replay into history rows; ``arrow``: the rows converted to Arrow as a reconstruct task converts
    them (``kraftlog.spark.replay``'s sink, in batches of its size), not only counted."""
    from kraftlog.spark.replay import BATCH_ROWS, _Sink
    from kraftlog.state.history import Versions
    from kraftlog.state.local import replay

    rows = [0]
    sink = _Sink()

    def count(_kind: str, _row: Any) -> None:
        rows[0] += 1

    def convert(kind: str, row: Any) -> None:
        rows[0] += 1
        sink.version(kind, row)
        if sink.count >= BATCH_ROWS:  # (as the task checks it: no generator per row)
            for _ in sink.drain():
                pass
    history = Versions(cluster.cluster_id, convert if arrow else count)
    replay(cluster, on_change=history.add)
    history.finish()
    for _ in sink.drain():
        pass
    return rows[0]


def _topic_image(topics: int, partitions: int) -> tuple[Any, list[Any]]:
    """A replayer holding ``topics`` topics of ``partitions`` partitions in all, and a RemoveTopic event for each."""
    from kraftlog.state.replay import Event, Replayer
    from kraftlog.wire.messages import Decoded

    def event(offset: int, rtype: str, **data: Any) -> Event:
        return Event(offset, offset, 1, Decoded(None, rtype, 0, data))
    r, offset = Replayer(), 0
    for t in range(topics):
        r.apply(event(offset, "TOPIC_RECORD", name=f"topic-{t}", topic_id=uid(t)))
        offset += 1
        for p in range(partitions // topics):
            r.apply(event(offset, "PARTITION_RECORD", partition_id=p, topic_id=uid(t), replicas=[1, 2, 3],
                          isr=[1, 2, 3], removing_replicas=[], adding_replicas=[], leader=1, leader_epoch=0,
                          partition_epoch=0))
            offset += 1
    return r, [event(offset + t, "REMOVE_TOPIC_RECORD", topic_id=uid(t)) for t in range(topics)]


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=1_250_000, help="non-NoOp records of the generated cluster")
    ap.add_argument("--deletes", type=int, default=2000, help="topics deleted from the 150k-partition image")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)

    from kraftlog.state.local import load_clusters

    where, _ = generated(ROOT / "out", args.records)
    results: dict[str, Any] = {"records": args.records}
    seconds, landed = best_of(lambda: _land(where / "node-3000"), args.repeat)
    results.update(land_seconds=round(seconds, 2), land_records=landed, land_records_per_s=round(landed / seconds))
    print(f"land: {landed:,} records in {seconds:.2f} s ({landed / seconds:,.0f} records/s, one core)", flush=True)
    (cluster,) = load_clusters([where])
    first = cluster.base().first
    replayed = sum(1 for o in cluster.offsets if o >= first)
    seconds, rows = best_of(lambda: _replay(cluster), args.repeat)
    results.update(replay_seconds=round(seconds, 2), replay_records=replayed, history_rows=rows,
                   replay_records_per_s=round(replayed / seconds))
    print(f"replay: {replayed:,} records in {seconds:.2f} s ({replayed / seconds:,.0f} records/s, one core), "
          f"{rows:,} history rows", flush=True)
    seconds, _ = best_of(lambda: _replay(cluster, arrow=True), args.repeat)
    results.update(replay_arrow_seconds=round(seconds, 2), replay_arrow_records_per_s=round(replayed / seconds))
    print(f"replay, rows to Arrow as a reconstruct task makes them: {seconds:.2f} s ({replayed / seconds:,.0f} "
          "records/s, one core)", flush=True)

    elapsed, left = [], 0
    for _ in range(max(1, args.repeat)):  # (the image built anew each time; only the deletions timed)
        r, removals = _topic_image(10_000, 150_000)
        t = time.perf_counter()
        for ev in removals[:args.deletes]:
            r.apply(ev)
        elapsed.append(time.perf_counter() - t)
        left = len(r.image.entities["partitions"])
    results.update(topic_deletes=args.deletes, topic_delete_seconds=round(min(elapsed), 3))
    print(f"topic deletions: {args.deletes:,} among 150,000 partitions in {min(elapsed):.3f} s ({left:,} partitions "
          "left)", flush=True)
    save_results(args.json, results)
    return results


if __name__ == "__main__":
    main()
