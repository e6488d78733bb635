"""Where each cluster's replay starts, from its landed rows, at a cost that follows what landed since the last build.

The rules are ``kraftlog.state.bases``'s; this module gathers what they read per cluster (a ``ClusterBase``): the
last gap-free run of its landed log offsets, its last offset and record time, the snapshots Kafka would load (no
corrupt batch) and the log's batch epoch at their offsets.

* ``cluster_bases`` reads every landed row of the clusters asked for;
* ``carry_bases`` goes on from what the last build saw (kept in ``replay_state``, with the cluster's ledger mark,
  ``kraftlog.spark.landed``): while the ledger up to that mark is unchanged, the rows landed since are those of
  later ingest runs, and only those are read. Log records after the last offset extend the last run (or begin a
  new one after a gap); a snapshot with rows landed since is summarised again, whole. A cluster with a log record
  landed since at or before its last offset (a late older file, a copy replaced) is left to ``cluster_bases``.

Either way a cluster gets the same ``ClusterBase``: an hourly build reads the hour's rows, not years of them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from kraftlog.spark.predicates import Scope, of_clusters, only_clusters
from kraftlog.spark.session import JobThreads, local_frame
from kraftlog.state.bases import Base, SnapshotRef, choose_base, parse_snapshot_id, snapshot_reach
from kraftlog.tables.definitions import catalog
from kraftlog.tables.rows import CORRUPT_BATCH

if TYPE_CHECKING:
    from kraftlog.spark.store import TableStore

TableSource = Callable[[str], DataFrame]  # a landed table by name (records, topic_record, ...)


@dataclass(frozen=True)
class LandedTables:
    """The landed tables of a store as a ``TableSource``, which also tells, from the tables' logs, which of them
    may hold rows of some clusters (``TableStore.may_hold``)."""

    store: TableStore

    def __call__(self, name: str) -> DataFrame:
        return self.store.read(catalog()[name])

    def may_hold(self, name: str, clusters: list[str]) -> bool:
        return self.store.may_hold(catalog()[name], clusters)


def scoped(table: TableSource, name: str, where: Scope) -> DataFrame:
    """The rows of ``table``'s ``name`` in ``where``: of a store's tables, read from only the files whose statistics
    let them hold some (``TableStore.read``)."""
    if isinstance(table, LandedTables):
        return table.store.read(catalog()[name], where)
    return where.select(table(name))


def may_hold(table: TableSource, name: str, clusters: list[str]) -> bool:
    """Whether ``table``'s ``name`` may hold rows of ``clusters``: True unless its store's log tells it holds none
    (a source that is not a store's cannot tell)."""
    return not isinstance(table, LandedTables) or table.may_hold(name, clusters)


@dataclass
class ClusterBase:
    """One replay: an output cluster id, the cluster whose rows it reads, its base and log range."""

    cluster_id: str
    source_cluster: str
    base: Base
    last: int | None  # last log offset (None: no log is applied, only the base snapshot)
    last_ms: int | None = None  # time of the last log record
    snapshots: list[SnapshotRef] = field(default_factory=list)
    log_epochs: dict[int, int] = field(default_factory=dict)
    snapshot_digests: dict[str, int] = field(default_factory=dict)  # snapshot id -> digest of its landed records
    resume_from: int | None = None  # go on from this offset, from the state the last build left (state rows)
    carried: list[str] = field(default_factory=list)  # problems the last build found before resume_from
    start: int | None = None  # first offset of the last gap-free run of landed log offsets

    def reach(self, s: SnapshotRef) -> tuple[bool, str]:
        return snapshot_reach(s, self.base, self.last, self.log_epochs)


def based(cluster_id: str, start: int | None, last: int | None, last_ms: int | None,
          snapshots: list[SnapshotRef], log_epochs: dict[int, int], digests: dict[str, int]) -> ClusterBase:
    """A cluster's ``ClusterBase`` from what its base is chosen from."""
    return ClusterBase(cluster_id, cluster_id, choose_base(start, last, snapshots, log_epochs), last, last_ms,
                       snapshots, log_epochs, digests, start=start)


def log_digest() -> Column:
    """A log record's share of a cluster's order-free digest (xor over its records): offset, epoch, value."""
    return F.xxhash64("log_offset", "batch_epoch", "value_hash")


@dataclass(frozen=True)
class _Run:
    """A cluster's log records (of some rows): first and last offset, the greatest offset that follows a gap among
    them (``inner``), the last record time, count and digest, and their record types (when asked for)."""

    first: int
    last: int
    inner: int | None
    last_ms: int | None
    records: int
    digest: int
    types: frozenset[str] | None = None


def _runs(log: DataFrame, types: bool = False) -> dict[str, _Run]:
    kinds = [F.collect_set("record_type").alias("types")] if types else []
    rows = (log.select("cluster_id", "log_offset", "timestamp", *(["record_type"] if types else []),
                       log_digest().alias("_h"))
            .groupBy("cluster_id")
            .agg(F.min("log_offset").alias("first"), F.max("log_offset").alias("last"),
                 F.max(F.unix_millis("timestamp")).alias("last_ms"), F.count("*").alias("n"),
                 F.bit_xor("_h").alias("d"), *kinds)
            .collect())
    # a log offset is a log record's key in its cluster: as many records as offsets from the first to the last, and
    # none is missing; only the other clusters' offsets are ordered to find their gaps
    gapped = [r["cluster_id"] for r in rows if r["n"] != r["last"] - r["first"] + 1]
    inner = _inner(log, gapped) if gapped else {}
    return {r["cluster_id"]: _Run(r["first"], r["last"], inner.get(r["cluster_id"]), r["last_ms"], r["n"], r["d"] or 0,
                                  frozenset(r["types"]) if types else None) for r in rows}


def _inner(log: DataFrame, clusters: list[str]) -> dict[str, int | None]:
    """Per cluster of ``clusters``, the greatest of its log offsets that follows a gap (None: none does)."""
    prev = F.lag("log_offset").over(Window.partitionBy("cluster_id").orderBy("log_offset"))
    gap = prev.isNotNull() & (F.col("log_offset") != prev + 1)
    rows = (log.filter(of_clusters(clusters)).select("cluster_id", "log_offset", gap.alias("_gap"))
            .groupBy("cluster_id").agg(F.max(F.when(F.col("_gap"), F.col("log_offset"))).alias("inner"))
            .collect())
    return {r["cluster_id"]: r["inner"] for r in rows}


@dataclass
class _Snapshots:
    """Per cluster, the usable snapshots among some, the log's epoch at their offsets, and their digests."""

    refs: dict[str, list[SnapshotRef]] = field(default_factory=dict)
    epochs: dict[str, dict[int, int]] = field(default_factory=dict)
    digests: dict[str, dict[str, int]] = field(default_factory=dict)


def _snapshots(table: TableSource, snaps: DataFrame, log: DataFrame | None) -> _Snapshots:
    """The usable snapshots among ``snaps`` (snapshot records) and the epoch ``log`` holds at their offsets (None:
    not looked up). A snapshot with a record Kafka would not load (a corrupt batch) is no base."""
    headers = (table("snapshot_header").filter(F.col("source") == "snapshot")
               .groupBy("cluster_id", "snapshot_id").agg(F.max("last_contained_log_timestamp").alias("header_ts")))
    rows = (snaps.groupBy("cluster_id", "snapshot_id")
            .agg(F.max("log_offset").alias("offset"), F.bool_or(F.col("status") == CORRUPT_BATCH).alias("bad"),
                 F.bit_xor(F.xxhash64("snapshot_seq", "value_hash")).alias("digest"))
            .join(headers, ["cluster_id", "snapshot_id"], "left")
            .collect())
    out = _Snapshots()
    for r in rows:
        parsed = parse_snapshot_id(r["snapshot_id"])
        if r["bad"] or parsed is None:  # (bootstrap.checkpoint is no snapshot of the log)
            continue
        c = r["cluster_id"]
        out.refs.setdefault(c, []).append(SnapshotRef(r["snapshot_id"], r["offset"], parsed[1], r["header_ts"] or 0))
        out.digests.setdefault(c, {})[r["snapshot_id"]] = r["digest"] or 0
    if log is not None:
        points = [(c, s.offset) for c, refs in out.refs.items() for s in refs]
        for (c, offset), epoch in log_epochs(log, points).items():
            out.epochs.setdefault(c, {})[offset] = epoch
    return out


def log_epochs(log: DataFrame, points: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
    """The batch epoch of the log records at ``points`` (cluster, offset) that ``log`` holds: a broadcast semi-join
    over the offsets between the lowest and highest point (Parquet skips the rest), not a join of the whole log."""
    if not points:
        return {}
    at = F.broadcast(local_frame(log.sparkSession, sorted(set(points)), "cluster_id string, log_offset long"))
    lo, hi = min(o for _, o in points), max(o for _, o in points)
    rows = (log.filter(F.col("log_offset").between(lo, hi)).join(at, ["cluster_id", "log_offset"], "left_semi")
            .select("cluster_id", "log_offset", "batch_epoch").collect())
    return {(r["cluster_id"], r["log_offset"]): r["batch_epoch"] for r in rows if r["batch_epoch"] is not None}


def _sources(table: TableSource, clusters: list[str] | None, where: Scope | None = None
             ) -> tuple[DataFrame, DataFrame]:
    """The log records and the snapshot records (of ``clusters``, else of every cluster; ``where``: only those in
    that scope)."""
    records = only_clusters(table("records"), clusters) if where is None else scoped(table, "records", where)
    return records.filter(F.col("source") == "log"), records.filter(F.col("source") == "snapshot")


def cluster_bases(table: TableSource, clusters: list[str] | None = None) -> list[ClusterBase]:
    """The base of replay of every cluster (or of ``clusters``), from all of its landed rows."""
    log, snaps = _sources(table, clusters)
    runs = _runs(log)
    found = _snapshots(table, snaps, log)
    out = []
    for cid in sorted(runs.keys() | found.refs.keys()):
        run = runs.get(cid)
        refs, epochs, digests = found.refs.get(cid, []), found.epochs.get(cid, {}), found.digests.get(cid, {})
        if run is None:
            out.append(based(cid, None, None, None, refs, epochs, digests))
        else:
            out.append(based(cid, run.inner if run.inner is not None else run.first, run.last, run.last_ms, refs,
                             epochs, digests))
    return out


@dataclass
class Carried:
    """What ``carry_bases`` found: the bases carried on, and per cluster the count and digest of the log records
    landed since (all after its last offset) and their record types."""

    bases: dict[str, ClusterBase]
    added: dict[str, tuple[int, int]]
    types: dict[str, frozenset[str]] = field(default_factory=dict)


def carry_bases(table: TableSource, previous: Mapping[str, ClusterBase], since: Mapping[str, str]) -> Carried:
    """The bases of the clusters of ``since`` (cluster -> the ledger run id up to which ``previous`` saw its rows), from
    ``previous`` and the rows landed by later runs; a cluster left out needs ``cluster_bases`` (see the module
    docstring)."""
    if not since:
        return Carried({}, {})
    later = Scope.of([], since, "run_id", strict=True)
    log, snaps = _sources(table, list(since))
    recent, landed_snaps = _sources(table, list(since), later)
    with JobThreads(snaps.sparkSession, 1) as pool:  # two small jobs: each waits more on scheduling than on cores
        new_snaps = pool.submit(lambda: landed_snaps.select("cluster_id", "snapshot_id").distinct().collect())
        runs = _runs(recent, types=True)
        touched: dict[str, set[str]] = {}
        for r in new_snaps.result():
            touched.setdefault(r["cluster_id"], set()).add(r["snapshot_id"])
    out = Carried({}, {})
    need: list[tuple[str, int]] = []  # (cluster, offset): the log's epoch at a snapshot it reaches only now
    for c in since:
        p, run = previous[c], runs.get(c)
        if run is not None and p.last is not None and run.first <= p.last:
            continue  # rows landed at offsets replay already read: their summary is read anew
        start, last, last_ms = p.start, p.last, p.last_ms
        if run is not None:
            start = run.inner if run.inner is not None else (
                p.start if p.last is not None and run.first == p.last + 1 else run.first)
            last = run.last
            last_ms = max((m for m in (p.last_ms, run.last_ms) if m is not None), default=None)
        gone = touched.get(c, set())
        kept = [s for s in p.snapshots if s.snapshot_id not in gone]
        offsets = {s.offset for s in kept}
        out.bases[c] = ClusterBase(c, c, p.base, last, last_ms, kept,
                                   {o: e for o, e in p.log_epochs.items() if o in offsets},
                                   {i: d for i, d in p.snapshot_digests.items() if i not in gone}, start=start)
        out.added[c], out.types[c] = (0, 0), frozenset()
        if run is not None:
            out.added[c], out.types[c] = (run.records, run.digest), run.types or frozenset()
            need += [(c, s.offset) for s in kept if s.offset not in p.log_epochs and run.first <= s.offset <= run.last]
    wanted = {(c, s) for c, ids in touched.items() if c in out.bases for s in ids}
    # a carried cluster's records from the first offset landed since on were all landed since (those before end
    # before it): the log's epoch there is looked up in the rows of the runs since, which Parquet finds by run
    firsts = {c: run.first for c, run in runs.items() if c in out.bases}
    _add_snapshots(table, log, snaps, out.bases, wanted, need, (recent, firsts))
    for c, b in out.bases.items():
        out.bases[c] = based(c, b.start, b.last, b.last_ms, b.snapshots, b.log_epochs, b.snapshot_digests)
    return out


def _add_snapshots(table: TableSource, log: DataFrame, snaps: DataFrame, bases: dict[str, ClusterBase],
                   wanted: set[tuple[str, str]], need: list[tuple[str, int]],
                   recent: tuple[DataFrame, Mapping[str, int]]) -> None:
    """Summarise the snapshots ``wanted`` (rows landed since) again, whole, into ``bases``, and look up the log's epoch
    at their offsets and at ``need``: in ``log``, or where a cluster's records from an offset on are all in a frame
    of their own (``recent``: that frame and the offset per cluster), at those offsets in that frame. An hour of a
    fleet brings snapshots of many clusters at offsets far apart: ``log_epochs`` would scan every record between."""
    if wanted:
        pairs = F.broadcast(local_frame(log.sparkSession, sorted(wanted), "cluster_id string, snapshot_id string"))
        chosen = snaps.filter(of_clusters(sorted({s for _, s in wanted}), "snapshot_id")).join(
            pairs, ["cluster_id", "snapshot_id"], "left_semi")
        again = _snapshots(table, chosen, None)
        for c, refs in again.refs.items():
            bases[c].snapshots = [*bases[c].snapshots, *refs]
            bases[c].snapshot_digests.update(again.digests[c])
            need += [(c, s.offset) for s in refs]
    rows, firsts = recent
    late = [(c, o) for c, o in need if c in firsts and o >= firsts[c]]
    early = sorted(set(need) - set(late))
    for (c, offset), epoch in [*log_epochs(log, early).items(), *log_epochs(rows, late).items()]:
        bases[c].log_epochs[offset] = epoch


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


# -- kept between builds (``replay_state``) -----------------------------------------------------------------------

def summary_row(b: ClusterBase) -> dict[str, Any]:
    """What ``replay_state`` keeps of a cluster's base to carry it on (``from_summary``)."""
    return {"log_start": b.start, "last_timestamp": None if b.last_ms is None else b.last_ms * 1000,
            "snapshots": [{"snapshot_id": s.snapshot_id, "offset": s.offset, "epoch": s.epoch,
                           "header_timestamp": s.timestamp * 1000, "log_epoch": b.log_epochs.get(s.offset),
                           "digest": b.snapshot_digests.get(s.snapshot_id)}
                          for s in sorted(b.snapshots, key=lambda s: (s.offset, s.snapshot_id))]}


def from_summary(cluster_id: str, row: Mapping[str, Any]) -> ClusterBase:
    """The ``ClusterBase`` a ``replay_state`` row kept (``summary_row``; times read as epoch milliseconds)."""
    snaps = row["snapshots"] or []
    return based(cluster_id, row["log_start"], row["last_offset"], row["last_ms"],
                 [SnapshotRef(s["snapshot_id"], s["offset"], s["epoch"], s["header_ms"]) for s in snaps],
                 {s["offset"]: s["log_epoch"] for s in snaps if s["log_epoch"] is not None},
                 {s["snapshot_id"]: s["digest"] for s in snaps if s["digest"] is not None})


def summary_columns() -> list[Column]:
    """The ``replay_state`` columns ``from_summary`` reads, times as epoch milliseconds."""
    return [F.unix_millis("last_timestamp").alias("last_ms"),
            F.transform("snapshots", lambda s: s.withField("header_ms", F.unix_millis(s["header_timestamp"])))
            .alias("snapshots")]
