"""One ingest run.

1. **recover**: roll forward any earlier run that was killed after staging (``TableStore.recover``);
2. **discover**: list the data directories (metadata only) and read their ``meta.properties``;
3. **what changed**: compare sizes and modification times with the ``files`` ledger; where the profile names
   data directories otherwise than they landed, their clusters land again as new (``_renamed``);
4. **plan** (``kraftlog.planning``): clusters whose file names prove that nothing competes (one data
   directory, new files, no overlap with the ledger) land directly, with no extra read; the other
   files of clusters no earlier run landed are decided in the land pass (below); the files of clusters
   with landed rows are **summarized** (pass 0, a header walk) and planned: clean files land directly;
   files whose records compete with other copies are **decided** record by record (pass 1: the files of
   each cluster together on one executor, ``kraftlog.tables.copies``) and compared with the landed rows
   (``kraftlog.spark.transforms``), which yields divergence rows, replaced rows and, per file, the
   offset ranges to land;
5. **land** (pass 2): one pass over every changed file, packed into tasks by bytes (``land_units``), writes
   ``records``, the typed tables, ``batches``, ``divergence`` and the ledger rows, with the records
   each file keeps; the files of a small cluster new to the warehouse are decided there, together in one
   task, just before they land;
6. **commit**: one manifest, then one Delta commit per table; the ledger and the ``runs`` row last.

Every table is written exactly once per run, and a run killed at any point is completed by the next.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema

from kraftlog.config import Config
from kraftlog.errors import UsageError
from kraftlog.identity import renaming, resolve_identity, same_node_twice
from kraftlog.planning import ListedFile, PlannedFile, plan_by_name, plan_files
from kraftlog.spark.decode import LandRouter, stage_choices, summaries
from kraftlog.spark.inputs import FileSpec, by_bytes, by_cluster, read_meta_properties
from kraftlog.spark.ledger import LandedBefore, absent, compare, landed_before
from kraftlog.spark.predicates import cluster_predicate, of_clusters
from kraftlog.spark.staging import StagedFile
from kraftlog.spark.store import (
    Manifest,
    TableStore,
    new_run_id,
    spark_schema,
    store_for,
    warehouse_tables,
    writing,
)
from kraftlog.spark.transforms import against_existing, keep_ranges, new_rows, path_map
from kraftlog.storage import normalize
from kraftlog.tables.copies import DIVERGENCE_SOURCE, SAME_EPOCH, render_divergence
from kraftlog.tables.definitions import Catalog, catalog
from kraftlog.tables.rows import INDEX, FileIdentity, Ingested, KeepSpec, Prefix, Resume, file_layout
from kraftlog.wire.columns import read_columns
from kraftlog.wire.discover import DataDir, find_data_dirs
from kraftlog.wire.files import SEGMENT

log = logging.getLogger("kraftlog")

_EMPTY_SHA256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"


@dataclass
class IngestResult:
    """What a run did; ``line()`` is the one-line summary printed per run."""

    run_id: str
    writer: str
    files_seen: int = 0
    files_ingested: int = 0
    files_clean: int = 0
    files_contested: int = 0
    records_decoded: int = 0
    rows_added: int = 0
    divergent: int = 0
    errors: int = 0
    identity_conflicts: int = 0  # files whose cluster or node is in doubt (see their ledger errors)
    renamed: int = 0  # data directories the profile names otherwise than they landed, landed again
    relanded: list[str] = field(default_factory=list)  # the clusters they landed as and land as now
    names_kept: int = 0  # data directories the profile renamed that keep their landed names (files gone since)
    files_deferred: int = 0  # read otherwise than planned (rewritten or removed meanwhile): the next run takes them
    chosen: int = 0  # records whose copies were chosen among (a grown segment's only past what it had)
    seconds: float = 0.0
    recovered: list[str] = field(default_factory=list)
    table_rows: dict[str, int] = field(default_factory=dict)
    phases: dict[str, float] = field(default_factory=dict)  # seconds: setup, discover, plan, decide, land, commit
    _mark: float = field(default_factory=time.time, repr=False)

    def phase(self, name: str) -> None:
        """Close the phase ``name`` (it lasted since the previous mark)."""
        now = time.time()
        self.phases[name] = round(self.phases.get(name, 0.0) + now - self._mark, 3)
        self._mark = now

    def line(self) -> str:
        notes = "".join([
            f", IDENTITY CONFLICTS {self.identity_conflicts} (files.errors)" if self.identity_conflicts else "",
            f", {_directories(self.renamed)} renamed (landed anew: {', '.join(self.relanded)})" if self.renamed else "",
            f", RENAMING REFUSED for {_directories(self.names_kept)} (their files landed before are gone)"
            if self.names_kept else "",
            f", recovered {len(self.recovered)} interrupted run(s)" if self.recovered else "",
            f", deferred {self.files_deferred} (changed while read: the next run takes them)"
            if self.files_deferred else ""])
        return (f"kraftlog ingest {self.run_id}: files {self.files_seen} (ingested {self.files_ingested}: "
                f"{self.files_clean} clean, {self.files_contested} contested), records {self.records_decoded}, "
                f"new rows {self.rows_added}, divergent {self.divergent}, errors {self.errors}{notes}, "
                f"{self.seconds:.1f} s [{self.writer}]")


@dataclass(frozen=True)
class _File:
    size: int
    mtime_ms: int
    identity: FileIdentity

    def spec(self, path: str, start: int = 0) -> FileSpec:
        return FileSpec(path, self.size, self.mtime_ms, start)


def _divergence_router(run_id: str):  # type: ignore[no-untyped-def]
    """Divergence rows: render the losing copy's JSON from its raw bytes when it was not landed."""
    return lambda batch: {"divergence": render_divergence(batch, run_id)}


