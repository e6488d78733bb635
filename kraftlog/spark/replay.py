"""Replay at Spark scale: each cluster's records streamed through the one replayer (``kraftlog.state``).

* **bases** (driver): per cluster, the last gap-free run of log offsets and the snapshots are
  summarised in Spark; the few resulting rows go to the driver, which applies ``kraftlog.state.bases``;
* **stream**: the rows of the typed tables replay reads, each placed in the replay of its output
  cluster: the base snapshot's rows (in file order), then the log rows from the base on (in offset
  order), then an end mark. Rows are hash-partitioned by output cluster and sorted inside each
  partition, so one task replays whole clusters, one at a time;
* **replay** (executors): ``kraftlog.state.replay.Replayer`` applies the stream exactly as the local
  commands do, ``kraftlog.state.history.Versions`` turns its changes into history rows as versions
  close, and each cluster ends with its ``replay_ranges`` row. A task holds one cluster's image, never
  its log, and returns rows in the layout ``TableStore.replace_rows`` writes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import to_arrow_schema

from kraftlog.spark.session import default_parallelism
from kraftlog.spark.store import combined_schema
from kraftlog.state.bases import Base, SnapshotRef, choose_base, parse_snapshot_id, snapshot_reach
from kraftlog.state.entities import history_tables, replay_ranges_table
from kraftlog.state.history import Versions
from kraftlog.state.replay import Change, Event, Replayer
from kraftlog.tables.definitions import RECORD_KEY, TableDef, catalog, columns_at, typed_specs
from kraftlog.wire.messages import Decoded

TableSource = Callable[[str], DataFrame]  # a landed table by name (records, topic_record, ...)

SNAPSHOT, LOG, END = 0, 1, 2  # phases of one replay's stream, in order
MAX_PROBLEMS = 100  # problems kept per replay_ranges row (a summary line counts the rest)


@dataclass
class ClusterBase:
    """One replay: an output cluster id, the cluster whose rows it reads, its base and log range."""

    cluster_id: str
    source_cluster: str
    base: Base
    last: int | None  # last log offset (None: no log is applied, only the base snapshot)
    last_ts: Any = None  # time of the last log record
    snapshots: list[SnapshotRef] = field(default_factory=list)
    log_epochs: dict[int, int] = field(default_factory=dict)

    def reach(self, s: SnapshotRef) -> tuple[bool, str]:
        return snapshot_reach(s, self.base, self.last, self.log_epochs)


def cluster_bases(table: TableSource, clusters: list[str] | None = None) -> list[ClusterBase]:
    """The base of replay of every cluster (or of ``clusters``)."""
    log = table("records").filter(F.col("source") == "log")
    snaps = table("records").filter(F.col("source") == "snapshot")
    if clusters is not None:
        log = log.filter(F.col("cluster_id").isin(clusters))
        snaps = snaps.filter(F.col("cluster_id").isin(clusters))
    w = Window.partitionBy("cluster_id").orderBy("log_offset")
    prev = F.lag("log_offset").over(w)
    runs = (log.select("cluster_id", "log_offset", "timestamp",
                       (prev.isNull() | (F.col("log_offset") != prev + 1)).alias("gap"))
            .groupBy("cluster_id")
            .agg(F.max(F.when(F.col("gap"), F.col("log_offset"))).alias("start"), F.max("log_offset").alias("last"),
                 F.max("timestamp").alias("last_ts"))
            .collect())
    headers = (table("snapshot_header").filter(F.col("source") == "snapshot")
               .groupBy("cluster_id", "snapshot_id").agg(F.max("last_contained_log_timestamp").alias("header_ts")))
    snap_rows = (snaps.groupBy("cluster_id", "snapshot_id").agg(F.max("log_offset").alias("offset"))
                 .join(headers, ["cluster_id", "snapshot_id"], "left")
                 .join(log.select("cluster_id", F.col("log_offset").alias("offset"), "batch_epoch"),
                       ["cluster_id", "offset"], "left")
                 .collect())
    by_cluster: dict[str, list[SnapshotRef]] = {}
    log_epochs: dict[str, dict[int, int]] = {}
    for r in snap_rows:
        parsed = parse_snapshot_id(r["snapshot_id"])
        if parsed is not None:
            by_cluster.setdefault(r["cluster_id"], []).append(
                SnapshotRef(r["snapshot_id"], r["offset"], parsed[1], r["header_ts"] or 0))
        if r["batch_epoch"] is not None:
            log_epochs.setdefault(r["cluster_id"], {})[r["offset"]] = r["batch_epoch"]
    ranges = {r["cluster_id"]: (r["start"], r["last"], r["last_ts"]) for r in runs}
    out = []
    for cid in sorted(ranges.keys() | by_cluster.keys()):
        start, last, last_ts = ranges.get(cid, (None, None, None))
        snapshots = by_cluster.get(cid, [])
        base = choose_base(start, last, snapshots, log_epochs.get(cid, {}))
        out.append(ClusterBase(cid, cid, base, last, last_ts, snapshots, log_epochs.get(cid, {})))
    return out


def snapshot_bases(bases: list[ClusterBase]) -> list[ClusterBase]:
    """One pseudo-cluster per snapshot that replay reaches: its contents alone, as a base (for verify)."""
    out = []
    for cb in bases:
        for s in cb.snapshots:
            if cb.reach(s)[0]:
                out.append(ClusterBase(pseudo_cluster(cb.cluster_id, s.snapshot_id), cb.cluster_id,
                                       Base(s, s.offset + 1), None))
    return out


def pseudo_cluster(cluster_id: str, snapshot_id: str) -> str:
    return f"{cluster_id}@{snapshot_id}"


# -- the stream ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class _Source:
    """A typed table replay reads: its stream column and the columns each record version carries."""

    table: str
    record_type: str
    column: str
    columns_at: dict[int, tuple[str, ...]]


def _sources() -> list[_Source]:
    wanted = Replayer.record_types()
    specs = typed_specs()
    out = []
    for t in catalog().typed.values():
        if t.record_type in wanted:
            spec = specs[t.name]
            versions = range(spec.valid_versions.lowest, spec.valid_versions.highest + 1)
            out.append(_Source(t.name, t.record_type, f"_{t.name}", {v: columns_at(spec, v) for v in versions}))
    return out


def _typed_rows(table: TableSource, source: _Source) -> DataFrame:
    t = catalog()[source.table]
    data = [c for cols in source.columns_at.values() for c in cols]
    df = table(source.table)
    if source.record_type in Replayer.HASHED:  # the replay keeps a fingerprint of the record
        recs = table("records").select(*[F.col(c).alias(f"_r_{c}") for c in RECORD_KEY], "value_hash")
        df = df.join(recs, [df[c].eqNullSafe(recs[f"_r_{c}"]) for c in RECORD_KEY]).drop(
            *[f"_r_{c}" for c in RECORD_KEY])
    else:
        df = df.withColumn("value_hash", F.lit(None).cast("long"))
    return df.select("cluster_id", "source", "snapshot_id", "log_offset", "snapshot_seq", "batch_epoch",
                     F.unix_millis("timestamp").alias("_ms"), "record_version", "value_hash",
                     F.lit(source.record_type).alias("record_type"),
                     F.struct(*[c for c in t.columns if c in set(data)]).alias(source.column))


def stream(spark: SparkSession, table: TableSource, bases: list[ClusterBase], sources: list[_Source]) -> DataFrame:
    """Every replay's rows in application order, partitioned by output cluster (see the module docstring)."""
    rows: DataFrame | None = None
    for s in sources:
        part = _typed_rows(table, s)
        rows = part if rows is None else rows.unionByName(part, allowMissingColumns=True)
    assert rows is not None
    snap_plan = [(b.source_cluster, b.base.snapshot.snapshot_id, b.cluster_id) for b in bases
                 if b.base.snapshot is not None]
    log_plan = [(b.source_cluster, b.base.first, b.cluster_id) for b in bases if b.last is not None]
    picked = []
    if snap_plan:
        plan = spark.createDataFrame(snap_plan, "cluster_id string, snapshot_id string, _out string")
        picked.append(rows.filter(F.col("source") == "snapshot").join(F.broadcast(plan), ["cluster_id", "snapshot_id"])
                      .select("*", F.lit(SNAPSHOT).alias("_phase"), F.col("snapshot_seq").alias("_seq")))
    if log_plan:
        plan = spark.createDataFrame(log_plan, "cluster_id string, _first long, _out string")
        picked.append(rows.filter(F.col("source") == "log").join(F.broadcast(plan), "cluster_id")
                      .filter(F.col("log_offset") >= F.col("_first")).drop("_first")
                      .select("*", F.lit(LOG).alias("_phase"), F.col("log_offset").alias("_seq")))
    ends = spark.createDataFrame([(b.cluster_id,) for b in bases], "_out string").select(
        "_out", F.lit(END).alias("_phase"), F.lit(0).cast("long").alias("_seq"))
    out = ends
    for p in picked:
        out = out.unionByName(p.drop("cluster_id", "source", "snapshot_id", "snapshot_seq"), allowMissingColumns=True)
    n = max(1, min(len(bases), default_parallelism(spark)))
    return out.repartition(n, "_out").sortWithinPartitions("_out", "_phase", "_seq")


