"""Spark glue for the wire layer: the three passes over files, SQL functions."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from pyspark.sql import SparkSession
from pyspark.sql import types as T

from kraftlog.spark.inputs import Content, FileGroups, FileSpec, by_cluster
from kraftlog.spark.staging import StreamingWriter, write_parquet
from kraftlog.spark.store import spark_schema
from kraftlog.storage import Storage
from kraftlog.tables.definitions import catalog
from kraftlog.tables.rows import SUMMARY, FileIdentity, FileLander, FileRef, KeepSpec, Resume, content_digest, summarize

if TYPE_CHECKING:
    from kraftlog.tables.rows import Ingested


def refs(contents: list[Content], identities: dict[str, tuple[FileIdentity, int]]) -> list[FileRef]:
    """The files of a batch of file contents (``inputs.read_contents``)."""
    return [FileRef(c.path, c.data, c.mtime_ms, *identities[c.path], start=c.start) for c in contents]


def summaries(spark: SparkSession, files: FileGroups, prefix_sizes: dict[str, int],
              resumes: Mapping[str, Resume] | None = None) -> list[dict[str, Any]]:
    """Pass 0 (every changed file): batch-header summaries, collected (one small row per file). A grown segment
    read from its last batch landed on (``resumes``) is read whole instead where that batch changed (its ``start``
    in the summary is 0)."""
    resumes = resumes or {}

    def one(c: Content) -> dict[str, Any]:
        resume = resumes.get(c.path)
        if c.start and (resume is None or not resume.holds(c.data, c.start)):
            c = Content(c.path, c.mtime_ms, files.storage.read_bytes(c.path, c.start + len(c.data)))
        return summarize(c.path, c.data, prefix_sizes.get(c.path), c.start, resume)

    def run(batches: Iterable[list[Content]]) -> Iterator[pa.RecordBatch]:
        for b in batches:
            yield pa.RecordBatch.from_pylist([one(c) for c in b], schema=SUMMARY)

    return [r.asDict() for r in files.map(spark, run, SUMMARY).collect()]


CHOICE = pa.schema([("file_id", pa.int32()), ("sha256", pa.string()), ("lo", pa.list_(pa.int64())),
                    ("hi", pa.list_(pa.int64())), ("divergent", pa.int64()), ("winners", pa.int64()),
                    ("conflict", pa.string())])


@dataclass
class Choices:
    """What pass 1 decided, by file id: the ranges of record positions each file lands and the SHA-256
    of the content decided on, the conflicts found (``Choice.conflicts``); and how many divergence and
    winning INDEX rows it wrote."""

    keep: dict[int, list[tuple[int, int]]] = field(default_factory=dict)
    sha256: dict[int, str] = field(default_factory=dict)
    conflicts: dict[int, str] = field(default_factory=dict)
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


def stage_choices(spark: SparkSession, identities: dict[str, tuple[FileIdentity, int]], files: list[FileSpec],
                  storage: Storage, dest: str, decided: Mapping[str, Ingested] | None = None) -> Choices:
    """Pass 1 (competing files ``identities``): the canonical copy of each record, one call per cluster.

    Each cluster's files are read by one task (no shuffle) and decided together
    (``kraftlog.tables.copies.choose``; ``decided``: per grown segment, what earlier runs ingested of it, so chose
    among its copies). The divergence rows go under ``dest/divergence`` and the winning copies' INDEX rows
    under ``dest/index`` (Parquet), to be compared with landed rows.
    """
    decided = dict(decided or {})
    from kraftlog.tables.copies import DIVERGENCE_SOURCE, choose_in_parts, conflicts, join_runs
    from kraftlog.tables.rows import INDEX

    expected = Counter(ident.cluster_id for ident, _ in identities.values())

    def decide(files: list[FileRef]) -> pa.RecordBatch:
        keep: dict[int, list[tuple[int, int]]] = {}
        divergence = [DIVERGENCE_SOURCE.empty_table()]
        winners: StreamingWriter | None = None  # one file, in row groups of 65,536 rows or more
        for part in choose_in_parts(files, decided={f.file_id: decided[f.path] for f in files if f.path in decided}):
            for file_id, runs in part.keep.items():
                join_runs(keep.setdefault(file_id, []), runs)
            divergence.append(part.divergence)
            if part.winners.num_rows:
                winners = winners or StreamingWriter("index", dest + "/index", INDEX, "", storage, 1 << 16)
                winners.write(part.winners)
        won = winners.close().num_records if winners is not None else 0
        diverged = pa.concat_tables(divergence)
        if diverged.num_rows:
            write_parquet("divergence", dest + "/divergence", diverged, storage)
        problems = conflicts(diverged)
        rows: list[dict[str, Any]] = [
            {"file_id": f.file_id, "sha256": None if f.start else content_digest(f.content),  # a window: planned
             "lo": [lo for lo, _ in keep.get(f.file_id, ())], "hi": [hi for _, hi in keep.get(f.file_id, ())],
             "divergent": 0, "winners": 0, "conflict": problems.get(f.path)} for f in files]
        rows.append({"divergent": diverged.num_rows, "winners": won, "conflict": None})
        return pa.RecordBatch.from_pylist(rows, CHOICE)

    def run(batches: Iterable[list[Content]]) -> Iterator[pa.RecordBatch]:
        buffer = ClusterBuffer(expected)
        for b in batches:
            for ref in refs(b, identities):
                files = buffer.add(ref)
                if files is not None:
                    yield decide(files)
        for files in buffer.rest():
            yield decide(files)

    out = Choices()
    groups = by_cluster(spark, files, {p: ident.cluster_id for p, (ident, _) in identities.items()}, storage)
    rows = groups.map(spark, run, CHOICE).collect()
    for r in rows:
        if r["file_id"] is None:
            out.divergent += r["divergent"]
            out.winners += r["winners"]
        else:
            out.keep[r["file_id"]] = list(zip(r["lo"], r["hi"], strict=True))
            out.sha256[r["file_id"]] = r["sha256"]
            if r["conflict"]:
                out.conflicts[r["file_id"]] = r["conflict"]
    return out


class LandRouter:
    """Router for ``TableStore.stage`` over file contents (``inputs.read_contents``): pass 2, land what the plan keeps.

    Files in ``together`` (path -> cluster) are planned here: the files of each such cluster arrive in
    one task (``inputs.by_cluster``), are decided together (``kraftlog.tables.copies.choose``) and
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

    def __call__(self, b: list[Content]) -> Iterator[dict[str, pa.Table]]:
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
        conflicts = choice.conflicts
        yield from self.lander.feed(((f, KeepSpec(tuple(choice.keep.get(f.file_id, ())),
                                                  problems=(conflicts[f.path],) if f.path in conflicts else ()))
                                     for f in files), columns=choice.columns)


