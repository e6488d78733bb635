"""Bad and unknown input: precise errors (file, byte position, reason), and the rest still decodes."""

from __future__ import annotations

import struct
from pathlib import Path

from conftest import with_peak
from encoder import batch, control_key, metadata_value, record, uvarint

from kraftlog.schema.registry import load_schemas
from kraftlog.wire.batches import HEADER_SIZE
from kraftlog.wire.files import read_file, read_log
from kraftlog.wire.messages import default_codec

S = load_schemas()
TOPIC = S.metadata[2]
NOOP = S.metadata[20]


def _topic(name: str) -> bytes:
    return metadata_value(TOPIC, {"name": name, "topic_id": "AAAAAAAAAAAAAAAAAAAAAQ"}, 0)


def _three_batches() -> tuple[bytes, list[int]]:
    parts = [batch(0, [record(0, _topic("a"))]), batch(1, [record(0, _topic("b")), record(1, _topic("c"))]),
             batch(3, [record(0, _topic("d"))])]
    positions = [0, len(parts[0]), len(parts[0]) + len(parts[1])]
    return b"".join(parts), positions


def _names(data: bytes, source: str = "f.log") -> list[str]:
    return [r.decoded.data["name"] for _, r in read_log(data, source).records()
            if r.decoded is not None and r.decoded.data]


def test_clean_input_has_no_errors() -> None:
    data, _ = _three_batches()
    out = read_log(data, "f.log")
    assert out.errors == [] and _names(data) == ["a", "b", "c", "d"]
    assert [r.offset for _, r in out.records()] == [0, 1, 2, 3]


def test_crc_mismatch_is_reported_with_file_and_position_and_the_rest_goes_on() -> None:
    data, pos = _three_batches()
    broken = bytearray(data)
    broken[data.index(b"b", pos[1] + HEADER_SIZE)] ^= 0x01  # topic name "b" -> "c" inside batch 2
    out = read_log(bytes(broken), "node-1/00000000000000000000.log")
    assert [b.crc_valid for b in out.batches] == [True, False, True]
    (err,) = out.errors
    assert err.kind == "crc_mismatch" and err.position == pos[1]
    assert err.source == "node-1/00000000000000000000.log" and "CRC mismatch" in err.reason
    assert str(err).startswith(f"node-1/00000000000000000000.log@{pos[1]}: CRC mismatch")
    assert out.batches[2].records[0].decoded.data["name"] == "d"
    assert out.batches[1].records[0].decoded.data["name"] == "c"  # still decoded, flagged by the batch


def test_truncated_tail_of_an_active_segment() -> None:
    data, pos = _three_batches()
    cut = data[: pos[2] + 30]
    out = read_log(cut, "seg.log")
    assert _names(cut) == ["a", "b", "c"]
    (err,) = out.errors
    assert err.kind == "truncated" and err.position == pos[2] and "Found 30 invalid bytes at the end" in err.reason
    shorter = data[: pos[2] + 70]
    (err2,) = read_log(shorter, "seg.log").errors
    assert err2.kind == "truncated" and "claims" in err2.reason


def test_impossible_batch_length_is_skipped_and_the_walk_resyncs() -> None:
    data, pos = _three_batches()
    for length in (-5, 10, 1 << 30):
        broken = bytearray(data)
        struct.pack_into(">i", broken, pos[1] + 8, length)
        out = read_log(bytes(broken), "f.log")
        assert _names(bytes(broken)) == ["a", "d"], length
        (err,) = out.errors
        assert err.position == pos[1] and err.kind in ("bad_length", "truncated")
        assert f"to the next valid batch at {pos[2]}" in err.reason


def test_bad_magic_is_reported() -> None:
    data, pos = _three_batches()
    broken = bytearray(data)
    broken[pos[1] + 16] = 1
    out = read_log(bytes(broken), "f.log")
    assert out.errors[0].kind == "bad_magic" and out.errors[0].position == pos[1]
    assert _names(bytes(broken)) == ["a", "d"]


def test_record_framing_errors_name_the_record_position() -> None:
    good = record(0, _topic("a"))
    bad = bytearray(record(1, _topic("b")))
    bad[0] += 2  # length claims one more byte than the record holds
    data = batch(0, [good, bytes(bad), record(2, _topic("c"))])
    out = read_log(data, "f.log")
    (err,) = out.errors
    assert err.kind == "bad_record" and err.position == HEADER_SIZE + len(good)
    assert "Invalid record size" in err.reason
    assert [r.decoded.data["name"] for _, r in out.records()] == ["a"]  # kept what came before


