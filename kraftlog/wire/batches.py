"""Walk RecordBatch v2 (magic 2) batches and their records.

Batch header (``DefaultRecordBatch``), big-endian::

    0  baseOffset int64        17 crc uint32 (CRC-32C of bytes 21..end)   43 producerId int64
    8  batchLength int32       21 attributes int16                         51 producerEpoch int16
    12 partitionLeaderEpoch    23 lastOffsetDelta int32                    53 baseSequence int32
    16 magic int8 (=2)         27 baseTimestamp int64  35 maxTimestamp      57 recordsCount int32
    61 records (one compressed stream if attributes & 7 != 0)

attributes: bits 0-2 codec, bit 3 LogAppendTime, bit 4 transactional, bit 5 control, bit 6 delete horizon.

Record (``DefaultRecord``), zigzag varints::

    length  attributes:int8  timestampDelta:varlong  offsetDelta  keyLength key  valueLength value
    headersCount { keyLength key valueLength value }*

The walker never trusts a length it has not checked against the bytes that are really there. A bad
header (magic, length) is reported and the walker re-synchronises on the next position that holds a
whole batch with a valid CRC, so one corrupt batch does not hide the rest of the file.

The CRC covers bytes 21.. only: a batch's base offset and partition leader epoch are checked against
what the log around them says (``BatchOrder``). The work per batch is bounded by what Kafka can write
(``MAX_BATCH_SIZE_BYTES``, ``MIN_RECORD_SIZE``) before any record is allocated.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from crc32c import crc32c

from kraftlog.wire.compression import DecompressionError, decompress
from kraftlog.wire.errors import KraftDecodeError
from kraftlog.wire.varint import read_varint, read_varlong

if TYPE_CHECKING:
    from kraftlog.wire.messages import Decoded

LOG_OVERHEAD = 12  # baseOffset + batchLength
HEADER_SIZE = 61  # RECORD_BATCH_OVERHEAD
_HEADER = struct.Struct(">qiibIhiqqqhii")
_BASE_LEN = struct.Struct(">qi")
_EPOCH = struct.Struct(">i")

COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_MASK = 0x10
CONTROL_MASK = 0x20
DELETE_HORIZON_MASK = 0x40

# KafkaRaftClient.MAX_BATCH_SIZE_BYTES: the raft client never writes a batch whose records take more bytes
# (KRaft batches are not compressed, so this bounds a compressed batch's records once decompressed too)
MAX_BATCH_SIZE_BYTES = 8 * 1024 * 1024
# DefaultRecord: length, attributes, timestampDelta, offsetDelta, keyLength, valueLength and headers count
# take at least one byte each, so a batch of B record bytes holds at most B // 7 records
MIN_RECORD_SIZE = 7
# KRaft writers never compress: a file's compressed batches may together expand it by at most this many bytes
# (one of Kafka's largest batches) plus this factor of its own size, so a file of crafted batches cannot cost
# more than a few seconds however many it holds
EXPANSION_ALLOWANCE = MAX_BATCH_SIZE_BYTES
EXPANSION_FACTOR = 16
SNAPSHOT_HEADER, SNAPSHOT_FOOTER = 3, 4  # ControlRecordType


def control_type(key: bytes | None) -> int | None:
    """The ControlRecordType of a control record's key (int16 version, int16 type), None if too short."""
    return int.from_bytes(key[2:4], "big", signed=True) if key is not None and len(key) >= 4 else None


@dataclass(frozen=True, slots=True)
class Expect:
    """What a file's name says about its batches.

    ``first_offset``: a segment's batches start at its base offset, a snapshot's at 0; ``max_epoch``:
    a snapshot ``<endOffset>-<epoch>`` holds no batch of a later epoch; ``snapshot``: it begins with a
    SnapshotHeader and ends with a SnapshotFooter (Kafka's ``RecordsSnapshotReader`` requires both).
    """

    first_offset: int | None = None
    max_epoch: int | None = None
    snapshot: bool = False


