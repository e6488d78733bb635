"""Entity histories on the landed tables: build, state at any offset or time, diffs, verification.

``build_histories`` replays the ``records`` and typed tables of each cluster on the executors
(``kraftlog.spark.replay``, running the replayer of ``kraftlog.state``) into one history per entity
kind (``kraftlog.state.entities``); ``reconstruct`` writes them as Delta tables ``<kind>_history``
plus ``replay_ranges``, each replaced in one commit.

Queries read the history tables: ``state_at`` (the versions valid at an offset), ``offset_at`` (the
offset of a time), ``diff`` and ``verify_tables`` (the histories at every reachable snapshot
against the snapshot's own contents, which are built as pseudo-clusters ``<cluster>@<snapshot>``).
"""

from __future__ import annotations

import functools
import json
import logging
import operator
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from kraftlog.analytics.events import valid_at
from kraftlog.commits import RECONSTRUCT
from kraftlog.config import Config
from kraftlog.errors import ClusterNotFound, NotBuilt, UsageError
from kraftlog.lease import DEFAULT_TTL_S
from kraftlog.points import ANY, GREATEST, LEAST, Ask, Records, check_in_log, last_offsets_at
from kraftlog.spark.bases import ClusterBase, LandedTables, TableSource, cluster_bases, pseudo_cluster, snapshot_bases
from kraftlog.spark.increments import Plan, last_builds, plan_build, state_table_rows
from kraftlog.spark.landed import log_ends
from kraftlog.spark.predicates import SQL_TERMS, of_clusters, sql_literal
from kraftlog.spark.replay import replay
from kraftlog.spark.session import interpreted, local_frame
from kraftlog.spark.staging import StagedFile
from kraftlog.spark.store import TableStore, landed_clusters, new_run_id, store_for, writing
from kraftlog.state.entities import BY_NAME, history_tables, replay_ranges_table, replay_state_table, replay_tables
from kraftlog.state.local import Difference
from kraftlog.state.replay import Change, Image
from kraftlog.tables.definitions import catalog

log = logging.getLogger("kraftlog")

History = dict[str, DataFrame]  # entity kind -> history rows


@dataclass
class HistoryBuild:
    """The replays of a set of clusters: how each was based and the files its rows were written to."""

    bases: list[ClusterBase]
    store: TableStore
    build_id: str
    files: list[StagedFile]

    @functools.cached_property
    def histories(self) -> History:
        """One DataFrame per entity kind."""
        return {kind: self.store.read_staged(t, self.files) for kind, t in history_tables().items()}

    def release(self) -> None:
        """Remove the build's files (a build read through ``histories``, not committed)."""
        self.store.discard_staging(self.build_id)


def build_histories(spark: SparkSession, store: TableStore, clusters: list[str] | None = None,
                    snapshots: bool = False, table: TableSource | None = None) -> HistoryBuild:
    """Histories of every cluster (or of ``clusters``) of the landed tables of ``store`` (or of ``table``);
    with ``snapshots``, also of each reachable snapshot. The rows are written aside, under the store's
    staging area, until ``release``."""
    source = table or landed(store)
    bases = cluster_bases(source, clusters)
    every = bases + (snapshot_bases(bases) if snapshots else [])
    build_id = new_run_id()
    return HistoryBuild(every, store, build_id, replay(spark, store, source, every, build_id, scratch=True))


def landed(store: TableStore) -> LandedTables:
    """The landed tables of a store, by name."""
    return LandedTables(store)