def ingest(spark: SparkSession, inputs: list[str], config: Config, store: TableStore | None = None,
           allow_empty: bool = False, found: list[DataDir] | None = None) -> IngestResult:
    """Ingest the KRaft data directories under ``inputs`` into the warehouse of ``config``.

    The run holds the warehouse's lease (``kraftlog.lease``): a concurrent run waits for it, up to
    ``[warehouse] lease_wait_seconds``, then fails with ``WarehouseBusy``. Inputs that hold no data
    directory are a ``NoInputError`` unless ``allow_empty``; a missing input a ``StorageError``. ``found``:
    the data directories under ``inputs`` if the caller listed them already (``find_data_dirs``).
    """
    store = store or store_for(spark, config)
    run_id = new_run_id()
    with writing(store, config, run_id, "ingest"):
        return _ingest(spark, inputs, config, store, run_id, allow_empty, found)


def _ingest(spark: SparkSession, inputs: list[str], config: Config, store: TableStore, run_id: str,
            allow_empty: bool, found: list[DataDir] | None) -> IngestResult:
    t0 = time.time()
    run_seq = int(t0 * 1000)
    cat = catalog()
    result = IngestResult(run_id, store.kind)
    store.ensure_all(cat.all())
    result.recovered = [m.run_id for m in store.recover()]
    result.phase("setup")

    # discover: directory listings (metadata only) and the identities in meta.properties
    storage = store.storage
    dirs = found if found is not None else find_data_dirs([normalize(p) for p in inputs], storage.lister(),
                                                          allow_empty)
    metas = read_meta_properties([dd.meta_properties.path for dd in dirs if dd.meta_properties], storage)
    identities = {}
    for dd in dirs:
        meta = metas.get(dd.meta_properties.path) if dd.meta_properties else None
        identities[dd.root] = (resolve_identity(dd, meta, config), meta.directory_id if meta else None)
    manifest = Manifest(run_id, run_seq)
    # what changed since the ledger's latest row of each file found; the files of clusters landing again as new
    compared = compare(store, cat, ((entry.path, entry.size, entry.mtime_ms, dd.root)
                                    for dd in dirs for entry, _ in dd.files))
    relanded = _renamed(store, cat, dirs, identities, compared.names, manifest, result)
    changed_rows = {p: None if r is not None and r["cluster_id"] in relanded else r
                    for p, r in compared.changed.items()}
    for dd in dirs:  # a data directory of a cluster landing again: every file of it lands again, as new
        if identities[dd.root][0].cluster_id in relanded \
                or any(c in relanded for c, _ in compared.names.get(dd.root, ())):
            changed_rows.update((entry.path, None) for entry, _ in dd.files)
    latest = {p: r for p, r in changed_rows.items() if r is not None}
    twice = same_node_twice(identities)
    inventory: dict[str, _File] = {}
    for dd in dirs:
        ident = identities[dd.root][0]
        if dd.root in twice:
            ident = replace(ident, problem=twice[dd.root])
        if ident.problem:
            log.warning("%s", ident.problem)
        for entry, _ in dd.files:
            inventory[entry.path] = _File(entry.size, entry.mtime_ms, ident)
    result.files_seen = len(inventory)
    log.info("found %d data directories, %d log files under %s", len(dirs), len(inventory), ", ".join(inputs))

    changed = {p: f for p, f in inventory.items() if p in changed_rows}
    result.files_ingested = len(changed)
    todo = {p: f for p, f in changed.items() if f.size > 0}  # an empty file has no rows but its ledger row
    empty_rows = [_empty_file_row(p, f, run_id) for p, f in changed.items() if f.size == 0]
    result.phase("discover")
    result.errors += sum(int(r["error_count"]) for r in empty_rows)  # type: ignore[call-overload]
    if empty_rows:
        manifest.files += store.stage_small(cat.core["files"], pa.Table.from_pylist(empty_rows, cat["files"].schema),
                                            run_id)
    if todo:
        _run(spark, store, cat, todo, latest, relanded, manifest, result)
    else:
        log.info("nothing new: every file is already in the ledger")
    return _finish(store, cat, manifest, result, t0, inputs)


