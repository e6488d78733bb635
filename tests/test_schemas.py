"""schemas/ is the single source of truth, and it carries every fact of Kafka's definitions."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kraftlog.schema.importer import kafka_source_files, load_kafka_json, strip_json_comments
from kraftlog.schema.model import Versions, column_name, record_type_name
from kraftlog.schema.registry import load_schemas, schema_root

ROOT = Path(__file__).resolve().parents[1]


def _kafka_fields(fields: list[dict], prefix: str = "") -> dict[str, dict]:
    out = {}
    for f in fields:
        path = prefix + f["name"]
        out[path] = {k: v for k, v in f.items() if k != "fields"}
        out.update(_kafka_fields(f.get("fields", []), path + "."))
    return out


def test_every_kafka_schema_is_represented_field_for_field(kafka_ref: Path) -> None:
    sources = kafka_source_files(kafka_ref / "schemas")
    assert len(sources) >= 39
    for src, rel, _ in sources:
        kafka, _ = load_kafka_json(src)
        ours = json.loads((ROOT / "schemas" / rel).read_text())
        assert ours["message"] == kafka, f"{rel} differs from {src}"
        assert _kafka_fields(ours["message"]["fields"]) == _kafka_fields(kafka["fields"])
        assert ours["kraftlog"]["kind"] != "unclassified", rel


def test_every_metadata_api_key_and_control_type_has_a_definition() -> None:
    s = load_schemas()
    assert sorted(s.metadata) == [k for k in range(30) if k != 13]  # 13 was never assigned
    assert s.metadata[6].removed_in == "3.5" and s.metadata[16].removed_in == "3.3"
    assert s.control_type_names == {0: "ABORT", 1: "COMMIT", 2: "LEADER_CHANGE", 3: "SNAPSHOT_HEADER",
                                    4: "SNAPSHOT_FOOTER", 5: "KRAFT_VERSION", 6: "KRAFT_VOTERS"}
    assert {s.control[t].dump_name for t in range(2, 7)} == {
        "LeaderChange", "SnapshotHeader", "SnapshotFooter", "KRaftVersion", "KRaftVoters"}


def test_record_type_names_match_kafka_enum_constants() -> None:
    s = load_schemas()
    assert s.metadata[21].record_type == "ZK_MIGRATION_STATE_RECORD"
    assert s.metadata[20].record_type == "NO_OP_RECORD"
    assert record_type_name("UserScramCredentialRecord") == "USER_SCRAM_CREDENTIAL_RECORD"
    assert column_name("KRaftVersionFeature") == "kraft_version_feature"
    assert column_name("LastKnownELR") == "last_known_elr"


def test_version_ranges_follow_kafka_parse_rules() -> None:
    assert Versions.parse("0+").highest == 32767
    assert 3 in Versions.parse("1-3") and 4 not in Versions.parse("1-3")
    assert Versions.parse("none").empty
    assert str(Versions.parse("2+")) == "2+"


def test_tagged_field_versions_default_to_tagged_versions() -> None:
    s = load_schemas()
    change = s.metadata[17].body.field_named("Fenced")  # BrokerRegistrationChangeRecord
    assert change.tagged_in(0) and change.tag == 0
    elr = s.metadata[5].body.field_named("EligibleLeaderReplicas")
    assert elr.present_in(2) and not elr.present_in(1) and elr.default() is None


def test_comment_stripping_keeps_slashes_inside_strings() -> None:
    text = '{"a": "http://x//y", // note\n "b": 1}'
    body, comments = strip_json_comments(text)
    assert json.loads(body) == {"a": "http://x//y", "b": 1}
    assert comments == ["note"]


def test_sensitive_fields_are_annotated_in_the_schemas() -> None:
    s = load_schemas()
    scram = s.metadata[11]
    assert {f.name for f in scram.body.fields if f.sensitive} == {"Salt", "StoredKey", "ServerKey"}
    assert s.metadata[4].sensitive_config_value is not None


def test_schemas_ship_inside_the_package() -> None:
    root = schema_root()
    assert root.joinpath("metadata").joinpath("TopicRecord.json").is_file()


@pytest.mark.parametrize("name", ["enums.json", "config_keys.json"])
def test_reference_tables_are_valid_json(name: str) -> None:
    assert json.loads((ROOT / "schemas" / name).read_text())


def test_every_package_is_listed_for_the_wheel() -> None:
    import tomllib

    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {".".join(p.relative_to(ROOT).parent.parts) for p in (ROOT / "kraftlog").rglob("__init__.py")}
    assert found <= listed and "kraftlog._schemas" in listed