# -- SQL functions -----------------------------------------------------------------------------------

DECODE_RESULT = T.StructType([
    T.StructField("api_key", T.ShortType()), T.StructField("type", T.StringType()),
    T.StructField("version", T.ShortType()), T.StructField("status", T.StringType()),
    T.StructField("error", T.StringType()), T.StructField("data_json", T.StringType()),
])


def _decode_value(value: bytes | None, key: bytes | None = None, control: bool = False) -> dict[str, Any] | None:
    from kraftlog.tables.rows import record_json
    from kraftlog.wire.files import decode_value
    from kraftlog.wire.messages import default_codec
    from kraftlog.wire.redact import default_redactor

    if value is None and not control:
        return None
    d = decode_value(default_codec(), control, key, value)
    return {"api_key": d.api_key, "type": d.type, "version": d.version, "status": d.status, "error": d.error,
            "data_json": record_json(d, default_redactor())}


# what ``kraft_records`` returns of the ``records`` columns: what a record is, not where it was landed from
RECORD_COLUMNS = ("source", "snapshot_id", "log_offset", "snapshot_seq", "batch_epoch", "timestamp", "is_control",
                  "api_key", "record_type", "record_version", "status", "error", "data_json")


def landed_rows(content: bytes, path: str | None = None) -> dict[str, pa.Table]:
    """The rows the ingest lands from one file's bytes (``records`` and the typed tables), built by the ingest's
    own ``FileLander``; ``path`` (or a Kafka file name) tells a snapshot from a segment and pins the batches."""
    ref = FileRef(path or "", content, 0, FileIdentity("", None, ""))
    tables: dict[str, list[pa.Table]] = {}
    for chunk in FileLander("sql").land([(ref, KeepSpec())]):
        for name, t in chunk.items():
            tables.setdefault(name, []).append(t)
    return {name: pa.concat_tables(ts) for name, ts in tables.items()}


