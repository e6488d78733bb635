"""Build the event tables from a warehouse's histories and landed tables (``kraftlog analyze``).

A run leaves, per cluster, an ``analyze_state`` row: the lineage, build and resume offset of the histories
the events were built from, where the earliest still-open window began, and how many ingest ledger rows
the cluster had. The next run compares each cluster with that row and the current ``replay_state``:

* **unchanged**: the same history build and no new ledger row: nothing to do;
* **go on**: the same lineage (the histories only went on since): every version before the last resume
  offset ``R`` was final then and still is, so every event before ``R`` still stands. Each table is kept
  up to date by its kind (``kraftlog.analytics.definitions``): ``POINT`` tables rebuild their rows at
  ``log_offset >= R`` from the versions holding at ``R`` or later; ``WINDOW`` tables rebuild the windows
  open or ending at ``R`` or later from the same versions, each window open at ``R`` going on from its row as
  built then (``Inputs.opened``: it stands for the window's versions before); ``CLUSTER`` tables rebuild the
  cluster's rows. Of the partitions, ``POINT`` and ``WINDOW`` tables read only those with a version begun or ended
  at ``R`` or later (``partition_topics``), each from ``R`` on: an hour's cost follows the partitions it touched,
  not how long ago a window opened, there or elsewhere. The tables of the landed log itself
  go on from what landed since (``kraftlog.spark.landed``): ``HOURS`` tables rebuild the hours from the
  earliest one a row landed since falls in, ``LOG`` tables the gaps after the last offset landed before the
  earliest record landed since, ``EPOCHS`` tables the epoch holding that offset and later ones
  (``epochs_after``); when the ledger does not tell what landed since (a run committed after a later one),
  they rebuild the cluster's rows. Where the records landed since all follow the log's end at the last analysis
  and the tables that sum the log (``HOURS``, ``EPOCHS``) end there too, those tables read only the new records
  and fold them into their rows built before (``folds``, ``Inputs.fold``): an hour's cost follows what landed.
  Where every cluster goes on, a table is rebuilt only in the clusters where something it reads changed since the
  cut (``changed_kinds``; ``EventPlan.left`` names the others), and not at all where nothing did;
* **rebuild**: anything else (another lineage, no state): every event row of the cluster is rebuilt.

Either way the tables end equal to a build from scratch (``tests/test_increments.py``).
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.storagelevel import StorageLevel

from kraftlog.analytics.definitions import (
    CLUSTER,
    EPOCHS,
    HOURS,
    LOG,
    POINT,
    WINDOW,
    analyze_state_table,
    event_tables,
    increment_of,
)
from kraftlog.analytics.events import (
    BIRTHS,
    BROKER_CONFIG,
    BUILDERS,
    CHANGED_BY,
    PARTITION_CONFIGS,
    SNAPSHOT_FILES,
    TOPIC_CONFIG,
    Inputs,
)
from kraftlog.config import Config
from kraftlog.spark.bases import TableSource
from kraftlog.spark.history import built_clusters, landed, read_histories
from kraftlog.spark.landed import (
    Landed,
    Mark,
    landed_after,
    landed_since,
    landing_runs,
    ledger_marks,
    log_ends,
    state_records,
)
from kraftlog.spark.predicates import (
    Scope,
    cluster_predicate,
    named_topics,
    of_clusters,
    only_clusters,
    only_topics,
)
from kraftlog.spark.session import JobThreads, interpreted, local_frame, local_rows
from kraftlog.spark.store import Landing, TableStore, landed_clusters, new_run_id, store_for, writing
from kraftlog.state.entities import history_tables, replay_ranges_table, replay_state_table
from kraftlog.state.replay import TopicsRead
from kraftlog.tables.definitions import TableDef, catalog

log = logging.getLogger("kraftlog")


@dataclass(frozen=True)
class Cut:
    """Where a cluster's events go on: ``resume`` (every event before it stands) and ``floor`` (where the
    earliest window open at ``resume`` began; None: no window was open). An open window goes on from its row as
    built then (``Inputs.opened``): the versions read are those holding at ``resume`` or later, whatever ``floor``."""

    resume: int
    floor: int | None = None


# the column a table's rows are cut by, per kind (``CLUSTER`` tables are not cut), where the table has no
# ``open_column`` (a ``WINDOW`` table's: its open windows are rebuilt too)
_ROW_AT = {POINT: "log_offset", LOG: "from_offset", EPOCHS: "from_offset", HOURS: "hour", CLUSTER: "cluster_id"}
_LANDED = (HOURS, LOG, EPOCHS)  # the kinds of tables of the landed log itself
# those that sum it (``Inputs.fold``), and the column their rows built before are read back by from ``since`` on
_FOLDED = {HOURS: "hour", EPOCHS: "to_offset"}


@dataclass
class EventPlan:
    """What one ``analyze`` rebuilds, per cluster (see the module docstring)."""

    everything: bool  # no usable state: every table replaced whole
    rebuilt: list[str] = field(default_factory=list)
    going_on: dict[str, Cut] = field(default_factory=dict)
    unchanged: list[str] = field(default_factory=list)
    gone: list[str] = field(default_factory=list)
    histories: dict[str, dict[str, Any]] = field(default_factory=dict)  # replay_state rows the plan compared
    marks: dict[str, Mark] = field(default_factory=dict)  # the ledger per cluster when planned
    # per cluster going on whose ledger rows up to a run are those its last analysis saw: that run's id
    held: dict[str, str] = field(default_factory=dict)
    # per cluster going on whose ledger tells what landed since its last analysis: where that begins
    landed: dict[str, Landed] = field(default_factory=dict)
    gaps_after: dict[str, int] = field(default_factory=dict)  # of those with new records: where LOG tables go on
    epochs_after: dict[str, int] = field(default_factory=dict)  # and where EPOCHS tables go on
    log_ends: dict[str, int | None] = field(default_factory=dict)  # analyze_state.log_end of the clusters going on
    # of those with new records, those whose new records all follow that end and whose tables that sum the log end
    # there too (``folds``): that end
    folded: dict[str, int] = field(default_factory=dict)
    # per cluster going on, the partitions the partition events read (``partition_topics``; None: all)
    topics: dict[str, TopicsRead | None] = field(default_factory=dict)
    births: set[str] = field(default_factory=set)  # of those, the clusters with a partition born since (likewise)
    interpreted: bool = False  # the run's expressions were interpreted (``kraftlog.spark.session.interpreted``)
    # per event table, the clusters going on whose rows it left as they were: nothing it reads changed there since
    # the cuts (``changed_kinds``; every one: the table was not written)
    left: dict[str, list[str]] = field(default_factory=dict)

    @property
    def clusters(self) -> list[str]:
        """The clusters whose events this run writes."""
        return [*self.rebuilt, *self.going_on]

    @property
    def only_going_on(self) -> bool:
        """Every cluster this run writes goes on (none rebuilt or gone)."""
        return not (self.everything or self.rebuilt or self.gone)

    def _whole(self, increment: str) -> list[str]:
        """The clusters whose rows of a table of kind ``increment`` are all rebuilt."""
        if increment == CLUSTER:
            return self.clusters
        if increment in _LANDED:  # and those whose ledger does not tell what landed since
            return [*self.rebuilt, *(c for c in self.going_on if c not in self.landed)]
        return self.rebuilt

    def since(self, increment: str) -> dict[str, Any]:
        """Per cluster going on, where a table of kind ``increment`` begins to read: for ``POINT`` and ``WINDOW``, the
        resume offset (the versions holding there or later; a window open there goes on from its row: ``opened``);
        for ``LOG``, the last landed offset before the first record landed since (or before the gap it falls in);
        for ``EPOCHS``, the last offset of the epoch before the one holding that offset; for ``HOURS``, the earliest
        hour a row landed since falls in."""
        if increment == CLUSTER:
            return {}
        if increment == LOG:
            return dict(self.gaps_after)
        if increment == EPOCHS:
            return dict(self.epochs_after)
        if increment == HOURS:
            return {c: got.hour for c, got in self.landed.items() if got.hour is not None}
        return {c: cut.resume for c, cut in self.going_on.items()}

    def rows(self, table: TableDef) -> Scope | None:
        """The rows of ``table`` this run replaces (None: all of them): from its cut on, by its kind of increment,
        and its open rows (``TableDef.open_column`` null)."""
        if self.everything:
            return None
        increment = increment_of(table)
        after = {c: cut.resume for c, cut in self.going_on.items()} if increment in (POINT, WINDOW) \
            else {c: at + 1 for c, at in self.since(increment).items()} if increment in (LOG, EPOCHS) \
            else self.since(increment)
        return Scope.of([*self._whole(increment), *self.gone], after, table.open_column or _ROW_AT[increment],
                        open=table.open_column is not None)

    def reads(self, increment: str) -> Scope | None:
        """What a table of kind ``increment`` reads of the clusters it rebuilds rows of (``Inputs.since``; None:
        every cluster of the plan whole)."""
        since, whole = self.since(increment), self._whole(increment)
        return None if not since and set(whole) == set(self.clusters) else Scope.of(whole, since)

    def folds(self, increment: str) -> tuple[Scope, Scope] | None:
        """For a table that sums the landed log (``_FOLDED``), in the clusters ``folded``: the records it reads (from
        the first offset after the end) and its rows built before that it reads back (from its ``since`` on); None
        where none is folded (``Inputs.folded``, ``Inputs.built``)."""
        since = self.since(increment)
        folded = {c: end for c, end in self.folded.items() if c in since}
        if increment not in _FOLDED or not folded:
            return None
        return (Scope.of([], {c: end + 1 for c, end in folded.items()}, "log_offset"),
                Scope.of([], {c: since[c] for c in folded}, _FOLDED[increment]))

    def versions(self, increment: str) -> Scope | None:
        """The history rows a table of kind ``increment`` is built from (None: all of them)."""
        if self.everything:
            return None
        if increment in (POINT, WINDOW):
            return Scope.of(self.rebuilt, self.since(increment), "valid_to_offset", open=True)
        return Scope.of(self.clusters, {})

    def line(self) -> str:
        if self.everything:
            return "every cluster analysed from scratch"
        line = (f"{len(self.going_on)} cluster(s) go on from their last analysis, {len(self.rebuilt)} analysed "
                f"anew, {len(self.unchanged)} unchanged, {len(self.gone)} gone")
        if self.interpreted:
            line += "; expressions interpreted"
        if not self.topics:
            return line
        named = [read for read in self.topics.values() if read is not None]
        every = len(self.topics) - len(named)
        return (line + f"; their partition events read {sum(len(r.partitions) for r in named)} partition(s) and "
                f"{sum(len(r.topics) for r in named)} topic(s) whole"
                + (f", every topic of {every} cluster(s)" if every else ""))


@dataclass(frozen=True)
class LastAnalyses:
    """What an analysis compares the histories with: their ``replay_state`` rows now (``current``) and the
    ``analyze_state`` rows the last analysis left (``previous``), by cluster; ``anew``: every cluster analysed anew."""

    current: dict[str, dict[str, Any]]
    previous: dict[str, dict[str, Any]]
    anew: bool

    def goes_on(self, cluster: str) -> bool:
        """Whether ``cluster``'s events can go on from its last analysis: the histories only went on since."""
        was, now = self.previous.get(cluster), self.current[cluster]
        return not (self.anew or was is None or was["lineage"] != now["lineage"] or was["resume_offset"] is None
                    or now["resume_offset"] is None)

    def state_records(self, table: TableSource, upto: int | None = None) -> int:
        """The records other than NoOps the analysis reads the changes of (``kraftlog.spark.landed.state_records``,
        ``upto`` that many at most): those landed since the last analysis in the clusters that go on from it, every
        one of the others; where every cluster is analysed anew: every record landed, NoOps too."""
        since = {c: was for c in self.current if self.goes_on(c)
                 and (was := self.previous[c]["landed_run"]) is not None}
        return state_records(table, since, [c for c in self.current if c not in since], upto,
                             self.anew or not self.previous)