def replayed(spark: SparkSession, table: TableSource, bases: list[ClusterBase], build_id: str) -> DataFrame:
    """The history rows of every replay in ``bases`` and one ``replay_ranges`` row each, in the layout of
    ``combined_schema(output_tables())``."""
    sources = _sources()
    schema = combined_schema(output_tables())
    arrow_schema = to_arrow_schema(schema)
    by_out = {b.cluster_id: b for b in bases}
    built_at = datetime.now(UTC)
    if not bases:
        return spark.createDataFrame([], schema)

    def task(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        return _replay_partition(batches, by_out, sources, arrow_schema, build_id, built_at)

    return stream(spark, table, bases, sources).mapInArrow(task, schema)


def output_tables() -> list[TableDef]:
    """The tables a replay writes: every history table, then ``replay_ranges``."""
    return [*history_tables().values(), replay_ranges_table()]


# -- the executor side ---------------------------------------------------------------------------------------

class _Sink:
    """Output rows buffered per table, handed out as record batches of the combined layout."""

    def __init__(self, schema: pa.Schema):
        self.schema = schema
        self.rows: dict[str, list[dict[str, Any]]] = {f.name: [] for f in schema if f.name != "_table"}
        self.history = {kind: t.name for kind, t in history_tables().items()}
        self.count = 0

    def version(self, kind: str, row: dict[str, Any]) -> None:
        for c in ("valid_from", "valid_to"):  # ms -> the table's microseconds
            if row[c] is not None:
                row[c] *= 1000
        self.rows[self.history[kind]].append(row)
        self.count += 1

    def add(self, table: str, row: dict[str, Any]) -> None:
        self.rows[table].append(row)
        self.count += 1

    def drain(self, at_least: int = 1) -> Iterator[pa.RecordBatch]:
        if self.count < at_least:
            return
        for name, rows in self.rows.items():
            if not rows:
                continue
            struct_type = self.schema.field(name).type
            data = pa.Table.from_pylist(rows, schema=pa.schema(list(struct_type))).to_struct_array().combine_chunks()
            n = len(rows)
            yield pa.RecordBatch.from_arrays(
                [pa.array([name] * n, pa.string()),
                 *[data if f.name == name else pa.nulls(n, f.type) for f in self.schema if f.name != "_table"]],
                schema=self.schema)
            rows.clear()
        self.count = 0


class _Replay:
    """One cluster's replay inside a task: snapshot rows gathered, then log rows applied one by one."""

    def __init__(self, base: ClusterBase, sink: _Sink, build_id: str, built_at: datetime):
        self.base, self.sink, self.build_id, self.built_at = base, sink, build_id, built_at
        self.history = Versions(base.cluster_id, sink.version)
        self.replayer = Replayer(self._change)
        self.snapshot: list[Event] | None = [] if base.base.snapshot is not None else None

    def _change(self, c: Change) -> None:
        self.history.add(c)

    def snapshot_record(self, ev: Event) -> None:
        assert self.snapshot is not None, "snapshot rows of a replay without a base snapshot"
        self.snapshot.append(ev)

    def _load(self) -> None:
        snap = self.base.base.snapshot
        if self.snapshot is not None and snap is not None:
            self.replayer.load_snapshot(self.snapshot, snap.offset, snap.timestamp)
            self.snapshot = None

    def apply(self, ev: Event) -> None:
        self._load()
        self.replayer.apply(ev)

    def finish(self) -> None:
        self._load()
        r = self.replayer
        r.finish()
        self.history.finish()
        b = self.base
        snap = b.base.snapshot
        problems = [p for p in [b.base.problem] if p] + r.problems
        if len(problems) > MAX_PROBLEMS:
            problems = [*problems[:MAX_PROBLEMS], f"... and {len(problems) - MAX_PROBLEMS} more problems"]
        self.sink.add("replay_ranges", {
            "cluster_id": b.cluster_id, "base_snapshot_id": snap.snapshot_id if snap else None,
            "base_offset": snap.offset if snap else None,
            "base_timestamp": snap.timestamp * 1000 if snap else None,
            "first_offset": b.base.first if b.last is not None else None, "last_offset": b.last,
            "last_timestamp": b.last_ts, "open_transaction_offset": r.open_transaction,
            "transaction_problems": sum(1 for p in r.problems if "Transaction" in p),
            "problems": problems, "build_id": self.build_id, "built_at": self.built_at})


def _data(batch: pa.RecordBatch, sources: list[_Source], versions: list[Any]) -> list[dict[str, Any] | None]:
    """Each row's record as the decoder gives it (only the fields its version has)."""
    out: list[dict[str, Any] | None] = [None] * batch.num_rows
    for s in sources:
        column = batch.column(s.column)
        if column.null_count == len(column):
            continue
        rows = np.flatnonzero(pc.is_valid(column).to_numpy(zero_copy_only=False))
        for i, value in zip(rows.tolist(), column.take(pa.array(rows)).to_pylist(), strict=True):
            names = s.columns_at.get(versions[i])
            out[i] = value if names is None else {c: value[c] for c in names}
    return out


def _replay_partition(batches: Iterable[pa.RecordBatch], bases: dict[str, ClusterBase], sources: list[_Source],
                      schema: pa.Schema, build_id: str, built_at: datetime, batch_rows: int = 1 << 16
                      ) -> Iterator[pa.RecordBatch]:
    sink = _Sink(schema)
    current: _Replay | None = None
    for batch in batches:
        cols = {c: batch.column(c).to_pylist() for c in ("_out", "_phase", "log_offset", "_ms", "batch_epoch",
                                                          "record_type", "record_version", "value_hash")}
        data = _data(batch, sources, cols["record_version"])
        for i, out in enumerate(cols["_out"]):
            phase = cols["_phase"][i]
            if phase == END:
                if current is None or current.base.cluster_id != out:
                    current = _Replay(bases[out], sink, build_id, built_at)
                current.finish()
                current = None
                continue
            if current is None or current.base.cluster_id != out:
                current = _Replay(bases[out], sink, build_id, built_at)
            decoded = Decoded(None, cols["record_type"][i], cols["record_version"][i], data[i])
            ev = Event(cols["log_offset"][i], cols["_ms"][i], cols["batch_epoch"][i], decoded, cols["value_hash"][i])
            if phase == SNAPSHOT:
                current.snapshot_record(ev)
            else:
                current.apply(ev)
            if sink.count >= batch_rows:
                yield from sink.drain()
        yield from sink.drain(batch_rows)
    yield from sink.drain()

