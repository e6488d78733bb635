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
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from crc32c import crc32c

from kraftlog.wire.compression import DecompressionError, decompress, default_limit
from kraftlog.wire.errors import KraftDecodeError
from kraftlog.wire.varint import read_varint, read_varlong

if TYPE_CHECKING:
    from kraftlog.wire.messages import Decoded

LOG_OVERHEAD = 12  # baseOffset + batchLength
HEADER_SIZE = 61  # RECORD_BATCH_OVERHEAD
_HEADER = struct.Struct(">qiibIhiqqqhii")
_BASE_LEN = struct.Struct(">qi")

COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_MASK = 0x10
CONTROL_MASK = 0x20
DELETE_HORIZON_MASK = 0x40


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
                 on_batch: Callable[[Batch], object] | None = None) -> Iterator[Batch | KraftDecodeError]:
    """Yield every batch of ``data`` (a segment or snapshot file) and every problem, in file order.

    Problems with the framing of the file (truncated tail, impossible length, bad magic) are yielded
    as ``KraftDecodeError``; problems inside one batch (CRC mismatch, a bad record) are attached to
    that batch's ``errors``. ``on_batch`` runs on each batch before it is yielded (e.g. to decode its
    values). Nothing raises.
    """
    n = len(data)
    pos = 0
    mv = memoryview(data)
    while pos < n:
        if n - pos < HEADER_SIZE:
            yield KraftDecodeError(f"Found {n - pos} invalid bytes at the end: a truncated batch header "
                                   f"(at least {HEADER_SIZE} bytes needed)", source=source, position=pos,
                                   kind="truncated")
            return
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
            pos = nxt
            continue
        valid = (crc32c(mv[pos + 21 : end]) == crc) if verify_crc else True
        batch = Batch(pos, base_offset, length, epoch, magic, crc, valid, attrs, lod, base_ts, max_ts,
                      pid, pepoch, bseq, count, [])
        if not valid:
            batch.add_error(KraftDecodeError(
                f"CRC mismatch: stored {crc}, computed {crc32c(mv[pos + 21 : end])}",
                source=source, position=pos, kind="crc_mismatch"))
        if parse_records:
            _read_records(data, batch, end, source)
            if on_batch is not None:
                on_batch(batch)
        yield batch
        pos = end


def _read_records(data: bytes, batch: Batch, end: int, source: str) -> None:
    start = batch.position + HEADER_SIZE
    codec = batch.attributes & COMPRESSION_MASK
    if codec:
        try:
            body = decompress(codec, data[start:end], default_limit(end - start))
        except DecompressionError as e:
            batch.add_error(KraftDecodeError(str(e), source=source, position=start, kind="compression"))
            return
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
