"""A whole segment or snapshot, column-wise: batch headers and record positions as numpy arrays.

``read_columns`` is what bulk readers (the land pass) use. Well-formed files, which is nearly all of
them (uncompressed batches, valid CRCs, no record headers, every length consistent), are walked
vectorized: one Python step and one CRC call per batch, then the records' varints are read for all
records at once. Anything else (a compressed batch, a bad CRC, bad framing, a record that does not add
up) makes the whole file go through the reference walker (``kraftlog.wire.batches.iter_batches``),
whose batches are put into the same columns, so both give identical columns and identical problems.

Records are identified by value: ``distinct`` holds each distinct (control, key, value, batch
problems) once and ``code`` says which one each record is (NoOps, most of a real log, share one).
"""

from __future__ import annotations

import itertools
import struct
from collections.abc import Iterator
from dataclasses import dataclass, replace

import numpy as np
from crc32c import crc32c

from kraftlog.wire.batches import (
    COMPRESSION_MASK,
    CONTROL_MASK,
    HEADER_SIZE,
    LOG_OVERHEAD,
    TIMESTAMP_TYPE_MASK,
    Batch,
    BatchOrder,
    Expect,
    iter_batches,
    snapshot_frame_problem,
)
from kraftlog.wire.errors import KraftDecodeError
from kraftlog.wire.files import collect, expect_of
from kraftlog.wire.varint import read_varint

# batch header fields as they sit in the file (big-endian, packed): see ``kraftlog.wire.batches``
HEADER_DTYPE = np.dtype([
    ("base_offset", ">i8"), ("batch_length", ">i4"), ("partition_leader_epoch", ">i4"), ("magic", "i1"),
    ("crc", ">u4"), ("attributes", ">i2"), ("last_offset_delta", ">i4"), ("base_timestamp", ">i8"),
    ("max_timestamp", ">i8"), ("producer_id", ">i8"), ("producer_epoch", ">i2"), ("base_sequence", ">i4"),
    ("records_count", ">i4")])
_LENGTH = struct.Struct(">i")
_EPOCH = _LENGTH  # a batch's partition leader epoch, 12 bytes in
_PAD = 16  # zero bytes after the data, so a varint read near the end stays inside the buffer

Value = tuple[bool, bytes | None, bytes | None, tuple[KraftDecodeError, ...]]  # control, key, value, problems


@dataclass(frozen=True)
class LogColumns:
    """A file's batches (one row each, file order) and records (one row each, log order).

    ``headers``: the batch headers (``HEADER_DTYPE``); ``batch_errors``: each batch's problems (None
    when it has none); ``errors``: every problem of the file (framing, then per batch), in file order.
    Per record: ``batch`` (its batch row), ``offset`` (offset delta applied; a position in a snapshot),
    ``timestamp`` (ms), ``position`` (byte position in the file, -1 inside compressed data) and ``code``
    (its entry in ``distinct``).
    """

    positions: np.ndarray
    headers: np.ndarray
    crc_valid: np.ndarray
    batch_errors: list[list[KraftDecodeError] | None]
    errors: list[KraftDecodeError]
    batch: np.ndarray
    offset: np.ndarray
    timestamp: np.ndarray
    position: np.ndarray
    code: np.ndarray
    distinct: list[Value]
    vectorized: bool  # read by the vectorized walk (else by the reference walker)

    @property
    def control(self) -> np.ndarray:
        """Per batch: is it a control batch."""
        return (self.headers["attributes"].astype(np.int16) & CONTROL_MASK) != 0

    @property
    def records_read(self) -> np.ndarray:
        """Per batch: the records read from it."""
        return np.bincount(self.batch, minlength=len(self.positions)).astype(np.int32)


def batch_headers(content: bytes, positions: list[int] | np.ndarray) -> np.ndarray:
    """The RecordBatch headers at ``positions`` of ``content`` as one structured array (vectorized)."""
    if not len(positions):
        return np.empty(0, HEADER_DTYPE)
    gather = np.asarray(positions, np.int64)[:, None] + np.arange(HEADER_DTYPE.itemsize)
    return np.frombuffer(content, np.uint8)[gather].view(HEADER_DTYPE).ravel()


