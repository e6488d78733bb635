"""Build Arrow rows for the tables from the wire layer's output (no Spark).

An ingest run reads a changed file up to three times, each time doing only what it must:

* ``summarize`` (every changed file): a walk of the batch headers: offset range, epochs, SHA-256,
  and whether the part an earlier run ingested is unchanged. The planner (``kraftlog.planning``) needs
  only these to tell files that can be landed directly from files whose copies compete.
* ``FileIndexer`` (competing files only): narrow rows per record (key, epoch, node, hash, raw bytes),
  enough to choose the one canonical copy of each record.
* ``FileLander`` (every changed file): decodes each value once and returns the rows of ``records``,
  of every typed table, of ``batches`` and of the ``files`` ledger, keeping the records the plan says.
"""

from __future__ import annotations

import hashlib
import resource
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa

from kraftlog.schema.registry import load_schemas
from kraftlog.tables.definitions import TS, TableDef, catalog
from kraftlog.wire.batches import CONTROL_MASK, Batch, Record, iter_batches
from kraftlog.wire.codegen import UNKNOWN_TAGS
from kraftlog.wire.compression import CODEC_NAMES
from kraftlog.wire.errors import KraftDecodeError
from kraftlog.wire.files import BOOTSTRAP, SEGMENT, FileInfo, batch_decoder, classify, paused_gc
from kraftlog.wire.kafka_json import dumps, payload
from kraftlog.wire.messages import Decoded, MetadataCodec, default_codec
from kraftlog.wire.redact import Redactor, default_redactor

MAX_ERRORS_KEPT = 20
CORRUPT_BATCH = "corrupt_batch"  # status of records read from a batch whose CRC or framing failed
ALL = (-(1 << 63), (1 << 63) - 1)


@dataclass(frozen=True, slots=True)
class FileIdentity:
    """Who a file belongs to: cluster, node, data directory (from meta.properties or configuration)."""

    cluster_id: str
    node_id: int | None
    data_dir: str


@dataclass(frozen=True, slots=True)
class FileRef:
    """A file to read: where, what bytes, when modified (ms), whose, and its id within the run."""

    path: str
    content: bytes
    mtime_ms: int
    identity: FileIdentity
    file_id: int = 0


def snapshot_label(info: FileInfo, name: str) -> str | None:
    if info.kind == SEGMENT:
        return None
    if name.endswith("bootstrap.checkpoint"):
        return "bootstrap.checkpoint"
    return info.snapshot_id


def file_layout(path: str) -> tuple[FileInfo, str | None, str, int | None]:
    """(file info, snapshot id, source, the log offset snapshot records hold state as of)."""
    info = classify(path) or FileInfo(SEGMENT)
    source = "log" if info.kind == SEGMENT else ("bootstrap" if info.kind == BOOTSTRAP else "snapshot")
    snap_offset = None if info.kind == SEGMENT else (info.end_offset or 0) - 1
    return info, snapshot_label(info, path), source, snap_offset


def value_hash(key: bytes | None, value: bytes | None) -> int:
    """blake2b-64 of a record's key and value (signed int64): equal copies hash equal."""
    h = hashlib.blake2b(digest_size=8)
    if key is not None:
        h.update(key)
    h.update(b"\x00" if value is None else b"\x01" + value)
    return int.from_bytes(h.digest(), "big", signed=True)


class _Hasher:
    """``value_hash`` with a cache for small key-less values (NoOps and other empty bodies repeat)."""

    def __init__(self) -> None:
        self.small: dict[bytes, int] = {}

    def __call__(self, key: bytes | None, value: bytes | None) -> int:
        if key is None and value is not None and len(value) <= 8:
            h = self.small.get(value)
            if h is None:
                h = self.small[value] = value_hash(key, value)
            return h
        return value_hash(key, value)


def _arrow(cols: dict[str, list[Any]], schema: pa.Schema) -> pa.Table:
    return pa.table({f.name: pa.array(cols[f.name], f.type) for f in schema}, schema=schema)


# -- pass 0: headers ---------------------------------------------------------------------------------

SUMMARY = pa.schema([
    ("path", pa.string()), ("size", pa.int64()), ("sha256", pa.string()), ("prefix_sha256", pa.string()),
    ("first_offset", pa.int64()), ("last_offset", pa.int64()), ("batches", pa.int32()),
    ("min_epoch", pa.int32()), ("max_epoch", pa.int32()), ("problems", pa.int32()),
])


