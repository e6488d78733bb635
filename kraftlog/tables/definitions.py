"""The tables kraftlog lands, as Arrow schemas with column comments and table properties.

Nothing here knows Spark: the Spark job, the Delta writers and the local (no Spark) tools all build
their tables from these definitions. Typed tables are derived from ``schemas/``: one per metadata
record type (apiKeys 0-29 and the removed 6 and 16) and per control record type, with snake_case
columns holding the union of the fields of every version (a field absent at a row's version is null).
"""

from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass, field

import pyarrow as pa

from kraftlog.schema.model import FieldSpec, MessageSpec, column_name
from kraftlog.schema.registry import SchemaSet, load_schemas

TS = pa.timestamp("us", tz="UTC")
# commits between two checkpoints of a table's log (Delta Lake's own default; delta-rs's is 100): a reader opens a
# table from its last checkpoint and the commits since, so an hourly run reads at most this many small objects of
# each table's log, not a hundred
CHECKPOINT_INTERVAL = 10

# Kafka's primitive types as Arrow types (Delta and Spark have no unsigned integers: widen them).
_ARROW = {
    "bool": pa.bool_(),
    "int8": pa.int8(),
    "int16": pa.int16(),
    "uint16": pa.int32(),
    "int32": pa.int32(),
    "uint32": pa.int64(),
    "int64": pa.int64(),
    "float64": pa.float64(),
    "string": pa.string(),
    "bytes": pa.binary(),
    "records": pa.binary(),
    "uuid": pa.string(),  # Kafka's text form: URL-safe Base64, 22 characters
}

UNKNOWN_TAGS_TYPE = pa.list_(pa.struct([("tag", pa.int32()), ("data", pa.binary())]))


def col(name: str, type_: pa.DataType, comment: str, nullable: bool = True) -> pa.Field:
    """An Arrow field carrying a Delta column comment."""
    return pa.field(name, type_, nullable=nullable, metadata={"comment": comment})


@dataclass(frozen=True)
class TableDef:
    """A table: its name, schema (with comments), key, partitioning and documentation."""

    name: str
    schema: pa.Schema
    description: str
    key: tuple[str, ...]
    partition_by: tuple[str, ...] = ()
    kind: str = "core"  # core | typed | history | event (the table property kraftlog.kind)
    record_type: str | None = None  # typed tables: the Kafka type name rows carry in records.record_type
    properties: dict[str, str] = field(default_factory=dict)
    # a null here marks a row the next incremental build rewrites (a current version, an open window): such rows
    # are written to files of their own, so that the build deletes (rewrites) those files, never the closed rows'
    open_column: str | None = None

    @property
    def columns(self) -> list[str]:
        return self.schema.names

    @property
    def derived(self) -> bool:
        """Rebuilt from the landed tables (histories, replay state, events), so a table of another layout can be
        replaced rather than migrated."""
        return self.kind in ("history", "event")

    @property
    def fingerprint(self) -> str:
        """A digest of the column names and types (the table property ``kraftlog.schema``): a table written by a
        kraftlog with another layout has another one."""
        return _fingerprint(self.schema)

    def added_columns(self, properties: dict[str, str], columns: list[str]) -> list[pa.Field]:
        """The nullable columns this layout appends to an existing table of the layout before them (its
        ``properties`` and ``columns``): an earlier kraftlog's table that gains them in place (its rows null there);
        [] for any other table."""
        k = len(columns)
        added = list(self.schema)[k:]
        if not added or columns != self.columns[:k] or not all(f.nullable for f in added):
            return []
        found = properties.get("kraftlog.schema")
        return added if found is None or found == _fingerprint(pa.schema(list(self.schema)[:k])) else []

    def table_properties(self) -> dict[str, str]:
        """Delta table properties (``kraftlog.*`` keys describe the table)."""
        props = {"kraftlog.table": self.name, "kraftlog.key": ",".join(self.key), "kraftlog.kind": self.kind,
                 "kraftlog.schema": self.fingerprint, "delta.checkpointInterval": str(CHECKPOINT_INTERVAL)}
        props.update(self.properties)
        return props

    def layout_problem(self, properties: dict[str, str], columns: list[str]) -> str | None:
        """Why an existing table (its ``properties`` and ``columns``) is not of this layout, else None. A table
        from before fingerprints counts as this layout when its columns are these."""
        found = properties.get("kraftlog.schema")
        if found == self.fingerprint or (found is None and columns == self.columns):
            return None
        gone = [c for c in columns if c not in self.columns]
        new = [c for c in self.columns if c not in columns]
        change = "; ".join([*([f"columns {', '.join(gone)} gone"] if gone else []),
                            *([f"new columns {', '.join(new)}"] if new else [])]) or "column types or order changed"
        return f"table {self.name} was written by a kraftlog with another layout ({change})"


