"""Build the event tables from a warehouse's histories and landed tables (``kraftlog analyze``).

A run leaves, per cluster, an ``analyze_state`` row: the lineage, build and resume offset of the histories
the events were built from, where the earliest still-open window began, and how many ingest ledger rows
the cluster had. The next run compares each cluster with that row and the current ``replay_state``:

* **unchanged**: the same history build and no new ledger row: nothing to do;
* **go on**: the same lineage (the histories only went on since): every version before the last resume
  offset ``R`` was final then and still is, so every event before ``R`` still stands. Each table is kept
  up to date by its kind (``kraftlog.analytics.definitions``): ``POINT`` tables rebuild their rows at
  ``log_offset >= R`` from the versions holding at ``R`` or later; ``WINDOW`` tables rebuild the windows
  open or ending at ``R`` or later, from the versions holding at the earliest such window's start;
  ``CLUSTER`` tables rebuild the cluster's rows;
* **rebuild**: anything else (another lineage, no state): every event row of the cluster is rebuilt.

Either way the tables end equal to a build from scratch (``tests/test_increments.py``).
"""

from __future__ import annotations

import functools
import logging
import time
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from kraftlog.analytics.definitions import CLUSTER, POINT, WINDOW, analyze_state_table, event_tables, increment_of
from kraftlog.analytics.events import BUILDERS, Inputs
from kraftlog.config import Config
from kraftlog.spark.history import built_clusters, landed, read_histories
from kraftlog.spark.predicates import Scope, cluster_predicate, of_clusters
from kraftlog.spark.store import TableStore, new_run_id, store_for, writing
from kraftlog.state.entities import replay_ranges_table, replay_state_table
from kraftlog.tables.definitions import TableDef, catalog

log = logging.getLogger("kraftlog")


@dataclass(frozen=True)
class Cut:
    """Where a cluster's events go on: ``resume`` (every event before it stands) and ``floor`` (where the
    earliest window open at ``resume`` began; None: no window was open)."""

    resume: int
    floor: int | None = None

    @property
    def since(self) -> int:
        """The offset from which the versions that can change an event or an open window still hold."""
        return self.resume if self.floor is None else min(self.resume, self.floor)


@dataclass
class EventPlan:
    """What one ``analyze`` rebuilds, per cluster (see the module docstring)."""

    everything: bool  # no usable state: every table replaced whole
    rebuilt: list[str] = field(default_factory=list)
    going_on: dict[str, Cut] = field(default_factory=dict)
    unchanged: list[str] = field(default_factory=list)
    gone: list[str] = field(default_factory=list)
    histories: dict[str, dict[str, Any]] = field(default_factory=dict)  # replay_state rows the plan compared
    files: dict[str, int] = field(default_factory=dict)  # ledger rows per cluster when planned

    @property
    def clusters(self) -> list[str]:
        """The clusters whose events this run writes."""
        return [*self.rebuilt, *self.going_on]

    def rows(self, increment: str) -> Scope | None:
        """The rows of a table of kind ``increment`` this run replaces (None: all of them)."""
        if self.everything:
            return None
        whole = [*self.rebuilt, *self.gone]
        if increment == CLUSTER:
            return Scope.of([*whole, *self.going_on], {})
        resume = {c: cut.resume for c, cut in self.going_on.items()}
        return (Scope.of(whole, resume, "log_offset") if increment == POINT
                else Scope.of(whole, resume, "to_offset", open=True))

    def since(self, increment: str) -> dict[str, int]:
        """Per cluster going on, the offset from which a table of kind ``increment`` reads its versions: where the
        earliest window open at the resume offset began (``POINT`` tables need less, and read the same rows)."""
        if increment == CLUSTER:
            return {}
        return {c: cut.since for c, cut in self.going_on.items()}

    def versions(self, increment: str) -> Scope | None:
        """The history rows a table of kind ``increment`` is built from (None: all of them)."""
        if self.everything:
            return None
        return Scope.of(self.rebuilt if increment != CLUSTER else self.clusters, self.since(increment),
                        "valid_to_offset", open=True)

    def line(self) -> str:
        if self.everything:
            return "every cluster analysed from scratch"
        return (f"{len(self.going_on)} cluster(s) go on from their last analysis, {len(self.rebuilt)} analysed "
                f"anew, {len(self.unchanged)} unchanged, {len(self.gone)} gone")