# a new cluster's files decided together hold all their columns at once in one task (about 12 times their
# size); past this, the cluster is planned from its headers, and only files whose offsets overlap are decided
TOGETHER_BYTES = 64 << 20


def _run(spark: SparkSession, store: TableStore, cat: Catalog, todo: dict[str, _File],
         latest: dict[str, dict[str, Any]], relanded: set[str], manifest: Manifest, result: IngestResult) -> None:
    run_id = manifest.run_id
    ordered = sorted(todo)
    # what earlier runs landed of the clusters this run lands files of (but those landing again)
    before = landed_before(store, cat, {f.identity.cluster_id for f in todo.values()} - relanded,
                           {s for p in ordered for s in _snapshot_names(p)})
    ids = {p: (todo[p].identity, i) for i, p in enumerate(ordered)}
    log.info("reading %d new or changed files (%.1f MB)", len(todo), sum(f.size for f in todo.values()) / 1e6)

    # clusters whose file names prove that nothing competes land without a header pass
    named = plan_by_name([ListedFile(p, todo[p].identity.cluster_id, todo[p].identity.data_dir,
                                     file_layout(p)[0], p in latest) for p in ordered],
                         before.landed, before.dirs)
    keep = dict(named)
    result.files_clean = len(named)
    # clusters no earlier run landed anything of: their other files are decided together as they land, unless
    # they are too big to hold at once (``TOGETHER_BYTES``): those are planned from their headers
    landed_clusters = set(before.clusters)
    seen = landed_clusters | {todo[p].identity.cluster_id for p in ordered if p in latest}
    new = [p for p in ordered if p not in named and todo[p].identity.cluster_id not in seen]
    new_bytes: dict[str, int] = {}
    for p in new:
        new_bytes[todo[p].identity.cluster_id] = new_bytes.get(todo[p].identity.cluster_id, 0) + todo[p].size
    together = {p: todo[p].identity.cluster_id for p in new
                if new_bytes[todo[p].identity.cluster_id] <= TOGETHER_BYTES}
    rest = [p for p in ordered if p not in named and p not in together]
    starts: dict[str, int] = {}
    if rest:
        planned, starts = _plan_from_headers(spark, store, cat, rest, todo, ids, before, latest, manifest, result)
        keep.update(planned)
    result.files_contested += len(together)
    log.info("plan: %d files land directly (%d by their names), %d are decided record by record with their copies",
             result.files_clean, len(named), result.files_contested)
    result.phase("plan")

    # pass 2: land (and decide the clusters landed together)
    tables = [cat.core["records"], cat.core["batches"], cat.core["files"], cat.core["divergence"], *cat.typed.values()]
    groups = by_cluster(spark, [todo[p].spec(p, starts.get(p, 0)) for p in ordered], land_units(ordered, together),
                        store.storage)
    staged = store.stage(groups, tables, LandRouter(ids, keep, run_id, together), run_id)
    manifest.files += staged
    ledger_rows = [f for f in staged if f.table == "files"]
    result.files_deferred = len(todo) - sum(f.num_records for f in ledger_rows)
    if result.files_deferred:
        log.warning("%d files were rewritten or removed while this run read them: the next run takes them",
                    result.files_deferred)
    result.rows_added = sum(f.num_records for f in staged if f.table == "records")
    result.records_decoded, errors = _sum_ledger(store, cat, ledger_rows, ("records", "error_count"))
    result.errors += errors
    result.divergent = manifest.rows("divergence")
    result.identity_conflicts = len(_doubted(store, cat, todo, manifest))
    log.info("landed %d new records from %d decoded; %d divergence rows", result.rows_added, result.records_decoded,
             result.divergent)
    result.phase("land")