def _fingerprint(schema: pa.Schema) -> str:
    return hashlib.sha256(";".join(f"{f.name}:{f.type}" for f in schema).encode()).hexdigest()[:16]


# -- shared column groups -----------------------------------------------------------------------

RECORD_KEY = ("cluster_id", "source", "snapshot_id", "log_offset", "snapshot_seq")

KEY_COLUMNS = [
    col("cluster_id", pa.string(), "Cluster the record belongs to (meta.properties cluster.id, or the configured "
        "identity)", nullable=False),
    col("source", pa.string(), "Where the record was read: log (a segment), snapshot (a .checkpoint), or "
        "bootstrap (bootstrap.checkpoint or the 0-0 checkpoint)", nullable=False),
    col("snapshot_id", pa.string(), "Snapshot <endOffset>-<epoch> (or bootstrap.checkpoint); null for log records"),
    col("log_offset", pa.int64(), "Log offset of the record; for snapshot records the offset the snapshot "
        "holds state as of (endOffset - 1)", nullable=False),
    col("snapshot_seq", pa.int64(), "Offset of the record inside its snapshot file (0-based); null for log records"),
]

PROVENANCE_COLUMNS = [
    col("batch_epoch", pa.int32(), "partitionLeaderEpoch of the batch: the Raft epoch of the leader that wrote it "
        "(the snapshot epoch in snapshots)"),
    col("timestamp", TS, "Record timestamp (batch baseTimestamp + delta; the append time of the batch)"),
    col("node_id", pa.int32(), "Node (meta.properties node.id) whose copy of the file landed this row"),
    col("record_version", pa.int16(), "Version of the record (metadata frame version field; 0 for control records)"),
]

RUN_COLUMN = col("run_id", pa.string(), "Ingest run that landed the row")


def _records_schema() -> pa.Schema:
    return pa.schema([
        *KEY_COLUMNS,
        *PROVENANCE_COLUMNS,
        col("batch_base_offset", pa.int64(), "baseOffset of the batch holding the record"),
        col("file", pa.string(), "File the landed copy was read from"),
        col("file_position", pa.int64(), "Byte position of the record in that file (null inside compressed "
            "batches)"),
        col("is_control", pa.bool_(), "True for KRaft control records (LeaderChange, snapshot header/footer, "
            "KRaftVersion, KRaftVoters)"),
        col("api_key", pa.int16(), "Metadata apiKey, or the control record type id for control records"),
        col("record_type", pa.string(), "Kafka's name: MetadataRecordType (TOPIC_RECORD, ...) or the control name "
            "(LeaderChange, SnapshotHeader, SnapshotFooter, KRaftVersion, KRaftVoters)"),
        col("status", pa.string(), "ok, error, unknown_type, unsupported_version, or corrupt_batch (read from a "
            "batch whose CRC or framing failed; never used by replay)"),
        col("error", pa.string(), "Why the record could not be decoded (Kafka's wording where Kafka has one)"),
        col("data_json", pa.string(), "The record as kafka-dump-log prints its data (JSON), secrets redacted"),
        col("redacted_fields", pa.list_(pa.string()), "Columns whose secret values were redacted"),
        col("raw_key", pa.binary(), "Raw record key, only when decoding failed and the type is not sensitive"),
        col("raw_value", pa.binary(), "Raw record value, only when decoding failed and the type is not sensitive"),
        col("value_hash", pa.int64(), "blake2b-64 of key and value: equal copies on different nodes hash equal"),
        RUN_COLUMN,
    ])


