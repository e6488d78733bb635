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
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa

from kraftlog.schema.registry import load_schemas
from kraftlog.tables.definitions import TS, TableDef, catalog
from kraftlog.wire.batches import (
    COMPRESSION_MASK,
    CONTROL_MASK,
    DELETE_HORIZON_MASK,
    LOG_OVERHEAD,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_MASK,
    Batch,
    Record,
    iter_batches,
)
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
    left for the next run; ``strict``: the ranges are what the file may hold (a segment's span by its
    name), so a record outside them is a problem of the file, reported in the ledger.
    """

    ranges: tuple[tuple[int, int], ...] = (ALL,)
    min_batch_position: int = 0
    landed_batches: frozenset[tuple[int, int]] = field(default_factory=frozenset)
    sha256: str | None = None
    strict: bool = False

    def keeps(self, offset: int) -> bool:
        return any(lo <= offset <= hi for lo, hi in self.ranges)


class FileLander:
    """Rows for ``records``, the typed tables, ``batches`` and ``files`` from whole files, built column-wise.

    Per record only its position in the log is read in Python; what a record's columns take from its
    value (type, status, JSON, hash, typed fields) is derived once per distinct (key, value) of a chunk
    and spread with Arrow ``take``; per-file constants are repeated by Arrow; batch headers are read
    from the file bytes in one vectorized gather.
    """

    def __init__(self, run_id: str, codec: MetadataCodec | None = None, redactor: Redactor | None = None):
        self.run_id = run_id
        self.codec = codec or default_codec()
        self.redactor = redactor or default_redactor()
        self.decode_batch = batch_decoder(self.codec)
        self.cat = catalog()
        self.sensitive_keys = {k for k, s in load_schemas().metadata.items() if self.redactor.is_sensitive_type(s)}
        self.mv_names = load_schemas().enums["metadataVersion"]
        self.hash = _Hasher()
        self._chunk = _Chunk()

    def land(self, files: Iterable[tuple[FileRef, KeepSpec]], rows_per_chunk: int = 1 << 17
             ) -> Iterator[dict[str, pa.Table]]:
        """Rows of every table for ``files``, in chunks of about ``rows_per_chunk`` records (bounded memory).

        Tables without rows are left out of a chunk.
        """
        yield from self.feed(files, rows_per_chunk)
        yield from self.flush()

    def feed(self, files: Iterable[tuple[FileRef, KeepSpec]], rows_per_chunk: int = 1 << 17
             ) -> Iterator[dict[str, pa.Table]]:
        """Like ``land``, but rows short of a full chunk wait for the next ``feed`` or ``flush``."""
        for ref, keep in files:
            content_sha256 = hashlib.sha256(ref.content).hexdigest()
            if keep.sha256 is not None and content_sha256 != keep.sha256:
                continue  # changed since the plan: the next run takes it
            with paused_gc():
                self._file(ref, keep, content_sha256, self._chunk)
            if self._chunk.rows >= rows_per_chunk:
                yield from self.flush()

    def flush(self) -> Iterator[dict[str, pa.Table]]:
        """The rows waiting in the current chunk."""
        chunk, self._chunk = self._chunk, _Chunk()
        if chunk.files:
            yield self._tables(chunk)

    def _file(self, ref: FileRef, keep: KeepSpec, content_sha256: str, ch: _Chunk) -> None:
        info, snap, source, snap_offset = file_layout(ref.path)
        ident = ref.identity
        all_batches: list[Batch] = []
        errors: list[KraftDecodeError] = []
        for item in iter_batches(ref.content, ref.path, on_batch=self.decode_batch):
            if isinstance(item, Batch):
                all_batches.append(item)
                if item.errors:
                    errors.extend(item.errors)
            else:
                errors.append(item)
        pairs = [(b, r) for b in all_batches for r in b.records]
        kept = pairs if keep.ranges == (ALL,) else [(b, r) for b, r in pairs if keep.keeps(r.offset)]
        if keep.strict and len(kept) < len(pairs):
            errors.append(_outside(ref.path, keep, [(b, r) for b, r in pairs if not keep.keeps(r.offset)]))
        new_batches = all_batches if keep.min_batch_position <= 0 and not keep.landed_batches else [
            b for b in all_batches
            if b.position >= keep.min_batch_position and (b.position, b.crc) not in keep.landed_batches]
        ch.files.append(_FileColumns(ident.cluster_id, ident.node_id, ref.path, info.kind, snap, source))
        self._records(ch, kept, snap_offset)
        ch.batches(ref.content, new_batches)
        offsets = [r.offset for _, r in pairs]
        ch.ledger.append({
            "path": ref.path, "cluster_id": ident.cluster_id, "node_id": ident.node_id, "data_dir": ident.data_dir,
            "file_kind": info.kind, "snapshot_id": snap, "deleted_snapshot": info.deleted, "size": len(ref.content),
            "modification_time": ref.mtime_ms * 1000, "content_sha256": content_sha256,
            "batches": len(all_batches), "control_batches": sum(1 for b in all_batches if b.attributes & CONTROL_MASK),
            "records": len(pairs), "crc_failures": sum(1 for b in all_batches if not b.crc_valid),
            "first_offset": min(offsets) if offsets else None, "last_offset": max(offsets) if offsets else None,
            "metadata_version": self._metadata_version(pairs), "status": "errors" if errors else "ok",
            "error_count": len(errors), "errors": [e.describe() for e in errors[:MAX_ERRORS_KEPT]],
            "ingested_at": datetime.now(UTC), "run_id": self.run_id,
        })

    def _metadata_version(self, pairs: list[tuple[Batch, Record]]) -> str | None:
        level = None
        for b, r in pairs:
            d = r.decoded
            if d is not None and d.api_key == 12 and not b.attributes & CONTROL_MASK and d.data \
                    and d.data.get("name") == "metadata.version":
                level = d.data["feature_level"]
        return None if level is None else self.mv_names.get(str(level), f"level {level}")

    def _records(self, ch: _Chunk, pairs: list[tuple[Batch, Record]], snap_offset: int | None) -> None:
        """The per-record columns of ``pairs``; value-derived columns go through the chunk's memo."""
        n = len(pairs)
        ch.record_counts.append(n)
        if not n:
            return
        c = ch.rec
        _offsets(c, pairs, snap_offset)
        c["batch_epoch"] += [b.partition_leader_epoch for b, _ in pairs]
        c["timestamp"] += [r.timestamp * 1000 for _, r in pairs]
        c["batch_base_offset"] += [b.base_offset for b, _ in pairs]
        c["file_position"] += [r.position if r.position >= 0 else None for _, r in pairs]
        memo, derive, derived = ch.memo, self._derive, ch.derived
        index = c["derived"]
        for b, r in pairs:
            if b.errors:  # records of a corrupt batch are never shared with a good copy
                index.append(derived.add(derive(b, r)))
                continue
            k = (b.attributes & CONTROL_MASK, r.key, r.value)
            i = memo.get(k)
            if i is None:
                i = memo[k] = derived.add(derive(b, r))
            index.append(i)

    def _derive(self, b: Batch, r: Record) -> tuple[Any, ...]:
        """What the columns of a record take from its key and value (and its batch's problems)."""
        d: Decoded = r.decoded  # type: ignore[assignment]
        ctl = bool(b.attributes & CONTROL_MASK)
        # records of a batch that failed its CRC or framing are kept, but never trusted as ok
        status = d.status if not b.errors else CORRUPT_BATCH
        raw = status != "ok" and (ctl or d.api_key not in self.sensitive_keys)
        red = self.redactor(d) if d.data else d
        data_json = "{}" if d.data == {} else (dumps(payload(red)) if d.data is not None else None)
        typed = self.cat.by_record_type.get(d.type) if status == "ok" else None  # type: ignore[arg-type]
        return (ctl, d.api_key, d.type, d.version, status, _record_error(b, d), data_json,
                list(red.redacted) or None, r.key if raw else None, r.value if raw else None,
                self.hash(r.key, r.value), typed.name if typed else None, red)

    def _tables(self, ch: _Chunk) -> dict[str, pa.Table]:
        with paused_gc():
            out: dict[str, pa.Table] = {}
            records = ch.records_table(self.cat.core["records"].schema, self.run_id)
            if records is not None:
                out["records"] = records
                for name, rows, index in ch.typed_rows():
                    out[name] = _typed(self.cat.typed[name], records, rows, [ch.derived.decoded[i] for i in index])
            batches = ch.batches_table(self.cat.core["batches"].schema, self.run_id)
            if batches is not None:
                out["batches"] = batches
            out["files"] = pa.Table.from_pylist(ch.ledger, self.cat.core["files"].schema)
            return out