def last_analyses(store: TableStore, clusters: list[str] | None, anew: bool) -> LastAnalyses:
    """The ``LastAnalyses`` of the clusters of ``clusters`` (else of every one)."""
    def by_cluster(df: DataFrame) -> dict[str, dict[str, Any]]:
        return {r["cluster_id"]: r.asDict() for r in only_clusters(df, clusters).collect()}

    with JobThreads(store.spark, 2) as pool:  # (small jobs: each waits more on scheduling than on cores)
        states = pool.submit(by_cluster, store.read(replay_state_table()))
        previous = {} if anew and clusters is None else by_cluster(store.read(analyze_state_table()))
        return LastAnalyses(states.result(), previous, anew)


def plan_events(store: TableStore, clusters: list[str] | None, anew: bool, last: LastAnalyses | None = None
                ) -> EventPlan:
    """Compare each cluster's histories and ledger with what its last analysis saw (the module docstring);
    ``anew``: every cluster (of ``clusters``) analysed anew; ``last``: as read by ``last_analyses``, else read here."""
    last = last or last_analyses(store, clusters, anew)
    current, previous = last.current, last.previous
    was_marked = {c: Mark(was["landed_run"], was["landed_files"], was["landed_digest"])
                  for c, was in previous.items() if was["landed_run"] is not None}
    ledger = ledger_marks(store.spark, only_clusters(store.read(catalog()["files"]), clusters), was_marked)
    marks, held = ledger.marks, ledger.held
    if anew and clusters is None:
        return EventPlan(True, rebuilt=sorted(current), histories=current, marks=marks)
    plan = EventPlan(False, gone=sorted(set(previous) - set(current)), histories=current, marks=marks)
    for c, now in sorted(current.items()):
        was = previous.get(c)
        if was is None or not last.goes_on(c):
            plan.rebuilt.append(c)
        elif was["history_build_id"] == now["build_id"] and was_marked.get(c) == marks.get(c):
            plan.unchanged.append(c)
        else:
            plan.going_on[c] = Cut(was["resume_offset"], was["window_floor"])
            plan.log_ends[c] = was["log_end"]
    with JobThreads(store.spark, 3) as pool:
        topics = pool.submit(partition_topics, store, {c: cut.resume for c, cut in plan.going_on.items()})
        plan.held = {c: held[c] for c in plan.going_on if c in held}
        found = landed_since(landed(store), plan.held)
        plan.landed = {c: found.get(c, Landed(None, None, None)) for c in plan.held}
        gaps = pool.submit(gaps_after, store, plan.landed, plan.log_ends)
        folded = pool.submit(folds, store, plan.landed, plan.log_ends)
        plan.epochs_after = epochs_after(store, plan.landed, plan.log_ends)
        (plan.topics, plan.births), plan.gaps_after, plan.folded = topics.result(), gaps.result(), folded.result()
    return plan


