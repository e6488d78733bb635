"""Conformance with Kafka's own decode over every real file of ../shared.

For every segment and snapshot of the corpus, the two local runs, scenario A and the vector sample:
every record decodes; where Kafka's ``kafka-dump-log`` output exists, our batches (offsets, positions,
sizes, CRCs and verdicts) and our ``{"type","version","data"}`` payloads equal Kafka's, byte for byte.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from kafka_dump import parse_dump, reference_for

from kraftlog.wire.discover import log_files
from kraftlog.wire.files import read_file
from kraftlog.wire.kafka_json import dumps, payload, payload_json

pytestmark = pytest.mark.slow


def _data_files(shared: Path) -> list[Path]:
    roots = [shared / "corpus" / "real", shared / "corpus" / "local", shared / "scenarios",
             shared / "kafka" / "vectors" / "real-kafka-3.7.0-sample"]
    return [p for p, _ in log_files([r for r in roots if r.exists()])]


def _compare_file(path: Path, ref_path: Path, stats: Counter[str]) -> list[str]:
    ours = read_file(path)
    ref = parse_dump(ref_path)
    problems: list[str] = []
    if len(ours.batches) != len(ref.batches):
        return [f"{path}: {len(ours.batches)} batches, Kafka {len(ref.batches)}"]
    for b, rb in zip(ours.batches, ref.batches, strict=True):
        expect = {
            "baseOffset": b.base_offset, "lastOffset": b.last_offset, "count": len(b.records),
            "partitionLeaderEpoch": b.partition_leader_epoch, "isControl": str(b.is_control).lower(),
            "isTransactional": str(b.is_transactional).lower(), "position": b.position, "size": b.size,
            "magic": b.magic, "crc": b.crc, "isvalid": str(b.crc_valid).lower(),
            "compresscodec": ["none", "gzip", "snappy", "lz4", "zstd"][b.compression],
            ("LogAppendTime" if b.log_append_time else "CreateTime"): b.max_timestamp,
        }
        for k, v in expect.items():
            if str(v) != rb.fields.get(k):
                problems.append(f"{path}@{b.position}: batch {k}={v}, Kafka {rb.fields.get(k)}")
        stats["batches"] += 1
        for r, rr in zip(b.records, rb.records, strict=True):
            d = r.decoded
            assert d is not None
            where = f"{path} offset {r.offset}"
            if (r.offset, r.timestamp) != (rr.offset, rr.timestamp):
                problems.append(f"{where}: offset/timestamp {(r.offset, r.timestamp)}, Kafka "
                                f"{(rr.offset, rr.timestamp)}")
            if (len(r.key) if r.key is not None else -1) != rr.key_size or len(r.value or b"") != rr.value_size:
                problems.append(f"{where}: key/value sizes differ")
            if payload_json(d) != dumps(payload(d)):  # the text the ingest lands (data_json), written directly
                problems.append(f"{where}: data_json {payload_json(d)} != {dumps(payload(d))}")
            if rr.payload is not None:
                mine = dumps({"type": d.type, "version": d.version, "data": payload(d)})
                if mine != rr.payload:
                    problems.append(f"{where}:\n  ours  {mine}\n  Kafka {rr.payload}")
                stats["payloads"] += 1
            elif rr.payload_error is not None:
                stats["kafka_could_not_read"] += 1  # newer than the reference tool: must decode here
            elif rr.control_json is not None:
                if d.type != rr.control_name or dumps(payload(d)) != rr.control_json:
                    problems.append(f"{where}: control {d.type} {dumps(payload(d))}, Kafka {rr.control_name} "
                                    f"{rr.control_json}")
                stats["control_payloads"] += 1
            elif rr.control_name is not None and rr.control_name.startswith("LEADER_CHANGE"):
                if d.type != "LeaderChange":
                    problems.append(f"{where}: {d.type}, Kafka {rr.control_name}")
                stats["leader_changes"] += 1
    if ref.trailing and not any(e.kind == "truncated" for e in ours.errors):
        problems.append(f"{path}: Kafka reports {ref.trailing}, we found no truncated tail")
    return problems


def test_every_record_of_every_real_file_decodes(shared: Path) -> None:
    files = _data_files(shared)
    assert len(files) > 400
    bad: list[str] = []
    records = 0
    empty = 0
    for path in files:
        result = read_file(path)
        if Path(path).stat().st_size == 0:  # a repository that kept empty files: an empty snapshot is an error,
            # an empty segment (Kafka's dump prints none) is one just rolled
            assert [e.kind for e in result.errors] == (["empty"] if ".checkpoint" in str(path) else []), path
            empty += 1
            continue
        bad.extend(e.describe() for e in result.errors)
        for batch, r in result.records():
            records += 1
            d = r.decoded
            assert d is not None
            if d.status != "ok":
                bad.append(f"{path}@{batch.position} offset {r.offset}: {d.status} {d.error}")
    assert records > 400_000 and empty == 2
    assert not bad, "\n".join(bad[:20])


def test_batches_and_payloads_equal_kafka_dump_log(shared: Path) -> None:
    stats: Counter[str] = Counter()
    problems: list[str] = []
    compared = 0
    for path in _data_files(shared):
        ref = reference_for(path, shared)
        if ref is None:
            continue
        compared += 1
        problems.extend(_compare_file(path, ref, stats))
    assert compared >= 200, f"only {compared} files had a reference"
    assert stats["payloads"] > 350_000 and stats["control_payloads"] > 100 and stats["leader_changes"] > 100
    assert not problems, f"{len(problems)} differences, first ones:\n" + "\n".join(problems[:10])


def test_vector_sample_matches_kafka_3_6_dump(shared: Path) -> None:
    sample = shared / "kafka" / "vectors" / "real-kafka-3.7.0-sample"
    log = sample / "00000000000000000000.log"
    ref = sample / "kafka-3.6.0-dump-log_00000000000000000000.log.txt.gz"
    if not ref.exists():
        pytest.skip(f"{ref} not available")
    stats: Counter[str] = Counter()
    assert _compare_file(log, ref, stats) == []
    # Kafka 3.6 could not read PartitionRecord v1, RegisterBrokerRecord v3 or apiKey 27; we do
    assert stats["kafka_could_not_read"] > 0