# what a record's columns take from its value, in the order ``FileLander._derive`` returns them
_DERIVED = (("is_control", pa.bool_()), ("api_key", pa.int16()), ("record_type", pa.string()),
            ("record_version", pa.int16()), ("status", pa.string()), ("error", pa.string()),
            ("data_json", pa.string()), ("redacted_fields", pa.list_(pa.string())), ("raw_key", pa.binary()),
            ("raw_value", pa.binary()), ("value_hash", pa.int64()), ("typed_table", pa.string()))


class _Derived:
    """The distinct value-derived tuples of a chunk, column-wise, with the redacted ``Decoded`` of each."""

    def __init__(self) -> None:
        self.columns: list[list[Any]] = [[] for _ in _DERIVED]
        self.decoded: list[Decoded] = []

    def add(self, values: tuple[Any, ...]) -> int:
        for column, v in zip(self.columns, values[:-1], strict=True):
            column.append(v)
        self.decoded.append(values[-1])
        return len(self.decoded) - 1

    def arrays(self) -> dict[str, pa.Array]:
        return {name: pa.array(col, typ) for (name, typ), col in zip(_DERIVED, self.columns, strict=True)}


# batch header fields as they sit in the file (big-endian, packed): see ``kraftlog.wire.batches``
_HEADER_DTYPE = np.dtype([
    ("base_offset", ">i8"), ("batch_length", ">i4"), ("partition_leader_epoch", ">i4"), ("magic", "i1"),
    ("crc", ">u4"), ("attributes", ">i2"), ("last_offset_delta", ">i4"), ("base_timestamp", ">i8"),
    ("max_timestamp", ">i8"), ("producer_id", ">i8"), ("producer_epoch", ">i2"), ("base_sequence", ">i4"),
    ("records_count", ">i4")])