@dataclass
class ReconstructResult:
    build_id: str
    clusters: int  # clusters replayed (from their base or going on)
    rows: dict[str, int]  # rows written, by table
    seconds: float
    resumed: int = 0  # of ``clusters``, those that went on from their last build
    unchanged: int = 0  # clusters left as they were
    read_whole: int = 0  # clusters whose landed rows were all read to plan (not only those landed since)
    interpreted: bool = False  # its expressions were interpreted (``kraftlog.spark.session.interpreted``)

    def line(self) -> str:
        total = sum(self.rows.values())
        parts = ", ".join(f"{k} {v}" for k, v in self.rows.items() if v)
        return (f"build {self.build_id}: {self.clusters} cluster(s) replayed ({self.resumed} going on from their "
                f"last build), {self.unchanged} unchanged, {self.read_whole} read whole to plan, {total} history rows "
                f"written in {self.seconds:.1f}s" + (f" ({parts})" if parts else "")
                + ("; expressions interpreted" if self.interpreted else ""))


def reconstruct(spark: SparkSession, config: Config, store: TableStore | None = None,
                clusters: list[str] | None = None, full: bool = False) -> ReconstructResult:
    """Bring the entity histories up to date with the landed tables: clusters whose log only grew go on from
    where the last build stopped, changed ones are replayed from their base (``kraftlog.spark.increments``);
    ``full`` replays every cluster from its base."""
    store = store or store_for(spark, config)
    clusters = landed_clusters(store, clusters)
    build_id = new_run_id()
    with writing(store, config, build_id, RECONSTRUCT):
        return _reconstruct(spark, store, build_id, clusters, full, config.interpreted_below)


def _reconstruct(spark: SparkSession, store: TableStore, build_id: str, clusters: list[str] | None, full: bool,
                 interpreted_below: int) -> ReconstructResult:
    t0 = time.time()
    state_table = replay_state_table()
    remade = store.ensure_all(replay_tables())
    if not store.ensure(state_table) and remade:  # histories of another layout: nothing to go on from
        store.drop(state_table)
        store.ensure(state_table)
    if remade and clusters is not None:
        log.warning("%s created anew: every cluster is rebuilt, not only %s", ", ".join(remade), ", ".join(clusters))
        clusters = None
    stopped = store.marks.marked(RECONSTRUCT)
    if stopped is not None:  # its tables hold some of its commits and not others: nothing to go on from
        log.warning("reconstruct %s stopped while committing the histories: every cluster is replayed from its base",
                    stopped)
        clusters, full = None, True
    source = landed(store)
    last = last_builds(spark, store, clusters, full)
    with interpreted(spark, functools.partial(last.state_records, source), interpreted_below) as small:
        plan = plan_build(spark, store, source, clusters, full, last)
        t_plan = time.time()
        log.info("reconstruct: %d cluster(s) go on from their last build, %d replayed from their base, %d unchanged, "
                 "%d gone", len(plan.resumed), len(plan.rebuilt), len(plan.unchanged), len(plan.gone))
        rows = {t.name: 0 for t in replay_tables()}
        everything = clusters is None and plan.from_scratch  # every table replaced in one commit each
        done: list[dict[str, Any]] = []
        t_replay = t_plan
        files: list[StagedFile] | None = None
        ranges = replay_ranges_table()
        if plan.run or plan.gone or everything:
            files = replay(spark, store, source, plan.run, build_id, state=plan.state, record_types=plan.record_types)
            t_replay = time.time()
            done = [r.asDict() for r in store.read_staged(ranges, files).collect()]
        if files is not None or plan.gone or plan.refreshed or everything:
            with store.marks.committing(RECONSTRUCT, build_id):  # the histories, then where each cluster stands
                if files is not None:
                    rows.update(_commit_histories(store, plan, files, everything, build_id))
                if done or plan.gone or plan.refreshed or everything:
                    state = pa.Table.from_pylist(state_table_rows(plan, done, build_id), schema=state_table.schema)
                    store.overwrite(state_table, store.stage_small(state_table, state, build_id), build_id,
                                    None if everything else plan.cluster_where(refreshed=True))
    for name, n in rows.items():
        log.info("%s: %d rows", name, n)
    log.info("phases: plan %.1f s, replay %.1f s, commit %.1f s", t_plan - t0, t_replay - t_plan,
             time.time() - t_replay)
    return ReconstructResult(build_id, len(plan.run), rows, time.time() - t0, len(plan.resumed), len(plan.unchanged),
                             len(plan.read_whole), small)


