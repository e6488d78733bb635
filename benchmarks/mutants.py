"""Mutants of real metadata log files, and what kraftlog's readers make of them.

Each mutant is a real segment or snapshot changed the way storage, copies or a hostile writer change
files: a flipped bit anywhere, a flipped bit in the fields the CRC does not cover (base offset,
partition leader epoch), a cut at any byte, a batch removed, repeated or moved, garbage inserted, a
batch whose records count or length was changed with its CRC recomputed, a gzip bomb appended.

``evaluate`` reads a mutant with both readers (the reference walker of ``kraftlog dump`` and the
column-wise reader of the ingest) and reports: an exception (a traceback would reach the user), the
problems found, whether the trusted output differs from the original's, whether the records before the
first damaged byte are all still there, the time and the peak traced memory.

    python benchmarks/mutants.py --per-file 40 --json out/bench-mutants.json
"""

from __future__ import annotations

import argparse
import json
import random
import struct
import time
import tracemalloc
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from crc32c import crc32c

from kraftlog.wire.batches import HEADER_SIZE, Batch, iter_batches
from kraftlog.wire.columns import read_columns
from kraftlog.wire.files import read_log

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"

Records = list[tuple[int, int, bytes | None, bytes | None]]  # offset, epoch, key, value


@dataclass(frozen=True)
class Mutant:
    source: Path
    kind: str
    damage_at: int  # the first byte that differs from the original
    data: bytes

    @property
    def name(self) -> str:
        return f"{self.source.name}:{self.kind}@{self.damage_at}"


@dataclass
class Outcome:
    name: str
    kind: str
    traceback: str | None
    changed: bool  # a reader's trusted records differ from the original's
    reported: bool  # each reader whose records differ reported a problem
    prefix_kept: bool  # every record of a batch that ends before the damage is still read
    seconds: float
    peak_bytes: int

    @property
    def silent(self) -> bool:
        """The output changed and no problem says so."""
        return self.traceback is None and self.changed and not self.reported


def real_files(shared: Path = SHARED) -> list[Path]:
    """The segments and snapshots of scenario A's node 2 and the local 3.9 run (files we wrote)."""
    roots = [shared / "scenarios" / "A" / "node-2" / "__cluster_metadata-0",
             shared / "corpus" / "local" / "kafka-3.9.0-single-node" / "kraft-combined-logs" / "__cluster_metadata-0"]
    return sorted(p for r in roots if r.exists() for p in r.iterdir()
                  if p.suffix in (".log", ".checkpoint") and p.stat().st_size > 0)


def _batches(data: bytes) -> list[Batch]:
    return [b for b in iter_batches(data, parse_records=False) if isinstance(b, Batch)]


def _recrc(data: bytearray, pos: int) -> None:
    end = pos + 12 + struct.unpack_from(">i", data, pos + 8)[0]
    struct.pack_into(">I", data, pos + 17, crc32c(bytes(data[pos + 21:end])))


def gzip_bomb(base_offset: int, epoch: int, records: int = 30_000_000) -> bytes:
    """One gzip batch declaring ``records`` minimal records (a few hundred KB on disk)."""
    record = bytes([12, 0, 0, 0, 1, 4]) + b"\x01\x14" + b"\x00"  # length 6: attrs, deltas, no key, 2-byte value
    z = zlib.compressobj(9, zlib.DEFLATED, 31)
    chunk = record * 65536
    payload = b"".join(z.compress(chunk) for _ in range(records >> 16)) + z.flush()
    out = bytearray(struct.pack(">qiibIhiqqqhii", base_offset, HEADER_SIZE - 12 + len(payload), epoch, 2, 0, 1,
                                records - 1, 0, 0, -1, -1, -1, records) + payload)
    _recrc(out, 0)
    return bytes(out)


def mutants(path: Path, per_file: int, seed: int = 0, bomb: bool = False) -> Iterator[Mutant]:
    """``per_file`` mutants of one real file (and a gzip bomb appended to it if ``bomb``)."""
    data = path.read_bytes()
    batches = _batches(data)
    rng = random.Random(f"{path.name}:{seed}")
    boundaries = {b.position for b in batches} | {len(data)}
    kinds = ["bitflip", "base_offset", "epoch", "cut", "drop_batch", "repeat_batch", "swap_batches", "garbage",
             "records_count", "batch_length"]
    for i in range(per_file):
        kind = kinds[i % len(kinds)]
        out = bytearray(data)
        b = batches[rng.randrange(len(batches))]
        at = b.position
        if kind == "bitflip":
            at = rng.randrange(len(data))
            out[at] ^= 1 << rng.randrange(8)
        elif kind == "base_offset":
            at = b.position + rng.randrange(8)
            out[at] ^= 1 << rng.randrange(8)
        elif kind == "epoch":
            at = b.position + 12 + rng.randrange(4)
            out[at] ^= 1 << rng.randrange(8)
        elif kind == "cut":
            at = rng.choice([p for p in range(1, len(data)) if p not in boundaries] or [1])
            del out[at:]
        elif kind == "drop_batch":
            if len(batches) < 3:
                continue
            b = batches[rng.randrange(len(batches) - 1)]  # not the last: that is a shorter valid file
            at = b.position
            del out[b.position:b.position + b.size]
        elif kind == "repeat_batch":
            out[b.position:b.position] = data[b.position:b.position + b.size]
            at = b.position + b.size
        elif kind == "swap_batches":
            if len(batches) < 2:
                continue
            j = rng.randrange(len(batches) - 1)
            x, y = batches[j], batches[j + 1]
            out[x.position:y.position + y.size] = data[y.position:y.position + y.size] + data[x.position:y.position]
            at = x.position
        elif kind == "garbage":
            at = rng.randrange(len(data))
            out[at:at] = rng.randbytes(rng.randrange(1, 64))
        elif kind == "records_count":  # a writer's bug: the CRC is right
            struct.pack_into(">i", out, b.position + 57, rng.choice([0x7FFFFFFF, b.records_count * 1000 + 7, -3]))
            _recrc(out, b.position)
            at = b.position + 17
        elif kind == "batch_length":
            struct.pack_into(">i", out, b.position + 8, rng.choice([0, 40, 1 << 30, b.batch_length + 5]))
            at = b.position + 8
        if bytes(out) != data:
            yield Mutant(path, kind, at, bytes(out))
    if bomb:
        last = batches[-1]
        yield Mutant(path, "gzip_bomb", len(data), data + gzip_bomb(last.last_offset + 1, last.partition_leader_epoch))


