"""Property tests: schema-generated values round-trip and print as Kafka's JSON; mutated real files never break the
decoder."""

from __future__ import annotations

import base64
import dataclasses
from pathlib import Path
from typing import Any

import pytest
from conftest import with_peak
from encoder import Encoder, batch, control_key, metadata_value, record
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kraftlog.schema.model import FieldSpec, MessageSpec
from kraftlog.schema.registry import load_schemas
from kraftlog.wire import codegen
from kraftlog.wire.files import read_log
from kraftlog.wire.kafka_json import dumps, payload, payload_json
from kraftlog.wire.messages import default_codec

S = load_schemas()
INTS = {"int8": (-(1 << 7), (1 << 7) - 1), "int16": (-(1 << 15), (1 << 15) - 1), "uint16": (0, (1 << 16) - 1),
        "int32": (-(1 << 31), (1 << 31) - 1), "uint32": (0, (1 << 32) - 1), "int64": (-(1 << 63), (1 << 63) - 1)}
TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=20)
UUIDS = st.binary(min_size=16, max_size=16).map(lambda b: base64.urlsafe_b64encode(b)[:22].decode())


def _scalar(t: str) -> st.SearchStrategy[Any]:
    if t in INTS:
        return st.integers(*INTS[t])
    return {
        "bool": st.booleans(),
        "float64": st.floats(allow_nan=False),
        "string": TEXT,
        "bytes": st.binary(max_size=40),
        "uuid": UUIDS,
    }[t]


def value_strategy(spec: MessageSpec, f: FieldSpec, version: int) -> st.SearchStrategy[Any]:
    if f.is_array:
        elem = FieldSpec(name=f.name, type=f.element_type, versions=f.versions, fields=f.fields)
        s: st.SearchStrategy[Any] = st.lists(value_strategy(spec, elem, version), max_size=4)
    elif f.is_struct:
        s = struct_strategy(spec, spec.struct_for(f).fields, version)
    else:
        s = _scalar(f.type)
    return st.one_of(st.none(), s) if f.nullable_in(version) else s


def struct_strategy(spec: MessageSpec, fields: list[FieldSpec], version: int) -> st.SearchStrategy[Any]:
    return st.fixed_dictionaries({f.column: value_strategy(spec, f, version) for f in fields
                                  if f.present_in(version)})


CASES = [(spec, v) for spec in S.metadata.values()
         for v in range(spec.valid_versions.lowest, spec.valid_versions.highest + 1)]
CONTROL = [spec for spec in S.control.values() if spec.name != "EndTxnMarker"]


@pytest.mark.parametrize("spec,version", CASES, ids=[f"{s.name}-v{v}" for s, v in CASES])
def test_every_metadata_record_version_round_trips(spec: MessageSpec, version: int) -> None:
    unknown = st.lists(st.fixed_dictionaries({"tag": st.integers(100, 200), "data": st.binary(max_size=8)}),
                       max_size=2, unique_by=lambda u: u["tag"])

    @settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
    @given(struct_strategy(spec, spec.body.fields, version), unknown)
    def check(data: dict[str, Any], tags: list[dict[str, Any]]) -> None:
        if tags:
            data = {**data, "_unknown_tagged_fields": sorted(tags, key=lambda u: u["tag"])}
        d = default_codec().decode_metadata(metadata_value(spec, data, version))
        assert d.status == "ok", d.error
        assert d.type == spec.record_type and d.version == version
        assert d.data == data
        # the JSON written straight from the reader's dict (compiled per struct and version) is Kafka's JSON as the
        # field-by-field rendering builds it; a dict missing a field (not a reader's) is written field by field
        assert payload_json(d) == dumps(payload(d))
        if data:
            partial = dataclasses.replace(d, data={k: v for k, v in data.items() if k != next(iter(data))})
            assert payload_json(partial) == dumps(payload(partial))

    check()


def test_a_value_orjson_refuses_is_written_field_by_field() -> None:
    """A string holding a lone surrogate (no reader makes one: they decode UTF-8 with replacement, but a caller's
    dict can hold one) is written by the field-by-field path, as the compiled writer would have."""
    spec = S.by_name("TopicRecord")
    d = default_codec().decode_metadata(metadata_value(spec, {"name": "t", "topic_id": "A" * 22}, 0))
    odd = dataclasses.replace(d, data={**d.data, "name": "a\ud800b"})
    assert payload_json(odd) == dumps(payload(odd)) == '{"name":"a\ud800b","topicId":"' + "A" * 22 + '"}'


@pytest.mark.parametrize("spec", CONTROL, ids=[s.name for s in CONTROL])
def test_every_control_record_round_trips(spec: MessageSpec) -> None:
    (ctype,) = spec.control_types

    @settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
    @given(struct_strategy(spec, spec.body.fields, 0))
    def check(data: dict[str, Any]) -> None:
        d = default_codec().decode_control(control_key(ctype), Encoder(spec).encode(data, 0))
        assert d.status == "ok" and d.type == spec.dump_name and d.data == data

    check()