def _batches_schema() -> pa.Schema:
    return pa.schema([
        col("cluster_id", pa.string(), "Cluster of the file", nullable=False),
        col("node_id", pa.int32(), "Node whose file holds this batch"),
        col("file", pa.string(), "File path", nullable=False),
        col("file_kind", pa.string(), "segment, snapshot or bootstrap"),
        col("snapshot_id", pa.string(), "Snapshot <endOffset>-<epoch> for snapshot files"),
        col("position", pa.int64(), "Byte position of the batch in the file", nullable=False),
        col("base_offset", pa.int64(), "baseOffset (int64 at byte 0)"),
        col("last_offset", pa.int64(), "baseOffset + lastOffsetDelta"),
        col("batch_length", pa.int32(), "batchLength (bytes after the length field)"),
        col("size", pa.int32(), "Total bytes of the batch (batchLength + 12)"),
        col("partition_leader_epoch", pa.int32(), "Raft epoch of the writing leader (snapshot epoch in snapshots)"),
        col("magic", pa.int8(), "Batch format (2)"),
        col("crc", pa.int64(), "Stored CRC-32C (unsigned)", nullable=False),
        col("crc_valid", pa.bool_(), "True when the CRC-32C of bytes 21..end equals the stored CRC"),
        col("attributes", pa.int16(), "Raw attributes"),
        col("compression", pa.string(), "none, gzip, snappy, lz4 or zstd"),
        col("timestamp_type", pa.string(), "CreateTime or LogAppendTime"),
        col("is_transactional", pa.bool_(), "Transactional flag"),
        col("is_control", pa.bool_(), "Control batch flag"),
        col("has_delete_horizon", pa.bool_(), "Delete-horizon flag"),
        col("last_offset_delta", pa.int32(), "lastOffsetDelta"),
        col("base_timestamp", TS, "baseTimestamp"),
        col("max_timestamp", TS, "maxTimestamp (Kafka's append time of the batch)"),
        col("producer_id", pa.int64(), "producerId (-1 in KRaft)"),
        col("producer_epoch", pa.int16(), "producerEpoch (-1 in KRaft)"),
        col("base_sequence", pa.int32(), "baseSequence (-1 in KRaft)"),
        col("records_count", pa.int32(), "recordsCount declared by the header"),
        col("records_read", pa.int32(), "Records actually read"),
        col("errors", pa.list_(pa.string()), "Problems found in this batch (CRC mismatch, bad record framing)"),
        RUN_COLUMN,
    ])


def _files_schema() -> pa.Schema:
    return pa.schema([
        col("path", pa.string(), "File path as Spark listed it", nullable=False),
        col("cluster_id", pa.string(), "Cluster"),
        col("node_id", pa.int32(), "Node"),
        col("data_dir", pa.string(), "The node's data directory (holding __cluster_metadata-0)"),
        col("file_kind", pa.string(), "segment, snapshot or bootstrap"),
        col("snapshot_id", pa.string(), "Snapshot id for snapshot files"),
        col("deleted_snapshot", pa.bool_(), "True for *.checkpoint.deleted files"),
        col("size", pa.int64(), "Bytes", nullable=False),
        col("modification_time", TS, "Modification time reported by the file system"),
        col("content_sha256", pa.string(), "SHA-256 of the content; of a grown segment read from its tail_position "
            "on, SHA-256 of the previous version's content_sha256 (hex) and the bytes it grew by"),
        col("batches", pa.int32(), "Batches read"),
        col("control_batches", pa.int32(), "Control batches read"),
        col("records", pa.int64(), "Records read"),
        col("crc_failures", pa.int32(), "Batches whose CRC did not match"),
        col("first_offset", pa.int64(), "Smallest record offset in the file"),
        col("last_offset", pa.int64(), "Largest record offset in the file"),
        col("metadata_version", pa.string(), "Last metadata.version set in the file (e.g. 3.9-IV0)"),
        col("status", pa.string(), "ok, errors (read, with problems), unreadable, or empty (no bytes: a "
            "segment Kafka has just rolled, or a snapshot that lost its bytes, an error)"),
        col("error_count", pa.int32(), "Number of problems"),
        col("errors", pa.list_(pa.string()), "The first problems: file@position: reason"),
        col("ingested_at", TS, "When this version of the file was ingested"),
        RUN_COLUMN,
        # added after run_id: a warehouse of an earlier kraftlog gains them in place (TableDef.added_columns)
        col("tail_position", pa.int64(), "Byte position of the file's last batch where it ends the file whole: the "
            "next run reads a grown segment from there on"),
        col("tail_sha256", pa.string(), "SHA-256 of that last batch: the next run checks that the batch there is "
            "unchanged (the same batch at the same offset and epoch: the same log before it, by Raft's log matching)"),
    ])