def partition_topics(store: TableStore, resume: dict[str, int]) -> tuple[dict[str, TopicsRead | None], set[str]]:
    """Per cluster going on (from its resume offset), the partitions its partition events read (None: every topic's,
    or more than ``TOPICS_NAMED``), and the clusters with a partition born since. A partition's events from the
    resume offset on (``POINT``) come from its versions begun or ended there or later, and its windows (``WINDOW``)
    rebuilt are those open then (going on from their rows: ``Inputs.opened``) or begun later: so the partitions
    with such a version, and those a config that applies to partitions (``PARTITION_CONFIGS``) changed since can
    apply to (``config_reads``); a window open on a partition nothing touched since is only carried forward. A
    topic a partition was born in since is read whole: ``topic_lifecycle`` counts the partitions it had before (and
    is rebuilt only where one was born, or a topic changed: ``CHANGED_BY``)."""
    if not resume:
        return {}, set()
    kinds = history_tables()
    since = Scope.of([], resume, "valid_from_offset", "valid_to_offset")
    none = _whole_topic()
    keys = ["cluster_id", "topic_id", "partition_id"]
    versions = store.read(kinds["partitions"], since).select(*keys, "valid_from_offset", "valid_to_offset",
                                                                     "ended_by")
    # born since: a version begun since that no update ended into
    into = versions.filter(F.col("ended_by") == "update").select(
        *keys, F.col("valid_to_offset").alias("valid_from_offset"))
    born = (Scope.of([], resume, "valid_from_offset").select(versions)
            .join(into, [*keys, "valid_from_offset"], "left_anti")
            .select("cluster_id", "topic_id", none, F.lit(True).alias("born")))  # (null: the topic whole)
    named = [versions.select(*keys), *config_reads(store, since)]
    found: dict[str, list[tuple[str, int | None]] | None] = {c: [] for c in resume}
    births = set()
    union = functools.reduce(DataFrame.unionByName, [born, *(df.withColumn("born", F.lit(False)) for df in named)])
    for c, was_born, topic, partition in local_rows(union.distinct(), "cluster_id", "born", "topic_id",
                                                    "partition_id"):
        if was_born:
            births.add(c)
        rows = found[c]
        if topic is None:
            found[c] = None  # every topic
        elif rows is not None:
            rows.append((topic, partition))
    return {c: None if rows is None else named_topics(TopicsRead.of(
        [t for t, p in rows if p is None], [(t, p) for t, p in rows if p is not None])) for c, rows in found.items()
            }, births


