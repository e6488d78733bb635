"""Event tables from the entity histories and the landed tables: pure ``DataFrame -> DataFrame`` functions.

Every function reads an ``Inputs`` (the history tables by entity kind, the landed tables by name, and
``replay_ranges``) and returns exactly the columns of its table in ``kraftlog.analytics.definitions``.
Consecutive versions of one entity are paired with ``with_previous`` (the previous version counts only
when this one replaced it, not after a deletion), or, for partitions, by what each version carries of the
one it replaced (``replaced``); windows (under-replicated partitions, fenced periods, reassignments) are
islands of consecutive versions (``islands``). Incrementally, a partition's window still open at the last analysis
goes on from its row as then built (``Inputs.opened``, ``open_windows``), not from the versions since it began.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema

from kraftlog.analytics.definitions import event_tables
from kraftlog.spark.predicates import Scope
from kraftlog.state.entities import BY_NAME, previous_column
from kraftlog.wire.redact import REDACTED

PARTITION = ["cluster_id", "topic_id", "partition_id"]
RUNNING = (Window.unboundedPreceding, Window.currentRow)


@dataclass
class Inputs:
    """What the event builders read."""

    histories: Mapping[str, DataFrame]  # entity kind -> <kind>_history rows
    table: Callable[[str], DataFrame]  # landed tables (records, batches, files, divergence, typed tables) by name
    ranges: DataFrame  # replay_ranges
    # an incremental analysis (``kraftlog.spark.analyze``): the clusters read whole and, per cluster going on, where
    # what it reads begins (its rows before are not rebuilt): an offset, from which its histories hold only the
    # versions holding then or later, or for tables kept by the hour (``HOURS``) the hour its rows begin
    since: Scope | None = None
    whole: Mapping[str, DataFrame] | None = None  # the histories of the same clusters, not cut at ``since``
    # what an analysis does with a frame several builders build alike (``shared``): keeps it, computed once
    keep: Callable[[str, DataFrame, bool], DataFrame] | None = None  # (name, frame, computed at once)
    # the tables that sum the landed log (``HOURS``, ``EPOCHS``) in an incremental analysis: per cluster whose records
    # landed since all follow the log's end its tables were built to, the first offset after that end (``folded``),
    # and a table's rows from ``since`` on as that build left them (``built``): a builder folds the records from that
    # offset on into them (``fold``), reading no older record
    folded: Scope | None = None
    built: Callable[[str], DataFrame] | None = None
    # the histories to keep (``shared``) as read: in an incremental analysis, those several builders read over and
    # over, whose rows (the versions holding from ``since`` on) follow the clusters' images and what changed since
    kept_histories: frozenset[str] = frozenset()
    # in an incremental analysis, for the log records of a scope cut by log offset: the least run id that landed one
    # (None: not known). ``log_records`` reads only rows of that run or later, so Parquet skips the row groups older
    # runs wrote (each holds one run's rows), not only the rows before the cuts, which it reads to drop
    landed_by: Callable[[Scope], str | None] | None = None
    # in an incremental analysis, the rows of a ``WINDOW`` table (by name) of the clusters going on that began before
    # the resume offset and were open there, as the last analysis left them: each stands for the versions of its
    # window begun before that offset, which are not read (``open_windows``)
    opened: Callable[[str], DataFrame] | None = None
    # a landed table's rows in a scope (by name), read from only the files whose statistics let them hold some
    # (``TableStore.read``); None: ``table``'s, then the scope's ``select``
    scoped: Callable[[str, Scope], DataFrame] | None = None

    def shared(self, name: str, frame: DataFrame) -> DataFrame:
        """``frame``, which several builders build alike from these inputs, or one reads more than once: where the
        analysis keeps such frames, the one kept under ``name`` (computed once for all of them). A frame kept by a
        full analysis is a small part of what it reads (never a whole partition history)."""
        return frame if self.keep is None else self.keep(name, frame, False)

    def measured(self, name: str, frame: DataFrame) -> DataFrame:
        """``frame``, of which few rows are expected (the keys of the entities a builder reads the versions of):
        where the analysis keeps frames, kept under ``name`` and computed at once, so that Spark plans the joins with
        it knowing its size (a broadcast where it is under ``spark.sql.autoBroadcastJoinThreshold``, as its own
        estimate of a filtered scan, the whole scan's size, never is; a shuffle of both sides where it is not)."""
        return frame if self.keep is None else self.keep(name, frame, True)

    def history(self, kind: str, whole: bool = False) -> DataFrame:
        """The history of ``kind``, kept as first read where ``kind`` is in ``kept_histories``; ``whole``: every
        version, also in an incremental analysis (for small histories that events from ``since`` on look back into,
        as a topic's name used before)."""
        if whole and self.whole is not None:
            return self.whole[kind]
        rows = self.histories[kind]
        return self.shared(f"{kind} history", rows) if kind in self.kept_histories else rows

    def from_since(self, df: DataFrame, offset: str) -> DataFrame:
        """The rows of ``df`` whose ``offset`` column is at or after ``since`` in the clusters going on (every row of
        the clusters read whole, and of every cluster outside an incremental analysis)."""
        return df if self.since is None else self.since.on(offset).select(df)

    def cuts(self, df: DataFrame) -> DataFrame:
        """Per cluster going on, its ``since`` (``cluster_id``, ``since``; nothing outside an incremental analysis)."""
        assert self.since is not None
        return F.broadcast(self.since.cuts(df.sparkSession))

    def log_records(self, by: str = "log_offset", after: bool = False) -> DataFrame:
        """The landed log records (``records`` rows of the log), in an incremental analysis from ``since`` on (in
        column ``by``; ``after``: only after it), and in the clusters ``folded`` only those after the end their tables
        were built to."""
        if self.since is None:
            return self.table("records").filter(F.col("source") == "log")
        since = replace(self.since, strict=True) if after else self.since
        if self.folded is None:
            return self._landed(since, by)
        return self._landed(since.without(self.folded.clusters), by).unionByName(
            self._landed(self.folded, "log_offset"))

    def landed_in(self, name: str, scope: Scope) -> DataFrame:
        """The rows of the landed table ``name`` in ``scope`` (``scoped``)."""
        return self.scoped(name, scope) if self.scoped is not None else scope.select(self.table(name))

    def landed_from(self, name: str, column: str) -> DataFrame:
        """The rows of the landed table ``name`` whose ``column`` is at or after ``since`` (``from_since``), read
        from only the files that may hold some (``landed_in``)."""
        return self.table(name) if self.since is None else self.landed_in(name, self.since.on(column))

    def _landed(self, scope: Scope, by: str) -> DataFrame:
        """The log records of ``scope`` (cut in column ``by``); of its clusters cut (not read whole), only those of the
        runs that landed them (``landed_by``): a cluster read whole in the hour (one rebuilt of a fleet) leaves the
        others' reads bounded by run."""
        def records(where: Scope) -> DataFrame:
            return self.landed_in("records", where).filter(F.col("source") == "log")

        cut = scope.without(scope.whole)
        run = self.landed_by(cut) if self.landed_by is not None and by == "log_offset" and not cut.empty else None
        if run is None:
            return records(scope.on(by))
        rows = records(cut.on(by)).filter(F.col("run_id") >= run)
        return records(Scope.of(scope.whole, {})).unionByName(rows) if scope.whole else rows

    def fold(self, name: str, rows: DataFrame, keys: list[str], sums: Mapping[str, Column],
             merge: Callable[[DataFrame], DataFrame] | None = None) -> DataFrame:
        """``rows``, sums per ``keys`` of the records read (``log_records``), with the rows of table ``name`` as built
        before (``built``) of the clusters ``folded`` merged in: grouped by ``keys`` again, each column of ``sums``
        aggregated by its expression (``merge``: first applied to the rows built before, to give them the columns
        of ``rows``). Where nothing is folded: ``rows``."""
        if self.built is None:
            return rows
        before = self.built(name)
        before = (merge(before) if merge else before).select(*rows.columns)
        return rows.unionByName(before).groupBy(*keys).agg(*(e.alias(c) for c, e in sums.items()))

    @property
    def bases(self) -> DataFrame:
        """Per cluster: the offset the histories start at (a base snapshot's; ``_base_offset``)."""
        return F.broadcast(self.ranges.select("cluster_id", F.col("base_offset").alias("_base_offset")))

    @property
    def ends(self) -> DataFrame:
        """Per cluster: the time of the end of the log (``_end_time``), where open windows end for now."""
        return F.broadcast(self.ranges.select(
            "cluster_id", F.coalesce("last_timestamp", "base_timestamp").alias("_end_time")))


NO_OP = "NO_OP_RECORD"  # a NoOpRecord's record_type: it changes nothing (a controller writes one every 500 ms)


# -- shared building blocks ---------------------------------------------------------------------------------

def valid_at(at: Column, valid_from: str = "valid_from_offset", valid_to: str = "valid_to_offset") -> Column:
    """A version holds at offset ``at``: ``valid_from <= at < valid_to`` (a null ``valid_to``: it still holds)."""
    return (F.col(valid_from) <= at) & (F.col(valid_to).isNull() | (F.col(valid_to) > at))


def seconds_between(start: Column, end: Column) -> Column:
    """Seconds from ``start`` to ``end`` (timestamps), as a double."""
    return (F.unix_micros(end) - F.unix_micros(start)) / 1e6


def with_previous(df: DataFrame, keys: list[str]) -> DataFrame:
    """``df`` (history rows) with ``_prev``: the version this one replaced (null after a delete or at the start),
    all its columns; a window over the versions of each entity, for the small histories (the partition history
    carries what its events read of the version before: ``replaced``)."""
    w = Window.partitionBy(*keys).orderBy("valid_from_offset")
    kept = [c for c in df.columns if c not in keys]
    prev = F.lag(F.struct(*kept)).over(w)
    return (df.withColumn("_p", prev)
            .withColumn("_prev", F.when((F.col("_p.ended_by") == "update")
                                        & (F.col("_p.valid_to_offset") == F.col("valid_from_offset")), F.col("_p")))
            .drop("_p"))


def replaced(df: DataFrame, kind: str) -> DataFrame:
    """``df`` (rows of the history of ``kind``) with ``_prev``: the values its kind keeps of the version each version
    replaced (``EntityKind.previous``), as the replay wrote them; null where it replaced none (``with_previous``
    without the window: ``kraftlog.state.history`` made them so, and no such value is null in a version)."""
    names = BY_NAME[kind].previous
    cols = [F.col(previous_column(n)) for n in names]
    none = functools.reduce(lambda a, b: a & b, [c.isNull() for c in cols])
    return df.withColumn("_prev", F.when(~none, F.struct(*(c.alias(n) for c, n in zip(cols, names, strict=True)))))


def partition_versions(inputs: Inputs) -> DataFrame:
    """The partition history with ``_prev`` (``replaced``: the leader, ISR, ELR and leader recovery state of the
    version before); without ``directories``, which no event reads."""
    return replaced(inputs.history("partitions").drop("directories"), "partitions")


def of_partitions_in(inputs: Inputs, name: str, df: DataFrame, rows: DataFrame) -> DataFrame:
    """The rows of ``df`` (partition versions) of the partitions ``rows`` holds a row of: where a builder's rows come
    only from partitions with a version of some kind, it orders the versions of those alone (on a big cluster,
    a reassignment or an ISR below ``min.insync.replicas`` touches few partitions of many). Those partitions are
    ``measured`` (as ``name``): where they are few, the versions of the others are dropped as they are read, not
    after every version was shuffled to its partition's task."""
    return df.join(inputs.measured(name, rows.select(*PARTITION).distinct()), PARTITION, "left_semi")


def at_start(inputs: Inputs, df: DataFrame, offset: str = "valid_from_offset") -> DataFrame:
    """``df`` with ``_at_start``: the row is a version loaded from the base snapshot (before the histories begin)."""
    return (df.join(inputs.bases, "cluster_id", "left")
            .withColumn("_at_start", F.coalesce(F.col(offset) == F.col("_base_offset"), F.lit(False))))


def islands(df: DataFrame, keys: list[str], flag: Column, replaced: Column | None = None) -> DataFrame:
    """Versions where ``flag`` holds, numbered by island of consecutive versions (``_island``); adds ``_flag``.

    A flagged version goes on from the flagged version before it where it replaced that one (``replaced``; by
    default ``_prev`` is not null) and that one ended where it began (it was the version just before), or is a
    window's row ``open_windows`` added (it has no end, which a version followed by another always has). Only the
    flagged versions are ordered: on a big cluster, a fraction of them.
    """
    w = Window.partitionBy(*keys).orderBy("valid_from_offset")
    follows = F.col("_prev").isNotNull() if replaced is None else replaced
    before = F.lag(F.struct(F.col("valid_to_offset").alias("to"))).over(w)
    adjacent = before.isNotNull() & (before["to"].isNull() | (before["to"] == F.col("valid_from_offset")))
    return (df.withColumn("_flag", flag).filter("_flag")
            .withColumn("_start", ~follows | ~adjacent)
            .withColumn("_island", F.sum(F.col("_start").cast("int")).over(w.rowsBetween(*RUNNING))))


def open_windows(inputs: Inputs, name: str, rows: DataFrame, at: str, columns: Mapping[str, Column],
                 ties: bool = True) -> DataFrame:
    """``rows`` (of partitions, ordered by column ``at`` into the islands of table ``name``'s windows) with, in an
    incremental analysis, one row per window open at the resume offset (``Inputs.opened``): its ``columns`` (the
    others null) made from the window's row, at its start (``from_offset``), with what its versions read before gave
    the window's columns (the least ISR size, what held at its start). The versions read are those holding at the
    resume offset or later, so the row stands for those its window began with, before: the window goes on from it
    and is rebuilt equal to a window built from every version, while a window open for weeks reads only the hour.
    Where a row read begins at the window's start (its first version still held), the window's row is left out
    (``ties``: rows read can begin before the resume offset; points, all at it or later, cannot)."""
    if inputs.opened is None:
        return rows
    types = rows.schema
    opened = inputs.opened(name).select(*PARTITION, F.col("from_offset").alias(at), *(
        e.cast(types[c].dataType).alias(c) for c, e in columns.items()))
    if ties:
        opened = opened.join(rows.select(*PARTITION, at), [*PARTITION, at], "left_anti")
    return rows.unionByName(opened, allowMissingColumns=True)


def window_columns(inputs: Inputs, grouped: DataFrame) -> DataFrame:
    """``from_*``, ``to_*``, ``seconds``, ``open`` from ``_from``/``_from_time``/``_to``/``_to_time`` columns."""
    return (grouped.join(inputs.ends, "cluster_id", "left")
            .withColumn("from_offset", F.col("_from")).withColumn("from_time", F.col("_from_time"))
            .withColumn("to_offset", F.col("_to")).withColumn("to_time", F.col("_to_time"))
            .withColumn("open", F.col("_to").isNull())
            .withColumn("seconds", seconds_between(F.col("_from_time"), F.coalesce("_to_time", "_end_time"))))


def select_table(df: DataFrame, name: str) -> DataFrame:
    """The columns of event table ``name``, cast to its types (one SQL projection: a column built call by call
    costs a round trip to the JVM per call, ~60 per table)."""
    return df.selectExpr(*_casts(name))


@functools.cache
def _casts(name: str) -> tuple[str, ...]:
    schema = from_arrow_schema(event_tables()[name].schema)
    return tuple(f"CAST(`{f.name}` AS {f.dataType.simpleString()}) AS `{f.name}`" for f in schema.fields)


def new_registration() -> Column:
    """A broker version that starts a registration (the first, or a new broker epoch); needs ``_prev``."""
    return F.col("_prev").isNull() | (F.col("broker_epoch") != F.col("_prev.broker_epoch"))


def version_events(inputs: Inputs, kind: str, keys: list[str], names: tuple[str, str, str],
                   here: dict[str, Column] | None = None, gone: dict[str, Column] | None = None,
                   on_start: dict[str, Column] | None = None, on_update: dict[str, Column] | None = None
                   ) -> DataFrame:
    """Events of the versions of one entity kind: ``present_at_start`` (in the base snapshot), then
    ``names`` = (created, updated, deleted). Every event has ``log_offset``, ``timestamp`` and ``change``;
    ``here`` adds columns to the first three, ``gone`` to deletions, ``on_start`` / ``on_update`` override."""
    h = at_start(inputs, with_previous(inputs.history(kind), ["cluster_id", *keys]))
    created, updated, deleted = names
    at = {"log_offset": F.col("valid_from_offset"), "timestamp": F.col("valid_from"), **(here or {})}
    first = F.col("_prev").isNull()
    return explode_events(h, [
        (first & F.col("_at_start"), {**at, **(on_start or {}), "change": F.lit("present_at_start")}),
        (first & ~F.col("_at_start"), {**at, "change": F.lit(created)}),
        (~first, {**at, **(on_update or {}), "change": F.lit(updated)}),
        (F.col("ended_by") == "delete", {"log_offset": F.col("valid_to_offset"), "timestamp": F.col("valid_to"),
                                         **(gone or {}), "change": F.lit(deleted)}),
    ])


def explode_events(df: DataFrame, events: list[tuple[Column, dict[str, Column]]]) -> DataFrame:
    """One row per (condition, values) that holds for a row: events from versions."""
    names = sorted({k for _, values in events for k in values})
    structs = [F.when(cond, F.struct(*[values.get(n, F.lit(None)).alias(n) for n in names])) for cond, values in events]
    return (df.withColumn("_e", F.explode(F.array_compact(F.array(*structs))))
            .select(*[c for c in df.columns if c not in names], *[F.col(f"_e.{n}").alias(n) for n in names]))


# -- partitions ---------------------------------------------------------------------------------------------

def leader_elections(inputs: Inputs) -> DataFrame:
    """Every leader change of a partition, classified by what happened to the previous leader."""
    recovering = "RECOVERING"
    p = partition_versions(inputs)
    changed = p.filter(F.col("_prev").isNotNull() & (F.col("leader") != F.col("_prev.leader")))
    b = inputs.history("brokers").select(
        F.col("cluster_id").alias("_bc"), F.col("broker_id").alias("_bid"), F.col("valid_from_offset").alias("_bf"),
        F.col("valid_to_offset").alias("_bt"), F.col("fenced").alias("_fenced"),
        F.col("in_controlled_shutdown").alias("_ics"))
    at = F.col("valid_from_offset")
    j = changed.join(b, (F.col("_bc") == F.col("cluster_id")) & (F.col("_bid") == F.col("_prev.leader"))
                     & valid_at(at, "_bf", "_bt"), "left")
    state = (F.when(F.col("_prev.leader") == -1, "none").when(F.col("_bid").isNull(), "unregistered")
             .when(F.col("_ics"), "controlled_shutdown").when(F.col("_fenced"), "fenced").otherwise("alive"))
    in_isr = F.array_contains(F.col("_prev.isr"), F.col("leader"))
    kind = (F.when(F.col("leader") == -1, "offline")
            .when((F.col("_prev.leader") != -1) & ~F.array_contains("replicas", F.col("_prev.leader")), "reassignment")
            .when(~in_isr & F.array_contains(F.col("_prev.elr"), F.col("leader")), "elr")
            .when(~in_isr | ((F.col("leader_recovery_state") == recovering)
                             & (F.col("_prev.leader_recovery_state") != recovering)),
                  "unclean")
            .when(state == "controlled_shutdown", "controlled_shutdown")
            .when(state.isin("fenced", "unregistered", "none"), "failover")
            .when(F.col("leader") == F.get(F.col("replicas"), 0), "preferred")
            .otherwise("failover"))
    return select_table(j.select(
        "cluster_id", at.alias("log_offset"), F.col("valid_from").alias("timestamp"), "topic_id", "topic_name",
        "partition_id", kind.alias("kind"), (kind != "unclean").alias("clean"),
        F.col("_prev.leader").alias("previous_leader"), "leader", "leader_epoch",
        state.alias("previous_leader_state"), F.col("_prev.isr").alias("previous_isr"), "isr", "replicas",
        "leader_recovery_state"), "leader_elections")


def isr_changes(inputs: Inputs) -> DataFrame:
    """Every change of a partition's ISR: shrink, expand, or both at once."""
    p = partition_versions(inputs)
    removed = F.array_except(F.col("_prev.isr"), F.col("isr"))
    added = F.array_except(F.col("isr"), F.col("_prev.isr"))
    changed = p.filter(F.col("_prev").isNotNull() & ((F.size(removed) > 0) | (F.size(added) > 0)))
    kind = (F.when(F.size(added) == 0, "shrink").when(F.size(removed) == 0, "expand").otherwise("shrink_expand"))
    return select_table(changed.select(
        "cluster_id", F.col("valid_from_offset").alias("log_offset"), F.col("valid_from").alias("timestamp"),
        "topic_id", "topic_name", "partition_id", kind.alias("kind"), F.col("_prev.isr").alias("isr_before"),
        F.col("isr").alias("isr_after"), removed.alias("removed"), added.alias("added"), "leader", "replicas"),
        "isr_changes")


def _partition_windows(inputs: Inputs, flagged: DataFrame, extra: list[Column]) -> DataFrame:
    grouped = flagged.groupBy(*PARTITION, "_island").agg(
        F.first("topic_name").alias("topic_name"),
        F.min("valid_from_offset").alias("_from"), F.min("valid_from").alias("_from_time"),
        F.max_by("valid_to_offset", "valid_from_offset").alias("_to"),
        F.max_by("valid_to", "valid_from_offset").alias("_to_time"), *extra)
    return window_columns(inputs, grouped)


def under_replicated(inputs: Inputs) -> DataFrame:
    """Windows of consecutive partition versions with fewer in-sync replicas than replicas."""
    # every partition version is ordered: only what the islands and their windows read goes into the sort, sizes
    # for arrays and whether a version replaced one for what it replaced
    p = partition_versions(inputs).select(
        *PARTITION, "topic_name", "valid_from_offset", "valid_from", "valid_to_offset", "valid_to",
        F.size("isr").alias("_isr"), F.size("replicas").alias("_replicas"), F.col("_prev").isNotNull().alias("_r"))
    p = open_windows(inputs, "under_replicated", p, "valid_from_offset", {
        "topic_name": F.col("topic_name"), "valid_from": F.col("from_time"), "_isr": F.col("min_isr_size"),
        "_replicas": F.col("replicas_count"), "_r": F.lit(False)})
    flagged = islands(p, PARTITION, F.col("_isr") < F.col("_replicas"), F.col("_r"))
    out = _partition_windows(inputs, flagged, [
        F.min("_isr").alias("min_isr_size"), F.min_by("_replicas", "valid_from_offset").alias("replicas_count")])
    return select_table(out, "under_replicated")


# the configs an event table applies to partitions by their topic, leader or cluster (not by a partition version)
PARTITION_CONFIGS = ("min.insync.replicas",)
# the ``resource_type`` of a topic's config and of a broker's (a broker's of an empty name: the cluster default)
TOPIC_CONFIG, BROKER_CONFIG = "TOPIC", "BROKER"


def under_min_isr(inputs: Inputs) -> DataFrame:
    """Windows with ISR < min.insync.replicas in force, evaluated at every partition change and every change of
    a min.insync.replicas config that applies to the partition.

    The partition's state at each point is the version begun last at or before it (an as-of window over the
    points and the versions in offset order, not a join of every point with every version of its partition)."""
    topic, broker = TOPIC_CONFIG, BROKER_CONFIG
    kafka_default = F.lit(1)  # min.insync.replicas where no config sets it
    mir = (inputs.history("configs").filter(F.col("name").isin(*PARTITION_CONFIGS))
           .withColumn("_v", F.col("value").try_cast("int")))
    # only partitions with a version whose ISR is smaller than the largest min.insync.replicas that can apply to it
    # (its topic's, any broker's, the cluster default; or Kafka's default) can be flagged: the others are left out
    # before their versions are ordered (``greatest`` skips the nulls of no such config). On a cluster whose default
    # is 2 and a few topics ask for 3, only those topics' partitions with a replica out, and partitions down to one
    # replica in sync, are ordered, not every partition a rolling restart touched
    by_topic = F.col("resource_type") == topic
    most = F.broadcast(mir.filter(~by_topic).groupBy("cluster_id").agg(F.max("_v").alias("_most")))
    topic_most = mir.filter(by_topic).groupBy("cluster_id", F.col("resource_name").alias("topic_name")).agg(
        F.max("_v").alias("_topic_most"))
    parts = inputs.history("partitions")
    can_fall = (parts.join(most, "cluster_id", "left").join(topic_most, ["cluster_id", "topic_name"], "left")
                .filter(F.size("isr") < F.greatest("_most", "_topic_most", kafka_default)))
    parts = inputs.shared("partitions that can fall under min.insync.replicas", of_partitions_in(
        inputs, "partition keys that can fall under min.insync.replicas", parts, can_fall))  # (read four times below)
    # evaluation points: each partition version (which carries its state), each deletion, in an incremental analysis
    # `since` itself (the state then: a point of its own), all in one pass over the versions; and each
    # min.insync.replicas boundary
    state = F.struct(F.col("valid_to_offset").alias("to"), F.col("topic_name").alias("name"),
                     F.size("isr").alias("isr"), F.col("leader").alias("leader"))
    no_state = F.lit(None).cast(parts.select(state.alias("s")).schema["s"].dataType)

    def point(at: Column, at_time: Column, s: Column) -> Column:
        return F.struct(at.alias("at"), at_time.alias("at_time"), s.alias("_state"))

    since = (parts.join(inputs.cuts(parts), "cluster_id", "left") if inputs.since is not None
             else parts.withColumn("since", F.lit(None).cast("long")))
    each = F.array_compact(F.array(
        point(F.col("valid_from_offset"), F.col("valid_from"), state),
        F.when(F.col("ended_by") == "delete", point(F.col("valid_to_offset"), F.col("valid_to"), no_state)),
        F.when(valid_at(F.col("since")), point(F.col("since"), F.lit(None).cast("timestamp"), no_state))))
    points = since.select(*PARTITION, F.explode(each).alias("_p")).select(*PARTITION, "_p.*")
    bounds = mir.select("cluster_id", "resource_type", "resource_name", F.col("valid_from_offset").alias("at"),
                        F.col("valid_from").alias("at_time")).unionByName(
        mir.filter(F.col("valid_to_offset").isNotNull()).select(
            "cluster_id", "resource_type", "resource_name", F.col("valid_to_offset").alias("at"),
            F.col("valid_to").alias("at_time")))
    live = parts.select(F.col("cluster_id").alias("_pc"), "topic_id", "partition_id", F.col("topic_name").alias("_pn"),
                        F.col("leader").cast("string").alias("_pl"), F.col("valid_from_offset").alias("_f"),
                        F.col("valid_to_offset").alias("_t"))

    def touched(scope: Column, match: Column) -> DataFrame:  # the partition versions a boundary applies to
        return (bounds.filter(scope).join(live, (F.col("_pc") == F.col("cluster_id")) & match
                                          & valid_at(F.col("at"), "_f", "_t"))
                .select(*PARTITION, "at", "at_time", no_state.alias("_state")))

    # a topic's config, its leader's broker config (equi-joins), the cluster default (every partition)
    points = (points.unionByName(touched(F.col("resource_type") == topic, F.col("resource_name") == F.col("_pn")))
              .unionByName(touched((F.col("resource_type") == broker) & (F.col("resource_name") != ""),
                                   F.col("resource_name") == F.col("_pl")))
              .unionByName(touched((F.col("resource_type") == broker) & (F.col("resource_name") == ""), F.lit(True))))
    # one row per point (its latest time), with the partition as of it: the version begun last at or before it,
    # while it holds
    w = Window.partitionBy(*PARTITION).orderBy("at")
    here = w.rangeBetween(0, 0)
    s = F.last("_state", ignorenulls=True).over(w.rangeBetween(Window.unboundedPreceding, 0))
    j = (points.withColumn("_s", s).withColumn("at_time", F.max("at_time").over(here))
         .withColumn("_peer", F.lag("at").over(w) == F.col("at")).filter(~F.coalesce("_peer", F.lit(False))))
    j = inputs.from_since(j, "at")
    holds = F.col("_s").isNotNull() & (F.col("_s.to").isNull() | (F.col("_s.to") > F.col("at")))
    j = j.select(*PARTITION, "at", "at_time", F.when(holds, F.col("_s")).alias("_s"))
    j = j.select("*", *[F.col(f"_s.{c}").alias(f"_{c}") for c in ("name", "isr", "leader")])

    def config(df: DataFrame, label: str, rtype: str, name: Column) -> DataFrame:
        c = mir.select(F.col("cluster_id").alias(f"_{label}_c"), F.col("resource_type").alias(f"_{label}_t"),
                       F.col("resource_name").alias(f"_{label}_n"), F.col("valid_from_offset").alias(f"_{label}_f"),
                       F.col("valid_to_offset").alias(f"_{label}_to"), F.col("_v").alias(f"_{label}_v"))
        return df.join(c, (F.col(f"_{label}_c") == F.col("cluster_id")) & (F.col(f"_{label}_t") == rtype)
                       & (F.col(f"_{label}_n") == name) & valid_at(F.col("at"), f"_{label}_f", f"_{label}_to"), "left")

    j = config(config(config(j, "topic", topic, F.col("_name")), "broker", broker, F.col("_leader").cast("string")),
               "cluster", broker, F.lit(""))  # the cluster default: a BROKER config with an empty name
    j = j.withColumn("_mir", F.coalesce("_topic_v", "_broker_v", "_cluster_v", kafka_default)).withColumn(
        "_source", F.when(F.col("_topic_v").isNotNull(), "topic").when(F.col("_broker_v").isNotNull(), "broker")
        .when(F.col("_cluster_v").isNotNull(), "cluster_default").otherwise("kafka_default"))
    j = j.withColumn("_flag", F.col("_s").isNotNull() & (F.col("_isr") < F.col("_mir")))
    j = open_windows(inputs, "under_min_isr", j, "at", {
        "at_time": F.col("from_time"), "_name": F.col("topic_name"), "_isr": F.col("min_isr_size"),
        "_mir": F.col("min_insync_replicas"), "_source": F.col("config_source"), "_flag": F.lit(True)}, ties=False)
    backwards = Window.partitionBy(*PARTITION).orderBy(F.col("at").desc())
    j = (j.withColumn("_start", F.col("_flag") & ~F.coalesce(F.lag("_flag").over(w), F.lit(False)))
         .withColumn("_island", F.sum(F.col("_start").cast("int")).over(w.rowsBetween(*RUNNING)))
         .withColumn("_end", F.when(~F.col("_flag"), F.struct(F.col("at").alias("o"), F.col("at_time").alias("t"))))
         .withColumn("_next_end", F.last("_end", ignorenulls=True).over(backwards.rowsBetween(*RUNNING))))
    grouped = j.filter("_flag").groupBy(*PARTITION, "_island").agg(
        F.first("_name").alias("topic_name"), F.min("at").alias("_from"), F.min("at_time").alias("_from_time"),
        F.min_by("_next_end", "at").alias("_e"), F.min_by("_mir", "at").alias("min_insync_replicas"),
        F.min_by("_source", "at").alias("config_source"), F.min("_isr").alias("min_isr_size"))
    grouped = grouped.withColumn("_to", F.col("_e.o")).withColumn("_to_time", F.col("_e.t"))
    return select_table(window_columns(inputs, grouped), "under_min_isr")


def reassignments(inputs: Inputs) -> DataFrame:
    """Reassignment episodes: consecutive versions with adding or removing replicas, and how they ended."""
    moving = (F.size("adding_replicas") + F.size("removing_replicas")) > 0
    parts = inputs.history("partitions")  # (the versions of the few partitions that move are ordered, not all)
    p = replaced(of_partitions_in(inputs, "partition keys reassigned", parts, parts.filter(moving)),
                 "partitions").select(
        *PARTITION, "topic_name", "valid_from_offset", "valid_from", "valid_to_offset", "valid_to", "ended_by",
        "replicas", "adding_replicas", "removing_replicas", F.col("_prev").isNotNull().alias("_r"),
        F.filter("replicas", lambda r: ~F.array_contains("adding_replicas", r)).alias("original_replicas"),
        F.filter("replicas", lambda r: ~F.array_contains("removing_replicas", r)).alias("target_replicas"))
    p = open_windows(inputs, "reassignments", p, "valid_from_offset", {
        c: F.col(c) for c in ("topic_name", "adding_replicas", "removing_replicas", "original_replicas",
                              "target_replicas")} | {"valid_from": F.col("from_time"), "_r": F.lit(False)})
    w = Window.partitionBy(*PARTITION).orderBy("valid_from_offset")
    p = p.withColumn("_next_replicas", F.lead("replicas").over(w))
    flagged = islands(p, PARTITION, moving, F.col("_r"))
    start = "valid_from_offset"
    grouped = flagged.groupBy(*PARTITION, "_island").agg(
        F.first("topic_name").alias("topic_name"), F.min(start).alias("_from"), F.min("valid_from").alias("_from_time"),
        F.max_by("valid_to_offset", start).alias("_to"), F.max_by("valid_to", start).alias("_to_time"),
        F.max_by("ended_by", start).alias("_ended_by"), F.max_by("_next_replicas", start).alias("final_replicas"),
        *(F.min_by(c, start).alias(c) for c in ("adding_replicas", "removing_replicas", "original_replicas",
                                                 "target_replicas")))
    status = (F.when(F.col("_to").isNull(), "open").when(F.col("_ended_by") == "delete", "deleted")
              .when(F.array_sort("final_replicas") == F.array_sort("target_replicas"), "completed")
              .otherwise("cancelled"))
    out = window_columns(inputs, grouped.withColumn("status", status))
    return select_table(out, "reassignments")


# -- brokers, controllers, voters, features ---------------------------------------------------------------

def broker_lifecycle(inputs: Inputs) -> DataFrame:
    """Register, fence, unfence, controlled shutdown and unregister events of each broker."""
    keys = ["cluster_id", "broker_id"]
    b = at_start(inputs, with_previous(inputs.history("brokers"), keys))
    registered = new_registration()
    same = ~registered
    here = {"log_offset": F.col("valid_from_offset"), "timestamp": F.col("valid_from"), "fenced": F.col("fenced")}
    events = explode_events(b, [
        (registered & F.col("_at_start"), {**here, "event": F.lit("present_at_start")}),
        (registered & ~F.col("_at_start"), {**here, "event": F.lit("register")}),
        (same & F.col("fenced") & ~F.col("_prev.fenced"), {**here, "event": F.lit("fence")}),
        (same & ~F.col("fenced") & F.col("_prev.fenced"), {**here, "event": F.lit("unfence")}),
        (same & F.col("in_controlled_shutdown") & ~F.col("_prev.in_controlled_shutdown"),
         {**here, "event": F.lit("controlled_shutdown")}),
        (F.col("ended_by") == "delete", {"log_offset": F.col("valid_to_offset"), "timestamp": F.col("valid_to"),
                                         "fenced": F.lit(None).cast("boolean"), "event": F.lit("unregister")}),
    ])
    return select_table(events, "broker_lifecycle")


def broker_fenced_periods(inputs: Inputs) -> DataFrame:
    """Periods a broker was fenced, their reason, and flapping (3 unplanned fences in an hour)."""
    keys = ["cluster_id", "broker_id"]
    b = with_previous(inputs.history("brokers"), keys)
    reason = (F.when(new_registration(), "startup").when(F.col("in_controlled_shutdown"), "controlled_shutdown")
              .otherwise("fenced"))
    flagged = islands(b.withColumn("_reason", reason), keys, F.col("fenced"))
    start = "valid_from_offset"
    grouped = flagged.groupBy(*keys, "_island").agg(
        F.min(start).alias("_from"), F.min("valid_from").alias("_from_time"),
        F.max_by("valid_to_offset", start).alias("_to"), F.max_by("valid_to", start).alias("_to_time"),
        F.min_by("_reason", start).alias("reason"))
    hour = Window.partitionBy(*keys).orderBy(F.unix_seconds("_from_time")).rangeBetween(-3600, 0)
    grouped = grouped.withColumn("fences_last_hour", F.sum((F.col("reason") == "fenced").cast("int")).over(hour))
    out = window_columns(inputs, grouped).withColumn("flapping", F.col("fences_last_hour") >= 3)
    return select_table(out, "broker_fenced_periods")


def controller_leadership(inputs: Inputs) -> DataFrame:
    """One row per raft epoch of each log: leader (LeaderChange), offsets, voters, failover gap.

    Incrementally (``EPOCHS``), from ``since`` on: the last record of the epoch before the first rebuilt (that epoch's
    row, cut there, only gives the failover its leader and time), and every record after; or, where the records
    landed since follow the log's end (``Inputs.folded``), the rows built before from ``since`` on and those records.
    """
    keys = ["cluster_id", "epoch"]
    epochs = inputs.fold("controller_leadership", inputs.log_records().groupBy(
        "cluster_id", F.col("batch_epoch").alias("epoch")).agg(
        F.min("log_offset").alias("from_offset"), F.min_by("timestamp", "log_offset").alias("from_time"),
        F.max("log_offset").alias("to_offset"), F.max_by("timestamp", "log_offset").alias("to_time"),
        F.count(F.lit(1)).alias("records")), keys, {
        "from_offset": F.min("from_offset"), "from_time": F.min_by("from_time", "from_offset"),
        "to_offset": F.max("to_offset"), "to_time": F.max_by("to_time", "to_offset"), "records": F.sum("records")})
    lc = (inputs.table("leader_change").filter(F.col("source") == "log")
          .groupBy("cluster_id", F.col("batch_epoch").alias("epoch")).agg(
              F.min_by(F.struct("leader_id", "voters", "granting_voters"), "log_offset").alias("_lc")))
    j = epochs.join(lc, keys, "left")
    w = Window.partitionBy("cluster_id").orderBy("epoch")
    j = (j.withColumn("leader_id", F.coalesce(F.col("_lc.leader_id"), F.lit(-1)))
         .withColumn("voters", F.transform("_lc.voters", lambda v: v["voter_id"]))
         .withColumn("granting_voters", F.transform("_lc.granting_voters", lambda v: v["voter_id"]))
         .withColumn("previous_epoch", F.lag("epoch").over(w))
         .withColumn("previous_leader_id", F.lag("leader_id").over(w))
         .withColumn("failover_seconds", seconds_between(F.lag("to_time").over(w), F.col("from_time"))))
    return select_table(j, "controller_leadership")


def voter_changes(inputs: Inputs) -> DataFrame:
    """Voters added, removed or updated (KIP-853), with the voter set after each change."""
    endpoints = F.transform("endpoints", lambda e: F.concat(e["name"], F.lit("://"), e["host"], F.lit(":"),
                                                            e["port"].cast("string")))
    events = version_events(inputs, "voters", ["voter_id"], ("added", "updated", "removed")).withColumn(
        "endpoints", endpoints)
    sets = inputs.history("voters").select(F.col("cluster_id").alias("_c"), F.col("voter_id").alias("_v"),
                     F.col("valid_from_offset").alias("_f"), F.col("valid_to_offset").alias("_t"))
    points = events.select("cluster_id", "log_offset").distinct()
    after = (points.join(sets, (F.col("_c") == F.col("cluster_id")) & valid_at(F.col("log_offset"), "_f", "_t"), "left")
             .groupBy("cluster_id", "log_offset").agg(F.array_sort(F.collect_set("_v")).alias("voters_after")))
    return select_table(events.join(after, ["cluster_id", "log_offset"], "left"), "voter_changes")


def feature_changes(inputs: Inputs) -> DataFrame:
    """Features finalized, upgraded, downgraded or removed."""
    f = at_start(inputs, with_previous(inputs.history("features"), ["cluster_id", "name"]))
    here = {"log_offset": F.col("valid_from_offset"), "timestamp": F.col("valid_from"),
            "from_level": F.col("_prev.level"), "to_level": F.col("level"),
            "from_version": F.col("_prev.version_name"), "to_version": F.col("version_name")}
    first = F.col("_prev").isNull()
    events = explode_events(f, [
        (first & F.col("_at_start"), {**here, "change": F.lit("present_at_start")}),
        (first & ~F.col("_at_start"), {**here, "change": F.lit("finalized")}),
        (~first & (F.col("level") > F.col("_prev.level")), {**here, "change": F.lit("upgrade")}),
        (~first & (F.col("level") < F.col("_prev.level")), {**here, "change": F.lit("downgrade")}),
        (F.col("ended_by") == "delete", {"log_offset": F.col("valid_to_offset"), "timestamp": F.col("valid_to"),
                                         "from_level": F.col("level"), "from_version": F.col("version_name"),
                                         "change": F.lit("removed")}),
    ]).withColumn("feature", F.col("name"))
    return select_table(events, "feature_changes")


def zk_migration(inputs: Inputs) -> DataFrame:
    """Changes of the ZooKeeper migration state (KIP-866)."""
    z = with_previous(inputs.history("zk_migration_state"), ["cluster_id"])
    z = z.filter(F.col("_prev").isNull() | (F.col("_prev.state") != F.col("state")))
    return select_table(z.select("cluster_id", F.col("valid_from_offset").alias("log_offset"),
                                 F.col("valid_from").alias("timestamp"), F.col("_prev.state_name").alias("from_state"),
                                 F.col("state_name").alias("to_state")), "zk_migration")


# -- topics, configs, quotas, ACLs, SCRAM ---------------------------------------------------------------------

def topic_lifecycle(inputs: Inputs) -> DataFrame:
    """Topic ids created (and whether the name was used before), grown, and deleted.

    A partition is born where a version of it does not go on from an update (with its topic, added later, or again
    after a TopicRecord for a live topic id emptied it, as Kafka's ``TopicsDelta`` does); ``partitions_before``
    counts the topic's partitions holding just before the event, ``partitions_after`` adds those born in its batch.

    Incrementally (``inputs.since``), the rows from the resume offset on (those kept) are exact: topics are read
    whole (a name's earlier topic), partitions from the resume offset on or earlier (``VersionCuts``: every version
    holding there or later is there, so every count from there on; births are looked for from ``since`` on), and
    records from ``since`` on (the batches of the partitions born since)."""
    topics = at_start(inputs, inputs.history("topics", whole=True))
    first = topics.groupBy("cluster_id", "topic_id").agg(
        F.min("valid_from_offset").alias("_created"), F.min("valid_from").alias("_created_time"),
        F.min_by("name", "valid_from_offset").alias("topic_name"),
        F.min_by("_at_start", "valid_from_offset").alias("_at_start"))
    by_name = Window.partitionBy("cluster_id", "topic_name").orderBy("_created")
    first = first.withColumn("previous_topic_id", F.lag("topic_id").over(by_name))
    # partitions appear in the batch that creates the topic, or later in batches that add partitions: only the
    # records that begin a topic or a partition are looked up (on a big cluster, a few of every hundred)
    records = inputs.log_records().filter(F.col("record_type").isin("TOPIC_RECORD", "PARTITION_RECORD")).select(
        "cluster_id", F.col("log_offset").alias("valid_from_offset"), "batch_base_offset")
    partitions = inputs.history("partitions")
    keys = ["cluster_id", "topic_id", "partition_id"]
    # (an update ending where a version begins holds from `since` on too: the versions from `since` on are all there)
    born = (inputs.from_since(partition_versions(inputs).filter(F.col("_prev").isNull()), "valid_from_offset")
            .select(*keys, "valid_from_offset", F.col("valid_from").alias("_t"))
            .join(records, ["cluster_id", "valid_from_offset"], "left")
            .withColumn("_batch", F.coalesce("batch_base_offset", "valid_from_offset")))
    created_batch = first.join(records.withColumnRenamed("valid_from_offset", "_created"), ["cluster_id", "_created"],
                               "left").withColumn("_cbatch", F.coalesce("batch_base_offset", "_created"))
    # (each kept where the analysis keeps frames: each is read twice, and would join the births with the log again)
    groups = inputs.shared("partition births by batch", born.groupBy("cluster_id", "topic_id", "_batch").agg(
        F.count(F.lit(1)).alias("_n"), F.min("valid_from_offset").alias("_o"), F.min("_t").alias("_ot")))
    lived = lives(inputs, partitions)
    groups = (holding_before(groups, lived, "_o")
              .withColumn("partitions_before", F.coalesce("_holding", F.lit(0)))
              .withColumn("partitions_after", F.col("partitions_before") + F.col("_n")))
    g = inputs.shared("partition births with counts", groups.join(
        created_batch.select("cluster_id", "topic_id", "_cbatch", "topic_name"), ["cluster_id", "topic_id"], "left"))
    added = g.filter(F.col("_batch") != F.col("_cbatch")).select(
        "cluster_id", F.col("_o").alias("log_offset"), F.col("_ot").alias("timestamp"), "topic_id", "topic_name",
        F.lit("partitions_added").alias("event"), "partitions_before", "partitions_after")
    initial = g.filter(F.col("_batch") == F.col("_cbatch")).select(
        "cluster_id", "topic_id", F.col("partitions_after").alias("_initial"))
    created = first.join(initial, ["cluster_id", "topic_id"], "left").select(
        "cluster_id", F.col("_created").alias("log_offset"), F.col("_created_time").alias("timestamp"), "topic_id",
        "topic_name", F.when(F.col("_at_start"), "present_at_start").otherwise("create").alias("event"),
        F.lit(0).alias("partitions_before"), F.coalesce("_initial", F.lit(0)).alias("partitions_after"),
        (F.col("previous_topic_id").isNotNull() & ~F.col("_at_start")).alias("name_reused"), "previous_topic_id")
    deleted = (holding_before(topics.filter(F.col("ended_by") == "delete"), lived, "valid_to_offset")
               .select("cluster_id", F.col("valid_to_offset").alias("log_offset"), F.col("valid_to").alias("timestamp"),
                       "topic_id", F.col("name").alias("topic_name"), F.lit("delete").alias("event"),
                       F.col("_holding").alias("partitions_before"), F.lit(0).alias("partitions_after")))
    out = created.unionByName(added, allowMissingColumns=True).unionByName(deleted, allowMissingColumns=True)
    return select_table(out, "topic_lifecycle")


def holding_before(df: DataFrame, lived: DataFrame, at: str) -> DataFrame:
    """``df`` (rows of topics) with ``_holding``: how many partitions of the row's topic held just before its offset
    ``at`` (null: none), summed from where their lives begin and end (``lived``: ``lives``)."""
    points = df.select("cluster_id", "topic_id", F.col(at).alias("_at")).distinct()
    counts = (points.join(lived, ["cluster_id", "topic_id"])
              .filter(F.col("_o") <= F.col("_at") - 1)
              .groupBy("cluster_id", "topic_id", "_at").agg(F.sum("_d").alias("_n"))
              .select("cluster_id", "topic_id", F.col("_at").alias(at), F.when(F.col("_n") > 0, F.col("_n"))
                      .cast("long").alias("_holding")))
    return df.join(counts, ["cluster_id", "topic_id", at], "left")


def lives(inputs: Inputs, partitions: DataFrame) -> DataFrame:
    """Where each life of a partition (a version and those that replaced it, one by one) begins (``_d`` 1) and ends
    by its deletion (-1), by offset (``_o``): a partition holds at an offset where a life of it began at or before and
    has not ended; counted from the versions that begin or end one, not from every version. A life begins at a
    version that replaced none (``replaced``) or, incrementally, at the first version read of the partition (the one
    holding where its versions are read from, ``since`` or later: ``VersionCuts``; those before are not read)."""
    p = replaced(partitions, "partitions")
    begins = F.col("_prev").isNull()
    if inputs.since is not None:
        p = p.withColumn("_first", F.min("valid_from_offset").over(
            Window.partitionBy("cluster_id", "topic_id", "partition_id")))
        begins = begins | (F.col("valid_from_offset") == F.col("_first"))
    return (p.filter(begins).select("cluster_id", "topic_id", F.col("valid_from_offset").alias("_o"),
                                    F.lit(1).alias("_d"))
            .unionByName(p.filter(F.col("ended_by") == "delete").select(
                "cluster_id", "topic_id", F.col("valid_to_offset").alias("_o"), F.lit(-1).alias("_d"))))


def _value_changes(inputs: Inputs, kind: str, keys: list[str], value: str) -> DataFrame:
    """Set / update / delete rows (with old and new values) of a simple keyed history."""
    value_type = inputs.history(kind).schema[value].dataType
    return version_events(inputs, kind, keys, ("set", "update", "delete"),
                          here={"old_value": F.col(f"_prev.{value}"), "new_value": F.col(value)},
                          gone={"old_value": F.col(value), "new_value": F.lit(None).cast(value_type)})


def config_changes(inputs: Inputs) -> DataFrame:
    """Config set / update / delete with old and new values (redacted values stay redacted)."""
    c = _value_changes(inputs, "configs", ["resource_type", "resource_name", "name"], "value")
    c = (c.withColumn("redacted", (F.col("old_value") == REDACTED) | (F.col("new_value") == REDACTED)))
    return select_table(c.withColumn("redacted", F.coalesce("redacted", F.lit(False))), "config_changes")


def quota_changes(inputs: Inputs) -> DataFrame:
    """Client quota set / update / delete, with the entity as text (``user=alice,client-id=x``)."""
    q = _value_changes(inputs, "client_quotas", ["entity", "key"], "value")
    parts = F.from_json("entity", "array<array<string>>")
    text = F.concat_ws(",", F.transform(parts, lambda e: F.concat(
        F.get(e, 0), F.lit("="), F.coalesce(F.get(e, 1), F.lit("<default>")))))
    return select_table(q.withColumn("entity_text", text), "quota_changes")


def acl_changes(inputs: Inputs) -> DataFrame:
    """ACL bindings created and deleted, with enum values as names."""
    events = version_events(inputs, "acls", ["acl_id"], ("created", "updated", "deleted"))
    events = events.withColumn("permission", F.col("permission_type"))
    return select_table(events, "acl_changes")


def scram_changes(inputs: Inputs) -> DataFrame:
    """SCRAM credentials created, updated (credential changed or not) and deleted; never the keys."""
    events = version_events(
        inputs, "scram_users", ["mechanism", "name"], ("created", "updated", "deleted"),
        here={"iterations_before": F.col("_prev.iterations"), "iterations": F.col("iterations"),
              "credential_changed": F.lit(True)},
        gone={"iterations_before": F.col("iterations"), "iterations": F.lit(None).cast("int")},
        on_start={"credential_changed": F.lit(False)},
        on_update={"credential_changed": F.col("credential_hash") != F.col("_prev.credential_hash")})
    events = events.withColumn("user_name", F.col("name"))
    return select_table(events, "scram_changes")


# -- the log itself -------------------------------------------------------------------------------------------

def log_health(inputs: Inputs) -> DataFrame:
    """Per cluster and hour: record counts by type, NoOp share, batches, CRC failures, divergence, snapshots.
    Incrementally (``HOURS``), from the hour ``since`` on: every row is read by its time; or, where the records
    landed since follow the log's end (``Inputs.folded``), the hours' record counts built before and those records
    (a batch lands whole, so no batch is counted twice)."""
    keys = ["cluster_id", "hour"]
    log = inputs.log_records("timestamp").withColumn("hour", F.date_trunc("hour", F.col("timestamp")))
    by_type = inputs.fold("log_health", log.groupBy(
        *keys, F.coalesce("record_type", F.lit("unknown")).alias("record_type")).count(), [*keys, "record_type"],
        {"count": F.sum("count")},
        lambda built: built.select(*keys, F.explode("records_by_type").alias("record_type", "count")))
    per_type = by_type.groupBy(*keys).agg(F.map_from_entries(F.array_sort(F.collect_list(  # keys in name order
        F.struct("record_type", "count")))).alias("records_by_type"))
    counts = ["records", "noop_records", "control_records", "batches"]
    volume = inputs.fold("log_health", log.groupBy(*keys).agg(
        F.count(F.lit(1)).alias("records"),
        F.sum((F.col("record_type") == NO_OP).cast("long")).alias("noop_records"),
        F.sum(F.col("is_control").cast("long")).alias("control_records"),
        F.countDistinct("batch_base_offset").alias("batches"),
        F.min("log_offset").alias("from_offset"), F.max("log_offset").alias("to_offset")), keys,
        {**{c: F.sum(c) for c in counts}, "from_offset": F.min("from_offset"), "to_offset": F.max("to_offset")},
        lambda built: built.filter(F.col("records") > 0))  # (an hour of no record: no volume)
    crc = (inputs.landed_from("batches", "max_timestamp").filter(~F.col("crc_valid"))
           .groupBy("cluster_id", F.date_trunc("hour", F.col("max_timestamp")).alias("hour"))
           .agg(F.count(F.lit(1)).alias("crc_failures")))
    divergent = (inputs.landed_from("divergence", "loser_timestamp")
                 .groupBy("cluster_id", F.date_trunc("hour", F.col("loser_timestamp")).alias("hour"))
                 .agg(F.count(F.lit(1)).alias("divergent_records")))
    snaps = (inputs.from_since(_snapshot_files(inputs).groupBy("cluster_id", "snapshot_id")
                               .agg(F.max("timestamp").alias("timestamp"), F.max("bytes").alias("bytes")), "timestamp")
             .groupBy("cluster_id", F.date_trunc("hour", F.col("timestamp")).alias("hour"))
             .agg(F.count(F.lit(1)).alias("snapshots"), F.sum("bytes").alias("snapshot_bytes")))
    out = volume.join(per_type, ["cluster_id", "hour"], "left")
    for extra in (crc, divergent, snaps):
        out = out.join(extra, ["cluster_id", "hour"], "full_outer")
    zero = ["records", "noop_records", "control_records", "batches", "crc_failures", "divergent_records",
            "snapshots", "snapshot_bytes"]
    out = out.fillna(0, subset=zero).withColumn(
        "noop_share", F.when(F.col("records") > 0, F.col("noop_records") / F.col("records")))
    return select_table(out.filter(F.col("hour").isNotNull()), "log_health")


def snapshot_times(table: Callable[[str], DataFrame]) -> DataFrame:
    """Per snapshot (``cluster_id``, ``snapshot_id``): the time of its last contained record (``timestamp``), from its
    header (the greatest, should copies differ)."""
    return (table("snapshot_header").filter(F.col("source") == "snapshot")
            .groupBy("cluster_id", "snapshot_id")
            .agg(F.timestamp_millis(F.max("last_contained_log_timestamp")).alias("timestamp")))


def _snapshot_files(inputs: Inputs) -> DataFrame:
    """Every snapshot of every node, with its header time, from the latest ledger row of each of its files: one row
    however many files it has (a data directory found under two roots, a snapshot Kafka renamed to
    ``.checkpoint.deleted`` as it deleted it), its size and records the largest file's, deleted where a file is."""
    files = inputs.table("files").filter(F.col("file_kind") == "snapshot")
    kept = ("cluster_id", "node_id", "snapshot_id", "size", "records", "deleted_snapshot")
    latest = files.groupBy("path").agg(F.max_by(F.struct(*kept), "ingested_at").alias("f")).select("f.*")
    per = latest.groupBy("cluster_id", "node_id", "snapshot_id").agg(
        F.max("size").alias("bytes"), F.max("records").alias("records"), F.bool_or("deleted_snapshot").alias("deleted"))
    return (per.join(snapshot_times(inputs.table), ["cluster_id", "snapshot_id"], "left")
            .select("cluster_id", "node_id", "snapshot_id", "bytes", "records", "deleted",
                    (F.split("snapshot_id", "-").getItem(0).try_cast("long") - 1).alias("log_offset"),
                    "timestamp"))


def snapshots(inputs: Inputs) -> DataFrame:
    """Every snapshot file with its offset, time, size and the distance from the node's previous one."""
    s = _snapshot_files(inputs).filter(F.col("log_offset").isNotNull())
    w = Window.partitionBy("cluster_id", "node_id").orderBy("log_offset", "snapshot_id")
    s = (s.withColumn("offsets_since_previous", F.col("log_offset") - F.lag("log_offset").over(w))
         .withColumn("seconds_since_previous", seconds_between(F.lag("timestamp").over(w), F.col("timestamp"))))
    return select_table(s, "snapshots")


def log_gaps(inputs: Inputs) -> DataFrame:
    """Ranges of log offsets missing between landed records. Incrementally (``LOG``), from a landed offset ``since``
    on: the gaps after it."""
    if inputs.since is None:
        log = inputs.log_records().select("cluster_id", "log_offset")
    else:  # the records after `since`, and `since` itself, where the first gap after it begins: a record there (landed
        # by an earlier run, as a rule: reading it would read that run's rows) makes no other gap
        log = inputs.log_records(after=True).select("cluster_id", "log_offset")
        log = log.unionByName(inputs.cuts(log).select("cluster_id", F.col("since").alias("log_offset")))
    w = Window.partitionBy("cluster_id").orderBy("log_offset")
    gaps = (log.withColumn("_prev", F.lag("log_offset").over(w))
            .filter(F.col("log_offset") > F.col("_prev") + 1)
            .select("cluster_id", (F.col("_prev") + 1).alias("from_offset"),
                    (F.col("log_offset") - 1).alias("to_offset"),
                    (F.col("log_offset") - F.col("_prev") - 1).alias("missing")))
    return select_table(gaps, "log_gaps")


# What can give a table rows from a cut on, where that is less than all it reads (``kraftlog.spark.analyze`` skips
# the table in an increment where none of it changed since the cut): entity kinds with a version begun or ended since,
# BIRTHS, a partition born since, and SNAPSHOT_FILES, a snapshot file's ledger row landed since. ``topic_lifecycle``
# reads the partitions and the landed records only around the topics' versions and the partitions born; ``snapshots``
# reads only the snapshot files' ledger rows and headers, which land with them.
BIRTHS = "partition births"
SNAPSHOT_FILES = "snapshot files"
CHANGED_BY: dict[str, frozenset[str]] = {"topic_lifecycle": frozenset({"topics", BIRTHS}),
                                         "snapshots": frozenset({SNAPSHOT_FILES})}

BUILDERS: dict[str, Callable[[Inputs], DataFrame]] = {
    "leader_elections": leader_elections, "isr_changes": isr_changes, "under_replicated": under_replicated,
    "under_min_isr": under_min_isr, "broker_lifecycle": broker_lifecycle,
    "broker_fenced_periods": broker_fenced_periods, "controller_leadership": controller_leadership,
    "voter_changes": voter_changes, "feature_changes": feature_changes, "zk_migration": zk_migration,
    "reassignments": reassignments, "topic_lifecycle": topic_lifecycle, "config_changes": config_changes,
    "quota_changes": quota_changes, "acl_changes": acl_changes, "scram_changes": scram_changes,
    "log_health": log_health, "snapshots": snapshots, "log_gaps": log_gaps,
}