_CODECS = pa.array([CODEC_NAMES.get(i, str(i)) for i in range(8)], pa.string())
_TIMESTAMP_TYPES = pa.array(["CreateTime", "LogAppendTime"], pa.string())


def batch_headers(content: bytes, positions: list[int]) -> np.ndarray:
    """The RecordBatch headers at ``positions`` of ``content`` as one structured array (vectorized)."""
    if not positions:
        return np.empty(0, _HEADER_DTYPE)
    gather = np.asarray(positions, np.int64)[:, None] + np.arange(_HEADER_DTYPE.itemsize)
    return np.frombuffer(content, np.uint8)[gather].view(_HEADER_DTYPE).ravel()


class _FileColumns(NamedTuple):
    """What a file gives every row it lands (named as the columns)."""

    cluster_id: str
    node_id: int | None
    file: str
    file_kind: str
    snapshot_id: str | None
    source: str


class _Chunk:
    """The rows of one output chunk, column-wise."""

    def __init__(self) -> None:
        self.files: list[_FileColumns] = []
        self.record_counts: list[int] = []
        self.batch_counts: list[int] = []
        self.rec: dict[str, list[Any]] = {n: [] for n in ("log_offset", "snapshot_seq", "batch_epoch", "timestamp",
                                                           "batch_base_offset", "file_position", "derived")}
        self.memo: dict[tuple[int, bytes | None, bytes | None], int] = {}
        self.derived = _Derived()
        self.headers: list[np.ndarray] = []
        self.positions: list[int] = []
        self.crc_valid: list[bool] = []
        self.records_read: list[int] = []
        self.batch_errors: list[list[str] | None] = []
        self.ledger: list[dict[str, Any]] = []
        self.index = np.empty(0, np.int64)  # each record row's derived entry (set by records_table)
        self.typed_of: pa.Array | None = None  # each record row's typed table (set by records_table)

    @property
    def rows(self) -> int:
        return len(self.rec["derived"]) + len(self.positions)

    def batches(self, content: bytes, bs: list[Batch]) -> None:
        positions = [b.position for b in bs]
        self.batch_counts.append(len(bs))
        self.positions += positions
        self.headers.append(batch_headers(content, positions))
        self.crc_valid += [b.crc_valid for b in bs]
        self.records_read += [len(b.records) for b in bs]
        self.batch_errors += [[e.describe() for e in b.errors] if b.errors else None for b in bs]

    def _per_file(self, counts: list[int], schema: pa.Schema, names: tuple[str, ...]) -> dict[str, pa.Array]:
        """The per-file columns ``names``, each file's value repeated for its ``counts`` rows."""
        slots = pa.array(np.repeat(np.arange(len(counts)), counts))
        return {n: pa.array([getattr(f, n) for f in self.files], schema.field(n).type).take(slots) for n in names}

    def records_table(self, schema: pa.Schema, run_id: str) -> pa.Table | None:
        if not self.rec["derived"]:
            return None
        derived = self.derived.arrays()
        self.index = np.asarray(self.rec["derived"], np.int64)
        index = pa.array(self.index)
        arrays = self._per_file(self.record_counts, schema, ("cluster_id", "source", "snapshot_id", "node_id", "file"))
        arrays["run_id"] = _repeat(run_id, len(index))
        for name in ("log_offset", "snapshot_seq", "batch_epoch", "timestamp", "batch_base_offset", "file_position"):
            arrays[name] = pa.array(self.rec[name], schema.field(name).type)
        for name, column in derived.items():
            if name in schema.names:
                arrays[name] = column.take(index)
        self.typed_of = derived["typed_table"].take(index)
        return pa.Table.from_arrays([arrays[f.name] for f in schema], schema=schema)

    def typed_rows(self) -> Iterator[tuple[str, np.ndarray, list[int]]]:
        """(typed table, record row numbers, derived entries) per typed table with rows in this chunk."""
        if self.typed_of is None:
            return
        encoded = self.typed_of.dictionary_encode()
        codes = encoded.indices.to_numpy(zero_copy_only=False)
        for code, name in enumerate(encoded.dictionary.to_pylist()):
            rows = np.flatnonzero(codes == code)
            yield name, rows, self.index[rows].tolist()

    def batches_table(self, schema: pa.Schema, run_id: str) -> pa.Table | None:
        if not self.positions:
            return None
        h = np.concatenate(self.headers)
        attrs = h["attributes"].astype(np.int16)
        flags = {name: pa.array((attrs & mask) != 0) for name, mask in (
            ("is_transactional", TRANSACTIONAL_MASK), ("is_control", CONTROL_MASK),
            ("has_delete_horizon", DELETE_HORIZON_MASK))}
        arrays: dict[str, pa.Array] = {
            **self._per_file(self.batch_counts, schema, ("cluster_id", "node_id", "file", "file_kind", "snapshot_id")),
            "position": pa.array(self.positions, pa.int64()),
            "last_offset": pa.array(h["base_offset"].astype(np.int64) + h["last_offset_delta"].astype(np.int64)),
            "size": pa.array(h["batch_length"].astype(np.int32) + LOG_OVERHEAD),
            "crc": pa.array(h["crc"].astype(np.int64)),
            "crc_valid": pa.array(self.crc_valid, pa.bool_()),
            "compression": _CODECS.take(pa.array(attrs & COMPRESSION_MASK)),
            "timestamp_type": _TIMESTAMP_TYPES.take(pa.array((attrs & TIMESTAMP_TYPE_MASK) >> 3)),
            "base_timestamp": pa.array(h["base_timestamp"].astype(np.int64) * 1000, TS),
            "max_timestamp": pa.array(h["max_timestamp"].astype(np.int64) * 1000, TS),
            "records_read": pa.array(self.records_read, pa.int32()),
            "errors": pa.array(self.batch_errors, pa.list_(pa.string())),
            "run_id": _repeat(run_id, len(self.positions)),
            **flags,
        }
        for f in schema:
            if f.name not in arrays:
                arrays[f.name] = pa.array(h[f.name].astype(f.type.to_pandas_dtype()), f.type)
        return pa.Table.from_arrays([arrays[f.name] for f in schema], schema=schema)


