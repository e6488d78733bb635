"""Replay at Spark scale: each cluster's records streamed through the one replayer (``kraftlog.state``).

* **bases** (``kraftlog.spark.bases``): where each cluster's replay starts;
* **stream**: the rows of the typed tables replay reads, each placed in the replay of its output
  cluster: the base snapshot's rows (in file order), then the log rows from the base on (in offset
  order), then an end mark. A big cluster's replay is split by topic into parts (``Replayer.BY_TOPIC``:
  one per ``SPLIT_OFFSETS`` log offsets it replays, at most one per core), so that its partitions
  replay on several cores at once. Each part goes to a task of its own (``Layout``), whose rows are sorted,
  so one task replays whole parts, one at a time;
* **replay** (executors): ``kraftlog.state.replay.Replayer`` applies the stream exactly as the local
  commands do, ``kraftlog.state.history.Versions`` turns its changes into history rows as versions
  close, and each cluster ends with its ``replay_ranges`` row (a split cluster: the driver joins its
  parts' rows into one). A task holds one part's image, never its log, and writes the rows as Parquet
  files itself (only file metadata returns to the driver).
"""

from __future__ import annotations

import functools
import heapq
import re
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import orjson
import pyarrow as pa
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from kraftlog.analytics.events import valid_at
from kraftlog.spark.bases import ClusterBase, TableSource, may_hold
from kraftlog.spark.predicates import Scope, of_clusters, only_topics
from kraftlog.spark.session import default_parallelism, local_frame
from kraftlog.spark.staging import StagedFile, restage, staged_rows
from kraftlog.spark.store import TableStore, open_apart
from kraftlog.state.entities import BY_NAME, history_tables, previous_column, replay_ranges_table, replay_tables
from kraftlog.state.history import Row, Versions
from kraftlog.state.replay import Change, Event, Replayer, TopicsRead, still_open, still_open_parts
from kraftlog.tables.definitions import RECORD_KEY, catalog, columns_at, typed_specs
from kraftlog.wire.files import paused_gc
from kraftlog.wire.messages import Decoded

STATE, SNAPSHOT, LOG, END = -1, 0, 1, 2  # phases of one replay's stream, in order
MAX_PROBLEMS = 100  # problems kept per replay_ranges row (a summary line counts the rest)
SPLIT_OFFSETS = 400_000  # a cluster's replay gets one part per so many log offsets it replays (at most one per core)
BATCH_ROWS = 1 << 16  # a replay task hands its history rows over (as Arrow) once it holds so many


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


# the columns of ``_typed_rows``
_TYPED_ROWS = ("cluster_id string, source string, snapshot_id string, log_offset long, snapshot_seq long, "
               "batch_epoch int, _ms long, record_version int, value_hash long, record_type string, _topic string, "
               "_data string")


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
    topic = F.col("topic_id") if source.record_type in Replayer.BY_TOPIC else F.lit(None).cast("string")
    return df.select("cluster_id", "source", "snapshot_id", "log_offset", "snapshot_seq", "batch_epoch",
                     F.unix_millis("timestamp").alias("_ms"), "record_version", "value_hash",
                     F.lit(source.record_type).alias("record_type"), topic.alias("_topic"),
                     F.to_json(F.struct(*data), {"ignoreNullFields": "false"}).alias("_data") if data
                     else F.lit("{}").alias("_data"))


def state_scope(resume: dict[str, int]) -> Scope:
    """The history rows ``state_rows`` reads of the clusters of ``resume``: those still open or ended at the resume
    offset or later (what a reader skips first: versions ended before the cut, in the files of closed versions)."""
    return Scope.of([], resume, "valid_to_offset", open=True)


