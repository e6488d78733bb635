"""Read what ``kraftlog report`` draws: the event rows of some clusters in a period, with Spark.

Only the rows of the clusters and the period leave the executors (as pandas frames); drawing is
``kraftlog.analytics.report``'s.
"""

from __future__ import annotations

import pandas as pd
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from kraftlog.analytics.definitions import event_tables
from kraftlog.analytics.report import Period, Report
from kraftlog.identity import choose_cluster
from kraftlog.spark.history import built_clusters
from kraftlog.spark.store import TableStore


def in_period(df: DataFrame, period: Period) -> DataFrame:
    """Rows of an event table that touch the period: point events by time, windows by overlap."""
    cols = set(df.columns)
    if "timestamp" in cols:
        start_col, end_col = F.col("timestamp"), F.col("timestamp")
    elif "from_time" in cols:
        start_col, end_col = F.col("from_time"), F.col("to_time")
    elif "hour" in cols:
        start_col, end_col = F.col("hour"), F.col("hour") + F.expr("INTERVAL 1 HOUR")
    else:
        return df
    if period.start is not None:
        df = df.filter(end_col.isNull() | (end_col >= F.lit(period.start)))
    if period.end is not None:
        df = df.filter(start_col <= F.lit(period.end))
    return df


def report_frames(store: TableStore, cluster_ids: list[str], period: Period) -> dict[str, dict[str, pd.DataFrame]]:
    """The event rows of some clusters in the period, as pandas frames by cluster and table name (one read of
    each table for all the clusters)."""
    out: dict[str, dict[str, pd.DataFrame]] = {c: {} for c in cluster_ids}
    for name, table in event_tables().items():
        df: pd.DataFrame = in_period(store.read(table).filter(F.col("cluster_id").isin(cluster_ids)),
                                      period).toPandas()
        for c in cluster_ids:
            out[c][name] = df[df["cluster_id"] == c].drop(columns="cluster_id").reset_index(drop=True)
    return out


def build_reports(store: TableStore, clusters: list[str] | None, period: Period) -> list[Report]:
    """The reports of ``clusters`` (ids, or the part after ``source:``; None: every cluster built) over ``period``."""
    known = sorted(built_clusters(store))
    ids = [choose_cluster(known, c) for c in clusters] if clusters else known
    frames = report_frames(store, ids, period)
    return [Report(c, period, frames[c]) for c in ids]


def build_report(store: TableStore, cluster: str | None, period: Period) -> Report:
    """The report of ``cluster`` (its id, or the only cluster built) over ``period``."""
    cluster_id = choose_cluster(sorted(built_clusters(store)), cluster)
    return build_reports(store, [cluster_id], period)[0]
