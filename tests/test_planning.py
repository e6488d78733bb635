"""The ingest planner: which files land directly and which compete with other copies."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from kraftlog.planning import MAX_OFFSET, Landed, ListedFile, PlannedFile, pack, plan_by_name, plan_files
from kraftlog.tables.rows import EVERY_OFFSET, KeepSpec
from kraftlog.wire.files import FileInfo, classify


def seg(path: str, first: int, last: int, cluster: str = "c", **kw: object) -> PlannedFile:
    return PlannedFile(path, cluster, "segment", None, first, last, "sha-" + path, **kw)  # type: ignore[arg-type]


def snap(path: str, sid: str, cluster: str = "c") -> PlannedFile:
    return PlannedFile(path, cluster, "snapshot", sid, 0, 10, "sha-" + path)


def test_a_single_copy_lands_directly() -> None:
    plan = plan_files([seg("n1/0.log", 0, 99), seg("n1/100.log", 100, 150)], {})
    assert plan.contested == [] and plan.clean["n1/0.log"].ranges == (EVERY_OFFSET,)


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


def _contested_by_definition(files: list[PlannedFile], landed: Landed) -> list[str]:
    """The segments that compete, as the planner's rule says it: a span (a grown segment's, past what it landed)
    overlapping another file's span or landed part, or offsets landed before other than its own landed part."""
    def overlaps(a: tuple[int, int], b: tuple[int, int]) -> bool:
        return a[0] <= b[1] and b[0] <= a[1]
    spans, own = {}, {}
    for f in files:
        assert f.first_offset is not None and f.last_offset is not None
        start = f.first_offset
        if f.prefix_unchanged and f.previous_last_offset is not None:
            start = f.previous_last_offset + 1
            own[f.path] = (f.first_offset, f.previous_last_offset)
        spans[f.path] = (start, f.last_offset) if start <= f.last_offset else None
    out = []
    for f in files:
        span = spans[f.path]
        if span is None:
            continue
        others = [s for p, s in [*spans.items(), *own.items()] if p != f.path and s is not None]
        prior = [iv for iv in landed.intervals if iv != own.get(f.path)]
        if any(overlaps(span, s) for s in others + prior):
            out.append(f.path)
    return sorted(out)


_interval = st.tuples(st.integers(0, 60), st.integers(0, 12)).map(lambda t: (t[0], t[0] + t[1]))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(_interval, st.one_of(st.none(), st.integers(0, 14))), min_size=1, max_size=12),
       st.lists(_interval, max_size=6))
def test_the_files_that_compete_are_those_the_rule_names(files: list[tuple[tuple[int, int], int | None]],
                                                        landed: list[tuple[int, int]]) -> None:
    """Each file is checked against the others and the landed offsets by a sorted sweep (``_Overlaps``), not one by
    one: its verdicts are the rule's, grown segments (their landed part their own) and repeated intervals included."""
    planned = [seg(f"n{i % 3}/{i}.log", lo, hi, **({} if grew is None else {
        "previous_size": 100, "previous_last_offset": min(lo + grew, hi), "prefix_unchanged": True}))
        for i, ((lo, hi), grew) in enumerate(files)]
    done = Landed(tuple(landed) + tuple(iv for iv in landed[:2]) + tuple(
        (f.first_offset, f.previous_last_offset) for f in planned[:3] if f.previous_last_offset is not None))
    assert plan_files(planned, {"c": done}).contested == _contested_by_definition(planned, done)


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


# -- planning from the listing alone ------------------------------------------------------------------

def listed(path: str, cluster: str = "c", data_dir: str = "n1", known: bool = False) -> ListedFile:
    return ListedFile(path, cluster, data_dir, classify(path) or FileInfo("segment"), known)


SEG0, SEG100 = "n1/00000000000000000000.log", "n1/00000000000000000100.log"
SNAP = "n1/00000000000000000050-0000000001.checkpoint"


def test_a_new_single_node_cluster_lands_by_its_names() -> None:
    keep = plan_by_name([listed(SEG0), listed(SNAP)], {}, {})
    assert keep == {SEG0: KeepSpec((EVERY_OFFSET,)), SNAP: KeepSpec((EVERY_OFFSET,))}


def test_several_segments_need_their_headers() -> None:
    # real logs have a segment running past the next one's base offset: names cannot bound them
    assert plan_by_name([listed(SEG0), listed(SEG100)], {}, {}) == {}


def test_copies_from_several_data_directories_need_their_headers() -> None:
    assert plan_by_name([listed(SEG0), listed("n2/00000000000000000000.log", data_dir="n2")], {}, {}) == {}
    assert plan_by_name([listed(SEG0)], {}, {"c": frozenset({"n2"})}) == {}  # n2 was ingested before


def test_a_file_ingested_before_needs_its_headers() -> None:
    assert plan_by_name([listed(SEG0, known=True)], {}, {}) == {}


def test_a_new_segment_after_landed_offsets_keeps_its_span_strictly() -> None:
    keep = plan_by_name([listed(SEG100)], {"c": Landed(((0, 99),))}, {"c": frozenset({"n1"})})
    assert keep[SEG100] == KeepSpec(((100, MAX_OFFSET),), strict=True)
    assert plan_by_name([listed(SEG100)], {"c": Landed(((0, 120),))}, {"c": frozenset({"n1"})}) == {}


def test_a_repeated_or_landed_snapshot_needs_its_headers() -> None:
    deleted = SNAP + ".deleted"
    assert plan_by_name([listed(SNAP), listed(deleted)], {}, {}) == {}
    assert plan_by_name([listed(SNAP)], {"c": Landed((), frozenset({"00000000000000000050-0000000001"}))},
                        {"c": frozenset({"n1"})}) == {}


def test_clusters_are_planned_independently() -> None:
    keep = plan_by_name([listed(SEG0), listed(SEG100), listed("m/00000000000000000000.log", "other", "m")], {}, {})
    assert list(keep) == ["m/00000000000000000000.log"]


def test_clusters_are_packed_into_groups_of_about_equal_bytes() -> None:
    sizes = {"a": 90, "b": 60, "c": 50, "d": 40, "e": 30, "f": 10}
    groups = pack(sizes, 2)
    assert sorted(k for g in groups for k in g) == sorted(sizes)
    assert sorted(sum(sizes[k] for k in g) for g in groups) == [140, 140]
    five = {"a": 50, "b": 40, "c": 40, "d": 30, "e": 30}
    assert [sum(five[k] for k in g) for g in pack(five, 3)] == [70, 70, 50]  # heaviest first: the longest tasks
    assert pack({"a": 5}, 4) == [["a"]]  # no empty groups
    assert pack({}, 3) == []
