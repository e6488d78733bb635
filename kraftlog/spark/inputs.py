"""Input files for Spark jobs: listed on the driver, read on the executors through pyarrow (no Hadoop, no jar).

The driver lists the data directories (``kraftlog.storage``; metadata only) and packs the files into
groups by bytes. A job runs over ``spark.range(n, numPartitions=n)``: partition ``i`` holds the single
row ``i`` and its task reads group ``i``'s files itself, so each group is read whole by one task with
no shuffle, on any file system pyarrow reaches (local, S3, GCS, Azure, HDFS), under classic Spark and
Spark Connect alike.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import NamedTuple

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.pandas.types import from_arrow_schema

from kraftlog.errors import UsageError
from kraftlog.planning import pack
from kraftlog.spark.session import default_parallelism, in_threads
from kraftlog.storage import Storage, is_local
from kraftlog.wire.files import MetaProperties, parse_meta_properties

# a batch holds a few small files, or one big one: its contents are in memory at once, so a task's memory follows
# its biggest file, not how many of them it reads
FILES_PER_BATCH = 8
BYTES_PER_BATCH = 16 << 20


class Content(NamedTuple):
    """A file as a task read it: its URI, modification time (epoch ms) and bytes (the only copy in the task) from
    byte ``start`` of the file on."""

    path: str
    mtime_ms: int
    data: bytes
    start: int = 0


@dataclass(frozen=True, slots=True)
class FileSpec:
    """A listed file: its URI, size and modification time (epoch ms); ``start``: the byte it is read from (a grown
    segment: from its last batch landed, ``Resume``)."""

    path: str
    size: int
    mtime_ms: int
    start: int = 0


@dataclass(frozen=True)
class FileGroups:
    """Files in groups, one Spark partition per group, read by the task of that partition."""

    groups: tuple[tuple[FileSpec, ...], ...]
    storage: Storage

    def frame(self, spark: SparkSession) -> DataFrame:
        """One row (the group index, ``id``) per partition."""
        n = len(self.groups)
        return spark.range(0, n, 1, max(n, 1))

    def files(self, batches: Iterable[pa.RecordBatch]) -> Iterator[FileSpec]:
        """Executor side: the files of the groups named by ``batches`` (rows of ``frame``)."""
        for b in batches:
            for group in b.column("id").to_pylist():
                yield from self.groups[group]

    def contents(self, batches: Iterable[pa.RecordBatch]) -> Iterator[list[Content]]:
        """Executor side: the files of the groups named by ``batches``, a few per batch (``read_contents``)."""
        return read_contents(self.files(batches), self.storage)

    def map(self, spark: SparkSession, fn: Callable[[Iterator[list[Content]]], Iterator[pa.RecordBatch]],
            schema: pa.Schema) -> DataFrame:
        """``fn`` over each task's file contents (batches of ``Content``, read in the task) -> rows of ``schema``."""
        return self.frame(spark).mapInArrow(lambda it: fn(self.contents(it)), from_arrow_schema(schema))


def read_contents(files: Iterable[FileSpec], storage: Storage) -> Iterator[list[Content]]:
    """Batches of ``files``' contents, each of at most ``FILES_PER_BATCH`` files and ``BYTES_PER_BATCH`` bytes unless a
    single file is bigger; a file removed since it was listed (retention) is left out. Each file is read up to its
    listed size: a live segment appended to meanwhile is read by every pass of a run as it was listed (the next run
    takes what it grew by). The bytes are read once and handed over as they are (a segment grows to 1 GiB: no copy
    into Arrow and out again)."""
    batch: list[Content] = []
    size = 0
    for f in files:
        if batch and (len(batch) >= FILES_PER_BATCH or size + f.size - f.start > BYTES_PER_BATCH):
            done, batch, size = batch, [], 0
            yield done
            del done
        try:
            data = storage.read_bytes(f.path, f.size, f.start)
        except FileNotFoundError:
            continue
        batch.append(Content(f.path, f.mtime_ms, data, f.start))
        size += len(data)
        del data
    if batch:
        done, batch = batch, []
        yield done


def max_partition_bytes(spark: SparkSession) -> int:
    """``spark.sql.files.maxPartitionBytes`` in bytes (the size Spark aims for per task)."""
    return parse_bytes(spark.conf.get("spark.sql.files.maxPartitionBytes", "128m") or "128m")


_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kb": 1 << 10, "m": 1 << 20, "mb": 1 << 20, "g": 1 << 30, "gb": 1 << 30,
          "t": 1 << 40, "tb": 1 << 40}


def parse_bytes(text: str) -> int:
    """A Spark size (``134217728``, ``128m``, ``128MB``, ``1g``) in bytes."""
    m = re.fullmatch(r"\s*(\d+)\s*([a-zA-Z]*)\s*", text)
    if m is None or m.group(2).lower() not in _UNITS:
        raise UsageError(f"not a size: {text!r}")
    return int(m.group(1)) * _UNITS[m.group(2).lower()]


def group_count(spark: SparkSession, total_bytes: int) -> int:
    """Whole rounds of tasks (a multiple of the cores) of at most ``maxPartitionBytes`` each."""
    cores = default_parallelism(spark)
    return cores * max(1, -(-total_bytes // (cores * max_partition_bytes(spark))))


def by_bytes(spark: SparkSession, files: list[FileSpec], storage: Storage) -> FileGroups:
    """Files packed into groups of about equal bytes (for per-file work)."""
    return by_cluster(spark, files, {f.path: f.path for f in files}, storage)


def by_cluster(spark: SparkSession, files: list[FileSpec], cluster_of: Mapping[str, str],
               storage: Storage) -> FileGroups:
    """Files packed into groups of about equal bytes, each cluster's files (``cluster_of``) in one group."""
    by_key: dict[str, list[FileSpec]] = {}
    for f in sorted(files, key=lambda f: f.path):
        by_key.setdefault(cluster_of[f.path], []).append(f)
    bins = group_count(spark, sum(f.size - f.start for f in files))
    packed = pack({k: sum(f.size - f.start for f in fs) for k, fs in by_key.items()}, bins)
    return FileGroups(tuple(tuple(f for k in g for f in by_key[k]) for g in packed if g), storage)


def read_meta_properties(paths: list[str], storage: Storage, threads: int = 16) -> dict[str, MetaProperties]:
    """Parse ``meta.properties`` files on the driver (a few hundred bytes each; object stores in parallel)."""
    def one(path: str) -> tuple[str, MetaProperties]:
        return path, parse_meta_properties(storage.read_bytes(path).decode("utf-8", "replace"))

    if all(is_local(p) for p in paths):
        return dict(map(one, paths))
    return dict(in_threads(one, paths, threads))