def _every_topic() -> Column:
    """A null ``topic_id`` in what ``partition_topics`` reads: every topic."""
    return F.lit(None).cast("string").alias("topic_id")


def _whole_topic() -> Column:
    """A null ``partition_id`` in what ``partition_topics`` reads: the topic whole."""
    return F.lit(None).cast("int").alias("partition_id")


def config_reads(store: TableStore, since: Scope) -> list[DataFrame]:
    """The partitions (``cluster_id``, ``topic_id``, ``partition_id``; a null partition: the topic whole, a null topic:
    every topic) whose events a config of ``PARTITION_CONFIGS`` changed in ``since`` (a version of it begun or ended
    there) can change from its offset on: a topic's config, the topics of that name; a broker's, the partitions it
    leads (the versions holding at the change that began before ``since`` are those still open: the others are read
    as begun or ended since); the cluster default, every topic. On a cluster whose topics' min.insync.replicas
    change hour after hour, an hour reads the partitions of those topics, not every partition."""
    kinds = history_tables()
    changed = (store.read(kinds["configs"], since).filter(F.col("name").isin(*PARTITION_CONFIGS))
               .select("cluster_id", "resource_type", "resource_name"))
    broker, default = F.col("resource_type") == BROKER_CONFIG, F.col("resource_name") == ""
    topics = changed.filter(F.col("resource_type") == TOPIC_CONFIG).select(
        "cluster_id", F.col("resource_name").alias("name")).distinct()
    leaders = changed.filter(broker & ~default).select(  # (a broker's name that is not a number names no leader)
        "cluster_id", F.col("resource_name").try_cast("int").alias("leader")).distinct()
    clusters = of_clusters(since.clusters)
    whole = _whole_topic()
    return [
        store.read(kinds["topics"]).filter(clusters).join(F.broadcast(topics), ["cluster_id", "name"])
        .select("cluster_id", "topic_id", whole),
        store.read(kinds["partitions"]).filter(clusters & F.col("valid_to_offset").isNull())
        .join(F.broadcast(leaders), ["cluster_id", "leader"]).select("cluster_id", "topic_id", "partition_id"),
        changed.filter(broker & default).select("cluster_id", _every_topic(), whole),
    ]


def gaps_after(store: TableStore, got: dict[str, Landed], ends: dict[str, int | None]) -> dict[str, int]:
    """Per cluster with records landed since its last analysis, the last offset landed before the first of them
    (where ``log_gaps`` goes on): the log's end then, or the offset before the gap the first one fell in, or just
    the offset before it (landed, or before every landed one: no gap begins after it either way)."""
    out = landed_after(got, ends)
    inside = [(c, at) for c, at in out.items() if at != ends.get(c)]
    if inside:
        points = F.broadcast(local_frame(store.spark, inside, "cluster_id string, at long"))
        gaps = store.read(event_tables()["log_gaps"]).join(points, "cluster_id").filter(
            (F.col("from_offset") <= F.col("at")) & (F.col("at") <= F.col("to_offset")))
        out.update({r["cluster_id"]: r["from_offset"] - 1 for r in gaps.collect()})
    return out