def _records_udtf() -> Any:
    from pyspark.sql.functions import udtf

    schema = T.StructType([f for f in spark_schema(catalog().core["records"]).fields if f.name in RECORD_COLUMNS])
    names = schema.fieldNames()  # in the table's order

    class KraftRecords:
        """``kraft_records(content BINARY [, path STRING])``: one row per record of a segment's, snapshot's or
        batch's bytes, with the ``records`` columns the ingest writes for it."""

        def eval(self, content: bytes | None, path: str | None = None) -> Iterator[tuple[Any, ...]]:
            if content is None:
                return
            records = landed_rows(bytes(content), path).get("records")
            if records is not None:
                yield from zip(*(records.column(c).to_pylist() for c in names), strict=True)

    return udtf(KraftRecords, returnType=schema, useArrow=True)


def _typed_udtf() -> Any:
    from pyspark.sql.functions import udtf
    from pyspark.sql.udtf import AnalyzeArgument, AnalyzeResult

    class KraftTyped:
        """``kraft_typed(content BINARY, table STRING [, path STRING])``: the rows of one typed table (e.g.
        ``'partition_change_record'``) that a file's bytes land, with that table's columns."""

        @staticmethod
        def analyze(content: AnalyzeArgument, table: AnalyzeArgument, path: AnalyzeArgument | None = None
                    ) -> AnalyzeResult:
            name = table.value
            if not table.isConstantExpression or name not in catalog().typed:
                raise ValueError(f"kraft_typed: the table must be a constant naming a typed table, not {name!r}")
            return AnalyzeResult(spark_schema(catalog().typed[name]))

        def eval(self, content: bytes | None, table: str, path: str | None = None) -> Iterator[tuple[Any, ...]]:
            if content is None:
                return
            rows = landed_rows(bytes(content), path).get(table)
            if rows is not None:
                yield from zip(*(c.to_pylist() for c in rows.columns), strict=True)

    return udtf(KraftTyped, useArrow=True)


def register_functions(spark: SparkSession) -> None:
    """Register kraftlog's SQL functions (Spark Connect too):

    * ``kraft_decode(value BINARY)``, ``kraft_decode_control(key BINARY, value BINARY)``:
      ``STRUCT<api_key, type, version, status, error, data_json>``; ``data_json`` is the record as
      kafka-dump-log prints it, with secrets redacted;
    * ``kraft_records(content BINARY [, path STRING])``: a table function, one row per record of a file's
      bytes, with the ``records`` columns (``RECORD_COLUMNS``) the ingest writes for it;
    * ``kraft_typed(content BINARY, table STRING [, path STRING])``: the rows of one typed table.

    Examples::

        SELECT kraft_decode(unhex('0102000174000000000000000000000000000000010000')).type  -- TOPIC_RECORD
        SELECT r.* FROM binary_files, LATERAL kraft_records(content, path) r
        SELECT t.* FROM binary_files, LATERAL kraft_typed(content, 'partition_change_record', path) t
    """
    from pyspark.sql.functions import udf

    spark.udf.register("kraft_decode", udf(lambda v: _decode_value(v), DECODE_RESULT, useArrow=True))
    spark.udf.register("kraft_decode_control",
                       udf(lambda k, v: _decode_value(v, k, control=True), DECODE_RESULT, useArrow=True))
    spark.udtf.register("kraft_records", _records_udtf())
    spark.udtf.register("kraft_typed", _typed_udtf())