def _renamed(store: TableStore, cat: Catalog, dirs: list[DataDir],
             identities: dict[str, tuple[FileIdentity, str | None]], names: dict[str, set[tuple[str, int | None]]],
             manifest: Manifest, result: IngestResult) -> set[str]:
    """The clusters that land again, where the profile names data directories otherwise than they landed
    (``renaming``; ``names``: per data directory, the names its unchanged files landed as). Where every file those
    clusters landed from is still there, they land again under the names given now: their rows go
    (``manifest.deletes``, committed with the new rows), ledger rows included, so their files are read as new; the
    histories and events follow (the old names are gone, the new ones new). Where a file landed before is not there
    any more (a live data directory's deleted segments), its rows cannot be read again: the data directories keep the
    names they landed under (``identities`` changed in place), with a warning; so does a data directory whose
    identity is in doubt now (a ``meta.properties`` broken since it landed), its files' problem kept."""
    rename = renaming(names, {d: ident for d, (ident, _) in identities.items()})
    for d, landed_as in rename.doubted.items():
        ident, directory_id = identities[d]
        log.warning("%s: its identity is in doubt (%s): it keeps the one it landed under, %s", d, ident.problem,
                    landed_as[0] if landed_as[1] is None else f"{landed_as[0]} node {landed_as[1]}")
        identities[d] = (replace(ident, cluster_id=landed_as[0], node_id=landed_as[1]), directory_id)
    if not rename.before:
        return set()
    gone, first_gone = absent(store, cat, rename.clusters, (entry.path for dd in dirs for entry, _ in dd.files))
    if gone:
        for d, (cluster, node) in rename.before.items():
            ident, directory_id = identities[d]
            identities[d] = (replace(ident, cluster_id=cluster, node_id=node), directory_id)
        result.names_kept = len(rename.before)
        log.warning("the profile names %s otherwise than they landed (%s), but %d file(s) landed from before are not "
                    "under the inputs any more (%s%s): their rows cannot be read again, so the names stay as landed",
                    _directories(len(rename.before)), rename.describe(), gone, first_gone, ", ..." if gone > 1 else "")
        return set()
    result.renamed = len(rename.before)
    result.relanded = sorted(set(rename.clusters) | {c for c, _ in rename.after.values()})
    log.warning("the profile names %s otherwise than they landed (%s): cluster(s) %s land again under the names "
                "given now", _directories(len(rename.before)), rename.describe(), ", ".join(rename.clusters))
    where = str(cluster_predicate(list(rename.clusters)))
    for table in (cat.core["records"], cat.core["batches"], cat.core["files"], cat.core["divergence"],
                  *cat.typed.values()):
        manifest.delete(table.name, where)
    return set(rename.clusters)


