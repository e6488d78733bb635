"""Replay metadata records into a cluster image, exactly as Kafka applies them (FACTS section d).

One replay rule per record type, after Kafka's ``*Delta.replay`` methods:

* a snapshot replaces the image (``load_snapshot``);
* PartitionRecord replaces a partition (directories default to MIGRATING, ELR to empty); a
  PartitionChangeRecord merges (null keeps, Leader -2 keeps, LeaderRecoveryState -1 keeps) and the
  epochs are computed: partitionEpoch + 1 always, leaderEpoch + 1 iff Leader != -2;
* ClearElr empties ELR and LastKnownElr (partitionEpoch + 1 where they were not empty);
* RemoveTopic removes the topic, its partitions and its TOPIC configs; a null config value deletes the
  key; a ClientQuota with Remove deletes the key; FeatureLevel 0 removes a feature (not
  metadata.version; kraft.version FeatureLevel records are ignored, KAFKA-18979);
* BrokerRegistrationChange / Fence / Unfence apply only to a broker with the same epoch;
* metadata transactions: records between Begin and End are applied together at End's offset; an
  Abort discards them; one still open at the end of the input is reported and not applied.

Replay problems (the cases where Kafka's loader raises and its fault handler skips the record) are
collected in ``problems`` and the record is skipped.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from kraftlog.schema.registry import load_schemas
from kraftlog.state.entities import KINDS, MIGRATING, UNASSIGNED
from kraftlog.wire.messages import Decoded

BEGIN, END, ABORT = "BEGIN_TRANSACTION_RECORD", "END_TRANSACTION_RECORD", "ABORT_TRANSACTION_RECORD"
MARKERS = (BEGIN, END, ABORT)

Key = tuple[Any, ...]
Value = dict[str, Any]


@dataclass(slots=True)
class Event:
    """A decoded record placed in the log: offset, timestamp (ms), batch epoch."""

    offset: int
    timestamp: int
    epoch: int
    decoded: Decoded
    value_hash: int | None = None


@dataclass(slots=True)
class Change:
    """One entity changed: ``value`` is None for a delete."""

    kind: str
    key: Key
    value: Value | None
    offset: int
    timestamp: int


@dataclass
class Image:
    """The metadata image: entities by kind and key, plus provenance."""

    entities: dict[str, dict[Key, Value]] = field(default_factory=lambda: {k.name: {} for k in KINDS})
    offset: int = -1
    timestamp: int = 0

    def copy(self) -> Image:
        return Image({k: dict(v) for k, v in self.entities.items()}, self.offset, self.timestamp)


@functools.cache
def control_types() -> frozenset[str]:
    """Names of the KRaft control records (voters, kraft.version, ...): they belong to the Raft layer, not to
    metadata transactions, and always apply at their own offset."""
    return frozenset(m.dump_name for m in load_schemas().messages if m.kind == "control" and m.dump_name)


def _sorted_by_name(items: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    return sorted(items or [], key=lambda e: e["name"])


def _listeners(items: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    return [{"name": e["name"], "host": e["host"], "port": e["port"], "security_protocol": e["security_protocol"]}
            for e in _sorted_by_name(items)]


def _features(items: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    return [{"name": e["name"], "min_supported_version": e["min_supported_version"],
             "max_supported_version": e["max_supported_version"]} for e in _sorted_by_name(items)]


def quota_entity(parts: list[dict[str, Any]]) -> str:
    """A client-quota entity as canonical JSON: [[type, name], ...] sorted by type (name null = default)."""
    return json.dumps(sorted([[p["entity_type"], p["entity_name"]] for p in parts], key=lambda x: x[0]),
                      separators=(",", ":"), ensure_ascii=False)


def _default_to_migrating(directories: list[str] | None, n: int) -> list[str]:
    """``PartitionRegistration.defaultToMigrating`` (as the image holds lists: ``shared``)."""
    return shared(directories) if directories else shared([MIGRATING] * n)


_SHARED: dict[tuple[Any, ...], list[Any]] = {}  # lists by their values (``shared``)
SHARED_KEPT = 1 << 16  # at most so many (forgotten all at once past that)


def shared(values: list[Any]) -> list[Any]:
    """``values`` as the image holds a list: one list object for all lists of the same values (a cluster's partitions
    name few combinations of replicas and directories). The image's values are never changed in place (a version is a
    new dict, sharing the lists of the one before), so the rows of a partition's versions point to a few lists of the
    whole cluster, which their conversion to Arrow reads in cache: a list of each record's own, allocated wherever,
    made a reconstruct task's replay of a big cluster a fifth slower."""
    key = tuple(values)
    held = _SHARED.get(key)
    if held is None:
        if len(_SHARED) >= SHARED_KEPT:
            _SHARED.clear()
        held = _SHARED[key] = values
    return held