@dataclass(slots=True)
class BatchOrder:
    """The order of a raft log file's batches, which their CRC does not cover.

    A raft log is contiguous (each batch starts one past the last offset of the one before, so the
    file's name pins every base offset) and its epochs never go down; a snapshot holds no batch of a
    later epoch than its own. Checked on every real file of the corpus (Kafka 3.2 to 4.2). A batch
    that raises the epoch while the batch after it is back below is the one out of order (a flipped
    bit), not every batch after it.
    """

    next_offset: int | None = None  # the base offset the next batch must have (None: not pinned)
    max_epoch: int | None = None
    epoch: int | None = None  # the epoch of the last batch in order
    seen: int = 0  # batches checked

    def check(self, base_offset: int, last_offset_delta: int, epoch: int, next_epoch: int | None = None
              ) -> str | None:
        """Why a batch is out of order (None if it is not); moves on past it either way.

        ``next_epoch``: the epoch the following batch claims (None at the end of the file).
        """
        problem = None
        if self.next_offset is not None and base_offset != self.next_offset:
            by = "the file's name says" if self.seen == 0 else "the batches before lead to"
            problem = f"base offset {base_offset} where {by} {self.next_offset}"
        elif epoch < 0 or (self.max_epoch is not None and epoch > self.max_epoch):
            problem = f"partition leader epoch {epoch} outside 0..{self.max_epoch} (the snapshot's epoch)" \
                if self.max_epoch is not None else f"negative partition leader epoch {epoch}"
        elif self.epoch is not None and epoch < self.epoch:
            problem = f"partition leader epoch {epoch} is below the epoch {self.epoch} of the batches before"
        elif self.epoch is not None and epoch > self.epoch and next_epoch is not None and next_epoch < epoch:
            problem = (f"partition leader epoch {epoch} rises above the epoch {self.epoch} of the batches before, "
                       f"and the batch after is back at {next_epoch}")
        start = self.next_offset if self.next_offset is not None else base_offset
        self.next_offset = start + last_offset_delta + 1
        self.seen += 1
        if problem is None:
            self.epoch = epoch
        return problem

    def lost(self) -> None:
        """Bytes were skipped or a batch's own fields cannot be trusted: the next offset is not known."""
        self.next_offset = None


def snapshot_frame_problem(first: tuple[bool, bytes | None] | None, last: tuple[bool, bytes | None] | None
                           ) -> str | None:
    """Why a snapshot whose first and last records are ``(control, key)`` is incomplete (None if whole)."""
    if first is None or last is None:
        return "the snapshot holds no records: no SnapshotHeader and no SnapshotFooter"
    if not first[0] or control_type(first[1]) != SNAPSHOT_HEADER:
        return "the snapshot does not begin with a SnapshotHeader"
    if not last[0] or control_type(last[1]) != SNAPSHOT_FOOTER:
        return "the snapshot does not end with a SnapshotFooter (cut short?)"
    return None


@dataclass(slots=True)
class Record:
    """One record of a batch.

    ``position`` is its byte position in the file (-1 inside compressed data); ``decoded`` is filled
    by ``files.decode_batch`` with the decoded value.
    """

    offset: int
    timestamp: int
    position: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]] = field(default_factory=list)
    decoded: Decoded | None = None


@dataclass(slots=True)
class Batch:
    """A RecordBatch v2 header, its CRC verdict and its records."""

    position: int
    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    crc_valid: bool
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int
    records: list[Record] = field(default_factory=list)
    errors: tuple[KraftDecodeError, ...] = ()

    def add_error(self, error: KraftDecodeError) -> None:
        self.errors = (*self.errors, error)

    @property
    def size(self) -> int:
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def compression(self) -> int:
        return self.attributes & COMPRESSION_MASK

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_MASK)

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_MASK)

    @property
    def log_append_time(self) -> bool:
        return bool(self.attributes & TIMESTAMP_TYPE_MASK)

    @property
    def has_delete_horizon(self) -> bool:
        return bool(self.attributes & DELETE_HORIZON_MASK)


