"""The canonical copy of each record among competing files of one cluster (``kraftlog.tables.copies``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from conftest import SCENARIO_A, need
from encoder import batch, metadata_value, record

from kraftlog.schema.registry import load_schemas
from kraftlog.tables.copies import choose, conflicts, join_runs, render_divergence
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


def test_choosing_a_part_at_a_time_is_choosing_all_at_once(monkeypatch: Any) -> None:
    """``choose_in_parts`` (the ingest's choice among copies too big to hold at once) reads each segment a range at a
    time and decides the copies of the offsets every segment has been read past: what lands, the divergence and the
    winning copies are those of ``choose`` over everything, however small the ranges. Every node's log of the
    bundled sample (segments rolled at different offsets), a copy damaged in each way real damage takes, a node
    behind the others, a segment grown since a run ingested part of it, and the snapshots."""
    import pyarrow as pa
    from conftest import SAMPLE, damaged_logs, joined_sample_log
    from crc32c import crc32c

    import kraftlog.wire.columns as columns
    from kraftlog.tables.copies import choose_in_parts
    from kraftlog.tables.rows import Ingested
    from kraftlog.tables.rows import file_layout as layout

    refs = []
    for node_dir in sorted(SAMPLE.glob("node-*")):
        node = int(node_dir.name.split("-")[1])
        for p in sorted((node_dir / "__cluster_metadata-0").glob("*.*")):
            if layout(str(p))[0].kind in ("segment", "snapshot"):
                refs.append(FileRef(str(p), p.read_bytes(), 0, FileIdentity("c1", node, str(node_dir)), len(refs)))
    data, name = joined_sample_log()
    damaged = dict(damaged_logs(data))
    extra = [("crc 3", 7), ("torn tail", 8), (next(k for k in damaged if k.startswith("epoch")), 9)]
    for label, node in extra:
        refs.append(FileRef(f"/d{node}/__cluster_metadata-0/{name}", damaged[label], 0,
                            FileIdentity("c1", node, f"/d{node}"), len(refs)))
    whole_log = columns.read_columns(data, name)
    at = int(whole_log.positions[len(whole_log.positions) // 2])
    end = at + 12 + int(whole_log.headers["batch_length"][len(whole_log.positions) // 2])
    other = bytearray(data)  # another log: a record differs at the same offset and epoch, its CRC right
    other[end - 2] ^= 0x01
    other[at + 17:at + 21] = crc32c(bytes(other[at + 21:end])).to_bytes(4, "big")
    refs.append(FileRef(f"/d6/__cluster_metadata-0/{name}", bytes(other), 0, FileIdentity("c1", 6, "/d6"), len(refs)))
    behind = data[:len(data) // 3 * 2]
    cut = columns.read_columns(behind, name)
    refs.append(FileRef(f"/d5/__cluster_metadata-0/{name}", behind[:int(cut.positions[-1])], 0,
                        FileIdentity("c1", 5, "/d5"), len(refs)))
    b = len(cut.positions) // 2
    grown = FileRef(f"/d4/__cluster_metadata-0/{name}", data, 0, FileIdentity("c1", 4, "/d4"), len(refs))
    refs.append(grown)
    decided = {grown.file_id: Ingested(int(cut.offset[cut.batch < b].max()), int(cut.positions[b]),
                                       int(cut.headers["partition_leader_epoch"][b - 1]))}

    def rows(t: pa.Table) -> list[tuple[Any, ...]]:
        return sorted(zip(*(t[c].to_pylist() for c in ("file_id", "snapshot_id", "log_offset", "snapshot_seq")),
                          strict=True), key=repr)

    whole = choose(refs, decided=decided)
    assert whole.divergence.num_rows and whole.conflicts and len(whole.keep) > 5
    for range_bytes in (1_000, 20_000):
        monkeypatch.setattr(columns, "RANGE_BYTES", range_bytes)
        parts = list(choose_in_parts(refs, decided=decided))
        assert len(parts) > (10 if range_bytes == 1_000 else 2)
        keep: dict[int, list[tuple[int, int]]] = {}
        for part in parts:
            for file_id, runs in part.keep.items():
                join_runs(keep.setdefault(file_id, []), runs)
        assert keep == whole.keep, range_bytes
        divergence = pa.concat_tables([p.divergence for p in parts])
        assert sorted(divergence.to_pylist(), key=repr) == sorted(whole.divergence.to_pylist(), key=repr)
        assert conflicts(divergence) == whole.conflicts
        assert rows(pa.concat_tables([p.winners for p in parts])) == rows(whole.winners)