# -- mutation of real files ----------------------------------------------------------------------

def _real_files(shared: Path) -> list[bytes]:
    node = shared / "scenarios" / "A" / "node-1" / "__cluster_metadata-0"
    picks = sorted(node.glob("*.log"))[:2] + sorted(node.glob("*-0000000003.checkpoint"))[:1]
    return [p.read_bytes()[:20000] for p in picks]


MUTATIONS = st.lists(st.tuples(st.sampled_from(["flip", "truncate", "absurd", "insert", "zero"]),
                               st.integers(0, 1 << 30), st.integers(0, 255)), min_size=1, max_size=6)


def _mutate(data: bytes, ops: list[tuple[str, int, int]]) -> bytes:
    buf = bytearray(data)
    for op, where, arg in ops:
        if not buf:
            break
        i = where % len(buf)
        if op == "flip":
            buf[i] ^= 1 << (arg % 8)
        elif op == "truncate":
            del buf[i:]
        elif op == "absurd":  # an int32 length or count that claims too much, or is negative
            buf[i:i + 4] = (0x7FFFFFF0 if arg % 2 else 0xFFFFFFF0).to_bytes(4, "big")
        elif op == "insert":
            buf[i:i] = bytes([arg]) * (1 + arg % 7)
        else:
            buf[i:i + 16] = b"\0" * 16
    return bytes(buf)


def test_mutated_real_files_never_raise_and_stay_within_memory(scenario_a: Path) -> None:
    originals = _real_files(scenario_a.parents[1])

    @settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
    @given(st.sampled_from(range(len(originals))), MUTATIONS)
    def check(which: int, ops: list[tuple[str, int, int]]) -> None:
        data = _mutate(originals[which], ops)
        out, peak = with_peak(lambda: read_log(data, "mutated.log"))
        assert peak < 20 * len(data) + (2 << 20), f"peak {peak} for {len(data)} input bytes"
        for e in out.errors:
            assert e.source == "mutated.log" and 0 <= e.position <= len(data), e
        for b, r in out.records():
            assert r.decoded is not None and (r.decoded.status == "ok") == (r.decoded.error is None)
            assert 0 <= b.position < len(data)

    check()


@pytest.mark.parametrize("codec", [1, 2, 3, 4], ids=["gzip", "snappy-xerial", "lz4", "zstd"])
def test_compressed_batches_decode_like_uncompressed(codec: int, scenario_a: Path) -> None:
    plain = read_log((scenario_a / "node-1" / "__cluster_metadata-0" / "00000000000000000000.log").read_bytes())
    recs = [r for _, r in plain.records() if not _.is_control][:50]
    raw = [record(i, r.value, timestamp_delta=i) for i, r in enumerate(recs)]
    data = batch(100, raw, codec=codec) + batch(150, raw[:3], codec=0)
    out = read_log(data, "c.log")
    assert out.errors == []
    got = [r.decoded for _, r in out.records()]
    assert [d.data for d in got[:50]] == [r.decoded.data for r in recs]
    assert [r.offset for _, r in out.records()][:3] == [100, 101, 102]
    assert all(r.position == -1 for r in out.batches[0].records)  # inside compressed data


def test_corrupt_compressed_batch_is_one_error_and_the_next_batch_reads() -> None:
    topic = S.metadata[2]
    value = metadata_value(topic, {"name": "x", "topic_id": "AAAAAAAAAAAAAAAAAAAAAQ"}, 0)
    good = batch(0, [record(0, value)], codec=4)
    bad = bytearray(batch(1, [record(0, value)], codec=4))
    bad[-3] ^= 0xFF
    from crc32c import crc32c
    bad[17:21] = crc32c(bytes(bad[21:])).to_bytes(4, "big")
    out = read_log(good + bytes(bad) + batch(2, [record(0, value)]), "z.log")
    assert [len(b.records) for b in out.batches] == [1, 0, 1]
    (err,) = out.errors
    assert err.kind == "compression" and err.position == len(good) + 61 and "zstd" in err.reason


@settings(max_examples=20, deadline=None)
@given(st.lists(st.binary(min_size=16, max_size=16), min_size=1, max_size=50))
def test_uuid_text_remembers_a_bounded_number_of_uuids(raws: list[bytes]) -> None:
    """``uuid_text`` is Kafka's URL-safe Base64 whether it encodes or remembers, keeps at most ``UUIDS_KEPT`` texts,
    and keys them by bytes of their own (a view of a segment's buffer would keep the whole segment)."""
    old = codegen.UUIDS_KEPT
    codegen.UUIDS_KEPT = 8
    codegen._UUIDS.clear()
    try:
        for raw in [*raws, *raws]:
            assert codegen.uuid_text(memoryview(raw)) == base64.urlsafe_b64encode(raw)[:22].decode("ascii")
            assert len(codegen._UUIDS) <= 8 and all(type(k) is bytes for k in codegen._UUIDS)
    finally:
        codegen.UUIDS_KEPT = old