def read_columns(data: bytes, source: str = "", *, vectorized: bool = True) -> LogColumns:
    """Every batch and record of ``data`` column-wise, with every problem (nothing raises).

    ``vectorized=False`` always uses the reference walker (the vectorized walk must give the same).
    """
    expect = expect_of(source)
    return (_vectorized(data, expect) if vectorized else None) or _from_batches(data, source, expect)


# a segment is read this many bytes of batches at a time where it reads regularly (``read_ranges``)
RANGE_BYTES = 8 << 20


def read_ranges(data: bytes, source: str = "", range_bytes: int | None = None, *, after: int | None = None,
                at: int = 0, epoch: int | None = None) -> Iterator[LogColumns] | None:
    """A segment's batches column-wise, about ``range_bytes`` of them at a time, in file order (positions are the
    file's): the columns in memory follow the range, not the file (a segment grows to 1 GiB).

    Each range goes on from the one before (its first batch the one after the last offset before, no epoch below
    the one before, the epoch of the batch after it known), so every range reading regularly gives the whole file's
    columns. From the first range that does not, the rest comes as one last item: the reference walker's columns
    of the whole file, from that range's first batch on. Snapshots and files of at most ``range_bytes``: one item,
    ``read_columns``. With ``at``: the batches from byte ``at`` on (where a run read a grown segment up to), the
    batches before taken as read in order up to log offset ``after`` at epoch ``epoch`` (the last batch's before
    ``at``; the reference walker goes on from there where the bytes do not read regularly), or None without
    ``after`` and ``epoch`` or bytes after ``at``.
    ``range_bytes``: ``RANGE_BYTES`` unless given.
    """
    range_bytes = range_bytes or RANGE_BYTES
    expect = expect_of(source)
    if at:
        if not 0 < at < len(data) or epoch is None or after is None:
            return None
        expect = Expect(first_offset=after + 1)
    elif expect.snapshot or len(data) <= range_bytes:
        return iter((read_columns(data, source),))
    ranges = _ranges(data, expect, at, epoch, range_bytes)
    return _regular_then_whole(data, source, next(ranges), ranges)


def _regular_then_whole(data: bytes, source: str, first: tuple[int, LogColumns | BatchOrder],
                        rest: Iterator[tuple[int, LogColumns | BatchOrder]]) -> Iterator[LogColumns]:
    """The ranges that read regularly, then (from the first that does not) the reference walker's columns of the
    rest of the file, going on from the order of the batches before."""
    for at, cols in itertools.chain((first,), rest):
        if isinstance(cols, BatchOrder):
            yield _from_batches(data, source, expect_of(source), at, cols)
            return
        yield cols


def _ranges(data: bytes, expect: Expect, at: int, epoch: int | None, range_bytes: int
            ) -> Iterator[tuple[int, LogColumns | BatchOrder]]:
    """(position, columns) of each range from ``at`` on, while they read regularly; then (position, the order of
    the batches before) of the first that does not, and no more."""
    first_offset, n, seen = expect.first_offset, len(data), int(at > 0)  # seen: whether batches come before
    while at < n:
        end = _range_end(data, at, range_bytes)
        then = int(_EPOCH.unpack_from(data, end + 12)[0]) if end + HEADER_SIZE <= n else None
        cols = _vectorized(data[at:end], Expect(first_offset=first_offset), epoch, then)
        if cols is None:
            yield at, BatchOrder(first_offset, expect.max_epoch, epoch, seen)
            return
        yield at, moved(cols, at)
        last = cols.headers[-1]
        first_offset = int(last["base_offset"]) + int(last["last_offset_delta"]) + 1
        epoch, at, seen = int(last["partition_leader_epoch"]), end, seen + len(cols.positions)


def _range_end(data: bytes, at: int, range_bytes: int) -> int:
    """Where the batches from ``at`` that fit in ``range_bytes`` end (at least one batch); the end of the data
    where the framing does not hold before (that range will not read regularly)."""
    n, limit, end = len(data), at + range_bytes, at
    unpack = _LENGTH.unpack_from
    while end <= n - HEADER_SIZE:
        (length,) = unpack(data, end + 8)
        nxt = end + LOG_OVERHEAD + length
        if length < HEADER_SIZE - LOG_OVERHEAD or nxt > n:
            return n
        if nxt > limit and end > at:
            return end
        end = nxt
    return n


