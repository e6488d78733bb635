"""The ingest planner: which files land directly and which compete with other copies."""

from __future__ import annotations

from kraftlog.planning import Landed, PlannedFile, plan_files
from kraftlog.tables.rows import ALL


def seg(path: str, first: int, last: int, cluster: str = "c", **kw: object) -> PlannedFile:
    return PlannedFile(path, cluster, "segment", None, first, last, "sha-" + path, **kw)  # type: ignore[arg-type]


def snap(path: str, sid: str, cluster: str = "c") -> PlannedFile:
    return PlannedFile(path, cluster, "snapshot", sid, 0, 10, "sha-" + path)


def test_a_single_copy_lands_directly() -> None:
    plan = plan_files([seg("n1/0.log", 0, 99), seg("n1/100.log", 100, 150)], {})
    assert plan.contested == [] and plan.clean["n1/0.log"].ranges == (ALL,)


def test_replicas_of_one_log_compete() -> None:
    plan = plan_files([seg("n1/0.log", 0, 99), seg("n2/0.log", 0, 120)], {})
    assert plan.contested == ["n1/0.log", "n2/0.log"] and plan.clean == {}


def test_different_clusters_never_compete() -> None:
    plan = plan_files([seg("a/0.log", 0, 99, "a"), seg("b/0.log", 0, 99, "b")], {})
    assert plan.contested == []


def test_offsets_landed_by_an_earlier_run_make_a_new_file_compete() -> None:
    plan = plan_files([seg("n2/0.log", 50, 120)], {"c": Landed(((0, 99),))})
    assert plan.contested == ["n2/0.log"]
    plan = plan_files([seg("n1/100.log", 100, 120)], {"c": Landed(((0, 99),))})
    assert plan.contested == []


def test_a_grown_segment_lands_its_tail_only() -> None:
    grown = seg("n1/0.log", 0, 150, previous_size=4000, previous_last_offset=99, prefix_unchanged=True)
    plan = plan_files([grown], {"c": Landed(((0, 99),))})
    keep = plan.clean["n1/0.log"]
    assert keep.ranges == ((100, 150),) and keep.min_batch_position == 4000 and keep.keeps(100)
    assert not keep.keeps(99)


def test_a_rewritten_segment_competes_with_what_it_replaced() -> None:
    rewritten = seg("n1/0.log", 0, 150, previous_size=4000, previous_last_offset=99, prefix_unchanged=False)
    plan = plan_files([rewritten], {"c": Landed(((0, 99),))})
    assert plan.contested == ["n1/0.log"]


def test_an_unchanged_file_with_nothing_new_lands_nothing() -> None:
    same = seg("n1/0.log", 0, 99, previous_size=4000, previous_last_offset=99, prefix_unchanged=True)
    plan = plan_files([same], {"c": Landed(((0, 99),))})
    assert plan.clean["n1/0.log"].ranges == ()


def test_snapshots_compete_only_with_copies_of_the_same_snapshot() -> None:
    plan = plan_files([snap("n1/a", "100-1"), snap("n2/a", "100-1"), snap("n2/b", "200-1")], {})
    assert plan.contested == ["n1/a", "n2/a"] and "n2/b" in plan.clean
    plan = plan_files([snap("n3/b", "200-1")], {"c": Landed((), frozenset({"200-1"}))})
    assert plan.contested == ["n3/b"]
