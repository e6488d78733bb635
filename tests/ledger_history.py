"""Rows of ledger history, as a fleet's years of hourly runs leave them (the ledger test and ``bench_ledger.py``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

OWN_SHARE = 10  # one synthetic row in ten is an older version of the cluster's own files
CLUSTERS = 50


def history(landed: pa.Table, rows: int, start: int = 0) -> pa.Table:
    """``rows`` ledger rows of history made of the landed ones (``landed``, the ``files`` table): the versions of the
    fleet's other clusters' files (their paths and cluster ids of their own), and, one in ``OWN_SHARE``, older
    versions of the cluster's own files (their offsets and sizes smaller, landed a day before)."""
    n = landed.num_rows
    idx = pa.array([i % n for i in range(start, start + rows)], pa.int64())
    out = landed.take(idx)
    seq = pa.array(range(start, start + rows), pa.int64())
    own = pc.equal(pc.remainder(seq, OWN_SHARE), 0)
    version = pc.cast(pc.divide(seq, n), pa.string())
    fleet = pc.binary_join_element_wise("s3://archive/fleet-", pc.cast(pc.remainder(pc.divide(seq, n), CLUSTERS),
                                                                         pa.string()), "")
    prefix = pc.binary_join_element_wise(fleet, "/v", version, "/", "")

    def column(name: str, values: Any) -> None:
        nonlocal out
        out = out.set_column(out.schema.get_field_index(name), name, pc.cast(values, out.schema.field(name).type))

    column("path", pc.if_else(own, out["path"], pc.binary_join_element_wise(prefix, out["path"], "")))
    column("data_dir", pc.if_else(own, out["data_dir"], pc.binary_join_element_wise(prefix, out["data_dir"], "")))
    column("cluster_id", pc.if_else(own, out["cluster_id"], fleet))
    for name in ("last_offset", "size"):
        column(name, pc.if_else(own, pc.divide(out[name], 2), out[name]))
    day = pa.scalar(86_400_000_000, pa.int64())
    column("ingested_at", pc.cast(pc.subtract(pc.cast(out["ingested_at"], pa.int64()), day),
                                  out.schema.field("ingested_at").type))
    return out


def add_history(warehouse: Path, rows: int, chunk: int = 500_000) -> None:
    """Append ``rows`` rows of history (``history``) to the ``files`` table of ``warehouse``."""
    from deltalake import DeltaTable, write_deltalake

    table = str(warehouse / "files")
    landed = DeltaTable(table).to_pyarrow_table()
    for start in range(0, rows, chunk):
        write_deltalake(table, history(landed, min(chunk, rows - start), start), mode="append")