def epochs_after(store: TableStore, got: dict[str, Landed], ends: dict[str, int | None]) -> dict[str, int]:
    """Per cluster with records landed since its last analysis, where ``controller_leadership`` goes on: the epoch
    holding the last offset landed before the first of them may grow, so its row and the later ones are rebuilt,
    from the last record of the epoch before (its leader and time make the failover): that record's offset. -1
    (every record) where the new records bring an epoch older than that one, or the epochs landed do not rise with
    the offsets (a log Kafka did not write: rebuilt whole, as from scratch)."""
    at = landed_after(got, ends)
    if not at:
        return {}
    epochs: dict[str, list[Any]] = {c: [] for c in at}
    names = ("cluster_id", "epoch", "from_offset", "to_offset")
    for r in local_rows(store.read(event_tables()["controller_leadership"]).filter(of_clusters(list(at))), *names):
        epochs[r[0]].append(dict(zip(names, r, strict=True)))
    for mine in epochs.values():  # (ordered here: in Spark, a sort's sampling job more per hour)
        mine.sort(key=lambda r: r["from_offset"])
    out = {}
    for c, a in at.items():
        mine = epochs[c]
        rising = all(x["epoch"] < y["epoch"] and x["to_offset"] < y["from_offset"] for x, y in itertools.pairwise(mine))
        before = [r for r in mine if r["from_offset"] <= a]
        oldest = got[c].epoch
        if not rising or not before or (oldest is not None and oldest < before[-1]["epoch"]):
            out[c] = -1
        else:
            out[c] = before[-2]["to_offset"] if len(before) > 1 else before[-1]["from_offset"] - 1
    return out


def folds(store: TableStore, got: dict[str, Landed], ends: dict[str, int | None]) -> dict[str, int]:
    """Per cluster whose records landed since its last analysis all follow the log's end then (``ends``), and whose
    tables that sum the log (``_FOLDED``) end there too: that end. Their rows hold every record up to it, so the
    records after fold into them (``Inputs.fold``). A table that ends elsewhere (an analysis that wrote it, then
    stopped before its ``analyze_state`` row) is rebuilt from ``since`` on instead."""
    after = {c: at for c, at in landed_after(got, ends).items() if at == ends.get(c)}
    if not after:
        return {}
    tables = [t for t in event_tables().values() if increment_of(t) in _FOLDED]
    ends_found = functools.reduce(DataFrame.unionByName, [
        store.read(t).filter(of_clusters(list(after))).groupBy("cluster_id", F.lit(t.name).alias("table")).agg(
            F.max("to_offset").alias("end")) for t in tables])
    found: dict[str, set[tuple[str, int]]] = {c: set() for c in after}
    for r in ends_found.collect():
        found[r["cluster_id"]].add((r["table"], r["end"]))
    return {c: end for c, end in after.items() if found[c] == {(t.name, end) for t in tables}}


def inputs(store: TableStore, clusters: list[str] | None = None, versions: Scope | None = None,
           read: Inputs | None = None, since: Scope | None = None,
           topics: Mapping[str, TopicsRead | None] | None = None,
           landed_by: Callable[[Scope], str | None] | None = None) -> Inputs:
    """The histories, landed tables and replay ranges of a store: only ``clusters`` if given, and only the
    history rows in ``versions`` if given; ``since``: what the builders read of those clusters (``Inputs.since``);
    ``topics``: per cluster, the only partitions read (None: every topic's); ``landed_by``: ``Inputs.landed_by``.
    ``read``: the store's tables already read (``inputs()``)."""
    if read is None:
        read = Inputs(read_histories(store), functools.cache(landed(store)), store.read(replay_ranges_table()))
    source, histories, ranges = read.table, read.histories, read.ranges
    if clusters is None and versions is None:
        return Inputs(histories, source, ranges)

    def only(df: DataFrame) -> DataFrame:
        return only_clusters(df, clusters)

    def rows(kind: str) -> DataFrame:  # (the versions in scope: from the files that may hold some)
        df = only(histories[kind]) if versions is None else store.read(history_tables()[kind], versions)
        return only_topics(df, topics or {}) if kind == "partitions" else df

    return Inputs(_Made(rows, histories), lambda name: only(source(name)), only(ranges),
                  since, _Made(lambda k: only(histories[k]), histories), landed_by=landed_by,
                  scoped=lambda name, scope: store.read(catalog()[name], scope))


class _Once:
    """Values by name, each made once, by whichever thread asks for it first; a thread asking for a name being made
    waits for that name only (builders run in threads of their own, and each making is a round of JVM calls)."""

    def __init__(self) -> None:
        self._values: dict[str, Any] = {}
        self._locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()

    def get(self, name: str, make: Callable[[], Any]) -> Any:
        with self._guard:
            lock = self._locks.setdefault(name, threading.Lock())
        with lock:
            if name not in self._values:
                self._values[name] = make()
            return self._values[name]


class _Made(Mapping[str, DataFrame]):
    """Frames by name, each made at its first use: a builder reads a few of the histories, and each filter made is
    a round of JVM calls on the driver."""

    def __init__(self, make: Callable[[str], DataFrame], names: Iterable[str]):
        self._make, self._names, self._made = make, list(names), _Once()

    def __getitem__(self, name: str) -> DataFrame:
        if name not in self._names:
            raise KeyError(name)
        frame: DataFrame = self._made.get(name, lambda: self._make(name))
        return frame

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)


def event_frames(x: Inputs, names: list[str] | None = None) -> dict[str, DataFrame]:
    """The event tables as DataFrames (lazy), by name."""
    return {name: BUILDERS[name](x) for name in (names or list(event_tables()))}


