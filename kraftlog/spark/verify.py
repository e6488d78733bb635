"""The histories against the snapshots (``kraftlog verify --warehouse``): each snapshot the log reaches is replayed
alone, as a pseudo-cluster ``<cluster>@<snapshot>`` (``kraftlog.spark.bases.snapshot_bases``), and compared, entity by
entity and field by field, with the histories at its offset.

On histories that are up to date with the landed tables (``reconstruct`` ran since the last ingest), a check stands
as long as what it compared does: the snapshot's landed records (their digest) and the histories at its offset (the
same lineage, the offset before the resume offset: within a lineage a build only goes on from there). Each check is
kept in ``snapshot_checks``, so an hourly verify replays the snapshots that landed in the hour, not every snapshot of
the cluster's history again (``full``: every one). Histories not up to date are built aside from the landed tables
and every snapshot is checked; nothing is kept.
"""

from __future__ import annotations

import functools
import json
import logging
import operator
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa
from pyspark.sql import Column, SparkSession
from pyspark.sql import functions as F

from kraftlog.analytics.events import valid_at
from kraftlog.config import Config
from kraftlog.errors import NotBuilt
from kraftlog.spark.bases import ClusterBase, cluster_bases, pseudo_cluster, snapshot_bases
from kraftlog.spark.history import (
    History,
    HistoryBuild,
    built_clusters,
    differences,
    differing_json,
    landed,
    read_histories,
)
from kraftlog.spark.increments import plan_build
from kraftlog.spark.predicates import cluster_predicate, of_clusters
from kraftlog.spark.replay import replay
from kraftlog.spark.session import local_frame
from kraftlog.spark.store import TableStore, landed_clusters, new_run_id, store_for, writing
from kraftlog.state.entities import snapshot_checks_table
from kraftlog.state.local import Difference, SnapshotCheck, VerifyReport

log = logging.getLogger("kraftlog")

Checked = dict[tuple[str, str], list[Difference]]  # (cluster, snapshot id) -> what differs


def verify_tables(spark: SparkSession, config: Config, store: TableStore | None = None,
                  clusters: list[str] | None = None, full: bool = False) -> VerifyReport:
    """The histories vs. every reachable snapshot's contents, per cluster (or of ``clusters``); see the module
    docstring for what is replayed. ``full``: every snapshot checked again (a history row changed behind kraftlog's
    back is found only so)."""
    store = store or store_for(spark, config)
    clusters = landed_clusters(store, clusters)
    build_id = new_run_id()
    with writing(store, config, build_id, "verify"):
        source = landed(store)
        plan = plan_build(spark, store, source, clusters, full=False) if _built(store) else None
        if plan is None or plan.from_scratch or plan.run:  # histories aside, every snapshot checked
            bases = cluster_bases(source, clusters) if plan is None else plan.bases
            every = bases + snapshot_bases(bases)
            build = HistoryBuild(every, store, build_id, replay(spark, store, source, every, build_id, scratch=True))
            try:
                return compare_snapshots(spark, bases, build.histories, build.histories)
            finally:
                build.release()
        table = snapshot_checks_table()
        store.ensure(table)
        kept = Standing() if full else standing(store, plan.bases, plan.previous, clusters)
        fresh = [b for b in snapshot_bases(plan.bases)
                 if b.base.snapshot is not None and (b.source_cluster, b.base.snapshot.snapshot_id) not in kept.checks]
        log.info("verify: %d snapshot(s) to replay, %d kept checks stand, %d no longer do", len(fresh),
                 len(kept.checks), kept.dropped)
        build = HistoryBuild(fresh, store, build_id, replay(spark, store, source, fresh, build_id, scratch=True))
        try:
            report = compare_snapshots(spark, plan.bases, read_histories(store), build.histories, kept.checks)
        finally:
            build.release()
        if fresh or kept.dropped or full:
            rows = [*kept.rows, *check_rows(report, plan.bases, plan.previous, build_id, skip=kept.checks)]
            store.overwrite(table, store.stage_small(table, pa.Table.from_pylist(rows, schema=table.schema), build_id),
                            build_id, cluster_predicate(clusters))
        return report


def _built(store: TableStore) -> bool:
    """Whether the store has histories (``reconstruct`` ran)."""
    try:
        built_clusters(store)
    except NotBuilt:
        return False
    return True


@dataclass
class Standing:
    """The kept checks that stand (by snapshot, and as rows), and how many no longer do."""

    checks: Checked = field(default_factory=dict)
    rows: list[dict[str, Any]] = field(default_factory=list)
    dropped: int = 0


def standing(store: TableStore, bases: list[ClusterBase], states: Mapping[str, Mapping[str, Any]],
             clusters: list[str] | None) -> Standing:
    """The kept checks that still stand: of a snapshot the log reaches, its records unchanged (digest), the histories
    of the same lineage and a resume offset past the snapshot's."""
    by_cluster = {b.cluster_id: b for b in bases}
    checks = store.read(snapshot_checks_table())
    if clusters is not None:
        checks = checks.filter(of_clusters(clusters))
    snapshots = {(b.cluster_id, s.snapshot_id): s for b in bases for s in b.snapshots}
    out = Standing()
    for r in checks.withColumn("checked_at", F.unix_micros("checked_at")).collect():
        b, state = by_cluster.get(r["cluster_id"]), states.get(r["cluster_id"])
        snap = snapshots.get((r["cluster_id"], r["snapshot_id"]))
        stands = b is not None and state is not None and snap is not None and b.reach(snap)[0] and (
            r["lineage"] == state["lineage"] and r["snapshot_digest"] == b.snapshot_digests.get(snap.snapshot_id)
            and r["resume_offset"] is not None and snap.offset < r["resume_offset"])
        if not stands:
            out.dropped += 1
            continue
        row = r.asDict(recursive=True)
        out.rows.append(row)
        out.checks[(r["cluster_id"], r["snapshot_id"])] = [
            Difference(d["kind"], tuple(json.loads(d["key"])), d["field"], json.loads(d["histories"]),
                       json.loads(d["snapshot"])) for d in row["differences"] or []]
    return out


