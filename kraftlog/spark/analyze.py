"""Build the event tables from a warehouse's histories and landed tables (``kraftlog analyze``)."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from pyspark.sql import DataFrame, SparkSession

from kraftlog.analytics.definitions import event_tables
from kraftlog.analytics.events import BUILDERS, Inputs
from kraftlog.config import Config
from kraftlog.spark.history import built_clusters, cluster_predicate, landed, read_histories
from kraftlog.spark.store import TableStore, new_run_id, store_for, writing
from kraftlog.state.entities import replay_ranges_table

log = logging.getLogger("kraftlog")


def inputs(store: TableStore, clusters: list[str] | None = None) -> Inputs:
    """The histories, landed tables and replay ranges of a store (only ``clusters`` if given)."""
    source = landed(store)
    histories = read_histories(store)
    ranges = store.read(replay_ranges_table())
    if clusters is None:
        return Inputs(histories, source, ranges)

    def only(df: DataFrame) -> DataFrame:
        return df.filter(df["cluster_id"].isin(clusters))

    return Inputs({k: only(v) for k, v in histories.items()}, lambda name: only(source(name)), only(ranges))


def event_frames(x: Inputs, names: list[str] | None = None) -> dict[str, DataFrame]:
    """The event tables as DataFrames (lazy), by name."""
    return {name: BUILDERS[name](x) for name in (names or list(event_tables()))}


@dataclass
class AnalyzeResult:
    build_id: str
    rows: dict[str, int]
    seconds: float

    def line(self) -> str:
        parts = ", ".join(f"{k} {v}" for k, v in self.rows.items() if v)
        return f"analyze {self.build_id}: {sum(self.rows.values())} event rows in {self.seconds:.1f}s ({parts})"


def analyze(spark: SparkSession, config: Config, store: TableStore | None = None,
            clusters: list[str] | None = None) -> AnalyzeResult:
    """Build every event table from the histories (run ``reconstruct`` first) and replace them."""
    store = store or store_for(spark, config)
    built_clusters(store)  # a clear error when there are no histories yet
    build_id = new_run_id()
    with writing(store, config, build_id, "analyze"):
        return _analyze(spark, store, build_id, clusters)


def _analyze(spark: SparkSession, store: TableStore, build_id: str, clusters: list[str] | None) -> AnalyzeResult:
    t0 = time.time()
    tables = event_tables()
    remade = [t.name for t in tables.values() if store.ensure(t)]
    if remade and clusters is not None:
        log.warning("%s created anew: every cluster is analysed, not only %s", ", ".join(remade), ", ".join(clusters))
        clusters = None
    frames = [(tables[name], df) for name, df in event_frames(inputs(store, clusters)).items()]
    rows = store.replace(frames, build_id, cluster_predicate(clusters))
    for name, n in rows.items():
        log.info("%s: %d rows", name, n)
    return AnalyzeResult(build_id, rows, time.time() - t0)


def read_events(store: TableStore) -> dict[str, DataFrame]:
    """The event tables of a store."""
    return {name: store.read(t) for name, t in event_tables().items()}
