"""Every cluster of the corpus and the scenarios: Spark histories equal the sequential replay, and verify on
the tables finds no difference at any reachable snapshot."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from test_history import assert_same_histories, local_rows, spark_rows

from kraftlog.config import Config
from kraftlog.spark.history import build_histories, landed, verify_build
from kraftlog.spark.ingest import ingest
from kraftlog.spark.store import open_store

pytestmark = [pytest.mark.slow, pytest.mark.spark]


def test_histories_and_verify_over_every_cluster(spark: Any, shared: Path, tmp_path: Path) -> None:
    roots = [shared / "corpus" / "real", shared / "corpus" / "local", shared / "scenarios"]
    wh = tmp_path / "wh"
    config = Config.load(warehouse={"path": str(wh)}, identity={"cluster": "{top}:{cluster.id}"})
    result = ingest(spark, [str(r) for r in roots], config)
    assert result.errors == 0

    build = build_histories(spark, landed(open_store(spark, str(wh))), snapshots=True)
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