def _directories(n: int) -> str:
    """``1 data directory``, ``2 data directories``."""
    return f"{n} data director{'y' if n == 1 else 'ies'}"


def land_units(paths: list[str], together: Mapping[str, str]) -> dict[str, str]:
    """What the landing packs into tasks, per file: the files of a cluster decided together (``together``: path ->
    cluster) are one unit, read by one task; every other file is a unit of its own, so a big cluster's files land in
    as many tasks as their bytes fill, not in one."""
    return {p: f"cluster {together[p]}" if p in together else f"file {p}" for p in paths}


def _plan_from_headers(spark: SparkSession, store: TableStore, cat: Catalog, ordered: list[str],
                       todo: dict[str, _File], ids: dict[str, tuple[FileIdentity, int]], before: LandedBefore,
                       latest: dict[str, dict[str, Any]], manifest: Manifest, result: IngestResult
                       ) -> tuple[dict[str, KeepSpec], dict[str, int]]:
    """Pass 0 over ``ordered`` (a header walk), the plan, and the record-level choice for contested files; and the
    byte each grown segment is read from (``Resume``: from its last batch landed on, where that is unchanged)."""
    prefix = {p: int(latest[p]["size"]) for p in ordered if p in latest}
    resumes = {p: r for p in ordered if (r := resume_of(p, todo[p].size, latest.get(p))) is not None}
    files = by_bytes(spark, [todo[p].spec(p, resumes[p].tail_position if p in resumes else 0) for p in ordered],
                     store.storage)
    summary = {r["path"]: r for r in summaries(spark, files, prefix, resumes)}
    planned = []
    for p in ordered:
        s, f, prev = summary[p], todo[p], latest.get(p)
        info, snap, _, _ = file_layout(p)
        unchanged = prev is not None and s["prefix_sha256"] is not None and s["prefix_sha256"] == prev["content_sha256"]
        first, last = s["first_offset"], s["last_offset"]
        if s["start"] and prev is not None:  # read from its last batch landed on: the whole file's offsets
            first, last = prev["first_offset"], last if last is not None else prev["last_offset"]
        planned.append(PlannedFile(p, f.identity.cluster_id, info.kind, snap, first, last,
                                   s["sha256"], prev["size"] if prev else None,
                                   prev["last_offset"] if prev else None,
                                   unchanged, s["prefix_epoch"] if unchanged else None))
    plan = plan_files(planned, before.landed)
    result.files_clean += len(plan.clean)
    keep = dict(plan.clean)
    # a segment whose last batch landed is unchanged is read from there on by every pass (it has a Prefix, below)
    starts = {f.path: summary[f.path]["start"] for f in planned
              if summary[f.path]["start"] and f.ingested is not None and f.ingested.epoch is not None}
    if plan.contested:
        by_path = {f.path: f for f in planned}
        base = {p: KeepSpec((), _min_position(by_path[p]), sha256=by_path[p].sha256) for p in plan.contested}
        rewritten = [p for p in plan.contested if p in latest and not by_path[p].prefix_unchanged]
        keep.update(_decide(spark, store, cat, base, ids, [todo[p].spec(p, starts.get(p, 0)) for p in base],
                            set(before.clusters), rewritten, manifest, result,
                            decided_upto([by_path[p] for p in plan.contested])))
    keep = with_prefixes(keep, planned, latest, resumes)
    for p in [p for p in starts if keep[p].prefix is None]:  # read whole after all: not the content summarised
        del starts[p]
        keep[p] = replace(keep[p], sha256=None)
    return keep, starts