def summarize(path: str, content: bytes, prefix_size: int | None) -> dict[str, Any]:
    """Batch-header summary of a file; ``prefix_sha256`` covers its first ``prefix_size`` bytes."""
    first = last = None
    lo = hi = None
    n = problems = 0
    for b in iter_batches(content, path, verify_crc=False, parse_records=False):
        if isinstance(b, KraftDecodeError):
            problems += 1
            continue
        n += 1
        first = b.base_offset if first is None else min(first, b.base_offset)
        last = b.last_offset if last is None else max(last, b.last_offset)
        e = b.partition_leader_epoch
        lo = e if lo is None else min(lo, e)
        hi = e if hi is None else max(hi, e)
    prefix = None
    if prefix_size is not None and prefix_size <= len(content):
        prefix = hashlib.sha256(memoryview(content)[:prefix_size]).hexdigest()
    return {"path": path, "size": len(content), "sha256": hashlib.sha256(content).hexdigest(),
            "prefix_sha256": prefix, "first_offset": first, "last_offset": last, "batches": n, "min_epoch": lo,
            "max_epoch": hi, "problems": problems}


# -- pass 1: narrow index of competing files ----------------------------------------------------------

INDEX = pa.schema([
    ("cluster_id", pa.string()), ("node_id", pa.int32()), ("file_id", pa.int32()), ("snapshot_id", pa.string()),
    ("log_offset", pa.int64()), ("snapshot_seq", pa.int64()), ("batch_epoch", pa.int32()), ("timestamp", TS),
    ("is_control", pa.bool_()), ("api_key", pa.int16()), ("value_hash", pa.int64()), ("crc_valid", pa.bool_()),
    ("key", pa.binary()), ("value", pa.binary()),
])


class FileIndexer:
    """Narrow rows per record of whole files: framing only, no value decoding."""

    def __init__(self) -> None:
        self.hash = _Hasher()

    def index(self, files: Iterable[FileRef], rows_per_table: int = 1 << 18) -> Iterator[pa.Table]:
        """INDEX tables for ``files``, each of about ``rows_per_table`` rows (bounded memory)."""
        cols: dict[str, list[Any]] = {n: [] for n in INDEX.names}
        for f in files:
            with paused_gc():
                self._file(cols, f)
                full = len(cols["cluster_id"]) >= rows_per_table
                table = _arrow(cols, INDEX) if full else None
            if table is not None:
                yield table
                cols = {n: [] for n in INDEX.names}
        if cols["cluster_id"]:
            with paused_gc():
                table = _arrow(cols, INDEX)
            yield table

    def _file(self, c: dict[str, list[Any]], f: FileRef) -> None:
        _, snap, _, snap_offset = file_layout(f.path)
        pairs = [(b, r) for b in iter_batches(f.content, f.path) if isinstance(b, Batch) for r in b.records]
        n = len(pairs)
        c["cluster_id"] += [f.identity.cluster_id] * n
        c["node_id"] += [f.identity.node_id] * n
        c["file_id"] += [f.file_id] * n
        c["snapshot_id"] += [snap] * n
        _offsets(c, pairs, snap_offset)
        c["batch_epoch"] += [b.partition_leader_epoch for b, _ in pairs]
        c["timestamp"] += [r.timestamp * 1000 for _, r in pairs]
        controls = [bool(b.attributes & CONTROL_MASK) for b, _ in pairs]
        c["is_control"] += controls
        c["api_key"] += [_peek_api_key(r.key, r.value, ctl) for (_, r), ctl in zip(pairs, controls, strict=True)]
        h = self.hash
        c["value_hash"] += [h(r.key, r.value) for _, r in pairs]
        c["crc_valid"] += [b.crc_valid and not b.errors for b, _ in pairs]
        c["key"] += [r.key for _, r in pairs]
        c["value"] += [r.value for _, r in pairs]


def _offsets(c: dict[str, list[Any]], pairs: list[tuple[Batch, Record]], snap_offset: int | None) -> None:
    n = len(pairs)
    if snap_offset is None:
        c["log_offset"] += [r.offset for _, r in pairs]
        c["snapshot_seq"] += [None] * n
    else:
        c["log_offset"] += [snap_offset] * n
        c["snapshot_seq"] += [r.offset for _, r in pairs]


