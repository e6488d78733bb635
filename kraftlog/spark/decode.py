"""Spark glue for the wire layer: listing, side files, the three passes over files, SQL functions."""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from functools import reduce
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import types as T
from pyspark.sql.pandas.types import from_arrow_schema

from kraftlog.planning import pack
from kraftlog.tables.rows import SUMMARY, FileIdentity, FileLander, FileRef, KeepSpec, summarize
from kraftlog.wire.discover import Entry, Lister, local_lister
from kraftlog.wire.files import MetaProperties, parse_meta_properties


def spark_lister(spark: SparkSession) -> Lister:
    """List ``file:`` paths with the OS (fast), anything else with Hadoop (HDFS, s3a://, ...)."""
    hadoop = hadoop_lister(spark)

    def lister(path: str) -> list[Entry]:
        if path.startswith("file:/"):
            local = path[len("file:"):]
            return [Entry("file:" + e.path, e.name, e.is_dir, e.size, e.mtime_ms) for e in local_lister(local)]
        return hadoop(path)

    return lister


def hadoop_lister(spark: SparkSession) -> Lister:
    """A ``Lister`` over Hadoop's FileSystem API (local, HDFS, s3a://, ...): metadata only."""
    jvm: Any = spark._jvm
    conf = spark._jsc.hadoopConfiguration()

    def lister(path: str) -> list[Entry]:
        p = jvm.org.apache.hadoop.fs.Path(path)
        fs = p.getFileSystem(conf)
        if not fs.exists(p):
            raise FileNotFoundError(path)
        out = []
        for st in fs.listStatus(p):
            # one round trip per entry: FileStatus.toString carries every field needed
            m = _STATUS.search(str(st.toString()))
            if m is not None:
                q, d, n, t = m.groups()
                out.append(Entry(q, q.rstrip("/").rsplit("/", 1)[-1], d == "true", int(n), int(t)))
                continue
            q = st.getPath()  # an unusual path: ask field by field
            out.append(Entry(q.toString(), q.getName(), bool(st.isDirectory()), int(st.getLen()),
                             int(st.getModificationTime())))
        return out

    return lister


_STATUS = re.compile(r"\{path=(.*?); isDirectory=(true|false); length=(\d+);.*?modification_time=(\d+);")


def qualify(spark: SparkSession, path: str) -> str:
    """A path as Hadoop names it (``/x`` -> ``file:/x``), so listings and binaryFile rows agree."""
    jvm: Any = spark._jvm
    p = jvm.org.apache.hadoop.fs.Path(path)
    fs = p.getFileSystem(spark._jsc.hadoopConfiguration())
    return str(fs.makeQualified(p).toString())


_META = pa.schema([("path", pa.string()), ("cluster_id", pa.string()), ("node_id", pa.int32()),
                   ("directory_id", pa.string()), ("version", pa.int32())])