def state_rows(histories: dict[str, DataFrame], resume: dict[str, int],
               restored: Mapping[str, TopicsRead | None] | None = None) -> DataFrame | None:
    """Stream rows restoring where the last build of each cluster of ``resume`` stopped: the versions holding just
    before its resume offset. That is every current version, except where the build ended inside a metadata
    transaction: control records (voters, kraft.version) applied since its Begin are applied again, so the versions
    they began are left out and those they ended are restored (``Plan.history_where`` replaces both). ``restored``:
    per cluster, the only topics and partitions restored (``Replayer.topics_read``; None: every topic).
    ``histories``: as read in ``state_scope(resume)`` (``TableStore.read`` skips the files that hold none), which
    the versions holding just before the resume offset all are."""
    if not histories:
        return None
    out: DataFrame | None = None
    spark = next(iter(histories.values())).sparkSession
    cut = F.broadcast(local_frame(spark, list(resume.items()), "cluster_id string, _resume long"))
    held = valid_at(F.col("_resume") - 1)  # the versions holding just before it
    for kind, df in histories.items():
        k = BY_NAME[kind]
        topic = F.col("topic_id") if kind == Replayer.SPLIT_KIND else F.lit(None).cast("string")
        if kind in Replayer.TOPIC_KINDS:
            df = only_topics(df, restored or {})
        part = (df.join(cut, "cluster_id").filter(held)
                .select(F.col("cluster_id").alias("_out"), F.col("valid_from_offset").alias("log_offset"),
                        F.unix_millis("valid_from").alias("_ms"), F.lit(kind).alias("record_type"),
                        topic.alias("_topic"),
                        F.to_json(F.struct(*k.key_names, *k.value_names, *(f.name for f in k.previous_columns)),
                                  {"ignoreNullFields": "false"}).alias("_data"),
                        F.lit(STATE).alias("_phase"), F.lit(0).cast("long").alias("_seq")))
        out = part if out is None else out.unionByName(part)
    return out