def resume_of(path: str, size: int, prev: dict[str, Any] | None) -> Resume | None:
    """Where a segment changed since its last ledger row (``prev``) is read from: that row's last batch, where the
    row read the file without a problem and the batch ended it (``Resume``); None: read it whole. A segment no
    longer than then (touched: a copy synced again) is read from there too: its digest may be a chain, which only
    the batch there can be checked against."""
    if (prev is None or prev["status"] != "ok" or prev["tail_position"] is None or prev["tail_sha256"] is None
            or size < prev["size"] or file_layout(path)[0].kind != SEGMENT):
        return None
    return Resume(prev["size"], prev["content_sha256"], prev["tail_position"], prev["tail_sha256"])


def with_prefixes(keep: dict[str, KeepSpec], planned: list[PlannedFile], latest: dict[str, dict[str, Any]],
                  resumes: Mapping[str, Resume] | None = None) -> dict[str, KeepSpec]:
    """``keep`` with the ``Prefix`` of each grown segment whose part ingested before read without a problem (its
    ledger row ``ok``, the epoch it ends at known): the land pass reads only what it grew by."""
    out = dict(keep)
    for f in planned:
        prev, ingested = latest.get(f.path), f.ingested
        if (f.path in out and ingested is not None and ingested.epoch is not None
                and prev is not None and prev["status"] == "ok"):
            out[f.path] = replace(out[f.path], prefix=Prefix(
                ingested, prev["batches"], prev["control_batches"], prev["records"], prev["first_offset"],
                prev["metadata_version"], (resumes or {}).get(f.path)))
    return out


def decided_upto(contested: list[PlannedFile]) -> dict[str, Ingested]:
    """Per competing segment grown from what earlier runs ingested of it (the hourly case: each node's active segment
    grew), what those runs ingested of it (last log offset, size): its copies up to there were chosen among then."""
    return {f.path: ingested for f in contested if (ingested := f.ingested) is not None}


def _decide(spark: SparkSession, store: TableStore, cat: Catalog, base: dict[str, KeepSpec],
            ids: dict[str, tuple[FileIdentity, int]], files: list[FileSpec], landed_clusters: set[str],
            rewritten: list[str], manifest: Manifest, result: IngestResult, decided: dict[str, Ingested] | None = None
            ) -> dict[str, KeepSpec]:
    """Record-level choice for the competing files ``base`` (what each lands so far): divergence, replaced
    rows, and the records each file lands.

    Each cluster's files are decided together on an executor (``stage_choices``). Where the ledger
    holds files of those clusters (``landed_clusters``), the winners are then compared with the landed
    rows (``against_existing``). ``rewritten``: files rewritten in place since an earlier run landed them.
    ``decided`` (``decided_upto``): per grown segment, the offset its choice goes on from; where every competing
    file of a cluster is such a segment, only the landed rows past the lowest of them are read.
    """
    decided = decided or {}
    run_id = manifest.run_id
    staging = store.warehouse.rstrip("/") + f"/_kraftlog/staging/{run_id}"
    contested = sorted(base)
    result.files_contested += len(contested)
    clusters = sorted({ids[p][0].cluster_id for p in contested})
    choices = stage_choices(spark, {p: ids[p] for p in contested}, files, store.storage, staging, decided)
    result.chosen += choices.winners
    div = cat.core["divergence"]
    divergence = store.read_parquet(store.parquet_files(staging + "/divergence"),
                                    from_arrow_schema(DIVERGENCE_SOURCE)) if choices.divergent else None
    chosen = choices.keep
    if landed_clusters & set(clusters) and choices.winners:  # the winners meet the rows landed before
        paths = path_map({i: p for p, (_, i) in ids.items() if p in base})
        winners = store.read_parquet(store.parquet_files(staging + "/index"), from_arrow_schema(INDEX))
        existing = store.read(cat.core["records"]).filter(
            winners_may_meet(contested, {p: ident.cluster_id for p, (ident, _) in ids.items()}, decided)).select(
            "cluster_id", "snapshot_id", "log_offset", "snapshot_seq", "value_hash", "batch_epoch", "node_id",
            "file", "record_type", "timestamp", "data_json", "is_control", "api_key", "status")
        to_append, replace_keys, old_divergence = against_existing(winners.drop("key", "value"), existing, paths,
                                                                   winners)
        candidates = old_divergence if divergence is None else divergence.unionByName(old_divergence)
        divergence = new_rows(candidates, store.read(div).filter(of_clusters(clusters)), list(div.key))
        for table, where in _replacement_deletes(cat, replace_keys.collect()):
            manifest.delete(table, where)
        chosen = {}
        for r in keep_ranges(to_append).collect():
            chosen.setdefault(r["file_id"], []).append((r["lo"], r["hi"]))
    keep = {}
    for p, k in base.items():
        i = ids[p][1]
        keep[p] = KeepSpec((*k.ranges, *chosen.get(i, ())), k.min_batch_position, k.landed_batches,
                           k.sha256 or choices.sha256.get(i),
                           problems=(choices.conflicts[i],) if i in choices.conflicts else ())
    result.phase("plan")
    if divergence is not None:  # few rows, rendered in Python: one task (each task would start a worker)
        manifest.files += store.stage(divergence.repartition(1), [div], _divergence_router(run_id), run_id)
    if rewritten:  # batches of the old content at the same positions are already landed
        for r in store.read(cat.core["batches"]).filter(F.col("file").isin(rewritten)) \
                .select("file", "position", "crc").collect():
            k = keep[r["file"]]
            keep[r["file"]] = replace(k, landed_batches=k.landed_batches | {(r["position"], r["crc"])})
    log.info("divergence: %d new rows; %d landed rows replaced by higher-epoch copies",
             manifest.rows("divergence"), sum(1 for _ in manifest.deletes))
    result.phase("decide")
    return keep


