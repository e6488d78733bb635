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


def previous_column(name: str) -> str:
    """The column holding value column ``name`` as the version before had it (``EntityKind.previous``)."""
    return f"previous_{name}"


@dataclass(frozen=True)
class EntityKind:
    """One kind of entity: its history table name, key columns and value columns."""

    name: str
    key: tuple[pa.Field, ...]
    value: tuple[pa.Field, ...]
    description: str
    # value columns each version also carries as the version it replaced had them (``previous_<name>``; null where
    # it replaced none: the first version, or one after a deletion): what a change did, on the row itself
    previous: tuple[str, ...] = ()

    @functools.cached_property
    def key_names(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.key)

    @functools.cached_property
    def value_names(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.value)

    @functools.cached_property
    def previous_columns(self) -> tuple[pa.Field, ...]:
        """The ``previous_<name>`` columns (``previous``)."""
        by_name = {f.name: f for f in self.value}
        return tuple(col(previous_column(n), by_name[n].type, f"{by_name[n].metadata[b'comment'].decode()}, in the "
                         "version this one replaced (null: it replaced none)") for n in self.previous)

    def history_table(self) -> TableDef:
        schema = pa.schema([
            col("cluster_id", pa.string(), "Cluster", nullable=False),
            *self.key,
            *self.value,
            *self.previous_columns,
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
                        properties={"kraftlog.entity": self.name}, open_column="valid_to_offset")


KINDS: tuple[EntityKind, ...] = (
    EntityKind("brokers", (col("broker_id", pa.int32(), "Broker id"),), (
        col("broker_epoch", pa.int64(), "Broker epoch: the offset of its registration"),
        col("incarnation_id", pa.string(), "Incarnation of the broker process"),
        col("listeners", _LISTENERS, "Endpoints, by name"),
        col("supported_features", _FEATURES, "Supported feature ranges, by name"),
        col("rack", pa.string(), "Rack"),
        col("fenced", pa.bool_(), "Fenced"),
        col("in_controlled_shutdown", pa.bool_(), "In controlled shutdown"),
        col("is_migrating_zk_broker", pa.bool_(), "ZK broker in migration"),
        col("directories", _STRINGS, "Online log directories (sorted)"),
        col("cordoned_directories", _STRINGS, "Cordoned log directories (null: unknown)"),
    ), "Broker registrations (RegisterBroker, BrokerRegistrationChange, Fence/Unfence, UnregisterBroker)."),
    EntityKind("controllers", (col("controller_id", pa.int32(), "Controller id"),), (
        col("incarnation_id", pa.string(), "Incarnation of the controller process"),
        col("zk_migration_ready", pa.bool_(), "ZK migration configured"),
        col("listeners", _LISTENERS, "Endpoints, by name"),
        col("supported_features", _FEATURES, "Supported feature ranges, by name"),
    ), "Controller registrations (KIP-919)."),
    EntityKind("topics", (col("topic_id", pa.string(), "Topic id (Kafka's Base64 form)"),), (
        col("name", pa.string(), "Topic name"),
    ), "Topics by id (a re-created topic is a new id)."),
    EntityKind("partitions", (col("topic_id", pa.string(), "Topic id"),
                              col("partition_id", pa.int32(), "Partition")), (
        col("topic_name", pa.string(), "Topic name"),
        col("replicas", _INTS, "Replicas in preferred order"),
        col("isr", _INTS, "In-sync replicas"),
        col("removing_replicas", _INTS, "Replicas being removed"),
        col("adding_replicas", _INTS, "Replicas being added"),
        col("elr", _INTS, "Eligible leader replicas (KIP-966)"),
        col("last_known_elr", _INTS, "Last known ELR"),
        col("leader", pa.int32(), "Leader (-1: none)"),
        col("leader_recovery_state", pa.string(), "RECOVERED, or RECOVERING after an unclean election"),
        col("leader_epoch", pa.int32(), "Leader epoch (computed as Kafka does)"),
        col("partition_epoch", pa.int32(), "Partition epoch (computed as Kafka does)"),
        col("directories", _STRINGS, "Log directory of each replica (MIGRATING / UNASSIGNED ids where unknown)"),
    ), "Partition registrations (PartitionRecord, PartitionChangeRecord, ClearElr, RemoveTopic).",
        previous=("leader", "isr", "elr", "leader_recovery_state")),
    EntityKind("configs", (col("resource_type", pa.string(), "TOPIC, BROKER, BROKER_LOGGER, CLIENT_METRICS or "
                              "GROUP"),
                           col("resource_name", pa.string(), "Resource name (\"\" = cluster default broker config)"),
                           col("name", pa.string(), "Config key")), (
        col("value", pa.string(), "Value; (redacted) where sensitive"),
    ), "Dynamic configs (ConfigRecord; RemoveTopic deletes the topic's configs)."),
    EntityKind("client_quotas", (col("entity", pa.string(), "The entity as JSON [[type, name], ...] sorted by type "
                                    "(name null = default)"),
                                 col("key", pa.string(), "Quota key")), (
        col("value", pa.float64(), "Quota value"),
    ), "Client quotas (ClientQuotaRecord)."),
    EntityKind("acls", (col("acl_id", pa.string(), "ACL id"),), (
        col("resource_type", pa.string(), "TOPIC, GROUP, CLUSTER, TRANSACTIONAL_ID, DELEGATION_TOKEN or USER"),
        col("resource_name", pa.string(), "Resource name"),
        col("pattern_type", pa.string(), "LITERAL or PREFIXED"),
        col("principal", pa.string(), "Principal"),
        col("host", pa.string(), "Host"),
        col("operation", pa.string(), "ALL, READ, WRITE, ... TWO_PHASE_COMMIT"),
        col("permission_type", pa.string(), "DENY or ALLOW"),
    ), "ACLs (KIP-801)."),
    EntityKind("scram_users", (col("mechanism", pa.string(), "SCRAM-SHA-256 or SCRAM-SHA-512"),
                               col("name", pa.string(), "User")), (
        col("iterations", pa.int32(), "Iterations"),
        col("credential_hash", pa.int64(), "Fingerprint of the credential record (salt and keys stay redacted)"),
    ), "SCRAM credentials, redacted."),
    EntityKind("delegation_tokens", (col("token_id", pa.string(), "Token id (redacted)"),), (
        col("owner", pa.string(), "Owner"),
        col("requester", pa.string(), "Requester"),
        col("renewers", _STRINGS, "Renewers"),
        col("issue_timestamp", pa.int64(), "Issued (ms)"),
        col("max_timestamp", pa.int64(), "Not renewable after (ms)"),
        col("expiration_timestamp", pa.int64(), "Expires (ms)"),
    ), "Delegation tokens, redacted."),
    EntityKind("features", (col("name", pa.string(), "Feature (metadata.version, group.version, ...)"),), (
        col("level", pa.int16(), "Finalized level"),
        col("version_name", pa.string(), "metadata.version as a release (3.9-IV0)"),
    ), "Finalized features (FeatureLevelRecord; kraft.version records are ignored as Kafka does, KAFKA-18979)."),
    EntityKind("producer_ids", (), (
        col("next_producer_id", pa.int64(), "Next producer id block start"),
    ), "The producer id high-water mark (ProducerIdsRecord)."),
    EntityKind("voters", (col("voter_id", pa.int32(), "Voter (controller) id"),), (
        col("directory_id", pa.string(), "Voter directory id"),
        col("endpoints", pa.list_(pa.struct([("name", pa.string()), ("host", pa.string()), ("port", pa.int32())])),
           "Endpoints, by name"),
        col("kraft_min_version", pa.int16(), "Lowest kraft.version supported"),
        col("kraft_max_version", pa.int16(), "Highest kraft.version supported"),
    ), "KRaft voters (KIP-853 VotersRecord: each replaces the set)."),
    EntityKind("kraft_version", (), (
        col("kraft_version", pa.int16(), "kraft.version of the quorum: 0 static voters, 1 dynamic (KIP-853)"),
    ), "The KRaft protocol version (KRaftVersionRecord control records)."),
    EntityKind("zk_migration_state", (), (
        col("state", pa.int8(), "0 NONE, 1 MIGRATION, 2 PRE_MIGRATION, 3 POST_MIGRATION"),
        col("state_name", pa.string(), "State name"),
    ), "ZK to KRaft migration state (KIP-866)."),
)

BY_NAME = {k.name: k for k in KINDS}


@functools.cache
def history_tables() -> dict[str, TableDef]:
    """History table definitions by entity kind name."""
    return {k.name: k.history_table() for k in KINDS}


def replay_tables() -> list[TableDef]:
    """The tables a replay writes, and a history build commits together (``kraftlog.commits``): every history
    table, then ``replay_ranges``."""
    return [*history_tables().values(), replay_ranges_table()]


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


@functools.cache
def snapshot_checks_table() -> TableDef:
    """Per snapshot: what ``verify`` found comparing the histories at its offset with its contents."""
    schema = pa.schema([
        col("cluster_id", pa.string(), "Cluster", nullable=False),
        col("snapshot_id", pa.string(), "<endOffset>-<epoch>", nullable=False),
        col("snapshot_offset", pa.int64(), "Offset the snapshot holds state as of"),
        col("snapshot_digest", pa.int64(), "Digest of its landed records when checked (replay_state.snapshots)"),
        col("lineage", pa.string(), "Lineage of the histories checked (replay_state.lineage): within a lineage the "
            "state before the resume offset never changes, so the check stands"),
        col("resume_offset", pa.int64(), "Resume offset of the histories checked"),
        col("differences", pa.list_(pa.struct([
            col("kind", pa.string(), "Entity kind"),
            col("key", pa.string(), "The entity's key (JSON array)"),
            col("field", pa.string(), "Field (<entity> where the entity exists on one side only)"),
            col("histories", pa.string(), "Value in the histories at the snapshot's offset (JSON)"),
            col("snapshot", pa.string(), "Value in the snapshot (JSON)")])),
            "Every field that differs (empty: the histories agree with the snapshot)"),
        col("build_id", pa.string(), "The verify run that checked it"),
        col("checked_at", TS, "When"),
    ])
    return TableDef("snapshot_checks", schema, "Per snapshot the histories reach: the fields where the histories at "
                    "its offset differ from its contents (kraftlog verify; a snapshot is checked once per lineage).",
                    ("cluster_id", "snapshot_id"), (), "history")


@functools.cache
def replay_state_table() -> TableDef:
    """Per cluster: where the last history build stopped, so the next one can go on from there."""
    schema = pa.schema([
        col("cluster_id", pa.string(), "Cluster", nullable=False),
        col("base_snapshot_id", pa.string(), "Snapshot replay started from (null: from the log's first offset)"),
        col("first_offset", pa.int64(), "First log offset applied (null: no log)"),
        col("last_offset", pa.int64(), "Last log offset applied"),
        col("resume_offset", pa.int64(), "Where the next build goes on: the Begin of a still-open metadata "
            "transaction, else last_offset + 1"),
        col("applied_records", pa.int64(), "Log records in [first_offset, last_offset] when the build ran"),
        col("applied_digest", pa.int64(), "Order-free digest (xor of xxhash64 of offset, epoch and value hash) of "
            "those records: a landed row that changed since makes the next build replay the cluster from its base"),
        col("build_id", pa.string(), "The history build that wrote this row"),
        col("lineage", pa.string(), "The build that last replayed the cluster from its base (builds going on keep "
            "it): histories of one lineage differ only from the resume offsets on"),
        col("log_start", pa.int64(), "First offset of the last gap-free run of landed log offsets"),
        col("last_timestamp", TS, "Time of the last landed log record"),
        col("snapshots", pa.list_(pa.struct([
            col("snapshot_id", pa.string(), "<endOffset>-<epoch>"),
            col("offset", pa.int64(), "Offset the snapshot holds state as of"),
            col("epoch", pa.int32(), "Epoch it was written in"),
            col("header_timestamp", TS, "last_contained_log_timestamp of its header"),
            col("log_epoch", pa.int32(), "Batch epoch of the landed log at its offset (null: none landed)"),
            col("digest", pa.int64(), "Order-free digest of its landed records (position, value): a record "
                "replaced by another copy changes it")])),
            "The landed snapshots Kafka would load, where the next build chooses the base from"),
        col("landed_run", pa.string(), "The cluster's greatest ingest run id in the ledger (files) when the build "
            "ran: the next build reads only the rows of later runs"),
        col("landed_files", pa.int64(), "Ledger rows of the cluster up to landed_run"),
        col("landed_digest", pa.int64(), "Order-free digest of those ledger rows: when they changed since, the next "
            "build reads every landed row of the cluster"),
    ])
    return TableDef("replay_state", schema, "Per cluster: where the entity histories stop and a digest of the "
                    "log they were built from (incremental builds).", ("cluster_id",), (), "history")