class Kept:
    """The frames event builders share or read more than once (``Inputs.shared``), persisted at first use so that a
    run computes each once, and released (``release``) when the run has written its tables; those measured
    (``Inputs.measured``: the keys of the few partitions a builder orders) are computed as they are kept, so that
    Spark plans the joins with them knowing their size."""

    def __init__(self) -> None:
        self.frames: list[tuple[str, DataFrame]] = []  # (name, frame), in the order kept

    def keeper(self) -> Callable[[str, DataFrame, bool], DataFrame]:
        """What one set of ``Inputs`` keeps its shared frames with (each set reads its own rows)."""
        mine = _Once()

        def persisted(name: str, frame: DataFrame, now: bool) -> DataFrame:
            kept = frame.persist(StorageLevel.MEMORY_AND_DISK)
            self.frames.append((name, kept))  # (not frames[-1]: another name may be kept at the same time)
            if now:  # (computed: the plans that read it know its size)
                kept.count()
            return kept

        def keep(name: str, frame: DataFrame, now: bool) -> DataFrame:
            kept: DataFrame = mine.get(name, lambda: persisted(name, frame, now))
            return kept
        return keep

    def release(self) -> None:
        for _, frame in self.frames:
            frame.unpersist()
        self.frames.clear()


def planned_frames(store: TableStore, plan: EventPlan, kept: Kept | None = None
                   ) -> Iterator[tuple[TableDef, Callable[[], Landing | None]]]:
    """Per event table with rows to replace, what makes its ``Landing`` (``TableStore.replace`` calls it, several
    tables at a time: each table's frame is planned on the driver while others run): its frame (only those rows)
    and the SQL of the rows it replaces; ``kept``: where the frames several tables build alike are kept (``release``
    it once they are written). The frame is None where every history the table reads holds no row of the clusters
    analysed (``empty_kinds``): no rows, and no Spark job.

    When every cluster goes on, a table's rows of a cluster are left as they are if nothing it read of that cluster
    changed since its cut: no history it reads has a version begun or ended since, it reads no landed table, and it
    reads the log's end (where open windows end for now) only while no window of the cluster is open
    (``_Reader.stale``); or, for the tables that say what can give them rows (``CHANGED_BY``), none of that changed.
    Its rows are then rebuilt in the other clusters alone (``EventPlan.left``), and where there are none, the table
    is left as it is (no landing). Each cluster's events come from its own inputs alone."""
    if not (plan.everything or plan.clusters or plan.gone):
        return  # every cluster unchanged: no table has rows to replace, no input is read
    every = inputs(store)
    clusters = None if plan.everything else plan.clusters
    runs = None if plan.everything else landing_runs(every.table)
    later = partition_inputs(store, plan, every, runs)
    whole = inputs(store, clusters, plan.versions(CLUSTER), every)
    by_kind = {POINT: later, WINDOW: later, CLUSTER: whole,
               **{kind: inputs(store, clusters, plan.versions(kind), every, plan.reads(kind), landed_by=runs)
                  for kind in _LANDED}}
    for kind in _FOLDED:
        if (folds := plan.folds(kind)) is not None:
            by_kind[kind] = dataclasses.replace(by_kind[kind], folded=folds[0], built=_built(store, folds[1]))
    if kept is not None:
        # one keeper per set of inputs, however many kinds read it (POINT and WINDOW read one); where every cluster
        # goes on, the partition versions POINT and WINDOW tables read are kept as read: five partition tables read
        # them eight times (a scan of every current version of the clusters each, 275k rows at 5M records)
        partitions = frozenset({"partitions"} if plan.only_going_on else ())
        keeping = {id(x): dataclasses.replace(x, keep=kept.keeper(),
                                              kept_histories=partitions if x is later else frozenset())
                   for x in by_kind.values()}
        by_kind = {kind: keeping[id(x)] for kind, x in by_kind.items()}
    with JobThreads(store.spark, 2) as pool:  # (found while the first tables are planned)
        changed = pool.submit(changed_kinds, store, plan)
        empty = pool.submit(empty_kinds, store, clusters)

        def landing(name: str, increment: str, where: Scope | None) -> Landing | None:
            x = by_kind[increment]
            df: DataFrame | None = None
            reads = _READS.get(name)
            if reads is None:
                reader = _Reader(x)
                df = BUILDERS[name](reader)
                reads = _READS[name] = reader.reads()
            if plan.only_going_on:
                stale = [c for c, kinds in changed.result().items()
                         if (bool(CHANGED_BY[name] & kinds) if name in CHANGED_BY
                             else reads.stale(increment, plan.going_on[c].floor is not None, kinds))]
                if len(stale) < len(plan.going_on):  # its rows of the others stand: nothing they read changed
                    plan.left[name] = sorted(set(plan.going_on) - set(stale))
                    where = None if where is None else where.without(plan.left[name])
                    if not stale or (where is not None and where.empty):
                        return None
            sql = None if where is None else where.sql()
            if reads.only_of(empty.result()):
                return None, sql  # no rows: its rows in scope are removed, with no Spark job
            df = BUILDERS[name](x) if df is None else df
            return (df if where is None else where.select(df)), sql

        for name, t in event_tables().items():
            where = plan.rows(t)
            if where is None or not where.empty:
                yield t, functools.partial(landing, name, increment_of(t), where)