def _plausible_header(data: bytes, pos: int, n: int) -> int:
    """Size of a whole, CRC-valid batch starting at ``pos``, or 0."""
    if pos + HEADER_SIZE > n or data[pos + 16] != 2:
        return 0
    _, length = _BASE_LEN.unpack_from(data, pos)
    end = pos + LOG_OVERHEAD + length
    if length < HEADER_SIZE - LOG_OVERHEAD or end > n:
        return 0
    (stored,) = struct.unpack_from(">I", data, pos + 17)
    if crc32c(memoryview(data)[pos + 21 : end]) != stored:
        return 0
    return end - pos


def _resync(data: bytes, pos: int, n: int) -> int:
    """The next position after ``pos`` that starts a whole batch with a valid CRC, or ``n``."""
    p = data.find(b"\x02", pos + 17)  # magic sits at +16: candidates are magic bytes 16 before
    while p != -1:
        start = p - 16
        if start > pos and _plausible_header(data, start, n):
            return start
        p = data.find(b"\x02", p + 1)
    return n


def iter_batches(data: bytes, source: str = "", *, verify_crc: bool = True, parse_records: bool = True,
                 on_batch: Callable[[Batch], object] | None = None, expect: Expect | None = None,
                 start: int = 0, order: BatchOrder | None = None) -> Iterator[Batch | KraftDecodeError]:
    """Yield every batch of ``data`` (a segment or snapshot file) and every problem, in file order.

    Problems with the framing of the file (truncated tail, impossible length, bad magic, an empty
    snapshot, a snapshot without its header or footer) are yielded as ``KraftDecodeError``; problems inside
    one batch (CRC mismatch, out of order, a bad record) are attached to that batch's ``errors``.
    ``expect``: what the file's name says (see ``Expect``). ``on_batch`` runs on each batch before it
    is yielded (e.g. to decode its values). Nothing raises. ``start`` and ``order``: go on from the batch at byte
    ``start`` of a segment, the batches before it in ``order`` (they read regularly and hold no compressed batch).
    """
    expect = expect or Expect()
    n = len(data)
    if n == 0 and expect.snapshot:  # written whole and renamed into place: empty, it lost its bytes
        yield KraftDecodeError("empty snapshot: no batches (Kafka writes a snapshot whole, with a header and a "
                               "footer)", source=source, position=0, kind="empty")
        return
    pos = start
    mv = memoryview(data)
    order = order or BatchOrder(expect.first_offset, expect.max_epoch)
    budget = EXPANSION_ALLOWANCE + EXPANSION_FACTOR * n  # decompressed bytes this file may still produce
    ends: list[tuple[bool, bytes | None] | None] = [None, None]  # (control, key) of the first and last record
    while pos < n:
        if n - pos < HEADER_SIZE:
            yield KraftDecodeError(f"Found {n - pos} invalid bytes at the end: a truncated batch header "
                                   f"(at least {HEADER_SIZE} bytes needed)", source=source, position=pos,
                                   kind="truncated")
            break
        (base_offset, length, epoch, magic, crc, attrs, lod, base_ts, max_ts, pid, pepoch, bseq,
         count) = _HEADER.unpack_from(data, pos)
        end = pos + LOG_OVERHEAD + length
        problem = None
        if magic != 2:
            problem = (f"unsupported magic {magic} (only RecordBatch v2 is used by KRaft)", "bad_magic")
        elif length < HEADER_SIZE - LOG_OVERHEAD:
            problem = (f"batch length {length} is smaller than a batch header", "bad_length")
        elif end > n:
            problem = (f"Found {n - pos} invalid bytes at the end: batch length {length} claims "
                       f"{length + LOG_OVERHEAD} bytes, {n - pos} left", "truncated")
        if problem is not None:
            nxt = _resync(data, pos, n)
            skipped = f"; skipped {nxt - pos} bytes" + (f" to the next valid batch at {nxt}" if nxt < n else "")
            yield KraftDecodeError(problem[0] + skipped, source=source, position=pos, kind=problem[1])
            order.lost()
            pos = nxt
            continue
        valid = (crc32c(mv[pos + 21 : end]) == crc) if verify_crc else True
        batch = Batch(pos, base_offset, length, epoch, magic, crc, valid, attrs, lod, base_ts, max_ts,
                      pid, pepoch, bseq, count, [])
        if not valid:
            batch.add_error(KraftDecodeError(
                f"CRC mismatch: stored {crc}, computed {crc32c(mv[pos + 21 : end])}",
                source=source, position=pos, kind="crc_mismatch"))
            order.lost()  # its last offset delta is not to be trusted either
        else:
            ahead = _EPOCH.unpack_from(data, end + 12)[0] if end + HEADER_SIZE <= n else None
            disorder = order.check(base_offset, lod, epoch, ahead)
            if disorder is not None:
                batch.add_error(KraftDecodeError(disorder, source=source, position=pos, kind="out_of_order"))
        if parse_records:
            budget -= _read_records(data, batch, end, source, budget)
            if batch.records:
                control = bool(attrs & CONTROL_MASK)
                if ends[0] is None:
                    ends[0] = (control, batch.records[0].key)
                ends[1] = (control, batch.records[-1].key)
            if on_batch is not None:
                on_batch(batch)
        yield batch
        pos = end
    if expect.snapshot and parse_records:
        incomplete = snapshot_frame_problem(ends[0], ends[1])
        if incomplete is not None:
            yield KraftDecodeError(incomplete, source=source, position=n, kind="snapshot_incomplete")


