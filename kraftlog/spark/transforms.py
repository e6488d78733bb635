"""Pure DataFrame -> DataFrame steps of an ingest run: this run's winning copies against landed rows.

Within a run, the files of each cluster are decided together in Python (``kraftlog.tables.copies``,
which states the rules). Where earlier runs landed rows of the same cluster, this run's winners (narrow
``INDEX`` rows: key, batch epoch, node, file id, value hash, raw bytes) meet them here: new keys are
appended; a landed log row loses to a better copy by the same order the run used (``LOG_COPY_ORDER``: it
is replaced and reported), otherwise the landed row stays and the new copy is reported. So what lands does
not depend on which run saw which copy first.
"""

from __future__ import annotations

from collections.abc import Callable

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from kraftlog.tables.copies import LOG_COPY_ORDER
from kraftlog.tables.rows import CORRUPT_BATCH

JOIN_KEY = ["cluster_id", "_snap", "log_offset", "_seq"]
_COPY = ["node_id", "file", "batch_epoch", "value_hash"]  # what identifies a copy in divergence rows
_LOSER_EXTRA = ["record_type", "timestamp", "data_json", "key", "value", "is_control", "api_key"]


def with_join_key(df: DataFrame) -> DataFrame:
    """Null-safe key columns for joins (snapshot_id and snapshot_seq are null for log records)."""
    return df.withColumn("_snap", F.coalesce("snapshot_id", F.lit(""))) \
             .withColumn("_seq", F.coalesce("snapshot_seq", F.lit(-1)))


def source_of(snapshot_id: F.Column) -> F.Column:
    """log, snapshot or bootstrap, from the record's snapshot id."""
    return (F.when(snapshot_id.isNull(), F.lit("log"))
            .when(snapshot_id.isin("bootstrap.checkpoint", "00000000000000000000-0000000000"), F.lit("bootstrap"))
            .otherwise(F.lit("snapshot")))


def divergence_rows(df: DataFrame, reason: F.Column) -> DataFrame:
    """Divergence rows from columns ``w_<copy>`` (the winner) and ``<copy>`` plus extras (the loser)."""
    return df.select(
        "cluster_id", source_of(F.col("snapshot_id")).alias("source"), "snapshot_id", "log_offset",
        "snapshot_seq", reason.alias("reason"),
        *[F.col(f"w_{c}").alias(f"winner_{c}") for c in _COPY],
        *[F.col(c).alias(f"loser_{c}") for c in _COPY],
        *[F.col(c).alias(f"loser_{c}") for c in _LOSER_EXTRA])


def path_map(paths: dict[int, str]) -> F.Column:
    """A map literal file id -> path (the files of one run: a small map known on the driver)."""
    return F.create_map(*[x for i, p in sorted(paths.items()) for x in (F.lit(i), F.lit(p))])


def with_paths(df: DataFrame, paths: F.Column, prefix: str = "") -> DataFrame:
    """Add ``<prefix>file`` (the path) from ``<prefix>file_id``."""
    return df.withColumn(f"{prefix}file", F.element_at(paths, F.col(f"{prefix}file_id")))


def with_raw_bytes(df: DataFrame, records: DataFrame) -> DataFrame:
    """Add the raw ``key`` and ``value`` of each row's record copy (by file and position); for few rows.

    The records are first cut down to the wanted copies (a semi join against ``df``'s few keys,
    broadcast), so that no plan ships every record's bytes around to find a handful.
    """
    keyed = df.withColumn("_pos", F.coalesce("snapshot_seq", "log_offset"))
    raw = records.select("file_id", F.coalesce("snapshot_seq", "log_offset").alias("_pos"), "key", "value") \
        .join(F.broadcast(keyed.select("file_id", "_pos")), ["file_id", "_pos"], "left_semi")
    return keyed.join(raw, ["file_id", "_pos"], "left").drop("_pos")


def better_copy(new: Callable[[str], Column], old: Callable[[str], Column],
                order: tuple[tuple[str, str], ...] = LOG_COPY_ORDER) -> Column:
    """Whether the copy ``new`` (its columns by the order's names) beats ``old`` by ``order`` (unknown last)."""
    result = F.lit(False)
    for column, direction in reversed(order):  # lexicographic, from the least significant column up
        a, b = new(column), old(column)
        wins = a.isNotNull() & (b.isNull() | ((a > b) if direction == "desc" else (a < b)))
        result = wins | (a.eqNullSafe(b) & result)
    return result


