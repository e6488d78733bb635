"""Build Arrow rows for the tables from the wire layer's output (no Spark).

Files are read column-wise (``kraftlog.wire.columns``). An ingest run reads a changed file once,
and up to three times where it competes with landed rows, each time doing only what it must:

* ``summarize`` (files of clusters with landed rows): a walk of the batch headers: offset range,
  epochs, SHA-256, and whether the part an earlier run ingested is unchanged. The planner
  (``kraftlog.planning``) needs only these to tell files that can be landed directly from files
  whose copies compete.
* ``FileIndexer`` (competing files only): narrow rows per record (key, epoch, node, hash, raw bytes),
  enough to choose the one canonical copy of each record (``kraftlog.tables.copies``).
* ``FileLander`` (every changed file): decodes each distinct value once and returns the rows of
  ``records``, of every typed table, of ``batches`` and of the ``files`` ledger, keeping the records
  the plan says.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator, Mapping
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
    control_type,
    iter_batches,
)
from kraftlog.wire.codegen import UNKNOWN_TAGS
from kraftlog.wire.columns import (
    DistinctValues,
    LogColumns,
    Value,
    framed_headers,
    moved,
    read_columns,
    read_ranges,
)
from kraftlog.wire.compression import CODEC_NAMES
from kraftlog.wire.errors import KraftDecodeError
from kraftlog.wire.files import BOOTSTRAP, SEGMENT, FileInfo, classify, decode_value, paused_gc
from kraftlog.wire.kafka_json import payload_json
from kraftlog.wire.messages import Decoded, MetadataCodec, default_codec
from kraftlog.wire.redact import Redactor, default_redactor

MAX_ERRORS_KEPT = 20
RELEASE_BYTES = 8 << 20  # after a file this big, Arrow's memory pool returns its unused memory to the system
CORRUPT_BATCH = "corrupt_batch"  # status of records read from a batch whose CRC or framing failed
EVERY_OFFSET = (-(1 << 63), (1 << 63) - 1)  # the range of offsets that holds them all


SHARED_ID = "unrelated clusters sharing a cluster id? Name them apart (README: Identity)"


@dataclass(frozen=True, slots=True)
class FileIdentity:
    """Who a file belongs to: cluster, node, data directory (from meta.properties or configuration)."""

    cluster_id: str
    node_id: int | None
    data_dir: str
    problem: str | None = None  # why the identity is in doubt (meta.properties, a cluster id shared by others)

    def errors(self, path: str, problems: Iterable[str] = ()) -> list[KraftDecodeError]:
        """The ledger errors of a file of this identity: its doubt, then ``problems`` (copies it contradicts)."""
        doubts = [self.problem] if self.problem else []
        return [KraftDecodeError(p, source=path, kind="identity") for p in (*doubts, *problems)]


@dataclass(frozen=True, slots=True)
class FileRef:
    """A file to read: where, what bytes, when modified (ms), whose, and its id within the run."""

    path: str
    content: bytes
    mtime_ms: int
    identity: FileIdentity
    file_id: int = 0
    start: int = 0  # the byte of the file ``content`` starts at (a grown segment read from its tail: ``Resume``)

    @property
    def size(self) -> int:
        """The file's size as read."""
        return self.start + len(self.content)


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
    """blake2b-64 of a record's key, then 0 for a null value or 1 and the value (signed int64): equal copies hash
    equal. Landed rows keep it: it never changes."""
    tail = b"\x00" if value is None else b"\x01" + value
    digest = hashlib.blake2b(tail if key is None else key + tail, digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


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


# -- grown segments: read from the last batch landed on ---------------------------------------------

class Resume(NamedTuple):
    """Where a run reads a grown segment from, by its last ledger row: the file's ``size`` then, its
    ``content_sha256`` (``digest``), and its last batch (``tail_position``, ``tail_sha256``). A run reads the segment
    from that batch on: where those bytes are unchanged, so is the log before them (Raft's log matching: the same
    batch at the same offset and epoch), so the bytes it grew by are all the run needs to read."""

    size: int
    digest: str
    tail_position: int
    tail_sha256: str

    def holds(self, content: bytes, start: int) -> bool:
        """Whether ``content``, read from byte ``start`` of the file, begins with that last batch, unchanged."""
        end = self.size - start
        return (start == self.tail_position and 0 < end <= len(content)
                and hashlib.sha256(memoryview(content)[:end]).hexdigest() == self.tail_sha256)

    def epoch(self, content: bytes) -> int:
        """The epoch of that last batch (``content`` read from it, ``holds``)."""
        return int.from_bytes(content[12:16], "big", signed=True)  # partitionLeaderEpoch

    def digest_of(self, content: bytes, start: int) -> str:
        """The file's ``content_sha256``: of the digest before (hex) and the bytes the file grew by (the digest
        before where it did not grow)."""
        grown = memoryview(content)[self.size - start:]
        return hashlib.sha256(self.digest.encode() + grown).hexdigest() if len(grown) else self.digest


def content_digest(content: bytes, start: int = 0, resume: Resume | None = None) -> str | None:
    """The ``content_sha256`` of a file read from byte ``start`` on: SHA-256 of the content read whole; of a grown
    segment read from its last batch landed on (``Resume``), the chain; None where that batch changed."""
    if not start:
        return hashlib.sha256(content).hexdigest()
    return resume.digest_of(content, start) if resume is not None and resume.holds(content, start) else None


def tail_of(cols: LogColumns, content: bytes, start: int) -> tuple[int, str] | None:
    """(position, SHA-256) of the last batch of ``cols`` where it ends ``content`` (read from byte ``start``)."""
    if not len(cols.positions):
        return None
    at = int(cols.positions[-1]) - start
    end = at + LOG_OVERHEAD + int(cols.headers["batch_length"][-1])
    return (at + start, hashlib.sha256(memoryview(content)[at:end]).hexdigest()) if end == len(content) else None


# -- pass 0: headers ---------------------------------------------------------------------------------

SUMMARY = pa.schema([
    ("path", pa.string()), ("size", pa.int64()), ("sha256", pa.string()), ("prefix_sha256", pa.string()),
    ("first_offset", pa.int64()), ("last_offset", pa.int64()), ("batches", pa.int32()),
    ("min_epoch", pa.int32()), ("max_epoch", pa.int32()), ("problems", pa.int32()), ("prefix_epoch", pa.int32()),
    ("start", pa.int64()),
])


def summarize(path: str, content: bytes, prefix_size: int | None, start: int = 0, resume: Resume | None = None
              ) -> dict[str, Any]:
    """Batch-header summary of a file; ``prefix_sha256`` covers its first ``prefix_size`` bytes, and where a batch
    ends there in a file whose framing holds, ``prefix_epoch`` is its epoch (what the batches after go on from).

    A file whose framing holds is summarised from its headers gathered at once (``framed_headers``: a quiet
    cluster's segment holds a batch per NoOp, millions of them); any other is walked batch by batch, counting its
    framing problems. A grown segment read from its last batch landed on (``start``, ``resume.holds`` it): the
    batches from there; its prefix is the one digested before (``prefix_sha256`` is that digest)."""
    if start:
        assert resume is not None and resume.holds(content, start)
        out = summarize(path, content[resume.size - start:], None)
        return {**out, "size": start + len(content), "sha256": resume.digest_of(content, start),
                "prefix_sha256": resume.digest, "prefix_epoch": resume.epoch(content), "start": start}
    first = last = None
    lo = hi = None
    n = problems = 0
    prefix_epoch = None
    h = framed_headers(content)
    if h is not None:
        n = len(h)
        if n:
            base = h["base_offset"].astype(np.int64)
            epochs = h["partition_leader_epoch"].astype(np.int64)
            first, last = int(base.min()), int((base + h["last_offset_delta"].astype(np.int64)).max())
            lo, hi = int(epochs.min()), int(epochs.max())
            if prefix_size is not None:
                ends = np.cumsum(LOG_OVERHEAD + h["batch_length"].astype(np.int64))
                i = int(np.searchsorted(ends, prefix_size))
                prefix_epoch = int(epochs[i]) if i < n and ends[i] == prefix_size else None
    else:
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
    digest = hashlib.sha256()
    if prefix_size is not None and prefix_size <= len(content):  # one pass: the prefix's digest on the way
        digest.update(memoryview(content)[:prefix_size])
        prefix = digest.hexdigest()
        digest.update(memoryview(content)[prefix_size:])
    else:
        digest.update(content)
    return {"path": path, "size": len(content), "sha256": digest.hexdigest(),
            "prefix_sha256": prefix, "first_offset": first, "last_offset": last, "batches": n, "min_epoch": lo,
            "max_epoch": hi, "problems": problems, "prefix_epoch": prefix_epoch, "start": 0}


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

    def file_rows(self, f: FileRef, cols: LogColumns | None = None, after: int | None = None) -> pa.Table:
        """The INDEX rows of one file (``cols``: the file already read column-wise); of a segment, with ``after``,
        only the records past that log offset."""
        _, snap, _, snap_offset = file_layout(f.path)
        cols = cols or read_columns(f.content, f.path)
        rows = np.flatnonzero(cols.offset > after) if after is not None and snap_offset is None \
            else np.arange(len(cols.offset))
        n = len(rows)
        log_offset, seq = _log_position(cols.offset[rows], snap_offset)
        used, slots = np.unique(cols.code[rows], return_inverse=True)  # the distinct values these records hold
        distinct = [cols.distinct[i] for i in used.tolist()]
        per_value = {
            "is_control": pa.array([v[0] for v in distinct], pa.bool_()),
            "api_key": pa.array([_peek_api_key(k, v, ctl) for ctl, k, v, _ in distinct], pa.int16()),
            "value_hash": pa.array([self.hash(k, v) for _, k, v, _ in distinct], pa.int64()),
            "key": pa.array([v[1] for v in distinct], pa.binary()),
            "value": pa.array([v[2] for v in distinct], pa.binary()),
        }
        code = pa.array(slots.ravel())
        batch = cols.batch[rows]
        trusted = cols.crc_valid & np.asarray([e is None for e in cols.batch_errors], np.bool_)
        arrays = {
            "cluster_id": _repeat(f.identity.cluster_id, n), "node_id": pa.array([f.identity.node_id] * n, pa.int32()),
            "file_id": pa.array(np.full(n, f.file_id, np.int32)), "snapshot_id": pa.array([snap] * n, pa.string()),
            "log_offset": log_offset, "snapshot_seq": seq,
            "batch_epoch": pa.array(cols.headers["partition_leader_epoch"].astype(np.int32)[batch]),
            "timestamp": pa.array(cols.timestamp[rows] * 1000, TS), "crc_valid": pa.array(trusted[batch]),
            **{name: column.take(code) for name, column in per_value.items()},
        }
        return pa.Table.from_arrays([arrays[name] for name in INDEX.names], schema=INDEX)


def _log_position(offsets: np.ndarray, snap_offset: int | None) -> tuple[pa.Array, pa.Array]:
    """(log_offset, snapshot_seq) of records at ``offsets``: a snapshot's records sit at its offset, in order."""
    if snap_offset is None:
        return pa.array(offsets, pa.int64()), pa.nulls(len(offsets), pa.int64())
    return pa.array(np.full(len(offsets), snap_offset, np.int64)), pa.array(offsets, pa.int64())


def _peek_api_key(key: bytes | None, value: bytes | None, control: bool) -> int | None:
    """apiKey from the frame (or the control type from the key) without decoding the body."""
    if control:
        return control_type(key)
    if value and len(value) >= 2 and value[0] == 1 and value[1] < 128:
        return value[1]
    return None


# -- pass 2: land ------------------------------------------------------------------------------------

class Ingested(NamedTuple):
    """What earlier runs ingested of a segment that has grown since: its last log offset, the file's size then and
    the epoch of its last batch then (None where unknown: the file is read whole)."""

    last_offset: int
    size: int
    epoch: int | None = None

    def ranges(self, content: bytes, source: str, start: int = 0) -> Iterator[LogColumns] | None:
        """The same batches a range at a time (``read_ranges``), or None; ``content``: read from byte ``start`` of
        the file (positions are the file's)."""
        if start and self.size == start + len(content):
            return iter(())  # read from its last batch, and no longer: nothing after
        cols = read_ranges(content, source, after=self.last_offset, at=self.size - start, epoch=self.epoch)
        return cols if cols is None or not start else (moved(c, start) for c in cols)


@dataclass(frozen=True)
class Prefix:
    """A grown segment's part earlier runs landed whole, without a problem: what they ingested (``Ingested``, its
    epoch known) and that part's ledger counts, which the file's ledger row goes on from."""

    ingested: Ingested
    batches: int
    control_batches: int
    records: int
    first_offset: int | None
    metadata_version: str | None
    resume: Resume | None = None  # where the file is read from its last batch landed on


@dataclass(frozen=True)
class KeepSpec:
    """What to land from one file.

    ``ranges``: inclusive ranges of record offsets in the file (log offsets, or positions in a
    snapshot) whose records land; ``min_batch_position``: the rows of the batches that end at or
    before it were landed by an earlier run (the file grew; a batch it cut short was not);
    ``landed_batches``: (position, crc) pairs already landed (a file rewritten in place);
    ``sha256``: the content the plan was made for; a file that changed since is left for the next run;
    ``strict``: the ranges are what the file may hold (a segment's span by its name), so a record
    outside them is a problem of the file, reported in the ledger; ``problems``: what the choice among
    copies found wrong with the file (it contradicts another copy of its log), for the ledger; ``prefix``: a
    grown segment's part landed before (``Prefix``): only the bytes after it are read (``Ingested.ranges``).
    """

    ranges: tuple[tuple[int, int], ...] = (EVERY_OFFSET,)
    min_batch_position: int = 0
    landed_batches: frozenset[tuple[int, int]] = field(default_factory=frozenset)
    sha256: str | None = None
    strict: bool = False
    problems: tuple[str, ...] = ()
    prefix: Prefix | None = None

    def keeps(self, offset: int) -> bool:
        return bool(self.mask(np.asarray([offset], np.int64))[0])

    def mask(self, offsets: np.ndarray) -> np.ndarray:
        """Which of ``offsets`` land."""
        if self.ranges == (EVERY_OFFSET,):
            return np.ones(len(offsets), np.bool_)
        out = np.zeros(len(offsets), np.bool_)
        for lo, hi in self.ranges:
            out |= (offsets >= lo) & (offsets <= hi)
        return out


class FileLander:
    """Rows for ``records``, the typed tables, ``batches`` and ``files`` from whole files, built column-wise.

    Files are read column-wise (``kraftlog.wire.columns``); what a record's columns take from its value
    (type, status, JSON, hash, typed fields) is derived once per distinct value of a chunk and spread
    with Arrow ``take``; per-file constants are repeated by Arrow.
    """

    def __init__(self, run_id: str, codec: MetadataCodec | None = None, redactor: Redactor | None = None):
        self.run_id = run_id
        self.codec = codec or default_codec()
        self.redactor = redactor or default_redactor()
        self.cat = catalog()
        self.sensitive_keys = {k for k, s in load_schemas().metadata.items() if self.redactor.is_sensitive_type(s)}
        self.mv_names = load_schemas().enums["metadataVersion"]
        self.feature_level_key = next(k for k, spec in load_schemas().metadata.items()
                                      if spec.record_type == "FEATURE_LEVEL_RECORD")
        self.hash = _Hasher()
        self._chunk = _Chunk()

    def land(self, files: Iterable[tuple[FileRef, KeepSpec]], rows_per_chunk: int = 1 << 17
             ) -> Iterator[dict[str, pa.Table]]:
        """Rows of every table for ``files``, in chunks of about ``rows_per_chunk`` records (bounded memory).

        Tables without rows are left out of a chunk.
        """
        yield from self.feed(files, rows_per_chunk)
        yield from self.flush()

    def feed(self, files: Iterable[tuple[FileRef, KeepSpec]], rows_per_chunk: int = 1 << 17,
             columns: Mapping[int, LogColumns] | None = None) -> Iterator[dict[str, pa.Table]]:
        """Like ``land``, but rows short of a full chunk wait for the next ``feed`` or ``flush``.

        ``columns``: files already read column-wise, by file id (they are not read again). The cyclic GC is paused
        throughout (reading a file makes a tuple per distinct value, landing it a dict per decoded value, none of them
        in a cycle: the GC would scan them again and again as they pile up, a sixth of the land's time).
        """
        with paused_gc():
            for ref, keep in files:
                content_sha256 = content_digest(ref.content, ref.start, keep.prefix.resume if keep.prefix else None)
                if content_sha256 is None or (keep.sha256 is not None and content_sha256 != keep.sha256):
                    continue  # changed since the plan: the next run takes it
                cols = (columns or {}).get(ref.file_id)
                tail = keep.prefix.ingested.ranges(ref.content, ref.path, ref.start) \
                    if cols is None and keep.prefix else None
                ranges = tail or ((cols,) if cols is not None else read_ranges(ref.content, ref.path) or ())
                yield from self._file(ref, keep, content_sha256, ranges, rows_per_chunk,
                                      keep.prefix if tail else None)

    def flush(self) -> Iterator[dict[str, pa.Table]]:
        """The rows waiting in the current chunk."""
        chunk, self._chunk = self._chunk, _Chunk()
        if chunk.files or chunk.ledger:
            yield self._tables(chunk)

    def _file(self, ref: FileRef, keep: KeepSpec, content_sha256: str, ranges: Iterable[LogColumns],
              rows_per_chunk: int, prefix: Prefix | None = None) -> Iterator[dict[str, pa.Table]]:
        """The rows of one file, read a range of batches at a time (``read_ranges``) and added to the current chunk
        ``rows_per_chunk`` records at a time (a chunk is flushed when full): the rows and columns in memory follow
        the chunk and the range, not the file (a metadata log segment grows to ``metadata.log.segment.bytes``, 1 GiB
        by default). The ledger row comes after the last range. ``prefix``: ``ranges`` are the batches after it
        (its counts go into the ledger)."""
        info, snap, source, snap_offset = file_layout(ref.path)
        ident = ref.identity
        errors = [*ident.errors(ref.path, keep.problems)]
        counts = _Counts.after(prefix)
        resume = prefix.resume if prefix is not None and ref.start else None
        # the last batch, where it ends the file (the one read from where the file did not grow)
        tail = (ref.start, resume.tail_sha256) if resume is not None and ref.size == resume.size else None
        for cols in ranges:
            errors += cols.errors
            levels = self._levels(cols)
            kept = keep.mask(cols.offset)
            if keep.strict and not kept.all():
                counts.left_out(cols, kept)
            ends = cols.positions + LOG_OVERHEAD + cols.headers["batch_length"].astype(np.int64)
            new_batches = ends > keep.min_batch_position
            if keep.landed_batches:
                new_batches &= [(p, c) not in keep.landed_batches
                                for p, c in zip(cols.positions.tolist(), cols.headers["crc"].tolist(), strict=True)]
            n = len(cols.offset)
            for lo in range(0, max(n, 1), rows_per_chunk):
                hi = min(n, lo + rows_per_chunk)
                ch = self._chunk  # (work and memory per slice follow the slice, not the file)
                code = cols.code[lo:hi]
                rows = np.flatnonzero(kept[lo:hi])
                used = np.unique(code[rows])  # the distinct values landed (sorted codes), derived into the chunk
                entries = np.asarray([self._derived(ch, cols.distinct[i]) for i in used.tolist()], np.int64)
                ch.files.append(_FileColumns(ident.cluster_id, ident.node_id, ref.path, info.kind, snap, source))
                ch.records(cols, lo + rows, entries[np.searchsorted(used, code[rows])], snap_offset)
                ch.batches(cols, new_batches if lo == 0 else np.zeros(len(new_batches), np.bool_))
                counts.level = _last_level(code, levels) or counts.level
                if ch.rows >= rows_per_chunk:
                    yield from self.flush()
            counts.add(cols)
            if len(cols.positions):
                tail = tail_of(cols, ref.content, ref.start)
            if len(ref.content) >= RELEASE_BYTES:  # Arrow's allocator keeps what a big range freed: give it back,
                del cols, kept, new_batches  # so a task's memory follows one range, not the last few
                pa.default_memory_pool().release_unused()
        if counts.dropped:
            errors.append(_outside(ref.path, keep, counts))
        self._chunk.ledger.append({
            "path": ref.path, "cluster_id": ident.cluster_id, "node_id": ident.node_id,
            "data_dir": ident.data_dir, "file_kind": info.kind, "snapshot_id": snap,
            "deleted_snapshot": info.deleted, "size": ref.size,
            "modification_time": ref.mtime_ms * 1000, "content_sha256": content_sha256,
            "batches": counts.batches, "control_batches": counts.control_batches, "records": counts.records,
            "crc_failures": counts.crc_failures, "first_offset": counts.first_offset,
            "last_offset": counts.last_offset,
            "metadata_version": counts.metadata_version if counts.level is None
            else self.mv_names.get(str(counts.level), f"level {counts.level}"),
            "status": "errors" if errors else "ok", "error_count": len(errors),
            "errors": [e.describe() for e in errors[:MAX_ERRORS_KEPT]],
            "ingested_at": datetime.now(UTC), "run_id": self.run_id,
            "tail_position": tail[0] if tail and info.kind == SEGMENT else None,
            "tail_sha256": tail[1] if tail and info.kind == SEGMENT else None,
        })
        if self._chunk.rows >= rows_per_chunk:
            yield from self.flush()

    def _levels(self, cols: LogColumns) -> dict[int, int]:
        """The metadata.version level each FeatureLevelRecord for it among the distinct values of ``cols`` sets, by
        value entry. Only such records are decoded (their api key read from the frame: ``_peek_api_key``)."""
        return {i: level for i, (ctl, key, value, _) in enumerate(cols.distinct)
                if not ctl and _peek_api_key(key, value, ctl) == self.feature_level_key
                and (level := _metadata_level(decode_value(self.codec, ctl, key, value), ctl)) is not None}

    def _derived(self, ch: _Chunk, v: Value) -> int:
        """The chunk's derived entry of a distinct value (records of a corrupt batch get their own)."""
        i = ch.values.code(v)
        if i == len(ch.derived):  # a value new to the chunk
            ch.derived.add(self._derive(v))
        return i

    def _derive(self, v: Value) -> Derived:
        """What the columns of a record take from its key and value (and its batch's problems)."""
        ctl, key, value, problems = v
        d = decode_value(self.codec, ctl, key, value)
        # records of a batch that failed its CRC or framing are kept, but never trusted as ok
        status = d.status if not problems else CORRUPT_BATCH
        raw = status != "ok" and (ctl or d.api_key not in self.sensitive_keys)
        red = self.redactor(d) if d.data else d
        data_json = "{}" if d.data == {} else payload_json(red)
        typed = self.cat.by_record_type.get(d.type) if status == "ok" else None  # type: ignore[arg-type]
        return Derived(ctl, d.api_key, d.type, d.version, status, _record_error(problems, d), data_json,
                       list(red.redacted) or None, key if raw else None, value if raw else None,
                       self.hash(key, value), typed.name if typed else None, red)

    def _tables(self, ch: _Chunk) -> dict[str, pa.Table]:
        with paused_gc():
            out: dict[str, pa.Table] = {}
            records = ch.records_table(self.cat.core["records"].schema, self.run_id)
            if records is not None:
                out["records"] = records
                decoded = ch.derived.decoded
                for name, rows, index in ch.typed_rows():
                    out[name] = _typed(self.cat.typed[name], records, rows, index, decoded)
            batches = ch.batches_table(self.cat.core["batches"].schema, self.run_id)
            if batches is not None:
                out["batches"] = batches
            out["files"] = pa.Table.from_pylist(ch.ledger, self.cat.core["files"].schema)
            return out


def _last_level(code: np.ndarray, levels: dict[int, int]) -> int | None:
    """The level the last of the records ``code`` that sets one sets (``levels``: by value entry, ``_levels``), landed
    or not (the ledger tells the file's level); None: none does."""
    if not levels:
        return None
    hits = np.flatnonzero(np.isin(code, list(levels)))
    return levels[int(code[hits[-1]])] if hits.size else None


def _metadata_level(d: Decoded, control: bool) -> int | None:
    """The feature level of a FeatureLevelRecord for metadata.version, else None."""
    if d.type == "FEATURE_LEVEL_RECORD" and not control and d.data and d.data.get("name") == "metadata.version":
        return d.data["feature_level"]
    return None


@dataclass
class _Counts:
    """A file's ledger counts so far (from its ``Prefix``, then range by range)."""

    batches: int = 0
    control_batches: int = 0
    records: int = 0
    crc_failures: int = 0
    first_offset: int | None = None
    last_offset: int | None = None
    metadata_version: str | None = None  # before the ranges read (the prefix's)
    level: int | None = None  # the metadata.version level the ranges set last
    dropped: int = 0  # records outside a strict segment's offsets
    first_out: tuple[int, int] = (0, -1)  # the first of them: offset, byte position (of its batch if compressed)

    @staticmethod
    def after(prefix: Prefix | None) -> _Counts:
        if prefix is None:
            return _Counts()
        return _Counts(prefix.batches, prefix.control_batches, prefix.records, 0, prefix.first_offset,
                       prefix.ingested.last_offset, prefix.metadata_version)

    def add(self, cols: LogColumns) -> None:
        self.batches += len(cols.positions)
        self.control_batches += int(cols.control.sum())
        self.records += len(cols.offset)
        self.crc_failures += int((~cols.crc_valid).sum())
        if len(cols.offset):
            lo, hi = int(cols.offset.min()), int(cols.offset.max())
            self.first_offset = lo if self.first_offset is None else min(self.first_offset, lo)
            self.last_offset = hi if self.last_offset is None else max(self.last_offset, hi)

    def left_out(self, cols: LogColumns, kept: np.ndarray) -> None:
        if not self.dropped:
            row = int(np.argmin(kept))  # the first record left out
            position = int(cols.position[row])
            self.first_out = int(cols.offset[row]), position if position >= 0 else int(cols.positions[cols.batch[row]])
        self.dropped += int((~kept).sum())


class Derived(NamedTuple):
    """What a record's columns take from its key and value (and its batch's problems), once per distinct value;
    ``decoded`` is the redacted value (for the typed tables)."""

    is_control: bool
    api_key: int | None
    record_type: str | None
    record_version: int | None
    status: str
    error: str | None
    data_json: str | None
    redacted_fields: list[str] | None
    raw_key: bytes | None
    raw_value: bytes | None
    value_hash: int
    typed_table: str | None
    decoded: Decoded


_DERIVED_TYPES = {"is_control": pa.bool_(), "api_key": pa.int16(), "record_type": pa.string(),
                  "record_version": pa.int16(), "status": pa.string(), "error": pa.string(),
                  "data_json": pa.string(), "redacted_fields": pa.list_(pa.string()), "raw_key": pa.binary(),
                  "raw_value": pa.binary(), "value_hash": pa.int64(), "typed_table": pa.string()}


class _Derived:
    """The distinct ``Derived`` values of a chunk (as columns: ``arrays``), with the redacted ``Decoded`` of each."""

    def __init__(self) -> None:
        self.rows: list[Derived] = []

    def __len__(self) -> int:
        return len(self.rows)

    def add(self, values: Derived) -> int:
        self.rows.append(values)
        return len(self.rows) - 1

    @property
    def decoded(self) -> list[Decoded]:
        """Each entry's redacted value (what the typed tables read)."""
        return [row.decoded for row in self.rows]

    def arrays(self) -> dict[str, pa.Array]:
        columns = list(zip(*self.rows, strict=True)) or [() for _ in Derived._fields]
        return {name: pa.array(column, _DERIVED_TYPES[name])
                for name, column in zip(Derived._fields, columns, strict=True) if name in _DERIVED_TYPES}


_CODECS = pa.array([CODEC_NAMES.get(i, str(i)) for i in range(8)], pa.string())
_TIMESTAMP_TYPES = pa.array(["CreateTime", "LogAppendTime"], pa.string())


class _FileColumns(NamedTuple):
    """What a file gives every row it lands (named as the columns)."""

    cluster_id: str
    node_id: int | None
    file: str
    file_kind: str
    snapshot_id: str | None
    source: str


class _Chunk:
    """The rows of one output chunk, column-wise (one numpy array per file and column)."""

    def __init__(self) -> None:
        self.files: list[_FileColumns] = []
        self.record_counts: list[int] = []
        self.batch_counts: list[int] = []
        self.rec: dict[str, list[np.ndarray]] = {n: [] for n in (
            "log_offset", "snapshot_seq", "seq_valid", "batch_epoch", "timestamp", "batch_base_offset",
            "file_position", "derived")}
        self.values = DistinctValues()  # the chunk's values; entry i is derived as ``derived`` entry i
        self.derived = _Derived()
        self.headers: list[np.ndarray] = []
        self.positions: list[np.ndarray] = []
        self.crc_valid: list[np.ndarray] = []
        self.records_read: list[np.ndarray] = []
        self.batch_errors: list[list[str] | None] = []
        self.ledger: list[dict[str, Any]] = []
        self.rows = 0  # record and batch rows
        self.index = np.empty(0, np.int64)  # each record row's derived entry (set by records_table)
        self.typed_of: pa.Array | None = None  # each record row's typed table (set by records_table)

    def records(self, cols: LogColumns, kept: np.ndarray, index: np.ndarray, snap_offset: int | None) -> None:
        """The record rows ``kept`` (their places in the file) of a file; ``index``: their derived entries."""
        offsets, batch = cols.offset[kept], cols.batch[kept]
        n = len(offsets)
        self.record_counts.append(n)
        self.rows += n
        snapshot = snap_offset is not None
        c = self.rec
        c["log_offset"].append(np.full(n, snap_offset, np.int64) if snapshot else offsets)
        c["snapshot_seq"].append(offsets)
        c["seq_valid"].append(np.full(n, snapshot, np.bool_))
        c["batch_epoch"].append(cols.headers["partition_leader_epoch"][batch].astype(np.int32))
        c["timestamp"].append(cols.timestamp[kept])
        c["batch_base_offset"].append(cols.headers["base_offset"][batch].astype(np.int64))
        c["file_position"].append(cols.position[kept])
        c["derived"].append(index)

    def batches(self, cols: LogColumns, new: np.ndarray) -> None:
        """The batch rows ``new`` of a file."""
        self.batch_counts.append(int(new.sum()))
        self.rows += self.batch_counts[-1]
        self.positions.append(cols.positions[new])
        self.headers.append(cols.headers[new])
        self.crc_valid.append(cols.crc_valid[new])
        self.records_read.append(cols.records_read[new])
        self.batch_errors += [[e.describe() for e in errs] if errs else None
                              for errs, is_new in zip(cols.batch_errors, new.tolist(), strict=True) if is_new]

    def _per_file(self, counts: list[int], schema: pa.Schema, names: tuple[str, ...]) -> dict[str, pa.Array]:
        """The per-file columns ``names``, each file's value repeated for its ``counts`` rows."""
        slots = pa.array(np.repeat(np.arange(len(counts)), counts))
        return {n: pa.array([getattr(f, n) for f in self.files], schema.field(n).type).take(slots) for n in names}

    def records_table(self, schema: pa.Schema, run_id: str) -> pa.Table | None:
        if not sum(self.record_counts):
            return None
        derived = self.derived.arrays()
        c = {name: np.concatenate(parts) for name, parts in self.rec.items()}
        self.index = c["derived"]
        index = pa.array(self.index)
        arrays = self._per_file(self.record_counts, schema, ("cluster_id", "source", "snapshot_id", "node_id", "file"))
        arrays["run_id"] = _repeat(run_id, len(index))
        arrays["log_offset"] = pa.array(c["log_offset"], pa.int64())
        arrays["snapshot_seq"] = pa.array(c["snapshot_seq"], pa.int64(), mask=~c["seq_valid"])
        arrays["batch_epoch"] = pa.array(c["batch_epoch"], pa.int32())
        arrays["timestamp"] = pa.array(c["timestamp"] * 1000, TS)
        arrays["batch_base_offset"] = pa.array(c["batch_base_offset"], pa.int64())
        arrays["file_position"] = pa.array(c["file_position"], pa.int64(), mask=c["file_position"] < 0)
        for name, column in derived.items():
            if name in schema.names:
                arrays[name] = column.take(index)
        self.typed_of = derived["typed_table"].take(index)
        return pa.Table.from_arrays([arrays[f.name] for f in schema], schema=schema)

    def typed_rows(self) -> Iterator[tuple[str, np.ndarray, np.ndarray]]:
        """(typed table, record row numbers, derived entries) per typed table with rows in this chunk."""
        if self.typed_of is None:
            return
        encoded = self.typed_of.dictionary_encode()
        codes = encoded.indices.to_numpy(zero_copy_only=False)
        for code, name in enumerate(encoded.dictionary.to_pylist()):
            rows = np.flatnonzero(codes == code)
            yield name, rows, self.index[rows]

    def batches_table(self, schema: pa.Schema, run_id: str) -> pa.Table | None:
        if not sum(self.batch_counts):
            return None
        h = np.concatenate(self.headers)
        attrs = h["attributes"].astype(np.int16)
        flags = {name: pa.array((attrs & mask) != 0) for name, mask in (
            ("is_transactional", TRANSACTIONAL_MASK), ("is_control", CONTROL_MASK),
            ("has_delete_horizon", DELETE_HORIZON_MASK))}
        arrays: dict[str, pa.Array] = {
            **self._per_file(self.batch_counts, schema, ("cluster_id", "node_id", "file", "file_kind", "snapshot_id")),
            "position": pa.array(np.concatenate(self.positions), pa.int64()),
            "last_offset": pa.array(h["base_offset"].astype(np.int64) + h["last_offset_delta"].astype(np.int64)),
            "size": pa.array(h["batch_length"].astype(np.int32) + LOG_OVERHEAD),
            "crc": pa.array(h["crc"].astype(np.int64)),
            "crc_valid": pa.array(np.concatenate(self.crc_valid), pa.bool_()),
            "compression": _CODECS.take(pa.array(attrs & COMPRESSION_MASK)),
            "timestamp_type": _TIMESTAMP_TYPES.take(pa.array((attrs & TIMESTAMP_TYPE_MASK) >> 3)),
            "base_timestamp": pa.array(h["base_timestamp"].astype(np.int64) * 1000, TS),
            "max_timestamp": pa.array(h["max_timestamp"].astype(np.int64) * 1000, TS),
            "records_read": pa.array(np.concatenate(self.records_read), pa.int32()),
            "errors": pa.array(self.batch_errors, pa.list_(pa.string())),
            "run_id": _repeat(run_id, len(h)),
            **flags,
        }
        for f in schema:
            if f.name not in arrays:
                arrays[f.name] = pa.array(h[f.name].astype(f.type.to_pandas_dtype()), f.type)
        return pa.Table.from_arrays([arrays[f.name] for f in schema], schema=schema)


def _repeat(value: str, n: int) -> pa.Array:
    return pa.array([value], pa.string()).take(pa.array(np.zeros(n, np.int64)))


def _typed(table: TableDef, records: pa.Table, rows: np.ndarray, index: np.ndarray, decoded: list[Decoded]
           ) -> pa.Table:
    """A typed table's rows: provenance taken from the record rows ``rows``, fields from the decoded values.

    ``index``: each row's entry in ``decoded``. The fields are read once per distinct entry, all at once (Arrow
    converts the decoded dicts to one struct array: a missing field or an undecoded value is null), and spread with
    ``take``.
    """
    take = records.select([*TYPED_PROVENANCE, "run_id"]).take(pa.array(rows))
    entries, slots = np.unique(index, return_inverse=True)
    values = [decoded[i] for i in entries.tolist()]
    spread = pa.array(slots.ravel())
    fields = [f for f in table.schema if f.name not in take.column_names and f.name not in _TYPED_EXTRA]
    read = dict(zip((f.name for f in fields), pa.array(
        [d.data for d in values], pa.struct([pa.field(f.name, f.type) for f in fields])).flatten(), strict=True))
    read["unknown_tagged_fields"] = pa.array([(d.data or {}).get(UNKNOWN_TAGS) for d in values],
                                             table.schema.field("unknown_tagged_fields").type)
    read["redacted_fields"] = pa.array([list(d.redacted) or None for d in values],
                                       table.schema.field("redacted_fields").type)
    return pa.Table.from_arrays([take.column(f.name) if f.name in take.column_names else read[f.name].take(spread)
                                 for f in table.schema], schema=table.schema)


_TYPED_EXTRA = ("unknown_tagged_fields", "redacted_fields")  # the typed columns that are not a record's fields


TYPED_PROVENANCE = ("cluster_id", "source", "snapshot_id", "log_offset", "snapshot_seq", "batch_epoch",
                    "timestamp", "node_id", "record_version")


def _outside(path: str, keep: KeepSpec, counts: _Counts) -> KraftDecodeError:
    """The problem of records a segment holds outside the offsets its name allows (they are not landed)."""
    lo, hi = keep.ranges[0] if keep.ranges else EVERY_OFFSET
    allowed = f"{lo}..{hi}" if hi < EVERY_OFFSET[1] else f"{lo} and above"
    offset, position = counts.first_out
    return KraftDecodeError(
        f"{counts.dropped} record(s) outside the offsets this segment's name allows ({allowed}), first at offset "
        f"{offset}; not landed", source=path, position=position, kind="offset_out_of_range")


def _record_error(problems: tuple[KraftDecodeError, ...], d: Decoded) -> str | None:
    if not problems:
        return d.error
    return "; ".join([e.reason for e in problems] + ([d.error] if d.error else []))


def record_json(d: Decoded, redactor: Redactor) -> str | None:
    """The redacted Kafka JSON of a decoded value."""
    if d.data is None:
        return None
    return payload_json(redactor(d))


def project(batch: pa.RecordBatch | pa.Table, table: TableDef, run_id: str) -> pa.Table:
    """Select ``table``'s columns from ``batch`` (adding ``run_id``)."""
    arrays = []
    for f in table.schema:
        if f.name == "run_id":
            arrays.append(pa.array([run_id] * batch.num_rows, pa.string()))
        else:
            arrays.append(batch.column(f.name).cast(f.type))
    return pa.Table.from_arrays(arrays, schema=table.schema)

