"""Every cluster of the corpus and the scenarios: Spark histories equal the sequential replay, and verify on
the tables finds no difference at any reachable snapshot."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from event_oracle import evaluated, under_min_isr_rows
from services import repeated_keys
from test_history import assert_same_histories, local_rows, spark_rows

from kraftlog.analytics.definitions import event_tables
from kraftlog.config import Config
from kraftlog.spark.history import build_histories, landed
from kraftlog.spark.ingest import ingest
from kraftlog.spark.store import open_store
from kraftlog.spark.verify import verify_build
from kraftlog.state.entities import history_tables

pytestmark = [pytest.mark.slow, pytest.mark.spark]


def _roots(shared: Path) -> list[Path]:
    return [shared / "corpus" / "real", shared / "corpus" / "local", shared / "scenarios"]


@pytest.fixture(scope="module")
def corpus_warehouse(spark: Any, shared: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Every cluster of the corpus and the scenarios ingested once, each named ``{top}:{cluster.id}``."""
    wh = tmp_path_factory.mktemp("corpus-wh")
    config = Config.load(warehouse={"path": str(wh)}, identity={"cluster": "{top}:{cluster.id}"})
    result = ingest(spark, [str(r) for r in _roots(shared)], config)
    # two repositories have errors: one kept empty files and an emptied meta.properties; the other holds two
    # histories in one directory (segments 0 and 47 overlap with other records at the same offsets and epochs)
    from deltalake import DeltaTable

    ledger = DeltaTable(str(wh / "files")).to_pyarrow_table().to_pylist()
    assert result.errors > 0 and {r["path"].split("/corpus/real/")[-1].split("/")[0] for r in ledger
                                  if r["error_count"]} == {"HotoMazur__library", "HastarTara__NE_streaming_project"}
    return wh


def test_histories_and_verify_over_every_cluster(spark: Any, shared: Path, corpus_warehouse: Path) -> None:
    roots, wh = _roots(shared), corpus_warehouse
    build = build_histories(spark, open_store(spark, str(wh)), snapshots=True)
    try:
        real = {b.cluster_id for b in build.bases if b.cluster_id == b.source_cluster}
        assert len(real) >= 40
        got = {k: v for k, v in spark_rows(build).items() if k[1] in real}
        expected = {}
        for root in roots:
            for top in sorted(p for p in root.iterdir() if p.is_dir()):
                # the ingest names a cluster {top}:{cluster.id}; a directory without meta.properties is
                # "unknown-cluster" there and its path in the local loader
                expected.update(local_rows(top, lambda cid, top=top: f"{top.name}:"
                                           f"{'unknown-cluster' if cid.startswith('/') else cid}"))
        assert_same_histories(got, expected)
        assert sum(len(v) for v in got.values()) > 7000

        report = verify_build(spark, build)
    finally:
        build.release()
    checked = [c for _, checks in report for c in checks if c.reachable]
    differing = [(cid, c.snapshot_id, c.differences[:3]) for cid, checks in report for c in checks if c.differences]
    assert len(checked) >= 160 and differing == []


ELECTION_KINDS = {"preferred", "failover", "controlled_shutdown", "offline", "unclean", "elr", "reassignment"}


def test_event_tables_over_every_cluster(spark: Any, corpus_warehouse: Path) -> None:
    """``reconstruct`` then ``analyze`` over all clusters: every event table builds, with consistent rows; the
    per-cluster figures go to ``out/analytics-corpus.json``."""
    import json

    from pyspark.sql import functions as F

    from kraftlog.spark.analyze import analyze, read_events
    from kraftlog.spark.history import reconstruct

    wh = corpus_warehouse
    config = Config.load(warehouse={"path": str(wh)})
    store = open_store(spark, str(wh))
    reconstruct(spark, config, store)
    result = analyze(spark, config, store)
    events = read_events(store)
    assert set(result.rows) == set(events)
    log_clusters = {r.cluster_id for r in landed(store)("records").filter("source = 'log'")
                    .select("cluster_id").distinct().collect()}
    assert len(log_clusters) >= 38
    health = {r.cluster_id: r for r in events["log_health"].groupBy("cluster_id").agg(
        F.sum("records").alias("records"), F.sum("noop_records").alias("noop")).collect()}
    assert set(health) == log_clusters
    kinds = {r.kind for r in events["leader_elections"].select("kind").distinct().collect()}
    assert kinds <= ELECTION_KINDS and {"failover", "controlled_shutdown"} <= kinds
    leaders = {r.cluster_id for r in events["controller_leadership"].select("cluster_id").distinct().collect()}
    assert leaders == log_clusters  # every log has at least one epoch
    assert under_min_isr_rows(wh) == evaluated(wh)  # evaluated point by point
    for name, df in events.items():
        assert df.filter(F.col("cluster_id").isNull()).count() == 0, name
    for table in (*history_tables().values(), *event_tables().values()):  # one row per key, in every table
        assert not repeated_keys(str(wh / table.name), table), table.name

    def per_cluster(name: str, column: str | None = None) -> dict[str, Any]:
        df = events[name]
        if column is None:
            return {r.cluster_id: r["count"] for r in df.groupBy("cluster_id").count().collect()}
        out: dict[str, Any] = {}
        for r in df.groupBy("cluster_id", column).count().collect():
            out.setdefault(r.cluster_id, {})[r[column]] = r["count"]
        return out

    figures = {"elections": per_cluster("leader_elections", "kind"), "isr": per_cluster("isr_changes", "kind"),
               "broker_events": per_cluster("broker_lifecycle", "event"),
               "fenced": per_cluster("broker_fenced_periods", "reason"),
               "epochs": per_cluster("controller_leadership"), "reassignments": per_cluster("reassignments", "status"),
               "topics": per_cluster("topic_lifecycle", "event"), "config_changes": per_cluster("config_changes"),
               "under_min_isr": per_cluster("under_min_isr"), "voter_changes": per_cluster("voter_changes", "change"),
               "features": per_cluster("feature_changes", "change"), "zk_migration": per_cluster("zk_migration"),
               "records": {c: r.records for c, r in health.items()}, "noop": {c: r.noop for c, r in health.items()},
               "rows": result.rows, "seconds": result.seconds}
    out = Path(__file__).resolve().parents[1] / "out"
    out.mkdir(exist_ok=True)
    (out / "analytics-corpus.json").write_text(json.dumps(figures, indent=1, sort_keys=True, default=str))