def _directories_from(replicas: list[int], directories: list[str], new_replicas: list[int]) -> list[str]:
    """``DirectoryId.createDirectoriesFrom``: keep a surviving replica's directory, UNASSIGNED for new ones."""
    assignment = dict(zip(replicas, directories, strict=False))
    return [assignment.get(r, UNASSIGNED) for r in new_replicas]


_STILL_OPEN = re.compile(r"transaction begun at offset (\d+) is still open at the end of the input: its (\d+) ")


def still_open(begin: int, records: int) -> str:
    """The problem of a metadata transaction still open at the end of the input, with how many of its records replay
    reads (``Replayer.record_types``: the others change nothing, and a Spark replay's stream does not carry them);
    ``still_open_parts`` reads it."""
    return f"transaction begun at offset {begin} is still open at the end of the input: its {records} record(s) are " \
           "not applied"


def still_open_parts(problem: str) -> tuple[int, int] | None:
    """(begin offset, records) of a ``still_open`` problem, else None."""
    m = _STILL_OPEN.match(problem)
    return (int(m.group(1)), int(m.group(2))) if m else None


@dataclass(frozen=True)
class TopicsRead:
    """Some topics and partitions (of ``Replayer.TOPIC_KINDS``): ``topics`` whole, with all their partitions, and
    single ``partitions`` (topic id, partition id), without their topic."""

    topics: frozenset[str] = frozenset()
    partitions: frozenset[tuple[str, int]] = frozenset()

    @classmethod
    def of(cls, topics: Iterable[str], partitions: Iterable[tuple[str, int]]) -> TopicsRead:
        """``topics`` whole and ``partitions`` (but those of the topics whole: they hold them)."""
        whole = frozenset(topics)
        return cls(whole, frozenset(p for p in partitions if p[0] not in whole))

    @property
    def empty(self) -> bool:
        return not self.topics and not self.partitions

    def of_kind(self, kind: str) -> TopicsRead:
        """What these hold of the entities of ``kind`` (topics or partitions): of the topics, those named whole only (a
        partition named alone does not hold its topic)."""
        return self if kind == "partitions" else TopicsRead(self.topics)

    def holds(self, kind: str, key: Key) -> bool:
        """Whether the entity ``key`` of ``kind`` (a topic or a partition) is among these."""
        read = self.of_kind(kind)
        return key[0] in read.topics or key[:2] in read.partitions

    def by_topic(self) -> TopicsRead:
        """The same, the topic of each partition named read whole."""
        return TopicsRead(self.topics | {t for t, _ in self.partitions})


class _Groups:
    """The keys of one kind of entities by group (``group(key)``: a topic's partitions, a topic's configs), so that a
    rule removing a group (RemoveTopic) costs the group, not every entity of the kind, as in Kafka's image, where a
    topic holds its partitions. Built from ``entities`` on first use and kept up to date by the replayer's own sets
    and deletes (``added``, ``removed``); ``current`` tells whether it still holds the keys of ``entities`` (another
    dict, or keys added otherwise, as a restored state: build it again)."""

    def __init__(self, entities: dict[Key, Value], group: Callable[[Key], Any]):
        self.entities, self.group = entities, group
        self.keys: dict[Any, set[Key]] = {}
        for key in entities:
            self.keys.setdefault(group(key), set()).add(key)
        self.size = len(entities)

    def current(self, entities: dict[Key, Value]) -> bool:
        return entities is self.entities and self.size == len(entities)

    def added(self, key: Key) -> None:
        self.keys.setdefault(self.group(key), set()).add(key)
        self.size += 1

    def removed(self, key: Key) -> None:
        keys = self.keys.get(self.group(key))
        if keys is not None and key in keys:
            keys.remove(key)
            self.size -= 1

    def of(self, group: Any) -> list[Key]:
        """The keys of ``group``, in order."""
        return sorted(self.keys.get(group, ()))


