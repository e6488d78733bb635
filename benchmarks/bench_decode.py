"""Decoder throughput on one core, beside the floor of a walk that only frames the same bytes.

    python benchmarks/bench_decode.py [PATH ...]      (default: ../shared/corpus and ../shared/scenarios)

Three passes over the same in-memory bytes, best of ``--repeat``:

* ``header walk``: batch headers and CRC-32C only;
* ``framing walk`` (the floor): batch headers, CRC-32C, and every record's framing (lengths,
  offsets, timestamps, key/value slices), i.e. everything but the values;
* ``full decode``: the framing walk plus every value decoded by the schema-driven readers.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from common import best_of, save_results

from kraftlog.wire.batches import iter_batches
from kraftlog.wire.discover import log_files
from kraftlog.wire.files import paused_gc, read_log
from kraftlog.wire.messages import default_codec

ROOT = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> dict[str, object]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("paths", nargs="*")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", type=Path, help="also write the results here")
    args = ap.parse_args(argv)
    paths = args.paths or [p for p in (ROOT.parent / "shared" / "corpus", ROOT.parent / "shared" / "scenarios")
                           if p.exists()]
    if not paths:
        print("no input: pass paths, or provide ../shared", file=sys.stderr)
        raise SystemExit(2)
    datas = [(p.read_bytes(), str(p)) for p, _ in log_files(paths)]
    size = sum(len(d) for d, _ in datas)
    default_codec()  # compile the readers outside the timing

    def header_walk() -> int:
        return sum(1 for d, s in datas for _ in iter_batches(d, s, parse_records=False))

    def framing_walk() -> int:
        n = 0
        with paused_gc():
            for d, s in datas:
                for b in iter_batches(d, s):
                    n += len(b.records)  # type: ignore[union-attr]
        return n

    def full_decode() -> int:
        return sum(read_log(d, s).record_count for d, s in datas)

    results: dict[str, object] = {"files": len(datas), "bytes": size}
    rows = []
    for name, fn in (("header walk", header_walk), ("framing walk (floor)", framing_walk),
                     ("full decode", full_decode)):
        secs, count = best_of(fn, args.repeat)
        rows.append((name, secs, count))
        results[name] = {"seconds": round(secs, 4), "MB/s": round(size / secs / 1e6, 2)}
    records = rows[2][2]
    results["records"] = records
    floor = rows[1][1]
    print(f"input: {len(datas)} files, {size / 1e6:.1f} MB, {records} records (one core, best of {args.repeat})")
    print(f"{'pass':<22} {'seconds':>8} {'MB/s':>8} {'records/s':>11} {'vs floor':>9}")
    for name, secs, _ in rows:
        print(f"{name:<22} {secs:>8.3f} {size / secs / 1e6:>8.1f} {records / secs:>11,.0f} {secs / floor:>8.2f}x")
        results[name]["records/s"] = round(records / secs)  # type: ignore[index]
    ratio = rows[2][1] / floor
    results["decode_vs_floor"] = round(ratio, 3)
    print(f"full decode / framing walk = {ratio:.2f}x (target: within 2x)")
    save_results(args.json, results)
    return results


if __name__ == "__main__":
    main()