def winners_may_meet(files: list[str], cluster_of: dict[str, str], decided: dict[str, Ingested]) -> Column:
    """The landed records this run's winners among ``files`` can be copies of: of a cluster all of whose competing
    segments are grown (``decided``), its log records past the lowest offset decided and the records of the
    snapshots competing; of any other cluster, every record."""
    floors: dict[str, int] = {}
    whole: set[str] = set()
    snapshots: dict[str, set[str]] = {}
    for p in files:
        c, (info, snapshot_id, _, _) = cluster_of[p], file_layout(p)
        if p in decided:
            floors[c] = min(floors.get(c, decided[p].last_offset), decided[p].last_offset)
        elif info.kind == SEGMENT or snapshot_id is None:
            whole.add(c)
        else:
            snapshots.setdefault(c, set()).add(snapshot_id)
    parts = [of_clusters(sorted(whole))] if whole else []
    cut = sorted(set(floors) - whole)
    if cut:
        parts.append(of_clusters(cut) & F.col("snapshot_id").isNull()
                     & (F.col("log_offset") > min(floors[c] for c in cut)))
    parts += [of_clusters([c]) & of_clusters(sorted(snapshots[c]), "snapshot_id")
              for c in sorted(set(snapshots) - whole)]
    return functools.reduce(lambda a, b: a | b, parts) if parts else F.lit(False)


def _min_position(f: PlannedFile) -> int:
    return f.previous_size or 0 if f.prefix_unchanged else 0


def _snapshot_names(path: str) -> set[str]:
    """The names the ledger and the plans give the snapshot ``path`` is (none for a segment)."""
    info, label, _, _ = file_layout(path)
    return {n for n in (label, info.snapshot_id) if n is not None}


def _replacement_deletes(cat: Catalog, keys: list[Any]) -> list[tuple[str, str]]:
    """Deletes of landed log rows that a higher-epoch copy replaces (records and their typed tables)."""
    by_table: dict[str, set[tuple[str, int]]] = {}
    for k in keys:
        by_table.setdefault("records", set()).add((k["cluster_id"], k["log_offset"]))
        typed = cat.by_record_type.get(k["record_type"])
        if typed is not None:
            by_table.setdefault(typed.name, set()).add((k["cluster_id"], k["log_offset"]))
    out = []
    for name, pairs in sorted(by_table.items()):
        clauses = " OR ".join(f"(cluster_id = '{c.replace(chr(39), chr(39) * 2)}' AND log_offset = {o})"
                              for c, o in sorted(pairs))
        out.append((name, f"snapshot_id IS NULL AND ({clauses})"))
    return out


