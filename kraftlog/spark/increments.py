"""Incremental history builds: which clusters to leave, to go on with, or to replay from their base.

A build leaves, per cluster, a ``replay_state`` row: its base, the last offset applied, where to go on
(the Begin of a still-open metadata transaction, else the next offset) and a digest of the log
records it applied. The next build compares each cluster with that row:

* **unchanged**: same base, same last offset, same digest: nothing to do;
* **go on**: same base, the log only grew, and the records applied before are exactly the same
  (count and digest): the replay restarts from the current versions the last build left (its open
  history rows are the image) and applies only the new records; the open rows are rewritten, closed
  rows stay. Only the entity kinds the rules of the new records read or change are restored and rewritten
  (``Replayer.kinds_read``, ``Plan.kinds``) and, of the topics and partitions, only those the records name (the
  partitions of PartitionChanges, the topics of other topic and partition records with all their partitions:
  ``Replayer.topics_read``, ``Plan.restored``): no other can change, so an hour's cost follows what it touched,
  not every topic and partition of the cluster. A build that ended inside a
  metadata transaction goes on from its Begin: the control records applied since (they do not wait
  for the End) are applied again, so the image is the versions holding just before the Begin and the
  rows those records began or ended are rewritten too (``Plan.reopened``);
* **rebuild**: anything else (a truncated log, another base snapshot, a late-arriving older file, a
  landed row replaced by another copy): the cluster is replayed from its base, alone.

Either way the tables end equal to a build from scratch.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field, replace
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from kraftlog.spark.bases import (
    ClusterBase,
    TableSource,
    carry_bases,
    cluster_bases,
    from_summary,
    log_digest,
    scoped,
    summary_columns,
    summary_row,
)
from kraftlog.spark.landed import Ledger, Mark, ledger_marks, state_records
from kraftlog.spark.predicates import (
    Scope,
    cluster_predicate,
    named_topics,
    of_clusters,
    only_clusters,
    sql_literal,
    topics_sql,
)
from kraftlog.spark.replay import state_rows, state_scope
from kraftlog.spark.session import JobThreads, local_frame, local_rows
from kraftlog.spark.store import TableStore
from kraftlog.state.entities import BY_NAME, history_tables, replay_ranges_table, replay_state_table
from kraftlog.state.replay import Replayer, TopicsRead
from kraftlog.tables.definitions import catalog


@dataclass
class Plan:
    """What one build does: replays to run (some going on from their last state) and clusters to drop."""

    run: list[ClusterBase]
    resumed: list[str] = field(default_factory=list)
    rebuilt: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    gone: list[str] = field(default_factory=list)
    state: DataFrame | None = None
    digests: dict[str, tuple[int, int]] = field(default_factory=dict)  # cluster -> (records, digest) applied now
    # clusters going on from inside a metadata transaction (the last build ended in it): cluster -> its Begin
    reopened: dict[str, int] = field(default_factory=dict)
    lineages: dict[str, str] = field(default_factory=dict)  # clusters going on -> their lineage
    from_scratch: bool = False  # no build state at all (a new warehouse, or one built before replay_state)
    bases: list[ClusterBase] = field(default_factory=list)  # every cluster's, the unchanged ones too
    read_whole: list[str] = field(default_factory=list)  # clusters whose landed rows were all read (cluster_bases)
    previous: dict[str, dict[str, Any]] = field(default_factory=dict)  # the replay_state rows compared
    marks: dict[str, Mark] = field(default_factory=dict)  # each cluster's ledger when planned
    # unchanged clusters whose replay_state row moves (a new ledger mark, snapshot): cluster -> the row it had
    refreshed: dict[str, dict[str, Any]] = field(default_factory=dict)
    # clusters going on -> the topics and partitions their replay restores and rewrites (None: every topic)
    restored: dict[str, TopicsRead | None] = field(default_factory=dict)
    # the types of the records the replays read, when every cluster replayed goes on (None: every type)
    record_types: set[str] | None = None

    def history_where(self, kind: str) -> str | None:
        """The rows of the history table of entity ``kind`` this build replaces (None: none of them)."""
        parts = []
        if self.rebuilt or self.gone:
            parts.append(str(cluster_predicate([*self.rebuilt, *self.gone])))
        held = "valid_to_offset IS NULL"  # the current versions, rewritten
        resumed = self.resumed if kind in self.kinds else []
        plain = [c for c in resumed if c not in self.reopened and self._topics(kind, c) is None]
        if plain:
            parts.append(f"({cluster_predicate(plain)} AND {held})")
        for c in (c for c in resumed if c not in plain):
            topics = self._topics(kind, c)
            if topics is not None and topics.empty:
                continue  # none of its rows of the kind change
            rows = held if c not in self.reopened else \
                f"({held} OR valid_to_offset >= {self.reopened[c]})"  # and what control records changed since
            if topics is not None:
                rows = f"{topics_sql(topics)} AND {rows}"
            parts.append(f"(cluster_id = {sql_literal(c)} AND {rows})")
        return " OR ".join(parts) if parts else None

    @property
    def kinds(self) -> frozenset[str]:
        """The entity kinds the replays going on restore and rewrite: those the rules of their records read or
        change (``Replayer.kinds_read``; every kind when a cluster is rebuilt)."""
        return frozenset(BY_NAME) if self.record_types is None else Replayer.kinds_read(self.record_types)

    def _topics(self, kind: str, cluster: str) -> TopicsRead | None:
        """The topics and partitions whose rows of ``kind`` a cluster going on replaces (None: every row of the
        kind)."""
        read = self.restored.get(cluster) if kind in Replayer.TOPIC_KINDS else None
        return None if read is None else read.of_kind(kind)

    def cluster_where(self, refreshed: bool = False) -> str | None:
        """The rows of the per-cluster tables this build replaces: of ``replay_ranges``; with ``refreshed``, of
        ``replay_state``."""
        ids = [*self.rebuilt, *self.resumed, *self.gone, *(self.refreshed if refreshed else ())]
        return cluster_predicate(ids) if ids else None


def digests(spark: SparkSession, table: TableSource, ranges: list[tuple[str, int, int | None]]
            ) -> dict[str, dict[str, int]]:
    """Per cluster ``(cluster_id, first, previous_last)``: count and digest of its log records from ``first`` on
    (``n``, ``d``) and of those up to ``previous_last`` (``n_prev``, ``d_prev``), in one pass."""
    if not ranges:
        return {}
    plan = local_frame(spark, ranges, "cluster_id string, _first long, _prev long")
    h = log_digest()
    before = F.col("_prev").isNotNull() & (F.col("log_offset") <= F.col("_prev"))
    rows = (table("records").filter((F.col("source") == "log") & of_clusters([c for c, _, _ in ranges]))
            .join(F.broadcast(plan), "cluster_id")
            .filter(F.col("log_offset") >= F.col("_first"))
            .groupBy("cluster_id")
            .agg(F.count("*").alias("n"), F.bit_xor(h).alias("d"),
                 F.count(F.when(before, 1)).alias("n_prev"), F.bit_xor(F.when(before, h)).alias("d_prev"))
            .collect())
    return {r["cluster_id"]: {k: r[k] or 0 for k in ("n", "d", "n_prev", "d_prev")} for r in rows}


def _carried(problems: list[str] | None, base_problem: str | None, resume_from: int) -> list[str]:
    """The replay problems of the last build that still stand when going on from ``resume_from``: not the base's,
    not the end-of-input ones, not those at offsets replayed again (from the Begin of a transaction left open)."""
    def before(p: str) -> bool:
        m = re.match(r"offset (\d+):", p)
        return m is None or int(m.group(1)) < resume_from

    return [p for p in problems or [] if p != base_problem and not p.startswith("transaction begun at offset")
            and not p.startswith("... and ") and before(p)]


@dataclass(frozen=True)
class LastBuilds:
    """What a build compares the warehouse with: the ``replay_state`` rows its last build left, by cluster
    (``previous``; none for a full build), their marks on the ingest ledger (``was``) and the ledger now."""

    previous: dict[str, dict[str, Any]]
    was: dict[str, Mark]
    ledger: Ledger

    def state_records(self, table: TableSource, upto: int | None = None) -> int:
        """The records other than NoOps the build replays (``kraftlog.spark.landed.state_records``, ``upto`` that many
        at most): those landed since the last build in the clusters whose ledger tells what landed since
        (``Ledger.held``), every one of the others (replayed from their bases, or new); a first build's: every record
        landed, NoOps too."""
        held = self.ledger.held  # (none in a first build: nothing was marked before)
        return state_records(table, held, [c for c in self.ledger.marks if c not in held], upto, not self.previous)


def last_builds(spark: SparkSession, store: TableStore, clusters: list[str] | None, full: bool) -> LastBuilds:
    """The ``LastBuilds`` of the clusters of ``clusters`` (else of every one); ``full``: none is gone on from."""
    state = store.read(replay_state_table())
    previous: dict[str, Any] = {} if full else {
        r["cluster_id"]: r.asDict(recursive=True)
        for r in state.select(*[c for c in state.columns if c != "snapshots"], *summary_columns()).collect()}
    ledger = store.read(catalog()["files"])
    was = {c: Mark(p["landed_run"], p["landed_files"], p["landed_digest"]) for c, p in previous.items()
           if p["landed_run"] is not None and (clusters is None or c in clusters)}
    return LastBuilds(previous, was, ledger_marks(spark, only_clusters(ledger, clusters), was))


def plan_build(spark: SparkSession, store: TableStore, table: TableSource, clusters: list[str] | None, full: bool,
               last: LastBuilds | None = None) -> Plan:
    """Compare each cluster (of ``clusters``, else every one) with the state its last build left (see the module
    docstring; ``last``: as read by ``last_builds``, else read here); where its ledger tells what landed since, only
    those rows are read (``carry_bases``)."""
    last = last or last_builds(spark, store, clusters, full)
    previous: dict[str, Any] = last.previous
    was, marks, held = last.was, last.ledger.marks, last.ledger.held
    carried = carry_bases(table, {c: from_summary(c, previous[c]) for c in held}, held)
    rest = [c for c in sorted(marks) if c not in carried.bases]
    bases = sorted([*carried.bases.values(), *(cluster_bases(table, rest if carried.bases or clusters else None)
                                               if rest else [])], key=lambda b: b.cluster_id)
    found: dict[str, dict[str, int]] = {}
    for c, (n, d) in carried.added.items():  # every record landed since is after the last build's last offset
        p, b = previous[c], carried.bases[c]
        if _same_base(b, p):
            found[c] = {"n": p["applied_records"] + n, "d": p["applied_digest"] ^ d,
                        "n_prev": p["applied_records"], "d_prev": p["applied_digest"]}
    first = {b.cluster_id: b.base.first for b in bases if b.last is not None and b.cluster_id not in found}
    found.update(digests(spark, table, [(c, f, (previous.get(c) or {}).get("last_offset")) for c, f in first.items()]))
    plan = Plan([], bases=bases, digests={c: (v["n"], v["d"]) for c, v in found.items()}, marks=marks,
                from_scratch=not previous, read_whole=rest, previous=previous)
    wanted = set(clusters) if clusters is not None else None
    plan.gone = sorted(c for c in previous if c not in {b.cluster_id for b in bases}
                       and (wanted is None or c in wanted))
    go_on: dict[str, int] = {}
    for b in bases:
        p = previous.get(b.cluster_id)
        verdict = _verdict(b, p, found.get(b.cluster_id))
        if verdict == "unchanged":
            plan.unchanged.append(b.cluster_id)
            if p is not None and (marks.get(b.cluster_id) != was.get(b.cluster_id) or _summary(p) != summary_row(b)):
                plan.refreshed[b.cluster_id] = p  # the histories stand; what the next build goes on from moved
        elif verdict == "go on":
            assert p is not None
            go_on[b.cluster_id] = p["resume_offset"]
            plan.lineages[b.cluster_id] = p["lineage"]
            if p["resume_offset"] != p["last_offset"] + 1:
                plan.reopened[b.cluster_id] = p["resume_offset"]
        else:
            plan.rebuilt.append(b.cluster_id)
            plan.run.append(b)
    if go_on:
        resume = {b.source_cluster: (b.cluster_id, go_on[b.cluster_id]) for b in bases if b.cluster_id in go_on}
        with JobThreads(spark, 1) as pool:  # (small jobs: each waits more on scheduling than on cores)
            ranges = pool.submit(lambda: store.read(replay_ranges_table()).filter(of_clusters(list(go_on)))
                                 .select("cluster_id", "problems").collect())
            # the types of the records landed since are those from the resume offset on, unless it is a Begin
            known = {c: set(carried.types[c]) for c, (out, _) in resume.items()
                     if c in carried.types and out not in plan.reopened}
            types = {**known, **types_since(table, {c: r for c, r in resume.items() if c not in known})}
            if not plan.rebuilt:
                plan.record_types = set().union(*types.values())
            plan.restored = topics_read(table, resume, types)
            problems = {r["cluster_id"]: r["problems"] for r in ranges.result()}
        for b in bases:
            if b.cluster_id in go_on:
                plan.run.append(replace(b, resume_from=go_on[b.cluster_id],
                                        carried=_carried(problems.get(b.cluster_id), b.base.problem,
                                                         go_on[b.cluster_id])))
        plan.resumed = sorted(go_on)
        holding = state_scope(go_on)
        plan.state = state_rows({kind: store.read(t, holding) for kind, t in history_tables().items()
                                 if kind in plan.kinds}, go_on, plan.restored)
    return plan


def _since(resume: dict[str, tuple[str, int]]) -> Scope:
    return Scope.of([], {c: at for c, (_, at) in resume.items()}, "log_offset")


def types_since(table: TableSource, resume: dict[str, tuple[str, int]]) -> dict[str, set[str]]:
    """Per cluster going on (source cluster -> its replay's cluster and resume offset), the types of its log records
    from the resume offset on."""
    found: dict[str, set[str]] = {c: set() for c in resume}
    if resume:
        records = scoped(table, "records", _since(resume)).filter(F.col("source") == "log")
        for r in records.select("cluster_id", "record_type").distinct().collect():
            if r["record_type"] is not None:
                found[r["cluster_id"]].add(r["record_type"])
    return found


def topics_read(table: TableSource, resume: dict[str, tuple[str, int]], types: dict[str, set[str]]
                ) -> dict[str, TopicsRead | None]:
    """Per cluster going on (source cluster -> its replay's cluster and resume offset; ``types``: those of its
    records from there, ``types_since``), the topics and partitions its records from the resume offset on read or
    change (``Replayer.topics_read``; None: any topic, or more than ``TOPICS_NAMED``): the only ones its replay needs
    in its image, the only ones that can change."""
    by_type = catalog().by_record_type
    by_topic = Replayer.TOPIC_KEYED | Replayer.PARTITION_KEYED
    keyed = sorted((by_topic | Replayer.ANY_TOPIC) & set().union(*types.values()))
    found: dict[str, list[tuple[str, str | None, int | None]]] = {c: [] for c in resume}

    def key(t: str, column: str, of: frozenset[str], kind: str) -> Column:  # the record's, where its rule reads it
        return (F.col(column) if t in of else F.lit(None)).cast(kind).alias(column)

    if keyed:
        rows = functools.reduce(DataFrame.unionByName, [
            scoped(table, by_type[t].name, _since(resume)).filter(F.col("source") == "log").select(
                "cluster_id", F.lit(t).alias("record_type"), key(t, "topic_id", by_topic, "string"),
                key(t, "partition_id", Replayer.PARTITION_KEYED, "int"))
            for t in keyed])
        for c, *read in local_rows(rows.distinct(), "cluster_id", "record_type", "topic_id", "partition_id"):
            found[c].append(tuple(read))
    return {cluster: named_topics(Replayer.topics_read(found[c])) for c, (cluster, _) in resume.items()}


def _same_base(b: ClusterBase, p: dict[str, Any]) -> bool:
    snap = b.base.snapshot
    return (p["base_snapshot_id"] == (snap.snapshot_id if snap else None)
            and p["first_offset"] == (b.base.first if b.last is not None else None))


def _summary(p: dict[str, Any]) -> dict[str, Any]:
    """A ``replay_state`` row's summary (``summary_row``), as kept."""
    return summary_row(from_summary(p["cluster_id"], p))


def _verdict(b: ClusterBase, p: dict[str, Any] | None, d: dict[str, int] | None) -> str:
    """unchanged, go on, or rebuild (see the module docstring)."""
    if p is None:
        return "rebuild"
    if not _same_base(b, p):
        return "rebuild"
    if b.last is None or p["last_offset"] is None:
        return "unchanged" if b.last is None and p["last_offset"] is None else "rebuild"
    if b.last < p["last_offset"] or d is None or (d["n_prev"], d["d_prev"]) != (p["applied_records"],
                                                                              p["applied_digest"]):
        return "rebuild"
    return "unchanged" if b.last == p["last_offset"] else "go on"


def state_table_rows(plan: Plan, ranges: list[dict[str, Any]], build_id: str) -> list[dict[str, Any]]:
    """The ``replay_state`` rows of the clusters this build replayed (from their ``replay_ranges`` rows) and of those
    it refreshed."""
    bases = {b.cluster_id: b for b in plan.bases}
    no_mark = Mark(None, 0, 0)
    out = []
    for r in ranges:
        n, d = plan.digests.get(r["cluster_id"], (0, 0))
        last = r["last_offset"]
        resume = r["open_transaction_offset"] if r["open_transaction_offset"] is not None else (
            last + 1 if last is not None else None)
        out.append({"cluster_id": r["cluster_id"], "base_snapshot_id": r["base_snapshot_id"],
                    "first_offset": r["first_offset"], "last_offset": last, "resume_offset": resume,
                    "applied_records": n, "applied_digest": d, "build_id": build_id,
                    "lineage": plan.lineages.get(r["cluster_id"], build_id)})
    out += [{k: v for k, v in p.items() if k not in ("last_ms", "snapshots")} for p in plan.refreshed.values()]
    for row in out:
        m = plan.marks.get(row["cluster_id"], no_mark)
        row.update(summary_row(bases[row["cluster_id"]]), landed_run=m.run, landed_files=m.files,
                   landed_digest=m.digest)
    return out
