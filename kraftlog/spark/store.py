"""Delta tables under a warehouse path, written and read at Spark scale, committed all-or-nothing.

A run writes in two steps:

1. **stage**: executors write Parquet files with pyarrow (``kraftlog.spark.staging``) and return only file
   metadata (no data passes through the driver); small tables (ledger, runs) are staged by the driver the same way;
2. **commit**: a manifest listing every staged file and every delete of the run is written first
   (``<warehouse>/_kraftlog/pending/``), then each table gets one Delta commit carrying the
   application transaction ``(kraftlog-append | kraftlog-delete, run_seq)``. A table whose transaction
   version already reached ``run_seq`` is skipped, so replaying a manifest is safe: a run killed
   half-way is rolled forward by the next run before it plans anything (``recover``).

Two implementations:

* ``DeltaRsStore`` (default; no jar): Parquet files go straight into the table folder and are added
  to the Delta log with delta-rs (``create_write_transaction``). Reads list the active files with
  delta-rs and let Spark read them.
* ``DeltaSparkStore``: the delta-spark jar in the session; staged files are appended with
  ``format("delta")`` and ``txnAppId``/``txnVersion``; reads use ``format("delta")``.
"""

from __future__ import annotations

import json
import logging
import threading
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from typing import Any
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq
from pyarrow import fs as pafs
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import types as T
from pyspark.sql.pandas.types import from_arrow_schema

from kraftlog.commits import CommitMarks
from kraftlog.config import WRITERS, Config
from kraftlog.errors import KraftlogError, NotBuilt, UsageError
from kraftlog.identity import choose_cluster
from kraftlog.lease import Lease
from kraftlog.planning import pack
from kraftlog.spark.inputs import FileGroups, FileSpec
from kraftlog.spark.predicates import Bounds, Scope
from kraftlog.spark.session import (
    JobThreads,
    default_parallelism,
    described,
    in_threads,
    is_connect,
    run_settings,
)
from kraftlog.spark.staging import (
    FILE_PART,
    WRITTEN,
    Producer,
    Router,
    StagedFile,
    routed,
    stage_partition,
    write_parquet,
)
from kraftlog.storage import NotADirectory, Storage, is_local, join, normalize, scheme
from kraftlog.tables.definitions import TableDef, catalog
from kraftlog.wire.discover import Entry

log = logging.getLogger("kraftlog")

APPEND_APP = "kraftlog-append"
DELETE_APP = "kraftlog-delete"
# what a derived table is replaced with (``TableStore.replace``): its rows (None: none) and the SQL predicate of the
# rows they replace (None: all)
Landing = tuple[DataFrame | None, str | None]


def spark_schema(table: TableDef) -> Any:
    """The Spark StructType of a table (column comments kept as field metadata)."""
    st = from_arrow_schema(table.schema)
    for f in st.fields:
        comment = (table.schema.field(f.name).metadata or {}).get(b"comment")
        if comment:
            f.metadata = {"comment": comment.decode()}
    return st


@dataclass
class Manifest:
    """Everything one run commits: deletes (first), then staged files, table by table in order."""

    run_id: str
    run_seq: int
    deletes: list[tuple[str, str]] = field(default_factory=list)  # (table, predicate)
    files: list[StagedFile] = field(default_factory=list)
    order: list[str] = field(default_factory=list)  # table commit order (the ledger and runs last)

    def to_json(self) -> str:
        return json.dumps({"run_id": self.run_id, "run_seq": self.run_seq, "deletes": self.deletes,
                           "files": [asdict(f) for f in self.files], "order": self.order})

    @classmethod
    def from_json(cls, text: str) -> Manifest:
        d = json.loads(text)
        deletes = [(str(t), str(p)) for t, p in d["deletes"]]
        return cls(d["run_id"], d["run_seq"], deletes, [StagedFile(**f) for f in d["files"]], d["order"])

    def rows(self, table: str) -> int:
        return sum(f.num_records for f in self.files if f.table == table)

    def delete(self, table: str, predicate: str) -> None:
        """Delete the rows of ``table`` matching ``predicate`` first: one delete per table and run (a run's deletes
        are committed once each, ``TableStore._delete``), so a second predicate for a table joins the first."""
        for i, (name, where) in enumerate(self.deletes):
            if name == table:
                self.deletes[i] = (name, f"({where}) OR ({predicate})")
                return
        self.deletes.append((table, predicate))


