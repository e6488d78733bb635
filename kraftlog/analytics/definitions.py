"""The event tables kraftlog derives from the histories: schemas, column comments, descriptions.

Each event table answers one kind of operator question. Rows carry the cluster, the log offset and the
record time of the event, and the entities involved; windows (under-replicated partitions, fenced
periods, reassignments) carry where they start and end (the end null while still open).
"""

from __future__ import annotations

import functools

import pyarrow as pa

from kraftlog.tables.definitions import TS, TableDef, col

_INTS = pa.list_(pa.int32())


def _cluster() -> pa.Field:
    return col("cluster_id", pa.string(), "Cluster", nullable=False)


def _at(what: str = "the event") -> list[pa.Field]:
    return [col("log_offset", pa.int64(), f"Log offset of {what} (the End of its metadata transaction, if any)"),
            col("timestamp", TS, f"Record time of {what}")]


def _partition() -> list[pa.Field]:
    return [col("topic_id", pa.string(), "Topic id"), col("topic_name", pa.string(), "Topic name"),
            col("partition_id", pa.int32(), "Partition")]


def _window(what: str) -> list[pa.Field]:
    return [col("from_offset", pa.int64(), f"Offset where {what} began"),
            col("from_time", TS, f"When {what} began"),
            col("to_offset", pa.int64(), f"Offset where {what} ended (null: still open at the end of the log)"),
            col("to_time", TS, f"When {what} ended"),
            col("seconds", pa.float64(), "Duration in seconds (to the end of the log while open)"),
            col("open", pa.bool_(), "Still open at the end of the log")]


# How ``analyze`` keeps a table up to date when a cluster's histories went on (``kraftlog.spark.analyze``):
POINT = "point"  # rows at log_offset >= the cut are rebuilt from the versions holding from the cut on
WINDOW = "window"  # rows open or ending at the cut or later are rebuilt, from where the earliest open one began
CLUSTER = "cluster"  # every row of the cluster is rebuilt
# and when rows landed since the last analysis (``kraftlog.spark.landed``), tables of the landed log itself:
HOURS = "hours"  # rows of the earliest hour a row landed since falls in and later, rebuilt from those hours' rows
LOG = "log"  # rows after the last landed offset before the earliest one landed since, rebuilt from the records after
# rows of the epoch holding that last offset (records landed since may add to it) and later, rebuilt from the records
# from the last one of the epoch before (where the failover to it began)
EPOCHS = "epochs"


def _table(name: str, description: str, fields: list[pa.Field], key: tuple[str, ...], increment: str = CLUSTER
           ) -> TableDef:
    return TableDef(name, pa.schema([_cluster(), *fields]), description, ("cluster_id", *key), (), "event",
                    properties={"kraftlog.event": name, "kraftlog.increment": increment},
                    open_column="to_offset" if increment == WINDOW else None)


def increment_of(table: TableDef) -> str:
    """How ``analyze`` brings ``table`` up to date: ``POINT``, ``WINDOW``, ``CLUSTER``, ``HOURS``, ``LOG`` or
    ``EPOCHS``."""
    return table.properties.get("kraftlog.increment", CLUSTER)