def _out_of_proportion(count: int, size: int, what: str) -> str | None:
    """Why ``count`` records cannot be in ``size`` bytes of records (None if they can)."""
    if count <= size // MIN_RECORD_SIZE:
        return None
    return (f"record count {count} is out of proportion: {size} bytes of {what} hold at most "
            f"{size // MIN_RECORD_SIZE} records ({MIN_RECORD_SIZE} bytes each at least)")


def _read_records(data: bytes, batch: Batch, end: int, source: str, budget: int) -> int:
    """Parse the records of ``batch``, decompressing them into at most ``budget`` bytes; the bytes decompressed."""
    start = batch.position + HEADER_SIZE
    codec = batch.attributes & COMPRESSION_MASK
    room = MAX_BATCH_SIZE_BYTES if codec else end - start
    too_many = _out_of_proportion(batch.records_count, room, "records (Kafka's largest batch)" if codec else "records")
    if too_many is not None:
        batch.add_error(KraftDecodeError(too_many, source=source, position=batch.position, kind="bad_count"))
        return 0
    if codec:
        limit = min(MAX_BATCH_SIZE_BYTES, budget)
        try:
            body = decompress(codec, data[start:end], limit)
        except DecompressionError as e:
            reason = str(e) if limit == MAX_BATCH_SIZE_BYTES else \
                f"{e}: the file's compressed batches expand past {EXPANSION_FACTOR} times its size"
            batch.add_error(KraftDecodeError(reason, source=source, position=start, kind="compression"))
            return 0
        too_many = _out_of_proportion(batch.records_count, len(body), "decompressed records")
        if too_many is not None:
            batch.add_error(KraftDecodeError(too_many, source=source, position=batch.position, kind="bad_count"))
            return len(body)
        buf, pos, stop, shift = body, 0, len(body), -1
    else:
        buf, pos, stop, shift = data, start, end, 0
    ts_override = batch.max_timestamp if batch.attributes & TIMESTAMP_TYPE_MASK else None
    try:
        _parse_records(buf, pos, stop, batch, shift, ts_override)
    except _RecordError as e:
        where = e.position if shift == 0 else start
        detail = "" if shift == 0 else f" (byte {e.position} of the decompressed records)"
        batch.add_error(KraftDecodeError(e.message + detail, source=source, position=where, kind="bad_record"))
    return stop if codec else 0


_NO_HEADERS: list[tuple[str, bytes | None]] = []  # shared by the (usual) records without headers


class _RecordError(Exception):
    def __init__(self, message: str, position: int):
        super().__init__(message)
        self.message = message
        self.position = position