class Replayer:
    """Applies events to an ``Image`` and reports every entity change to ``on_change``."""

    HASHED = frozenset({"USER_SCRAM_CREDENTIAL_RECORD"})  # types whose Event.value_hash the image keeps
    # A replay can be split by topic, into parts that each hold the partitions of some topics
    # (``kraftlog.spark.replay`` spreads a big cluster over several tasks so):
    # - the rules of BY_TOPIC records read and change the partitions of one topic, and read the topics;
    # - TOPIC_WIDE records (and the transaction markers) are applied by every part: their rules change the topics
    #   every part reads, and the partitions of each part;
    # - every other record, and every entity kind but SPLIT_KIND, belongs to the first part (every part holds the
    #   topics, EVERY_PART_KIND, in its image).
    # Each partition then goes through the same changes as in the whole replay, and so do the topics in every part;
    # a problem found by every part is one problem of the whole replay (problems of BY_TOPIC records name the topic).
    BY_TOPIC = frozenset({"PARTITION_RECORD", "PARTITION_CHANGE_RECORD"})
    TOPIC_WIDE = frozenset({"TOPIC_RECORD", "REMOVE_TOPIC_RECORD", "CLEAR_ELR_RECORD", *MARKERS})
    SPLIT_KIND, EVERY_PART_KIND = "partitions", "topics"
    # The topics and partitions (TOPIC_KINDS: the entities keyed by a topic id) a rule reads or changes: the
    # partition a PartitionChange names (PARTITION_KEYED), the topic the record's topic_id names and all its
    # partitions (TOPIC_KEYED: a PartitionRecord reads its topic), or any topic (ANY_TOPIC: ClearElr names its topic
    # by name, or none for all); no other rule reads or changes a topic or a partition. A replay going on from an
    # image so needs in it only what its records name (``topics_read``).
    TOPIC_KINDS = frozenset({"topics", "partitions"})
    PARTITION_KEYED = frozenset({"PARTITION_CHANGE_RECORD"})
    TOPIC_KEYED = frozenset({"TOPIC_RECORD", "REMOVE_TOPIC_RECORD", "PARTITION_RECORD"})
    ANY_TOPIC = frozenset({"CLEAR_ELR_RECORD"})
    # the entities a rule reads by group (``group``): a topic's partitions (by topic id), a resource's configs (by type
    # and name), as Kafka's image holds them in their topic, for a RemoveTopic that costs the topic, not the image
    GROUPS: ClassVar[dict[str, Callable[[Key], Any]]] = {
        "partitions": lambda key: key[0],
        "configs": lambda key: key[:2],
    }

    def __init__(self, on_change: Callable[[Change], None] | None = None):
        self.image = Image()
        self.on_change = on_change
        self.problems: list[str] = []
        self._txn: list[Event] | None = None
        self._txn_begin: int | None = None
        self._control = control_types()
        self._read = self.record_types()
        self._mv_names = load_schemas().enums["metadataVersion"]
        self._zk_names = load_schemas().enums["zkMigrationState"]
        self._name = load_schemas().enum_name  # enum values enter the image as Kafka's names
        self._groups: dict[str, _Groups] = {}  # (``group``)

    # -- the records whose rule is one set or delete (arguments: data, offset, timestamp, value hash) ---------
    def _fence_broker(self, d: Value, offset: int, ts: int, _hash: int | None) -> None:
        self._fence(d, offset, ts, True)

    def _unfence_broker(self, d: Value, offset: int, ts: int, _hash: int | None) -> None:
        self._fence(d, offset, ts, False)

    def _unregister_controller(self, d: Value, offset: int, ts: int, _hash: int | None) -> None:
        self._delete("controllers", (d["controller_id"],), offset, ts)

    def _producer_ids(self, d: Value, offset: int, ts: int, _hash: int | None) -> None:
        self._set("producer_ids", (), {"next_producer_id": d["next_producer_id"]}, offset, ts)

    def _scram_credential(self, d: Value, offset: int, ts: int, value_hash: int | None) -> None:
        self._set("scram_users", (self._name("scramMechanism", d["mechanism"]), d["name"]),
                  {"iterations": d["iterations"], "credential_hash": value_hash}, offset, ts)

    def _remove_scram_credential(self, d: Value, offset: int, ts: int, _hash: int | None) -> None:
        self._delete("scram_users", (self._name("scramMechanism", d["mechanism"]), d["name"]), offset, ts)

    def _delegation_token(self, d: Value, offset: int, ts: int, _hash: int | None) -> None:
        self._set("delegation_tokens", (d["token_id"],), {
            "owner": d["owner"], "requester": d["requester"], "renewers": list(d["renewers"]),
            "issue_timestamp": d["issue_timestamp"], "max_timestamp": d["max_timestamp"],
            "expiration_timestamp": d["expiration_timestamp"]}, offset, ts)

    def _remove_delegation_token(self, d: Value, offset: int, ts: int, _hash: int | None) -> None:
        self._delete("delegation_tokens", (d["token_id"],), offset, ts)

    def _remove_feature(self, d: Value, offset: int, ts: int, _hash: int | None) -> None:
        self._delete("features", (d["name"],), offset, ts)

    def _zk_migration_state(self, d: Value, offset: int, ts: int, _hash: int | None) -> None:
        self._set("zk_migration_state", (), {"state": d["zk_migration_state"],
                                              "state_name": self._zk_names.get(str(d["zk_migration_state"]))},
                  offset, ts)

    def _kraft_version(self, d: Value, offset: int, ts: int, _hash: int | None) -> None:
        self._set("kraft_version", (), {"kraft_version": d["kraft_version"]}, offset, ts)

    # -- input ----------------------------------------------------------------------------------------
    def load_snapshot(self, events: Iterable[Event], offset: int, timestamp: int) -> None:
        """Replace the image with a snapshot's contents (state as of ``offset``)."""
        old = self.image
        self.image = Image(offset=offset, timestamp=timestamp)
        self._txn, self._txn_begin = None, None
        for ev in events:
            d = ev.decoded
            if d.status == "ok" and d.type not in MARKERS:
                self._apply(ev, offset, timestamp)
        # entities of the old image absent from the snapshot are removed (finishSnapshot) ...
        for kind, entities in old.entities.items():
            for key in entities.keys() - self.image.entities[kind].keys():
                if kind == "producer_ids":  # ... except the producer id mark (ProducerIdsDelta.finishSnapshot)
                    self.image.entities[kind][key] = entities[key]
                    continue
                self._emit(Change(kind, key, None, offset, timestamp))

    def apply(self, ev: Event) -> None:
        """Apply one log record (transactions buffered until their End)."""
        d = ev.decoded
        t = d.type
        if t == BEGIN:
            if self._txn is not None:
                self.problems.append(f"offset {ev.offset}: BeginTransaction inside the transaction begun at "
                                     f"{self._txn_begin}")
                return
            self._txn, self._txn_begin = [], ev.offset
        elif t == END:
            if self._txn is None:
                self.problems.append(f"offset {ev.offset}: EndTransaction without BeginTransaction")
            else:
                buffered, self._txn, self._txn_begin = self._txn, None, None
                for b in buffered:
                    self._apply(b, ev.offset, ev.timestamp)
        elif t == ABORT:
            if self._txn is None:
                self.problems.append(f"offset {ev.offset}: AbortTransaction without BeginTransaction")
            self._txn, self._txn_begin = None, None
        elif self._txn is not None and t not in self._control:
            if t in self._read:  # (records of other types change nothing: a transaction counts those it changes)
                self._txn.append(ev)
        else:
            self._apply(ev, ev.offset, ev.timestamp)
        self.image.offset, self.image.timestamp = ev.offset, ev.timestamp

    def finish(self, counted: Callable[[Event], bool] | None = None) -> None:
        """End of input: a transaction still open is not applied (reported with how many of its records ``counted``:
        all by default; a part of a split replay counts those it owns)."""
        if self._txn is not None:
            assert self._txn_begin is not None
            n = len(self._txn) if counted is None else sum(1 for ev in self._txn if counted(ev))
            self.problems.append(still_open(self._txn_begin, n))

    @property
    def open_transaction(self) -> int | None:
        return self._txn_begin

    @staticmethod
    @functools.cache
    def record_types() -> frozenset[str]:
        """The record types replay reads (every other type leaves the image as it is)."""
        return frozenset(Replayer.RULES) | frozenset(MARKERS)

    @staticmethod
    def kinds_read(record_types: Iterable[str]) -> frozenset[str]:
        """The entity kinds the rules of ``record_types`` read or change (``RULES``): applied to an image holding only
        those kinds, records of those types make the same changes and problems as applied to the whole image, and
        no version of another kind changes."""
        return frozenset().union(*(Replayer.RULES[t][1] for t in record_types if t in Replayer.RULES))

    @staticmethod
    def topics_read(records: Iterable[tuple[str, str | None, int | None]]) -> TopicsRead | None:
        """What the rules of ``records`` (record type, topic id, partition id) read or change of the topics and
        partitions (None: any topic): applied to an image holding only that of ``TOPIC_KINDS``
        (``TopicsRead.holds``), the records make the same changes and problems as applied to the whole image."""
        topics: set[str] = set()
        partitions: set[tuple[str, int]] = set()
        for record_type, topic, partition in records:
            if record_type in Replayer.ANY_TOPIC:
                return None
            if topic is None:
                continue
            if record_type in Replayer.TOPIC_KEYED:
                topics.add(topic)
            elif record_type in Replayer.PARTITION_KEYED and partition is not None:
                partitions.add((topic, partition))
        return TopicsRead.of(topics, partitions)

    # -- dispatch -------------------------------------------------------------------------------------
    def _apply(self, ev: Event, offset: int, timestamp: int) -> None:
        d = ev.decoded
        if d.status != "ok" or d.data is None or d.type is None:
            return
        rule = self.RULES.get(d.type)
        if rule is not None:
            rule[0](self, d.data, offset, timestamp, ev.value_hash)

    def _emit(self, change: Change) -> None:
        if self.on_change is not None:
            self.on_change(change)

    def _set(self, kind: str, key: Key, value: Value, offset: int, ts: int) -> None:
        entities = self.image.entities[kind]
        before = entities.get(key)
        if before != value:
            entities[key] = value
            if before is None and kind in self._groups:
                self._groups[kind].added(key)
            self._emit(Change(kind, key, value, offset, ts))

    def _delete(self, kind: str, key: Key, offset: int, ts: int) -> bool:
        if self.image.entities[kind].pop(key, None) is None:
            return False
        if kind in self._groups:
            self._groups[kind].removed(key)
        self._emit(Change(kind, key, None, offset, ts))
        return True

    def group(self, kind: str, group: Any) -> list[Key]:
        """The keys of the entities of ``kind`` in ``group`` (``GROUPS``), in order."""
        entities = self.image.entities[kind]
        groups = self._groups.get(kind)
        if groups is None or not groups.current(entities):
            groups = self._groups[kind] = _Groups(entities, self.GROUPS[kind])
        return groups.of(group)

    # -- cluster --------------------------------------------------------------------------------------
    def _register_broker(self, d: Value, o: int, t: int, h: int | None) -> None:
        self._set("brokers", (d["broker_id"],), {
            "broker_epoch": d["broker_epoch"], "incarnation_id": d["incarnation_id"],
            "listeners": _listeners(d["end_points"]), "supported_features": _features(d["features"]),
            "rack": d["rack"], "fenced": d.get("fenced", True),
            "in_controlled_shutdown": d.get("in_controlled_shutdown", False),
            "is_migrating_zk_broker": d.get("is_migrating_zk_broker", False),
            "directories": sorted(d.get("log_dirs") or []),
            "cordoned_directories": d.get("cordoned_log_dirs")}, o, t)

    def _unregister_broker(self, d: Value, o: int, t: int, h: int | None) -> None:
        if not self._delete("brokers", (d["broker_id"],), o, t):
            self.problems.append(f"offset {o}: UnregisterBroker of unknown broker {d['broker_id']}")

    def _current_broker(self, d: Value, o: int, what: str) -> Value | None:
        b = self.image.entities["brokers"].get((d["broker_id"],))
        epoch = d.get("broker_epoch", d.get("epoch"))
        if b is None or b["broker_epoch"] != epoch:
            self.problems.append(f"offset {o}: {what} for broker {d['broker_id']} epoch {epoch}, which is not "
                                 "registered with that epoch")
            return None
        return b

    def _broker_change(self, d: Value, o: int, t: int, h: int | None) -> None:
        b = self._current_broker(d, o, "BrokerRegistrationChange")
        if b is None:
            return
        new = dict(b)
        fenced = d.get("fenced", 0)
        if fenced in (1, -1):
            new["fenced"] = fenced == 1
        elif fenced != 0:
            self.problems.append(f"offset {o}: invalid fencing change {fenced}")
            return
        shutdown = d.get("in_controlled_shutdown", 0)
        if shutdown == 1:
            new["in_controlled_shutdown"] = True
        elif shutdown != 0:
            self.problems.append(f"offset {o}: invalid controlled shutdown change {shutdown}")
            return
        if d.get("log_dirs"):
            new["directories"] = sorted(d["log_dirs"])
        if d.get("cordoned_log_dirs") is not None:
            new["cordoned_directories"] = list(d["cordoned_log_dirs"])
        self._set("brokers", (d["broker_id"],), new, o, t)

    def _fence(self, d: Value, o: int, t: int, fenced: bool) -> None:
        b = self._current_broker({"broker_id": d["id"], "epoch": d["epoch"]}, o,
                                 "FenceBroker" if fenced else "UnfenceBroker")
        if b is not None:
            self._set("brokers", (d["id"],), {**b, "fenced": fenced}, o, t)

    def _register_controller(self, d: Value, o: int, t: int, h: int | None) -> None:
        self._set("controllers", (d["controller_id"],), {
            "incarnation_id": d["incarnation_id"], "zk_migration_ready": d["zk_migration_ready"],
            "listeners": _listeners(d["end_points"]), "supported_features": _features(d["features"])}, o, t)

    # -- topics and partitions --------------------------------------------------------------------------
    def _topic(self, d: Value, o: int, t: int, h: int | None) -> None:
        tid = d["topic_id"]
        if (tid,) in self.image.entities["topics"]:  # a new TopicImage: no partitions
            for key in self.group("partitions", tid):
                self._delete("partitions", key, o, t)
        self._set("topics", (tid,), {"name": d["name"]}, o, t)

    def _partition(self, d: Value, o: int, t: int, h: int | None) -> None:
        topic = self.image.entities["topics"].get((d["topic_id"],))
        if topic is None:
            self.problems.append(f"offset {o}: PartitionRecord for unknown topic {d['topic_id']}")
            return
        replicas = shared(d["replicas"])
        dirs = d.get("directories")
        if dirs and len(dirs) != len(replicas):
            self.problems.append(f"offset {o}: PartitionRecord for {(d['topic_id'], d['partition_id'])} with "
                                 f"{len(dirs)} directories for {len(replicas)} replicas")
            return
        self._set("partitions", (d["topic_id"], d["partition_id"]), {
            "topic_name": topic["name"], "replicas": replicas, "isr": shared(d["isr"]),
            "removing_replicas": shared(d["removing_replicas"]), "adding_replicas": shared(d["adding_replicas"]),
            "elr": shared(d.get("eligible_leader_replicas") or []),
            "last_known_elr": shared(d.get("last_known_elr") or []),
            "leader": d["leader"],
            "leader_recovery_state": self._name("leaderRecoveryState", d.get("leader_recovery_state", 0)),
            "leader_epoch": d["leader_epoch"], "partition_epoch": d["partition_epoch"],
            "directories": _default_to_migrating(dirs, len(replicas))}, o, t)

    def _partition_change(self, d: Value, o: int, t: int, h: int | None) -> None:
        key = (d["topic_id"], d["partition_id"])
        p = self.image.entities["partitions"].get(key)
        if p is None:
            self.problems.append(f"offset {o}: PartitionChangeRecord for unknown partition {key}")
            return
        new = dict(p)
        if d.get("replicas") is not None:
            new["replicas"] = shared(d["replicas"])
        dirs = d.get("directories")
        if dirs:
            n = len(d["replicas"]) if d.get("replicas") is not None else len(p["replicas"])
            if n != len(dirs):  # checkDirectories, or the PartitionRegistration constructor
                self.problems.append(f"offset {o}: PartitionChangeRecord for {key} with {len(dirs)} directories "
                                     f"for {n} replicas")
                return
            new_dirs = dirs
        elif d.get("replicas") is not None:
            new_dirs = _directories_from(p["replicas"], p["directories"], d["replicas"])
        else:
            new_dirs = p["directories"]
        if new_dirs is not p["directories"] or not new_dirs:  # (else the version before holds them as the image does)
            new["directories"] = _default_to_migrating(new_dirs, len(p["replicas"]))
        for field_, col in (("isr", "isr"), ("removing_replicas", "removing_replicas"),
                            ("adding_replicas", "adding_replicas"), ("eligible_leader_replicas", "elr"),
                            ("last_known_elr", "last_known_elr")):
            if d.get(field_) is not None:
                new[col] = shared(d[field_])
        leader = d.get("leader", -2)
        if leader != -2:
            new["leader"] = leader
            new["leader_epoch"] = p["leader_epoch"] + 1
        recovery = d.get("leader_recovery_state", -1)
        if recovery != -1:
            if recovery not in (0, 1):
                self.problems.append(f"offset {o}: invalid leader recovery state {recovery} for {key}")
                return
            new["leader_recovery_state"] = self._name("leaderRecoveryState", recovery)
        new["partition_epoch"] = p["partition_epoch"] + 1
        self._set("partitions", key, new, o, t)

    def _clear_elr(self, d: Value, o: int, t: int, h: int | None) -> None:
        topics, partitions = self.image.entities["topics"], self.image.entities["partitions"]
        name = d["topic_name"]
        if name:
            ids = [k[0] for k, v in topics.items() if v["name"] == name]
            if not ids:
                self.problems.append(f"offset {o}: ClearElr for unknown topic {name}")
                return
            keys = [key for tid in ids for key in self.group("partitions", tid)]  # (its partitions, not all)
        else:
            keys = list(partitions)
        for key in keys:
            p = partitions[key]
            if p["elr"] or p["last_known_elr"]:
                self._set("partitions", key, {**p, "elr": shared([]), "last_known_elr": shared([]),
                                              "partition_epoch": p["partition_epoch"] + 1}, o, t)

    def _remove_topic(self, d: Value, o: int, t: int, h: int | None) -> None:
        tid = d["topic_id"]
        topic = self.image.entities["topics"].get((tid,))
        if topic is None:
            self.problems.append(f"offset {o}: RemoveTopic of unknown topic {tid}")
            return
        for key in self.group("partitions", tid):
            self._delete("partitions", key, o, t)
        self._delete("topics", (tid,), o, t)
        for key in self.group("configs", ("TOPIC", topic["name"])):
            self._delete("configs", key, o, t)

    # -- configs, quotas, acls, features, voters --------------------------------------------------------
    def _config(self, d: Value, o: int, t: int, h: int | None) -> None:
        key = (self._name("configResourceType", d["resource_type"]), d["resource_name"], d["name"])
        if d["value"] is None:
            self._delete("configs", key, o, t)
        else:
            self._set("configs", key, {"value": d["value"]}, o, t)

    def _quota(self, d: Value, o: int, t: int, h: int | None) -> None:
        key = (quota_entity(d["entity"]), d["key"])
        if d["remove"]:
            self._delete("client_quotas", key, o, t)
        else:
            self._set("client_quotas", key, {"value": float(d["value"])}, o, t)

    def _acl(self, d: Value, o: int, t: int, h: int | None) -> None:
        self._set("acls", (d["id"],), {
            "resource_type": self._name("aclResourceType", d["resource_type"]), "resource_name": d["resource_name"],
            "pattern_type": self._name("aclPatternType", d["pattern_type"]), "principal": d["principal"],
            "host": d["host"], "operation": self._name("aclOperation", d["operation"]),
            "permission_type": self._name("aclPermissionType", d["permission_type"])}, o, t)

    def _remove_acl(self, d: Value, o: int, t: int, h: int | None) -> None:
        if not self._delete("acls", (d["id"],), o, t):
            self.problems.append(f"offset {o}: RemoveAccessControlEntry of unknown ACL {d['id']}")

    def _feature(self, d: Value, o: int, t: int, h: int | None) -> None:
        name, level = d["name"], d["feature_level"]
        if name == "kraft.version":
            return  # ignored (KAFKA-18979): the quorum's kraft.version comes from KRaftVersion control records
        if name == "metadata.version":
            if str(level) not in self._mv_names:
                self.problems.append(f"offset {o}: unknown metadata.version level {level}")
            self._set("features", (name,), {"level": level, "version_name": self._mv_names.get(str(level))}, o, t)
        elif level == 0:
            self._delete("features", (name,), o, t)
        else:
            self._set("features", (name,), {"level": level, "version_name": None}, o, t)

    def _voters(self, d: Value, o: int, t: int, h: int | None) -> None:
        new = {(v["voter_id"],): {
            "directory_id": v["voter_directory_id"],
            "endpoints": [{"name": e["name"], "host": e["host"], "port": e["port"]}
                          for e in _sorted_by_name(v["endpoints"])],
            "kraft_min_version": v["kraft_version_feature"]["min_supported_version"],
            "kraft_max_version": v["kraft_version_feature"]["max_supported_version"]} for v in d["voters"]}
        for key in sorted(self.image.entities["voters"].keys() - new.keys()):
            self._delete("voters", key, o, t)
        for key, value in sorted(new.items()):
            self._set("voters", key, value, o, t)

    # record type -> its rule, unbound (a replayer refers to nothing of its own, so it is freed as soon as dropped),
    # and the entity kinds the rule reads or changes (``kinds_read``: no rule touches another kind)
    RULES: ClassVar[dict[str, tuple[Callable[[Replayer, Value, int, int, int | None], object], frozenset[str]]]] = {
        "REGISTER_BROKER_RECORD": (_register_broker, frozenset({"brokers"})),
        "UNREGISTER_BROKER_RECORD": (_unregister_broker, frozenset({"brokers"})),
        "BROKER_REGISTRATION_CHANGE_RECORD": (_broker_change, frozenset({"brokers"})),
        "FENCE_BROKER_RECORD": (_fence_broker, frozenset({"brokers"})),
        "UNFENCE_BROKER_RECORD": (_unfence_broker, frozenset({"brokers"})),
        "REGISTER_CONTROLLER_RECORD": (_register_controller, frozenset({"controllers"})),
        "UNREGISTER_CONTROLLER_RECORD": (_unregister_controller, frozenset({"controllers"})),
        "TOPIC_RECORD": (_topic, frozenset({"topics", "partitions"})),
        "PARTITION_RECORD": (_partition, frozenset({"topics", "partitions"})),
        "PARTITION_CHANGE_RECORD": (_partition_change, frozenset({"partitions"})),
        "CLEAR_ELR_RECORD": (_clear_elr, frozenset({"topics", "partitions"})),
        "REMOVE_TOPIC_RECORD": (_remove_topic, frozenset({"topics", "partitions", "configs"})),
        "CONFIG_RECORD": (_config, frozenset({"configs"})),
        "CLIENT_QUOTA_RECORD": (_quota, frozenset({"client_quotas"})),
        "PRODUCER_IDS_RECORD": (_producer_ids, frozenset({"producer_ids"})),
        "ACCESS_CONTROL_ENTRY_RECORD": (_acl, frozenset({"acls"})),
        "REMOVE_ACCESS_CONTROL_ENTRY_RECORD": (_remove_acl, frozenset({"acls"})),
        "USER_SCRAM_CREDENTIAL_RECORD": (_scram_credential, frozenset({"scram_users"})),
        "REMOVE_USER_SCRAM_CREDENTIAL_RECORD": (_remove_scram_credential, frozenset({"scram_users"})),
        "DELEGATION_TOKEN_RECORD": (_delegation_token, frozenset({"delegation_tokens"})),
        "REMOVE_DELEGATION_TOKEN_RECORD": (_remove_delegation_token, frozenset({"delegation_tokens"})),
        "FEATURE_LEVEL_RECORD": (_feature, frozenset({"features"})),
        "REMOVE_FEATURE_LEVEL_RECORD": (_remove_feature, frozenset({"features"})),
        "ZK_MIGRATION_STATE_RECORD": (_zk_migration_state, frozenset({"zk_migration_state"})),
        "KRaftVersion": (_kraft_version, frozenset({"kraft_version"})),
        "KRaftVoters": (_voters, frozenset({"voters"})),
    }