def _peek_api_key(key: bytes | None, value: bytes | None, control: bool) -> int | None:
    """apiKey from the frame (or the control type from the key) without decoding the body."""
    if control:
        return int.from_bytes(key[2:4], "big", signed=True) if key and len(key) >= 4 else None
    if value and len(value) >= 2 and value[0] == 1 and value[1] < 128:
        return value[1]
    return None


# -- pass 2: land ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class KeepSpec:
    """What to land from one file.

    ``ranges``: inclusive ranges of record offsets in the file (log offsets, or positions in a
    snapshot) whose records land; ``min_batch_position``: batch rows before it were landed by an
    earlier run (the file grew); ``landed_batches``: (position, crc) pairs already landed (a file
    rewritten in place); ``sha256``: the content the plan was made for; a file that changed since is
    left for the next run.
    """

    ranges: tuple[tuple[int, int], ...] = (ALL,)
    min_batch_position: int = 0
    landed_batches: frozenset[tuple[int, int]] = field(default_factory=frozenset)
    sha256: str | None = None

    def keeps(self, offset: int) -> bool:
        return any(lo <= offset <= hi for lo, hi in self.ranges)


class FileLander:
    """Rows for ``records``, the typed tables, ``batches`` and ``files`` from whole files."""

    def __init__(self, run_id: str, codec: MetadataCodec | None = None, redactor: Redactor | None = None):
        self.run_id = run_id
        self.codec = codec or default_codec()
        self.redactor = redactor or default_redactor()
        self.decode_batch = batch_decoder(self.codec)
        self.cat = catalog()
        self.sensitive_keys = {k for k, s in load_schemas().metadata.items() if self.redactor.is_sensitive_type(s)}
        self.mv_names = load_schemas().enums["metadataVersion"]
        self.hash = _Hasher()

    def land(self, files: Iterable[tuple[FileRef, KeepSpec]], rows_per_chunk: int = 1 << 17
             ) -> Iterator[dict[str, pa.Table]]:
        """Rows of every table for ``files``, in chunks of about ``rows_per_chunk`` records (bounded memory).

        Tables without rows are left out of a chunk.
        """
        state = self._empty()
        for ref, keep in files:
            if keep.sha256 is not None and hashlib.sha256(ref.content).hexdigest() != keep.sha256:
                continue  # changed since the plan: the next run takes it
            with paused_gc():
                self._file(ref, keep, *state)
            if len(state[0]["run_id"]) + len(state[1]["run_id"]) >= rows_per_chunk:
                yield self._tables(*state)
                state = self._empty()
        if any(cols["run_id"] for cols in state[:3]):
            yield self._tables(*state)

    def _empty(self) -> tuple[dict[str, list[Any]], dict[str, list[Any]], dict[str, list[Any]],
                              dict[str, list[tuple[int, Decoded]]]]:
        core = self.cat.core
        return ({f.name: [] for f in core["records"].schema}, {f.name: [] for f in core["batches"].schema},
                {f.name: [] for f in core["files"].schema}, defaultdict(list))

    def _tables(self, records: dict[str, list[Any]], batches: dict[str, list[Any]], ledger: dict[str, list[Any]],
                typed: dict[str, list[tuple[int, Decoded]]]) -> dict[str, pa.Table]:
        with paused_gc():
            out = {name: _arrow(cols, self.cat.core[name].schema)
                   for name, cols in (("records", records), ("batches", batches), ("files", ledger))
                   if cols["run_id"]}
            for rtype, rows in typed.items():
                table = self.cat.by_record_type[rtype]
                out[table.name] = self._typed(table, out["records"], rows)
            return out

    def _file(self, ref: FileRef, keep: KeepSpec, rc: dict[str, list[Any]], bc: dict[str, list[Any]],
              fc: dict[str, list[Any]], typed: dict[str, list[tuple[int, Decoded]]]) -> None:
        info, snap, source, snap_offset = file_layout(ref.path)
        ident = ref.identity
        all_batches: list[Batch] = []
        errors: list[KraftDecodeError] = []
        for item in iter_batches(ref.content, ref.path, on_batch=self.decode_batch):
            if isinstance(item, Batch):
                all_batches.append(item)
                errors.extend(item.errors)
            else:
                errors.append(item)
        pairs = [(b, r) for b in all_batches for r in b.records]
        kept = pairs if keep.ranges == (ALL,) else [(b, r) for b, r in pairs if keep.keeps(r.offset)]
        self._records(rc, typed, kept, ref, snap, source, snap_offset)
        new_batches = [b for b in all_batches if b.position >= keep.min_batch_position
                       and (b.position, b.crc) not in keep.landed_batches]
        _batch_rows(bc, new_batches, ident, ref.path, info.kind, snap, self.run_id)
        offsets = [r.offset for _, r in pairs]
        row = {
            "path": ref.path, "cluster_id": ident.cluster_id, "node_id": ident.node_id, "data_dir": ident.data_dir,
            "file_kind": info.kind, "snapshot_id": snap, "deleted_snapshot": info.deleted, "size": len(ref.content),
            "modification_time": ref.mtime_ms * 1000, "content_sha256": hashlib.sha256(ref.content).hexdigest(),
            "batches": len(all_batches), "control_batches": sum(1 for b in all_batches if b.is_control),
            "records": len(pairs), "crc_failures": sum(1 for b in all_batches if not b.crc_valid),
            "first_offset": min(offsets) if offsets else None, "last_offset": max(offsets) if offsets else None,
            "metadata_version": self._metadata_version(pairs), "status": "errors" if errors else "ok",
            "error_count": len(errors), "errors": [e.describe() for e in errors[:MAX_ERRORS_KEPT]],
            "ingested_at": datetime.now(UTC), "run_id": self.run_id,
        }
        for k, v in row.items():
            fc[k].append(v)

    def _metadata_version(self, pairs: list[tuple[Batch, Record]]) -> str | None:
        level = None
        for b, r in pairs:
            d = r.decoded
            if d is not None and d.api_key == 12 and not b.attributes & CONTROL_MASK and d.data \
                    and d.data.get("name") == "metadata.version":
                level = d.data["feature_level"]
        return None if level is None else self.mv_names.get(str(level), f"level {level}")

    def _records(self, c: dict[str, list[Any]], typed: dict[str, list[tuple[int, Decoded]]],
                 pairs: list[tuple[Batch, Record]],
                 ref: FileRef, snap: str | None, source: str, snap_offset: int | None) -> None:
        n = len(pairs)
        if not n:
            return
        ident = ref.identity
        c["cluster_id"] += [ident.cluster_id] * n
        c["source"] += [source] * n
        c["snapshot_id"] += [snap] * n
        _offsets(c, pairs, snap_offset)
        decoded: list[Decoded] = [r.decoded for _, r in pairs]  # type: ignore[misc]
        c["batch_epoch"] += [b.partition_leader_epoch for b, _ in pairs]
        c["timestamp"] += [r.timestamp * 1000 for _, r in pairs]
        c["node_id"] += [ident.node_id] * n
        c["record_version"] += [d.version for d in decoded]
        c["batch_base_offset"] += [b.base_offset for b, _ in pairs]
        c["file"] += [ref.path] * n
        c["file_position"] += [r.position if r.position >= 0 else None for _, r in pairs]
        controls = [bool(b.attributes & CONTROL_MASK) for b, _ in pairs]
        c["is_control"] += controls
        c["api_key"] += [d.api_key for d in decoded]
        c["record_type"] += [d.type for d in decoded]
        # records of a batch that failed its CRC or framing are kept, but never trusted as ok
        statuses = [d.status if not b.errors else CORRUPT_BATCH for (b, _), d in zip(pairs, decoded, strict=True)]
        c["status"] += statuses
        if all(st == "ok" for st in statuses) and not any(b.errors for b, _ in pairs):
            c["error"] += [None] * n
            c["raw_key"] += [None] * n
            c["raw_value"] += [None] * n
        else:
            c["error"] += [_record_error(b, d) for (b, _), d in zip(pairs, decoded, strict=True)]
            raw = [st != "ok" and (ctl or d.api_key not in self.sensitive_keys)
                   for ctl, d, st in zip(controls, decoded, statuses, strict=True)]
            c["raw_key"] += [r.key if k else None for (_, r), k in zip(pairs, raw, strict=True)]
            c["raw_value"] += [r.value if k else None for (_, r), k in zip(pairs, raw, strict=True)]
        redacted = [self.redactor(d) if d.data else d for d in decoded]
        c["data_json"] += ["{}" if d.data == {} else (dumps(payload(d)) if d.data is not None else None)
                           for d in redacted]
        c["redacted_fields"] += [list(d.redacted) or None for d in redacted]
        h = self.hash
        c["value_hash"] += [h(r.key, r.value) for _, r in pairs]
        c["run_id"] += [self.run_id] * n
        by_type = self.cat.by_record_type
        base = len(c["cluster_id"]) - n
        for i, (d, st) in enumerate(zip(redacted, statuses, strict=True)):
            if st == "ok" and d.type in by_type:
                typed[d.type].append((base + i, d))

    def _typed(self, table: TableDef, records: pa.Table, rows: list[tuple[int, Decoded]]) -> pa.Table:
        """A typed table's rows: provenance taken from the record rows, fields from the decoded values."""
        take = records.select([*TYPED_PROVENANCE, "run_id"]).take(pa.array([i for i, _ in rows], pa.int64()))
        decoded = [d for _, d in rows]
        arrays = []
        for f in table.schema:
            if f.name in take.column_names:
                arrays.append(take.column(f.name))
            elif f.name == "unknown_tagged_fields":
                arrays.append(pa.array([(d.data or {}).get(UNKNOWN_TAGS) for d in decoded], f.type))
            elif f.name == "redacted_fields":
                arrays.append(pa.array([list(d.redacted) or None for d in decoded], f.type))
            else:
                arrays.append(pa.array([(d.data or {}).get(f.name) for d in decoded], f.type))
        return pa.Table.from_arrays(arrays, schema=table.schema)


