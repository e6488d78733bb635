"""Replay at Spark scale: each cluster's records streamed through the one replayer (``kraftlog.state``).

* **bases** (``kraftlog.spark.bases``): where each cluster's replay starts;
* **stream**: the rows of the typed tables replay reads, each placed in the replay of its output
  cluster: the base snapshot's rows (in file order), then the log rows from the base on (in offset
  order), then an end mark. Rows are hash-partitioned by output cluster and sorted inside each
  partition, so one task replays whole clusters, one at a time;
* **replay** (executors): ``kraftlog.state.replay.Replayer`` applies the stream exactly as the local
  commands do, ``kraftlog.state.history.Versions`` turns its changes into history rows as versions
  close, and each cluster ends with its ``replay_ranges`` row. A task holds one cluster's image, never
  its log, and writes the rows as Parquet files itself (only file metadata returns to the driver).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import orjson
import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from kraftlog.analytics.events import valid_at
from kraftlog.spark.bases import ClusterBase, TableSource
from kraftlog.spark.predicates import Scope, of_clusters
from kraftlog.spark.session import default_parallelism
from kraftlog.spark.store import FILE_PART, StagedFile, TableStore
from kraftlog.state.entities import BY_NAME, history_tables, replay_ranges_table
from kraftlog.state.history import Versions
from kraftlog.state.replay import Event, Replayer
from kraftlog.tables.definitions import RECORD_KEY, TableDef, catalog, columns_at, typed_specs
from kraftlog.wire.files import paused_gc
from kraftlog.wire.messages import Decoded

STATE, SNAPSHOT, LOG, END = -1, 0, 1, 2  # phases of one replay's stream, in order
MAX_PROBLEMS = 100  # problems kept per replay_ranges row (a summary line counts the rest)


# -- the stream ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class _Source:
    """A typed table replay reads and the columns each record version carries."""

    table: str
    record_type: str
    columns_at: dict[int, tuple[str, ...]]


def _sources() -> list[_Source]:
    wanted = Replayer.record_types()
    specs = typed_specs()
    out = []
    for t in catalog().typed.values():
        if t.record_type in wanted:
            spec = specs[t.name]
            versions = range(spec.valid_versions.lowest, spec.valid_versions.highest + 1)
            out.append(_Source(t.name, t.record_type, {v: columns_at(spec, v) for v in versions}))
    return out


def _typed_rows(table: TableSource, source: _Source) -> DataFrame:
    """One typed table's rows as stream rows: provenance, and the record's fields as JSON (``_data``): one
    narrow column for every record type, cheap to hand from the JVM to Python."""
    data = sorted({c for cols in source.columns_at.values() for c in cols})
    df = table(source.table)
    if source.record_type in Replayer.HASHED:  # the replay keeps a fingerprint of the record
        recs = table("records").filter(F.col("record_type") == source.record_type).select(
            *[F.col(c).alias(f"_r_{c}") for c in RECORD_KEY], "value_hash")
        df = df.join(recs, [df[c].eqNullSafe(recs[f"_r_{c}"]) for c in RECORD_KEY]).drop(
            *[f"_r_{c}" for c in RECORD_KEY])
    else:
        df = df.withColumn("value_hash", F.lit(None).cast("long"))
    return df.select("cluster_id", "source", "snapshot_id", "log_offset", "snapshot_seq", "batch_epoch",
                     F.unix_millis("timestamp").alias("_ms"), "record_version", "value_hash",
                     F.lit(source.record_type).alias("record_type"),
                     F.to_json(F.struct(*data), {"ignoreNullFields": "false"}).alias("_data") if data
                     else F.lit("{}").alias("_data"))


def state_rows(histories: dict[str, DataFrame], resume: dict[str, int]) -> DataFrame | None:
    """Stream rows restoring where the last build of each cluster of ``resume`` stopped: the versions holding just
    before its resume offset. That is every current version, except where the build ended inside a metadata
    transaction: control records (voters, kraft.version) applied since its Begin are applied again, so the versions
    they began are left out and those they ended are restored (``Plan.history_where`` replaces both)."""
    if not histories:
        return None
    out: DataFrame | None = None
    spark = next(iter(histories.values())).sparkSession
    cut = F.broadcast(spark.createDataFrame(list(resume.items()), "cluster_id string, _resume long"))
    held = valid_at(F.col("_resume") - 1)  # the versions holding just before it
    # (what Parquet can skip by first: versions ended before the cut, in the files of closed versions)
    ending = Scope.of([], resume, "valid_to_offset", open=True)
    for kind, df in histories.items():
        k = BY_NAME[kind]
        part = (ending.select(df).join(cut, "cluster_id").filter(held)
                .select(F.col("cluster_id").alias("_out"), F.col("valid_from_offset").alias("log_offset"),
                        F.unix_millis("valid_from").alias("_ms"), F.lit(kind).alias("record_type"),
                        F.to_json(F.struct(*k.key_names, *k.value_names), {"ignoreNullFields": "false"}).alias("_data"),
                        F.lit(STATE).alias("_phase"), F.lit(0).cast("long").alias("_seq")))
        out = part if out is None else out.unionByName(part)
    return out


def stream(spark: SparkSession, table: TableSource, bases: list[ClusterBase], sources: list[_Source],
           state: DataFrame | None = None) -> DataFrame:
    """Every replay's rows in application order, partitioned by output cluster (see the module docstring);
    ``state`` (``state_rows``) restores the clusters that go on from their last build."""
    rows: DataFrame | None = None
    for s in sources:
        part = _typed_rows(table, s)
        rows = part if rows is None else rows.unionByName(part)
    assert rows is not None
    snap_plan = [(b.source_cluster, b.base.snapshot.snapshot_id, b.cluster_id) for b in bases
                 if b.base.snapshot is not None and b.resume_from is None]
    log_plan = [(b.source_cluster, b.base.first if b.resume_from is None else b.resume_from, b.cluster_id)
                for b in bases if b.last is not None]
    out = spark.createDataFrame([(b.cluster_id,) for b in bases], "_out string").select(
        "_out", F.lit(END).alias("_phase"), F.lit(0).cast("long").alias("_seq"))
    # each typed table is read only where replay reads it (Parquet skips the rest by its statistics): the base
    # snapshots, and each cluster's log from where its replay starts
    if snap_plan:
        plan = spark.createDataFrame(snap_plan, "cluster_id string, snapshot_id string, _out string")
        snaps = rows.filter((F.col("source") == "snapshot") & of_clusters(sorted({c for c, _, _ in snap_plan}))
                            & of_clusters(sorted({s for _, s, _ in snap_plan}), "snapshot_id"))
        out = out.unionByName(
            snaps.join(F.broadcast(plan), ["cluster_id", "snapshot_id"])
            .select(*STREAM, F.lit(SNAPSHOT).alias("_phase"), F.col("snapshot_seq").alias("_seq")),
            allowMissingColumns=True)
    if log_plan:
        plan = spark.createDataFrame(log_plan, "cluster_id string, _first long, _out string")
        firsts: dict[str, int] = {}
        for c, first, _ in log_plan:
            firsts[c] = min(first, firsts.get(c, first))
        log = Scope.of([], firsts, "log_offset").select(rows.filter(F.col("source") == "log"))
        out = out.unionByName(
            log.join(F.broadcast(plan), "cluster_id").filter(F.col("log_offset") >= F.col("_first"))
            .select(*STREAM, F.lit(LOG).alias("_phase"), F.col("log_offset").alias("_seq")),
            allowMissingColumns=True)
    if state is not None:
        out = out.unionByName(state, allowMissingColumns=True)
    n = max(1, min(len(bases), default_parallelism(spark)))
    return out.repartition(n, "_out").sortWithinPartitions("_out", "_phase", "_seq")


STREAM = ("_out", "log_offset", "_ms", "batch_epoch", "record_type", "record_version", "value_hash", "_data")


def replay(spark: SparkSession, store: TableStore, table: TableSource, bases: list[ClusterBase], build_id: str,
           scratch: bool = False, state: DataFrame | None = None) -> list[StagedFile]:
    """Replay every cluster of ``bases`` on the executors; each task writes the history rows and one
    ``replay_ranges`` row per cluster as Parquet files of ``output_tables()`` (staged by ``store``; with
    ``scratch``, aside from the tables). Returns the files written."""
    if not bases:
        return []
    sources = _sources()
    by_out = {b.cluster_id: b for b in bases}
    built_at = datetime.now(UTC)

    def produce(batches: Iterable[pa.RecordBatch]) -> Iterator[dict[str, pa.Table]]:
        return _replay_partition(batches, by_out, sources, build_id, built_at)

    return store.stage_chunks(stream(spark, table, bases, sources, state), output_tables(), produce, build_id,
                              scratch)


def output_tables() -> list[TableDef]:
    """The tables a replay writes: every history table, then ``replay_ranges``."""
    return [*history_tables().values(), replay_ranges_table()]


# -- the executor side ---------------------------------------------------------------------------------------

class _Sink:
    """Output rows buffered per table, handed out as Arrow tables."""

    def __init__(self) -> None:
        self.tables = {t.name: t.schema for t in output_tables()}
        self.rows: dict[str, list[dict[str, Any]]] = {name: [] for name in self.tables}
        self.history = {kind: t.name for kind, t in history_tables().items()}
        # history rows come with timestamps in ms: converted as such in one pass, then cast to the table's unit
        self.in_ms = {t.name: pa.struct([f.with_type(pa.timestamp("ms", f.type.tz)) if pa.types.is_timestamp(f.type)
                                         else f for f in t.schema]) for t in history_tables().values()}
        self.count = 0

    def version(self, kind: str, row: dict[str, Any]) -> None:
        # current versions go to files of their own: the next build rewrites them, never the closed ones
        name = self.history[kind] if row["valid_to_offset"] is not None else self.history[kind] + FILE_PART + "open"
        self.rows.setdefault(name, []).append(row)
        self.count += 1

    def add(self, table: str, row: dict[str, Any]) -> None:
        self.rows[table].append(row)
        self.count += 1

    def _table(self, name: str, rows: list[dict[str, Any]]) -> pa.Table:
        table = name.split(FILE_PART)[0]
        schema = self.tables[table]
        if table not in self.in_ms:
            return pa.Table.from_pylist(rows, schema=schema)
        return pa.Table.from_struct_array(pa.array(rows, type=self.in_ms[table])).cast(schema)

    def drain(self, at_least: int = 1) -> Iterator[dict[str, pa.Table]]:
        if self.count < at_least:
            return
        out = {name: self._table(name, rows) for name, rows in self.rows.items() if rows}
        for rows in self.rows.values():
            rows.clear()
        self.count = 0
        yield out


class _Replay:
    """One cluster's replay inside a task: snapshot rows gathered, then log rows applied one by one."""

    def __init__(self, base: ClusterBase, sink: _Sink, build_id: str, built_at: datetime):
        self.base, self.sink, self.build_id, self.built_at = base, sink, build_id, built_at
        self.history = Versions(base.cluster_id, sink.version)
        self.replayer = Replayer(self.history.add)
        self.snapshot: list[Event] | None = [] if base.base.snapshot is not None and base.resume_from is None \
            else None
        self.replayer.problems.extend(base.carried)

    def restore(self, kind: str, data: str, offset: int, ms: int) -> None:
        """One current version the last build left: into the image and the open versions."""
        k = BY_NAME[kind]
        row = orjson.loads(data)
        key = tuple(row[c] for c in k.key_names)
        value = {c: row[c] for c in k.value_names}
        self.replayer.image.entities[kind][key] = value
        self.history.resume(kind, key, offset, ms, value)

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
        self.sink.add(replay_ranges_table().name, {
            "cluster_id": b.cluster_id, "base_snapshot_id": snap.snapshot_id if snap else None,
            "base_offset": snap.offset if snap else None,
            "base_timestamp": snap.timestamp * 1000 if snap else None,
            "first_offset": b.base.first if b.last is not None else None, "last_offset": b.last,
            "last_timestamp": b.last_ms * 1000 if b.last_ms is not None else None,
            "open_transaction_offset": r.open_transaction,
            "transaction_problems": sum(1 for p in r.problems if "Transaction" in p),
            "problems": problems, "build_id": self.build_id, "built_at": self.built_at})