def partition_inputs(store: TableStore, plan: EventPlan, every: Inputs | None = None,
                     runs: Callable[[Scope], str | None] | None = None) -> Inputs:
    """What ``POINT`` and ``WINDOW`` tables read (alike): of the clusters going on, the versions from where each can
    still change an event (``EventPlan.versions``), of only the partitions ``partition_topics`` found, and the
    windows their last analysis left open (``Inputs.opened``); ``every``: the store's tables as read (``inputs()``);
    ``runs``: ``landing_runs``."""
    x = inputs(store, None if plan.everything else plan.clusters, plan.versions(POINT), every, plan.reads(POINT),
               plan.topics, runs)
    resume = {c: cut.resume for c, cut in plan.going_on.items()}
    return dataclasses.replace(x, opened=_opened(store, resume)) if resume else x


def _opened(store: TableStore, resume: dict[str, int]) -> Callable[[str], DataFrame]:
    """Per cluster going on from offset ``resume``, the rows of a ``WINDOW`` table (by name) this run replaces
    (``EventPlan.rows``) that began before it, as the store holds them now (``Inputs.opened``; its frames are
    computed before its commits): the windows open then, and any an analysis that stopped before its
    ``analyze_state`` row (its tables written, the state still the one before) ended since."""
    replaced = Scope.of([], resume, "to_offset", open=True)
    built, cuts = _built(store, replaced), F.broadcast(replaced.cuts(store.spark, "_resume"))
    return lambda name: (built(name).join(cuts, "cluster_id")
                         .filter(F.col("from_offset") < F.col("_resume")).drop("_resume"))


def empty_kinds(store: TableStore, clusters: list[str] | None) -> set[str]:
    """The entity kinds whose history holds no row of ``clusters`` (None: of any cluster), as the tables' logs
    tell (``TableStore.may_hold``): a cluster with no ACL, say, builds no ``acl_changes`` row."""
    return {kind for kind, t in history_tables().items() if not store.may_hold(t, clusters)}


def _built(store: TableStore, rows: Scope) -> Callable[[str], DataFrame]:
    """The ``rows`` of an event table, by name, as the store holds them now (``Inputs.built``)."""
    return lambda name: store.read(event_tables()[name], rows)


@dataclass(frozen=True)
class Reads:
    """What an event builder reads: which histories (``kinds``; ``whole``: one of them read whole), whether landed
    tables and the log's end. A fact of the builder's code, the same whatever the inputs (``_READS``)."""

    kinds: frozenset[str]
    landed: bool
    end: bool
    whole: bool

    def stale(self, increment: str, window_open: bool, changed: set[str]) -> bool:
        """Whether the table built from what was read has rows to replace when the histories of kinds ``changed``
        have a version begun or ended since the cuts: the landed tables and the log's end move with every new
        record (the end matters while a window is open; ``CLUSTER`` tables keep no record of theirs)."""
        return self.landed or (self.end and (window_open or increment == CLUSTER)) or bool(self.kinds & changed)

    def only_of(self, empty: set[str]) -> bool:
        """Whether what is read holds no row: histories only, each of a kind in ``empty``, none read whole. (A
        builder's rows come from the history rows it reads: the log's end and the replay ranges are only joined
        to them; checked for every builder by test_analytics.)"""
        return bool(self.kinds) and self.kinds <= empty and not (self.landed or self.whole)


# what each builder reads, learnt at its first build in this process: a later analysis decides whether a table
# is stale or has no rows before it builds the table's frame, and builds none where it is or has
_READS: dict[str, Reads] = {}


class _Reader(Inputs):
    """``Inputs`` that remembers what a builder read (``reads``)."""

    def __init__(self, inputs: Inputs):
        self.read: set[str] = set()
        self.landed = self.end = self.read_whole = False

        def table(name: str) -> DataFrame:
            self.landed = True
            return inputs.table(name)

        def scoped(name: str, scope: Scope) -> DataFrame:
            self.landed = True
            return inputs.landed_in(name, scope)

        super().__init__(**{**{f.name: getattr(inputs, f.name) for f in dataclasses.fields(Inputs)}, "table": table,
                            "scoped": scoped})

    def history(self, kind: str, whole: bool = False) -> DataFrame:
        self.read.add(kind)
        self.read_whole |= whole
        return super().history(kind, whole)

    @property
    def ends(self) -> DataFrame:
        self.end = True
        return super().ends

    def reads(self) -> Reads:
        return Reads(frozenset(self.read), self.landed, self.end, self.read_whole)


