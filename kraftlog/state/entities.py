"""The entities of a cluster's metadata image, as Kafka's ``MetadataImage`` holds them.

Each kind has a key and value columns; a history table has one row per version of one entity
(``valid_from`` / ``valid_to`` offsets and timestamps). The same definitions serve the sequential
replay (``replay.py``), the Spark histories (``kraftlog.spark.history``) and the state JSON.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import pyarrow as pa

from kraftlog.tables.definitions import TS, TableDef, col

MIGRATING = "AAAAAAAAAAAAAAAAAAAAAg"  # DirectoryId.MIGRATING = Uuid(0, 2)
UNASSIGNED = "AAAAAAAAAAAAAAAAAAAAAA"  # DirectoryId.UNASSIGNED = Uuid(0, 0)

_LISTENERS = pa.list_(pa.struct([("name", pa.string()), ("host", pa.string()), ("port", pa.int32()),
                                 ("security_protocol", pa.int16())]))
_FEATURES = pa.list_(pa.struct([("name", pa.string()), ("min_supported_version", pa.int16()),
                                ("max_supported_version", pa.int16())]))
_INTS = pa.list_(pa.int32())
_STRINGS = pa.list_(pa.string())


@dataclass(frozen=True)
class EntityKind:
    """One kind of entity: its history table name, key columns and value columns."""

    name: str
    key: tuple[pa.Field, ...]
    value: tuple[pa.Field, ...]
    description: str

    @property
    def key_names(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.key)

    @property
    def value_names(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.value)

    def history_table(self) -> TableDef:
        schema = pa.schema([
            col("cluster_id", pa.string(), "Cluster", nullable=False),
            *self.key,
            *self.value,
            col("valid_from_offset", pa.int64(), "Log offset from which this version holds (the snapshot's "
                "offset for versions loaded from the base snapshot)", nullable=False),
            col("valid_to_offset", pa.int64(), "Log offset from which it no longer holds (exclusive); null while "
                "current"),
            col("valid_from", TS, "Timestamp of the record that made this version"),
            col("valid_to", TS, "Timestamp of the record that ended it"),
            col("ended_by", pa.string(), "update (a newer version follows) or delete; null while current"),
        ])
        return TableDef(f"{self.name}_history", schema, self.description + " One row per version.",
                        ("cluster_id", *self.key_names, "valid_from_offset"), (), "history",
                        properties={"kraftlog.entity": self.name})


def _k(name: str, t: pa.DataType, comment: str) -> pa.Field:
    return col(name, t, comment)


KINDS: tuple[EntityKind, ...] = (
    EntityKind("brokers", (_k("broker_id", pa.int32(), "Broker id"),), (
        _k("broker_epoch", pa.int64(), "Broker epoch: the offset of its registration"),
        _k("incarnation_id", pa.string(), "Incarnation of the broker process"),
        _k("listeners", _LISTENERS, "Endpoints, by name"),
        _k("supported_features", _FEATURES, "Supported feature ranges, by name"),
        _k("rack", pa.string(), "Rack"),
        _k("fenced", pa.bool_(), "Fenced"),
        _k("in_controlled_shutdown", pa.bool_(), "In controlled shutdown"),
        _k("is_migrating_zk_broker", pa.bool_(), "ZK broker in migration"),
        _k("directories", _STRINGS, "Online log directories (sorted)"),
        _k("cordoned_directories", _STRINGS, "Cordoned log directories (null: unknown)"),
    ), "Broker registrations (RegisterBroker, BrokerRegistrationChange, Fence/Unfence, UnregisterBroker)."),
    EntityKind("controllers", (_k("controller_id", pa.int32(), "Controller id"),), (
        _k("incarnation_id", pa.string(), "Incarnation of the controller process"),
        _k("zk_migration_ready", pa.bool_(), "ZK migration configured"),
        _k("listeners", _LISTENERS, "Endpoints, by name"),
        _k("supported_features", _FEATURES, "Supported feature ranges, by name"),
    ), "Controller registrations (KIP-919)."),
    EntityKind("topics", (_k("topic_id", pa.string(), "Topic id (Kafka's Base64 form)"),), (
        _k("name", pa.string(), "Topic name"),
    ), "Topics by id (a re-created topic is a new id)."),
    EntityKind("partitions", (_k("topic_id", pa.string(), "Topic id"),
                              _k("partition_id", pa.int32(), "Partition")), (
        _k("topic_name", pa.string(), "Topic name"),
        _k("replicas", _INTS, "Replicas in preferred order"),
        _k("isr", _INTS, "In-sync replicas"),
        _k("removing_replicas", _INTS, "Replicas being removed"),
        _k("adding_replicas", _INTS, "Replicas being added"),
        _k("elr", _INTS, "Eligible leader replicas (KIP-966)"),
        _k("last_known_elr", _INTS, "Last known ELR"),
        _k("leader", pa.int32(), "Leader (-1: none)"),
        _k("leader_recovery_state", pa.int8(), "0 RECOVERED, 1 RECOVERING (after an unclean election)"),
        _k("leader_epoch", pa.int32(), "Leader epoch (computed as Kafka does)"),
        _k("partition_epoch", pa.int32(), "Partition epoch (computed as Kafka does)"),
        _k("directories", _STRINGS, "Log directory of each replica (MIGRATING / UNASSIGNED ids where unknown)"),
    ), "Partition registrations (PartitionRecord, PartitionChangeRecord, ClearElr, RemoveTopic)."),
    EntityKind("configs", (_k("resource_type", pa.int8(), "2 TOPIC, 4 BROKER, 8 BROKER_LOGGER, 16 CLIENT_METRICS, "
                              "32 GROUP"),
                           _k("resource_name", pa.string(), "Resource name (\"\" = cluster default broker config)"),
                           _k("name", pa.string(), "Config key")), (
        _k("value", pa.string(), "Value; (redacted) where sensitive"),
    ), "Dynamic configs (ConfigRecord; RemoveTopic deletes the topic's configs)."),
    EntityKind("client_quotas", (_k("entity", pa.string(), "The entity as JSON [[type, name], ...] sorted by type "
                                    "(name null = default)"),
                                 _k("key", pa.string(), "Quota key")), (
        _k("value", pa.float64(), "Quota value"),
    ), "Client quotas (ClientQuotaRecord)."),
    EntityKind("acls", (_k("acl_id", pa.string(), "ACL id"),), (
        _k("resource_type", pa.int8(), "2 TOPIC, 3 GROUP, 4 CLUSTER, 5 TRANSACTIONAL_ID, 6 DELEGATION_TOKEN, 7 USER"),
        _k("resource_name", pa.string(), "Resource name"),
        _k("pattern_type", pa.int8(), "3 LITERAL, 4 PREFIXED"),
        _k("principal", pa.string(), "Principal"),
        _k("host", pa.string(), "Host"),
        _k("operation", pa.int8(), "2 ALL ... 15 TWO_PHASE_COMMIT"),
        _k("permission_type", pa.int8(), "2 DENY, 3 ALLOW"),
    ), "ACLs (KIP-801)."),
    EntityKind("scram_users", (_k("mechanism", pa.int8(), "1 SCRAM-SHA-256, 2 SCRAM-SHA-512"),
                               _k("name", pa.string(), "User")), (
        _k("iterations", pa.int32(), "Iterations"),
        _k("credential_hash", pa.int64(), "Fingerprint of the credential record (salt and keys stay redacted)"),
    ), "SCRAM credentials, redacted."),
    EntityKind("delegation_tokens", (_k("token_id", pa.string(), "Token id (redacted)"),), (
        _k("owner", pa.string(), "Owner"),
        _k("requester", pa.string(), "Requester"),
        _k("renewers", _STRINGS, "Renewers"),
        _k("issue_timestamp", pa.int64(), "Issued (ms)"),
        _k("max_timestamp", pa.int64(), "Not renewable after (ms)"),
        _k("expiration_timestamp", pa.int64(), "Expires (ms)"),
    ), "Delegation tokens, redacted."),
    EntityKind("features", (_k("name", pa.string(), "Feature (metadata.version, group.version, ...)"),), (
        _k("level", pa.int16(), "Finalized level"),
        _k("version_name", pa.string(), "metadata.version as a release (3.9-IV0)"),
    ), "Finalized features (FeatureLevelRecord; kraft.version records are ignored as Kafka does, KAFKA-18979)."),
    EntityKind("producer_ids", (), (
        _k("next_producer_id", pa.int64(), "Next producer id block start"),
    ), "The producer id high-water mark (ProducerIdsRecord)."),
    EntityKind("voters", (_k("voter_id", pa.int32(), "Voter (controller) id"),), (
        _k("directory_id", pa.string(), "Voter directory id"),
        _k("endpoints", pa.list_(pa.struct([("name", pa.string()), ("host", pa.string()), ("port", pa.int32())])),
           "Endpoints, by name"),
        _k("kraft_min_version", pa.int16(), "Lowest kraft.version supported"),
        _k("kraft_max_version", pa.int16(), "Highest kraft.version supported"),
    ), "KRaft voters (KIP-853 VotersRecord: each replaces the set)."),
    EntityKind("kraft_version", (), (
        _k("kraft_version", pa.int16(), "kraft.version of the quorum: 0 static voters, 1 dynamic (KIP-853)"),
    ), "The KRaft protocol version (KRaftVersionRecord control records)."),
    EntityKind("zk_migration_state", (), (
        _k("state", pa.int8(), "0 NONE, 1 MIGRATION, 2 PRE_MIGRATION, 3 POST_MIGRATION"),
        _k("state_name", pa.string(), "State name"),
    ), "ZK to KRaft migration state (KIP-866)."),
)

BY_NAME = {k.name: k for k in KINDS}


@functools.cache
def history_tables() -> dict[str, TableDef]:
    """History table definitions by entity kind name."""
    return {k.name: k.history_table() for k in KINDS}


@functools.cache
def replay_ranges_table() -> TableDef:
    """Per cluster: where its histories start and end, and what replay could not apply."""
    schema = pa.schema([
        col("cluster_id", pa.string(), "Cluster", nullable=False),
        col("base_snapshot_id", pa.string(), "Snapshot the histories start from (null: from offset 0)"),
        col("base_offset", pa.int64(), "Offset that snapshot holds state as of"),
        col("base_timestamp", TS, "last_contained_log_timestamp of that snapshot"),
        col("first_offset", pa.int64(), "First log offset applied"),
        col("last_offset", pa.int64(), "Last log offset applied: state is known from base_offset (or 0) to here"),
        col("last_timestamp", TS, "Timestamp of the last log record"),
        col("open_transaction_offset", pa.int64(), "BeginTransaction still open at the end of the log (its "
            "records are not applied)"),
        col("transaction_problems", pa.int64(), "Nested BeginTransaction, or End/Abort without Begin"),
        col("problems", pa.list_(pa.string()), "What replay could not do (a gap no snapshot bridges, ...)"),
        col("build_id", pa.string(), "The history build that wrote this row"),
        col("built_at", TS, "When"),
    ])
    return TableDef("replay_ranges", schema, "Per cluster: the offsets the entity histories cover and the "
                    "problems of replay.", ("cluster_id",), (), "history")
