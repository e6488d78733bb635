"""Replay semantics, state at any point, verify, and agreement with Kafka's own tools."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from conftest import SAMPLE
from encoder import Encoder, metadata_value
from metadata_shell import parse_shell_dump

from kraftlog.cli import main
from kraftlog.schema.registry import load_schemas
from kraftlog.state.entities import MIGRATING, UNASSIGNED
from kraftlog.state.history import Versions, as_dict
from kraftlog.state.local import diff_images, load_clusters, state_at, verify
from kraftlog.state.replay import Change, Event, Replayer
from kraftlog.state.shell import image_tree
from kraftlog.wire.messages import default_codec

S = load_schemas()
BY_TYPE = {spec.record_type: spec for spec in S.metadata.values()}
T1 = "AAAAAAAAAAAAAAAAAAAAAQ"
T2 = "AAAAAAAAAAAAAAAAAAAAAg"
DIR_A, DIR_B, DIR_C = "XHhkr4tkSsD900pOQ8pPfg", "W_vV6klEQB-Kkp6lavSJsQ", "oq1f8Ms6jHTDE6p5jYWXAw"


def ev(offset: int, rtype: str, version: int = 0, **data: Any) -> Event:
    spec = BY_TYPE[rtype]
    d = default_codec().decode_metadata(metadata_value(spec, data, version))
    assert d.status == "ok", d.error
    return Event(offset, 1000 + offset, 1, d)


def control(offset: int, name: str, **data: Any) -> Event:
    spec = next(s for s in S.control.values() if s.dump_name == name)
    (ctype,) = spec.control_types
    d = default_codec().decode_control(ctype.to_bytes(4, "big"), Encoder(spec).encode(data, 0))
    return Event(offset, 1000 + offset, 1, d)


def run(*events: Event) -> Replayer:
    r = Replayer()
    for e in events:
        r.apply(e)
    r.finish()
    return r


def topic_and_partition(**partition: Any) -> list[Event]:
    base = {"partition_id": 0, "topic_id": T1, "replicas": [1, 2, 3], "isr": [1, 2, 3], "removing_replicas": [],
            "adding_replicas": [], "leader": 1, "leader_epoch": 5, "partition_epoch": 7}
    base.update(partition)
    return [ev(0, "TOPIC_RECORD", name="t", topic_id=T1), ev(1, "PARTITION_RECORD", **base)]


def part(r: Replayer) -> dict[str, Any]:
    return r.image.entities["partitions"][(T1, 0)]


# -- partitions ------------------------------------------------------------------------------------------

def test_partition_record_v0_gets_migrating_directories_and_empty_elr() -> None:
    p = part(run(*topic_and_partition()))
    assert p["directories"] == [MIGRATING] * 3 and p["elr"] == [] and p["last_known_elr"] == []
    assert (p["leader_epoch"], p["partition_epoch"]) == (5, 7)


def test_partition_change_with_leader_minus_two_keeps_leader_and_leader_epoch() -> None:
    r = run(*topic_and_partition(), ev(2, "PARTITION_CHANGE_RECORD", partition_id=0, topic_id=T1, isr=[1, 2]))
    p = part(r)
    assert (p["leader"], p["leader_epoch"], p["partition_epoch"], p["isr"]) == (1, 5, 8, [1, 2])


def test_setting_the_same_leader_or_no_leader_bumps_the_leader_epoch() -> None:
    r = run(*topic_and_partition(), ev(2, "PARTITION_CHANGE_RECORD", partition_id=0, topic_id=T1, leader=1),
            ev(3, "PARTITION_CHANGE_RECORD", partition_id=0, topic_id=T1, leader=-1))
    p = part(r)
    assert (p["leader"], p["leader_epoch"], p["partition_epoch"]) == (-1, 7, 9)


def test_unclean_election_sets_recovering_and_minus_one_keeps_it() -> None:
    r = run(*topic_and_partition(), ev(2, "PARTITION_CHANGE_RECORD", partition_id=0, topic_id=T1, leader=3, isr=[3],
                                       leader_recovery_state=1),
            ev(3, "PARTITION_CHANGE_RECORD", partition_id=0, topic_id=T1, isr=[3, 1]))
    assert part(r)["leader_recovery_state"] == "RECOVERING" and part(r)["isr"] == [3, 1]


def test_changed_replicas_without_directories_keep_surviving_directories() -> None:
    r = run(ev(0, "TOPIC_RECORD", name="t", topic_id=T1),
            ev(1, "PARTITION_RECORD", 1, partition_id=0, topic_id=T1, replicas=[1, 2, 3], isr=[1, 2, 3],
               removing_replicas=[], adding_replicas=[], leader=1, leader_epoch=0, partition_epoch=0,
               directories=[DIR_A, DIR_B, DIR_C]),
            ev(2, "PARTITION_CHANGE_RECORD", 1, partition_id=0, topic_id=T1, replicas=[3, 4, 1]))
    assert part(r)["directories"] == [DIR_C, UNASSIGNED, DIR_A]


def test_change_of_an_unknown_partition_is_a_problem_and_skipped() -> None:
    r = run(ev(0, "PARTITION_CHANGE_RECORD", partition_id=0, topic_id=T1, leader=1))
    assert r.image.entities["partitions"] == {} and "unknown partition" in r.problems[0]


def test_clear_elr_empties_elr_and_bumps_partition_epoch_only_where_set() -> None:
    r = run(*topic_and_partition(), ev(2, "PARTITION_CHANGE_RECORD", 2, partition_id=0, topic_id=T1,
                                       eligible_leader_replicas=[2], last_known_elr=[3]),
            ev(3, "CLEAR_ELR_RECORD", topic_name="t"), ev(4, "CLEAR_ELR_RECORD", topic_name=""))
    p = part(r)
    assert (p["elr"], p["last_known_elr"], p["partition_epoch"], p["leader_epoch"]) == ([], [], 9, 5)


def test_remove_topic_removes_partitions_and_topic_configs_but_not_broker_configs() -> None:
    r = run(*topic_and_partition(),
            ev(2, "CONFIG_RECORD", resource_type=2, resource_name="t", name="retention.ms", value="1"),
            ev(3, "CONFIG_RECORD", resource_type=4, resource_name="", name="log.retention.ms", value="2"),
            ev(4, "REMOVE_TOPIC_RECORD", topic_id=T1),
            ev(5, "TOPIC_RECORD", name="t", topic_id=T2))
    e = r.image.entities
    assert e["partitions"] == {} and list(e["topics"]) == [(T2,)]
    assert list(e["configs"]) == [("BROKER", "", "log.retention.ms")]  # names from schemas/enums.json


def test_remove_topic_finds_the_partitions_the_image_holds_however_they_came() -> None:
    """RemoveTopic (and a TopicRecord of a topic the image holds) reads a topic's partitions from an index by topic
    (``Replayer.group``): built on a first removal, kept by later records, built again after a snapshot replaced the
    image or a restored state put entities in it."""
    def partition(offset: int, topic: str, pid: int) -> Event:
        return ev(offset, "PARTITION_RECORD", partition_id=pid, topic_id=topic, replicas=[1], isr=[1],
                  removing_replicas=[], adding_replicas=[], leader=1, leader_epoch=0, partition_epoch=0)

    r = run(ev(0, "TOPIC_RECORD", name="t", topic_id=T1), partition(1, T1, 0), partition(2, T1, 1),
            ev(3, "TOPIC_RECORD", name="u", topic_id=T2), partition(4, T2, 0),
            ev(5, "CONFIG_RECORD", resource_type=2, resource_name="u", name="retention.ms", value="1"),
            ev(6, "REMOVE_TOPIC_RECORD", topic_id=T2))  # (the index is built)
    e = r.image.entities
    assert sorted(e["partitions"]) == [(T1, 0), (T1, 1)] and e["configs"] == {}
    for event in (ev(7, "TOPIC_RECORD", name="u", topic_id=T2), partition(8, T2, 3), partition(9, T1, 2),
                  ev(10, "CONFIG_RECORD", resource_type=2, resource_name="u", name="cleanup.policy", value="x")):
        r.apply(event)  # (kept up to date by the replay's own changes)
    e["partitions"][(T2, 7)] = dict(e["partitions"][(T2, 3)])  # a partition a restored state put in place
    r.apply(ev(11, "REMOVE_TOPIC_RECORD", topic_id=T2))
    assert sorted(r.image.entities["partitions"]) == [(T1, 0), (T1, 1), (T1, 2)]
    assert r.image.entities["configs"] == {}
    r.load_snapshot([ev(0, "TOPIC_RECORD", name="u", topic_id=T2), partition(1, T2, 5)], 50, 0)
    r.apply(ev(51, "REMOVE_TOPIC_RECORD", topic_id=T2))
    assert r.image.entities["partitions"] == {} and r.image.entities["topics"] == {} and not r.problems
    r.apply(ev(52, "TOPIC_RECORD", name="t", topic_id=T1))
    r.apply(partition(53, T1, 0))
    r.apply(ev(54, "TOPIC_RECORD", name="t", topic_id=T1))  # a TopicRecord of a topic the image holds: a new
    assert list(r.image.entities["topics"]) == [(T1,)] and r.image.entities["partitions"] == {}  # one, no partitions


# -- configs, quotas, features, brokers --------------------------------------------------------------------

def test_null_config_value_deletes_and_quota_remove_deletes() -> None:
    entity = [{"entity_type": "user", "entity_name": "alice"}]
    r = run(ev(0, "CONFIG_RECORD", resource_type=4, resource_name="1", name="k", value="v"),
            ev(1, "CONFIG_RECORD", resource_type=4, resource_name="1", name="k", value=None),
            ev(2, "CLIENT_QUOTA_RECORD", entity=entity, key="producer_byte_rate", value=5.0, remove=False),
            ev(3, "CLIENT_QUOTA_RECORD", entity=entity, key="consumer_byte_rate", value=6.0, remove=False),
            ev(4, "CLIENT_QUOTA_RECORD", entity=entity, key="producer_byte_rate", value=0.0, remove=True))
    assert r.image.entities["configs"] == {}
    assert r.image.entities["client_quotas"] == {('[["user","alice"]]', "consumer_byte_rate"): {"value": 6.0}}


def test_feature_level_zero_removes_a_feature_but_not_metadata_version_and_kraft_version_is_ignored() -> None:
    r = run(ev(0, "FEATURE_LEVEL_RECORD", name="group.version", feature_level=1),
            ev(1, "FEATURE_LEVEL_RECORD", name="group.version", feature_level=0),
            ev(2, "FEATURE_LEVEL_RECORD", name="metadata.version", feature_level=21),
            ev(3, "FEATURE_LEVEL_RECORD", name="kraft.version", feature_level=1),
            control(4, "KRaftVersion", version=0, kraft_version=1))
    assert r.image.entities["features"] == {("metadata.version",): {"level": 21, "version_name": "3.9-IV0"}}
    assert r.image.entities["kraft_version"] == {(): {"kraft_version": 1}}


def _register(offset: int, epoch: int) -> Event:
    return ev(offset, "REGISTER_BROKER_RECORD", 1, broker_id=1, incarnation_id=T1, broker_epoch=epoch,
              end_points=[{"name": "PLAINTEXT", "host": "h", "port": 9092, "security_protocol": 0}], features=[],
              rack=None, fenced=True, in_controlled_shutdown=False)


def test_broker_changes_apply_only_with_the_registered_epoch() -> None:
    r = run(_register(0, 0), ev(1, "BROKER_REGISTRATION_CHANGE_RECORD", broker_id=1, broker_epoch=0, fenced=-1),
            ev(2, "BROKER_REGISTRATION_CHANGE_RECORD", 1, broker_id=1, broker_epoch=99, fenced=1),
            ev(3, "BROKER_REGISTRATION_CHANGE_RECORD", 1, broker_id=1, broker_epoch=0, in_controlled_shutdown=1))
    b = r.image.entities["brokers"][(1,)]
    assert (b["fenced"], b["in_controlled_shutdown"]) == (False, True) and "epoch 99" in r.problems[0]
    r = run(_register(0, 0), ev(1, "FENCE_BROKER_RECORD", id=1, epoch=0), ev(2, "UNFENCE_BROKER_RECORD", id=1, epoch=0),
            ev(3, "FENCE_BROKER_RECORD", id=1, epoch=0), ev(4, "UNREGISTER_BROKER_RECORD", broker_id=1, broker_epoch=0))
    assert r.image.entities["brokers"] == {}


# -- transactions and snapshots --------------------------------------------------------------------------

def test_a_committed_transaction_applies_at_its_end_and_an_aborted_one_not_at_all() -> None:
    changes: list[Any] = []
    r = Replayer(changes.append)
    for e in (ev(0, "BEGIN_TRANSACTION_RECORD", name="Bootstrap records"),
              ev(1, "FEATURE_LEVEL_RECORD", name="metadata.version", feature_level=21),
              ev(2, "NO_OP_RECORD"), ev(3, "END_TRANSACTION_RECORD"),
              ev(4, "BEGIN_TRANSACTION_RECORD", name="x"), ev(5, "TOPIC_RECORD", name="t", topic_id=T1),
              ev(6, "ABORT_TRANSACTION_RECORD", reason="Controller failover"),
              ev(7, "BEGIN_TRANSACTION_RECORD", name="y"), ev(8, "TOPIC_RECORD", name="u", topic_id=T2)):
        r.apply(e)
        if e.offset == 2:
            assert r.image.entities["features"] == {}  # not visible before the End
    r.finish()
    assert [(c.kind, c.offset) for c in changes] == [("features", 3)]
    assert r.image.entities["topics"] == {} and "still open" in r.problems[0]


def test_nested_begin_and_orphan_end_are_reported() -> None:
    r = run(ev(0, "BEGIN_TRANSACTION_RECORD", name="a"), ev(1, "BEGIN_TRANSACTION_RECORD", name="b"),
            ev(2, "END_TRANSACTION_RECORD"), ev(3, "END_TRANSACTION_RECORD"), ev(4, "ABORT_TRANSACTION_RECORD"),
            ev(5, "BEGIN_TRANSACTION_RECORD", name="c"))
    assert "inside the transaction begun at 0" in r.problems[0]
    assert "EndTransaction without BeginTransaction" in r.problems[1]
    assert "AbortTransaction without BeginTransaction" in r.problems[2]
    assert r.open_transaction == 5 and "still open" in r.problems[3]


def test_a_snapshot_replaces_the_image_except_the_producer_id_mark() -> None:
    r = run(*topic_and_partition(), ev(2, "PRODUCER_IDS_RECORD", broker_id=1, broker_epoch=0, next_producer_id=1000))
    r.load_snapshot([ev(0, "TOPIC_RECORD", name="other", topic_id=T2)], 50, 0)
    assert list(r.image.entities["topics"]) == [(T2,)] and r.image.entities["partitions"] == {}
    assert r.image.entities["producer_ids"][()]["next_producer_id"] == 1000


# -- versions -------------------------------------------------------------------------------------------

def test_versions_collapse_per_offset_skip_no_ops_and_are_handed_over_when_they_close() -> None:
    rows: list[tuple[str, Any]] = []
    history = Versions("c", lambda kind, row: rows.append((kind, as_dict(kind, row))))

    def change(offset: int, name: str | None) -> None:
        history.add(Change("topics", (T1,), None if name is None else {"name": name}, offset, 1000 + offset))

    change(1, "a")
    change(2, "b")
    change(2, "c")  # the same offset (a transaction): the last change counts
    change(3, "c")  # no change: not a version
    assert rows == [("topics", {"cluster_id": "c", "topic_id": T1, "name": "a", "valid_from_offset": 1,
                                "valid_to_offset": 2, "valid_from": 1001, "valid_to": 1002, "ended_by": "update"})]
    change(4, "x")
    change(4, "c")  # changed and changed back at one offset: no version
    change(5, None)
    change(7, "d")
    history.finish()
    spans = [(r["name"], r["valid_from_offset"], r["valid_to_offset"], r["ended_by"]) for _, r in rows]
    assert spans == [("a", 1, 2, "update"), ("c", 2, 5, "delete"), ("d", 7, None, None)]


def test_a_partition_version_carries_the_leader_and_isr_of_the_version_it_replaced() -> None:
    rows: list[dict[str, Any]] = []
    history = Versions("c", lambda kind, row: rows.append(as_dict(kind, row)))

    def change(offset: int, leader: int | None, isr: list[int] | None = None) -> None:
        value = None if leader is None else {"leader": leader, "isr": isr or [leader], "elr": [],
                                             "leader_recovery_state": "RECOVERED"}
        history.add(Change("partitions", (T1, 0), value, offset, 1000 + offset))

    change(1, 1, [1, 2])
    change(2, 2, [2])
    change(3, 2, [2])  # no change: not a version
    change(4, 3)
    change(4, 1, [1, 2, 3])  # a transaction: the last change counts, and it replaced the version of offset 2
    change(6, None)
    change(7, 5)  # after a deletion: it replaced none
    history.finish()
    got = [(r["valid_from_offset"], r["previous_leader"], r["previous_isr"]) for r in rows]
    assert got == [(1, None, None), (2, 1, [1, 2]), (4, 2, [2]), (7, None, None)]
    assert {r["previous_leader_recovery_state"] for r in rows[1:3]} == {"RECOVERED"}


# -- real data ---------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def scenario(scenario_a: Path) -> Any:
    return load_clusters([scenario_a], redact=False)[0]


def test_state_at_every_dumped_snapshot_equals_kafka_metadata_shell(scenario: Any, scenario_a: Path) -> None:
    dumps = sorted((scenario_a / "reference" / "metadata-shell").glob("*/*.txt"))
    assert len(dumps) >= 13
    for f in dumps:
        theirs = parse_shell_dump(f)
        ours = image_tree(state_at(scenario, int(f.name.split("-")[0]) - 1))
        for section, t in theirs.items():
            o = ours[section]
            if section == "scram":  # kraftlog keeps no SCRAM keys: compare users and iterations
                o, t = ({m: {u: v.rsplit("iterations=", 1)[1] for u, v in us.items()} for m, us in x.items()}
                        for x in (o, t))
            if section == "features":  # 3.9 applied FeatureLevelRecord(kraft.version); trunk ignores it
                t = {k: v for k, v in t.items() if k != "finalized_kraft.version"}
            if section == "clientQuotas":  # the 3.9 shell cannot show entities with a default part
                o = {k: v for k, v in o.items() if k in t}
            if section == "topics":
                t = {"byId": t.get("byId", {}), "byName": t.get("byName", {})}
            assert o == t, f"{f}: {section}"


LIVE_AT = 1795231179136  # end of the last command of the live captures, before the shutdown (timeline.md)


def test_state_before_shutdown_equals_what_kafkas_tools_reported(scenario: Any, scenario_a: Path) -> None:
    live = scenario_a / "reference" / "live"
    image = state_at(scenario, timestamp_ms=LIVE_AT)
    e = image.entities
    assert state_at(scenario, timestamp_ms=1795231130884).entities == e  # stable over the capture window
    names = {k[0]: v["name"] for k, v in e["topics"].items()}
    parts = {(names[k[0]], k[1]): v for k, v in e["partitions"].items()}
    topic_ids = {}
    described = 0
    for line in (live / "kafka-topics-describe.txt").read_text().splitlines():
        m = re.match(r"Topic: (\S+)\tTopicId: (\S+)\tPartitionCount: (\d+)", line)
        if m:
            topic_ids[m.group(1)] = m.group(2)
            assert sum(1 for t, _ in parts if t == m.group(1)) == int(m.group(3))
        m = re.match(r"\tTopic: (\S+)\tPartition: (\d+)\tLeader: (\S+)\tReplicas: ([\d,]*)\tIsr: ([\d,]*)\t"
                     r"Elr: ([\d,]*)\tLastKnownElr: ([\d,]*)", line)
        if m:
            p = parts[(m.group(1), int(m.group(2)))]
            ints = [[int(x) for x in g.split(",") if x] for g in m.group(4, 5, 6, 7)]
            leader = -1 if m.group(3) == "none" else int(m.group(3))
            assert (p["leader"], p["replicas"], p["isr"], p["elr"], p["last_known_elr"]) == (leader, *ints), line
            described += 1
    assert described == len(parts) == 35
    assert topic_ids == {v: k for k, v in names.items()}

    configs = {(k[0], k[1]): {} for k in e["configs"]}
    for (rtype, rname, key), v in e["configs"].items():
        configs[(rtype, rname)][key] = v["value"]
    for fname, rtype in (("kafka-configs-topics.txt", "TOPIC"), ("kafka-configs-brokers.txt", "BROKER")):
        current = None
        seen: dict[tuple[str, str], dict[str, str]] = {}
        for line in (live / fname).read_text().splitlines():
            m = re.match(r"(?:Dynamic|Default) configs for (?:topic|broker) ?(\S*?) ?(?:in the cluster )?are:", line)
            if m or line.startswith("Default configs for brokers"):
                current = (rtype, "" if line.startswith("Default") else m.group(1))  # type: ignore[union-attr]
                seen[current] = {}
            elif line.startswith("  ") and current is not None:
                k, _, rest = line.strip().partition("=")
                seen[current][k] = rest.split(" sensitive=")[0]
        for res, kv in seen.items():
            ours = configs.get(res, {})
            assert set(ours) == set(kv), res
            for k, v in kv.items():
                assert v == "null" or ours[k] == v, (res, k)  # sensitive values print as null

    acls = set()
    resource = None
    for line in (live / "kafka-acls-list.txt").read_text().splitlines():
        m = re.match(r"Current ACLs for resource `ResourcePattern\(resourceType=(\w+), name=(.*), "
                     r"patternType=(\w+)\)`", line)
        if m:
            resource = m.groups()
        m2 = re.search(r"\(principal=(.*), host=(.*), operation=(\w+), permissionType=(\w+)\)", line)
        if m2 and resource:
            acls.add((*resource, *m2.groups()))
    ours_acls = {(a["resource_type"], a["resource_name"], a["pattern_type"], a["principal"], a["host"],
                  a["operation"], a["permission_type"]) for a in e["acls"].values()}
    assert acls == ours_acls and len(acls) == 9

    quotas: dict[str, dict[str, float]] = {}
    for line in (live / "client-quotas-describe.txt").read_text().splitlines():
        m = re.match(r"Quota configs for (.*) are (.*)", line)
        if not m:
            continue
        parts_ = []
        for who in m.group(1).split(", "):
            kind = "user" if "user-principal" in who else ("ip" if who.startswith("ip") else "client-id")
            name = re.search(r"'(.*)'", who)
            parts_.append([kind, name.group(1) if name else None])
        entity = json.dumps(sorted(parts_), separators=(",", ":"))
        quotas[entity] = {k: float(v) for k, v in (kv.split("=") for kv in m.group(2).split(", "))}
    ours_q: dict[str, dict[str, float]] = {}
    for (entity, key), v in e["client_quotas"].items():
        ours_q.setdefault(entity, {})[key] = v["value"]
    assert ours_q == quotas and len(quotas) == 7

    scram = set(re.findall(r"SCRAM credential configs for user-principal '(\w+)' are (SCRAM-SHA-\d+)=iterations=(\d+)",
                           (live / "kafka-configs-users.txt").read_text()))
    assert scram == {(name, mech, str(v["iterations"]))
                     for (mech, name), v in e["scram_users"].items()}

    features = dict(re.findall(r"Feature: (\S+)\t.*FinalizedVersionLevel: (\S+)",
                               (live / "kafka-features-describe.txt").read_text()))
    assert features["metadata.version"] == e["features"][("metadata.version",)]["version_name"]
    assert int(features["kraft.version"]) == e["kraft_version"][()]["kraft_version"]

    status = (live / "kafka-metadata-quorum-status.txt").read_text()
    voters = json.loads(re.search(r"CurrentVoters:\s+(\[.*\])", status).group(1))  # type: ignore[union-attr]
    assert {(v["id"], v["directoryId"], v["endpoints"][0]) for v in voters} == {
        (k[0], v["directory_id"], f"{v['endpoints'][0]['name']}://{v['endpoints'][0]['host']}:"
                                  f"{v['endpoints'][0]['port']}") for k, v in e["voters"].items()}


@pytest.mark.slow
def test_verify_finds_no_difference_at_any_reachable_snapshot_of_the_corpus_and_scenarios(shared: Path) -> None:
    roots = sorted((shared / "corpus" / "real").iterdir()) + sorted((shared / "corpus" / "local").iterdir())
    roots += sorted((shared / "scenarios" / "A").glob("node-*"))
    checked = 0
    problems = []
    for root in roots:
        for cl in load_clusters([root]):
            for c in verify(cl):
                checked += c.reachable
                problems += [f"{root.name} {c.snapshot_id}: {d.describe()}" for d in c.differences]
    assert checked >= 160, checked  # 132 in scenario A's six nodes, the rest in the corpus and local runs
    assert problems == []
    # the lists the replayer shares among versions (``shared``) were never changed in place by all those replays
    from kraftlog.state.replay import _SHARED
    assert _SHARED and all(list(values) == held for values, held in _SHARED.items())


def test_diff_lists_every_changed_field(scenario: Any) -> None:
    before, after = state_at(scenario, 1850), state_at(scenario, 1900)
    changes = {(d.kind, d.key, d.field) for d in diff_images(before, after)}
    assert ("brokers", (103,), "fenced") in changes and ("brokers", (102,), "in_controlled_shutdown") in changes
    assert not diff_images(after, after)


def test_cli_state_diff_shell_and_verify() -> None:
    runner = CliRunner()
    out = runner.invoke(main, ["state", str(SAMPLE), "--at", "2026-11-21T03:19:39Z", "--kind", "topics"])
    assert out.exit_code == 0, out.output
    doc = json.loads(out.output)
    assert doc["offset"] == 1846 and "orders" in {t["name"] for t in doc["topics"]}
    out = runner.invoke(main, ["diff", str(SAMPLE), "--from", "1850", "--to", "1900", "--kind", "brokers"])
    assert json.loads(out.output.splitlines()[0])["kind"] == "brokers"
    out = runner.invoke(main, ["diff", str(SAMPLE), "--from", "0", "--to", "latest", "--kind", "partitions"])
    rows = [json.loads(x) for x in out.output.splitlines()]
    assert rows and all(r["kind"] == "partitions" for r in rows)
    assert "orders" in {r.get("topic") for r in rows}  # partitions named by their topic too, not only by id
    out = runner.invoke(main, ["shell", str(SAMPLE), "--at", "1834", "--path", "/image/features"])
    assert "metadataVersion:\n  3.9-IV0" in out.output
    out = runner.invoke(main, ["verify", str(SAMPLE / "node-1"), "--quiet"])
    assert out.exit_code == 0 and "with differences: 0" in out.output


def test_a_kind_that_is_no_entity_kind_is_a_usage_error_naming_the_kinds() -> None:
    """``--kind partitons`` (a typo) printed a state with no entities, and a diff with no change, as if nothing had
    changed; it is a usage error now, naming every kind."""
    runner = CliRunner()
    for command in (["state", str(SAMPLE)], ["diff", str(SAMPLE), "--from", "0"]):
        out = runner.invoke(main, [*command, "--kind", "brokers", "--kind", "partitons"])
        assert out.exit_code == 2, out.output
        assert "'partitons': not an entity kind; the kinds: brokers, controllers, topics, partitions" in out.output


def test_cli_verify_exits_one_when_a_snapshot_differs(tmp_path: Path) -> None:
    import shutil

    node = tmp_path / "node-1"
    shutil.copytree(SAMPLE / "node-1", node)
    for p in node.rglob("*"):
        p.chmod(0o644 if p.is_file() else 0o755)
    snap = node / "__cluster_metadata-0" / "00000000000000001835-0000000003.checkpoint"
    data = bytearray(snap.read_bytes())
    i = data.index(b"orders")
    data[i:i + 6] = b"ORDERS"  # a topic renamed inside the snapshot: the CRC must be fixed to keep it readable
    from crc32c import crc32c

    from kraftlog.wire.files import read_log
    for b in read_log(bytes(data)).batches:
        if not b.crc_valid:
            end = b.position + b.size
            data[b.position + 17:b.position + 21] = crc32c(bytes(data[b.position + 21:end])).to_bytes(4, "big")
    snap.write_bytes(bytes(data))
    out = CliRunner().invoke(main, ["verify", str(node), "--quiet"])
    assert out.exit_code == 1 and "topics" in out.output and "ORDERS" in out.output


def test_history_rows_are_made_in_the_columns_of_their_tables() -> None:
    """A replay's rows are tuples in column order (``COLUMNS``, read from each history table's schema): they go to
    Arrow by position, so each value must sit at the index of its column."""
    from kraftlog.state.entities import BY_NAME, history_tables, previous_column
    from kraftlog.state.history import COLUMNS

    assert {kind: list(COLUMNS[kind]) for kind in COLUMNS} == {
        kind: t.schema.names for kind, t in history_tables().items()}
    for kind, k in BY_NAME.items():
        key = tuple(f"key:{n}" for n in k.key_names)
        old = {n: f"old:{n}" for n in k.value_names}
        new = {n: f"new:{n}" for n in k.value_names}
        rows: list[tuple[object, ...]] = []
        history = Versions("c", lambda _kind, row, rows=rows: rows.append(row))
        history.resume(kind, key, 5, 50, new, replaced=old)
        history.add(Change(kind, key, None, 9, 90))
        history.finish()
        want = {"cluster_id": "c", **dict(zip(k.key_names, key, strict=True)), **new,
                **{previous_column(n): f"old:{n}" for n in k.previous},
                "valid_from_offset": 5, "valid_to_offset": 9, "valid_from": 50, "valid_to": 90, "ended_by": "delete"}
        assert rows == [tuple(want[c] for c in COLUMNS[kind])], kind
