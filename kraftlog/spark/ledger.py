"""What an ingest run reads of the ``files`` ledger, in Spark: it collects only what changed and what it plans with.

The ledger holds a row per file version ever landed, so it grows with the history: a fleet's hourly runs add a row
per grown segment and per snapshot of every node, millions a year. A run needs of it only the latest row of each path
it found, and collects of that (``compare``) only the rows of the files that changed since and, per data directory,
the names its unchanged files landed under; of the clusters it lands files of, what it plans them against
(``landed_before``): which of them landed before, from which data directories, the offset intervals landed (only the
maximal ones: an interval inside another adds nothing to an overlap test) and which of its own snapshots landed.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from kraftlog.planning import Landed
from kraftlog.spark.predicates import of_clusters
from kraftlog.spark.session import local_frame
from kraftlog.spark.store import TableStore
from kraftlog.tables.definitions import Catalog
from kraftlog.wire.files import SEGMENT

# the columns of a ledger row a run plans with
COLUMNS = ("path", "cluster_id", "node_id", "data_dir", "file_kind", "snapshot_id", "size", "content_sha256",
           "first_offset", "last_offset", "ingested_at", "status", "batches", "control_batches", "records",
           "metadata_version", "tail_position", "tail_sha256")


@dataclass(frozen=True)
class Compared:
    """A run's listing against the ledger."""

    changed: dict[str, dict[str, Any] | None]  # path -> its latest ledger row (None: new), of the files changed since
    names: dict[str, set[tuple[str, int | None]]]  # data dir -> the (cluster, node)s its unchanged files landed as


@dataclass(frozen=True)
class LandedBefore:
    """Of the clusters a run lands files of, what earlier runs landed."""

    clusters: frozenset[str]  # those the ledger has
    landed: dict[str, Landed]  # their maximal log offset intervals, and those of the run's snapshot ids landed
    dirs: dict[str, frozenset[str]]  # their data directories


def compare(store: TableStore, cat: Catalog, listed: Iterable[tuple[str, int, int, str]]) -> Compared:
    """The files of ``listed`` (path, size, modification time in ms, data directory) that are new or changed since
    the latest ledger row of their path (size or modification time), with that row (``COLUMNS`` and ``mtime_ms``);
    and per data directory the names its unchanged files landed under (``kraftlog.identity.renaming``)."""
    rows = sorted(set(listed))
    if not rows:
        return Compared({}, {})
    found = local_frame(store.spark, rows, "path string, _size long, _mtime long, _dir string")
    newest = Window.partitionBy("path").orderBy(F.col("ingested_at").desc())
    ledger = _ledger(store, cat).select(
        *COLUMNS, (F.unix_micros("modification_time") / 1000).cast("long").alias("mtime_ms"))
    latest = ledger.join(found.select("path"), "path").withColumn("_n", F.row_number().over(newest)) \
        .filter(F.col("_n") == 1).drop("_n")
    # no broadcast hint: Spark broadcasts the listing when it is small, and joins it otherwise (an archive that
    # keeps every snapshot lists millions of files)
    both = found.join(latest, "path", "left")
    same = (F.col("size") == F.col("_size")) & (F.col("mtime_ms") == F.col("_mtime"))
    changed = {r["path"]: (r.asDict() if r["cluster_id"] is not None else None)
               for r in both.filter(F.col("cluster_id").isNull() | ~same).drop("_size", "_mtime", "_dir").collect()}
    names: dict[str, set[tuple[str, int | None]]] = {}
    for r in both.filter(same).select("_dir", "cluster_id", "node_id").distinct().collect():
        names.setdefault(r["_dir"], set()).add((r["cluster_id"], r["node_id"]))
    return Compared(changed, names)


def landed_before(store: TableStore, cat: Catalog, clusters: Iterable[str], snapshots: Iterable[str]
                  ) -> LandedBefore:
    """What earlier runs landed of ``clusters``; of the snapshot ids, only those of ``snapshots`` (the run's)."""
    wanted = sorted(set(clusters))
    if not wanted:
        return LandedBefore(frozenset(), {}, {})
    rows = _ledger(store, cat).filter(of_clusters(wanted))
    spans = rows.filter((F.col("file_kind") == SEGMENT) & F.col("first_offset").isNotNull()
                        & F.col("last_offset").isNotNull()).select("cluster_id", "first_offset", "last_offset")
    intervals: dict[str, list[tuple[int, int]]] = {}
    for r in maximal(spans).collect():
        intervals.setdefault(r["cluster_id"], []).append((r["first_offset"], r["last_offset"]))
    ids = sorted(set(snapshots))
    snap = F.col("snapshot_id")
    per = rows.groupBy("cluster_id").agg(
        F.collect_set("data_dir").alias("dirs"),
        F.collect_set(F.when(snap.isin(ids), snap) if ids else F.lit(None).cast("string")).alias("snapshots"))
    landed, dirs = {}, {}
    for r in per.collect():
        c = r["cluster_id"]
        landed[c] = Landed(tuple(sorted(intervals.get(c, ()))), frozenset(r["snapshots"]))
        dirs[c] = frozenset(r["dirs"])
    return LandedBefore(frozenset(dirs), landed, dirs)


def maximal(spans: DataFrame) -> DataFrame:
    """The distinct intervals (``first_offset``, ``last_offset``) of each ``cluster_id`` that no other holds: in
    order of first offset (the longest first), those reaching past every one before."""
    before = Window.partitionBy("cluster_id").orderBy(F.col("first_offset"), F.col("last_offset").desc()) \
        .rowsBetween(Window.unboundedPreceding, -1)
    return spans.distinct().withColumn("_reach", F.max("last_offset").over(before)) \
        .filter(F.col("_reach").isNull() | (F.col("last_offset") > F.col("_reach"))).drop("_reach")


def absent(store: TableStore, cat: Catalog, clusters: Iterable[str], found: Iterable[str]) -> tuple[int, str | None]:
    """How many paths of ``clusters`` the ledger has that are not among ``found``, and the first of them."""
    listed = local_frame(store.spark, [(p,) for p in sorted(set(found))], "path string")
    gone = _ledger(store, cat).filter(of_clusters(sorted(set(clusters)))).select("path").distinct() \
        .join(listed, "path", "left_anti")
    row = gone.agg(F.count("*").alias("n"), F.min("path").alias("first")).collect()[0]
    return int(row["n"]), row["first"]


def _ledger(store: TableStore, cat: Catalog) -> DataFrame:
    return store.read(cat.core["files"])