def test_garbage_after_a_metadata_body_is_an_error_on_that_record_only() -> None:
    data = batch(0, [record(0, _topic("a") + b"\x00\x01"), record(1, _topic("b"))])
    recs = [r.decoded for _, r in read_log(data, "f.log").records()]
    assert recs[0].status == "error" and recs[0].error == "Found 2 byte(s) of garbage after 2"
    assert recs[0].error_offset == len(_topic("a"))
    assert recs[1].status == "ok"


def test_unknown_api_key_keeps_the_record_and_a_reason() -> None:
    value = uvarint(1) + uvarint(99) + uvarint(0) + b"\x00"
    data = batch(0, [record(0, value), record(1, _topic("b"))])
    (first, second) = [r for _, r in read_log(data, "f.log").records()]
    assert first.decoded.status == "unknown_type" and first.decoded.error == "Unknown metadata id 99"
    assert first.value == value  # raw bytes kept
    assert second.decoded.data["name"] == "b"


def test_version_newer_than_the_schemas_keeps_raw_bytes() -> None:
    value = uvarint(1) + uvarint(2) + uvarint(7) + b"\x00"
    d = default_codec().decode_metadata(value)
    assert d.status == "unsupported_version" and d.type == "TOPIC_RECORD" and d.version == 7
    assert "newer than the schemas" in (d.error or "")


def test_known_tag_not_valid_for_the_version_fails_like_kafka() -> None:
    change = S.metadata[5]
    body = metadata_value(change, {"partition_id": 0, "topic_id": "AAAAAAAAAAAAAAAAAAAAAQ"}, 0)[:-1]
    raw = body + uvarint(1) + uvarint(6) + uvarint(1) + b"\x01"  # tag 6 (ELR) is valid from v2 only
    d = default_codec().decode_metadata(raw)
    assert d.status == "error" and "Tag 6 is not valid for version 0" in (d.error or "")


def test_claimed_lengths_are_checked_before_anything_is_allocated() -> None:
    # a ConfigRecord whose name claims 2 GB, and a PartitionRecord whose replica array claims 2^31 entries
    config = uvarint(1) + uvarint(4) + uvarint(0) + b"\x02" + uvarint(2) + b"x" + uvarint(0x7FFFFFFF)
    part = uvarint(1) + uvarint(3) + uvarint(0) + b"\0" * 20 + uvarint(0xFFFFFFF0)
    decoded, peak = with_peak(lambda: [default_codec().decode_metadata(raw) for raw in (config, part)])
    assert [d.status for d in decoded] == ["error", "error"]
    assert peak < 1 << 20


def test_huge_record_count_does_not_allocate() -> None:
    data = bytearray(batch(0, [record(0, _topic("a"))]))
    struct.pack_into(">i", data, 57, 0x7FFFFFFF)  # recordsCount
    from crc32c import crc32c
    struct.pack_into(">I", data, 17, crc32c(bytes(data[21:])))
    out, peak = with_peak(lambda: read_log(bytes(data), "f.log"))
    assert out.errors[0].kind == "bad_count" and peak < 1 << 20


def test_control_batches_decode_and_null_metadata_values_are_errors() -> None:
    leader = bytes.fromhex("0000000000010200000001000200000001000000")
    data = batch(0, [record(0, leader, key=control_key(2))], control=True) + batch(1, [record(0, None)])
    recs = [r.decoded for _, r in read_log(data, "f.log").records()]
    assert recs[0].type == "LeaderChange" and recs[0].data["leader_id"] == 1
    assert recs[1].status == "error" and "null value" in (recs[1].error or "")


def test_unreadable_file_is_one_io_error(tmp_path: Path) -> None:
    out = read_file(tmp_path / "missing.log")
    assert out.batches == [] and out.errors[0].kind == "io"
    assert str(tmp_path / "missing.log") in str(out.errors[0])


def test_log_append_time_uses_the_batch_max_timestamp() -> None:
    data = batch(0, [record(0, _topic("a"), timestamp_delta=5)], base_timestamp=100, max_timestamp=900,
                 log_append_time=True)
    (_, r), = read_log(data, "f.log").records()
    assert r.timestamp == 900


def test_headers_are_read() -> None:
    data = batch(0, [record(0, NOOP_VALUE, headers=[("h", b"v"), ("n", None)])])
    (_, r), = read_log(data, "f.log").records()
    assert r.headers == [("h", b"v"), ("n", None)] and r.decoded.type == "NO_OP_RECORD"


NOOP_VALUE = metadata_value(NOOP, {}, 0)


def test_overlong_varint_inside_a_body_is_a_record_error() -> None:
    # RegisterControllerRecord: EndPoints count as a 6-byte varint
    raw = uvarint(1) + uvarint(27) + uvarint(0) + b"\0\0\0\1" + b"\0" * 16 + b"\0" + b"\xff" * 5 + b"\x01"
    d = default_codec().decode_metadata(raw)
    assert d.status == "error" and "Varint is too long" in (d.error or "")
