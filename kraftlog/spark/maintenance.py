"""Table upkeep: compact the small files hourly runs leave, clustered by cluster and time; optionally z-order;
vacuum what no version references.

Runs on the driver through pyarrow and delta-rs (no Spark job), holding the warehouse's lease like any writer,
after rolling forward a killed run's staged work (so a vacuum never removes files a pending manifest names).

Compaction keeps a fleet's tables clustered: the small files of a table with ``cluster_id`` are packed in order of
their first cluster and time into bins of about ``TARGET_FILE_BYTES``, and each bin's rows are written sorted by
cluster and time in row groups of ``ROW_GROUP_ROWS``, so a reader of a few clusters (an hourly increment, an
analyst's ``WHERE cluster_id = ...``) skips the row groups of the others by their bounds. (delta-rs's own
compaction concatenates files in commit order: every hour's files of every cluster end up in one row group.)
Only files under the target are rewritten, so a run's work follows what landed since the last one; files with rows the
next build rewrites (``TableDef.open_column``) are never packed with closed rows' files. Compaction and
z-ordering rewrite files without changing a row (``dataChange: false``); the application transactions that make
ingest idempotent are kept. Vacuum removes files unreferenced for longer than the retention (Delta's default:
7 days, which keeps time travel and readers of older versions working). Each table's log then gets a checkpoint at
its latest version (the next run reads it and no commit), and log entries past Delta's log retention are dropped.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from kraftlog.config import Config
from kraftlog.errors import UsageError
from kraftlog.spark.staging import StreamingWriter
from kraftlog.spark.store import TableStore, new_run_id, require_landed, warehouse_tables, writing
from kraftlog.tables.definitions import TableDef

log = logging.getLogger("kraftlog")

DEFAULT_RETENTION_HOURS = 168.0
# z-order by cluster, then by the column analysts filter time on (the first of these a table has)
TIME_COLUMNS = ("timestamp", "valid_from", "from_time", "hour", "ingested_at", "started_at")
TARGET_FILE_BYTES = 32 << 20  # a compacted file, compressed: a bin is held in the driver's memory to be sorted (about
# 18 times that for `records`: 28 MB of Parquet are 509 MB in Arrow)
ROW_GROUP_ROWS = 1 << 16  # rows per row group of a compacted file: what a reader skips by bounds


@dataclass
class MaintainResult:
    """What ``maintain`` did, per table: files rewritten (removed, added) and files vacuumed."""

    run_id: str
    tables: dict[str, dict[str, int]] = field(default_factory=dict)
    seconds: float = 0.0

    def line(self) -> str:
        total = {k: sum(t[k] for t in self.tables.values()) for k in ("removed", "added", "vacuumed")}
        return (f"kraftlog maintain {self.run_id}: {len(self.tables)} tables, files compacted {total['removed']} -> "
                f"{total['added']}, vacuumed {total['vacuumed']}, {self.seconds:.1f} s")


def all_tables() -> list[TableDef]:
    """Every table kraftlog writes: landed, histories, replay state, events."""
    return list(warehouse_tables().values())


def cluster_columns(table: TableDef) -> list[str]:
    """The columns ``table``'s files are clustered by: ``cluster_id``, then its time column (if it has them)."""
    names = set(table.schema.names)
    time_column = next((c for c in TIME_COLUMNS if c in names), None)
    return [c for c in ("cluster_id", time_column) if c is not None and c in names]


def compaction_bins(files: pa.Table, columns: list[str], target: int = TARGET_FILE_BYTES,
                    open_column: str | None = None) -> list[list[str]]:
    """The paths of ``files`` (a table's add actions, flattened) to compact together: those under ``target`` bytes,
    in order of their first ``columns`` values, packed into bins of at most ``target`` bytes (a file alone in its
    bin is left as it is). With ``open_column`` (``TableDef.open_column``), files with open rows (a null there) and
    files of closed rows only are never packed together."""
    firsts = [files[f"min.{c}"].to_pylist() if f"min.{c}" in files.column_names else [None] * files.num_rows
              for c in columns]
    nulls = f"null_count.{open_column}"
    opened = [bool(n) for n in files[nulls].to_pylist()] if nulls in files.column_names else [False] * files.num_rows
    small = sorted((o, tuple((v is not None, str(v)) for v in first), path, size)  # files without bounds first
                   for path, size, o, *first in zip(files["path"].to_pylist(), files["size_bytes"].to_pylist(), opened,
                                                    *firsts, strict=True) if size < target)
    bins: list[list[str]] = [[]]
    size, kind = 0, False
    for o, _, path, n in small:
        if bins[-1] and (size + n > target or o != kind):
            bins.append([])
            size = 0
        bins[-1].append(path)
        size, kind = size + n, o
    return [b for b in bins if len(b) > 1]


