"""The big-cluster generator of the benchmarks writes a log Kafka's rules replay without a problem, and snapshots
that replay reproduces exactly."""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

from conftest import ROOT

from kraftlog.state.local import load_clusters, replay, verify

sys.path.insert(0, str(ROOT / "benchmarks"))
from bigcluster import generate


def test_a_generated_cluster_replays_cleanly_and_matches_its_snapshots(tmp_path: Path) -> None:
    written = generate(tmp_path / "node", brokers=12, racks=3, topics=40, partitions=240, records=20_000, seed=3,
                       segment_records=6_000)
    assert written["records"] >= 20_000 and written["partitions"] == 240
    (cluster,) = load_clusters([tmp_path])
    assert len(list((tmp_path / "node" / "__cluster_metadata-0").glob("*.log"))) >= 3
    types = Counter(e.decoded.type for e in cluster.log.values())
    for t in ("PARTITION_CHANGE_RECORD", "BROKER_REGISTRATION_CHANGE_RECORD", "REGISTER_BROKER_RECORD",
              "REMOVE_TOPIC_RECORD", "CONFIG_RECORD", "CLIENT_QUOTA_RECORD", "BEGIN_TRANSACTION_RECORD",
              "PRODUCER_IDS_RECORD", "LeaderChange", "NO_OP_RECORD"):
        assert types[t] > 0, t
    assert replay(cluster).problems == []
    checks = verify(cluster)
    assert len(checks) == 2 and all(c.reachable and c.differences == [] for c in checks)
