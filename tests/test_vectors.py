"""The vectors extracted from Kafka's own unit tests (../shared/kafka/vectors) and real-file vectors."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest
from encoder import metadata_value, uvarint

from kraftlog.schema.registry import load_schemas
from kraftlog.wire.files import read_log
from kraftlog.wire.kafka_json import dumps, java_double, payload
from kraftlog.wire.messages import default_codec
from kraftlog.wire.varint import read_uvarint, read_varint, read_varlong


@pytest.fixture(scope="module")
def vectors(kafka_ref: Path) -> dict:
    return json.loads((kafka_ref / "vectors" / "kafka-tests" / "varint_float64_vectors.json").read_text())


@pytest.fixture(scope="module")
def other(kafka_ref: Path) -> dict:
    return json.loads((kafka_ref / "vectors" / "kafka-tests" / "other_vectors.json").read_text())


def test_unsigned_varints(vectors: dict) -> None:
    for v in vectors["unsigned_varint"]:
        raw = bytes.fromhex(v["hex"])
        value, end = read_uvarint(raw, 0)
        assert value == v["value"] & 0xFFFFFFFF and end == len(raw), v


def test_zigzag_varints_and_varlongs(vectors: dict) -> None:
    for v in vectors["zigzag_varint"]:
        raw = bytes.fromhex(v["hex"])
        assert read_varint(raw, 0) == (v["value"], len(raw)), v
    for v in vectors["zigzag_varlong"]:
        raw = bytes.fromhex(v["hex"])
        assert read_varlong(raw, 0) == (v["value"], len(raw)), v


def test_overlong_varints_are_rejected(vectors: dict) -> None:
    readers = {"readVarint": read_varint, "readVarlong": read_varlong}
    for v in vectors["invalid"]:
        reader = readers[v["what"].split()[0]]
        with pytest.raises(ValueError, match="too long"):
            reader(bytes.fromhex(v["hex"]), 0)


def test_float64_bits_decode_through_a_client_quota_record(vectors: dict) -> None:
    spec = load_schemas().metadata[14]  # ClientQuotaRecord.Value is the only float64 field
    template = metadata_value(spec, {"entity": [], "key": "k", "value": 0.0, "remove": False}, 0)
    at = template.index(b"\0" * 8)
    special = {"Double.MIN_VALUE": 5e-324, "Double.MAX_VALUE": 1.7976931348623157e308,
               "Double.POSITIVE_INFINITY": float("inf"), "Double.NEGATIVE_INFINITY": float("-inf")}
    for v in vectors["float64_bits"]:
        raw = template[:at] + bytes.fromhex(v["ieee754_bits_hex"]) + template[at + 8:]
        d = default_codec().decode_metadata(raw)
        assert d.status == "ok" and d.data is not None
        got = d.data["value"]
        text = v["value"]
        if text == "Double.NaN":
            assert got != got
            continue
        sign = -1.0 if text.startswith("-") else 1.0
        expected = sign * special[text.lstrip("-")] if "Double." in text else float(text)
        assert got == expected and struct.pack(">d", got).hex() == v["ieee754_bits_hex"], v
    assert java_double(2.097152e7) == "2.097152E7"
    assert java_double(1048576.0) == "1048576.0"
    assert java_double(1e-4) == "1.0E-4"


def test_raw_tagged_fields_are_kept_as_unknown(other: dict) -> None:
    vec = other["raw_tagged_fields"][0]
    spec = load_schemas().metadata[2]  # TopicRecord v0 has no tagged fields: tags 2 and 5 are unknown
    body = metadata_value(spec, {"name": "t", "topic_id": "AAAAAAAAAAAAAAAAAAAAAQ"}, 0)[:-1]
    raw = body + uvarint(len(vec["fields"])) + bytes.fromhex(vec["encoded_hex_without_count"])
    d = default_codec().decode_metadata(raw)
    assert d.status == "ok"
    assert d.data is not None
    assert d.data["_unknown_tagged_fields"] == [
        {"tag": f["tag"], "data": bytes.fromhex(f["data_hex"])} for f in vec["fields"]]


def test_control_record_key_layout() -> None:
    codec = default_codec()
    header = codec.decode_control(bytes.fromhex("00000003"), bytes.fromhex("0000" + "00" * 8 + "00"))
    assert header.type == "SnapshotHeader" and header.data == {"version": 0, "last_contained_log_timestamp": 0}
    unknown = codec.decode_control(bytes.fromhex("00000063"), b"")
    assert unknown.status == "unknown_type" and "99" in (unknown.error or "")
    bad = codec.decode_control(bytes.fromhex("ffff0002"), b"")
    assert bad.status == "error" and "Invalid version found for control record: -1" in (bad.error or "")


def test_malformed_frames_fail_with_kafkas_messages(other: dict) -> None:
    codec = default_codec()
    for v in other["metadata_serde_negative"]:
        if "value_hex" in v:
            raw = bytes.fromhex(v["value_hex"])
        elif v.get("test") == "testParsingRecordWithGarbageAtEnd":
            raw = metadata_value(load_schemas().metadata[0], {"broker_id": 1, "broker_epoch": 2,
                                                              "incarnation_id": "AAAAAAAAAAAAAAAAAAAAAA"}, 0) + b"\0"
        else:
            continue
        d = codec.decode_metadata(raw)
        assert d.status in ("error", "unknown_type"), v
        assert (d.error or "").startswith(v["expect_error_prefix"]), (d.error, v)
    frame0 = codec.decode_metadata(bytes.fromhex("00030000"))
    assert (frame0.error or "").startswith("Could not deserialize metadata record with frame version 0.")


def test_real_file_vectors_v1_v2_decode_as_kafka_printed(kafka_ref: Path) -> None:
    text = (kafka_ref / "vectors" / "real-file-vectors.md").read_text()
    blocks = text.split("\n## ")[1:3]  # V1 bootstrap.checkpoint, V2 KIP-853 voters snapshot
    for block in blocks:
        hex_text = block.split("```\n", 2)[1].split("```")[0]
        data = bytes.fromhex("".join(hex_text.split()))
        expected = [line.split("headerKeys: [] ", 1)[1] for line in block.splitlines() if line.startswith("| offset")]
        got = []
        for _, r in read_log(data, "vector").records():
            d = r.decoded
            assert d is not None
            if d.spec is not None and d.spec.kind == "control":
                got.append(f"{d.type} {dumps(payload(d))}")
            else:
                got.append("payload: " + dumps({"type": d.type, "version": d.version, "data": payload(d)}))
        assert got == expected