def moved(cols: LogColumns, at: int) -> LogColumns:
    """Columns read from the bytes at ``at`` of a file, with the file's positions (of its problems too)."""
    if not at:
        return cols
    out = replace(cols, positions=cols.positions + at, position=np.where(cols.position >= 0, cols.position + at, -1))
    if cols.vectorized:  # read regularly: no problem to move
        return out

    def error(e: KraftDecodeError) -> KraftDecodeError:
        return e.at(e.source, e.position + at) if e.position >= 0 else e
    return replace(out, errors=[error(e) for e in cols.errors],
                   batch_errors=[None if b is None else [error(e) for e in b] for b in cols.batch_errors],
                   distinct=[(c, k, v, tuple(map(error, errs))) if errs else (c, k, v, errs)
                             for c, k, v, errs in cols.distinct])


# -- the reference walker's batches, as columns -----------------------------------------------------

class DistinctValues:
    """Distinct record values in order of first use, each with its entry number (``code``)."""

    def __init__(self) -> None:
        self.values: list[Value] = []
        self._index: dict[Value, int] = {}

    def code(self, v: Value) -> int:
        """The entry of ``v``; records of a corrupt batch are never shared with a good copy: own entry."""
        c = None if v[3] else self._index.get(v)
        if c is None:
            c = len(self.values)
            self.values.append(v)
            if not v[3]:
                self._index[v] = c
        return c


def _from_batches(data: bytes, source: str, expect: Expect, start: int = 0, order: BatchOrder | None = None
                  ) -> LogColumns:
    batches: list[Batch] = []
    errors: list[KraftDecodeError] = []
    collect(iter_batches(data, source, expect=expect, start=start, order=order), batches, errors)
    pairs = [(i, b, r) for i, b in enumerate(batches) for r in b.records]
    distinct = DistinctValues()
    codes = [distinct.code((bool(b.attributes & CONTROL_MASK), r.key, r.value, b.errors)) for _, b, r in pairs]
    positions = [b.position for b in batches]
    return LogColumns(
        np.asarray(positions, np.int64), batch_headers(data, positions),
        np.asarray([b.crc_valid for b in batches], np.bool_), [list(b.errors) or None for b in batches], errors,
        np.asarray([i for i, _, _ in pairs], np.int64), np.asarray([r.offset for _, _, r in pairs], np.int64),
        np.asarray([r.timestamp for _, _, r in pairs], np.int64),
        np.asarray([r.position for _, _, r in pairs], np.int64), np.asarray(codes, np.int64), distinct.values,
        False)


# -- the vectorized walk of well-formed files -------------------------------------------------------

class _Irregular(Exception):
    """The file needs the reference walker."""


def _vectorized(data: bytes, expect: Expect, epoch: int | None = None, then: int | None = None
                ) -> LogColumns | None:
    try:
        return _walk(data, expect, epoch, then)
    except _Irregular:
        return None


def _batch_frames(data: bytes, crcs: bool = True) -> tuple[list[int], list[int]]:
    """Positions and (with ``crcs``) computed CRC-32Cs of the batches, following each batch's length (one step per
    batch)."""
    n = len(data)
    unpack = _LENGTH.unpack_from
    mv = memoryview(data)
    positions: list[int] = []
    computed: list[int] = []
    pos = 0
    while pos <= n - HEADER_SIZE:
        (length,) = unpack(data, pos + 8)
        if length < HEADER_SIZE - LOG_OVERHEAD:
            raise _Irregular
        end = pos + LOG_OVERHEAD + length
        positions.append(pos)
        if crcs:
            computed.append(crc32c(mv[pos + 21:end]))
        pos = end
    if pos != n:
        raise _Irregular  # a truncated tail
    return positions, computed


def framed_headers(data: bytes) -> np.ndarray | None:
    """The batch headers of a file whose framing holds (every length fits, no truncated tail, magic 2), as
    ``batch_headers`` gives them, CRCs not checked; None for any other file (the reference walker tells why)."""
    try:
        positions, _ = _batch_frames(data, crcs=False)
    except _Irregular:
        return None
    h = batch_headers(data, positions)
    return h if bool(np.all(h["magic"] == 2)) else None


