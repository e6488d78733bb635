"""The column-wise land pass (``kraftlog.tables.rows.FileLander``), without Spark."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest
from encoder import batch, control_key, metadata_value, record

from kraftlog.schema.registry import load_schemas
from kraftlog.tables.rows import FileIdentity, FileLander, FileRef, KeepSpec, value_hash
from kraftlog.wire.batches import Batch, iter_batches
from kraftlog.wire.columns import batch_headers

S = load_schemas()
NOOP = bytes([1, 20, 0, 0])
LEADER = bytes.fromhex("0000000000010200000001000200000001000000")
IDENT = FileIdentity("c1", 1, "/data/n1")


def _topic(name: str) -> bytes:
    return metadata_value(S.metadata[2], {"name": name, "topic_id": "AAAAAAAAAAAAAAAAAAAAAQ"}, 0)


def _segment(base: int = 0) -> bytes:
    """NoOps (one per batch, as controllers write them), topics, a gzip batch, a control batch, a bad CRC."""
    out = b"".join(batch(base + i, [record(0, NOOP)], epoch=2, base_timestamp=1_700_000_000_000 + i)
                   for i in range(5))
    out += batch(base + 5, [record(0, _topic("a")), record(1, _topic("b"), timestamp_delta=7)], epoch=3)
    out += batch(base + 7, [record(0, _topic("c")), record(1, NOOP)], codec=1, epoch=3, log_append_time=True,
                 max_timestamp=1_700_000_009_999)
    out += batch(base + 9, [record(0, LEADER, key=control_key(2))], control=True, epoch=4)
    bad = bytearray(batch(base + 10, [record(0, _topic("d"))], epoch=4))
    bad[-3] ^= 0x01
    return out + bytes(bad)


def _land(files: list[tuple[FileRef, KeepSpec]], pieces: int = 1) -> dict[str, pa.Table]:
    lander = FileLander("run-1")
    chunks = []
    step = max(1, len(files) // pieces)
    for i in range(0, len(files), step):
        chunks += list(lander.feed(files[i:i + step], rows_per_chunk=7))
    chunks += list(lander.flush())
    out: dict[str, list[pa.Table]] = {}
    for c in chunks:
        for name, t in c.items():
            out.setdefault(name, []).append(t)
    return {n: pa.concat_tables(ts).drop_columns(["ingested_at"] if n == "files" else []) for n, ts in out.items()}


def _files() -> list[tuple[FileRef, KeepSpec]]:
    return [(FileRef(f"/data/n1/__cluster_metadata-0/{b:020d}.log", _segment(b), 1000, IDENT, i), KeepSpec())
            for i, b in enumerate((0, 100, 200))]


def test_batch_headers_are_the_walkers_headers() -> None:
    data = _segment()
    batches = [b for b in iter_batches(data, "f.log") if isinstance(b, Batch)]
    h = batch_headers(data, [b.position for b in batches])
    for name in ("base_offset", "batch_length", "partition_leader_epoch", "magic", "crc", "attributes",
                 "last_offset_delta", "base_timestamp", "max_timestamp", "producer_id", "producer_epoch",
                 "base_sequence", "records_count"):
        assert h[name].tolist() == [getattr(b, name) for b in batches], name
    assert batch_headers(data, []).shape == (0,)


def test_rows_are_the_same_however_files_are_fed_and_chunked() -> None:
    whole = _land(_files())
    for pieces in (2, 3):
        parts = _land(_files(), pieces)
        assert set(parts) == set(whole)
        for name, t in whole.items():
            assert parts[name].equals(t), name


def test_records_take_their_value_columns_from_each_distinct_value() -> None:
    out = _land(_files()[:1])
    rec = out["records"].to_pylist()
    assert [r["log_offset"] for r in rec] == list(range(11))
    assert [r["record_type"] for r in rec[:5]] == ["NO_OP_RECORD"] * 5 and rec[0]["data_json"] == "{}"
    assert len({r["value_hash"] for r in rec[:5]}) == 1 and rec[0]["timestamp"] != rec[1]["timestamp"]
    assert [r["status"] for r in rec[5:]] == ["ok"] * 5 + ["corrupt_batch"]
    assert rec[5]["data_json"] != rec[6]["data_json"] and rec[10]["raw_value"] is not None
    assert rec[7]["file_position"] is None and rec[9]["is_control"] and rec[9]["record_type"] == "LeaderChange"
    assert out["topic_record"].column("name").to_pylist() == ["a", "b", "c"]  # not the corrupt "d"
    assert out["no_op_record"].column("log_offset").to_pylist() == [0, 1, 2, 3, 4, 8]
    assert out["leader_change"].column("leader_id").to_pylist() == [1]
    bat = out["batches"].to_pylist()
    assert [b["compression"] for b in bat[5:8]] == ["none", "gzip", "none"]
    assert bat[6]["timestamp_type"] == "LogAppendTime" and bat[7]["is_control"] and not bat[8]["crc_valid"]
    assert bat[8]["errors"] and "CRC mismatch" in bat[8]["errors"][0]
    assert [b["records_read"] for b in bat] == [1] * 5 + [2, 2, 1, 1]
    ledger = out["files"].to_pylist()[0]
    assert (ledger["records"], ledger["batches"], ledger["crc_failures"], ledger["status"]) == (11, 9, 1, "errors")


def test_a_strict_span_reports_records_outside_it_and_leaves_them_out() -> None:
    ref = FileRef("/data/n1/__cluster_metadata-0/00000000000000000003.log", _segment(0), 1000, IDENT)
    out = _land([(ref, KeepSpec(((3, (1 << 63) - 1),), strict=True))])
    assert out["records"].column("log_offset").to_pylist() == list(range(3, 11))
    ledger = out["files"].to_pylist()[0]
    # the CRC mismatch, the span, and each of the 8 other batches: none is where the name puts it
    assert ledger["error_count"] == 10 and ledger["records"] == 11
    assert "base offset 0 where the file's name says 3" in ledger["errors"][0]
    assert any("3 record(s) outside the offsets this segment's name allows (3 and above), first at offset 0"
               in e for e in ledger["errors"])


def test_a_file_lands_in_slices_the_same_rows_as_in_one_piece() -> None:
    """A big segment is landed a chunk of records at a time (memory follows the chunk, not the file): the rows,
    the batch rows and the ledger (metadata.version from the last FeatureLevelRecord of the file) are the same
    as in one piece. Node 1's segments of the bundled sample (written by Kafka 3.9)."""
    from conftest import SAMPLE

    logs = sorted((SAMPLE / "node-1" / "__cluster_metadata-0").glob("*.log"))
    files = [(FileRef(str(p), p.read_bytes(), 1000, IDENT, i), KeepSpec()) for i, p in enumerate(logs)]
    assert files, "no segments in the bundled sample"

    def land(rows_per_chunk: int) -> dict[str, pa.Table]:
        lander = FileLander("run-1")
        chunks = [*lander.feed(files, rows_per_chunk=rows_per_chunk), *lander.flush()]
        out: dict[str, list[pa.Table]] = {}
        for c in chunks:
            for name, t in c.items():
                out.setdefault(name, []).append(t)
        return {n: pa.concat_tables(ts).drop_columns(["ingested_at"] if n == "files" else [])
                .combine_chunks() for n, ts in out.items()}

    whole, sliced = land(1 << 20), land(3)
    assert set(sliced) == set(whole)
    for name, t in whole.items():
        assert sliced[name].equals(t), name
    assert any(v is not None for v in whole["files"].column("metadata_version").to_pylist())
    assert whole["records"].num_rows > 3 * len(files)  # every file was cut into slices