def _commit_histories(store: TableStore, plan: Plan, files: list[StagedFile], everything: bool, build_id: str
                      ) -> dict[str, int]:
    """Commit the replay's staged ``files`` to the tables it writes (``everything``: each replaced whole, else the rows
    the plan replaces); rows committed by table."""
    ranges = replay_ranges_table()
    kinds = {t.name: kind for kind, t in history_tables().items()}
    rows, writes = {}, []
    for t in replay_tables():
        mine = [f for f in files if f.table == t.name]
        where = None if everything else plan.cluster_where() if t is ranges else plan.history_where(kinds[t.name])
        if where is None and not everything:  # none of its rows change (going on, no topic named)
            if mine:
                raise RuntimeError(f"{t.name}: rows written where the build plans to replace none")
            continue
        writes.append((t, mine, where))
        rows[t.name] = sum(f.num_records for f in mine)
    store.overwrite_all(writes, build_id)
    return rows


def read_histories(store: TableStore) -> History:
    """The history tables of a store."""
    return {kind: store.read(t) for kind, t in history_tables().items()}


# -- queries ----------------------------------------------------------------------------------------------

def state_at(histories: History, cluster_id: str, offset: int, kinds: Iterable[str] | None = None) -> History:
    """The versions of every entity valid at ``offset`` (inclusive) of one cluster."""
    return states_at(histories, {cluster_id: offset}, kinds)


def states_at(histories: History, offsets: Mapping[str, int], kinds: Iterable[str] | None = None) -> History:
    """The versions of every entity valid at an offset of each cluster (``offsets``: by cluster id), read together:
    for up to ``SQL_TERMS`` clusters by literal bounds, which the Parquet reader prunes row groups by; for more, the
    clusters' rows joined with their offsets (a filter of hundreds of terms costs Spark more than it saves, and
    deepens its plans past the JVM's stack)."""
    wanted = set(kinds) if kinds is not None else set(histories)
    chosen = {k: df for k, df in histories.items() if k in wanted}
    if len(offsets) <= SQL_TERMS:
        holding = functools.reduce(operator.or_, [(F.col("cluster_id") == c) & valid_at(F.lit(o))
                                                  for c, o in offsets.items()], F.lit(False))
        return {k: df.filter(holding) for k, df in chosen.items()}
    return {k: df.filter(of_clusters(list(offsets))).join(
        F.broadcast(local_frame(df.sparkSession, list(offsets.items()), "_at_cluster string, _at_offset long")),
        (F.col("cluster_id") == F.col("_at_cluster")) & valid_at(F.col("_at_offset")), "left_semi")
        for k, df in chosen.items()}


def offset_at(records: DataFrame, cluster_id: str, timestamp_ms: int, known: int | None = None,
              span: int = 1024) -> int:
    """The last log offset of ``cluster_id`` whose record time is at or before ``timestamp_ms`` (-1 if none), read
    from the end of the log (``kraftlog.points.last_offsets_at``; ``known``: an offset the log holds)."""
    return offsets_at(records, {cluster_id: (timestamp_ms, known)}, span)[cluster_id]


def offsets_at(records: DataFrame, times: Mapping[str, tuple[int, int | None]], span: int = 1024) -> dict[str, int]:
    """``offset_at`` of several clusters (``times``: by cluster id, the time and a known offset or None), their
    questions asked together: a query a round for all of them."""
    return last_offsets_at(_LogOffsets(records), times, span)


