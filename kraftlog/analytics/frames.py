"""The warehouse's Delta tables as pandas frames, without Spark (delta-rs): for notebooks and small clusters.

On a large warehouse read the same tables with Spark (``spark.read.format("delta").load(path)``) or
``kraftlog.spark.store.open_store``; the filters here are pushed down to the Parquet files either way.
"""

from __future__ import annotations

import os
from pathlib import Path

import pandas as pd

from kraftlog.storage import Storage, join, normalize

DEFAULT_WAREHOUSE = "warehouse"


def warehouse_path(default: str = DEFAULT_WAREHOUSE) -> str | Path:
    """The warehouse a notebook reads: ``$KRAFTLOG_WAREHOUSE``, else ``default`` (relative to the project);
    a URI (``s3://...``) as it is, read with the standard ``AWS_*`` (Azure, Google) variables."""
    where = os.environ.get("KRAFTLOG_WAREHOUSE", default)
    return where if "://" in where else Path(where).expanduser().resolve()


def read_table(warehouse: str | Path, name: str, cluster: str | None = None,
               columns: list[str] | None = None) -> pd.DataFrame:
    """Table ``name`` of the warehouse (only ``cluster``'s rows if given) as a pandas frame."""
    uri = join(normalize(str(warehouse)), name)
    dt = Storage.from_environment().delta_table(uri)
    if dt is None:
        raise FileNotFoundError(f"{uri}: no Delta table (run `kraftlog ingest`, `reconstruct` and `analyze` first)")
    filters = [("cluster_id", "=", cluster)] if cluster is not None else None
    return dt.to_pandas(columns=columns, filters=filters)


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
    """The last log offset whose record time is at or before ``when`` (-1 if none)."""
    t = pd.Timestamp(when)
    t = t.tz_localize("UTC") if t.tzinfo is None else t
    r = read_table(warehouse, "records", cluster, ["source", "log_offset", "timestamp"])
    r = r[(r["source"] == "log") & (r["timestamp"] <= t)]
    return int(r["log_offset"].max()) if len(r) else -1