def plan_events(store: TableStore, clusters: list[str] | None, anew: bool) -> EventPlan:
    """Compare each cluster's histories and ledger with what its last analysis saw (the module docstring);
    ``anew``: every cluster (of ``clusters``) analysed anew."""
    def by_cluster(df: DataFrame) -> dict[str, dict[str, Any]]:
        if clusters is not None:
            df = df.filter(of_clusters(clusters))
        return {r["cluster_id"]: r.asDict() for r in df.collect()}

    current = by_cluster(store.read(replay_state_table()))
    files = files_seen(store, clusters)
    if anew and clusters is None:
        return EventPlan(True, rebuilt=sorted(current), histories=current, files=files)
    previous = by_cluster(store.read(analyze_state_table()))
    plan = EventPlan(False, gone=sorted(set(previous) - set(current)), histories=current, files=files)
    for c, now in sorted(current.items()):
        was = previous.get(c)
        if anew or was is None or was["lineage"] != now["lineage"] or was["resume_offset"] is None \
                or now["resume_offset"] is None:
            plan.rebuilt.append(c)
        elif was["history_build_id"] == now["build_id"] and was["files_seen"] == files.get(c, 0):
            plan.unchanged.append(c)
        else:
            plan.going_on[c] = Cut(was["resume_offset"], was["window_floor"])
    return plan


def files_seen(store: TableStore, clusters: list[str] | None = None) -> dict[str, int]:
    """Ingest ledger rows per cluster (the ledger only grows: a new row means the landed tables changed)."""
    files = store.read(catalog()["files"])
    if clusters is not None:
        files = files.filter(of_clusters(clusters))
    return {r["cluster_id"]: r["n"] for r in files.groupBy("cluster_id").agg(F.count("*").alias("n")).collect()}


def inputs(store: TableStore, clusters: list[str] | None = None, versions: Scope | None = None,
           read: Inputs | None = None, since: dict[str, int] | None = None) -> Inputs:
    """The histories, landed tables and replay ranges of a store: only ``clusters`` if given, and only the
    history rows in ``versions`` if given, which hold from ``since`` on in those clusters.
    ``read``: the store's tables already read (``inputs()``)."""
    if read is None:
        read = Inputs(read_histories(store), functools.cache(landed(store)), store.read(replay_ranges_table()))
    source, histories, ranges = read.table, read.histories, read.ranges
    if clusters is None and versions is None:
        return Inputs(histories, source, ranges)

    def only(df: DataFrame) -> DataFrame:
        return df if clusters is None else df.filter(of_clusters(clusters))

    def rows(df: DataFrame) -> DataFrame:
        return only(df) if versions is None else versions.select(df)

    cut = store.spark.createDataFrame(list(since.items()), "cluster_id string, since long") if since else None
    return Inputs({k: rows(v) for k, v in histories.items()}, lambda name: only(source(name)), only(ranges), cut,
                  {k: only(v) for k, v in histories.items()})


def event_frames(x: Inputs, names: list[str] | None = None) -> dict[str, DataFrame]:
    """The event tables as DataFrames (lazy), by name."""
    return {name: BUILDERS[name](x) for name in (names or list(event_tables()))}


def planned_frames(store: TableStore, plan: EventPlan) -> list[tuple[TableDef, DataFrame, str | None]]:
    """Per event table with rows to replace: its frame (only those rows) and the SQL of the rows it replaces.

    When every cluster goes on, a table is skipped if nothing it read changed since the cuts: no history it
    reads has a version begun or ended since, it reads no landed table, and it reads the log's end (where
    open windows end for now) only while no window is open (``_Reader.stale``)."""
    out = []
    every = inputs(store)
    clusters = None if plan.everything else plan.clusters
    later = inputs(store, clusters, plan.versions(POINT), every, plan.since(POINT))  # POINT and WINDOW read alike
    by_kind = {POINT: later, WINDOW: later, CLUSTER: inputs(store, clusters, plan.versions(CLUSTER), every)}
    only_going_on = not (plan.everything or plan.rebuilt or plan.gone)
    changed = changed_kinds(every, plan) if only_going_on else set()
    any_open = any(cut.floor is not None for cut in plan.going_on.values())
    for name, t in event_tables().items():
        increment = increment_of(t)
        where = plan.rows(increment)
        if where is not None and where.empty:
            continue
        reader = _Reader(by_kind[increment])
        df = BUILDERS[name](reader)
        if only_going_on and not reader.stale(increment, any_open, changed):
            continue  # nothing it reads changed since the cuts
        out.append((t, df if where is None else where.select(df), None if where is None else where.sql()))
    return out