class _LogOffsets:
    """``kraftlog.points.RecordOffsets`` of the clusters' log records in the ``records`` table, with Spark: a
    round's least and greatest offsets in one aggregate, its ``any`` in one job of a one-row read each. The round's
    bounds are SQL, parsed once (hundreds of clusters' terms as one balanced expression, not a column built term by
    term over py4j), and literals, which the Parquet reader prunes row groups by."""

    def __init__(self, records: DataFrame):
        self.log = records.filter(F.col("source") == "log")

    @staticmethod
    def _of(cluster_id: str, records: Records) -> str:
        terms = [f"cluster_id = {sql_literal(cluster_id)}",
                 *records.conditions(_SqlColumn, lambda ms: f"timestamp_millis({int(ms)})")]
        return "(" + " AND ".join(terms) + ")"

    def answer(self, asks: Mapping[str, Ask]) -> dict[str, int | None]:
        extremes = {c: a.what for c, a in asks.items() if a.what != ANY}
        found: dict[str, int | None] = {}
        if extremes:
            either = F.expr(" OR ".join(self._of(c, asks[c].records) for c in extremes))
            for r in (self.log.filter(either).groupBy("cluster_id")
                      .agg(F.min("log_offset").alias(LEAST), F.max("log_offset").alias(GREATEST)).collect()):
                found[r["cluster_id"]] = r[extremes[r["cluster_id"]]]
        if anys := [self.log.filter(F.expr(self._of(c, a.records))).select("cluster_id", "log_offset").limit(1)
                    for c, a in asks.items() if a.what == ANY]:
            found.update({r["cluster_id"]: r["log_offset"] for r in functools.reduce(DataFrame.union, anys).collect()})
        return found


class _SqlColumn:
    """A column in SQL text, whose comparisons with a value are SQL text (for ``Records.conditions``)."""

    def __init__(self, name: str):
        self.name = name

    def __ge__(self, value: object) -> str:
        return f"{self.name} >= {value}"

    def __gt__(self, value: object) -> str:
        return f"{self.name} > {value}"

    def __le__(self, value: object) -> str:
        return f"{self.name} <= {value}"

    def __lt__(self, value: object) -> str:
        return f"{self.name} < {value}"


def to_image(state: History, offset: int = -1, timestamp_ms: int = 0) -> Image:
    """Collect a (small) state to the driver as an ``Image`` (for JSON output and comparisons)."""
    image = Image(offset=offset, timestamp=timestamp_ms)
    for kind, df in state.items():
        k = BY_NAME[kind]
        for r in df.collect():
            d = r.asDict(recursive=True)
            image.entities[kind][tuple(d[c] for c in k.key_names)] = {c: d[c] for c in k.value_names}
    return image


def built_clusters(store: TableStore, wait_s: float = DEFAULT_TTL_S, poll_s: float = 1.0) -> dict[str, dict[str, Any]]:
    """The ``replay_ranges`` rows of the last history build, by cluster (with ``base_ms`` and ``last_ms``: its
    timestamps in epoch milliseconds). While a build commits the histories (its mark is there, and it holds the
    warehouse's lease) a reader waits for it to finish, up to ``wait_s``; a build that stopped while committing
    (its mark left, the lease no longer its own) is an error until the next build has replayed from the bases."""
    ranges = replay_ranges_table()

    def read() -> list[Any]:
        try:
            return store.read(ranges).select(*ranges.columns, F.unix_millis("base_timestamp").alias("base_ms"),
                                             F.unix_millis("last_timestamp").alias("last_ms")).collect()
        except Exception as e:  # no build yet
            raise NotBuilt(f"no entity histories under {store.warehouse}: run `kraftlog reconstruct` first") from e

    rows = store.marks.read_histories(read, store.lease is not None, wait_s, poll_s)
    return {r["cluster_id"]: r.asDict() for r in rows}