def test_a_segment_lands_a_range_of_batches_at_a_time_as_the_same_rows(monkeypatch: Any) -> None:
    """A segment is read a range of batches at a time (``read_ranges``: memory follows the range, not a 1 GiB
    segment): every table and the ledger row are the same as from one read of the whole file, for a clean segment,
    damaged ones (the reference walker takes over from the first range that does not read regularly), a strict span
    leaving records out, and a grown segment landed from its prefix."""
    from conftest import damaged_logs, joined_sample_log

    import kraftlog.wire.columns as columns
    from kraftlog.tables.rows import Ingested, Prefix

    data, name = joined_sample_log()
    path = f"/data/n1/__cluster_metadata-0/{name}"
    whole = columns.read_columns(data, name)
    b = len(whole.positions) // 2
    at, after = int(whole.positions[b]), int(whole.offset[whole.batch < b].max())
    grown = Prefix(Ingested(after, at, int(whole.headers["partition_leader_epoch"][b - 1])), b,
                   int(whole.control[:b].sum()), int((whole.batch < b).sum()), 0, "3.9-IV0")
    cases = [(label, damaged, KeepSpec()) for label, damaged in damaged_logs(data)[::2]]
    cases += [("strict", data, KeepSpec(((5, 1500),), strict=True)),
              ("grown", data, KeepSpec(((after + 1, (1 << 62)),), min_batch_position=at, prefix=grown))]

    def land(keep: KeepSpec, content: bytes) -> dict[str, pa.Table]:
        out = _land([(FileRef(path, content, 1000, IDENT), keep)])
        return {n: t.combine_chunks() for n, t in out.items()}

    for label, content, keep in cases:
        monkeypatch.setattr(columns, "RANGE_BYTES", 1 << 30)
        one = land(keep, content)
        monkeypatch.setattr(columns, "RANGE_BYTES", 2_000)
        ranged = land(keep, content)
        assert set(ranged) == set(one), label
        for table, t in one.items():
            assert ranged[table].equals(t), (label, table)
        ledger = one["files"].to_pylist()[0]
        assert ledger["records"] == len(whole.offset) - (label == "torn tail"), label
        assert (ledger["status"] == "ok") == (label in ("clean", "grown")), label
    assert len(list(columns.read_ranges(data, name) or ())) > 50  # the ranges were many