def _divergence_schema() -> pa.Schema:
    return pa.schema([
        col("cluster_id", pa.string(), "Cluster", nullable=False),
        col("source", pa.string(), "log, snapshot or bootstrap"),
        col("snapshot_id", pa.string(), "Snapshot id for snapshot records"),
        col("log_offset", pa.int64(), "Offset of the contested record"),
        col("snapshot_seq", pa.int64(), "Offset inside the snapshot for snapshot records"),
        col("reason", pa.string(), "lower_epoch (this copy lost to a higher batch epoch), replaced_by_higher_epoch "
            "(a landed row replaced by a later-seen higher-epoch copy), replaced_by_better_copy (by a later-seen copy "
            "from a trusted batch, or a lower node id), corrupt_copy (from a batch that failed its "
            "CRC or order checks), same_epoch_conflict (two logs differ at one offset and epoch: not one cluster's), "
            "snapshot_copy_differs"),
        col("winner_node_id", pa.int32(), "Node of the canonical copy"),
        col("winner_file", pa.string(), "File of the canonical copy"),
        col("winner_batch_epoch", pa.int32(), "Batch epoch of the canonical copy"),
        col("winner_value_hash", pa.int64(), "Hash of the canonical copy"),
        col("loser_node_id", pa.int32(), "Node of the copy that lost"),
        col("loser_file", pa.string(), "File of the copy that lost"),
        col("loser_batch_epoch", pa.int32(), "Batch epoch of the copy that lost"),
        col("loser_value_hash", pa.int64(), "Hash of the copy that lost"),
        col("loser_record_type", pa.string(), "Type of the copy that lost"),
        col("loser_timestamp", TS, "Timestamp of the copy that lost"),
        col("loser_data_json", pa.string(), "The copy that lost, as JSON (redacted)"),
        RUN_COLUMN,
    ])


def _runs_schema() -> pa.Schema:
    return pa.schema([
        col("run_id", pa.string(), "Run id", nullable=False),
        col("started_at", TS, "Start"),
        col("finished_at", TS, "End"),
        col("seconds", pa.float64(), "Duration"),
        col("inputs", pa.list_(pa.string()), "Input roots"),
        col("files_seen", pa.int64(), "Files found"),
        col("files_ingested", pa.int64(), "New or changed files decoded"),
        col("records_decoded", pa.int64(), "Records decoded (all copies)"),
        col("rows_added", pa.int64(), "Rows added to the records table"),
        col("divergent", pa.int64(), "Divergence rows added"),
        col("errors", pa.int64(), "Problems found"),
        col("writer", pa.string(), "delta-rs or delta-spark"),
    ])


# -- typed tables ---------------------------------------------------------------------------------

def _field_arrow(spec: MessageSpec, f: FieldSpec) -> pa.DataType:
    if f.is_struct:
        sub = spec.struct_for(f)
        t: pa.DataType = pa.struct([_field_def(spec, g) for g in sub.fields])
    else:
        t = _ARROW[f.element_type]
    return pa.list_(t) if f.is_array else t


def _field_def(spec: MessageSpec, f: FieldSpec) -> pa.Field:
    notes = [f"versions {f.versions}"]
    if not f.tagged_versions.empty:
        notes.append(f"tagged (tag {f.tag}) in {f.tagged_versions}, default {f.default_text or 'empty'}")
    if f.sensitive:
        notes.append("redacted by default")
    return col(f.column, _field_arrow(spec, f), f"{f.about} ({'; '.join(notes)})")


def typed_table_name(spec: MessageSpec) -> str:
    """``topic_record`` for TopicRecord; control tables by their dump name (``leader_change``)."""
    if spec.kind == "control":
        return column_name(spec.dump_name or spec.name)
    return column_name(spec.name)


