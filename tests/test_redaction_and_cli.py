"""Redaction by default, the ``kraftlog dump`` command line, and the side files of a data directory."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner
from encoder import batch, metadata_value, record

from kraftlog.cli import main
from kraftlog.schema.registry import load_schemas
from kraftlog.wire.dump import DUMP_KEYS
from kraftlog.wire.files import parse_meta_properties, parse_quorum_state, read_log
from kraftlog.wire.kafka_json import dumps, payload, payload_json
from kraftlog.wire.redact import REDACTED, default_redactor, fingerprint

S = load_schemas()


def _config(resource_type: int, name: str, value: str | None, resource: str = "x") -> dict:
    raw = metadata_value(S.metadata[4], {"resource_type": resource_type, "resource_name": resource, "name": name,
                                         "value": value}, 0)
    (_, r), = read_log(batch(0, [record(0, raw)])).records()
    assert r.decoded is not None
    return payload(default_redactor()(r.decoded)) or {}


def test_config_values_are_redacted_unless_known_safe() -> None:
    assert _config(2, "retention.ms", "1000")["value"] == "1000"  # TOPIC, known, not a password
    assert _config(4, "log.cleaner.threads", "2")["value"] == "2"  # BROKER, known
    assert _config(4, "ssl.keystore.password", "pw")["value"] == REDACTED  # PASSWORD type
    assert _config(4, "listener.name.internal.ssl.key.password", "pw")["value"] == REDACTED  # prefixed: unknown
    assert _config(2, "some.future.config", "v")["value"] == REDACTED  # unknown key
    assert _config(8, "kafka.server", "DEBUG")["value"] == REDACTED  # BROKER_LOGGER is not in Kafka's schema
    assert _config(4, "ssl.keystore.password", None)["value"] is None  # a delete carries no secret


def test_scram_secrets_are_redacted_and_named() -> None:
    raw = metadata_value(S.metadata[11], {"name": "alice", "mechanism": 1, "salt": b"s", "stored_key": b"k",
                                          "server_key": b"v", "iterations": 4096}, 0)
    (_, r), = read_log(batch(0, [record(0, raw)])).records()
    red = default_redactor()(r.decoded)
    assert red.data["salt"] is None and red.data["iterations"] == 4096
    assert red.redacted == ("salt", "stored_key", "server_key")
    assert payload(red) == {"name": "alice", "mechanism": 1, "salt": REDACTED, "storedKey": REDACTED,
                            "serverKey": REDACTED, "iterations": 4096}
    assert payload_json(red) == dumps(payload(red))  # the text the ingest lands
    assert r.decoded.data["salt"] == b"s"  # the original is untouched


def test_dump_prints_the_documented_keys_and_redacts_by_default(scenario_a: Path) -> None:
    node = scenario_a / "node-1"
    result = CliRunner().invoke(main, ["dump", str(node)])
    assert result.exit_code == 0, result.output
    lines = [json.loads(x) for x in result.output.splitlines()]
    assert all(tuple(x) == DUMP_KEYS for x in lines)
    assert "s3cr3t-key-pw" not in result.output  # the sensitive broker password of the timeline
    scram = [x for x in lines if x["type"] == "USER_SCRAM_CREDENTIAL_RECORD"]
    assert scram and all(x["data"]["salt"] == REDACTED for x in scram)
    assert {x["type"] for x in lines} >= {"SnapshotHeader", "KRaftVoters", "LeaderChange", "TOPIC_RECORD"}
    raw = CliRunner().invoke(main, ["dump", "--no-redact", str(node)])
    assert "s3cr3t-key-pw" in raw.output


def test_dump_summary_counts_match_the_scenario_reference(scenario_a: Path) -> None:
    logs = sorted((scenario_a / "node-1" / "__cluster_metadata-0").glob("*.log"))
    result = CliRunner().invoke(main, ["dump", "--summary", *map(str, logs)])
    assert result.exit_code == 0, result.output
    out = result.output
    assert "records: 1982" in out and "CRC failures: 0" in out and "log offsets: 0..1981" in out
    assert "metadata.version: 3.9-IV0 (feature level 21" in out
    counts = {(p[0], p[1]): int(p[-1]) for p in (line.split() for line in out.splitlines()) if len(p) == 3
              and p[-1].isdigit()}
    assert counts[("NO_OP_RECORD", "0")] == 1452 and counts[("PARTITION_CHANGE_RECORD", "1")] == 336
    assert counts[("CONFIG_RECORD", "0")] == 50 and counts[("KRaftVoters", "0")] == 5


def test_dump_reports_bad_bytes_as_lines_and_goes_on(tmp_path: Path) -> None:
    value = metadata_value(S.metadata[2], {"name": "t", "topic_id": "AAAAAAAAAAAAAAAAAAAAAQ"}, 0)
    f = tmp_path / "00000000000000000000.log"
    f.write_bytes(batch(0, [record(0, value)]) + b"\x00" * 20)
    result = CliRunner().invoke(main, ["dump", str(f)])
    lines = [json.loads(x) for x in result.stdout.splitlines()]
    assert lines[0]["type"] == "TOPIC_RECORD" and lines[0]["error"] is None
    assert lines[1]["type"] is None and lines[1]["position"] == len(batch(0, [record(0, value)]))
    assert "invalid bytes at the end" in lines[1]["error"]
    assert result.exit_code == 1 and "1 problem(s)" in result.stderr  # all printed, and the status says so
    summary = CliRunner().invoke(main, ["dump", "--summary", str(f)])
    assert summary.exit_code == 1 and "errors: 1" in summary.stdout


def test_dump_rejects_paths_without_log_files(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["dump", str(tmp_path)])
    assert result.exit_code != 0 and "no metadata log files" in result.output


def test_side_files(scenario_a: Path) -> None:
    meta = parse_meta_properties((scenario_a / "node-2" / "meta.properties").read_text())
    assert meta.cluster_id == "T4vFxmI9RFCnFwCmltnwag" and meta.node_id == 2 and meta.version == 1
    qs = parse_quorum_state((scenario_a / "node-1" / "__cluster_metadata-0" / "quorum-state").read_text())
    assert qs["leader_epoch"] >= 1 and "data_version" in qs
    v0 = parse_meta_properties("#comment\nversion=0\nbroker.id=7\ncluster.id=abc\n")
    assert (v0.node_id, v0.cluster_id, v0.version) == (7, "abc", 0)


def test_delegation_token_ids_are_replaced_by_a_fingerprint() -> None:
    fields = {"owner": "User:a", "requester": "User:a", "renewers": [], "issue_timestamp": 1, "max_timestamp": 2,
              "expiration_timestamp": 2}
    out = []
    for token in ("secret-token-1", "secret-token-2"):
        raw = metadata_value(S.metadata[10], {**fields, "token_id": token}, 0)
        (_, r), = read_log(batch(0, [record(0, raw)])).records()
        red = default_redactor()(r.decoded)
        assert red.redacted == ("token_id",) and red.data["token_id"] == fingerprint(token)
        doc = payload(red)
        assert doc is not None and doc["tokenId"] == fingerprint(token) and token not in str(doc)
        assert payload_json(red) == dumps(doc) and token not in str(payload_json(red))
        out.append(red.data["token_id"])
    assert out[0] != out[1]  # two tokens stay two entities in the histories
