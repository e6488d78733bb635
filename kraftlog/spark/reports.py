"""Read what ``kraftlog report`` draws: the event rows of some clusters in a period, with Spark.

Only the rows of the clusters and the period leave the executors (as pandas frames); drawing is
``kraftlog.analytics.report``'s.
"""

from __future__ import annotations

import pickle
from collections.abc import Iterable, Iterator
from typing import Any

import pandas as pd
import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema

from kraftlog.analytics.definitions import event_tables
from kraftlog.analytics.events import NO_OP
from kraftlog.analytics.report import NOW_COLUMNS, Activity, Now, Period, Report, bin_seconds, render_index, report_name
from kraftlog.identity import choose_cluster
from kraftlog.spark.history import built_clusters, offsets_at, states_at
from kraftlog.spark.predicates import of_clusters
from kraftlog.spark.session import JobThreads, default_parallelism, local_frame
from kraftlog.spark.store import TableStore
from kraftlog.state.entities import history_tables
from kraftlog.storage import Storage, join, normalize
from kraftlog.tables.definitions import TableDef, catalog


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


def report_frames(store: TableStore, cluster_ids: list[str], period: Period, jobs: int = 4
                  ) -> dict[str, dict[str, pd.DataFrame]]:
    """The event rows of some clusters in the period, as pandas frames by cluster and table name (one read of
    each table for all the clusters, ``jobs`` tables at a time: a table's read is planned while others run)."""
    def read(table: TableDef) -> pd.DataFrame:
        return in_period(store.read(table).filter(of_clusters(cluster_ids)), period).toPandas()

    with JobThreads(store.spark, jobs) as pool:
        read_ = {name: pool.submit(read, table) for name, table in event_tables().items()}
        tables = {name: future.result() for name, future in read_.items()}
    split = {name: by_cluster(df, cluster_ids) for name, df in tables.items()}
    return {c: {name: frames[c] for name, frames in split.items()} for c in cluster_ids}


def by_cluster(df: pd.DataFrame, cluster_ids: list[str]) -> dict[str, pd.DataFrame]:
    """The rows of ``df`` by cluster, without ``cluster_id``: a frame for each of ``cluster_ids`` (empty where it has
    no row), its rows in their order. One pass over ``df``, not one per cluster (the 10x corpus's 380 clusters:
    14.6 s of a 17 s report)."""
    rest = df.drop(columns="cluster_id")
    rows = df.groupby("cluster_id", sort=False).indices
    out = {}
    for c in cluster_ids:
        frame = rest.iloc[rows.get(c, [])]  # (a copy already: its index renumbered in place, not copied again)
        frame.index = pd.RangeIndex(len(frame))
        out[c] = frame
    return out


def now_frames(store: TableStore, ranges: dict[str, Any], cluster_ids: list[str], period: Period
               ) -> dict[str, Now]:
    """Per cluster: what the report draws of the image at the end of the period (``NOW_COLUMNS``), from the
    histories: a read of each kind for all the clusters."""
    offsets = end_offsets(store, {c: ranges[c] for c in cluster_ids}, period)
    tables = history_tables()
    state = states_at({kind: store.read(tables[kind]) for kind in NOW_COLUMNS}, offsets)
    frames: dict[str, pd.DataFrame] = {
        k: (df.select("cluster_id", *cols) if (cols := NOW_COLUMNS[k]) else df).toPandas() for k, df in state.items()}
    split = {k: by_cluster(df, cluster_ids) for k, df in frames.items()}
    return {c: Now(offsets[c], {k: of[c] for k, of in split.items()}) for c in cluster_ids}


def end_offsets(store: TableStore, built: dict[str, dict[str, Any]], period: Period) -> dict[str, int]:
    """By cluster: the last offset built (``built``: the clusters' ``built_clusters`` rows) at or before the end of
    ``period``.

    Where the last record built is at or before the end (a report of the whole log, or of a period that ends after
    what landed), that record's, and no record is read; else ``offsets_at``'s (which reads from the first record
    after the end on, the clusters' questions together)."""
    last = {c: int(r["last_offset"] if r["last_offset"] is not None else r["base_offset"]) for c, r in built.items()}
    if period.end is None:
        return last
    end_ms = int(period.end.timestamp() * 1000)
    # (the last offset is the greatest: a cluster whose last record is at or before the end has it, and asks nothing)
    ask = {c: (end_ms, r["last_offset"]) for c, r in built.items()
           if r["last_offset"] is None or r["last_ms"] is None or r["last_ms"] > end_ms}
    found = offsets_at(store.read(catalog()["records"]), ask) if ask else {}
    return {c: min(o, found.get(c, o)) for c, o in last.items()}


def activity_frames(store: TableStore, cluster_ids: list[str], period: Period) -> dict[str, Activity]:
    """Per cluster: its log records in the period, counted in bins scaled to the period's span (``bin_seconds``)."""
    log = in_period(store.read(catalog()["records"]).filter(of_clusters(cluster_ids)
                                                            & (F.col("source") == "log")), period)
    spans = {} if period.start and period.end else {  # (an open end: where the cluster's records begin or end)
        r["cluster_id"]: r for r in log.groupBy("cluster_id").agg(
            F.min(F.unix_seconds("timestamp")).alias("lo"), F.max(F.unix_seconds("timestamp")).alias("hi")).collect()}
    widths = {}
    for c in cluster_ids:
        lo = int(period.start.timestamp()) if period.start else (spans[c]["lo"] if c in spans else 0)
        hi = int(period.end.timestamp()) if period.end else (spans[c]["hi"] if c in spans else lo)
        widths[c] = bin_seconds(max(hi - lo, 1))
    width = F.element_at(F.create_map(*[x for c, w in widths.items() for x in (F.lit(c), F.lit(w))]),
                         F.col("cluster_id"))
    binned: pd.DataFrame = (log.withColumn("_w", width)
              .groupBy("cluster_id", (F.floor(F.unix_seconds("timestamp") / F.col("_w")) * F.col("_w")).alias("_s"))
              .agg(F.count("*").alias("records"),
                   F.sum((F.col("record_type") == NO_OP).cast("long")).alias("noop_records"))
              .select("cluster_id", F.timestamp_seconds("_s").alias("start"), "records", "noop_records")
              .toPandas())
    bins = by_cluster(binned, cluster_ids)
    return {c: Activity(widths[c], bins[c]) for c in cluster_ids}