def _typed_table(spec: MessageSpec, schemas: SchemaSet) -> TableDef:
    reserved = {f.name for f in [*KEY_COLUMNS, *PROVENANCE_COLUMNS, RUN_COLUMN]}
    if spec.name == "EndTxnMarker":
        data = [col("control_type", pa.string(), "ABORT or COMMIT"),
                col("coordinator_epoch", pa.int32(), "Transaction coordinator epoch")]
        record_type: str | None = "EndTxnMarker"
    else:
        data = [_field_def(spec, f) for f in spec.body.fields]
        record_type = spec.record_type if spec.kind == "metadata" else spec.dump_name
    clash = reserved & {f.name for f in data}
    if clash:
        raise ValueError(f"{spec.name}: fields {clash} clash with provenance columns")
    extra = [col("unknown_tagged_fields", UNKNOWN_TAGS_TYPE, "Tagged fields unknown to the schemas (raw)"),
             col("redacted_fields", pa.list_(pa.string()), "Columns whose secret values were redacted")]
    schema = pa.schema([*KEY_COLUMNS, *PROVENANCE_COLUMNS, *data, *extra, RUN_COLUMN])
    versions = str(spec.valid_versions)
    what = f"apiKey {spec.api_key}" if spec.kind == "metadata" else \
        "control type " + ", ".join(f"{k} ({v})" for k, v in spec.control_types.items())
    desc = f"One row per {spec.name} ({what}, versions {versions}), from log segments and snapshots."
    if spec.removed_in:
        desc += f" Removed from Kafka in {spec.removed_in}."
    props = {"kraftlog.record_type": str(record_type), "kraftlog.kafka_schema": spec.path,
             "kraftlog.kafka_commit": str(spec.raw.get("source", {}).get("commit", ""))}
    return TableDef(typed_table_name(spec), schema, desc, RECORD_KEY, (), "typed", record_type, props)


@functools.cache
def typed_specs() -> dict[str, MessageSpec]:
    """The message definition behind each typed table, by table name."""
    return {typed_table_name(m): m for m in load_schemas().messages if m.kind in ("metadata", "control")}


def columns_at(spec: MessageSpec, version: int) -> tuple[str, ...]:
    """The columns of ``spec``'s typed table that its records of ``version`` carry (the decoder's keys)."""
    return tuple(f.column for f in spec.body.fields if f.present_in(version))


@dataclass(frozen=True)
class Catalog:
    """Every table kraftlog writes."""

    core: dict[str, TableDef]
    typed: dict[str, TableDef]  # by table name

    @functools.cached_property
    def by_record_type(self) -> dict[str, TableDef]:
        return {t.record_type: t for t in self.typed.values() if t.record_type}

    def all(self) -> list[TableDef]:
        return [*self.core.values(), *self.typed.values()]

    def __getitem__(self, name: str) -> TableDef:
        return self.core[name] if name in self.core else self.typed[name]


@functools.cache
def catalog() -> Catalog:
    """The table catalog for the packaged ``schemas/``."""
    schemas = load_schemas()
    core = {
        "files": TableDef("files", _files_schema(), "Ingest ledger: one row per version of each file ingested "
                          "(size, modification time, content hash, identity, offsets, status, errors).",
                          ("path", "size", "modification_time", "content_sha256")),
        "batches": TableDef("batches", _batches_schema(), "One row per RecordBatch per file copy: every header "
                            "field and the CRC-32C verdict.", ("cluster_id", "file", "position", "crc")),
        "records": TableDef("records", _records_schema(), "One row per record of the metadata log per cluster "
                            "(key cluster_id, log_offset), plus snapshot records keyed by snapshot id and position, "
                            "with provenance and decode status. Raw bytes only where decoding failed, never for "
                            "sensitive types.", RECORD_KEY),
        "divergence": TableDef("divergence", _divergence_schema(), "Copies of a record that differ between nodes "
                               "or runs, and which copy won (the higher batch epoch).",
                               (*RECORD_KEY, "loser_file", "loser_value_hash")),
        "runs": TableDef("runs", _runs_schema(), "One row per ingest run.", ("run_id",)),
    }
    typed: dict[str, TableDef] = {}
    for spec in sorted(typed_specs().values(), key=lambda m: (m.kind, m.api_key or 0, m.name)):
        t = _typed_table(spec, schemas)
        typed[t.name] = t
    return Catalog(core, typed)