def _parse_records(buf: bytes, pos: int, stop: int, batch: Batch, shift: int, ts_override: int | None) -> None:
    """Parse ``batch.records_count`` records from ``buf[pos:stop]`` into ``batch.records``."""
    records = batch.records
    append = records.append
    base_offset = batch.base_offset
    base_ts = batch.base_timestamp
    count = batch.records_count
    if count < 0:
        raise _RecordError(f"Found invalid record count {count}", pos)
    for _ in range(count):
        rstart = pos
        try:
            b = buf[pos]
            if b < 128:
                length = (b >> 1) ^ -(b & 1)
                pos += 1
            else:
                length, pos = read_varint(buf, pos)
            body_start = pos
            if length < 0 or pos + length > stop:
                raise _RecordError(f"Invalid record size: expected {length} bytes in record payload, but "
                                   f"the batch has only {stop - pos} remaining bytes", rstart)
            rend = pos + length
            pos += 1  # attributes (unused)
            b = buf[pos]
            if b < 128:
                ts_delta = (b >> 1) ^ -(b & 1)
                pos += 1
            else:
                ts_delta, pos = read_varlong(buf, pos)
            b = buf[pos]
            if b < 128:
                off_delta = (b >> 1) ^ -(b & 1)
                pos += 1
            else:
                off_delta, pos = read_varint(buf, pos)
            b = buf[pos]
            if b < 128:
                klen = (b >> 1) ^ -(b & 1)
                pos += 1
            else:
                klen, pos = read_varint(buf, pos)
            if klen < 0:
                key = None
            else:
                if pos + klen > rend:
                    raise _RecordError(f"record key of {klen} bytes overruns the record", pos)
                key = bytes(buf[pos : pos + klen])
                pos += klen
            b = buf[pos]
            if b < 128:
                vlen = (b >> 1) ^ -(b & 1)
                pos += 1
            else:
                vlen, pos = read_varint(buf, pos)
            if vlen < 0:
                value = None
            else:
                if pos + vlen > rend:
                    raise _RecordError(f"record value of {vlen} bytes overruns the record", pos)
                value = bytes(buf[pos : pos + vlen])
                pos += vlen
            b = buf[pos]
            if b < 128:
                nheaders = (b >> 1) ^ -(b & 1)
                pos += 1
            else:
                nheaders, pos = read_varint(buf, pos)
            headers: list[tuple[str, bytes | None]] = _NO_HEADERS
            if nheaders:
                headers = []
                if nheaders < 0:
                    raise _RecordError(f"Found invalid number of record headers {nheaders}", pos)
                pos = _read_headers(buf, pos, rend, nheaders, headers)
            if pos != rend:
                raise _RecordError(f"Invalid record size: expected to read {length} bytes in record payload, "
                                   f"but instead read {pos - body_start}", rstart)
        except IndexError:
            raise _RecordError("record ends past the end of the batch", rstart) from None
        except ValueError as e:
            raise _RecordError(str(e), rstart) from None
        append(Record(base_offset + off_delta, ts_override if ts_override is not None else base_ts + ts_delta,
                      rstart if shift == 0 else -1, key, value, headers))
    if pos != stop:
        raise _RecordError(f"Found {stop - pos} byte(s) after the {count} records the batch declares", pos)


def _read_headers(buf: bytes, pos: int, rend: int, n: int, out: list[tuple[str, bytes | None]]) -> int:
    for _ in range(n):
        klen, pos = read_varint(buf, pos)
        if klen < 0:
            raise _RecordError("Invalid negative header key size " + str(klen), pos)
        if pos + klen > rend:
            raise _RecordError(f"header key of {klen} bytes overruns the record", pos)
        hkey = buf[pos : pos + klen].decode("utf-8", "replace")
        pos += klen
        vlen, pos = read_varint(buf, pos)
        if vlen < 0:
            out.append((hkey, None))
            continue
        if pos + vlen > rend:
            raise _RecordError(f"header value of {vlen} bytes overruns the record", pos)
        out.append((hkey, bytes(buf[pos : pos + vlen])))
        pos += vlen
    return pos
