"""Random KRaft metadata logs for property tests: hypothesis strategies and a data-directory writer.

A generated cluster is an optional base snapshot plus a log: metadata records of every type the
replay reads, over a deliberately tiny key space (3 brokers, 3 topic ids sharing 2 names, 2
partitions, ...) so that creates, updates, deletes, re-creates, stale broker epochs, unknown
partitions, ELR clears, metadata transactions (committed, aborted, nested, left open) and KRaft
control records collide often. Records are encoded with ``tests/encoder.py`` into real files.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from encoder import Encoder, batch, control_key, metadata_value, record
from hypothesis import strategies as st

from kraftlog.schema.registry import load_schemas
from kraftlog.state.entities import MIGRATING

S = load_schemas()
BY_TYPE = {spec.record_type: spec for spec in S.metadata.values()}
CONTROL = {spec.dump_name: spec for spec in S.control.values()}


def uid(n: int) -> str:
    """A Kafka Base64 uuid from a small number."""
    import base64

    return base64.urlsafe_b64encode(n.to_bytes(16, "big")).decode().rstrip("=")


BROKERS = [1, 2, 3]
TOPIC_IDS = [uid(101), uid(102), uid(103)]
NAMES = ["a", "b"]
DIRS = [uid(201), uid(202), uid(203), MIGRATING]
INCARNATIONS = [uid(301), uid(302)]
ACL_IDS = [uid(401), uid(402), uid(403)]
TOKENS = ["tok-1", "tok-2"]
MV_LEVELS = [7, 14, 21]

Item = tuple[str, str, int, dict[str, Any]]  # ("meta" | "control", type, version, data)


def _version(draw: Any, rtype: str) -> int:
    v = BY_TYPE[rtype].valid_versions
    return draw(st.integers(v.lowest, v.highest))


def _ints(pool: list[int], lo: int = 0, hi: int = 3) -> st.SearchStrategy[list[int]]:
    return st.lists(st.sampled_from(pool), min_size=lo, max_size=hi, unique=True)


_LISTENERS = st.lists(st.sampled_from(["PLAINTEXT", "SSL", "INTERNAL"]), max_size=2, unique=True).map(
    lambda names: [{"name": n, "host": "h", "port": 9092 + i, "security_protocol": i} for i, n in enumerate(names)])
_FEATURES = st.lists(st.sampled_from(["metadata.version", "kraft.version"]), max_size=2, unique=True).map(
    lambda names: [{"name": n, "min_supported_version": 0, "max_supported_version": 21} for n in names])


@st.composite
def meta_record(draw: Any) -> Item:
    """One metadata record of any type the replay reads (never a transaction marker)."""
    t = draw(st.sampled_from([
        "REGISTER_BROKER_RECORD", "BROKER_REGISTRATION_CHANGE_RECORD", "FENCE_BROKER_RECORD", "UNFENCE_BROKER_RECORD",
        "UNREGISTER_BROKER_RECORD", "TOPIC_RECORD", "TOPIC_RECORD", "REMOVE_TOPIC_RECORD", "PARTITION_RECORD",
        "PARTITION_RECORD", "PARTITION_CHANGE_RECORD", "PARTITION_CHANGE_RECORD", "PARTITION_CHANGE_RECORD",
        "CLEAR_ELR_RECORD", "CONFIG_RECORD", "CONFIG_RECORD", "CLIENT_QUOTA_RECORD", "ACCESS_CONTROL_ENTRY_RECORD",
        "REMOVE_ACCESS_CONTROL_ENTRY_RECORD", "USER_SCRAM_CREDENTIAL_RECORD", "REMOVE_USER_SCRAM_CREDENTIAL_RECORD",
        "DELEGATION_TOKEN_RECORD", "REMOVE_DELEGATION_TOKEN_RECORD", "FEATURE_LEVEL_RECORD",
        "REMOVE_FEATURE_LEVEL_RECORD", "PRODUCER_IDS_RECORD", "ZK_MIGRATION_STATE_RECORD",
        "REGISTER_CONTROLLER_RECORD", "UNREGISTER_CONTROLLER_RECORD", "NO_OP_RECORD"]))
    v = _version(draw, t)
    broker = draw(st.sampled_from(BROKERS))
    epoch = draw(st.integers(0, 2))
    d: dict[str, Any]
    if t == "REGISTER_BROKER_RECORD":
        d = {"broker_id": broker, "broker_epoch": epoch, "incarnation_id": draw(st.sampled_from(INCARNATIONS)),
             "end_points": draw(_LISTENERS), "features": draw(_FEATURES),
             "rack": draw(st.sampled_from([None, "r1"])), "fenced": draw(st.booleans()),
             "in_controlled_shutdown": draw(st.booleans()), "is_migrating_zk_broker": draw(st.booleans()),
             "log_dirs": draw(st.lists(st.sampled_from(DIRS[:3]), max_size=2, unique=True)),
             "cordoned_log_dirs": draw(st.one_of(st.none(), st.lists(st.sampled_from(DIRS[:3]), max_size=1)))}
    elif t == "BROKER_REGISTRATION_CHANGE_RECORD":
        d = {"broker_id": broker, "broker_epoch": epoch, "fenced": draw(st.sampled_from([-1, 0, 1, 1, 2])),
             "in_controlled_shutdown": draw(st.sampled_from([0, 1, 1, 3])),
             "log_dirs": draw(st.lists(st.sampled_from(DIRS[:3]), max_size=2, unique=True)),
             "cordoned_log_dirs": draw(st.one_of(st.none(), st.lists(st.sampled_from(DIRS[:3]), max_size=1)))}
    elif t in ("FENCE_BROKER_RECORD", "UNFENCE_BROKER_RECORD"):
        d = {"id": broker, "epoch": epoch}
    elif t == "UNREGISTER_BROKER_RECORD":
        d = {"broker_id": broker, "broker_epoch": epoch}
    elif t == "TOPIC_RECORD":
        d = {"topic_id": draw(st.sampled_from(TOPIC_IDS)), "name": draw(st.sampled_from(NAMES))}
    elif t == "REMOVE_TOPIC_RECORD":
        d = {"topic_id": draw(st.sampled_from(TOPIC_IDS))}
    elif t == "PARTITION_RECORD":
        replicas = draw(_ints([*BROKERS, 4], 1, 3))
        n = len(replicas)
        d = {"topic_id": draw(st.sampled_from(TOPIC_IDS)), "partition_id": draw(st.integers(0, 1)),
             "replicas": replicas, "isr": draw(_ints(replicas, 0, n)), "removing_replicas": draw(_ints(replicas, 0, 1)),
             "adding_replicas": draw(_ints(replicas, 0, 1)), "leader": draw(st.sampled_from([*replicas, -1])),
             "leader_recovery_state": draw(st.sampled_from([0, 1])), "leader_epoch": draw(st.integers(0, 5)),
             "partition_epoch": draw(st.integers(0, 5)),
             "directories": draw(st.one_of(st.just([]), st.lists(st.sampled_from(DIRS), min_size=n, max_size=n),
                                           st.lists(st.sampled_from(DIRS), min_size=1, max_size=3))),
             "eligible_leader_replicas": draw(st.one_of(st.none(), _ints(BROKERS, 0, 2))),
             "last_known_elr": draw(st.one_of(st.none(), _ints(BROKERS, 0, 1)))}
    elif t == "PARTITION_CHANGE_RECORD":
        replicas = draw(st.one_of(st.none(), _ints([*BROKERS, 4], 1, 3)))
        d = {"topic_id": draw(st.sampled_from(TOPIC_IDS)), "partition_id": draw(st.integers(0, 1)),
             "isr": draw(st.one_of(st.none(), _ints([*BROKERS, 4]))),
             "leader": draw(st.sampled_from([-2, -2, -1, 1, 2, 4])), "replicas": replicas,
             "removing_replicas": draw(st.one_of(st.none(), _ints(BROKERS, 0, 1))),
             "adding_replicas": draw(st.one_of(st.none(), _ints([4], 0, 1))),
             "leader_recovery_state": draw(st.sampled_from([-1, -1, 0, 1, 2])),
             "directories": draw(st.one_of(st.none(), st.lists(st.sampled_from(DIRS), min_size=1, max_size=3))),
             "eligible_leader_replicas": draw(st.one_of(st.none(), _ints(BROKERS, 0, 2))),
             "last_known_elr": draw(st.one_of(st.none(), _ints(BROKERS, 0, 1)))}
    elif t == "CLEAR_ELR_RECORD":
        d = {"topic_name": draw(st.sampled_from(["", "a", "b", "gone"]))}
    elif t == "CONFIG_RECORD":
        rtype = draw(st.sampled_from([2, 4]))
        d = {"resource_type": rtype, "resource_name": draw(st.sampled_from(NAMES if rtype == 2 else ["", "1"])),
             "name": draw(st.sampled_from(["retention.ms", "cleanup.policy", "min.insync.replicas"])),
             "value": draw(st.sampled_from([None, "1", "2"]))}
    elif t == "CLIENT_QUOTA_RECORD":
        d = {"entity": draw(st.sampled_from([[{"entity_type": "user", "entity_name": "u1"}],
                                             [{"entity_type": "client-id", "entity_name": None}],
                                             [{"entity_type": "user", "entity_name": "ü"},
                                              {"entity_type": "client-id", "entity_name": "c"}]])),
             "key": draw(st.sampled_from(["producer_byte_rate", "consumer_byte_rate"])),
             "value": draw(st.sampled_from([1024.0, 2048.5])), "remove": draw(st.booleans())}
    elif t == "ACCESS_CONTROL_ENTRY_RECORD":
        d = {"id": draw(st.sampled_from(ACL_IDS)), "resource_type": draw(st.sampled_from([2, 3])),
             "resource_name": draw(st.sampled_from(NAMES)), "pattern_type": 3, "principal": "User:u1", "host": "*",
             "operation": draw(st.sampled_from([2, 3])), "permission_type": draw(st.sampled_from([2, 3]))}
    elif t == "REMOVE_ACCESS_CONTROL_ENTRY_RECORD":
        d = {"id": draw(st.sampled_from(ACL_IDS))}
    elif t == "USER_SCRAM_CREDENTIAL_RECORD":
        d = {"name": draw(st.sampled_from(["u1", "u2"])), "mechanism": draw(st.sampled_from([1, 2])),
             "salt": draw(st.binary(min_size=1, max_size=3)), "stored_key": b"k", "server_key": b"s",
             "iterations": draw(st.sampled_from([4096, 8192]))}
    elif t == "REMOVE_USER_SCRAM_CREDENTIAL_RECORD":
        d = {"name": draw(st.sampled_from(["u1", "u2"])), "mechanism": draw(st.sampled_from([1, 2]))}
    elif t == "DELEGATION_TOKEN_RECORD":
        d = {"token_id": draw(st.sampled_from(TOKENS)), "owner": "User:u1", "requester": "User:u1",
             "renewers": draw(st.lists(st.sampled_from(["User:a", "User:b"]), max_size=2)),
             "issue_timestamp": 1, "max_timestamp": 9, "expiration_timestamp": draw(st.integers(2, 8))}
    elif t == "REMOVE_DELEGATION_TOKEN_RECORD":
        d = {"token_id": draw(st.sampled_from(TOKENS))}
    elif t == "FEATURE_LEVEL_RECORD":
        name = draw(st.sampled_from(["metadata.version", "group.version", "kraft.version"]))
        d = {"name": name, "feature_level": draw(st.sampled_from(MV_LEVELS if name == "metadata.version" else [0, 1]))}
    elif t == "REMOVE_FEATURE_LEVEL_RECORD":
        d = {"name": draw(st.sampled_from(["group.version", "metadata.version"]))}
    elif t == "PRODUCER_IDS_RECORD":
        d = {"broker_id": broker, "broker_epoch": epoch, "next_producer_id": draw(st.sampled_from([1000, 2000]))}
    elif t == "ZK_MIGRATION_STATE_RECORD":
        d = {"zk_migration_state": draw(st.integers(0, 3))}
    elif t == "REGISTER_CONTROLLER_RECORD":
        d = {"controller_id": draw(st.sampled_from([3000, 3001])),
             "incarnation_id": draw(st.sampled_from(INCARNATIONS)),
             "zk_migration_ready": draw(st.booleans()), "end_points": draw(_LISTENERS), "features": draw(_FEATURES)}
    elif t == "UNREGISTER_CONTROLLER_RECORD":
        d = {"controller_id": draw(st.sampled_from([3000, 3001]))}
    else:
        d = {}
    return ("meta", t, v, d)


@st.composite
def control_record(draw: Any) -> Item:
    """A KRaft control record that carries state: VotersRecord or KRaftVersionRecord."""
    if draw(st.booleans()):
        return ("control", "KRaftVersion", 0, {"version": 0, "kraft_version": draw(st.integers(0, 1))})
    ids = draw(st.lists(st.sampled_from([1, 2, 3]), min_size=1, max_size=3, unique=True))
    return ("control", "KRaftVoters", 0, {"version": 0, "voters": [
        {"voter_id": i, "voter_directory_id": draw(st.sampled_from(DIRS[:2])),
         "endpoints": [{"name": "CONTROLLER", "host": "c", "port": 9093 + i}],
         "kraft_version_feature": {"min_supported_version": 0, "max_supported_version": draw(st.integers(0, 1))}}
        for i in ids]})


def _marker(t: str) -> Item:
    return ("meta", t, 0, {"name": "txn"} if t == "BEGIN_TRANSACTION_RECORD" else {})


@st.composite
def log_items(draw: Any, min_size: int = 1, max_size: int = 40) -> list[Item]:
    """A log: records, control records and transaction markers (well formed or not)."""
    items: list[Item] = []
    for _ in range(draw(st.integers(min_size, max_size))):
        roll = draw(st.integers(0, 19))
        if roll == 0:
            items.append(_marker("BEGIN_TRANSACTION_RECORD"))
        elif roll == 1:
            items.append(_marker(draw(st.sampled_from(["END_TRANSACTION_RECORD", "END_TRANSACTION_RECORD",
                                                       "ABORT_TRANSACTION_RECORD"]))))
        elif roll == 2:
            items.append(draw(control_record()))
        else:
            items.append(draw(meta_record()))
    return items


@dataclass
class GenCluster:
    """A generated cluster: an optional base snapshot (records) at ``snapshot_offset``, then the log."""

    cluster_id: str
    log: list[Item]
    snapshot: list[Item] | None = None
    snapshot_offset: int = 0
    epochs: list[int] = field(default_factory=list)


@st.composite
def clusters(draw: Any, n_min: int = 4, n_max: int = 10) -> list[GenCluster]:
    out = []
    for i in range(draw(st.integers(n_min, n_max))):
        snap = None
        offset = 0
        if draw(st.booleans()):
            snap = draw(st.lists(st.one_of(meta_record(), control_record()), min_size=1, max_size=25))
            offset = draw(st.integers(5, 50))
        out.append(GenCluster(f"gen-{i}", draw(log_items()), snap, offset))
    return out


def _encode(item: Item) -> tuple[bytes | None, bytes, bool]:
    kind, t, v, d = item
    if kind == "meta":
        return None, metadata_value(BY_TYPE[t], d, v), False
    spec = CONTROL[t]
    (ctype,) = spec.control_types
    return control_key(ctype), Encoder(spec).encode(d, 0), True


def _batches(items: list[Item], base_offset: int, ts0: int, epoch: int, sizes: list[int]) -> bytes:
    """Items as RecordBatches: metadata records in batches of ``sizes``, each control record alone."""
    out = bytearray()
    i = 0
    offset = base_offset
    k = 0
    while i < len(items):
        key, value, is_control = _encode(items[i])
        if is_control:
            group = [(key, value)]
            i += 1
        else:
            n = sizes[k % len(sizes)] if sizes else 1
            k += 1
            group = []
            while i < len(items) and len(group) < n:
                key, value, is_control = _encode(items[i])
                if is_control:
                    break
                group.append((key, value))
                i += 1
        recs = [record(j, v, key=kk, timestamp_delta=j * 7) for j, (kk, v) in enumerate(group)]
        out += batch(offset, recs, epoch=epoch, base_timestamp=ts0 + offset * 1000, control=is_control)
        offset += len(group)
    return bytes(out)


def write_cluster(root: Path, c: GenCluster, sizes: list[int] | None = None) -> Path:
    """A data directory for ``c``: meta.properties, the base snapshot (if any) and one log segment."""
    d = root / c.cluster_id
    log_dir = d / "__cluster_metadata-0"
    log_dir.mkdir(parents=True)
    (d / "meta.properties").write_text(f"version=1\ncluster.id={c.cluster_id}\nnode.id=1\n")
    start = 0
    if c.snapshot is not None:
        start = c.snapshot_offset + 1
        write_snapshot(log_dir, start, 3, c.snapshot, sizes or [3])
    (log_dir / f"{start:020d}.log").write_bytes(_batches(c.log, start, TS0, 4, sizes or [1, 2, 3]))
    return d


TS0 = 1_700_000_000_000  # the time of a generated log's first record (each next one a second later)


def write_snapshot(log_dir: Path, end: int, epoch: int, records: list[Item], sizes: list[int] | None = None) -> Path:
    """A snapshot file in ``log_dir``: ``records`` between a header and a footer, holding state as of ``end - 1``."""
    header = ("control", "SnapshotHeader", 0, {"version": 0, "last_contained_log_timestamp": TS0 + 123})
    footer = ("control", "SnapshotFooter", 0, {"version": 0})
    body = _batches([header], 0, TS0, epoch, [])
    body += _batches(records, 1, TS0, epoch, sizes or [3])
    body += _batches([footer], 1 + len(records), TS0, epoch, [])
    path = log_dir / f"{end:020d}-{epoch:010d}.checkpoint"
    path.write_bytes(body)
    return path