def _trusted_dump(data: bytes, source: str) -> tuple[Records, Records, int]:
    """(trusted records, all records, problems) as ``kraftlog dump`` and the local commands read them."""
    read = read_log(data, source)
    every = [(r.offset, b.partition_leader_epoch, r.key, r.value) for b, r in read.records()]
    trusted = [(r.offset, b.partition_leader_epoch, r.key, r.value) for b, r in read.records()
               if b.crc_valid and not b.errors]
    return trusted, every, len(read.errors)


def _trusted_columns(data: bytes, source: str) -> tuple[Records, int]:
    """(trusted records, problems) as the ingest reads them."""
    c = read_columns(data, source)
    ok = [c.crc_valid[i] and not c.batch_errors[i] for i in range(len(c.positions))]
    epochs = c.headers["partition_leader_epoch"].tolist()
    out = [(int(o), int(epochs[b]), c.distinct[k][1], c.distinct[k][2])
           for o, b, k in zip(c.offset.tolist(), c.batch.tolist(), c.code.tolist(), strict=True) if ok[b]]
    return out, len(c.errors)


def evaluate(m: Mutant, original: Records, before: Records) -> Outcome:
    """Read mutant ``m`` with both readers; ``original``: the clean file's trusted records, ``before``: those of
    the batches that end before the damage."""
    source = str(m.source)  # the real name: the readers check the batches against it
    t0 = time.perf_counter()
    tracemalloc.start()
    try:
        trusted, every, problems = _trusted_dump(m.data, source)
        columns, column_problems = _trusted_columns(m.data, source)
        error = None
    except Exception as e:
        error = f"{type(e).__name__}: {e}"
        trusted = every = columns = []
        problems = column_problems = 0
    finally:
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    seconds = time.perf_counter() - t0
    differs = [(trusted != original, problems), (columns != original, column_problems)]
    kept = set(every)
    return Outcome(m.name, m.kind, error, any(d for d, _ in differs), all(n > 0 for d, n in differs if d),
                   all(r in kept for r in before), seconds, peak)


def run(files: list[Path], per_file: int, seed: int = 0, bombs: int = 3) -> list[Outcome]:
    """Every mutant of ``files``, evaluated (a gzip bomb for the first ``bombs`` files)."""
    out = []
    for i, path in enumerate(files):
        data = path.read_bytes()
        original, _, _ = _trusted_dump(data, str(path))
        ends = [(b.position + b.size, b) for b in _batches(data)]
        offsets_by_end = sorted((end, [r for r in original if b.base_offset <= r[0] <= b.last_offset])
                                for end, b in ends)
        for m in mutants(path, per_file, seed, bomb=i < bombs):
            before = [r for end, rs in offsets_by_end if end <= m.damage_at for r in rs]
            out.append(evaluate(m, original, before))
    return out


def summary(outcomes: list[Outcome]) -> dict[str, object]:
    """Counts over ``outcomes``: tracebacks, silent changes, kept prefixes, the slowest and largest file."""
    return {
        "mutants": len(outcomes),
        "tracebacks": [o.name + ": " + str(o.traceback) for o in outcomes if o.traceback],
        "changed": sum(o.changed for o in outcomes),
        "changed_and_reported": sum(o.changed and o.reported for o in outcomes),
        "silent": [o.name for o in outcomes if o.silent],
        "prefix_lost": [o.name for o in outcomes if not o.prefix_kept],
        "max_seconds": round(max((o.seconds for o in outcomes), default=0.0), 3),
        "max_peak_mb": round(max((o.peak_bytes for o in outcomes), default=0) / 2**20, 1),
        "by_kind": {k: sum(o.kind == k for o in outcomes) for k in sorted({o.kind for o in outcomes})},
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--per-file", type=int, default=40)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", help="write the summary here")
    args = ap.parse_args()
    files = real_files()
    if not files:
        raise SystemExit(f"no real files under {SHARED}")
    t0 = time.time()
    result = {"files": len(files), **summary(run(files, args.per_file, args.seed)),
              "seconds": round(time.time() - t0, 1)}
    print(json.dumps(result, indent=1))
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