def build_reports(store: TableStore, clusters: list[str] | None, period: Period) -> list[Report]:
    """The reports of ``clusters`` (ids, or the part after ``source:``; None: every cluster built) over ``period``."""
    ranges = built_clusters(store)
    known = sorted(ranges)
    ids = [choose_cluster(known, c) for c in clusters] if clusters else known
    with JobThreads(store.spark, 2) as pool:  # (each its own Spark jobs, while the event tables are read)
        now = pool.submit(now_frames, store, ranges, ids, period)
        activity = pool.submit(activity_frames, store, ids, period)
        frames = report_frames(store, ids, period)
        return [Report(c, period, frames[c], now.result()[c], activity.result()[c]) for c in ids]


def build_report(store: TableStore, cluster: str | None, period: Period) -> Report:
    """The report of ``cluster`` (its id, or the only cluster built) over ``period``."""
    cluster_id = choose_cluster(sorted(built_clusters(store)), cluster)
    return build_reports(store, [cluster_id], period)[0]


def write_report(store: TableStore, cluster: str | None, period: Period, out: str | None = None) -> str:
    """Write the page of ``cluster`` (its id, or the only cluster built) over ``period`` to ``out``: a file (a path
    or a URI), or a folder to hold ``report-<cluster>.html`` (one that is there, or a URI ending in ``/``); by
    default ``report-<cluster>.html`` in the working directory. The line saying what was written."""
    report = build_report(store, cluster, period)
    page = report.html().encode("utf-8")
    target = out or report_name(report.cluster_id)
    if target.endswith("/") or store.storage.is_dir(target):
        target = join(target, report_name(report.cluster_id))
    store.storage.write_bytes(target, page)
    return f"report of {report.cluster_id} ({period.text()}): {target} ({len(page):,} bytes)"


def write_reports(store: TableStore, clusters: list[str] | None, period: Period, out_dir: str) -> list[str]:
    """Write ``report-<cluster>.html`` for each of ``clusters`` (None: every cluster built) and ``index.html`` (a row
    per cluster, linking to its page) under ``out_dir`` (a path or a URI; a file there is a ``NotADirectory``,
    before anything is built); one line per page written."""
    out_dir = store.storage.folder(out_dir)
    reports = build_reports(store, clusters, period)
    uris = write_pages(store, reports, out_dir)
    lines = [f"report of {r.cluster_id} ({period.text()}): {uri}" for r, uri in zip(reports, uris, strict=True)]
    index = join(out_dir, "index.html")
    pages = [(r, report_name(r.cluster_id)) for r in reports]
    store.storage.write_bytes(index, render_index(pages, period).encode("utf-8"))
    return [*lines, f"overview of {len(pages)} cluster(s): {index}"]


# Pages drawn on the driver; more are drawn by executors. A page's plots take matplotlib 0.2-0.9 s (0.44 s a page
# on average for an hour of the 10x corpus's clusters, 0.6 s for their whole logs): one page after another on the
# driver, the hourly pages of its 380 clusters took 229 s, several times the hour's build. A Python worker's first
# plot costs 0.5 s more (matplotlib's import), and a Spark job its own start: not worth it for one or two pages.
DRIVER_PAGES = 2


def write_pages(store: TableStore, reports: list[Report], out_dir: str) -> list[str]:
    """Draw each report's page and write it to ``out_dir`` as ``report_name``; the pages' URIs, in the reports'
    order. Up to ``DRIVER_PAGES`` are drawn on the driver; more, by executors (the reports handed over pickled, a
    share of them to each task slot; each task writes its pages to storage itself), so that a fleet's pages take
    the cluster's cores, not the driver's one."""
    storage, out_dir = store.storage, normalize(out_dir)
    if len(reports) <= DRIVER_PAGES:
        return [_write_page(r, out_dir, storage) for r in reports]
    rows = [(i, pickle.dumps(r, protocol=pickle.HIGHEST_PROTOCOL)) for i, r in enumerate(reports)]
    parts = min(len(rows), default_parallelism(store.spark))

    def task(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for b in batches:
            uris = [_write_page(pickle.loads(data), out_dir, storage) for data in b.column("report").to_pylist()]
            yield pa.RecordBatch.from_arrays([b.column("i"), pa.array(uris, pa.string())], schema=_PAGES)

    pages = local_frame(store.spark, rows, "i long, report binary").repartition(parts)
    written = {r["i"]: r["uri"] for r in pages.mapInArrow(task, from_arrow_schema(_PAGES)).collect()}
    return [written[i] for i in range(len(reports))]


_PAGES = pa.schema([pa.field("i", pa.int64()), pa.field("uri", pa.string())])


def _write_page(report: Report, out_dir: str, storage: Storage) -> str:
    uri = join(out_dir, report_name(report.cluster_id))
    storage.write_bytes(uri, report.html().encode("utf-8"))
    return uri