@dataclass(frozen=True)
class Layout:
    """How the replays spread over tasks: the parts of each cluster's replay, and the task of each part."""

    parts: dict[str, int]  # output cluster -> its parts (1: not split)
    tasks: dict[tuple[str, int], int]  # (output cluster, part) -> task
    n: int  # tasks

    @classmethod
    def of(cls, bases: list[ClusterBase], cores: int) -> Layout:
        """One part per ``SPLIT_OFFSETS`` log offsets a cluster replays (at most ``cores``); the parts placed on
        ``cores`` tasks, biggest first, each on the task with the fewest offsets so far."""
        parts, size = {}, {}
        for b in bases:
            first = b.base.first if b.resume_from is None else b.resume_from
            span = b.last - first + 1 if b.last is not None and first is not None else 0
            parts[b.cluster_id] = max(1, min(cores, span // SPLIT_OFFSETS))
            size[b.cluster_id] = span / parts[b.cluster_id] + 1
        units = sorted(((c, p) for c, n in parts.items() for p in range(n)), key=lambda u: (-size[u[0]], u))
        n = max(1, min(len(units), cores))
        load, tasks = [0.0] * n, {}
        for u in units:
            t = min(range(n), key=load.__getitem__)
            tasks[u] = t
            load[t] += size[u[0]]
        return cls(parts, tasks, n)


def part_of(record_type: Column, topic: Column, phase: Column, parts: Column) -> Column:
    """The parts of a split replay a stream row goes to (``Replayer.BY_TOPIC``): a BY_TOPIC record (or restored
    partition) to its topic's, a TOPIC_WIDE record, a restored topic and the end mark to every part, the rest to
    part 0."""
    every = F.sequence(F.lit(0), parts - 1)
    return (F.when(parts == 1, F.array(F.lit(0)))
            .when(record_type.isin(*Replayer.BY_TOPIC, Replayer.SPLIT_KIND),
                  F.array(F.pmod(F.xxhash64(topic), parts.cast("long")).cast("int")))
            .when(record_type.isin(*Replayer.TOPIC_WIDE, Replayer.EVERY_PART_KIND) | (phase == END), every)
            .otherwise(F.array(F.lit(0))))


def stream(spark: SparkSession, table: TableSource, bases: list[ClusterBase], sources: list[_Source],
           layout: Layout, state: DataFrame | None = None) -> DataFrame:
    """Every replay's rows in application order, each in the task ``layout`` gives its part of its cluster's replay
    (see the module docstring); ``state`` (``state_rows``) restores the clusters that go on from their last build."""
    rows = functools.reduce(DataFrame.unionByName, [_typed_rows(table, s) for s in sources]) if sources \
        else local_frame(spark, [], _TYPED_ROWS)  # (no type to read: no rows, the same columns)
    snap_plan = [(b.source_cluster, b.base.snapshot.snapshot_id, b.cluster_id) for b in bases
                 if b.base.snapshot is not None and b.resume_from is None]
    log_plan = [(b.source_cluster, b.base.first if b.resume_from is None else b.resume_from, b.cluster_id)
                for b in bases if b.last is not None]
    out = local_frame(spark, [(b.cluster_id,) for b in bases], "_out string").select(
        "_out", F.lit(END).alias("_phase"), F.lit(0).cast("long").alias("_seq"),
        F.lit(None).cast("string").alias("record_type"), F.lit(None).cast("string").alias("_topic"))
    # each typed table is read only where replay reads it (Parquet skips the rest by its statistics): the base
    # snapshots, and each cluster's log from where its replay starts
    if snap_plan:
        plan = local_frame(spark, snap_plan, "cluster_id string, snapshot_id string, _out string")
        snaps = rows.filter((F.col("source") == "snapshot") & of_clusters(sorted({c for c, _, _ in snap_plan}))
                            & of_clusters(sorted({s for _, s, _ in snap_plan}), "snapshot_id"))
        out = out.unionByName(
            snaps.join(F.broadcast(plan), ["cluster_id", "snapshot_id"])
            .select(*STREAM, "_topic", F.lit(SNAPSHOT).alias("_phase"), F.col("snapshot_seq").alias("_seq")),
            allowMissingColumns=True)
    if log_plan:
        plan = local_frame(spark, log_plan, "cluster_id string, _first long, _out string")
        firsts: dict[str, int] = {}
        for c, first, _ in log_plan:
            firsts[c] = min(first, firsts.get(c, first))
        log = Scope.of([], firsts, "log_offset").select(rows.filter(F.col("source") == "log"))
        out = out.unionByName(
            log.join(F.broadcast(plan), "cluster_id").filter(F.col("log_offset") >= F.col("_first"))
            .select(*STREAM, "_topic", F.lit(LOG).alias("_phase"), F.col("log_offset").alias("_seq")),
            allowMissingColumns=True)
    if state is not None:
        out = out.unionByName(state, allowMissingColumns=True)
    parts = local_frame(spark, list(layout.parts.items()), "_out string, _parts int")
    keys = task_keys(layout.n)
    tasks = local_frame(spark, [(c, p, keys[t]) for (c, p), t in layout.tasks.items()],
                        "_out string, _part int, _task int")
    # the typed tables' scans are ~one task each, most of them reading nothing from where an increment starts:
    # read them in as many tasks as there are cores
    out = (out.coalesce(max(1, default_parallelism(spark))).join(F.broadcast(parts), "_out")
           .withColumn("_part", F.explode(part_of(F.col("record_type"), F.col("_topic"), F.col("_phase"),
                                                  F.col("_parts"))))
           .join(F.broadcast(tasks), ["_out", "_part"]).drop("_parts", "_topic"))
    return out.repartition(layout.n, "_task").sortWithinPartitions("_out", "_part", "_phase", "_seq")


STREAM = ("_out", "log_offset", "_ms", "batch_epoch", "record_type", "record_version", "value_hash", "_data")


def _murmur3_int(value: int, seed: int = 42) -> int:
    """Spark's hash of an int column (``Murmur3_x86_32.hashInt``), which ``repartition`` places rows by."""
    def mul(a: int, b: int) -> int:
        return (a * b) & 0xFFFFFFFF

    def rotl(x: int, r: int) -> int:
        return ((x << r) | (x >> (32 - r))) & 0xFFFFFFFF
    k = mul(rotl(mul(value & 0xFFFFFFFF, 0xCC9E2D51), 15), 0x1B873593)
    h = (rotl(seed ^ k, 13) * 5 + 0xE6546B64) & 0xFFFFFFFF
    h ^= 4
    h = mul(h ^ (h >> 16), 0x85EBCA6B)
    h = mul(h ^ (h >> 13), 0xC2B2AE35)
    h ^= h >> 16
    return h - (1 << 32) if h & 0x80000000 else h


@functools.cache
def task_keys(n: int) -> tuple[int, ...]:
    """Values of ``_task`` that ``repartition(n, "_task")`` places in partitions 0, 1, ... n - 1: each part gets the
    task the layout gave it (hashing the task numbers themselves could put two parts in one task, leaving a core
    idle)."""
    keys: dict[int, int] = {}
    k = 0
    while len(keys) < n:
        keys.setdefault(_murmur3_int(k) % n, k)
        k += 1
    return tuple(keys[t] for t in range(n))


def replay(spark: SparkSession, store: TableStore, table: TableSource, bases: list[ClusterBase], build_id: str,
           scratch: bool = False, state: DataFrame | None = None, record_types: set[str] | None = None
           ) -> list[StagedFile]:
    """Replay every cluster of ``bases`` on the executors; each task writes the history rows and one
    ``replay_ranges`` row per cluster as Parquet files of ``replay_tables()`` (staged by ``store``; with
    ``scratch``, aside from the tables). ``record_types``: the only types of records the replays read (their
    typed tables alone are read; None: every type). Returns the files written."""
    if not bases:
        return []
    sources = [s for s in _sources() if record_types is None or s.record_type in record_types]
    clusters = sorted({b.source_cluster for b in bases})
    with ThreadPoolExecutor(8) as pool:  # (round trips on an object store) a typed table of no record of these
        # clusters is not read (a small cluster has records of a few of the 29 types)
        sources = [s for s, held in zip(sources, pool.map(lambda s: may_hold(table, s.table, clusters), sources),
                                        strict=True) if held]
    by_out = {b.cluster_id: b for b in bases}
    layout = Layout.of(bases, default_parallelism(spark))
    built_at = datetime.now(UTC)

    def produce(batches: Iterable[pa.RecordBatch]) -> Iterator[dict[str, pa.Table]]:
        return _replay_partition(batches, by_out, layout.parts, sources, build_id, built_at)

    files = store.stage_chunks(stream(spark, table, bases, sources, layout, state), replay_tables(), produce,
                               build_id, scratch)
    split = {c for c, n in layout.parts.items() if n > 1}
    return join_parts(store, files, split) if split else files


def join_parts(store: TableStore, files: list[StagedFile], split: set[str]) -> list[StagedFile]:
    """``files`` with the ``replay_ranges`` rows of the parts of each split replay joined into one row per cluster
    (``merge_problems``), in one file in place of the tasks' ``replay_ranges`` files."""
    ranges = replay_ranges_table()
    mine = [f for f in files if f.table == ranges.name]
    by_cluster: dict[str, list[dict[str, Any]]] = {}
    for row in staged_rows(mine, store.storage).to_pylist():
        by_cluster.setdefault(row["cluster_id"], []).append(row)
    rows = []
    for cluster, parts in by_cluster.items():
        if cluster in split:
            rows.append({**parts[0], "problems": _kept(merge_problems([p["problems"] for p in parts]))})
        else:
            rows.extend(parts)
    joined = restage(mine, pa.Table.from_pylist(rows, schema=ranges.schema), store.storage)
    return [f for f in files if f.table != ranges.name] + [joined]


_AT = re.compile(r"offset (\d+):")


def merge_problems(parts: list[list[str]]) -> list[str]:
    """One replay's problems from those of its parts (``Replayer.BY_TOPIC``): a problem every part found once (the
    shared records') is one problem, the others are the parts' own; in offset order. A transaction still open at
    the end holds the records each part counted as its own."""
    opened = [found for p in parts for found in map(still_open_parts, p) if found]
    parts = [[x for x in p if not still_open_parts(x)] for p in parts]
    end = [still_open(opened[0][0], sum(n for _, n in opened))] if opened else []
    common = Counter(parts[0])
    for p in parts[1:]:
        common &= Counter(p)
    lists = [_counted(parts[0], common, True)] + [_counted(p, common, False) for p in parts]

    def keyed(problems: list[str]) -> list[tuple[int, str]]:
        at, out = -1, []
        for p in problems:  # a problem without an offset keeps the place of the one before it
            m = _AT.match(p)
            at = int(m.group(1)) if m else at
            out.append((at, p))
        return out
    return [p for _, p in heapq.merge(*(keyed(p) for p in lists), key=lambda kp: kp[0])] + end


def _counted(problems: list[str], counts: Counter[str], take: bool) -> list[str]:
    """In order, the problems of ``problems`` that ``counts`` counts (``take``), or the others."""
    left, out = Counter(counts), []
    for p in problems:
        counted = left[p] > 0
        if counted:
            left[p] -= 1
        if counted == take:
            out.append(p)
    return out


def _kept(problems: list[str]) -> list[str]:
    """At most ``MAX_PROBLEMS`` problems, a summary line counting the rest."""
    if len(problems) > MAX_PROBLEMS:
        return [*problems[:MAX_PROBLEMS], f"... and {len(problems) - MAX_PROBLEMS} more problems"]
    return problems


# -- the executor side ---------------------------------------------------------------------------------------

class _Sink:
    """Output rows buffered per table, handed out as Arrow tables."""

    def __init__(self) -> None:
        self.tables = {t.name: t for t in replay_tables()}
        # history rows as tuples in column order (``kraftlog.state.history.Row``), ``replay_ranges`` rows as dicts
        self.rows: dict[str, list[Any]] = {name: [] for name in self.tables}
        self.history = {kind: t.name for kind, t in history_tables().items()}
        # history rows come with timestamps in ms: converted as such in one pass, then cast to the table's unit
        self.in_ms = {t.name: pa.struct([f.with_type(pa.timestamp("ms", f.type.tz)) if pa.types.is_timestamp(f.type)
                                         else f for f in t.schema]) for t in history_tables().values()}
        self.count = 0

    def version(self, kind: str, row: Row) -> None:
        self.rows[self.history[kind]].append(row)
        self.count += 1

    def add(self, table: str, row: dict[str, Any]) -> None:
        self.rows[table].append(row)
        self.count += 1

    def _table(self, name: str, rows: list[Any]) -> pa.Table:
        schema = self.tables[name].schema
        if name not in self.in_ms:
            return pa.Table.from_pylist(rows, schema=schema)
        return pa.Table.from_struct_array(pa.array(rows, type=self.in_ms[name])).cast(schema)

    def drain(self, at_least: int = 1) -> Iterator[dict[str, pa.Table]]:
        """The rows so far (at least ``at_least`` of them), by file part: the rows the next build rewrites (current
        versions) in files of their own (``open_apart``)."""
        if self.count < at_least:
            return
        out: dict[str, pa.Table] = {}
        for name, rows in self.rows.items():
            if rows:
                out.update(open_apart(self.tables[name], self._table(name, rows)))
                rows.clear()
        self.count = 0
        yield out


class _Replay:
    """One cluster's replay inside a task: snapshot rows gathered, then log rows applied one by one."""

    def __init__(self, base: ClusterBase, sink: _Sink, build_id: str, built_at: datetime, part: int = 0,
                 parts: int = 1):
        self.base, self.sink, self.build_id, self.built_at = base, sink, build_id, built_at
        self.part, self.parts = part, parts
        self.history = Versions(base.cluster_id, sink.version)
        self.replayer = Replayer(self.history.add if part == 0 else _only_split(self.history.add))
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
        if self.part == 0 or kind == Replayer.SPLIT_KIND:  # (the topics every part holds are the first part's)
            replaced = {n: row[previous_column(n)] for n in k.previous}
            self.history.resume(kind, key, offset, ms, value,
                                replaced if any(v is not None for v in replaced.values()) else None)

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

    def _owned(self, ev: Event) -> bool:
        """Whether a record this part applies is its own (the first part's, or one of its topics')."""
        return self.part == 0 or ev.decoded.type in Replayer.BY_TOPIC

    def finish(self) -> None:
        self._load()
        r = self.replayer
        r.finish(None if self.parts == 1 else self._owned)
        self.history.finish()
        b = self.base
        snap = b.base.snapshot
        problems = [p for p in [b.base.problem] if p] + r.problems
        self.sink.add(replay_ranges_table().name, {
            "cluster_id": b.cluster_id, "base_snapshot_id": snap.snapshot_id if snap else None,
            "base_offset": snap.offset if snap else None,
            "base_timestamp": snap.timestamp * 1000 if snap else None,
            "first_offset": b.base.first if b.last is not None else None, "last_offset": b.last,
            "last_timestamp": b.last_ms * 1000 if b.last_ms is not None else None,
            "open_transaction_offset": r.open_transaction,
            "transaction_problems": sum(1 for p in r.problems if "Transaction" in p),
            # (the parts of a split replay keep every problem: ``join_parts`` merges them, then cuts)
            "problems": _kept(problems) if self.parts == 1 else problems, "build_id": self.build_id,
            "built_at": self.built_at})


def _only_split(add: Callable[[Change], None]) -> Callable[[Change], None]:
    """``add`` for the changes a part of a split replay other than the first one owns: its partitions'."""
    def owned(change: Change) -> None:
        if change.kind == Replayer.SPLIT_KIND:
            add(change)
    return owned


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


def _replay_partition(batches: Iterable[pa.RecordBatch], bases: dict[str, ClusterBase], parts: dict[str, int],
                      sources: list[_Source], build_id: str, built_at: datetime, batch_rows: int = BATCH_ROWS
                      ) -> Iterator[dict[str, pa.Table]]:
    with paused_gc():  # replay builds millions of acyclic dicts: the cyclic GC would rescan them, for nothing
        yield from _replay_batches(batches, bases, parts, sources, build_id, built_at, batch_rows)


def _replay_batches(batches: Iterable[pa.RecordBatch], bases: dict[str, ClusterBase], parts: dict[str, int],
                    sources: list[_Source], build_id: str, built_at: datetime, batch_rows: int
                    ) -> Iterator[dict[str, pa.Table]]:
    absent = _absent(sources)
    sink = _Sink()
    current: _Replay | None = None
    for batch in batches:
        cols = {c: batch.column(c).to_pylist() for c in (*STREAM, "_phase", "_part")}
        for i, out in enumerate(cols["_out"]):
            part = cols["_part"][i]
            if current is None or current.base.cluster_id != out or current.part != part:
                current = _Replay(bases[out], sink, build_id, built_at, part, parts[out])
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
