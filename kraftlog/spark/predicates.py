"""Predicates naming clusters: SQL for deletes (Spark and delta-rs alike) and Spark columns for reads.

A list of clusters is written as one ``cluster_id IN (...)`` expression, parsed once by Spark (an ``InSet``
pushed down to Parquet), not as a column built literal by literal (``Column.isin`` costs a py4j call per
value: with hundreds of clusters, seconds per read).
"""

from __future__ import annotations

from pyspark.sql import Column
from pyspark.sql import functions as F

from kraftlog.errors import UsageError


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
