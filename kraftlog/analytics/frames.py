"""The warehouse's Delta tables as pandas frames, without Spark (delta-rs): for notebooks and small clusters.

On a large warehouse read the same tables with Spark (``spark.read.format("delta").load(path)``) or
``kraftlog.spark.store.open_store``; the filters here are pushed down to the Parquet files either way.
"""

from __future__ import annotations

import functools
import operator
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from kraftlog.commits import CommitMarks
from kraftlog.points import ANY, GREATEST, Ask, Records, last_offset_at
from kraftlog.state.entities import replay_tables
from kraftlog.storage import Storage, join, normalize

DEFAULT_WAREHOUSE = "warehouse"


def warehouse_path(default: str = DEFAULT_WAREHOUSE) -> str | Path:
    """The warehouse a notebook reads: ``$KRAFTLOG_WAREHOUSE``, else ``default`` (relative to the project);
    a URI (``s3://...``) as it is, read with the standard ``AWS_*`` (Azure, Google) variables."""
    where = os.environ.get("KRAFTLOG_WAREHOUSE", default)
    return where if "://" in where else Path(where).expanduser().resolve()


def read_table(warehouse: str | Path, name: str, cluster: str | None = None,
               columns: list[str] | None = None) -> pd.DataFrame:
    """Table ``name`` of the warehouse (only ``cluster``'s rows if given) as a pandas frame. A table that a history
    build commits (an entity history, ``replay_ranges``) is read as no build left it half committed, by the
    commands' rule (``kraftlog.commits``): read again once a build committing it has finished; ``NotBuilt`` where
    one stopped while committing it."""
    def read() -> pd.DataFrame:
        filters = [("cluster_id", "=", cluster)] if cluster is not None else None
        return _delta_table(warehouse, name).to_pandas(columns=columns, filters=filters)

    if name not in _HISTORY_BUILT:
        return read()
    return CommitMarks(Storage.from_environment(), normalize(str(warehouse))).read_histories(read, leased=False)


_HISTORY_BUILT = frozenset(t.name for t in replay_tables())


def _delta_table(warehouse: str | Path, name: str) -> Any:
    """The ``deltalake.DeltaTable`` of table ``name`` of the warehouse."""
    uri = join(normalize(str(warehouse)), name)
    dt = Storage.from_environment().delta_table(uri)
    if dt is None:
        raise FileNotFoundError(f"{uri}: no Delta table (run `kraftlog ingest`, `reconstruct` and `analyze` first)")
    return dt


def clusters(warehouse: str | Path) -> list[str]:
    """The clusters whose histories were built (``replay_ranges``)."""
    return sorted(read_table(warehouse, "replay_ranges", columns=["cluster_id"])["cluster_id"])


def holding_at(df: pd.DataFrame, offset: int, start: str = "valid_from_offset", end: str = "valid_to_offset"
               ) -> pd.DataFrame:
    """The rows of ``df`` (versions, or windows with ``from_offset``/``to_offset``) that hold at ``offset``:
    ``start <= offset < end``, a null ``end`` still holding (``analytics.events.valid_at`` in Spark)."""
    return df[(df[start] <= offset) & (df[end].isna() | (df[end] > offset))]


def state_at(warehouse: str | Path, kind: str, cluster: str, offset: int) -> pd.DataFrame:
    """The versions of entity ``kind`` (brokers, partitions, ...) valid at ``offset`` (inclusive)."""
    h = holding_at(read_table(warehouse, f"{kind}_history", cluster), offset)
    return h.drop(columns=["valid_to_offset", "valid_to", "ended_by"]).reset_index(drop=True)


def offset_at(warehouse: str | Path, cluster: str, when: pd.Timestamp | str) -> int:
    """The last log offset whose record time is at or before ``when`` (-1 if none), read from the end of the log
    (``kraftlog.points.last_offsets_at``), not from every record of the cluster."""
    t = pd.Timestamp(when)
    t = t.tz_localize("UTC") if t.tzinfo is None else t
    return last_offset_at(_LogOffsets(warehouse), cluster, int(t.value // 1_000_000))


class _LogOffsets:
    """``kraftlog.points.RecordOffsets`` of the clusters' log records in the ``records`` table, with Arrow datasets
    (row groups pruned by their statistics)."""

    def __init__(self, warehouse: str | Path):
        self.records = _delta_table(warehouse, "records").to_pyarrow_dataset()
        self.time = self.records.schema.field("timestamp").type

    def _filter(self, cluster: str, records: Records) -> pc.Expression:
        conditions = records.conditions(pc.field, lambda ms: pa.scalar(ms, pa.timestamp("ms", "UTC")).cast(self.time))
        return functools.reduce(operator.and_, conditions, (pc.field("cluster_id") == cluster)
                                & (pc.field("source") == "log"))

    # (scans on Arrow's threads over delta-rs's file system could leave a thread running at exit: the process aborted
    # there, "terminate called without an active exception", in 2 of 19 runs, in none of 40 without them)
    def answer(self, asks: Mapping[str, Ask]) -> dict[str, int | None]:
        found: dict[str, int | None] = {}
        for c, ask in asks.items():
            where = self._filter(c, ask.records)
            if ask.what == ANY:
                one = self.records.head(1, columns=["log_offset"], filter=where, use_threads=False)["log_offset"]
                found[c] = one[0].as_py() if len(one) else None
            else:
                offsets = self.records.to_table(columns=["log_offset"], filter=where, use_threads=False)["log_offset"]
                found[c] = (pc.max if ask.what == GREATEST else pc.min)(offsets).as_py()
        return found