def changed_kinds(store: TableStore, plan: EventPlan) -> dict[str, set[str]]:
    """Per cluster going on, what changed since its resume offset: the entity kinds with a version begun or ended
    there or later (the partitions: where ``partition_topics`` found a partition to read, a version begun or ended
    since or a config that applies to partitions changed), ``BIRTHS`` where a partition was born since and
    ``SNAPSHOT_FILES`` where a snapshot file's ledger row landed since (or the ledger does not tell what landed since);
    none when a cluster is rebuilt or gone: every table is then rebuilt. A table is rebuilt only in the clusters where
    something it reads changed (``planned_frames``): in an hour of a fleet, most clusters change few kinds, if any."""
    if not plan.going_on or not plan.only_going_on:
        return {}
    since = Scope.of([], {c: cut.resume for c, cut in plan.going_on.items()}, "valid_from_offset", "valid_to_offset")
    snapshot_rows = store.read(catalog()["files"], Scope.of([], plan.held, "run_id", strict=True)).filter(
        F.col("file_kind") == "snapshot")
    found = functools.reduce(DataFrame.unionByName, [
        *[store.read(t, since).select("cluster_id", F.lit(kind).alias("kind")).distinct()
          for kind, t in history_tables().items() if kind != "partitions"],
        snapshot_rows.select("cluster_id", F.lit(SNAPSHOT_FILES).alias("kind")).distinct()])
    out: dict[str, set[str]] = {c: set() for c in plan.going_on}
    for r in found.collect():
        out[r["cluster_id"]].add(r["kind"])
    for c in plan.going_on:
        read = plan.topics.get(c)
        if read is None or not read.empty:
            out[c].add("partitions")
        if c in plan.births:
            out[c].add(BIRTHS)
        if c not in plan.held:  # (its ledger changed before its mark)
            out[c].add(SNAPSHOT_FILES)
    return out


@dataclass
class AnalyzeResult:
    build_id: str
    rows: dict[str, int]
    seconds: float
    plan: EventPlan = field(default_factory=lambda: EventPlan(True))

    def line(self) -> str:
        parts = ", ".join(f"{k} {v}" for k, v in self.rows.items() if v)
        left = self.plan.left  # (tables whose inputs changed in some clusters going on or none)
        kept = sum(1 for cs in left.values() if len(cs) == len(self.plan.going_on))
        return (f"analyze {self.build_id}: {self.plan.line()}; {sum(self.rows.values())} event rows written in "
                f"{self.seconds:.1f}s" + (f" ({parts})" if parts else "")
                + (f"; {kept} table(s) left as they were, {len(left) - kept} rebuilt only in the clusters where what "
                   "they read changed" if left else ""))


def analyze(spark: SparkSession, config: Config, store: TableStore | None = None,
            clusters: list[str] | None = None, full: bool = False) -> AnalyzeResult:
    """Bring the event tables up to date with the histories (run ``reconstruct`` first): clusters whose
    histories went on go on from their last analysis; ``full`` rebuilds every cluster's events."""
    store = store or store_for(spark, config)
    clusters = landed_clusters(store, clusters)
    build_id = new_run_id()
    with writing(store, config, build_id, "analyze"):
        built_clusters(store)  # a clear error when there are no histories yet
        return _analyze(spark, store, build_id, clusters, full, config.interpreted_below)


def _analyze(spark: SparkSession, store: TableStore, build_id: str, clusters: list[str] | None, full: bool,
             interpreted_below: int) -> AnalyzeResult:
    t0 = time.time()
    tables = event_tables()
    state_table = analyze_state_table()
    remade = store.ensure_all([*tables.values(), state_table])
    if remade and clusters is not None:
        log.warning("%s created anew: every cluster is analysed, not only %s", ", ".join(remade), ", ".join(clusters))
        clusters = None
    anew = full or bool(remade)
    last = last_analyses(store, clusters, anew)
    rows = {name: 0 for name in tables}
    kept = Kept()
    with interpreted(spark, functools.partial(last.state_records, landed(store)), interpreted_below) as small:
        plan = plan_events(store, clusters, anew, last)
        plan.interpreted = small
        log.info("analyze: %s", plan.line())
        try:
            rows.update(store.replace(planned_frames(store, plan, kept), build_id, small=small))
        finally:
            kept.release()
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
    ends = {c: max((o for o in (plan.log_ends.get(c), got.last) if o is not None), default=None)
            for c, got in plan.landed.items()}
    ends.update(log_ends(landed(store), [c for c in plan.clusters if c not in plan.landed]))
    no_mark = Mark(None, 0, 0)
    return [{"cluster_id": c, "lineage": h["lineage"], "history_build_id": h["build_id"],
             "resume_offset": h["resume_offset"], "window_floor": floors.get(c), "landed_run": m.run,
             "landed_files": m.files, "landed_digest": m.digest, "log_end": ends.get(c), "build_id": build_id}
            for c in plan.clusters for h, m in [(plan.histories[c], plan.marks.get(c, no_mark))]]


def window_floors(store: TableStore, clusters: list[str]) -> dict[str, int]:
    """Per cluster, where the earliest window still open in any ``WINDOW`` table began: from a table's log where it
    tells (``TableStore.open_least``), else from its rows (a Spark job for those tables)."""
    floors: dict[str, int] = {}
    read = []
    for t in (t for t in event_tables().values() if increment_of(t) == WINDOW):
        found = store.open_least(t, "from_offset", clusters)
        if found is None:
            read.append(t)
        for c, at in (found or {}).items():
            floors[c] = min(floors.get(c, at), at)
    if read:
        opened: Column = F.col("to_offset").isNull() & of_clusters(clusters)
        union = functools.reduce(DataFrame.unionByName, [
            store.read(t).filter(opened).select("cluster_id", "from_offset") for t in read])
        for r in union.groupBy("cluster_id").agg(F.min("from_offset").alias("f")).collect():
            floors[r["cluster_id"]] = min(floors.get(r["cluster_id"], r["f"]), r["f"])
    return floors


def read_events(store: TableStore) -> dict[str, DataFrame]:
    """The event tables of a store."""
    return {name: store.read(t) for name, t in event_tables().items()}
