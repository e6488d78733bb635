"""Predicates naming clusters: SQL for deletes (Spark and delta-rs alike) and Spark columns for reads; ``Scope``:
per-cluster cuts (the rows of an increment) as data, a join for Spark and SQL for deletes.

A list of clusters is written as one ``cluster_id IN (...)`` expression, parsed once by Spark (an ``InSet``
pushed down to Parquet), not as a column built literal by literal (``Column.isin`` costs a py4j call per
value: with hundreds of clusters, seconds per read).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from kraftlog.errors import UsageError
from kraftlog.spark.session import local_frame
from kraftlog.state.replay import TopicsRead


def sql_literal(text: str) -> str:
    """A cluster id as a SQL string literal (ids with quotes or backslashes are refused, not escaped:
    delta-rs and Spark SQL escape them differently)."""
    if "'" in text or "\\" in text:
        raise UsageError(f"cluster id {text!r}: quotes and backslashes are not supported in --cluster")
    return f"'{text}'"


def cluster_predicate(clusters: list[str] | None, column: str = "cluster_id") -> str | None:
    """``cluster_id IN (...)`` for a partial rebuild (None: everything)."""
    if clusters is None:
        return None
    return f"{column} IN (" + ", ".join(sql_literal(c) for c in clusters) + ")" if clusters else "false"


def of_clusters(clusters: list[str], column: str = "cluster_id") -> Column:
    """The rows of ``clusters`` (a Spark column; see the module docstring)."""
    return F.expr(str(cluster_predicate(clusters, column)))


def only_clusters(df: DataFrame, clusters: list[str] | None) -> DataFrame:
    """The rows of ``df`` of ``clusters`` (None: every row)."""
    return df if clusters is None else df.filter(of_clusters(clusters))


def cut_literal(value: int | str | datetime) -> str:
    """A cut as a SQL literal both Spark and delta-rs read alike: an integer, a quoted string, or an instant as an
    ISO-8601 string in UTC (both compare a timestamp column with it as that instant)."""
    if isinstance(value, datetime):
        return "'" + value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ") + "'"
    if isinstance(value, str):
        return sql_literal(value)
    return str(int(value))


# topics and partitions an increment names of a cluster, at most: more read the cluster's all. The benchmark's hour
# (1% of a 5M-record log of 150k partitions) changes 21,864 partitions of 9,064 topics: named, its replay and events
# read those alone, not every partition of the 9,064 topics (136k). A delete by an IN list of 18k partitions took
# 0.8 s on that cluster's partition history, of 60k 2.3 s, of 150k 5.4 s.
TOPICS_NAMED = 50_000


def named_topics(read: TopicsRead | None) -> TopicsRead | None:
    """``read`` (None: every topic) while it names at most ``TOPICS_NAMED`` topics and partitions, else its topics
    whole while they are at most as many, else None: a list longer costs more to join or delete by
    (``only_topics``, ``topics_sql``: ``IN`` lists, deleted on a deep stack: ``on_deep_stack``) than every topic's
    rows."""
    if read is None or len(read.topics) + len(read.partitions) <= TOPICS_NAMED:
        return read
    whole = read.by_topic()
    return whole if len(whole.topics) <= TOPICS_NAMED else None


def only_topics(df: DataFrame, topics: Mapping[str, TopicsRead | None]) -> DataFrame:
    """The rows of ``df`` (topics, with ``topic_id``, or partitions, with ``partition_id`` too) of only what ``topics``
    holds of them (``TopicsRead.of_kind``) in the clusters it names so, every row of the others (None: every topic)."""
    named = {c: read for c, read in topics.items() if read is not None}
    if not named:
        return df
    spark = df.sparkSession
    kind = "partitions" if "partition_id" in df.columns else "topics"
    keys = local_frame(spark, [(c, t, p) for c, read in named.items() for of in [read.of_kind(kind)]
                               for t, p in [*((t, None) for t in sorted(of.topics)), *sorted(of.partitions)]],
                       "_k_cluster string, _k_topic string, _k_partition int")
    hit = (F.col("cluster_id") == F.col("_k_cluster")) & (F.col("topic_id") == F.col("_k_topic"))
    if kind == "partitions":
        hit &= F.col("_k_partition").isNull() | (F.col("partition_id") == F.col("_k_partition"))
    # the other clusters' rows by a filter, not an anti join: Parquet skips the row groups of a named cluster alone
    # (a history's files are each of one cluster), where a join reads them all to drop them
    return df.filter(~of_clusters(list(named))).unionByName(df.join(F.broadcast(keys), hit, "left_semi"))


def topics_sql(read: TopicsRead) -> str:
    """The rows of the topics and partitions ``read`` names (of one kind: ``TopicsRead.of_kind``), as a SQL predicate
    (``false``: none): one ``IN`` list per form, as Spark and delta-rs both evaluate them quickly."""
    terms = [f"topic_id IN ({', '.join(map(sql_literal, sorted(read.topics)))})"] if read.topics else []
    if read.partitions:
        terms.append("concat(topic_id, ':', CAST(partition_id AS STRING)) IN ("
                     + ", ".join(sql_literal(f"{t}:{p}") for t, p in sorted(read.partitions)) + ")")
    return "(" + " OR ".join(terms) + ")" if terms else "false"


# a column's statistics in one file: (min, max, null count), each None where not known
Bounds = tuple[Any, Any, int | None]
# a string statistic this long or longer may be a prefix (a writer truncated it): no upper bound
TRUNCATED_AT = 32


def _upper(value: Any) -> Any:
    """A file's max statistic as an upper bound (None: none): a string that may be a prefix has none, an instant
    (Delta keeps milliseconds; a writer may have cut the rest) is bounded by the next millisecond."""
    if isinstance(value, datetime):
        return value + timedelta(milliseconds=1)
    return None if isinstance(value, str) and len(value) >= TRUNCATED_AT else value


SQL_TERMS = 8  # distinct cut offsets a Scope selects by SQL in Spark; more: a broadcast join


@dataclass(frozen=True)
class Scope:
    """Rows of some clusters, as data: every row of the ``whole`` clusters and, in each cluster of ``after``,
    the rows where one of ``columns`` is at or after the cluster's cut (``strict``: after it; with ``open``: or
    where the first of them is null, a version or window still open). A cut is an offset, a string (a run id)
    or an instant; a scope of no ``columns`` names its clusters and cuts for ``on`` to apply to a column.

    ``sql`` says it as one predicate, a term per distinct offset (for deletes: delta-rs evaluates hundreds of
    terms in a second). ``select`` applies it to a Spark DataFrame: as that predicate while it has at most
    ``SQL_TERMS`` terms (pushed down to Parquet, no join), else as a broadcast semi-join after a coarse filter
    Parquet can skip row groups by. As SQL, hundreds of terms cost Spark more than the work they save: on the
    10x corpus (370 clusters going on) every event table's job took 2-10 times as long.
    """

    whole: tuple[str, ...] = ()
    after: tuple[tuple[str, Any], ...] = ()
    columns: tuple[str, ...] = ()
    open: bool = False
    strict: bool = False

    @classmethod
    def of(cls, whole: Iterable[str], after: Mapping[str, Any], *columns: str, open: bool = False,
           strict: bool = False) -> Scope:
        return cls(tuple(whole), tuple(after.items()), columns, open, strict)

    def on(self, *columns: str) -> Scope:
        """The same clusters and cuts, on ``columns``."""
        return replace(self, columns=columns)

    def without(self, clusters: Iterable[str]) -> Scope:
        """The same scope, but none of ``clusters``."""
        drop = set(clusters)
        return replace(self, whole=tuple(c for c in self.whole if c not in drop),
                       after=tuple((c, o) for c, o in self.after if c not in drop))

    def cuts(self, spark: Any, name: str = "since") -> DataFrame:
        """The cuts as a small DataFrame: ``cluster_id`` and ``name`` (the clusters of ``after``)."""
        return local_frame(spark, list(self.after), f"cluster_id string, {name} {self._type()}")

    @property
    def empty(self) -> bool:
        return not self.whole and not self.after

    @property
    def clusters(self) -> list[str]:
        return [*self.whole, *(c for c, _ in self.after)]

    def _type(self) -> str:
        """The Spark type of the cuts."""
        kinds = {type(o) for _, o in self.after}
        return "timestamp" if datetime in kinds else "string" if str in kinds else "long"

    def _condition(self, at: str) -> str:
        op = ">" if self.strict else ">="
        terms = [f"{c} {op} {at}" for c in self.columns] + ([f"{self.columns[0]} IS NULL"] if self.open else [])
        return terms[0] if len(terms) == 1 else "(" + " OR ".join(terms) + ")"

    def _by_offset(self) -> list[tuple[Any, list[str]]]:
        groups: dict[Any, list[str]] = {}
        for c, o in self.after:
            groups.setdefault(o, []).append(c)
        return sorted(groups.items())

    def sql(self) -> str:
        """The rows as a SQL predicate (``false`` when there are none)."""
        parts = [str(cluster_predicate(list(self.whole)))] if self.whole else []
        parts += [f"{cluster_predicate(cs)} AND {self._condition(cut_literal(o))}" for o, cs in self._by_offset()]
        return " OR ".join(f"({p})" for p in parts) if parts else "false"

    def may_hold(self, bounds: Callable[[str], Bounds | None], rows: int | None) -> bool:
        """Whether a file may hold rows of this scope, as its statistics tell (``bounds``: a column's in the file,
        None where it has none; ``rows``: its row count, None: not known): False only where they rule every row
        out, by its ``cluster_id`` range or by the scope's columns all before the least cut of the clusters in that
        range (data skipping: the reader then lists fewer files, and Spark runs fewer tasks)."""
        held = bounds("cluster_id")
        low, high = (held[0], _upper(held[1])) if held else (None, None)

        def within(c: str) -> bool:
            return (low is None or low <= c) and (high is None or c <= high)

        if any(within(c) for c in self.whole):
            return True
        cuts = [o for c, o in self.after if within(c)]
        if not cuts or not self.columns:
            return bool(cuts)
        least = min(cuts)
        for i, column in enumerate(self.columns):
            b = bounds(column)
            if b is None:
                return True
            top, nulls = _upper(b[1]), b[2]
            if self.open and i == 0 and (nulls is None or nulls > 0):
                return True  # (an open row)
            if top is None:
                if nulls is None or rows is None or nulls < rows:
                    return True  # no bound known (every row null: none at or after the cut)
                continue
            try:
                if top > least or (top == least and not self.strict):
                    return True
            except TypeError:  # a statistic of another type than the cut's (naive and aware instants)
                return True
        return False

    def select(self, df: DataFrame) -> DataFrame:
        """The rows of ``df`` in this scope (its columns unchanged)."""
        if len(self._by_offset()) <= SQL_TERMS:
            return df.filter(F.expr(self.sql()))
        lowest = min(o for _, o in self.after)
        coarse = (f"{cluster_predicate(self.clusters)} AND ("
                  + " OR ".join([*([str(cluster_predicate(list(self.whole)))] if self.whole else []),
                                 self._condition(cut_literal(lowest))]) + ")")
        cuts = local_frame(df.sparkSession, [*((c, None) for c in self.whole), *self.after],
                           f"_scope_cluster string, _scope_after {self._type()}")
        hit = (F.col("cluster_id") == F.col("_scope_cluster")) & (
            F.col("_scope_after").isNull() | F.expr(self._condition("_scope_after")))
        return df.filter(F.expr(coarse)).join(F.broadcast(cuts), hit, "left_semi")
