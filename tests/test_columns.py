"""The column-wise reader (``kraftlog.wire.columns``): the vectorized walk equals the reference walker."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import CORPUS, SHARED, damaged_logs, joined_sample_log, need
from encoder import batch, control_key, record

from kraftlog.wire.columns import LogColumns, read_columns

NOOP = bytes([1, 20, 0, 0])
LEADER = bytes.fromhex("0000000000010200000001000200000001000000")
LONG = bytes([1, 2, 0]) + bytes(range(40))  # a value longer than 8 bytes (read through the dict)


def _equal(a: LogColumns, b: LogColumns) -> None:
    for name in ("positions", "crc_valid", "batch", "offset", "timestamp", "position"):
        assert np.array_equal(getattr(a, name), getattr(b, name)), name
    assert a.headers.tobytes() == b.headers.tobytes()
    assert [e.describe() for e in a.errors] == [e.describe() for e in b.errors]
    assert [[e.describe() for e in es] if es else None for es in a.batch_errors] == \
        [[e.describe() for e in es] if es else None for es in b.batch_errors]
    assert _values(a) == _values(b)


def _values(c: LogColumns) -> list[tuple[object, ...]]:
    """Each record's (control, key, value, problems), problems as text."""
    return [(ctl, k, v, [e.describe() for e in p]) for ctl, k, v, p in (c.distinct[i] for i in c.code.tolist())]


def _both(data: bytes) -> tuple[LogColumns, LogColumns]:
    return read_columns(data, "f.log"), read_columns(data, "f.log", vectorized=False)