def _varints(buf: np.ndarray, pos: np.ndarray, max_bytes: int) -> tuple[np.ndarray, np.ndarray]:
    """Zigzag varints at ``pos``: (values, sizes); longer than ``max_bytes`` is irregular."""
    raw = buf[pos].astype(np.uint64)
    more = np.flatnonzero(raw >= 0x80)
    raw &= np.uint64(0x7F)
    size = np.ones(len(pos), np.int64)
    i = 1
    while more.size:
        if i >= max_bytes:
            raise _Irregular
        b = buf[pos[more] + i].astype(np.uint64)
        raw[more] |= (b & np.uint64(0x7F)) << np.uint64(7 * i)
        size[more] += 1
        more = more[b >= 0x80]
        i += 1
    return (raw >> np.uint64(1)).astype(np.int64) ^ -(raw & np.uint64(1)).astype(np.int64), size


def _check(ok: np.ndarray | bool) -> None:
    if not np.all(ok):
        raise _Irregular


def _in_order(h: np.ndarray, expect: Expect, epoch: int | None = None, then: int | None = None) -> bool:
    """Whether every batch is where the file's name and the batches before put it (``BatchOrder``; ``epoch``: that
    of a batch before these, ``then``: of the batch after them)."""
    order = BatchOrder(expect.first_offset, expect.max_epoch, epoch)
    check = order.check
    epochs = h["partition_leader_epoch"].tolist()
    if not epochs:
        return True
    return not any(check(b, d, e, n) for b, d, e, n in zip(
        h["base_offset"].tolist(), h["last_offset_delta"].tolist(), epochs, [*epochs[1:], then], strict=True))


def _walk(data: bytes, expect: Expect, epoch: int | None = None, then: int | None = None) -> LogColumns:
    if not data and expect.snapshot:
        raise _Irregular  # an empty snapshot is a problem the reference walker reports
    at, crcs = _batch_frames(data)
    positions = np.asarray(at, np.int64)
    h = batch_headers(data, positions)
    attrs = h["attributes"].astype(np.int64)
    _check(h["magic"] == 2)
    _check((attrs & COMPRESSION_MASK) == 0)
    _check(np.asarray(crcs, np.int64) == h["crc"].astype(np.int64))
    _check(_in_order(h, expect, epoch, then))
    ends = positions + LOG_OVERHEAD + h["batch_length"].astype(np.int64)
    buf = np.frombuffer(data + bytes(_PAD), np.uint8)
    counts = h["records_count"].astype(np.int64)
    batch, start, body, end = _record_frames(data, buf, positions + HEADER_SIZE, ends, counts)

    p = body + 1  # attributes: unused
    ts_delta, s = _varints(buf, p, 10)
    p = p + s
    offset_delta, s = _varints(buf, p, 5)
    p = p + s
    key_len, s = _varints(buf, p, 5)
    key_at = p + s
    p = key_at + np.maximum(key_len, 0)
    _check((key_len >= -1) & (p <= end))
    value_len, s = _varints(buf, p, 5)
    value_at = p + s
    p = value_at + np.maximum(value_len, 0)
    _check((value_len >= -1) & (p <= end))
    headers, s = _varints(buf, p, 5)
    _check((headers == 0) & (p + s == end))  # record headers: the reference walker reads them

    timestamp = np.where((attrs[batch] & TIMESTAMP_TYPE_MASK) != 0, h["max_timestamp"].astype(np.int64)[batch],
                         h["base_timestamp"].astype(np.int64)[batch] + ts_delta)
    control = (attrs[batch] & CONTROL_MASK) != 0
    if expect.snapshot:
        def key(i: int) -> tuple[bool, bytes | None]:
            return bool(control[i]), data[key_at[i]:key_at[i] + key_len[i]] if key_len[i] >= 0 else None
        _check(len(control) > 0 and snapshot_frame_problem(key(0), key(len(control) - 1)) is None)
    code, distinct = _distinct(data, buf, control, key_at, key_len, value_at, value_len)
    return LogColumns(positions, h, np.ones(len(positions), np.bool_), [None] * len(positions), [], batch,
                      h["base_offset"].astype(np.int64)[batch] + offset_delta, timestamp, start, code, distinct, True)