def stale_histories(store: TableStore, cluster_id: str, last_offset: int | None) -> str | None:
    """Why the histories of ``cluster_id`` (ending at ``last_offset``) no longer follow its landed log, or None:
    the log landed past them (a reconstruct has not run since, or failed), or nothing of the cluster is landed any
    more (the profile renamed its data directories, which landed again under the new name). The ingest ledger (a row
    per file) is asked first; only where a segment there reaches past them are the records asked (a copy's tail that
    lost to another's, which the ledger counts, never landed)."""
    segment = F.col("file_kind") == "segment"
    row = store.read(catalog()["files"]).filter(F.col("cluster_id") == cluster_id) \
        .agg(F.count(F.lit(1)).alias("files"), F.max(F.when(segment, F.col("last_offset"))).alias("end")).first()
    if row is None or not row["files"]:
        return (f"nothing of {cluster_id} is landed any more (its data directories land under another name): "
                "`kraftlog reconstruct` drops its histories")
    if row["end"] is None or (last_offset is not None and row["end"] <= last_offset):
        return None
    end = log_ends(LandedTables(store), [cluster_id]).get(cluster_id)
    if end is None or (last_offset is not None and end <= last_offset):
        return None
    return (f"the histories of {cluster_id} end at offset {last_offset}, the log landed since reaches offset {end}: "
            "`kraftlog reconstruct` builds the rest")


def image_at(store: TableStore, cluster_id: str, offset: int | None = None, timestamp_ms: int | None = None,
             kinds: Iterable[str] | None = None) -> Image:
    """The state of one cluster at an offset (inclusive) or a time, from the history tables."""
    ranges = built_clusters(store)
    if cluster_id not in ranges:
        raise ClusterNotFound(f"cluster {cluster_id!r} has no histories; built: {', '.join(sorted(ranges)) or 'none'}")
    r = ranges[cluster_id]
    records = store.read(catalog()["records"])
    if timestamp_ms is not None:
        offset = offset_at(records, cluster_id, timestamp_ms, r["last_offset"])
    log = records.filter((F.col("cluster_id") == cluster_id) & (F.col("source") == "log"))  # the cluster's log records
    last = r["last_offset"] if r["last_offset"] is not None else r["base_offset"]
    floor = r["base_offset"] if r["base_snapshot_id"] is not None else (r["first_offset"] or 0) - 1
    if offset is None:
        offset = last
    else:
        def times() -> tuple[int | None, int | None]:  # of the log records past the floor (asked only for an error)
            row = log.filter(F.col("log_offset") > floor).agg(
                F.min_by(F.unix_millis("timestamp"), "log_offset").alias("first")).first()
            return (row["first"] if row is not None else None), r["last_ms"]

        check_in_log(cluster_id, offset, floor, last, r["base_snapshot_id"], timestamp_ms, times)
    at = log.filter(F.col("log_offset") == offset).select(F.unix_millis("timestamp").alias("ms")).first()
    ts = at["ms"] if at is not None else (r["base_ms"] or 0)
    return to_image(state_at(read_histories(store), cluster_id, offset, kinds), offset, ts)


def versions_of(store: TableStore, cluster_id: str, kind: str, key: tuple[Any, ...]) -> list[Change]:
    """Every version of one entity, in offset order, as the replay's changes (a delete: ``value`` None)."""
    k = BY_NAME[kind]
    match = F.col("cluster_id") == cluster_id
    for name, value in zip(k.key_names, key, strict=True):
        match &= F.col(name) == value
    rows = (store.read(history_tables()[kind]).filter(match)
            .select(*k.value_names, "valid_from_offset", F.unix_millis("valid_from").alias("_from"),
                    "valid_to_offset", F.unix_millis("valid_to").alias("_to"), "ended_by")
            .orderBy("valid_from_offset").collect())
    out = []
    for r in rows:
        d = r.asDict(recursive=True)
        out.append(Change(kind, key, {c: d[c] for c in k.value_names}, d["valid_from_offset"], d["_from"] or 0))
        if d["ended_by"] == "delete":
            out.append(Change(kind, key, None, d["valid_to_offset"], d["_to"] or 0))
    return out


