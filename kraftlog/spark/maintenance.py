"""Table upkeep: compact the small files hourly runs leave, optionally z-order, vacuum what no version references.

Runs through delta-rs on the driver (no Spark job), holding the warehouse's lease like any writer, after
rolling forward a killed run's staged work (so a vacuum never removes files a pending manifest names).
Compaction and z-ordering rewrite files without changing a row; the application transactions that make
ingest idempotent are kept. Vacuum removes files unreferenced for longer than the retention (Delta's
default: 7 days, which keeps time travel and readers of older versions working).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any

from kraftlog.config import Config
from kraftlog.spark.store import TableStore, new_run_id, warehouse_tables, writing
from kraftlog.tables.definitions import TableDef

log = logging.getLogger("kraftlog")

DEFAULT_RETENTION_HOURS = 168.0
# z-order by cluster, then by the column analysts filter time on (the first of these a table has)
TIME_COLUMNS = ("timestamp", "valid_from", "from_time", "hour", "ingested_at", "started_at")


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


def z_order_columns(table: TableDef) -> list[str]:
    names = set(table.schema.names)
    time_column = next((c for c in TIME_COLUMNS if c in names), None)
    return [c for c in ("cluster_id", time_column) if c is not None and c in names]


def maintain(store: TableStore, config: Config, z_order: bool = False, vacuum: bool = True,
             retention_hours: float = DEFAULT_RETENTION_HOURS) -> MaintainResult:
    """Compact (or z-order) and vacuum every table of ``store``'s warehouse, under its lease."""
    from deltalake import DeltaTable, WriterProperties

    run_id = new_run_id()
    result = MaintainResult(run_id)
    t0 = time.time()
    options = store.storage.delta_options()
    writer = WriterProperties(compression="ZSTD", compression_level=1)
    with writing(store, config, run_id, "maintain") as lease:
        store.recover()
        for table in all_tables():
            uri = store.storage.table_uri(store.path(table))
            if not DeltaTable.is_deltatable(uri, storage_options=options):
                continue
            lease.check()
            dt = DeltaTable(uri, storage_options=options)
            columns = z_order_columns(table) if z_order else []
            metrics: dict[str, Any] = (dt.optimize.z_order(columns, writer_properties=writer) if columns
                                       else dt.optimize.compact(writer_properties=writer))
            vacuumed = dt.vacuum(retention_hours=int(retention_hours), dry_run=False,
                                 enforce_retention_duration=False) if vacuum else []
            result.tables[table.name] = {"removed": int(metrics.get("numFilesRemoved", 0)),
                                         "added": int(metrics.get("numFilesAdded", 0)), "vacuumed": len(vacuumed)}
            log.info("%s: %s", table.name, result.tables[table.name])
    result.seconds = time.time() - t0
    return result