def check_rows(report: VerifyReport, bases: list[ClusterBase], states: Mapping[str, Mapping[str, Any]],
               build_id: str, skip: Checked | None = None) -> list[dict[str, Any]]:
    """``snapshot_checks`` rows of a report: one per snapshot checked (reachable), but those of ``skip``."""
    by_cluster = {b.cluster_id: b for b in bases}
    now = datetime.now(UTC)
    rows = []
    for cluster_id, checks in report:
        b, state = by_cluster[cluster_id], states[cluster_id]
        for c in checks:
            if c.reachable and (cluster_id, c.snapshot_id) not in (skip or {}):
                rows.append({
                    "cluster_id": cluster_id, "snapshot_id": c.snapshot_id, "snapshot_offset": c.offset,
                    "snapshot_digest": b.snapshot_digests.get(c.snapshot_id), "lineage": state["lineage"],
                    "resume_offset": state["resume_offset"], "build_id": build_id, "checked_at": now,
                    "differences": [{"kind": d.kind, "key": json.dumps(list(d.key)), "field": d.field,
                                     "histories": json.dumps(d.left), "snapshot": json.dumps(d.right)}
                                    for d in c.differences]})
    return rows


def verify_build(spark: SparkSession, build: HistoryBuild) -> VerifyReport:
    """``verify_tables`` on a build made with ``snapshots=True``."""
    return compare_snapshots(spark, [b for b in build.bases if b.cluster_id == b.source_cluster], build.histories,
                             build.histories)


def compare_snapshots(spark: SparkSession, real: list[ClusterBase], histories: History, snapshots: History,
                      known: Checked | None = None) -> VerifyReport:
    """Per cluster of ``real``, the ``histories`` at every snapshot its replay reaches against the snapshot's
    contents (``snapshots``: the histories of the pseudo-clusters of ``snapshot_bases``); the snapshots of ``known``
    are not compared again, their differences are those given."""
    known = known or {}
    probes = [(b.cluster_id, s.snapshot_id, s.offset, pseudo_cluster(b.cluster_id, s.snapshot_id))
              for b in real for s in b.snapshots if b.reach(s)[0] and (b.cluster_id, s.snapshot_id) not in known]
    found: dict[str, list[Difference]] = {pseudo_cluster(c, s): d for (c, s), d in known.items()}
    if probes:
        points = F.broadcast(local_frame(spark, probes, "cluster_id string, snapshot_id string, at long, "
                                                    "pseudo string"))
        pseudo = [p[3] for p in probes]
        near = holding_within(probes)
        left: History = {}
        right: History = {}
        for kind, df in histories.items():
            valid = valid_at(F.col("at"))
            left[kind] = (df.filter(near).join(points, "cluster_id").filter(valid)
                          .withColumn("cluster_id", F.col("pseudo")))
            right[kind] = snapshots[kind].filter(of_clusters(pseudo))
        rows = differing_json(left, right)
        for r in rows.collect() if rows is not None else []:
            if r["kind"] == "producer_ids" and r["right"] is None:
                continue  # the snapshot has no ProducerIdsRecord: the mark survives (ProducerIdsDelta)
            found.setdefault(r["cluster_id"], []).extend(differences(r))
    report = []
    for b in real:
        checks = []
        for s in sorted(b.snapshots, key=lambda s: (s.offset, s.snapshot_id)):
            ok, note = b.reach(s)
            checks.append(SnapshotCheck(s.snapshot_id, s.offset, None, ok,
                                        sorted(found.get(pseudo_cluster(b.cluster_id, s.snapshot_id), []),
                                               key=lambda d: (d.kind, repr(d.key), d.field)), note))
        report.append((b.cluster_id, checks))
    return report


# up to this many clusters the versions read are bounded per cluster, more by one bound for all (a filter term each)
BOUND_APART = 64


def holding_within(probes: list[tuple[str, str, int, str]]) -> Column:
    """Of the history rows, those that can hold at one of ``probes``' offsets (cluster, snapshot, offset, pseudo):
    begun by the last of its cluster's and not ended before the first. Literal bounds, which the Parquet reader
    prunes row groups by (the join with the probes decides which offset a version holds at, and cannot): an hourly
    verify, whose one new snapshot is near the end of the log, reads the versions that held there, not every
    version of the histories."""
    spans: dict[str, tuple[int, int]] = {}
    for cluster_id, _, at, _ in probes:
        lo, hi = spans.get(cluster_id, (at, at))
        spans[cluster_id] = (min(lo, at), max(hi, at))

    def overlaps(lo: int, hi: int) -> Column:
        return (F.col("valid_from_offset") <= hi) & (F.col("valid_to_offset").isNull()
                                                      | (F.col("valid_to_offset") > lo))
    if len(spans) > BOUND_APART:
        return overlaps(min(lo for lo, _ in spans.values()), max(hi for _, hi in spans.values()))
    return functools.reduce(operator.or_, [(F.col("cluster_id") == c) & overlaps(lo, hi)
                                           for c, (lo, hi) in spans.items()])


__all__ = ["compare_snapshots", "holding_within", "standing", "verify_build", "verify_tables"]