def _same_summary(data: bytes, path: str = "f.log") -> None:
    """The ingest's file summary from the headers gathered at once equals the one from the batch-by-batch walk."""
    from kraftlog.tables import rows

    fast = rows.summarize(path, data, len(data) // 2)
    with pytest.MonkeyPatch.context() as m:
        m.setattr(rows, "framed_headers", lambda _: None)
        walked = rows.summarize(path, data, len(data) // 2)
    assert walked.pop("prefix_epoch") is None  # only where the framing holds (what a run reads on from)
    assert fast.pop("prefix_epoch") is None or rows.framed_headers(data) is not None
    assert fast == walked


def _well_formed() -> bytes:
    """What real logs hold: one NoOp per batch, batches of many records, keys, nulls, log-append time."""
    out = b"".join(batch(i, [record(0, NOOP, timestamp_delta=0)], epoch=3, base_timestamp=1_700_000_000_000 + i)
                   for i in range(4))
    out += batch(4, [record(i, LONG if i % 3 else NOOP, timestamp_delta=i * 5) for i in range(300)], epoch=3)
    out += batch(304, [record(0, LEADER, key=control_key(2))], control=True, epoch=3)
    out += batch(305, [record(0, None), record(1, b"", key=b"k"), record(2, bytes([1, 17, 0, 0, 0, 0, 0, 9]))],
                 log_append_time=True, max_timestamp=1_800_000_000_000, epoch=3)
    out += batch(308, [record(0, NOOP, timestamp_delta=1 << 40)], base_timestamp=5, epoch=3)  # a 6-byte varlong
    return out


def test_well_formed_files_are_walked_vectorized_and_equal_the_reference() -> None:
    fast, ref = _both(_well_formed())
    assert fast.vectorized and not ref.vectorized
    _equal(fast, ref)
    _same_summary(_well_formed())
    assert len(fast.offset) == 309 and fast.offset.tolist() == list(range(309))
    assert fast.records_read.tolist() == [1, 1, 1, 1, 300, 1, 3, 1]
    assert fast.timestamp[305:308].tolist() == [1_800_000_000_000] * 3
    assert fast.distinct[fast.code[305]][2] is None and fast.distinct[fast.code[306]][1] == b"k"
    assert len({fast.code[i] for i in range(4)}) == 1  # the NoOps share one entry


@pytest.mark.parametrize("damage", ["truncated", "bad_crc", "compressed", "record_headers", "short_records",
                                    "extra_bytes", "bad_magic", "empty_batch"])
def test_irregular_files_go_through_the_reference_walker(damage: str) -> None:
    good = batch(0, [record(0, NOOP)]) + batch(1, [record(0, LONG), record(1, NOOP)])
    one = batch(3, [record(0, NOOP)])
    data = {
        "truncated": good[:-5],
        "bad_crc": good[:-1] + bytes([good[-1] ^ 1]),
        "compressed": good + batch(3, [record(0, NOOP)], codec=1),
        "record_headers": good + batch(3, [record(0, NOOP, headers=[("h", b"v")])]),
        "short_records": good + one[:57] + (2).to_bytes(4, "big") + one[61:],  # declares 2 records, holds 1
        "extra_bytes": good + b"\x00" * 7,
        "bad_magic": good[:16] + b"\x01" + good[17:],
        "empty_batch": good + batch(3, []),
    }[damage]
    fast, ref = _both(data)
    _equal(fast, ref)
    _same_summary(data)
    if damage != "empty_batch":
        assert not fast.vectorized


@pytest.mark.slow
def test_every_corpus_and_scenario_file_reads_the_same_both_ways() -> None:
    from kraftlog.wire.discover import log_files

    files = list(log_files([need(CORPUS), need(SHARED / "scenarios")]))
    assert len(files) > 400
    vectorized = 0
    for path, _ in files:
        data = Path(path).read_bytes()
        fast, ref = read_columns(data, str(path)), read_columns(data, str(path), vectorized=False)
        _equal(fast, ref)
        _same_summary(data, str(path))
        vectorized += fast.vectorized
    assert vectorized >= len(files) * 0.9  # real logs are well-formed: nearly all take the vectorized walk


def test_a_grown_segments_new_part_reads_as_the_same_batches_of_the_whole_file() -> None:
    """``read_ranges`` from each batch boundary (where a run read the segment up to) gives the whole file's batches
    and records from there, at the file's positions; the header summary finds the epoch of the batch before it,
    and none where the position is not a batch boundary."""
    from conftest import SAMPLE

    from kraftlog.tables.rows import summarize
    from kraftlog.wire.columns import read_ranges

    path = next(SAMPLE.rglob("node-1/__cluster_metadata-0/*.log"))
    data = path.read_bytes()
    whole = read_columns(data, str(path))
    for b in range(1, len(whole.positions), max(1, len(whole.positions) // 25)):
        at = int(whole.positions[b])
        after = int(whole.offset[whole.batch < b].max())
        tail = _concatenated(list(read_ranges(data, str(path), 5_000, after=after, at=at,
                                              epoch=int(whole.headers["partition_leader_epoch"][b - 1])) or ()))
        assert tail.vectorized and not tail.errors, b
        rows = whole.batch >= b
        assert tail.positions.tolist() == whole.positions[b:].tolist()
        assert tail.offset.tolist() == whole.offset[rows].tolist()
        assert tail.position.tolist() == whole.position[rows].tolist()
        assert tail.timestamp.tolist() == whole.timestamp[rows].tolist()
        assert [tail.distinct[c] for c in tail.code] == [whole.distinct[c] for c in whole.code[rows]]
        epoch = summarize(str(path), data, at)["prefix_epoch"]
        assert epoch == int(whole.headers["partition_leader_epoch"][b - 1])
        assert summarize(str(path), data, at + 1)["prefix_epoch"] is None  # not a batch boundary


def _concatenated(parts: list[LogColumns]) -> LogColumns:
    """Columns read a range at a time, as one file's."""
    from kraftlog.wire.columns import HEADER_DTYPE, DistinctValues

    distinct = DistinctValues()
    codes = [distinct.code(p.distinct[c]) for p in parts for c in p.code.tolist()]
    first = np.cumsum([0] + [len(p.positions) for p in parts[:-1]])
    return LogColumns(
        np.concatenate([p.positions for p in parts]), np.concatenate([p.headers for p in parts]).astype(HEADER_DTYPE),
        np.concatenate([p.crc_valid for p in parts]), [e for p in parts for e in p.batch_errors],
        [e for p in parts for e in p.errors], np.concatenate([p.batch + f for p, f in zip(parts, first, strict=True)]),
        *(np.concatenate([getattr(p, n) for p in parts]) for n in ("offset", "timestamp", "position")),
        np.asarray(codes, np.int64), distinct.values, all(p.vectorized for p in parts))


def test_a_segment_read_a_range_at_a_time_gives_the_whole_files_columns() -> None:
    """``read_ranges`` (the land pass's reader: the columns in memory follow a range of batches, not a 1 GiB segment)
    gives, put together, exactly the whole file's columns and problems, for clean files and damaged ones (the damage
    at any range boundary: ranges of a few batches), from the start and from any batch boundary on."""
    import kraftlog.wire.columns as columns
    from kraftlog.wire.columns import read_ranges

    data, name = joined_sample_log()
    assert len(data) > 100_000
    for label, mutant in damaged_logs(data):
        whole = read_columns(mutant, name)
        assert whole.vectorized == (label == "clean"), label
        for range_bytes in (1, 700, 5_000, 40_000):  # 1: a batch a range
            parts = list(read_ranges(mutant, name, range_bytes) or ())
            if label == "clean":
                assert len(parts) >= min(len(mutant) // range_bytes, len(whole.positions)), range_bytes
            _equal(_concatenated(parts), whole)
    walked: list[int] = []
    with pytest.MonkeyPatch.context() as m:  # the reference walker takes over where the damage is, not from the start
        real = columns.iter_batches
        m.setattr(columns, "iter_batches", lambda *a, **k: (walked.append(1) or b for b in real(*a, **k)))
        torn = list(read_ranges(data[:-5], name, 5_000) or ())
    assert 0 < len(walked) < len(read_columns(data, name).positions) / 10 and len(torn) > 20
    clean = read_columns(data, name)
    for b in (1, len(clean.positions) // 3, len(clean.positions) - 1):
        at, after = int(clean.positions[b]), int(clean.offset[clean.batch < b].max())
        epoch = int(clean.headers["partition_leader_epoch"][b - 1])
        tail = list(read_ranges(data, name, 3_000, after=after, at=at, epoch=epoch) or ())
        joined = _concatenated(tail)
        assert joined.positions.tolist() == clean.positions[b:].tolist()
        assert joined.offset.tolist() == clean.offset[clean.batch >= b].tolist()
        odd = _concatenated(list(read_ranges(data, name, 3_000, after=after + 1, at=at, epoch=epoch) or ()))
        assert f"base offset {after + 1} where the batches before lead to {after + 2}" in odd.errors[0].describe()
    assert len(list(read_ranges(data, name, 3_000) or ())) > 30
    assert len(list(read_ranges(data, f"{5:020d}-{2:010d}.checkpoint", 3_000) or ())) == 1  # a snapshot is read whole


def _from_batch(whole: LogColumns, b: int) -> LogColumns:
    """``whole``'s columns and problems from its batch ``b`` on."""
    rows = whole.batch >= b
    at = int(whole.positions[b])
    return LogColumns(whole.positions[b:], whole.headers[b:], whole.crc_valid[b:], whole.batch_errors[b:],
                      [e for e in whole.errors if e.position >= at], whole.batch[rows] - b, whole.offset[rows],
                      whole.timestamp[rows], whole.position[rows], whole.code[rows], whole.distinct, whole.vectorized)


def test_a_grown_segment_read_from_where_it_was_read_to_gives_the_whole_files_columns_from_there() -> None:
    """A grown segment is read from the end of what an earlier run read without a problem (``Ingested``: the last
    offset, the byte and the epoch there), from the file's bytes or from a window of them starting at the batch
    before (``start``: a grown segment read from its last batch landed on). Both give the whole file's columns and
    problems from there, positions the file's, whatever the damage after: the reference walker goes on from the
    batches before as the whole file's walk does."""
    from kraftlog.tables.rows import Ingested

    data, name = joined_sample_log()
    for _, mutant in damaged_logs(data):
        whole = read_columns(mutant, name)
        damaged = [i for i, e in enumerate(whole.batch_errors) if e] or [len(whole.positions) - 1]
        for b in sorted({1, max(1, damaged[0] // 2), damaged[0]}):
            after = int(whole.offset[whole.batch < b].max())
            grown = Ingested(after, int(whole.positions[b]), int(whole.headers["partition_leader_epoch"][b - 1]))
            expected = _from_batch(whole, b)
            _equal(_concatenated(list(grown.ranges(mutant, name) or ())), expected)
            start = int(whole.positions[b - 1])
            _equal(_concatenated(list(grown.ranges(mutant[start:], name, start) or ())), expected)
