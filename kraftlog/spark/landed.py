"""What landed in a warehouse since a run last looked: per cluster, a mark on the ingest ledger, and where the rows
landed since begin (the earliest log offset, the earliest hour).

An ingest run writes, per cluster it lands anything of, ledger rows (``files``) under its run id, and every row it
lands carries that id. A ``Mark`` is a cluster's greatest ledger run id with the count and digest of its ledger rows
up to that id. When, later, the ledger rows up to that id are still exactly those (``marks_held``), the rows landed
since are exactly the rows of later run ids, in every landed table (replaced records too: the divergence row of the
copy replaced is new). Run ids begin with the run's start time, so a run that started before another but committed
after it (it waited for the lease, or its host's clock was behind) breaks the check: then nothing tells what landed
since, and the caller builds from everything.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from kraftlog.analytics.events import NO_OP, snapshot_times
from kraftlog.spark.bases import TableSource, scoped
from kraftlog.spark.predicates import Scope, of_clusters
from kraftlog.spark.session import local_frame
from kraftlog.tables.definitions import catalog
from kraftlog.wire.files import SEGMENT


@dataclass(frozen=True)
class Mark:
    """A cluster's ledger as a run saw it: the greatest run id, and the count and digest of the rows up to it."""

    run: str | None  # None: no ledger row
    files: int
    digest: int


@dataclass(frozen=True)
class Landed:
    """Where the rows of a cluster landed since a mark begin: the first and last log offset of its new records
    (None: no record), and the earliest hour of any new row: a record, a batch copy that failed its CRC, a copy
    that lost (divergence), a snapshot file (None: none has a time); ``epoch``: the least raft epoch of its new
    records."""

    first: int | None
    last: int | None
    hour: datetime | None
    epoch: int | None = None

    def after(self, end: int | None) -> int | None:
        """The last offset landed before the first new record, where the log ended at ``end`` when last looked at
        (None: no new record): ``end`` when they all came after it, else the offset just before the first."""
        if self.first is None:
            return None
        return end if end is not None and self.first > end else self.first - 1


def landed_after(got: Mapping[str, Landed], ends: Mapping[str, int | None]) -> dict[str, int]:
    """Per cluster of ``got`` with new records, the last offset landed before the first of them (``Landed.after``
    its log's end in ``ends``)."""
    return {c: at for c, g in got.items() if (at := g.after(ends.get(c))) is not None}


@dataclass(frozen=True)
class Ledger:
    """The ingest ledger as a run found it, per cluster: its mark now (``marks``); for a cluster whose ledger rows up
    to the run id of its previous mark are still exactly those, that run id (``held``: the rows landed since are
    those of later ids); the greatest last log offset of its files (``ends``; None: no log record)."""

    marks: dict[str, Mark]
    held: dict[str, str]
    ends: dict[str, int | None]


def ledger_marks(spark: SparkSession, ledger: DataFrame, previous: Mapping[str, Mark]) -> Ledger:
    """The ``Ledger`` of ``ledger`` (the ``files`` table), held against the ``previous`` marks."""
    h = F.xxhash64(*catalog()["files"].key, "run_id")
    marks = local_frame(spark, [(c, m.run) for c, m in previous.items()], "cluster_id string, _mark string")
    upto = F.col("_mark").isNotNull() & (F.col("run_id") <= F.col("_mark"))
    rows = (ledger.join(F.broadcast(marks), "cluster_id", "left").groupBy("cluster_id")
            .agg(F.max("run_id").alias("run"), F.count("*").alias("files"), F.bit_xor(h).alias("digest"),
                 F.count(F.when(upto, 1)).alias("files_upto"), F.bit_xor(F.when(upto, h)).alias("digest_upto"),
                 F.max("last_offset").alias("end"))
            .collect())
    now = {r["cluster_id"]: Mark(r["run"], r["files"], r["digest"] or 0) for r in rows}
    held = {}
    for r in rows:
        was = previous.get(r["cluster_id"])
        if was is not None and was.run is not None and (r["files_upto"], r["digest_upto"] or 0) == (was.files,
                                                                                                  was.digest):
            held[r["cluster_id"]] = was.run
    return Ledger(now, held, {r["cluster_id"]: r["end"] for r in rows})