class TableStore(ABC):
    """Where kraftlog's tables live: staging (executors write Parquet), manifests and recovery shared by
    both writers; each writer commits (``ensure``, ``_append``, ``_delete``, ``overwrite``) and reads."""

    kind = "base"

    def __init__(self, spark: SparkSession, warehouse: str, after_commit: Callable[[str], None] | None = None,
                 storage: Storage | None = None):
        self.spark = spark
        self.storage = storage if storage is not None else Storage.from_environment()
        self.warehouse = normalize(warehouse)
        self.after_commit = after_commit  # called with the table name after each commit (tests use it)
        self.lease: Lease | None = None  # held by the run writing this warehouse; checked before each commit

    def path(self, table: TableDef) -> str:
        return join(self.warehouse, table.name)

    def _guard(self) -> None:
        if self.lease is not None:
            self.lease.check()

    def read_parquet(self, files: list[FileSpec], schema: Any) -> DataFrame:
        """Parquet ``files`` as a DataFrame of ``schema`` (a Spark StructType): Spark's own reader where Spark
        reaches the files without extra jars (local disk, HDFS), else read on the executors with pyarrow."""
        if not files:
            return _empty(self.spark, schema)
        files = [replace(f, path=normalize(f.path)) for f in files]
        if all(is_local(f.path) or scheme(f.path) == "hdfs" for f in files):
            return self.spark.read.schema(schema).parquet(*(f.path for f in files))
        return read_parquet_with_pyarrow(self.spark, files, schema, self.storage)

    def stage_root(self, table: TableDef, run_id: str) -> tuple[str, str]:
        """(root URI, file prefix) where a run's files for ``table`` are written."""
        return self.path(table), ""

    def parquet_files(self, folder: str) -> list[FileSpec]:
        """The Parquet files under ``folder`` (a URI), at any depth, by URI."""
        folder = normalize(folder)
        filesystem, path = self.storage.filesystem(folder)
        prefix = "file:" if is_local(folder) else folder[: folder.index("://") + 3]  # pyarrow drops the scheme
        infos = filesystem.get_file_info(pafs.FileSelector(path, recursive=True, allow_not_found=True))
        return sorted((FileSpec(prefix + i.path, i.size, i.mtime_ns // 1_000_000 if i.mtime_ns else 0)
                       for i in infos if i.type == pafs.FileType.File and i.path.endswith(".parquet")),
                      key=lambda f: f.path)

    def stage(self, df: DataFrame | FileGroups, tables: list[TableDef], router: Router, run_id: str,
              on_driver: bool = False) -> list[StagedFile]:
        """Executors route the rows of ``df`` (or the contents of the files ``df`` names) to ``tables`` and
        write them as Parquet files; the driver gets the files' metadata only. ``on_driver``: ``df``'s rows are
        few: collected as Arrow and written by the driver (no Python task)."""
        return self.stage_chunks(df, tables, lambda batches: routed(batches, router), run_id, on_driver=on_driver)

    def stage_chunks(self, df: DataFrame | FileGroups, tables: list[TableDef], produce: Producer, run_id: str,
                     scratch: bool = False, on_driver: bool = False) -> list[StagedFile]:
        """``stage`` with ``produce`` turning each task's input batches into rows of ``tables``. With ``scratch``
        the files go under ``_kraftlog/staging/<run_id>/`` (read back with ``read_staged``, removed by
        ``discard_staging``), not into the tables. With ``on_driver`` (a DataFrame of few rows) the driver runs
        that task itself over the frame's rows collected as Arrow: the same routing, writer and files."""
        placed = {t.name: (self._scratch(run_id, t.name), "") if scratch else self.stage_root(t, run_id)
                  for t in tables}
        roots = {n: r for n, (r, _) in placed.items()}
        prefixes = {p for _, p in placed.values()}
        prefix = prefixes.pop() if len(prefixes) == 1 else ""
        schemas = {t.name: t.schema for t in tables}
        storage = self.storage

        def task(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
            return stage_partition(produce(batches), roots, schemas, prefix, storage)

        written: list[Any]  # (rows of ``WRITTEN``)
        if isinstance(df, FileGroups):
            written = df.map(self.spark, task, WRITTEN).collect()
        elif on_driver:
            written = [r for b in task(df.toArrow().to_batches()) for r in b.to_pylist()]
        else:
            written = df.mapInArrow(task, from_arrow_schema(WRITTEN)).collect()  # file metadata only
        return [StagedFile(r["table"], roots[r["table"]], r["path"], r["size"], r["modification_time"],
                           r["num_records"], r["stats"]) for r in written]

    def _scratch(self, run_id: str, name: str) -> str:
        return join(self.warehouse, "_kraftlog", "staging", run_id, name)

    def read_staged(self, table: TableDef, files: list[StagedFile]) -> DataFrame:
        """The rows of ``table`` in staged ``files``."""
        return self.read_parquet([f.spec for f in files if f.table == table.name], spark_schema(table))

    def stage_small(self, table: TableDef, data: pa.Table, run_id: str) -> list[StagedFile]:
        if data.num_rows == 0:
            return []
        root, prefix = self.stage_root(table, run_id)
        return [write_parquet(table.name, root, data.cast(table.schema), self.storage, prefix)]

    def replace(self, planned: Iterable[tuple[TableDef, Callable[[], Landing | None]]], build_id: str,
                jobs: int = 4, small: bool = False) -> dict[str, int]:
        """Replace rows of derived tables (the event tables; each ``ensure``d before) with the rows of their
        DataFrames; row counts by the tables replaced. Each table comes with what makes its ``Landing``: its frame
        and the SQL predicate of the rows it replaces (None: all); a frame of None: no rows (those rows are only
        removed, with no Spark job); no landing: the table is left as it is.

        ``jobs`` tables at a time are made, computed and committed, each in a thread of its own (small tables
        cost the driver's planning and scheduling, not cores: the driver plans one while executors run another),
        each submitted as soon as ``planned`` yields it. One Spark job per table computes its frame and executors
        write the files; then the table gets its commit, while the others still run, so a reader sees the previous
        build or this one (a build killed before its commits leaves only unreferenced files, removed by VACUUM).

        Each table's rows are written by as many tasks as the cluster runs at once, a file each. A ``small`` run's
        rows are few (``kraftlog.spark.session.interpreted``): each table's are collected as Arrow and written by the
        driver, in one file, with no Python task (each costs the executors a fixed ~0.1 CPU-s: an hour of the
        5M-record benchmark cluster writes 13 tables, its analysis 6.9 -> 6.1 s).
        """
        n = 1 if small else default_parallelism(self.spark)

        def land(t: TableDef, make: Callable[[], Landing | None]) -> int | None:
            with described(self.spark, f"kraftlog {build_id}: {t.name}"):
                landing = make()
                if landing is None:
                    return None
                df, where = landing
                files = [] if df is None else self.stage(  # one narrow job per table: Arrow of wide structs
                    df.select(*t.columns).coalesce(n), [t], _open_apart(t), build_id, on_driver=small)
            self.overwrite(t, files, build_id, where)
            return sum(f.num_records for f in files)

        with JobThreads(self.spark, max(1, jobs)) as pool:  # (the run's jobs, each described by its table)
            pending = [(t.name, pool.submit(land, t, make)) for t, make in planned]
            return {name: rows for name, future in pending if (rows := future.result()) is not None}

    @abstractmethod
    def ensure(self, table: TableDef) -> bool:
        """Create ``table`` if it does not exist; check its layout if it does (``_layout_checked``).
        True when the table was (re)created empty."""

    def ensure_all(self, tables: Iterable[TableDef], jobs: int = 8) -> list[str]:
        """``ensure`` each of ``tables``, ``jobs`` at a time (each reads a table's log: round trips on an object
        store); the names of those (re)created empty, in order."""
        todo = list(tables)
        return [t.name for t, remade in zip(todo, in_threads(self.ensure, todo, jobs), strict=True) if remade]

    def _layout_checked(self, table: TableDef, properties: dict[str, str], columns: list[str]) -> bool:
        """Whether an existing ``table`` must be created anew: a derived table of another layout is dropped
        (its build rebuilds it); a landed one of another layout is an ``OutdatedTable`` error, never mixed."""
        problem = table.layout_problem(properties, columns)
        if problem is None:
            return False
        added = table.added_columns(properties, columns)
        if added:
            log.warning("table %s: adding the columns %s (its rows before hold none)", table.name,
                        ", ".join(f.name for f in added))
            self._add_columns(table, added)
            return False
        if not table.derived:
            raise OutdatedTable(f"{self.warehouse}: {problem}; landed tables are not rewritten in place: ingest "
                                "into a new warehouse (kraftlog ingest PATH... --warehouse NEW)")
        log.warning("%s: dropped, the build rebuilds it from the landed tables", problem)
        self.drop(table)
        return True

    @abstractmethod
    def _add_columns(self, table: TableDef, added: list[pa.Field]) -> None:
        """Append the nullable columns ``added`` to ``table`` in place, and stamp its new layout."""

    def forget(self) -> None:
        """Let go of what the store keeps of its tables' logs: a run starts, other runs may have dropped and
        created tables anew since. Here: nothing kept."""
        return

    def drop(self, table: TableDef) -> None:
        """Remove a derived ``table`` (its files and log); ``ensure`` creates it anew."""
        assert table.derived, f"{table.name} holds landed rows: never dropped"
        self.storage.delete_tree(self.path(table))

    def read(self, table: TableDef, where: Scope | None = None) -> DataFrame:
        """``table`` as a DataFrame; ``where``: only its rows in that scope (``Scope.select``), read from only the
        files that may hold some where the store can tell by their statistics (``_read``)."""
        df = self._read(table, where)
        return df if where is None else where.select(df)

    @abstractmethod
    def _read(self, table: TableDef, where: Scope | None) -> DataFrame:
        """``table`` as a DataFrame: every row, or at least those in ``where``."""

    def may_hold(self, table: TableDef, clusters: list[str] | None = None) -> bool:
        """Whether ``table`` may hold rows (of ``clusters``, if given), as its log alone tells (no Spark job): False
        only where it surely holds none. Here: True (a store that cannot tell without reading rows)."""
        return True

    def open_least(self, table: TableDef, column: str, clusters: list[str]) -> dict[str, int] | None:
        """Per cluster of ``clusters`` with open rows in ``table`` (its ``open_column`` null), the least ``column`` of
        them, found without a Spark job (from the table's log, and the files it names read on the driver); None where
        it cannot be. Here: None."""
        return None

    @abstractmethod
    def overwrite(self, table: TableDef, files: list[StagedFile], build_id: str, where: str | None = None
                  ) -> None:
        """Replace the rows of ``table`` (those matching ``where``, else all) with staged ``files``."""

    def overwrite_all(self, writes: Iterable[tuple[TableDef, list[StagedFile], str | None]], build_id: str,
                      jobs: int = 4) -> None:
        """``overwrite`` each table of ``writes`` (its staged files, the rows they replace), ``jobs`` at a time: each
        table's commits are its own, and a predicate delete rewrites the files it cuts (delta-rs's work, off the
        GIL): an hour of the 5M-record benchmark cluster's histories took 0.75 s of commits one after the other."""
        in_threads(lambda w: self.overwrite(w[0], w[1], build_id, w[2]), list(writes), jobs)

    # -- manifests ------------------------------------------------------------------------------------
    def _pending(self, name: str | None = None) -> str:
        """The folder of the manifests of runs committing, or the manifest ``name`` in it."""
        folder = join(self.warehouse, "_kraftlog", "pending")
        return folder if name is None else join(folder, name)

    def _write_manifest(self, m: Manifest) -> str:
        uri = self._pending(f"{m.run_seq:020d}-{m.run_id}.json")
        self.storage.write_bytes(uri, m.to_json().encode())  # whole or not at all
        return uri

    def commit(self, manifest: Manifest) -> None:
        """Write the manifest, then commit each table (idempotent), then drop the manifest."""
        self._guard()
        uri = self._write_manifest(manifest)
        self._apply(manifest)
        self.storage.delete(uri)

    @property
    def marks(self) -> CommitMarks:
        """The commit marks of the warehouse's builds (``kraftlog.commits``)."""
        return CommitMarks(self.storage, self.warehouse)

    def discard_staging(self, run_id: str) -> None:
        """Remove a run's scratch files (the index of competing files, delta-spark's staged files)."""
        self.storage.delete_tree(join(self.warehouse, "_kraftlog", "staging", run_id))

    def recover(self) -> list[Manifest]:
        """Roll forward the runs that were killed after writing their manifest."""
        filesystem, d = self.storage.filesystem(self._pending())
        infos = filesystem.get_file_info(pafs.FileSelector(d, allow_not_found=True))
        done = []
        for name in sorted(i.base_name for i in infos if i.base_name.endswith(".json")):
            m = Manifest.from_json(self.storage.read_bytes(self._pending(name)).decode())
            log.warning("rolling forward run %s (killed after staging its files)", m.run_id)
            self._apply(m)
            self.storage.delete(self._pending(name))
            self.discard_staging(m.run_id)
            done.append(m)
        return done

    def _apply(self, m: Manifest) -> None:
        cat = catalog()
        self._guard()
        for name, predicate in m.deletes:
            self._delete(cat[name], predicate, m.run_seq)
        for name in m.order:
            files = [f for f in m.files if f.table == name]
            if files:
                self._append(cat[name], files, m)

    @abstractmethod
    def _delete(self, table: TableDef, predicate: str, run_seq: int) -> None:
        """Delete the rows matching ``predicate`` (once per run: idempotent)."""

    @abstractmethod
    def _append(self, table: TableDef, files: list[StagedFile], m: Manifest) -> None:
        """Add staged ``files`` to ``table`` (once per run: idempotent)."""

    def _committed(self, version: int | None, run_seq: int) -> bool:
        return version is not None and version >= run_seq

    def _committed_to(self, table: TableDef) -> None:
        """Called after each commit to ``table``."""
        if self.after_commit:
            self.after_commit(table.name)


# delta-rs parses a delete's predicate on the calling thread, recursing once per item of an IN list (some 380 bytes
# of stack each): past about 20k items a thread's default 8 MB stack overflows and the process dies with SIGSEGV
# (delta-io/delta-rs#2798). An increment names up to ``TOPICS_NAMED`` partitions so.
DEEP_STACK = 256 << 20
# what ``DeltaRsStore.open_least`` reads on the driver at most (the files with open rows; an hour of the 5M-record
# benchmark cluster ends with none open: no file read, where ``window_floors`` ran a Spark job of 0.55 s)
OPEN_READ_BYTES = 64 << 20
_stack_size = threading.Lock()


def on_deep_stack(call: Callable[[], Any]) -> Any:
    """``call()`` on a thread of its own with a stack of ``DEEP_STACK`` bytes (reserved, used as touched): its result,
    or its exception raised here."""
    with ThreadPoolExecutor(1, thread_name_prefix="kraftlog-deep-stack") as pool:
        with _stack_size:  # (threading.stack_size is the process's setting for threads started after it)
            before = threading.stack_size(DEEP_STACK)
            try:
                done = pool.submit(call)  # (starts the pool's one thread, on the deep stack)
            finally:
                threading.stack_size(before)
        return done.result()


class DeltaRsStore(TableStore):
    """Delta tables written by executors (Parquet) and committed with delta-rs on the driver."""

    kind = "delta-rs"

    def __init__(self, spark: SparkSession, warehouse: str, after_commit: Callable[[str], None] | None = None,
                 storage: Storage | None = None):
        super().__init__(spark, warehouse, after_commit, storage)
        self._loaded: dict[str, Any] = {}  # each table's DeltaTable, loaded once (delta-rs guards it for threads)
        self._loading = threading.Lock()

    def _uri(self, table: TableDef) -> str:
        return self.storage.table_uri(self.path(table))

    def forget(self) -> None:
        self._loaded.clear()

    def drop(self, table: TableDef) -> None:
        self._loaded.pop(table.name, None)
        super().drop(table)

    def table(self, table: TableDef) -> Any:
        """The ``deltalake.DeltaTable`` of ``table`` at its latest version. Its log is read once per run;
        after that each call only brings it up to date (``update_incremental``: one listing of the log on an
        object store, where a load reads every commit since the last checkpoint)."""
        dt = self._load(table)
        if dt is None:
            from deltalake.exceptions import TableNotFoundError

            raise TableNotFoundError(f"no Delta table at {self._uri(table)}")
        return dt

    def _load(self, table: TableDef) -> Any:
        """``table``'s DeltaTable brought up to date, None where there is no table."""
        with self._loading:
            dt = self._loaded.get(table.name)
        if dt is not None:
            dt.update_incremental()
            return dt
        dt = self.storage.delta_table(self.path(table))
        if dt is None:
            return None
        with self._loading:
            return self._loaded.setdefault(table.name, dt)

    def ensure(self, table: TableDef) -> bool:
        from deltalake import DeltaTable

        dt = self._load(table)
        if dt is not None and not self._layout_checked(table, dict(dt.metadata().configuration),
                                                       [f.name for f in dt.schema().fields]):
            return False
        DeltaTable.create(self._uri(table), schema=table.schema, mode="ignore",
                          storage_options=self.storage.delta_options(),
                          partition_by=list(table.partition_by) or None, name=table.name,
                          description=table.description, configuration=table.table_properties(),
                          raise_if_key_not_exists=False)
        return True

    def _add_columns(self, table: TableDef, added: list[pa.Field]) -> None:
        from deltalake import Field

        dt = self.table(table)
        dt.alter.add_columns([Field.from_arrow(f) for f in added])
        dt.alter.set_table_properties({"kraftlog.schema": table.fingerprint}, raise_if_not_exists=False)

    def _read(self, table: TableDef, where: Scope | None) -> DataFrame:
        return self.read_parquet(self.files(table, where), spark_schema(table))

    def files(self, table: TableDef, where: Scope | None = None) -> list[FileSpec]:
        """The table's active files (URI, size, modification time), from its log: a reader needs not ask
        the store for their sizes; ``where``: only those whose statistics let them hold rows of that scope
        (``Scope.may_hold``)."""
        adds = self._add_actions(table)
        keep = [True] * adds.num_rows if where is None else _in_scope(adds, where)
        return [FileSpec(uri, size, mtime)
                for uri, size, mtime, k in zip(self._uris(table, adds), adds["size_bytes"].to_pylist(),
                                               adds["modification_time"].to_pylist(), keep, strict=True) if k]

    def _uris(self, table: TableDef, adds: pa.Table) -> list[str]:
        """The URIs of the files of ``adds`` (``_add_actions``). An add action's path is URL-encoded: the partition
        folder's own escapes (``%3D``) encoded again."""
        return [join(self.path(table), unquote(path)) for path in adds["path"].to_pylist()]

    def _add_actions(self, table: TableDef) -> pa.Table:
        """The add actions of the table's active files, their statistics as ``min`` / ``max`` structs (unflattened:
        flattening parses every file's statistics into columns of their own, on each call)."""
        return pa.table(self.table(table).get_add_actions(flatten=False))

    @staticmethod
    def _of_clusters(adds: pa.Table, clusters: list[str]) -> list[bool]:
        """Per file of ``adds``, whether its ``cluster_id`` statistics (min, max) let it hold rows of ``clusters``
        (every file may where there are none)."""
        return _in_scope(adds, Scope.of(clusters, {}))

    def may_hold(self, table: TableDef, clusters: list[str] | None = None) -> bool:
        """From the table's log alone (no Spark job): it has files and, for ``clusters``, a file whose
        ``cluster_id`` statistics (min, max) do not rule them all out."""
        adds = self._add_actions(table)
        if adds.num_rows == 0 or clusters is None:
            return adds.num_rows > 0
        return any(self._of_clusters(adds, clusters))

    def open_least(self, table: TableDef, column: str, clusters: list[str]) -> dict[str, int] | None:
        """Read on the driver from the files whose statistics say they hold open rows of the clusters (a build writes
        open rows to files of their own: ``open_apart``), where those are under ``OPEN_READ_BYTES``."""
        assert table.open_column is not None
        adds = self._add_actions(table)
        keep = [k and (n is None or n > 0)  # (no null count: the file may hold open rows)
                for k, n in zip(self._of_clusters(adds, clusters), _statistic(adds, "null_count", table.open_column),
                                strict=True)]
        if sum(size for size, k in zip(adds["size_bytes"].to_pylist(), keep, strict=True) if k) > OPEN_READ_BYTES:
            return None
        out: dict[str, int] = {}
        for uri in (uri for uri, k in zip(self._uris(table, adds), keep, strict=True) if k):
            rows = pq.read_table(pa.BufferReader(self.storage.read_bytes(uri)),
                                 columns=["cluster_id", column, table.open_column])
            rows = rows.filter(pc.and_(pc.is_null(rows[table.open_column]),
                                       pc.is_in(rows["cluster_id"], pa.array(clusters, pa.string()))))
            for r in rows.group_by("cluster_id").aggregate([(column, "min")]).to_pylist():
                at = r[f"{column}_min"]
                if at is not None:
                    out[r["cluster_id"]] = min(out.get(r["cluster_id"], at), at)
        return out

    def _delete(self, table: TableDef, predicate: str, run_seq: int) -> None:
        from deltalake import CommitProperties, Transaction

        dt = self.table(table)
        if self._committed(dt.transaction_version(DELETE_APP), run_seq):
            return
        self._delete_rows(dt, predicate, CommitProperties(app_transactions=[Transaction(DELETE_APP, run_seq)]))
        self._committed_to(table)

    @staticmethod
    def _delete_rows(dt: Any, predicate: str, properties: Any) -> None:
        """One delta-rs predicate delete, committed with ``properties``, on a stack deep enough for its IN lists."""
        on_deep_stack(lambda: dt.delete(predicate, commit_properties=properties))

    def _append(self, table: TableDef, files: list[StagedFile], m: Manifest) -> None:
        from deltalake import CommitProperties, Transaction
        from deltalake.transaction import AddAction, RemoveAction

        dt = self.table(table)
        if self._committed(dt.transaction_version(APPEND_APP), m.run_seq):
            return
        actions: list[AddAction | RemoveAction] = [
            AddAction(f.path, f.size, {}, f.modification_time, True, f.stats) for f in files]
        dt.create_write_transaction(
            actions, mode="append", schema=table.schema, partition_by=list(table.partition_by) or None,
            commit_properties=CommitProperties(app_transactions=[Transaction(APPEND_APP, m.run_seq)],
                                               custom_metadata={"kraftlog.run_id": m.run_id}))
        log.debug("committed %d file(s) to %s", len(files), table.name)
        self._committed_to(table)


    def overwrite(self, table: TableDef, files: list[StagedFile], build_id: str, where: str | None = None
                  ) -> None:
        from deltalake import CommitProperties
        from deltalake.transaction import AddAction, RemoveAction

        self._guard()
        dt = self.table(table)
        meta = CommitProperties(custom_metadata={"kraftlog.build": build_id})
        actions: list[AddAction | RemoveAction] = [
            AddAction(f.path, f.size, {}, f.modification_time, True, f.stats) for f in files]
        if where is None:
            dt.create_write_transaction(actions, mode="overwrite", schema=table.schema,
                                        partition_by=list(table.partition_by) or None, commit_properties=meta)
        else:  # delta-rs commits a predicate delete and an append separately
            self._delete_rows(dt, where, meta)
            if actions:
                dt.create_write_transaction(actions, mode="append", schema=table.schema,
                                            partition_by=list(table.partition_by) or None, commit_properties=meta)
        self._committed_to(table)


class DeltaSparkStore(TableStore):
    """Delta tables through the delta-spark jar (``format("delta")``)."""

    kind = "delta-spark"

    def stage_root(self, table: TableDef, run_id: str) -> tuple[str, str]:
        return self.warehouse.rstrip("/") + f"/_kraftlog/staging/{run_id}/{table.name}", ""

    def ensure(self, table: TableDef) -> bool:
        if self.storage.exists(join(self.path(table), "_delta_log")):
            found = {r["key"]: r["value"] for r in self.spark.sql(
                f"SHOW TBLPROPERTIES delta.`{self.path(table)}`").collect()}
            if not self._layout_checked(table, found, self.read(table).columns):
                return False
        cols = ", ".join(_column_ddl(f) for f in spark_schema(table).fields)
        props = ", ".join(f"'{k}' = '{_sql_str(v)}'" for k, v in table.table_properties().items())
        parts = f" PARTITIONED BY ({', '.join(table.partition_by)})" if table.partition_by else ""
        self.spark.sql(f"CREATE TABLE IF NOT EXISTS delta.`{self.path(table)}` ({cols}) USING DELTA{parts} "
                       f"COMMENT '{_sql_str(table.description)}' TBLPROPERTIES ({props})")
        return True

    def _add_columns(self, table: TableDef, added: list[pa.Field]) -> None:
        names = {f.name for f in added}
        cols = ", ".join(_column_ddl(f) for f in spark_schema(table).fields if f.name in names)
        self.spark.sql(f"ALTER TABLE delta.`{self.path(table)}` ADD COLUMNS ({cols})")
        self.spark.sql(f"ALTER TABLE delta.`{self.path(table)}` SET TBLPROPERTIES "
                       f"('kraftlog.schema' = '{table.fingerprint}')")

    def _read(self, table: TableDef, where: Scope | None) -> DataFrame:
        return self.spark.read.format("delta").load(self.path(table))  # (Delta skips files by the filter itself)

    def _delete(self, table: TableDef, predicate: str, run_seq: int) -> None:
        marker = f"{DELETE_APP}:{run_seq}"
        history = self.spark.sql(f"DESCRIBE HISTORY delta.`{self.path(table)}`").select("userMetadata").collect()
        if any(r["userMetadata"] == marker for r in history):
            return
        self.spark.conf.set("spark.databricks.delta.commitInfo.userMetadata", marker)
        try:
            self.spark.sql(f"DELETE FROM delta.`{self.path(table)}` WHERE {predicate}")
        finally:
            self.spark.conf.unset("spark.databricks.delta.commitInfo.userMetadata")
        self._committed_to(table)

    def _append(self, table: TableDef, files: list[StagedFile], m: Manifest) -> None:
        uris = [f.root.rstrip("/") + "/" + f.path for f in files]
        df = self.spark.read.schema(spark_schema(table)).parquet(*uris)
        (df.write.format("delta").mode("append").option("txnAppId", APPEND_APP).option("txnVersion", m.run_seq)
         .option("userMetadata", json.dumps({"kraftlog.run_id": m.run_id})).save(self.path(table)))
        self._committed_to(table)


    def overwrite(self, table: TableDef, files: list[StagedFile], build_id: str, where: str | None = None
                  ) -> None:
        self._guard()
        uris = [f.root.rstrip("/") + "/" + f.path for f in files]
        df = (self.spark.read.schema(spark_schema(table)).parquet(*uris) if uris
              else _empty(self.spark, spark_schema(table)))
        writer = df.write.format("delta").mode("overwrite").option("userMetadata",
                                                                     json.dumps({"kraftlog.build": build_id}))
        if where is not None:
            writer = writer.option("replaceWhere", where)
        writer.save(self.path(table))
        self.discard_staging(build_id)
        self._committed_to(table)


def _statistic(adds: pa.Table, side: str, name: str) -> list[Any]:
    """Per file of ``adds`` (``DeltaRsStore._add_actions``), its ``side`` statistic (``min``, ``max``, ``null_count``)
    of column ``name``; None where it has none."""
    if side in adds.column_names:
        stats = adds[side].combine_chunks()
        if stats.type.get_field_index(name) >= 0:
            return stats.field(name).to_pylist()
    return [None] * adds.num_rows


def _in_scope(adds: pa.Table, where: Scope) -> list[bool]:
    """Per file of ``adds`` (``DeltaRsStore._add_actions``), whether its statistics let it hold rows of ``where``."""
    n = adds.num_rows
    rows = adds["num_records"].to_pylist() if "num_records" in adds.column_names else [None] * n
    columns: dict[str, list[Bounds] | None] = {}

    def of(name: str) -> list[Bounds] | None:  # a column's statistics, file by file (None: none kept)
        if name not in columns:
            lows, highs, nulls = (_statistic(adds, side, name) for side in ("min", "max", "null_count"))
            known = any(h is not None for h in highs) or any(c is not None for c in nulls)
            columns[name] = list(zip(lows, highs, nulls, strict=True)) if known else None
        return columns[name]

    def bounds(i: int) -> Callable[[str], Bounds | None]:
        return lambda name: None if (found := of(name)) is None else found[i]

    return [where.may_hold(bounds(i), rows[i]) for i in range(n)]


def _whole(name: str) -> Router:
    """A router sending every row to table ``name``."""
    def route(batch: pa.RecordBatch) -> dict[str, pa.Table]:
        return {name: pa.Table.from_batches([batch])}
    return route


def open_part(table: TableDef) -> str:
    """The file part (``FILE_PART``) of the rows of ``table`` the next build rewrites (``TableDef.open_column``)."""
    return table.name + FILE_PART + "open"


def open_apart(table: TableDef, rows: pa.Table) -> dict[str, pa.Table]:
    """``rows`` of ``table`` by file part: those whose ``open_column`` is null in files of their own (``open_part``),
    the others in the table's; parts without rows left out."""
    if table.open_column is None:
        return {table.name: rows} if rows.num_rows else {}
    is_open = pc.is_null(rows[table.open_column])
    parts = {table.name: rows.filter(pc.invert(is_open)), open_part(table): rows.filter(is_open)}
    return {name: part for name, part in parts.items() if part.num_rows}


def _open_apart(table: TableDef) -> Router:
    """A router sending the rows of ``table`` whose ``open_column`` is null to files of their own (``open_apart``)."""
    if table.open_column is None:
        return _whole(table.name)
    return lambda batch: open_apart(table, pa.Table.from_batches([batch]))


def _empty(spark: SparkSession, schema: Any) -> DataFrame:
    """An empty DataFrame with no partitions (no task, no Python worker to start). Classic: an empty local relation
    made in the JVM (3 calls; ``createDataFrame`` of an empty RDD pickles a converter, about 4 times the cost, for
    each of the many typed tables a small cluster holds no row of)."""
    if is_connect(spark):
        return spark.createDataFrame([], schema)
    jspark, jvm = spark._jsparkSession, spark._jvm
    assert jvm is not None
    return DataFrame(jspark.createDataFrame(jvm.java.util.ArrayList(), jspark.parseDataType(schema.json())), spark)


def read_parquet_with_pyarrow(spark: SparkSession, files: list[FileSpec], schema: Any, storage: Storage,
                              whole_bytes: int = 8 << 20) -> DataFrame:
    """Parquet files read by the executors with pyarrow (S3, GCS, Azure with no Hadoop connector), in tasks of about
    equal bytes, with no request for a file's size first (it is known): one up to ``whole_bytes`` in one GET, a
    larger one by ranges (pyarrow reads its footer, then the columns' chunks: two GETs or more)."""
    from pyspark.sql.pandas.types import to_arrow_schema

    arrow_schema = to_arrow_schema(schema)
    by_path = {f.path: f for f in files}
    packed = pack({p: max(f.size, 1) for p, f in by_path.items()}, default_parallelism(spark))
    groups = FileGroups(tuple(tuple(by_path[p] for p in group) for group in packed), storage)

    def read(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for f in groups.files(batches):
            if 0 < f.size <= whole_bytes:
                fragment = _PARQUET.make_fragment(pa.BufferReader(storage.read_bytes(f.path)))
            else:
                filesystem, path = storage.filesystem(f.path)
                fragment = _PARQUET.make_fragment(path, filesystem, file_size=f.size or None)
            # read as ``schema``: the columns a file was written without (a table that gained columns since,
            # ``TableDef.added_columns``) come null, and each column is cast to its type
            yield from fragment.to_batches(schema=arrow_schema, batch_size=65536)

    return groups.frame(spark).mapInArrow(read, schema)


_PARQUET = ds.ParquetFileFormat()


def _sql_str(text: str) -> str:
    return text.replace("\\", "\\\\").replace("'", "\\'")


def delta_spark_available(spark: SparkSession) -> bool:
    """True when the session can load delta-spark's classes (the jar is on the classpath)."""
    if is_connect(spark):  # no JVM here: trust the server's session extensions
        return "DeltaSparkSessionExtension" in (spark.conf.get("spark.sql.extensions", "") or "")
    try:
        spark._jvm.java.lang.Class.forName("io.delta.tables.DeltaTable")  # type: ignore[union-attr]
        return True
    except Exception:
        return False


def open_store(spark: SparkSession, warehouse: str, writer: str = "auto",
               after_commit: Callable[[str], None] | None = None, storage: Storage | None = None) -> TableStore:
    """The store for ``writer``: auto, delta-rs or delta-spark."""
    if writer == "delta-spark" or (writer == "auto" and delta_spark_available(spark)):
        if not delta_spark_available(spark):
            raise UsageError("writer = delta-spark, but io.delta classes are not on the Spark classpath "
                             "(add the delta-spark jar, e.g. spark.jars.packages=io.delta:delta-spark_2.13:<v>)")
        return DeltaSparkStore(spark, warehouse, after_commit, storage)
    if writer not in WRITERS:
        raise UsageError(f"unknown writer {writer!r}: one of {', '.join(WRITERS)}")
    return DeltaRsStore(spark, warehouse, after_commit, storage)


def store_for(spark: SparkSession, config: Config) -> TableStore:
    """The store of ``config``'s warehouse, writer and storage options."""
    return open_store(spark, config.warehouse, config.writer, storage=config.storage)


def new_run_id() -> str:
    """A run's id: its UTC start time and a random suffix."""
    return datetime.now(UTC).strftime("%Y%m%dT%H%M%S") + "-" + uuid.uuid4().hex[:8]


def warehouse_tables() -> dict[str, TableDef]:
    """Every table of a warehouse by name: landed (core and typed), histories and replay state, events."""
    from kraftlog.analytics.definitions import analyze_state_table, event_tables
    from kraftlog.state.entities import (
        history_tables,
        replay_ranges_table,
        replay_state_table,
        snapshot_checks_table,
    )

    tables = [*catalog().all(), *history_tables().values(), replay_ranges_table(), replay_state_table(),
              snapshot_checks_table(), *event_tables().values(), analyze_state_table()]
    return {t.name: t for t in tables}


class OutdatedTable(KraftlogError):
    """A landed table written by a kraftlog with another layout (rows of two layouts are never mixed)."""


class NotAWarehouseError(KraftlogError):
    """A directory that holds other things than kraftlog's tables: kraftlog does not write into it."""


def check_warehouse(storage: Storage, warehouse: str) -> None:
    """Raise ``NotAWarehouseError`` when ``warehouse`` is a file, or exists, holds something, and none of it is
    kraftlog's; a ``StorageError`` when it is new in a bucket that is not there.

    A file is refused as the listing tells it (``kraftlog.storage.NotADirectory``, local or an object's key). Where
    the listing finds nothing, one look at what the path is: not found, a new warehouse; a directory, made by another
    run's lease since a listing that failed, listed again (not taken for a file); a file made since, refused."""
    uri = normalize(warehouse)
    listed: list[Entry] | None
    try:
        listed = storage.lister()(uri)
    except NotADirectory as e:
        raise NotAWarehouseError(f"{warehouse}: a file, not a directory, so not a kraftlog warehouse") from e
    except OSError:  # (no such directory)
        listed = None
    if not listed:
        found = storage.file_type(uri)
        if found == pafs.FileType.NotFound:  # a new warehouse, in a bucket that must be there (one look more)
            storage.check_bucket(uri)
            return
        if found != pafs.FileType.Directory:
            raise NotAWarehouseError(f"{warehouse}: a file, not a directory, so not a kraftlog warehouse")
        if listed is None:
            listed = storage.lister()(uri)  # made since it was listed (another run's lease)
    entries = [e.name for e in listed if not e.name.startswith(".")]
    ours = {"_kraftlog", *(t.name for t in catalog().core.values())}
    if entries and not ours.intersection(entries):
        shown = ", ".join(sorted(entries)[:5]) + (" ..." if len(entries) > 5 else "")
        raise NotAWarehouseError(f"{warehouse} is not a kraftlog warehouse: it holds {shown} and none of kraftlog's "
                                 "tables; choose a new or empty directory")


def require_landed(store: TableStore) -> None:
    """Raise ``NotBuilt`` where nothing ever landed in ``store``'s warehouse (it has no ``files`` table, the ledger
    every ingest commits): what reads the landed tables (``reconstruct``, ``verify``, ``analyze``, ``maintain``)
    says so before it takes the warehouse's lease, which would make the folder of a mistyped warehouse."""
    if not store.storage.is_dir(join(store.path(catalog()["files"]), "_delta_log")):
        raise NotBuilt(f"nothing landed under {store.warehouse}: run `kraftlog ingest` first")


def landed_clusters(store: TableStore, clusters: list[str] | None) -> list[str] | None:
    """The clusters a run over what landed covers: those ``clusters`` name (None: every one), each by its id or the
    part after ``source:`` (``kraftlog.identity.choose_cluster``). ``NotBuilt`` where nothing landed
    (``require_landed``); ``ClusterNotFound``, naming the landed clusters, for a name that names none of them (a run
    of a mistyped cluster does not end in "0 clusters" as if all were done)."""
    require_landed(store)
    if clusters is None:
        return None
    known = sorted(r["cluster_id"] for r in store.read(catalog()["files"]).select("cluster_id").distinct().collect())
    return list(dict.fromkeys(choose_cluster(known, c) for c in clusters))


@contextmanager
def writing(store: TableStore, config: Config, run_id: str, purpose: str) -> Iterator[Lease]:
    """Hold the warehouse's lease for a run of ``purpose`` that writes through ``store``; its commits check it.

    ``with writing(store, config, run_id, "ingest"): ...``: a concurrent run waits for the lease up to
    ``[warehouse] lease_wait_seconds``, then fails with ``kraftlog.lease.WarehouseBusy``. On exit the lease
    is released and the store no longer checks it. While the run holds it, its session has the run's own settings
    (``kraftlog.spark.session.run_settings``).
    """
    check_warehouse(store.storage, store.warehouse)
    held = Lease(store.storage, store.warehouse, run_id, purpose, ttl_s=config.lease_ttl_seconds,
                 wait_s=config.lease_wait_seconds)
    with held, described(store.spark, f"kraftlog {purpose} {run_id}"), run_settings(store.spark):
        store.lease = held
        store.forget()
        try:
            yield held
        finally:
            store.lease = None


def _column_ddl(f: T.StructField) -> str:
    """A column's SQL definition: name, type, NOT NULL, comment."""
    return (f"`{f.name}` {f.dataType.simpleString()}" + (" NOT NULL" if not f.nullable else "")
            + (f" COMMENT '{_sql_str(f.metadata['comment'])}'" if f.metadata.get("comment") else ""))