def against_existing(winners: DataFrame, existing: DataFrame, paths: F.Column, records: DataFrame
                     ) -> tuple[DataFrame, DataFrame, DataFrame]:
    """(rows to append, landed keys to replace, divergence rows) for this run's winners.

    ``existing`` holds landed records: the key, ``value_hash``, ``batch_epoch``, ``node_id``, ``file``,
    ``record_type``, ``timestamp``, ``data_json``, ``is_control`` and ``api_key``; ``records`` are this
    run's index rows (for the raw bytes of a new copy that loses).
    """
    w = with_join_key(winners)
    landed = ["value_hash", "batch_epoch", "node_id", "file", "record_type", "timestamp", "data_json",
              "is_control", "api_key"]
    e = with_join_key(existing).select(*JOIN_KEY, *[F.col(c).alias(f"e_{c}") for c in landed],
                                       (F.col("status") != CORRUPT_BATCH).alias("e_trusted"))
    new = w.join(e, JOIN_KEY, "left_anti")
    differs = (F.col("value_hash") != F.col("e_value_hash")) | (F.col("crc_valid") != F.col("e_trusted"))
    both = with_paths(w.join(e, JOIN_KEY, "inner").filter(differs), paths)
    this_run = {"trusted": F.col("crc_valid")}
    replaces = F.col("snapshot_id").isNull() & better_copy(lambda c: this_run.get(c, F.col(c)),
                                                           lambda c: F.col(f"e_{c}"))
    replacing = both.filter(replaces)
    # as among one run's copies (``kraftlog.tables.copies``): a copy that loses is divergence when its bytes differ
    bytes_differ = F.col("value_hash") != F.col("e_value_hash")
    keep = with_raw_bytes(both.filter(~replaces & bytes_differ), records)
    no_bytes = [F.lit(None).cast("binary").alias("key"), F.lit(None).cast("binary").alias("value")]
    replaced_div = divergence_rows(
        replacing.filter(bytes_differ).select("cluster_id", "snapshot_id", "log_offset", "snapshot_seq",
                         *[F.col(c).alias(f"w_{c}") for c in _COPY],
                         *[F.col(f"e_{c}").alias(c) for c in [*_COPY, "record_type", "timestamp", "data_json",
                                                                "is_control", "api_key"]], *no_bytes),
        F.when(F.col("w_batch_epoch") > F.col("batch_epoch"), F.lit("replaced_by_higher_epoch"))
         .otherwise(F.lit("replaced_by_better_copy")))
    lost_div = divergence_rows(
        keep.select("cluster_id", "snapshot_id", "log_offset", "snapshot_seq",
                    *[F.col(f"e_{c}").alias(f"w_{c}") for c in _COPY], *_COPY, "crc_valid", "timestamp", "is_control",
                    "api_key",
                    F.lit(None).cast("string").alias("record_type"), F.lit(None).cast("string").alias("data_json"),
                    "key", "value"),
        F.when(F.col("snapshot_id").isNotNull(), F.lit("snapshot_copy_differs"))
         .when(~F.col("crc_valid"), F.lit("corrupt_copy"))
         .when(F.col("batch_epoch") < F.col("w_batch_epoch"), F.lit("lower_epoch"))
         .otherwise(F.lit("same_epoch_conflict")))
    to_append = new.unionByName(replacing.select(*new.columns)).drop("_snap", "_seq")
    replace_keys = replacing.select("cluster_id", "log_offset", F.col("e_record_type").alias("record_type"))
    return to_append, replace_keys, replaced_div.unionByName(lost_div)


def new_rows(df: DataFrame, existing: DataFrame, key: list[str]) -> DataFrame:
    """Rows of ``df`` whose ``key`` is not in ``existing`` (null-safe)."""
    cond = [df[k].eqNullSafe(existing[k]) for k in key]
    return df.join(existing.select(*key), cond, "left_anti")


def keep_ranges(to_append: DataFrame) -> DataFrame:
    """Contiguous runs of record positions to land, per file: (file_id, lo, hi).

    Records of a file are numbered by log offset (or position in a snapshot), so the records to land
    are few ranges; the land pass re-reads the file and keeps those.
    """
    pos = to_append.select("file_id", F.coalesce("snapshot_seq", "log_offset").alias("pos"))
    w = Window.partitionBy("file_id").orderBy("pos")
    return pos.withColumn("_island", F.col("pos") - F.row_number().over(w)) \
              .groupBy("file_id", "_island").agg(F.min("pos").alias("lo"), F.max("pos").alias("hi")) \
              .drop("_island")