def diff(histories: History, cluster_id: str, a: int, b: int, kinds: Iterable[str] | None = None) -> DataFrame:
    """What changed between offsets ``a`` and ``b``: one row per changed field.

    Columns: kind, key (JSON), field, before, after (values as text, lists and structs as JSON;
    field ``<entity>`` with present/null where an entity exists on one side only).
    """
    rows = None
    for kind, df in differing(state_at(histories, cluster_id, a, kinds), state_at(histories, cluster_id, b, kinds)
                              ).items():
        k = BY_NAME[kind]
        nested = {f.name for f in df.schema["_l"].dataType.fields  # type: ignore[attr-defined]
                  if f.dataType.typeName() in ("array", "struct", "map")}

        def text(side: str, f: str, nested: set[str] = nested) -> Any:
            c = F.col(f"{side}.{f}")
            return F.to_json(c) if f in nested else c.cast("string")

        changes = [F.struct(F.lit("<entity>").alias("field"),
                            F.when(F.col("_l").isNotNull(), F.lit("present")).alias("before"),
                            F.when(F.col("_r").isNotNull(), F.lit("present")).alias("after"),
                            (F.col("_l").isNull() | F.col("_r").isNull()).alias("differs"))]
        changes += [F.struct(F.lit(f).alias("field"), text("_l", f).alias("before"), text("_r", f).alias("after"),
                             (F.col("_l").isNotNull() & F.col("_r").isNotNull()
                              & ~F.col(f"_l.{f}").eqNullSafe(F.col(f"_r.{f}"))).alias("differs"))
                    for f in k.value_names]
        part = (df.select(F.lit(kind).alias("kind"), F.to_json(F.struct(*k.key_names)).alias("key"),
                          F.explode(F.array(*changes)).alias("c"))
                .filter("c.differs").select("kind", "key", "c.field", "c.before", "c.after"))
        rows = part if rows is None else rows.unionByName(part)
    if rows is None:
        raise UsageError("no entity kinds selected")
    return rows


def differing(left: History, right: History, on: list[str] | None = None) -> dict[str, DataFrame]:
    """Per kind, the entities whose values differ between two states (full outer join on the key).

    Rows: the key, ``_l`` and ``_r`` (the value structs, null where the entity is absent).
    """
    out = {}
    for kind in left.keys() & right.keys():
        k = BY_NAME[kind]
        keys = [*(on or ["cluster_id"]), *k.key_names]
        a = left[kind].select(*keys, F.struct(*k.value_names).alias("_l"))
        b = right[kind].select(*keys, F.struct(*k.value_names).alias("_r"))
        out[kind] = a.join(b, keys, "full_outer").filter(~F.col("_l").eqNullSafe(F.col("_r")))
    return out


def differing_json(left: History, right: History) -> DataFrame | None:
    """``differing`` for every kind at once, as JSON: cluster_id, kind, key, left, right (one job to collect)."""
    out = None
    for kind, rows in differing(left, right).items():
        k = BY_NAME[kind]
        part = rows.select("cluster_id", F.lit(kind).alias("kind"), F.to_json(F.struct(*k.key_names)).alias("key"),
                           F.to_json("_l").alias("left"), F.to_json("_r").alias("right"))
        out = part if out is None else out.unionByName(part)
    return out


def differences(row: Any) -> list[Difference]:
    """Field-level differences of one ``differing_json`` row collected to the driver."""
    k = BY_NAME[row["kind"]]
    key_doc = json.loads(row["key"])
    key = tuple(key_doc.get(c) for c in k.key_names)
    a = json.loads(row["left"]) if row["left"] is not None else None
    b = json.loads(row["right"]) if row["right"] is not None else None
    if a is None or b is None:
        return [Difference(k.name, key, "<entity>", "<missing>" if a is None else "present",
                           "<missing>" if b is None else "present")]
    return [Difference(k.name, key, f, a.get(f), b.get(f)) for f in k.value_names if a.get(f) != b.get(f)]


__all__ = [
    "HistoryBuild",
    "build_histories",
    "built_clusters",
    "diff",
    "differences",
    "differing",
    "differing_json",
    "image_at",
    "offset_at",
    "offsets_at",
    "pseudo_cluster",
    "read_histories",
    "reconstruct",
    "state_at",
    "states_at",
]