@functools.cache
def event_tables() -> dict[str, TableDef]:
    """Every event table, by name."""
    tables = [
        _table("leader_elections", "Every change of a partition's leader, with its kind.", [
            *_at("the change"), *_partition(),
            col("kind", pa.string(), "offline (no leader), unclean (new leader not in the previous ISR nor ELR, or "
                "leader recovery state RECOVERING), elr (chosen from the eligible leader replicas, KIP-966), "
                "reassignment (the old leader left the replicas), controlled_shutdown (the old leader's broker was "
                "shutting down), failover (the old leader was fenced, unregistered or there was none), preferred "
                "(the first replica, the old leader alive)"),
            col("clean", pa.bool_(), "False for unclean elections"),
            col("previous_leader", pa.int32(), "Leader before (-1: none)"),
            col("leader", pa.int32(), "Leader after (-1: none)"),
            col("leader_epoch", pa.int32(), "Leader epoch after"),
            col("previous_leader_state", pa.string(), "State of the previous leader's broker at that point: alive, "
                "fenced, controlled_shutdown, unregistered, none"),
            col("previous_isr", _INTS, "ISR before"), col("isr", _INTS, "ISR after"),
            col("replicas", _INTS, "Replicas after"),
            col("leader_recovery_state", pa.string(), "RECOVERED, or RECOVERING after an unclean election"),
        ], ("topic_id", "partition_id", "log_offset"), POINT),
        _table("isr_changes", "Every change of a partition's in-sync replica set.", [
            *_at("the change"), *_partition(),
            col("kind", pa.string(), "shrink, expand, or shrink_expand (members both left and joined)"),
            col("isr_before", _INTS, "ISR before"), col("isr_after", _INTS, "ISR after"),
            col("removed", _INTS, "Replicas that left the ISR"), col("added", _INTS, "Replicas that joined the ISR"),
            col("leader", pa.int32(), "Leader after"), col("replicas", _INTS, "Replicas after"),
        ], ("topic_id", "partition_id", "log_offset"), POINT),
        _table("under_replicated", "Windows during which a partition's ISR was smaller than its replica set.", [
            *_partition(), *_window("the window"),
            col("min_isr_size", pa.int32(), "Smallest ISR size during the window"),
            col("replicas_count", pa.int32(), "Replica count at the start"),
        ], ("topic_id", "partition_id", "from_offset"), WINDOW),
        _table("under_min_isr", "Windows during which a partition's ISR was smaller than the min.insync.replicas "
               "in force (topic config, else the leader broker's dynamic config, else the cluster default, else "
               "Kafka's default 1: static server.properties values are not in the metadata log).", [
            *_partition(), *_window("the window"),
            col("min_insync_replicas", pa.int32(), "min.insync.replicas in force at the start"),
            col("config_source", pa.string(), "topic, broker, cluster_default or kafka_default"),
            col("min_isr_size", pa.int32(), "Smallest ISR size during the window"),
        ], ("topic_id", "partition_id", "from_offset"), WINDOW),
        _table("broker_lifecycle", "Broker registrations, fencing, unfencing, controlled shutdowns and "
               "unregistrations.", [
            *_at(), col("broker_id", pa.int32(), "Broker"),
            col("event", pa.string(), "register, fence, unfence, controlled_shutdown, unregister, or "
                "present_at_start (registered before the histories begin)"),
            col("broker_epoch", pa.int64(), "Broker epoch (the offset of its registration)"),
            col("incarnation_id", pa.string(), "Incarnation of the broker process"),
            col("fenced", pa.bool_(), "Fenced after the event"),
        ], ("broker_id", "log_offset", "event"), POINT),
        _table("broker_fenced_periods", "Periods during which a broker was fenced, and flapping.", [
            col("broker_id", pa.int32(), "Broker"), *_window("the fenced period"),
            col("reason", pa.string(), "startup (registered fenced until caught up), controlled_shutdown, "
                "fenced (by the controller: session timeout or an operator)"),
            col("fences_last_hour", pa.int32(), "Unplanned fenced periods (reason fenced: not startups nor controlled "
                "shutdowns) of this broker that began in the hour up to this one's start"),
            col("flapping", pa.bool_(), "True when fences_last_hour >= 3: the broker keeps losing its session"),
        ], ("broker_id", "from_offset")),
        _table("controller_leadership", "KRaft leadership by epoch: who led, over which offsets, and the gap "
               "before each new leader's first record (failover time).", [
            col("epoch", pa.int32(), "Raft epoch"),
            col("leader_id", pa.int32(), "Leader (from the LeaderChange control record; -1 where none landed)"),
            col("from_offset", pa.int64(), "First offset written in this epoch"),
            col("from_time", TS, "Time of that record"),
            col("to_offset", pa.int64(), "Last offset written in this epoch"),
            col("to_time", TS, "Time of that record"),
            col("records", pa.int64(), "Records written in this epoch"),
            col("voters", _INTS, "Voters named by the LeaderChange record"),
            col("granting_voters", _INTS, "Voters that granted the vote"),
            col("previous_epoch", pa.int32(), "The epoch before"),
            col("previous_leader_id", pa.int32(), "Its leader"),
            col("failover_seconds", pa.float64(), "Time from the previous epoch's last record to this epoch's "
                "first: how long the metadata log stood still"),
        ], ("epoch",), EPOCHS),
        _table("voter_changes", "KRaft voters added, removed or changed (KIP-853 VotersRecord).", [
            *_at(), col("voter_id", pa.int32(), "Voter"),
            col("change", pa.string(), "added, removed, updated, or present_at_start"),
            col("directory_id", pa.string(), "Voter directory id"),
            col("endpoints", pa.list_(pa.string()), "Endpoints as NAME://host:port"),
            col("voters_after", _INTS, "The voter set after the change"),
        ], ("voter_id", "log_offset"), POINT),
        _table("feature_changes", "Finalized feature levels (metadata.version upgrades and downgrades, ...).", [
            *_at(), col("feature", pa.string(), "Feature name"),
            col("change", pa.string(), "finalized (first seen), upgrade, downgrade, removed, or present_at_start"),
            col("from_level", pa.int16(), "Level before"), col("to_level", pa.int16(), "Level after"),
            col("from_version", pa.string(), "metadata.version before, as a release"),
            col("to_version", pa.string(), "metadata.version after, as a release"),
        ], ("feature", "log_offset"), POINT),
        _table("zk_migration", "ZooKeeper to KRaft migration states (KIP-866).", [
            *_at(), col("from_state", pa.string(), "State before"), col("to_state", pa.string(), "State after"),
        ], ("log_offset",), POINT),
        _table("reassignments", "Partition reassignments, from the first record with adding or removing replicas "
               "to the record that clears them.", [
            *_partition(), *_window("the reassignment"),
            col("status", pa.string(), "completed (the target replicas were reached), cancelled (the replicas "
                "went back), deleted (the partition was deleted), open"),
            col("original_replicas", _INTS, "Replicas before (the start's replicas without the adding ones)"),
            col("target_replicas", _INTS, "Target (the start's replicas without the removing ones)"),
            col("adding_replicas", _INTS, "Replicas being added at the start"),
            col("removing_replicas", _INTS, "Replicas being removed at the start"),
            col("final_replicas", _INTS, "Replicas once the reassignment ended"),
        ], ("topic_id", "partition_id", "from_offset"), WINDOW),
        _table("topic_lifecycle", "Topics by id: creation, partition count changes, deletion, reuse of a name.", [
            *_at(), col("topic_id", pa.string(), "Topic id"), col("topic_name", pa.string(), "Topic name"),
            col("event", pa.string(), "create, partitions_added, delete, or present_at_start"),
            col("partitions_before", pa.int32(), "Partition count before"),
            col("partitions_after", pa.int32(), "Partition count after"),
            col("name_reused", pa.bool_(), "On create: another topic id had this name before"),
            col("previous_topic_id", pa.string(), "That topic id"),
        ], ("topic_id", "log_offset", "event"), POINT),
        _table("config_changes", "Dynamic config changes: old and new value (redacted where sensitive).", [
            *_at(), col("resource_type", pa.string(), "TOPIC, BROKER, BROKER_LOGGER, CLIENT_METRICS, GROUP"),
            col("resource_name", pa.string(), "Resource (\"\" = the cluster default for BROKER)"),
            col("name", pa.string(), "Config key"),
            col("change", pa.string(), "set, update, delete, or present_at_start"),
            col("old_value", pa.string(), "Value before (null: not set)"),
            col("new_value", pa.string(), "Value after (null: deleted)"),
            col("redacted", pa.bool_(), "The values are secrets and were redacted"),
        ], ("resource_type", "resource_name", "name", "log_offset"), POINT),
        _table("quota_changes", "Client quota changes.", [
            *_at(), col("entity", pa.string(), "Entity as JSON [[type, name], ...] (name null = default)"),
            col("entity_text", pa.string(), "Entity as text: user=alice,client-id=<default>"),
            col("key", pa.string(), "Quota"), col("change", pa.string(), "set, update, delete, or present_at_start"),
            col("old_value", pa.float64(), "Value before"), col("new_value", pa.float64(), "Value after"),
        ], ("entity", "key", "log_offset"), POINT),
        _table("acl_changes", "ACLs created and deleted.", [
            *_at(), col("acl_id", pa.string(), "ACL id"),
            col("change", pa.string(), "created, deleted, updated, or present_at_start"),
            col("resource_type", pa.string(), "TOPIC, GROUP, CLUSTER, TRANSACTIONAL_ID, DELEGATION_TOKEN, USER"),
            col("resource_name", pa.string(), "Resource"), col("pattern_type", pa.string(), "LITERAL or PREFIXED"),
            col("principal", pa.string(), "Principal"), col("host", pa.string(), "Host"),
            col("operation", pa.string(), "Operation"), col("permission", pa.string(), "ALLOW or DENY"),
        ], ("acl_id", "log_offset"), POINT),
        _table("scram_changes", "SCRAM credentials created, updated (a new salt or password) and deleted.", [
            *_at(), col("user_name", pa.string(), "User"),
            col("mechanism", pa.string(), "SCRAM-SHA-256 or SCRAM-SHA-512"),
            col("change", pa.string(), "created, updated, deleted, or present_at_start"),
            col("iterations_before", pa.int32(), "Iterations before"),
            col("iterations", pa.int32(), "Iterations after"),
            col("credential_changed", pa.bool_(), "The credential (salt, keys) changed"),
        ], ("user_name", "mechanism", "log_offset"), POINT),
        _table("log_health", "The metadata log hour by hour: volume by type, NoOp share, batches, CRC failures, "
               "divergent copies, snapshots written.", [
            col("hour", TS, "Hour (UTC)"),
            col("records", pa.int64(), "Log records (canonical copies)"),
            col("noop_records", pa.int64(), "NoOpRecords among them"),
            col("noop_share", pa.float64(), "noop_records / records"),
            col("control_records", pa.int64(), "KRaft control records"),
            col("records_by_type", pa.map_(pa.string(), pa.int64()), "Records per type"),
            col("batches", pa.int64(), "Batches (distinct base offsets)"),
            col("crc_failures", pa.int64(), "Batch copies whose CRC failed (any node)"),
            col("divergent_records", pa.int64(), "Record copies that lost to another copy"),
            col("snapshots", pa.int64(), "Snapshots whose last contained record falls in the hour (distinct ids)"),
            col("snapshot_bytes", pa.int64(), "Their size (largest copy)"),
            col("from_offset", pa.int64(), "First offset of the hour's log records"),
            col("to_offset", pa.int64(), "Last offset of the hour's log records"),
        ], ("hour",), HOURS),
        _table("snapshots", "Snapshot cadence and size, per node: one row per snapshot of a node, however many "
               "files of it were found (its data directory under several roots, a .checkpoint.deleted file).", [
            col("node_id", pa.int32(), "Node"), col("snapshot_id", pa.string(), "<endOffset>-<epoch>"),
            col("log_offset", pa.int64(), "Offset the snapshot holds state as of"),
            col("timestamp", TS, "last_contained_log_timestamp"),
            col("bytes", pa.int64(), "File size (the largest file of it)"), col("records", pa.int64(), "Records"),
            col("deleted", pa.bool_(), "A file of it is a .checkpoint.deleted file (Kafka deleting it)"),
            col("offsets_since_previous", pa.int64(), "Offsets since the node's previous snapshot"),
            col("seconds_since_previous", pa.float64(), "Seconds since the node's previous snapshot"),
        ], ("node_id", "snapshot_id")),
        _table("log_gaps", "Offsets missing from the landed log (no node held them).", [
            col("from_offset", pa.int64(), "First missing offset"), col("to_offset", pa.int64(), "Last missing offset"),
            col("missing", pa.int64(), "Number of offsets missing"),
        ], ("from_offset",), LOG),
    ]
    return {t.name: t for t in tables}


@functools.cache
def analyze_state_table() -> TableDef:
    """Per cluster: the histories the event tables were last built from, so the next ``analyze`` goes on."""
    schema = pa.schema([
        _cluster(),
        col("lineage", pa.string(), "replay_state.lineage of the histories the events were built from"),
        col("history_build_id", pa.string(), "replay_state.build_id of those histories"),
        col("resume_offset", pa.int64(), "replay_state.resume_offset of those histories: every version before it "
            "was final, so every event before it is"),
        col("window_floor", pa.int64(), "Where the earliest window still open began (null: none open)"),
        col("landed_run", pa.string(), "The greatest ingest run id among the cluster's ledger rows (what landed "
            "since is what later runs landed: kraftlog.spark.landed)"),
        col("landed_files", pa.int64(), "The cluster's ledger rows up to landed_run"),
        col("landed_digest", pa.int64(), "A digest of those ledger rows (a later run with an earlier id shows here)"),
        col("log_end", pa.int64(), "The greatest landed log offset (where log_gaps go on)"),
        col("build_id", pa.string(), "The analyze run that wrote this row"),
    ])
    return TableDef("analyze_state", schema, "Per cluster: what the event tables were built from (incremental "
                    "analyze).", ("cluster_id",), (), "event")