def _doubted(store: TableStore, cat: Catalog, todo: dict[str, _File], manifest: Manifest) -> set[str]:
    """The files of this run whose identity is in doubt: from their data directory (``meta.properties``, a node
    claimed twice) or from their records (they contradict another copy at the same offset and epoch)."""
    doubted = {p for p, f in todo.items() if f.identity.problem}
    staged = [f.spec for f in manifest.files if f.table == "divergence"]
    if staged:
        rows = store.read_parquet(staged, spark_schema(cat.core["divergence"])) \
            .filter(F.col("reason") == SAME_EPOCH).select("loser_file").distinct().collect()
        doubted |= {r["loser_file"] for r in rows}
    return doubted


def _sum_ledger(store: TableStore, cat: Catalog, files: list[StagedFile], columns: tuple[str, ...]
                ) -> tuple[int, ...]:
    """Totals of ``columns`` over the ledger rows this run staged (one job, executors read them)."""
    if not files:
        return tuple(0 for _ in columns)
    row = store.read_parquet([f.spec for f in files], spark_schema(cat.core["files"])) \
        .agg(*[F.sum(c).alias(c) for c in columns]).collect()[0]
    return tuple(int(row[c] or 0) for c in columns)


def _empty_file_row(path: str, f: _File, run_id: str) -> dict[str, object]:
    """The ledger row of an empty file: no rows, and the problems the reader and the identity find in it."""
    info, snap, _, _ = file_layout(path)
    ident = f.identity
    errors = [e.describe() for e in (*ident.errors(path), *read_columns(b"", path).errors)]
    return {"path": path, "cluster_id": ident.cluster_id, "node_id": ident.node_id, "data_dir": ident.data_dir,
            "file_kind": info.kind, "snapshot_id": snap, "deleted_snapshot": info.deleted, "size": 0,
            "modification_time": datetime.fromtimestamp(f.mtime_ms / 1000, UTC), "content_sha256": _EMPTY_SHA256,
            "batches": 0, "control_batches": 0, "records": 0, "crc_failures": 0, "first_offset": None,
            "last_offset": None, "metadata_version": None, "status": "empty", "error_count": len(errors),
            "errors": errors,
            "ingested_at": datetime.now(UTC), "run_id": run_id}


def _finish(store: TableStore, cat: Catalog, manifest: Manifest, result: IngestResult, t0: float,
            inputs: list[str]) -> IngestResult:
    result.table_rows = {t.name: manifest.rows(t.name) for t in cat.all() if manifest.rows(t.name)}
    result.seconds = time.time() - t0
    row = {"run_id": result.run_id, "started_at": datetime.fromtimestamp(t0, UTC), "finished_at": datetime.now(UTC),
           "seconds": result.seconds, "inputs": inputs, "files_seen": result.files_seen,
           "files_ingested": result.files_ingested, "records_decoded": result.records_decoded,
           "rows_added": result.rows_added, "divergent": result.divergent, "errors": result.errors,
           "writer": result.writer}
    runs = cat.core["runs"]
    manifest.files += store.stage_small(runs, pa.Table.from_pylist([row], schema=runs.schema), result.run_id)
    manifest.order = ["divergence", *cat.typed, "records", "batches", "files", "runs"]
    store.commit(manifest)
    store.discard_staging(result.run_id)
    result.phase("commit")
    result.seconds = time.time() - t0
    log.info("phases: %s", ", ".join(f"{k} {v:.1f} s" for k, v in result.phases.items()))
    return result


def read_table(spark: SparkSession, config: Config, name: str, store: TableStore | None = None) -> DataFrame:
    """Read any table of the warehouse (landed, typed, history, event) as a DataFrame (executors read its files)."""
    tables = warehouse_tables()
    if name not in tables:
        raise UsageError(f"no table {name!r} in a kraftlog warehouse; tables: {', '.join(sorted(tables))}")
    store = store or store_for(spark, config)
    return store.read(tables[name])