def _absent(sources: list[_Source]) -> dict[tuple[str, int], tuple[str, ...]]:
    """Per record type and version, the stream's fields that version does not have (the decoder leaves them out)."""
    out = {}
    for s in sources:
        every = {c for cols in s.columns_at.values() for c in cols}
        for version, cols in s.columns_at.items():
            out[(s.record_type, version)] = tuple(sorted(every - set(cols)))
    return out


def _record(data: str, absent: tuple[str, ...]) -> dict[str, Any]:
    """A record's fields as the decoder gives them (only those its version has)."""
    value = orjson.loads(data)
    for c in absent:
        del value[c]
    return value


def _replay_partition(batches: Iterable[pa.RecordBatch], bases: dict[str, ClusterBase], sources: list[_Source],
                      build_id: str, built_at: datetime, batch_rows: int = 1 << 16) -> Iterator[dict[str, pa.Table]]:
    with paused_gc():  # replay builds millions of acyclic dicts: the cyclic GC would rescan them, for nothing
        yield from _replay_batches(batches, bases, sources, build_id, built_at, batch_rows)


def _replay_batches(batches: Iterable[pa.RecordBatch], bases: dict[str, ClusterBase], sources: list[_Source],
                    build_id: str, built_at: datetime, batch_rows: int) -> Iterator[dict[str, pa.Table]]:
    absent = _absent(sources)
    sink = _Sink()
    current: _Replay | None = None
    for batch in batches:
        cols = {c: batch.column(c).to_pylist() for c in (*STREAM, "_phase")}
        for i, out in enumerate(cols["_out"]):
            if current is None or current.base.cluster_id != out:
                current = _Replay(bases[out], sink, build_id, built_at)
            phase = cols["_phase"][i]
            if phase == STATE:
                current.restore(cols["record_type"][i], cols["_data"][i], cols["log_offset"][i], cols["_ms"][i])
                continue
            if phase == END:
                current.finish()
                current = None
                continue
            rtype, version = cols["record_type"][i], cols["record_version"][i]
            decoded = Decoded(None, rtype, version, _record(cols["_data"][i], absent.get((rtype, version), ())))
            ev = Event(cols["log_offset"][i], cols["_ms"][i], cols["batch_epoch"][i], decoded, cols["value_hash"][i])
            if phase == SNAPSHOT:
                current.snapshot_record(ev)
            else:
                current.apply(ev)
            if sink.count >= batch_rows:
                yield from sink.drain()
    yield from sink.drain()