class _Reader(Inputs):
    """``Inputs`` that remembers what a builder read: which histories, whether landed tables, the log's end."""

    def __init__(self, inputs: Inputs):
        self.read: set[str] = set()
        self.landed = self.end = False

        def table(name: str) -> DataFrame:
            self.landed = True
            return inputs.table(name)

        super().__init__(inputs.histories, table, inputs.ranges, inputs.since, inputs.whole)

    def history(self, kind: str, whole: bool = False) -> DataFrame:
        self.read.add(kind)
        return super().history(kind, whole)

    @property
    def ends(self) -> DataFrame:
        self.end = True
        return super().ends

    def stale(self, increment: str, window_open: bool, changed: set[str]) -> bool:
        """Whether the table built from what was read has rows to replace when the histories of kinds ``changed``
        have a version begun or ended since the cuts: the landed tables and the log's end move with every new
        record (the end matters while a window is open; ``CLUSTER`` tables keep no record of theirs)."""
        return self.landed or (self.end and (window_open or increment == CLUSTER)) or bool(self.read & changed)


def changed_kinds(x: Inputs, plan: EventPlan) -> set[str]:
    """The entity kinds with a version begun or ended at or after a going-on cluster's resume offset."""
    if not plan.going_on:
        return set()
    since = Scope.of([], {c: cut.resume for c, cut in plan.going_on.items()}, "valid_from_offset", "valid_to_offset")
    found = functools.reduce(DataFrame.unionByName, [since.select(df).select(F.lit(kind).alias("kind")).limit(1)
                                                     for kind, df in x.histories.items()])
    return {r["kind"] for r in found.collect()}


@dataclass
class AnalyzeResult:
    build_id: str
    rows: dict[str, int]
    seconds: float
    plan: EventPlan = field(default_factory=lambda: EventPlan(True))

    def line(self) -> str:
        parts = ", ".join(f"{k} {v}" for k, v in self.rows.items() if v)
        return (f"analyze {self.build_id}: {self.plan.line()}; {sum(self.rows.values())} event rows written in "
                f"{self.seconds:.1f}s" + (f" ({parts})" if parts else ""))


def analyze(spark: SparkSession, config: Config, store: TableStore | None = None,
            clusters: list[str] | None = None, full: bool = False) -> AnalyzeResult:
    """Bring the event tables up to date with the histories (run ``reconstruct`` first): clusters whose
    histories went on go on from their last analysis; ``full`` rebuilds every cluster's events."""
    store = store or store_for(spark, config)
    built_clusters(store)  # a clear error when there are no histories yet
    build_id = new_run_id()
    with writing(store, config, build_id, "analyze"):
        return _analyze(spark, store, build_id, clusters, full)


def _analyze(spark: SparkSession, store: TableStore, build_id: str, clusters: list[str] | None, full: bool
             ) -> AnalyzeResult:
    t0 = time.time()
    tables = event_tables()
    state_table = analyze_state_table()
    remade = [t.name for t in [*tables.values(), state_table] if store.ensure(t)]
    if remade and clusters is not None:
        log.warning("%s created anew: every cluster is analysed, not only %s", ", ".join(remade), ", ".join(clusters))
        clusters = None
    plan = plan_events(store, clusters, anew=full or bool(remade))
    log.info("analyze: %s", plan.line())
    rows = {name: 0 for name in tables}
    rows.update(store.replace(planned_frames(store, plan), build_id))
    if plan.clusters or plan.gone:
        state = pa.Table.from_pylist(state_rows(store, plan, build_id), schema=state_table.schema)
        where = None if plan.everything else cluster_predicate([*plan.clusters, *plan.gone])
        store.overwrite(state_table, store.stage_small(state_table, state, build_id), build_id, where)
    for name, n in rows.items():
        log.info("%s: %d rows", name, n)
    return AnalyzeResult(build_id, rows, time.time() - t0, plan)


def state_rows(store: TableStore, plan: EventPlan, build_id: str) -> list[dict[str, Any]]:
    """The ``analyze_state`` rows of the clusters this run analysed (from what the plan compared: the run holds
    the warehouse's lease, so the histories and the ledger stay as they were)."""
    floors = window_floors(store, plan.clusters)
    return [{"cluster_id": c, "lineage": h["lineage"], "history_build_id": h["build_id"],
             "resume_offset": h["resume_offset"], "window_floor": floors.get(c), "files_seen": plan.files.get(c, 0),
             "build_id": build_id} for c in plan.clusters for h in [plan.histories[c]]]


def window_floors(store: TableStore, clusters: list[str]) -> dict[str, int]:
    """Per cluster, where the earliest window still open in any ``WINDOW`` table began."""
    opened: Column = F.col("to_offset").isNull() & of_clusters(clusters)
    union = functools.reduce(DataFrame.unionByName, [store.read(t).filter(opened).select("cluster_id", "from_offset")
                                                     for t in event_tables().values() if increment_of(t) == WINDOW])
    return {r["cluster_id"]: r["f"] for r in union.groupBy("cluster_id").agg(F.min("from_offset").alias("f")).collect()}


def read_events(store: TableStore) -> dict[str, DataFrame]:
    """The event tables of a store."""
    return {name: store.read(t) for name, t in event_tables().items()}
