"""The canonical copy of each record among competing files of one cluster (``kraftlog.tables.copies``)."""

from __future__ import annotations

from pathlib import Path

from conftest import SCENARIO_A, need
from encoder import batch, metadata_value, record

from kraftlog.schema.registry import load_schemas
from kraftlog.tables.copies import choose, render_divergence
from kraftlog.tables.rows import FileIdentity, FileRef

S = load_schemas()
SEG = "/d{node}/__cluster_metadata-0/00000000000000000000.log"
SNAP = "/d{node}/__cluster_metadata-0/00000000000000000004-0000000002.checkpoint"


def _topic(name: str) -> bytes:
    return metadata_value(S.metadata[2], {"name": name, "topic_id": "AAAAAAAAAAAAAAAAAAAAAQ"}, 0)


def _log(names: list[str], epoch: int, base: int = 0) -> bytes:
    return b"".join(batch(base + i, [record(0, _topic(n))], epoch=epoch) for i, n in enumerate(names))


def _file(node: int | None, content: bytes, file_id: int, template: str = SEG) -> FileRef:
    return FileRef(template.format(node=node), content, 0, FileIdentity("c1", node, f"/d{node}"), file_id)


def test_the_higher_epoch_wins_and_the_lower_epoch_suffix_is_divergence() -> None:
    common = _log(["a", "b", "c"], 1)
    old = _file(1, common + _log(["d", "e"], 1, base=3), 0)
    new = _file(2, common + _log(["x", "y", "z"], 2, base=3), 1)
    c = choose([old, new])
    # offsets 0..2 are replicas: node 1 (the lowest) wins them; 3..5 come from the epoch-2 leader
    assert c.keep == {0: [(0, 2)], 1: [(3, 5)]}
    div = c.divergence.to_pylist()
    assert [(r["log_offset"], r["reason"], r["loser_node_id"], r["winner_node_id"]) for r in div] == \
        [(3, "lower_epoch", 1, 2), (4, "lower_epoch", 1, 2)]
    assert div[0]["loser_file"] == old.path and div[0]["winner_file"] == new.path
    assert sorted(c.winners.column("log_offset").to_pylist()) == [0, 1, 2, 3, 4, 5]


def test_a_corrupt_copy_loses_and_ties_go_to_the_lowest_known_node() -> None:
    seg = _log(["a", "b"], 1)
    bad = bytearray(seg)
    bad[seg.index(b"b")] ^= 0x02  # CRC mismatch in the second batch
    c = choose([_file(None, seg, 0), _file(1, bytes(bad), 1), _file(3, seg, 2)])
    # offset 0: equal copies, node 1 wins (unknown node last); offset 1: node 1's copy is corrupt, node 3 wins
    assert c.keep == {1: [(0, 0)], 2: [(1, 1)]}
    div = c.divergence.to_pylist()
    assert [(r["log_offset"], r["reason"], r["loser_node_id"]) for r in div] == [(1, "corrupt_copy", 1)]
    assert c.conflicts == {}  # a corrupt copy is no sign of another cluster


def test_one_whole_snapshot_copy_wins_and_differing_records_are_reported() -> None:
    one = _file(1, batch(0, [record(i, _topic(n)) for i, n in enumerate(["a", "b", "c"])]), 0, SNAP)
    two = _file(2, batch(0, [record(i, _topic(n)) for i, n in enumerate(["a", "B", "c", "d"])]), 1, SNAP)
    c = choose([two, one])
    assert c.keep == {0: [(0, 2)]}  # node 1's copy, whole
    div = sorted(c.divergence.to_pylist(), key=lambda r: r["snapshot_seq"])
    assert [(r["snapshot_seq"], r["reason"], r["winner_node_id"]) for r in div] == \
        [(1, "snapshot_copy_differs", 1), (3, "snapshot_copy_differs", None)]
    assert {r["log_offset"] for r in div} == {3} and {r["source"] for r in div} == {"snapshot"}
    rendered = render_divergence(c.divergence, "run-1").to_pylist()
    assert [r["loser_record_type"] for r in rendered] == ["TOPIC_RECORD"] * 2
    assert '"name":"B"' in rendered[0]["loser_data_json"] and rendered[0]["run_id"] == "run-1"


def test_files_without_competition_keep_everything_and_report_nothing() -> None:
    c = choose([_file(1, _log(["a", "b"], 1), 0), _file(1, _log(["c"], 1, base=2), 1)])
    assert c.keep == {0: [(0, 1)], 1: [(2, 2)]} and c.divergence.num_rows == 0
    assert choose([]).keep == {}


def test_the_local_commands_choose_a_snapshot_copy_by_the_same_order(tmp_path: Path) -> None:
    # the local path counted an unknown node as 0, so a copy from a node without a node id won a tie
    # there while losing it in the tables; one order now serves both (unknown nodes last)
    from kraftlog.state.local import load_clusters
    from kraftlog.tables.copies import SNAPSHOT_COPY_ORDER, copy_rank

    node = need(SCENARIO_A / "node-2" / "__cluster_metadata-0")
    one, other = (node / f"00000000000000000{o}-0000000001.checkpoint" for o in (159, 237))
    for d, meta, snap in (("unknown", "version=0\ncluster.id=c1\n", other),
                          ("one", "version=1\ncluster.id=c1\nnode.id=1\n", one)):
        md = tmp_path / d / "__cluster_metadata-0"
        md.mkdir(parents=True)
        (tmp_path / d / "meta.properties").write_text(meta)
        (md / one.name).write_bytes(snap.read_bytes())  # the same snapshot id, other contents
    (cl,) = load_clusters([tmp_path])
    chosen = cl.snapshots[one.name.split(".")[0]]
    assert chosen.node_id == 1 and "/one/" in chosen.path
    paths = [tmp_path / d / "__cluster_metadata-0" / one.name for d in ("one", "unknown")]
    refs = [FileRef(str(p), p.read_bytes(), 0, FileIdentity("c1", n, str(p.parent.parent)), i)
            for i, (p, n) in enumerate(zip(paths, (1, None), strict=True))]
    assert set(choose(refs).keep) == {0}  # the tables take node 1's copy too
    assert copy_rank({"trusted": True, "node_id": 1, "file": "b"}, SNAPSHOT_COPY_ORDER) < \
        copy_rank({"trusted": True, "node_id": None, "file": "a"}, SNAPSHOT_COPY_ORDER)