def compact_clustered(store: TableStore, table: TableDef, dt: Any, run_id: str, target: int = TARGET_FILE_BYTES,
                      row_group_rows: int | None = None) -> dict[str, int]:
    """Compact the small files of ``table`` (``dt``, its ``DeltaTable``) bin by bin (``compaction_bins``), each
    written sorted by its ``cluster_columns``; one commit. Files removed and added."""
    from deltalake import CommitProperties
    from deltalake.transaction import AddAction, RemoveAction

    columns = cluster_columns(table)
    files = pa.table(dt.get_add_actions(flatten=True))
    bins = compaction_bins(files, columns, target, table.open_column)
    if not bins:
        return {"removed": 0, "added": 0}
    root = store.path(table)
    fs, base = store.storage.filesystem(root)
    sizes = dict(zip(files["path"].to_pylist(), files["size_bytes"].to_pylist(), strict=True))
    now = int(time.time() * 1000)
    actions: list[AddAction | RemoveAction] = []
    for paths in bins:
        rows = pa.concat_tables([pq.read_table(f"{base.rstrip('/')}/{p}", filesystem=fs)
                                 .select(table.schema.names).cast(table.schema) for p in paths])
        order = pc.sort_indices(rows, sort_keys=[(c, "ascending") for c in columns])
        writer = StreamingWriter(table.name, root, table.schema, "", store.storage)
        step = row_group_rows or ROW_GROUP_ROWS
        for lo in range(0, rows.num_rows, step):  # a row group at a time: the bin is held once, not twice
            writer.write(rows.take(order[lo:lo + step]))
        out = writer.close()
        del rows, order
        pa.default_memory_pool().release_unused()
        actions += [RemoveAction(p, False, now, sizes[p]) for p in paths]
        actions.append(AddAction(out.path, out.size, {}, out.modification_time, False, out.stats))
    dt.create_write_transaction(actions, mode="append", schema=table.schema,
                                commit_properties=CommitProperties(custom_metadata={"kraftlog.maintain": run_id}))
    return {"removed": sum(len(b) for b in bins), "added": len(bins)}


def _counts(metrics: dict[str, Any]) -> dict[str, int]:
    """Files removed and added, from delta-rs's optimize metrics."""
    return {"removed": int(metrics.get("numFilesRemoved", 0)), "added": int(metrics.get("numFilesAdded", 0))}


def checkpoint(dt: Any, table: TableDef) -> None:
    """A checkpoint of ``dt``'s log at its latest version, the log entries past their retention dropped; a table
    made before kraftlog set ``delta.checkpointInterval`` is given it (its commits checkpoint themselves after)."""
    wanted = {k: v for k, v in table.table_properties().items() if k.startswith("delta.")}
    if any(dt.metadata().configuration.get(k) != v for k, v in wanted.items()):
        dt.alter.set_table_properties(wanted, raise_if_not_exists=False)
    dt.update_incremental()
    dt.create_checkpoint()
    dt.cleanup_metadata()


def check_retention(hours: float) -> float:
    """``hours``, a vacuum's retention: a ``UsageError`` unless it is a finite number of hours, 0 or more (the CLI and
    the job ask before Spark starts)."""
    if not 0 <= hours < math.inf:  # (NaN too)
        raise UsageError(f"retention of {hours} hours: a number of hours, 0 or more")
    return hours


def maintain(store: TableStore, config: Config, z_order: bool = False, vacuum: bool = True,
             retention_hours: float = DEFAULT_RETENTION_HOURS, target: int = TARGET_FILE_BYTES) -> MaintainResult:
    """Compact (clustered, or z-order) and vacuum every table of ``store``'s warehouse, under its lease. Vacuum keeps
    the files unreferenced for less than ``retention_hours``, rounded up to a whole hour (delta-rs counts whole
    hours: rounded down, 1.5 would remove files unreferenced for an hour and a quarter)."""
    from deltalake import WriterProperties

    check_retention(retention_hours)
    require_landed(store)
    run_id = new_run_id()
    result = MaintainResult(run_id)
    t0 = time.time()
    writer = WriterProperties(compression="ZSTD", compression_level=1)
    with writing(store, config, run_id, "maintain") as lease:
        store.recover()
        for table in all_tables():
            dt = store.storage.delta_table(store.path(table))
            if dt is None:
                continue
            lease.check()
            columns = cluster_columns(table)
            if z_order and columns:
                done = _counts(dt.optimize.z_order(columns, writer_properties=writer))
            elif columns[:1] == ["cluster_id"]:
                done = compact_clustered(store, table, dt, run_id, target)
            else:
                done = _counts(dt.optimize.compact(target_size=target, writer_properties=writer))
            if vacuum:
                dt.update_incremental()  # the compaction's commit
            vacuumed = dt.vacuum(retention_hours=math.ceil(retention_hours), dry_run=False,
                                 enforce_retention_duration=False) if vacuum else []
            checkpoint(dt, table)
            result.tables[table.name] = {**done, "vacuumed": len(vacuumed)}
            log.info("%s: %s", table.name, result.tables[table.name])
    result.seconds = time.time() - t0
    return result
