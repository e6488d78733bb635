"""The applied metadata log in Spark: where each cluster's replay starts and when each record takes effect.

* **bases**: per cluster, the last gap-free run of log offsets, the snapshots and the transaction
  markers are summarised in Spark; the few resulting rows go to the driver, which applies
  ``kraftlog.state.bases`` and ``kraftlog.state.transactions`` (the rules of the local replay);
* **applied**: the rows of a typed table as replay applies them, each with an *effective* offset and
  time and ``seq`` (the order of application within one effective offset): the base snapshot's rows
  at the snapshot's offset and header time; then the log rows from the base on, at their own offset,
  or at the End of the metadata transaction they belong to; rows of aborted transactions, and of one
  still open at the end, are left out (FACTS d.3). KRaft control records are not part of metadata
  transactions and always apply at their own offset.

Bases and transactions reach the executors as literals and a small broadcast table, so applying a
typed table is a scan and a filter, never a shuffle of the log.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from kraftlog.state.bases import Base, SnapshotRef, choose_base, parse_snapshot_id, snapshot_reach
from kraftlog.state.transactions import MARKERS, Transaction, transactions

TableSource = Callable[[str], DataFrame]  # a landed table by name (records, topic_record, ...)

EFFECTIVE = ("eff_offset", "eff_ts", "seq")


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
    transactions: list[Transaction] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def reach(self, s: SnapshotRef) -> tuple[bool, str]:
        return snapshot_reach(s, self.base, self.last, self.log_epochs)


def cluster_bases(table: TableSource, clusters: list[str] | None = None) -> list[ClusterBase]:
    """The base of replay of every cluster (or of ``clusters``), with its metadata transactions."""
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
    markers = (log.filter((F.col("status") == "ok") & F.col("record_type").isin(*MARKERS))
               .select("cluster_id", "log_offset", F.unix_millis("timestamp").alias("ms"), "record_type")
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
    marks: dict[str, list[tuple[int, int, str]]] = {}
    for r in sorted(markers, key=lambda r: (r["cluster_id"], r["log_offset"])):
        marks.setdefault(r["cluster_id"], []).append((r["log_offset"], r["ms"], r["record_type"]))
    ranges = {r["cluster_id"]: (r["start"], r["last"], r["last_ts"]) for r in runs}
    out = []
    for cid in sorted(ranges.keys() | by_cluster.keys()):
        start, last, last_ts = ranges.get(cid, (None, None, None))
        snapshots = by_cluster.get(cid, [])
        base = choose_base(start, last, snapshots, log_epochs.get(cid, {}))
        txns, problems = transactions(m for m in marks.get(cid, []) if m[0] >= base.first)
        out.append(ClusterBase(cid, cid, base, last, last_ts, snapshots, log_epochs.get(cid, {}), txns,
                               [p for p in [base.problem] if p] + problems))
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


def _literal_map(entries: dict[str, Any], key: Column, empty_type: str) -> Column:
    """``entries[key]`` evaluated on the executors (a map literal; null for a missing key)."""
    if not entries:
        return F.lit(None).cast(empty_type)
    pairs = [F.lit(x) for k, v in sorted(entries.items()) for x in (k, v)]
    return F.try_element_at(F.create_map(*pairs), key)


class Applied:
    """Typed rows as replay applies them, per output cluster (see the module docstring)."""

    def __init__(self, spark: SparkSession, table: TableSource, bases: list[ClusterBase]):
        self.table = table
        self.base_keys: set[str] = set()  # snapshots that are the base of their own cluster's replay
        self.pseudo_keys: set[str] = set()  # snapshots replayed alone (pseudo-clusters <cluster>@<snapshot>)
        self.header_ms: dict[str, Column] = {}
        for b in bases:
            snap = b.base.snapshot
            if snap is None:
                continue
            key = f"{b.source_cluster}\x00{snap.snapshot_id}"
            if b.cluster_id == b.source_cluster:
                self.base_keys.add(key)
            elif b.cluster_id == pseudo_cluster(b.source_cluster, snap.snapshot_id):
                self.pseudo_keys.add(key)
            else:
                raise ValueError(f"{b.cluster_id}: a replay reads its own cluster's rows or is a pseudo-cluster")
            self.header_ms[key] = F.lit(snap.timestamp).cast("long")
        self.first = {b.source_cluster: F.lit(b.base.first).cast("long") for b in bases if b.last is not None}
        rows = [(b.cluster_id, t.begin, t.close, t.close_ts, t.committed)
                for b in bases if b.last is not None for t in b.transactions]
        self.txns = F.broadcast(spark.createDataFrame(
            rows, "txn_cluster string, txn_begin long, txn_close long, txn_close_ms long, txn_committed boolean")
        ) if rows else None

    def rows(self, name: str, control: bool = False) -> DataFrame:
        """Rows of typed table ``name``; ``control`` records apply at their own offset (not in transactions)."""
        return self.apply(self.table(name), control)

    def apply(self, typed: DataFrame, control: bool = False) -> DataFrame:
        """``typed`` (rows keyed like the typed tables) as replay applies them."""
        columns = [c for c in typed.columns if c != "cluster_id"]
        key = F.concat(F.col("cluster_id"), F.lit("\x00"), F.col("snapshot_id"))
        outputs = F.array_compact(F.array(
            F.when(key.isin(*self.base_keys), F.col("cluster_id")) if self.base_keys else F.lit(None).cast("string"),
            F.when(key.isin(*self.pseudo_keys), F.concat(F.col("cluster_id"), F.lit("@"), F.col("snapshot_id")))
            if self.pseudo_keys else F.lit(None).cast("string")))
        snap = (typed.filter((F.col("source") == "snapshot")
                             & key.isin(*(self.base_keys | self.pseudo_keys) or {""}))
                .select(F.explode(outputs).alias("cluster_id"), *columns,
                        F.col("log_offset").alias("eff_offset"),
                        F.timestamp_millis(_literal_map(self.header_ms, key, "long")).alias("eff_ts"),
                        F.col("snapshot_seq").alias("seq")))
        first = _literal_map(self.first, F.col("cluster_id"), "long")
        log = typed.filter((F.col("source") == "log") & (F.col("log_offset") >= first))
        if control or self.txns is None:
            return snap.unionByName(log.select("cluster_id", *columns, F.col("log_offset").alias("eff_offset"),
                                               F.col("timestamp").alias("eff_ts"), F.col("log_offset").alias("seq")))
        inside = ((F.col("cluster_id") == F.col("txn_cluster")) & (F.col("log_offset") > F.col("txn_begin"))
                  & (F.col("txn_close").isNull() | (F.col("log_offset") < F.col("txn_close"))))
        applied = (log.join(self.txns, inside, "left")
                   .filter(F.col("txn_begin").isNull() | F.col("txn_committed"))
                   .select("cluster_id", *columns, F.coalesce("txn_close", "log_offset").alias("eff_offset"),
                           F.coalesce(F.timestamp_millis(F.col("txn_close_ms")), F.col("timestamp")).alias("eff_ts"),
                           F.col("log_offset").alias("seq")))
        return snap.unionByName(applied)