def landed_since(table: TableSource, since: Mapping[str, str]) -> dict[str, Landed]:
    """Per cluster of ``since`` (cluster -> run id) with rows landed by later runs: where they begin."""
    if not since:
        return {}
    later = Scope.of([], since, "run_id", strict=True)
    none_long = F.lit(None).cast("long")

    def times(df: DataFrame, column: str) -> DataFrame:
        return df.select("cluster_id", none_long.alias("first"), none_long.alias("last"), F.col(column).alias("t"),
                         F.lit(None).cast("int").alias("epoch"))

    records = scoped(table, "records", later).filter(F.col("source") == "log").select(
        "cluster_id", F.col("log_offset").alias("first"), F.col("log_offset").alias("last"),
        F.col("timestamp").alias("t"), F.col("batch_epoch").alias("epoch"))
    snapshots = (scoped(table, "files", later).filter(F.col("file_kind") == "snapshot")
                 .select("cluster_id", "snapshot_id").join(snapshot_times(table), ["cluster_id", "snapshot_id"]))
    parts = [records, times(scoped(table, "batches", later).filter(~F.col("crc_valid")), "max_timestamp"),
             times(scoped(table, "divergence", later), "loser_timestamp"), times(snapshots, "timestamp")]
    rows = (functools.reduce(DataFrame.unionByName, parts).groupBy("cluster_id")
            .agg(F.min("first").alias("first"), F.max("last").alias("last"),
                 F.unix_micros(F.date_trunc("hour", F.min("t"))).alias("hour"), F.min("epoch").alias("epoch"))
            .collect())
    return {r["cluster_id"]: Landed(r["first"], r["last"], None if r["hour"] is None
                                    else datetime.fromtimestamp(r["hour"] / 1e6, UTC), r["epoch"]) for r in rows}


def landing_runs(table: TableSource) -> Callable[[Scope], str | None]:
    """For a scope of the landed log cut by log offset (no cluster whole; ``strict``: after the cuts), the least run id
    that landed a record of it (None: none known). A record was landed with a ledger row of a segment of its cluster
    that was read up to its offset or beyond (a row's ``last_offset`` is the greatest offset of its file then), so the
    least run id of those rows is one (the ledger keeps every run's rows). Each scope is looked up once (a query of
    the ledger)."""
    segments = table("files").filter(F.col("file_kind") == SEGMENT).select("cluster_id", "last_offset", "run_id")

    @functools.cache
    def first(scope: Scope) -> str | None:
        if scope.whole or not scope.after or not all(type(at) is int for _, at in scope.after):
            return None
        cuts = F.broadcast(scope.cuts(segments.sparkSession, "_cut"))
        reached = F.col("last_offset") > F.col("_cut") if scope.strict else F.col("last_offset") >= F.col("_cut")
        return segments.join(cuts, "cluster_id").filter(reached).agg(F.min("run_id")).first()[0]  # type: ignore[index]

    return first


INT_MAX = 2**31 - 1  # (a limit is a Java int)


def state_records(table: TableSource, since: Mapping[str, str], whole: list[str], upto: int | None = None,
                  first: bool = False) -> int:
    """The log records other than NoOps landed in each cluster of ``since`` by runs after its run id, and in every
    cluster of ``whole`` (replayed or analysed from its base): the records that change what a run replays and
    analyses. A NoOp changes nothing, and a controller writes one every 500 ms (``metadata.max.idle.interval.ms``):
    an hour of a quiet cluster lands 7,200, of a fleet of 50 quiet clusters 360k, and few other records. ``first``:
    every record landed, NoOps and snapshots' too (what a first build reads, then scans in every step: the 10x
    corpus's 3.4M rows, 67,700 of them log records other than NoOps, took 58-75 s interpreted against 36-42 s
    compiled). ``upto``: counted up to that many at most (each task stops reading there: a first build of a big
    cluster is not read whole to learn it is big)."""
    scope = Scope.of(whole, since, "run_id", strict=True)
    if scope.empty:
        return 0
    records = table("records")
    if not first:
        records = records.filter((F.col("source") == "log") & (F.col("record_type") != NO_OP))
    records = scope.select(records)
    return (records if upto is None or upto > INT_MAX else records.limit(upto)).count()


def log_ends(table: TableSource, clusters: list[str]) -> dict[str, int]:
    """Per cluster of ``clusters``, its greatest landed log offset."""
    if not clusters:
        return {}
    rows = (table("records").filter((F.col("source") == "log") & of_clusters(clusters))
            .groupBy("cluster_id").agg(F.max("log_offset").alias("end")).collect())
    return {r["cluster_id"]: r["end"] for r in rows if r["end"] is not None}


__all__ = ["Landed", "Ledger", "Mark", "landed_after", "landed_since", "landing_runs", "ledger_marks",
           "log_ends", "state_records"]