def _parse_meta(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    for b in batches:
        rows = []
        for path, content in zip(b.column("path").to_pylist(), b.column("content").to_pylist(), strict=True):
            m = parse_meta_properties(content.decode("utf-8", "replace"))
            rows.append({"path": path, "cluster_id": m.cluster_id, "node_id": m.node_id,
                         "directory_id": m.directory_id, "version": m.version})
        yield pa.RecordBatch.from_pylist(rows, schema=_META)


def read_meta_properties(spark: SparkSession, paths: list[str]) -> dict[str, MetaProperties]:
    """Parse ``meta.properties`` files: local ones (``file:``) with the OS, as ``spark_lister`` lists them;
    the others on the executors, where only the parsed identities come back."""
    out: dict[str, MetaProperties] = {}
    remote = []
    for path in paths:
        if path.startswith("file:/"):
            try:
                out[path] = parse_meta_properties(Path(path[len("file:"):]).read_text("utf-8", "replace"))
                continue
            except OSError:
                pass  # let Spark read it, or report it
        remote.append(path)
    if remote:
        out.update(meta_properties_on_executors(spark, remote))
    return out


def meta_properties_on_executors(spark: SparkSession, paths: list[str]) -> dict[str, MetaProperties]:
    """Parse ``meta.properties`` files on the executors (any file system Spark reads)."""
    rows = spark.read.format("binaryFile").load(paths).select("path", "content") \
        .mapInArrow(_parse_meta, from_arrow_schema(_META)).collect()
    return {r["path"]: MetaProperties(r["cluster_id"], r["node_id"], r["directory_id"], r["version"], {})
            for r in rows}


FILES_PER_ARROW_BATCH = 8
_ARROW_BATCH = "spark.sql.execution.arrow.maxRecordsPerBatch"


@contextmanager
def session_conf(spark: SparkSession, key: str, value: str) -> Iterator[None]:
    """Set a SQL conf for the jobs run inside, restored afterwards."""
    before = spark.conf.get(key, None)
    spark.conf.set(key, value)
    try:
        yield
    finally:
        if before is None:
            spark.conf.unset(key)
        else:
            spark.conf.set(key, before)


def reading_files(spark: SparkSession, files_per_batch: int = FILES_PER_ARROW_BATCH
                  ) -> AbstractContextManager[None]:
    """Arrow batches of a few ``binaryFile`` rows for the jobs run inside (restored afterwards).

    Spark's default (10,000 rows per batch) puts a whole task's files, hundreds of MB, in one Arrow
    batch, which the JVM builds by growing its buffers again and again: on the 10x corpus 8 files per
    batch moves the bytes to Python about 3x faster.
    """
    return session_conf(spark, _ARROW_BATCH, str(files_per_batch))


def file_contents(spark: SparkSession, paths: list[str]) -> DataFrame:
    """``binaryFile`` rows (path, modificationTime, content) of ``paths``.

    Spark packs files into tasks by bytes (``spark.sql.files.maxPartitionBytes``, at most total/cores,
    plus ``spark.sql.files.openCostInBytes`` per file), which keeps tasks few and even.
    """
    return spark.read.format("binaryFile").load(sorted(paths)).select("path", "modificationTime", "content")


def refs(b: pa.RecordBatch | pa.Table, identities: dict[str, tuple[FileIdentity, int]]) -> list[FileRef]:
    """The files of a ``binaryFile`` Arrow batch."""
    mtimes = b.column("modificationTime").cast(pa.int64()).to_pylist()  # microseconds
    return [FileRef(p, c, (m or 0) // 1000, *identities[p]) for p, m, c in
            zip(b.column("path").to_pylist(), mtimes, b.column("content").to_pylist(), strict=True)]


def summaries(contents: DataFrame, prefix_sizes: dict[str, int]) -> list[dict[str, Any]]:
    """Pass 0 (every changed file): batch-header summaries, collected (one small row per file)."""

    def run(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for b in batches:
            rows = [summarize(p, c, prefix_sizes.get(p)) for p, c in
                    zip(b.column("path").to_pylist(), b.column("content").to_pylist(), strict=True)]
            yield pa.RecordBatch.from_pylist(rows, schema=SUMMARY)

    return [r.asDict() for r in contents.mapInArrow(run, from_arrow_schema(SUMMARY)).collect()]


CHOICE = pa.schema([("file_id", pa.int32()), ("sha256", pa.string()), ("lo", pa.list_(pa.int64())),
                    ("hi", pa.list_(pa.int64())), ("divergent", pa.int64()), ("winners", pa.int64())])


@dataclass
class Choices:
    """What pass 1 decided, by file id: the ranges of record positions each file lands and the SHA-256
    of the content decided on; and how many divergence and winning INDEX rows it wrote."""

    keep: dict[int, list[tuple[int, int]]] = field(default_factory=dict)
    sha256: dict[int, str] = field(default_factory=dict)
    divergent: int = 0
    winners: int = 0


class ClusterBuffer:
    """Collects files until all of a cluster's files (``expected`` of each) are there."""

    def __init__(self, expected: Mapping[str, int]):
        self.expected = expected
        self.pending: dict[str, list[FileRef]] = {}

    def add(self, ref: FileRef) -> list[FileRef] | None:
        """The cluster's files once ``ref`` completes them, else None."""
        cluster = ref.identity.cluster_id
        files = self.pending.setdefault(cluster, [])
        files.append(ref)
        return self.pending.pop(cluster) if len(files) == self.expected[cluster] else None

    def rest(self) -> list[list[FileRef]]:
        """Clusters still incomplete (a file vanished since the listing): what there is of them."""
        out, self.pending = list(self.pending.values()), {}
        return out


def cluster_contents(spark: SparkSession, files: dict[str, str], sizes: dict[str, int]) -> DataFrame:
    """``binaryFile`` rows of ``files`` (path -> cluster) where each partition holds whole clusters.

    Clusters are packed by bytes into groups, a multiple of the cores in number; each group is read
    by its own scan coalesced to one partition, so no file bytes are shuffled. Run the jobs inside
    ``whole_clusters``, or Spark merges the single-partition scans of the union into one partition.
    """
    by_cluster: dict[str, list[str]] = {}
    for p, c in files.items():
        by_cluster.setdefault(c, []).append(p)
    total = sum(sizes[p] for p in files)
    max_bytes = int(spark._jsparkSession.sessionState().conf().filesMaxPartitionBytes())
    cores = spark.sparkContext.defaultParallelism
    bins = cores * -(-total // (cores * max_bytes))  # whole rounds of tasks of at most max_bytes, if clusters allow
    groups = pack({c: sum(sizes[p] for p in ps) for c, ps in by_cluster.items()}, bins)
    frames = [file_contents(spark, [p for c in g for p in by_cluster[c]]).coalesce(1) for g in groups]
    return reduce(DataFrame.union, frames)


def whole_clusters(spark: SparkSession) -> AbstractContextManager[None]:
    """Keep the partitions of a union of ``cluster_contents`` scans apart (see there)."""
    return session_conf(spark, "spark.sql.unionOutputPartitioning", "false")


def stage_choices(spark: SparkSession, identities: dict[str, tuple[FileIdentity, int]], sizes: dict[str, int],
                  dest: str) -> Choices:
    """Pass 1 (competing files ``identities``): the canonical copy of each record, one call per cluster.

    Each cluster's files are read into one partition (no shuffle) and decided together
    (``kraftlog.tables.copies.choose``). The divergence rows go under ``dest/divergence`` and the winning
    copies' INDEX rows under ``dest/index`` (Parquet), to be compared with landed rows.
    """
    from kraftlog.spark.store import write_parquet
    from kraftlog.tables.copies import choose

    expected = Counter(ident.cluster_id for ident, _ in identities.values())

    def decide(files: list[FileRef]) -> pa.RecordBatch:
        choice = choose(files)
        if choice.divergence.num_rows:
            write_parquet("divergence", dest + "/divergence", choice.divergence)
        winners = choice.winners
        if winners.num_rows:
            write_parquet("index", dest + "/index", winners)
        rows: list[dict[str, Any]] = [
            {"file_id": f.file_id, "sha256": hashlib.sha256(f.content).hexdigest(),
             "lo": [lo for lo, _ in choice.keep.get(f.file_id, ())],
             "hi": [hi for _, hi in choice.keep.get(f.file_id, ())], "divergent": 0, "winners": 0} for f in files]
        rows.append({"divergent": choice.divergence.num_rows, "winners": winners.num_rows})
        return pa.RecordBatch.from_pylist(rows, CHOICE)

    def run(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        buffer = ClusterBuffer(expected)
        for b in batches:
            for ref in refs(b, identities):
                files = buffer.add(ref)
                if files is not None:
                    yield decide(files)
        for files in buffer.rest():
            yield decide(files)

    out = Choices()
    contents = cluster_contents(spark, {p: ident.cluster_id for p, (ident, _) in identities.items()}, sizes)
    with whole_clusters(spark):
        rows = contents.mapInArrow(run, from_arrow_schema(CHOICE)).collect()
    for r in rows:
        if r["file_id"] is None:
            out.divergent += r["divergent"]
            out.winners += r["winners"]
        else:
            out.keep[r["file_id"]] = list(zip(r["lo"], r["hi"], strict=True))
            out.sha256[r["file_id"]] = r["sha256"]
    return out


class LandRouter:
    """Router for ``TableStore.stage`` over ``binaryFile`` rows: pass 2, land what the plan keeps.

    Files in ``together`` (path -> cluster) are planned here: the files of each such cluster arrive in
    one partition (``cluster_contents``), are decided together (``kraftlog.tables.copies.choose``) and
    landed with their divergence rows. Chunks span Arrow batches (``flush`` at the end of a partition),
    so small batches of big files still make few, large row groups.
    """

    def __init__(self, identities: dict[str, tuple[FileIdentity, int]], keep: dict[str, KeepSpec], run_id: str,
                 together: dict[str, str] | None = None):
        self.identities, self.keep, self.run_id = identities, keep, run_id
        self.together = together or {}
        self._buffer = ClusterBuffer(Counter(self.together.values()))
        self._lander: FileLander | None = None

    @property
    def lander(self) -> FileLander:
        if self._lander is None:  # built on the executor
            self._lander = FileLander(self.run_id)
        return self._lander

    def __call__(self, b: pa.RecordBatch) -> Iterator[dict[str, pa.Table]]:
        planned = []
        for ref in refs(b, self.identities):
            if ref.path not in self.together:
                planned.append((ref, self.keep[ref.path]))
                continue
            files = self._buffer.add(ref)
            if files is not None:
                yield from self._decided(files)
        yield from self.lander.feed(planned)

    def flush(self) -> Iterator[dict[str, pa.Table]]:
        for files in self._buffer.rest():
            yield from self._decided(files)
        yield from self.lander.flush()

    def _decided(self, files: list[FileRef]) -> Iterator[dict[str, pa.Table]]:
        from kraftlog.tables.copies import choose, render_divergence

        choice = choose(files)
        if choice.divergence.num_rows:
            yield {"divergence": render_divergence(choice.divergence, self.run_id)}
        yield from self.lander.feed(((f, KeepSpec(tuple(choice.keep.get(f.file_id, ())))) for f in files),
                                    columns=choice.columns)


# -- SQL functions -----------------------------------------------------------------------------------

DECODE_RESULT = T.StructType([
    T.StructField("api_key", T.ShortType()), T.StructField("type", T.StringType()),
    T.StructField("version", T.ShortType()), T.StructField("status", T.StringType()),
    T.StructField("error", T.StringType()), T.StructField("data_json", T.StringType()),
])


def _decode_value(value: bytes | None, key: bytes | None = None, control: bool = False) -> dict[str, Any] | None:
    from kraftlog.tables.rows import render
    from kraftlog.wire.files import decode_value
    from kraftlog.wire.messages import default_codec
    from kraftlog.wire.redact import default_redactor

    if value is None and not control:
        return None
    d = decode_value(default_codec(), control, key, value)
    return {"api_key": d.api_key, "type": d.type, "version": d.version, "status": d.status, "error": d.error,
            "data_json": render(d, default_redactor())}


def register_functions(spark: SparkSession) -> None:
    """Register ``kraft_decode(value BINARY)`` and ``kraft_decode_control(key BINARY, value BINARY)``.

    Both return ``STRUCT<api_key, type, version, status, error, data_json>``; ``data_json`` is the record
    as kafka-dump-log prints it, with secrets redacted. Example::

        SELECT kraft_decode(unhex('0102000174000000000000000000000000000000010000')).type  -- TOPIC_RECORD
    """
    from pyspark.sql.functions import udf

    spark.udf.register("kraft_decode", udf(lambda v: _decode_value(v), DECODE_RESULT, useArrow=True))
    spark.udf.register("kraft_decode_control",
                       udf(lambda k, v: _decode_value(v, k, control=True), DECODE_RESULT, useArrow=True))
