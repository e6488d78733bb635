"""Parquet files staged for kraftlog's tables: written through pyarrow to any storage it reaches (executors write
them, the driver commits them: ``kraftlog.spark.store``), each with the Delta statistics its readers skip files by.

Every file is zstd-compressed, dictionary-encoded on its string columns but free text (``dictionary_columns``), and
carries numRecords, nullCount and min/max of every filterable top-level column, timestamps included
(``file_stats``): a reader filtering on a cluster, an offset or a time skips the files whose bounds rule it out.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from kraftlog.points import iso_ms
from kraftlog.spark.inputs import FileSpec
from kraftlog.storage import Storage, join, open_output

# a router turns one input batch into rows of tables: one dict, or several (to bound memory)
Router = Callable[[Any], dict[str, pa.Table] | Iterator[dict[str, pa.Table]]]  # a RecordBatch, or file contents
# a producer turns one task's input batches into rows of tables (for ``TableStore.stage_chunks``, in
# ``kraftlog.spark.store``); a key ``<table>#<part>`` puts rows in a file of their own
FILE_PART = "#"
Producer = Callable[[Iterable[Any]], Iterator[dict[str, pa.Table]]]

# what executor-side writers return to the driver: one row per Parquet file written
WRITTEN = pa.schema([("table", pa.string()), ("path", pa.string()), ("size", pa.int64()),
                     ("modification_time", pa.int64()), ("num_records", pa.int64()), ("stats", pa.string())])


@dataclass(frozen=True)
class StagedFile:
    """A Parquet file written for a table, not yet committed. ``path`` is relative to ``root``."""

    table: str
    root: str
    path: str
    size: int
    modification_time: int
    num_records: int
    stats: str

    @property
    def spec(self) -> FileSpec:
        """The file as a ``FileSpec`` (its URI, size and modification time), to read it back."""
        return FileSpec(join(self.root, self.path), self.size, self.modification_time)


def file_stats(t: pa.Table) -> str:
    """Delta file statistics: numRecords, nullCount, and min/max of every filterable top-level column (integers,
    floats, timestamps, dates and short strings; not JSON or error text), so readers skip files by any of them."""
    mins: dict[str, Any] = {}
    maxs: dict[str, Any] = {}
    nulls: dict[str, int] = {}
    for name, column in zip(t.column_names, t.columns, strict=True):
        typ = column.type
        if pa.types.is_nested(typ):
            continue
        nulls[name] = column.null_count
        if column.null_count == len(column) or name in FREE_TEXT:
            continue
        bounds = _bounds(column)
        if bounds is not None:
            mins[name], maxs[name] = bounds
    return json.dumps({"numRecords": t.num_rows, "minValues": mins, "maxValues": maxs, "nullCount": nulls})


def _bounds(column: pa.ChunkedArray) -> tuple[Any, Any] | None:
    """(min, max) of a column as Delta statistics hold them, or None where none are kept."""
    typ = column.type
    if pa.types.is_timestamp(typ):  # ISO-8601 in UTC, to the millisecond: min rounded down, max up
        mm = pc.min_max(column.cast(pa.timestamp("us", tz="UTC")))
        lo, hi = mm["min"].value, mm["max"].value
        return iso_ms(lo // 1000), iso_ms(-(-hi // 1000))
    if pa.types.is_date(typ):
        mm = pc.min_max(column)
        return mm["min"].as_py().isoformat(), mm["max"].as_py().isoformat()
    if pa.types.is_integer(typ) or pa.types.is_floating(typ) or pa.types.is_string(typ):
        mm = pc.min_max(column)
        lo, hi = mm["min"].as_py(), mm["max"].as_py()
        if isinstance(lo, float) and (lo != lo or hi != hi):  # NaN: no usable bounds
            return None
        if isinstance(lo, str) and (len(lo) > 64 or len(hi) > 64):
            return None  # a truncated max would need a successor string; leave long strings out
        return lo, hi
    return None


FREE_TEXT = frozenset({"data_json", "error", "loser_data_json"})


def dictionary_columns(schema: pa.Schema) -> list[str]:
    """Columns worth Parquet dictionary encoding: top-level strings (ids, names, kinds), not JSON or error text.

    Dictionaries on integer columns (offsets, timestamps, hashes, nearly all distinct) cost the writer
    more than they save; zstd packs those better: on the corpus, writing ``records``, ``batches`` and
    ``no_op_record`` takes half the time and the files are 28% smaller than with dictionaries everywhere.
    """
    return [f.name for f in schema if pa.types.is_string(f.type) and f.name not in FREE_TEXT]


def _parquet_options(schema: pa.Schema) -> dict[str, Any]:
    return {"compression": "zstd", "compression_level": 1, "use_dictionary": dictionary_columns(schema)}


def write_parquet(table: str, root: str, data: pa.Table, storage: Storage, prefix: str = "") -> StagedFile:
    """Write one Parquet file under ``root`` (any URI ``storage`` reaches)."""
    filesystem, base = storage.filesystem(root)
    rel = f"{prefix}part-{uuid.uuid4()}.zstd.parquet"
    full = base.rstrip("/") + "/" + rel
    with open_output(filesystem, full) as out:
        pq.write_table(data, out, **_parquet_options(data.schema))
        size = out.tell()
    return StagedFile(table, root, rel, size, int(time.time() * 1000), data.num_rows, file_stats(data))


def staged_rows(files: list[StagedFile], storage: Storage) -> pa.Table:
    """The rows of staged ``files``, read here (small ones; ``TableStore.read_staged`` reads them with Spark)."""
    return pa.concat_tables(pq.read_table(pa.BufferReader(storage.read_bytes(f.spec.path))) for f in files)


def restage(files: list[StagedFile], data: pa.Table, storage: Storage) -> StagedFile:
    """One staged file holding ``data`` in place of ``files`` (of one table, under one root), which are removed."""
    first = files[0]
    prefix = first.path.rsplit("/", 1)[0] + "/" if "/" in first.path else ""
    out = write_parquet(first.table, first.root, data, storage, prefix)
    for f in files:
        storage.delete(join(f.root, f.path))
    return out


class StreamingWriter:
    """One Parquet file per table, written row group by row group (bounded memory); with ``group_rows``, tables are
    held back until they make a row group of at least that many rows."""

    def __init__(self, table: str, root: str, schema: pa.Schema, prefix: str, storage: Storage, group_rows: int = 0):
        self.table, self.root, self.schema, self.group_rows = table, root, schema, group_rows
        self.pending: list[pa.Table] = []
        self.fs, base = storage.filesystem(root)
        self.rel = f"{prefix}part-{uuid.uuid4()}.zstd.parquet"
        self.full = base.rstrip("/") + "/" + self.rel
        self.stream = open_output(self.fs, self.full)
        self.writer = pq.ParquetWriter(self.stream, schema, **_parquet_options(schema))
        self.rows = 0
        self.stats: list[str] = []

    def write(self, t: pa.Table) -> None:
        self.pending.append(t)
        if sum(p.num_rows for p in self.pending) >= self.group_rows:
            self._write()

    def _write(self) -> None:
        if self.pending:
            t, self.pending = pa.concat_tables(self.pending).cast(self.schema), []
            self.writer.write_table(t)
            self.rows += t.num_rows
            self.stats.append(file_stats(t))

    def close(self) -> StagedFile:
        self._write()
        self.writer.close()
        size = self.stream.tell()
        self.stream.close()
        return StagedFile(self.table, self.root, self.rel, size, int(time.time() * 1000), self.rows,
                          merged_stats(self.stats))


def merged_stats(parts: list[str]) -> str:
    """Delta statistics of a file from those of its row groups."""
    docs = [json.loads(p) for p in parts]
    mins: dict[str, Any] = {}
    maxs: dict[str, Any] = {}
    nulls: dict[str, int] = {}
    for d in docs:
        for k, v in d["nullCount"].items():
            nulls[k] = nulls.get(k, 0) + v
        for k, v in d["minValues"].items():
            mins[k] = v if k not in mins else min(mins[k], v)
        for k, v in d["maxValues"].items():
            maxs[k] = v if k not in maxs else max(maxs[k], v)
    # a column min/max is valid only if every row group reported it (or had only nulls)
    rows = sum(d["numRecords"] for d in docs)
    keep = {k for k in mins if all(k in d["minValues"] or d["nullCount"].get(k, 0) == d["numRecords"] for d in docs)}
    return json.dumps({"numRecords": rows, "minValues": {k: mins[k] for k in keep},
                       "maxValues": {k: maxs[k] for k in keep}, "nullCount": nulls})


def routed(batches: Iterable[Any], router: Router) -> Iterator[dict[str, pa.Table]]:
    """The rows of ``batches`` (Arrow record batches, or batches of file contents) as the router assigns them."""
    for batch in batches:
        if len(batch):
            out = router(batch)
            yield from [out] if isinstance(out, dict) else out
    flush = getattr(router, "flush", None)  # a router may hold rows back across batches
    if flush is not None:
        yield from flush()


def stage_partition(chunks: Iterable[dict[str, pa.Table]], roots: dict[str, str], schemas: dict[str, pa.Schema],
                     prefix: str, storage: Storage) -> Iterator[pa.RecordBatch]:
    """Executor side: stream each table's rows into one Parquet file per task (per ``<table>#<part>`` key of the
    chunks: one file per part); one metadata row per file."""
    writers: dict[str, StreamingWriter] = {}
    for chunk in chunks:
        for key, t in chunk.items():
            if t.num_rows:
                w = writers.get(key)
                if w is None:
                    name = key.split(FILE_PART)[0]
                    w = writers[key] = StreamingWriter(name, roots[name], schemas[name], prefix, storage)
                w.write(t)
    rows = [{k: v for k, v in asdict(w.close()).items() if k != "root"} for w in writers.values()]
    if rows:
        yield pa.RecordBatch.from_pylist(rows, schema=WRITTEN)