def test_records_not_landed_are_not_decoded_yet_tell_the_files_metadata_version(monkeypatch: Any) -> None:
    """A copy that loses every record to another node's (the first ingest of a cluster: each node holds the log)
    decodes none of its values: a task's memory and time follow the records it lands. Its ledger row still tells
    the file's metadata.version (from its FeatureLevelRecords alone) and counts, and its batch rows still land."""
    from conftest import joined_sample_log

    data, name = joined_sample_log()
    ref = FileRef(f"/data/n1/__cluster_metadata-0/{name}", data, 1000, IDENT)
    every = _land([(ref, KeepSpec())])
    derived: list[object] = []
    real = FileLander._derive
    monkeypatch.setattr(FileLander, "_derive", lambda self, v: derived.append(v) or real(self, v))
    none = _land([(ref, KeepSpec(()))])
    assert "records" not in none and not derived
    assert none["batches"].equals(every["batches"])
    assert none["files"].equals(every["files"]) and every["files"]["metadata_version"][0].as_py() is not None
    half = _land([(ref, KeepSpec(((0, 700),)))])
    assert half["records"].num_rows == 701 and 0 < len(derived) <= 701
    assert half["files"].equals(every["files"])


@pytest.mark.parametrize(("key", "value", "expected"), [
    (None, None, -7712737833812065720), (None, b"", 65369308820478381), (None, b"\x01\x02abc", -8158582663315109885),
    (b"k", b"v", 7304273413074506605), (b"k", None, 7792947378589097270), (b"", b"", 65369308820478381)])
def test_a_records_value_hash_stays_what_landed_rows_hold(key: bytes | None, value: bytes | None, expected: int
                                                          ) -> None:
    """``value_hash`` is kept in every landed row and compared with the rows of later runs: its values never change
    (these are those of kraftlog's first warehouses)."""
    assert value_hash(key, value) == expected