def _repeat(value: str, n: int) -> pa.Array:
    return pa.array([value], pa.string()).take(pa.array(np.zeros(n, np.int64)))


def _typed(table: TableDef, records: pa.Table, rows: np.ndarray, decoded: list[Decoded]) -> pa.Table:
    """A typed table's rows: provenance taken from the record rows, fields from the decoded values.

    ``decoded`` repeats the same few objects (one per distinct value): each field is read once per
    distinct value and spread with ``take``.
    """
    take = records.select([*TYPED_PROVENANCE, "run_id"]).take(pa.array(rows))
    distinct: dict[int, int] = {}
    slots = [distinct.setdefault(id(d), len(distinct)) for d in decoded]
    values = list({id(d): d for d in decoded}.values())
    spread = pa.array(slots, pa.int64())
    arrays = []
    for f in table.schema:
        if f.name in take.column_names:
            arrays.append(take.column(f.name))
            continue
        if f.name == "unknown_tagged_fields":
            column = [(d.data or {}).get(UNKNOWN_TAGS) for d in values]
        elif f.name == "redacted_fields":
            column = [list(d.redacted) or None for d in values]
        else:
            column = [(d.data or {}).get(f.name) for d in values]
        arrays.append(pa.array(column, f.type).take(spread))
    return pa.Table.from_arrays(arrays, schema=table.schema)


TYPED_PROVENANCE = ("cluster_id", "source", "snapshot_id", "log_offset", "snapshot_seq", "batch_epoch",
                    "timestamp", "node_id", "record_version")


def _outside(path: str, keep: KeepSpec, dropped: list[tuple[Batch, Record]]) -> KraftDecodeError:
    """The problem of records a segment holds outside the offsets its name allows (they are not landed)."""
    b, r = dropped[0]
    lo, hi = keep.ranges[0] if keep.ranges else ALL
    allowed = f"{lo}..{hi}" if hi < ALL[1] else f"{lo} and above"
    return KraftDecodeError(
        f"{len(dropped)} record(s) outside the offsets this segment's name allows ({allowed}), first at offset "
        f"{r.offset}; not landed", source=path, position=r.position if r.position >= 0 else b.position,
        kind="offset_out_of_range")


def _record_error(b: Batch, d: Decoded) -> str | None:
    if not b.errors:
        return d.error
    return "; ".join([e.reason for e in b.errors] + ([d.error] if d.error else []))


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