TYPED_PROVENANCE = ("cluster_id", "source", "snapshot_id", "log_offset", "snapshot_seq", "batch_epoch",
                    "timestamp", "node_id", "record_version")


def _record_error(b: Batch, d: Decoded) -> str | None:
    if not b.errors:
        return d.error
    return "; ".join([e.reason for e in b.errors] + ([d.error] if d.error else []))


def _batch_rows(c: dict[str, list[Any]], bs: list[Batch], ident: FileIdentity, path: str, kind: str,
                snap: str | None, run_id: str) -> None:
    n = len(bs)
    attrs = [b.attributes for b in bs]
    values: dict[str, list[Any]] = {
        "cluster_id": [ident.cluster_id] * n, "node_id": [ident.node_id] * n, "file": [path] * n,
        "file_kind": [kind] * n, "snapshot_id": [snap] * n,
        "position": [b.position for b in bs], "base_offset": [b.base_offset for b in bs],
        "last_offset": [b.base_offset + b.last_offset_delta for b in bs],
        "batch_length": [b.batch_length for b in bs], "size": [b.batch_length + 12 for b in bs],
        "partition_leader_epoch": [b.partition_leader_epoch for b in bs], "magic": [b.magic for b in bs],
        "crc": [b.crc for b in bs], "crc_valid": [b.crc_valid for b in bs], "attributes": attrs,
        "compression": [CODEC_NAMES.get(a & 7, str(a & 7)) for a in attrs],
        "timestamp_type": ["LogAppendTime" if a & 0x08 else "CreateTime" for a in attrs],
        "is_transactional": [bool(a & 0x10) for a in attrs], "is_control": [bool(a & 0x20) for a in attrs],
        "has_delete_horizon": [bool(a & 0x40) for a in attrs],
        "last_offset_delta": [b.last_offset_delta for b in bs],
        "base_timestamp": [b.base_timestamp * 1000 for b in bs], "max_timestamp": [b.max_timestamp * 1000 for b in bs],
        "producer_id": [b.producer_id for b in bs], "producer_epoch": [b.producer_epoch for b in bs],
        "base_sequence": [b.base_sequence for b in bs], "records_count": [b.records_count for b in bs],
        "records_read": [len(b.records) for b in bs],
        "errors": [[e.describe() for e in b.errors] if b.errors else None for b in bs],
        "run_id": [run_id] * n,
    }
    for k, v in values.items():
        c[k] += v


def render(d: Decoded, redactor: Redactor) -> str | None:
    """The redacted Kafka JSON of a decoded value."""
    if d.data is None:
        return None
    return dumps(payload(redactor(d)))


def project(batch: pa.RecordBatch | pa.Table, table: TableDef, run_id: str) -> pa.Table:
    """Select ``table``'s columns from ``batch`` (adding ``run_id``)."""
    arrays = []
    for f in table.schema:
        if f.name == "run_id":
            arrays.append(pa.array([run_id] * batch.num_rows, pa.string()))
        else:
            arrays.append(batch.column(f.name).cast(f.type))
    return pa.Table.from_arrays(arrays, schema=table.schema)


def resident_kb() -> int:
    """Peak resident memory of this process (KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