def _record_frames(data: bytes, buf: np.ndarray, first: np.ndarray, ends: np.ndarray, counts: np.ndarray
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(batch row, start, body start, end) of every record in file order.

    The first record of every batch is framed in numpy; the further records of a batch (snapshots hold
    many per batch, log batches mostly one) one Python step each, as each starts where the last ends.
    """
    _check(counts >= 0)
    active = np.flatnonzero(counts > 0)
    p = first[active]
    length, s = _varints(buf, p, 5)
    end = p + s + length
    _check((length >= 0) & (end <= ends[active]))
    more = np.flatnonzero(counts[active] > 1)
    if more.size:
        rows, starts, lengths, sizes = _further_records(data, active[more].tolist(), end[more].tolist(),
                                                        ends[active[more]].tolist(), counts[active[more]].tolist())
        n_more = np.asarray(lengths, np.int64)
        s_more = np.asarray(sizes, np.int64)
        batch = np.concatenate([active, np.asarray(rows, np.int64)])
        start = np.concatenate([p, np.asarray(starts, np.int64)])
        body = np.concatenate([p + s, start[p.size:] + s_more])
        end = np.concatenate([end, body[p.size:] + n_more])
        order = np.argsort(start, kind="stable")
        batch, start, body, end = batch[order], start[order], body[order], end[order]
    else:
        batch, start, body = active, p, p + s
    is_last = np.append(batch[1:] != batch[:-1], True) if batch.size else np.empty(0, np.bool_)
    last = first.copy()  # batches without records end where their records would start
    last[batch[is_last]] = end[is_last]
    _check(last == ends)
    return batch, start, body, end


def _further_records(data: bytes, rows: list[int], at: list[int], ends: list[int], counts: list[int]
                     ) -> tuple[list[int], list[int], list[int], list[int]]:
    """(batch row, start, length, length's size) of the 2nd and later records of the batches ``rows``."""
    out_rows: list[int] = []
    starts: list[int] = []
    lengths: list[int] = []
    sizes: list[int] = []
    for row, pos, stop, count in zip(rows, at, ends, counts, strict=True):
        for _ in range(count - 1):
            if pos >= stop:
                raise _Irregular
            b = data[pos]
            if b < 0x80:
                length, nxt = (b >> 1) ^ -(b & 1), pos + 1
            else:
                try:
                    length, nxt = read_varint(data, pos)
                except (IndexError, ValueError):
                    raise _Irregular from None
            if length < 0 or nxt + length > stop:
                raise _Irregular
            out_rows.append(row)
            starts.append(pos)
            lengths.append(length)
            sizes.append(nxt - pos)
            pos = nxt + length
    return out_rows, starts, lengths, sizes


def _distinct(data: bytes, buf: np.ndarray, control: np.ndarray, key_at: np.ndarray, key_len: np.ndarray,
              value_at: np.ndarray, value_len: np.ndarray) -> tuple[np.ndarray, list[Value]]:
    """Each record's code and the distinct (control, key, value) entries, in order of first use.

    Key-less values of up to 8 bytes (NoOps and other empty bodies) are grouped by their bytes in numpy;
    the others through a dict of their bytes.
    """
    code = np.empty(len(control), np.int64)
    distinct = DistinctValues()
    small = (key_len < 0) & (value_len <= 8)
    rows = np.flatnonzero(small)
    if rows.size:
        width = value_len[rows]
        gathered = buf[value_at[rows][:, None] + np.arange(8)]
        gathered[np.arange(8) >= width[:, None]] = 0
        word = np.ascontiguousarray(gathered).view("<u8").ravel()
        kind = (width + 1) * 2 + control[rows]  # value length (-1..8) and control
        group = np.empty(rows.size, [("kind", "<i8"), ("word", "<u8")])
        group["kind"], group["word"] = kind, word
        _, first, inverse = np.unique(group, return_index=True, return_inverse=True)
        entry = np.empty(first.size, np.int64)
        for g in np.argsort(first, kind="stable").tolist():  # distinct entries in order of first use
            r = int(rows[first[g]])
            at, length = int(value_at[r]), int(value_len[r])
            entry[g] = distinct.code((bool(control[r]), None, None if length < 0 else data[at:at + length], ()))
        code[rows] = entry[inverse.ravel()]
    other = np.flatnonzero(~small)
    if other.size:
        code[other] = [distinct.code((ctl, data[ka:ka + kl] if kl >= 0 else None,
                                      data[va:va + vl] if vl >= 0 else None, ()))
                       for ctl, ka, kl, va, vl in zip(control[other].tolist(), key_at[other].tolist(),
                                                      key_len[other].tolist(), value_at[other].tolist(),
                                                      value_len[other].tolist(), strict=True)]
    return code, distinct.values
