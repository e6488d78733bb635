"""Incremental builds: a log that grows goes on from the last build (histories) and the last analysis (events),
anything else replays or analyses the cluster anew, and the tables always equal a build from scratch."""

from __future__ import annotations

import contextlib
import shutil
import struct
import time
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import services
from conftest import SAMPLE, examples, split_replays
from deltalake import DeltaTable
from event_oracle import evaluated, under_min_isr_rows
from history_gen import GenCluster, clusters, uid, write_cluster, write_snapshot
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from services import arrow_rows, copy_upto, repeated_keys, spark_jobs, table_rows

from kraftlog.analytics.definitions import WINDOW, event_tables, increment_of
from kraftlog.analytics.events import Inputs, log_gaps
from kraftlog.config import Config
from kraftlog.errors import NotBuilt
from kraftlog.spark import analyze as analyze_module
from kraftlog.spark import history as history_module
from kraftlog.spark.analyze import AnalyzeResult, analyze, last_analyses, partition_inputs, plan_events
from kraftlog.spark.bases import ClusterBase, cluster_bases
from kraftlog.spark.history import ReconstructResult, landed, reconstruct
from kraftlog.spark.increments import last_builds, plan_build
from kraftlog.spark.ingest import ingest
from kraftlog.spark.landed import Landed, landing_runs
from kraftlog.spark.predicates import SQL_TERMS, Scope
from kraftlog.spark.session import INTERPRETED, SHUFFLE_PARTS, default_parallelism, described
from kraftlog.spark.store import DeltaRsStore, TableStore, store_for
from kraftlog.state.entities import history_tables
from kraftlog.state.replay import Replayer, TopicsRead
from kraftlog.tables.definitions import TableDef

pytestmark = pytest.mark.spark

CLUSTER = "T4vFxmI9RFCnFwCmltnwag"  # the sample's
BUILT = [*(t.name for t in history_tables().values()), "replay_ranges", "replay_state", *event_tables(),
         "analyze_state"]


def land_and_build(spark: Any, inputs: Path, wh: Path, full: bool = False) -> ReconstructResult:
    return land_build_analyze(spark, inputs, wh, full)[0]


def land_and_replay(spark: Any, inputs: Path, config: Config) -> ReconstructResult:
    """Ingest and reconstruct only (no analysis): what ``verify`` reads."""
    ingest(spark, [str(inputs)], config)
    return reconstruct(spark, config)


def land_build_analyze(spark: Any, inputs: Path, wh: Path, full: bool = False, check_bases: bool = False
                       ) -> tuple[ReconstructResult, AnalyzeResult]:
    """``services.land_build_analyze``; ``check_bases``: the bases planned from what landed since checked first."""
    return services.land_build_analyze(spark, inputs, wh, full, (lambda config: assert_bases_carried_as_read_whole(
        spark, config)) if check_bases else None)


def assert_bases_carried_as_read_whole(spark: Any, config: Config) -> int:
    """The bases a build plans from what landed since the last build equal those read from every landed row;
    returns how many clusters were carried on (none before the first build)."""
    if not DeltaTable.is_deltatable(str(Path(config.warehouse) / "replay_state")):
        return 0
    with described(spark, "test: the bases carried"):
        return _bases_carried_as_read_whole(spark, config)


def _bases_carried_as_read_whole(spark: Any, config: Config) -> int:
    store = store_for(spark, config)
    source = landed(store)
    plan = plan_build(spark, store, source, None, full=False)

    def facts(b: ClusterBase) -> tuple[Any, ...]:
        snaps = sorted(b.snapshots, key=lambda s: (s.offset, s.snapshot_id))
        return (b.base, b.last, b.last_ms, b.start, snaps, [b.log_epochs.get(s.offset) for s in snaps],
                [b.snapshot_digests.get(s.snapshot_id) for s in snaps])

    assert {b.cluster_id: facts(b) for b in plan.bases} == {b.cluster_id: facts(b) for b in cluster_bases(source)}
    return len(plan.bases) - len(plan.read_whole)


def assert_same_as_a_full_build(spark: Any, inputs: Path, wh: Path, scratch: Path, fresh: Path | None = None
                                ) -> None:
    """Every built table of ``wh`` equals that of a build from scratch (``fresh``, else one made of ``inputs``)."""
    if fresh is None:
        fresh = scratch / "fresh-wh"
        shutil.rmtree(fresh, ignore_errors=True)
        land_and_build(spark, inputs, fresh, full=True)
    for name in BUILT:
        assert table_rows(str(wh / name)) == table_rows(str(fresh / name)), name
    for table in (*history_tables().values(), *event_tables().values()):
        assert not repeated_keys(str(fresh / table.name), table), table.name
    assert under_min_isr_rows(fresh) == evaluated(fresh)  # evaluated point by point


class FromScratch:
    """Each step of a test (its warehouse ``wh`` built from ``inputs``), checked against builds from scratch made
    together at the end: each step's inputs as clusters of their own (``<cluster>-s<step>``), one full build of
    them all (as a fleet's), and each step's tables against the rows of its clusters (a cluster's rows do not
    depend on the others'). One build instead of one per step."""

    def __init__(self, scratch: Path) -> None:
        self.inputs, self.wh = scratch / "fresh-in", scratch / "fresh-wh"
        self.steps: list[tuple[dict[str, str], dict[str, list[str]]]] = []

    def step(self, inputs: Path, wh: Path) -> None:
        k = len(self.steps)
        named: dict[str, str] = {}  # the step's cluster ids: as copied, as they were
        for props in sorted(inputs.rglob("meta.properties")):
            text = props.read_text()
            cluster = next(line.split("=", 1)[1] for line in text.splitlines() if line.startswith("cluster.id="))
            named[f"{cluster}-s{k}"] = cluster
            dest = self.inputs / f"s{k}" / props.parent.relative_to(inputs)
            shutil.copytree(props.parent, dest)
            (dest / "meta.properties").write_text(text.replace(f"cluster.id={cluster}\n",
                                                               f"cluster.id={cluster}-s{k}\n"))
        self.steps.append((named, {name: table_rows(str(wh / name)) for name in BUILT}))

    def check(self, spark: Any) -> None:
        import pyarrow as pa

        shutil.rmtree(self.wh, ignore_errors=True)
        land_and_build(spark, self.inputs, self.wh, full=True)
        tables = {name: DeltaTable(str(self.wh / name)).to_pyarrow_table() for name in BUILT}
        for k, (named, rows) in enumerate(self.steps):
            for name, t in tables.items():
                mine = t.filter(pa.array([c in named for c in t["cluster_id"].to_pylist()], pa.bool_()))
                at = mine.schema.get_field_index("cluster_id")
                mine = mine.set_column(at, mine.schema.field(at), pa.array(
                    [named[c] for c in mine["cluster_id"].to_pylist()], mine.schema.field(at).type))
                assert arrow_rows(mine) == rows[name], (k, name)
        assert under_min_isr_rows(self.wh) == evaluated(self.wh)  # evaluated point by point


def built_upto(spark: Any, tmp_path: Path, log: list[Any], first: int
               ) -> tuple[Path, Path, Path, Config, FromScratch]:
    """Cluster ``c`` of ``log``, a batch per record (cut anywhere), landed, built and analysed up to offset ``first``:
    its source, inputs and warehouse, the ``Config`` of that warehouse, and the ``FromScratch`` its next steps are
    checked by."""
    source = tmp_path / "src"
    write_cluster(source, GenCluster("c", log), sizes=[1])
    inputs, wh = tmp_path / "in", tmp_path / "wh"
    config = Config.load(warehouse={"path": str(wh)}, identity={"cluster": "{cluster.id}"})
    land_build_analyze(spark, copy_upto(source, inputs, first), wh)
    return source, inputs, wh, config, FromScratch(tmp_path)


@pytest.fixture(scope="module")
def sample_built(sample_events: Any) -> Path:
    """The whole sample built from scratch (the end every incremental test of the sample must reach): the
    session's sample warehouse, ingested, reconstructed and analysed once."""
    return Path(sample_events[0])


@pytest.mark.parametrize("split", [False, True], ids=["whole", "split"])
def test_a_growing_log_goes_on_from_the_last_build(spark: Any, tmp_path: Path, sample_built: Path, split: bool
                                                   ) -> None:
    """Cut where the sample's longest window is open (under-replicated, under min ISR or a reassignment), then
    whole: the histories and the events go on, and the window is rebuilt from where it began. ``split``: every
    replay split by topic into parts (as a big cluster's is), which gives every table of the build from scratch
    (not split) all the same."""
    with split_replays() if split else contextlib.nullcontext():
        _grows(spark, tmp_path, sample_built)


def _grows(spark: Any, tmp_path: Path, sample_built: Path) -> None:
    spans = [(r["to_offset"] - r["from_offset"], r["from_offset"], name)
             for name, t in event_tables().items() if increment_of(t) == WINDOW
             for r in DeltaTable(str(sample_built / name)).to_pyarrow_table().to_pylist() if r["to_offset"] is not None]
    longest, began, window = max(spans)
    assert longest > 2, spans
    inputs, wh = tmp_path / "in", tmp_path / "wh"
    first = land_and_build(spark, copy_upto(SAMPLE, inputs, began + 1), wh)
    assert (first.clusters, first.resumed) == (1, 0)
    opened = DeltaTable(str(wh / window)).to_pyarrow_table().to_pylist()
    assert any(r["from_offset"] == began and r["to_offset"] is None for r in opened), window
    before = max(spark_jobs(spark))
    grown, events = land_build_analyze(spark, copy_upto(SAMPLE, inputs, 1 << 40), wh, check_bases=True)
    assert (grown.clusters, grown.resumed, grown.unchanged, grown.read_whole) == (1, 1, 0, 0), grown.line()
    # every Spark job of the hour, those its runs start on threads of their own included, names its run in the UI
    named = ("kraftlog ingest ", "kraftlog reconstruct ", "kraftlog analyze ", f"kraftlog {events.build_id}: ",
             "test: ")
    unnamed = [job.call_site for n, job in spark_jobs(spark).items()
               if n > before and not (job.description or "").startswith(named)]
    assert not unnamed, unnamed
    assert (len(events.plan.going_on), len(events.plan.rebuilt)) == (1, 0), events.line()
    assert_same_as_a_full_build(spark, inputs, wh, tmp_path, sample_built)
    # nothing new: nothing replayed, nothing committed
    versions = {name: DeltaTable(str(wh / name)).version() for name in BUILT}
    again = land_and_build(spark, inputs, wh)
    assert (again.clusters, again.unchanged, again.read_whole) == (0, 1, 0) and sum(again.rows.values()) == 0
    assert versions == {name: DeltaTable(str(wh / name)).version() for name in BUILT}


def test_an_older_segment_arriving_late_replays_the_cluster_from_its_base(spark: Any, tmp_path: Path,
                                                                           sample_built: Path) -> None:
    inputs, wh = tmp_path / "in", tmp_path / "wh"
    first = land_and_build(spark, copy_upto(SAMPLE, inputs, 1 << 40, skip=("00000000000000000000.log",)), wh)
    ranges = DeltaTable(str(wh / "replay_ranges")).to_pyarrow_table().to_pylist()
    assert first.clusters == 1 and ranges[0]["base_snapshot_id"] is not None  # the log starts after offset 0
    late, events = land_build_analyze(spark, copy_upto(SAMPLE, inputs, 1 << 40), wh, check_bases=True)
    assert (late.clusters, late.resumed, late.read_whole) == (1, 0, 1)  # another base: replayed from it, read whole
    assert (len(events.plan.going_on), len(events.plan.rebuilt)) == (0, 1)  # another lineage: analysed anew
    assert DeltaTable(str(wh / "replay_ranges")).to_pyarrow_table().to_pylist()[0]["base_snapshot_id"] is None
    assert_same_as_a_full_build(spark, inputs, wh, tmp_path, sample_built)


@settings(max_examples=examples(2), deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture])
@given(drawn=clusters(n_min=14, n_max=20), cuts=st.lists(st.floats(0.0, 1.0), min_size=1, max_size=2, unique=True))
def test_any_split_of_random_logs_equals_a_build_from_scratch(spark: Any, tmp_path_factory: Any,
                                                              drawn: list[GenCluster], cuts: list[float]) -> None:
    """Dozens of random clusters per example, so one Spark build checks many sequences: each drawn log three
    times, each copy cut at its own places (fractions of the log, spread by the cluster's index). More clusters
    go on at once than a fleet of dozens has, and none is analysed anew for their number."""
    source = tmp_path_factory.mktemp("gen")
    generated = [replace(c, cluster_id=f"{c.cluster_id}-{k}") for c in drawn for k in range(3)]
    for c in generated:
        write_cluster(source, c)
    work = tmp_path_factory.mktemp("inc")
    inputs, wh = work / "in", work / "wh"
    for cut in [*sorted(cuts), None]:
        ends = None if cut is None else {
            c.cluster_id: (c.snapshot_offset + 1 if c.snapshot is not None else 0)
            + int(len(c.log) * ((cut + i * 0.618) % 1.0)) for i, c in enumerate(generated)}
        histories, events = land_build_analyze(spark, copy_upto(source, inputs, 1 << 40, ends=ends), wh,
                                               check_bases=True)
        assert len(events.plan.going_on) >= histories.resumed, events.line()  # none analysed anew for their number
        assert histories.read_whole <= histories.clusters - histories.resumed, histories.line()
    assert_same_as_a_full_build(spark, inputs, wh, work)


def test_verify_checks_each_snapshot_once_per_lineage(spark: Any, tmp_path: Path, monkeypatch: Any) -> None:
    """An hourly verify replays only the snapshots that landed since the last one (the checks kept stand while the
    histories only go on), and says what a check of every snapshot says; a new lineage is checked anew."""
    from kraftlog.spark import verify

    replayed: list[list[str]] = []
    real = verify.replay

    def spy(*args: Any, **kwargs: Any) -> Any:
        replayed.append(sorted(b.cluster_id for b in args[3]))
        return real(*args, **kwargs)

    monkeypatch.setattr(verify, "replay", spy)
    inputs, wh = tmp_path / "in", tmp_path / "wh"
    config = Config.load(warehouse={"path": str(wh)}, identity={"cluster": "{cluster.id}"})

    def checked(report: Any) -> list[str]:
        return [c.snapshot_id for _, checks in report for c in checks if c.reachable]

    land_and_replay(spark, copy_upto(SAMPLE, inputs, 1200), config)
    before = checked(verify.verify_tables(spark, config))
    assert len(replayed[-1]) == len(before) > 10
    land_and_replay(spark, copy_upto(SAMPLE, inputs, 1 << 40), config)
    hour = verify.verify_tables(spark, config)
    new = sorted(set(checked(hour)) - set(before))
    assert new and replayed[-1] == sorted(f"{CLUSTER}@{s}" for s in new)  # only the snapshots new since
    assert hour == verify.verify_tables(spark, config, full=True)  # what checking every snapshot says
    assert len(replayed[-1]) == len(checked(hour))
    verify.verify_tables(spark, config)
    assert replayed[-1] == []  # nothing new
    reconstruct(spark, config, full=True)  # a new lineage: no check kept stands
    assert verify.verify_tables(spark, config) == hour and len(replayed[-1]) == len(checked(hour))


def test_going_on_from_an_open_transaction_reports_its_problems_once(spark: Any, tmp_path: Path) -> None:
    topic = {"topic_id": "AAAAAAAAAAAAAAAAAAAAZQ", "name": "t"}
    log = [("meta", "BEGIN_TRANSACTION_RECORD", 0, {"name": "a"}),
           ("meta", "BEGIN_TRANSACTION_RECORD", 0, {"name": "b"}),
           ("meta", "TOPIC_RECORD", 0, topic),
           ("meta", "END_TRANSACTION_RECORD", 0, {}),
           ("meta", "NO_OP_RECORD", 0, {})]
    source = tmp_path / "src"
    write_cluster(source, GenCluster("c", log))
    inputs, wh = tmp_path / "in", tmp_path / "wh"
    land_and_build(spark, copy_upto(source, inputs, 3), wh)  # ends inside the transaction begun at 0
    grown = land_and_build(spark, copy_upto(source, inputs, 1 << 40), wh)
    assert grown.resumed == 1
    (ranges,) = DeltaTable(str(wh / "replay_ranges")).to_pyarrow_table().to_pylist()
    assert ranges["problems"] == ["offset 1: BeginTransaction inside the transaction begun at 0"]
    assert_same_as_a_full_build(spark, inputs, wh, tmp_path)


def test_the_state_of_histories_behind_the_landed_log_warns_naming_both_ends(spark: Any, tmp_path: Path) -> None:
    """``state --warehouse`` (and diff, shell) reads the histories: where the log landed since reaches past them (the
    hour's reconstruct did not run, or failed) it says so on stderr, naming both offsets, and answers from what is
    built; after a reconstruct, nothing to say."""
    from click.testing import CliRunner

    from kraftlog.cli import main

    topic = {"topic_id": "AAAAAAAAAAAAAAAAAAAAZQ", "name": "t"}
    log = [("meta", "TOPIC_RECORD", 0, topic), *[("meta", "NO_OP_RECORD", 0, {})] * 5]
    source = tmp_path / "src"
    write_cluster(source, GenCluster("c", log))
    inputs, wh = tmp_path / "in", tmp_path / "wh"
    config = Config.load(warehouse={"path": str(wh)}, identity={"cluster": "{cluster.id}"})
    built = land_and_replay(spark, copy_upto(source, inputs, 3), config)
    (ranges,) = DeltaTable(str(wh / "replay_ranges")).to_pyarrow_table().to_pylist()
    ingest(spark, [str(copy_upto(source, inputs, 1 << 40))], config)
    behind = CliRunner().invoke(main, ["state", "--warehouse", str(wh), "--kind", "topics"])
    assert behind.exit_code == 0 and '"t"' in behind.stdout, (built.line(), behind.output)
    assert (f"warning: the histories of c end at offset {ranges['last_offset']}, the log landed since reaches "
            f"offset {len(log) - 1}: `kraftlog reconstruct` builds the rest") in behind.stderr
    reconstruct(spark, config)
    caught_up = CliRunner().invoke(main, ["state", "--warehouse", str(wh), "--kind", "topics"])
    assert caught_up.exit_code == 0 and caught_up.stderr == "", caught_up.output
    assert f'"offset": {ranges["last_offset"]},' in behind.stdout and f'"offset": {len(log) - 1},' in caught_up.stdout


def test_going_on_from_inside_a_transaction_applies_its_control_records_once(spark: Any, tmp_path: Path) -> None:
    """Control records (voters, kraft.version) apply at their own offset inside a metadata transaction: going on
    from its Begin, the versions they began since are replayed again, not kept twice (found by Hypothesis)."""
    def voters(*ids: int) -> tuple[str, str, int, dict[str, Any]]:
        return ("control", "KRaftVoters", 0, {"version": 0, "voters": [
            {"voter_id": i, "voter_directory_id": f"AAAAAAAAAAAAAAAAAAAAy{'QgA'[i - 1]}",
             "endpoints": [{"name": "CONTROLLER", "host": "c", "port": 9093 + i}],
             "kraft_version_feature": {"min_supported_version": 0, "max_supported_version": 1}} for i in ids]})

    log = [("meta", "TOPIC_RECORD", 0, {"topic_id": "AAAAAAAAAAAAAAAAAAAAZQ", "name": "a"}),  # 0
           ("meta", "BEGIN_TRANSACTION_RECORD", 0, {"name": "x"}),  # 1
           ("meta", "TOPIC_RECORD", 0, {"topic_id": "AAAAAAAAAAAAAAAAAAAAZg", "name": "b"}),  # 2
           voters(1), voters(1, 2),  # 3, 4
           ("control", "KRaftVersion", 0, {"version": 0, "kraft_version": 1}),  # 5; the cut: 6
           ("meta", "END_TRANSACTION_RECORD", 0, {}),  # 6
           voters(2), ("meta", "NO_OP_RECORD", 0, {})]  # 7, 8
    source = tmp_path / "src"
    write_cluster(source, GenCluster("c", log))
    inputs, wh = tmp_path / "in", tmp_path / "wh"
    land_and_build(spark, copy_upto(source, inputs, 6), wh)
    (state,) = DeltaTable(str(wh / "replay_state")).to_pyarrow_table().to_pylist()
    assert (state["last_offset"], state["resume_offset"]) == (5, 1)  # ended inside the transaction begun at 1
    grown = land_and_build(spark, copy_upto(source, inputs, 1 << 40), wh)
    assert grown.resumed == 1
    assert_same_as_a_full_build(spark, inputs, wh, tmp_path)


def test_going_on_replays_and_analyses_only_the_partitions_named_since(spark: Any, tmp_path: Path) -> None:
    """Three topics of two partitions; each increment names a partition (a PartitionChange), whole topics (a
    RemoveTopic, a TopicRecord again for a live id), none (a topic config: not a partition rule) or every one
    (ClearElr without a name). Only the named partitions and topics are restored and their rows rewritten
    (reconstruct); the partition events read the partitions with a version begun or ended since and the topic whose
    min.insync.replicas changed, not t0-0 for its open window alone (analyze). Every step ends equal to a build
    from scratch."""
    t0, t1, t2 = uid(601), uid(602), uid(603)
    log = [("meta", "TOPIC_RECORD", 0, {"topic_id": t, "name": f"t{i}"}) for i, t in enumerate((t0, t1, t2))]
    log += [("meta", "PARTITION_RECORD", 0, {"topic_id": t, "partition_id": p, "replicas": [1, 2], "isr": [1, 2],
                                             "removing_replicas": [], "adding_replicas": [], "leader": 1,
                                             "leader_epoch": 0, "partition_epoch": 0})
            for t in (t0, t1, t2) for p in (0, 1)]  # 3-8
    log += [("meta", "PARTITION_CHANGE_RECORD", 0, {"topic_id": t0, "partition_id": 0, "isr": [1], "leader": -2}),
            ("meta", "CONFIG_RECORD", 0, {"resource_type": 2, "resource_name": "t1", "name": "retention.ms",
                                          "value": "1"}),  # 9 (t0-0 under-replicated from here), 10
            ("meta", "CONFIG_RECORD", 0, {"resource_type": 2, "resource_name": "t1", "name": "retention.ms",
                                          "value": "2"}),  # 11
            ("meta", "REMOVE_TOPIC_RECORD", 0, {"topic_id": t2}),
            ("meta", "TOPIC_RECORD", 0, {"topic_id": t1, "name": "t1"}),  # 12, 13
            ("meta", "CLEAR_ELR_RECORD", 0, {"topic_name": ""}),
            ("meta", "CONFIG_RECORD", 0, {"resource_type": 2, "resource_name": "t0", "name": "min.insync.replicas",
                                          "value": "2"})]  # 14, 15
    source, inputs, wh, config, scratch = built_upto(spark, tmp_path, log, 9)
    partitions = wh / history_tables()["partitions"].name
    # the end; the partitions and topics replayed and the partition rows written (closed and open versions of
    # those); the partitions the events read (t0-0's window is open from 9 on: read only where it changed)
    # (and the topic rows written: none (a PartitionChange reads no topic); none; t2's closed one and t1's; every
    # live topic's)
    # and the types of the records replayed: only their typed tables are read
    change, config_record = "PARTITION_CHANGE_RECORD", "CONFIG_RECORD"
    t0_0 = TopicsRead(partitions=frozenset({(t0, 0)}))
    for end, named, written, read, types in [
            (11, t0_0, 2, t0_0, {change, config_record}), (12, TopicsRead(), 0, TopicsRead(), {config_record}),
            (14, TopicsRead(frozenset({t1, t2})), 4,
             TopicsRead(partitions=frozenset({(t1, 0), (t1, 1), (t2, 0), (t2, 1)})),
             {"REMOVE_TOPIC_RECORD", "TOPIC_RECORD"}),
            (1 << 40, None, 2, TopicsRead(frozenset({t0})), {"CLEAR_ELR_RECORD", config_record})]:
        ingest(spark, [str(copy_upto(source, inputs, end))], config)
        store = store_for(spark, config)
        plan = plan_build(spark, store, landed(store), None, False)
        assert (plan.restored, plan.record_types) == ({"c": named}, types), end
        assert plan.kinds == Replayer.kinds_read(types) == {  # the kinds restored and rewritten
            11: {"partitions", "configs"}, 12: {"configs"}}.get(end, {"topics", "partitions", "configs"}), end
        before = DeltaTable(str(partitions)).version()
        built = reconstruct(spark, config)
        assert (built.resumed, built.rows["partitions_history"]) == (1, written), end
        assert built.rows["topics_history"] == {11: 0, 12: 0, 14: 2}.get(end, 2), end
        assert DeltaTable(str(partitions)).version() == before if not written else before + 2, end
        assert plan_events(store, None, False).topics == {"c": read}, end
        lifecycle = DeltaTable(str(wh / "topic_lifecycle")).version()
        analyze(spark, config)
        if end != 1 << 40:  # no topic changed nor partition born before 14: topic_lifecycle is not rewritten
            assert (DeltaTable(str(wh / "topic_lifecycle")).version() != lifecycle) == (end == 14), end
        scratch.step(inputs, wh)
    scratch.check(spark)


def test_a_changed_min_insync_replicas_reads_only_the_partitions_it_can_apply_to(spark: Any, tmp_path: Path) -> None:
    """Three topics of one partition each, all in sync, led by brokers 1, 2 and 3. Each hour changes one config: a
    topic's min.insync.replicas (that topic is read whole), broker 3's (the partition it leads; under it from
    there on, its window stays open), a topic's retention.ms (no partition config: no partition, the open window
    carried forward from its row), the cluster default (every topic). No partition is born, so ``topic_lifecycle``
    is never rewritten. Every step ends equal to a build from scratch and to the windows evaluated point by point."""
    ta, tb, tc = uid(701), uid(702), uid(703)

    def mir(rtype: int, name: str, value: str, key: str = "min.insync.replicas") -> tuple[Any, ...]:
        return "meta", "CONFIG_RECORD", 0, {"resource_type": rtype, "resource_name": name, "name": key, "value": value}

    log = [("meta", "TOPIC_RECORD", 0, {"topic_id": t, "name": n}) for t, n in ((ta, "a"), (tb, "b"), (tc, "c"))]
    log += [("meta", "PARTITION_RECORD", 0, {"topic_id": t, "partition_id": 0, "replicas": [1, 2, 3],
                                             "isr": [1, 2, 3], "removing_replicas": [], "adding_replicas": [],
                                             "leader": leader, "leader_epoch": 0, "partition_epoch": 0})
            for leader, t in enumerate((ta, tb, tc), start=1)]  # 3-5
    log += [mir(2, "b", "2"), mir(4, "3", "4"), mir(2, "a", "1", "retention.ms"), mir(4, "", "1")]  # 6-9
    source, inputs, wh, config, scratch = built_upto(spark, tmp_path, log, 6)
    c0 = TopicsRead(partitions=frozenset({(tc, 0)}))
    for end, read in [(7, TopicsRead(frozenset({tb}))), (8, c0), (9, TopicsRead()), (1 << 40, None)]:
        ingest(spark, [str(copy_upto(source, inputs, end))], config)
        assert reconstruct(spark, config).resumed == 1, end
        store = store_for(spark, config)
        plan = plan_events(store, None, False)
        assert (plan.topics, plan.births) == ({"c": read}, set()), end
        lifecycle = DeltaTable(str(wh / "topic_lifecycle")).version()
        analyze(spark, config)
        # a topic read whole for its config is no partition born: no topic changed, topic_lifecycle is left as it is
        assert DeltaTable(str(wh / "topic_lifecycle")).version() == lifecycle, end
        scratch.step(inputs, wh)
    assert [(w[1], w[4], w[6], w[8], w[9]) for w in under_min_isr_rows(wh)] == [(tc, 7, None, 4, "broker")]
    scratch.check(spark)


def test_a_window_open_long_ago_goes_on_from_its_row_reading_only_what_the_hour_touched(spark: Any,
                                                                                        tmp_path: Path) -> None:
    """A topic of two partitions; one falls out of sync early (under-replicated and under min.insync.replicas 2 from
    there on: its windows stay open, as while a broker is down for weeks), the other changes leader ten times. The
    hour after reads only the versions of the partition that changed, from the resume offset: the open windows go on
    from their rows (``Inputs.opened``), not from the versions since they opened. The hour after that (a leader
    change, and a partition added to the topic: the topic read whole) reads the open windows' partition from the
    resume offset too. ``topic_lifecycle`` still counts the two partitions the topic had before the third. Each step
    ends equal to a build from scratch, the windows still open and of the same start, least ISR and config."""
    t0 = uid(801)

    def partition(p: int) -> tuple[Any, ...]:
        return "meta", "PARTITION_RECORD", 0, {"topic_id": t0, "partition_id": p, "replicas": [1, 2], "isr": [1, 2],
                                               "removing_replicas": [], "adding_replicas": [], "leader": 1,
                                               "leader_epoch": 0, "partition_epoch": 0}

    def change(p: int, **fields: Any) -> tuple[Any, ...]:
        return "meta", "PARTITION_CHANGE_RECORD", 0, {"topic_id": t0, "partition_id": p, **fields}

    log = [("meta", "TOPIC_RECORD", 0, {"topic_id": t0, "name": "t0"}), partition(0), partition(1),  # 0-2
           ("meta", "CONFIG_RECORD", 0, {"resource_type": 4, "resource_name": "", "name": "min.insync.replicas",
                                         "value": "2"}),  # 3
           change(0, isr=[1], leader=-2)]  # 4: t0-0's windows open from here
    log += [change(1, leader=2 - k % 2) for k in range(11)]  # 5-15: t0-1 led by 2, 1, 2, ...
    log += [partition(2)]  # 16: born, t0 read whole
    source, inputs, wh, config, scratch = built_upto(spark, tmp_path, log, 5)
    for end in (15, 1 << 40):
        ingest(spark, [str(copy_upto(source, inputs, end))], config)
        assert reconstruct(spark, config).resumed == 1, end
        store = store_for(spark, config)
        plan = plan_events(store, None, False)
        assert plan.going_on["c"].floor == 4, end  # (the windows opened at 4)
        read = partition_inputs(store, plan).history("partitions")
        versions = sorted((r["partition_id"], r["valid_from_offset"]) for r in read.collect())
        # t0-0: nothing at first (its windows go on from their rows), then, its topic read whole, the version holding
        # at the resume offset; t0-1: the version holding at the resume offset and those begun since; t0-2: born
        assert versions == ([(1, 2), *((1, k) for k in range(5, 15))] if end == 15
                            else [(0, 4), (1, 14), (1, 15), (2, 16)]), end
        analyze(spark, config)
        # (partition, from, to, min.insync.replicas, least ISR size): still open, as it began
        assert [(w[3], w[4], w[6], w[8], w[10]) for w in under_min_isr_rows(wh)] == [(0, 4, None, 2, 1)], end
        scratch.step(inputs, wh)
    lifecycle = [(r["event"], r["partitions_before"], r["partitions_after"])
                 for r in DeltaTable(str(wh / "topic_lifecycle")).to_pyarrow_table().to_pylist()]
    assert ("partitions_added", 2, 3) in lifecycle
    scratch.check(spark)


def test_a_window_an_analysis_ended_before_it_stopped_short_of_its_state_row_keeps_its_start(spark: Any,
                                                                                             tmp_path: Path) -> None:
    """An analysis writes its tables (a window open at its resume offset ends in them), then stops before its
    ``analyze_state`` row: the next one goes on from the state before, so it replaces that window, and rebuilds it
    from its row as written (it began before the resume offset), not from the versions read from there: the window
    keeps its start, and every table equals a build from scratch."""
    t0 = uid(802)

    def change(**fields: Any) -> tuple[Any, ...]:
        return "meta", "PARTITION_CHANGE_RECORD", 0, {"topic_id": t0, "partition_id": 0, **fields}

    noop = ("meta", "NO_OP_RECORD", 0, {})
    log = [("meta", "TOPIC_RECORD", 0, {"topic_id": t0, "name": "t0"}),  # 0
           ("meta", "PARTITION_RECORD", 0, {"topic_id": t0, "partition_id": 0, "replicas": [1, 2, 3],
                                            "isr": [1, 2, 3], "removing_replicas": [], "adding_replicas": [],
                                            "leader": 1, "leader_epoch": 0, "partition_epoch": 0}),  # 1
           ("meta", "CONFIG_RECORD", 0, {"resource_type": 4, "resource_name": "", "name": "min.insync.replicas",
                                         "value": "2"}),  # 2
           change(isr=[1, 2]), change(isr=[1]), noop,  # 3: under-replicated from here; 4: under min ISR too
           change(isr=[1, 2, 3]), noop, change(leader=2), noop]  # 6: in sync again
    source, inputs, wh, _, scratch = built_upto(spark, tmp_path, log, 5)
    state = wh / "analyze_state"
    shutil.copytree(state, tmp_path / "state-5")
    land_build_analyze(spark, copy_upto(source, inputs, 8), wh)  # the windows end at 6
    shutil.rmtree(state)
    shutil.copytree(tmp_path / "state-5", state)  # as if that analysis stopped before its state row
    _, events = land_build_analyze(spark, copy_upto(source, inputs, 10), wh)
    assert events.plan.going_on["c"].resume == 5, events.line()
    windows = {name: [(r["from_offset"], r["to_offset"]) for r in DeltaTable(str(wh / name)).to_pyarrow_table()
                      .to_pylist()] for name in ("under_replicated", "under_min_isr")}
    assert windows == {"under_replicated": [(3, 6)], "under_min_isr": [(4, 6)]}
    scratch.step(inputs, wh)
    scratch.check(spark)


def test_a_reconstruct_stopped_while_committing_is_rebuilt_from_the_bases_by_the_next(spark: Any,
                                                                                       tmp_path: Path) -> None:
    """A history build commits table after table, then its ``replay_state`` rows. One that stops between (killed, a
    commit failed) leaves tables holding its rows beside tables and a state without them: going on from that state
    would read its image from rows written after it and add their versions again. The next build replays every
    cluster from its base instead, and until it has, what reads the histories (``analyze``) says so."""
    t0 = uid(803)

    def change(**fields: Any) -> tuple[Any, ...]:
        return "meta", "PARTITION_CHANGE_RECORD", 0, {"topic_id": t0, "partition_id": 0, **fields}

    log = [("meta", "TOPIC_RECORD", 0, {"topic_id": t0, "name": "t0"}),
           ("meta", "PARTITION_RECORD", 0, {"topic_id": t0, "partition_id": 0, "replicas": [1, 2, 3],
                                            "isr": [1, 2, 3], "removing_replicas": [], "adding_replicas": [],
                                            "leader": 1, "leader_epoch": 0, "partition_epoch": 0}),
           change(isr=[1, 2]), ("meta", "NO_OP_RECORD", 0, {}), change(isr=[1, 2, 3]), change(leader=2),
           change(isr=[2, 3]), change(isr=[1, 2, 3])]
    source, inputs, wh, config, scratch = built_upto(spark, tmp_path, log, 3)
    partitions = history_tables()["partitions"].name

    def stop_after_partitions(table: str) -> None:
        if table == partitions:
            raise OSError("the build is stopped here")

    ingest(spark, [str(copy_upto(source, inputs, 6))], config)
    with pytest.raises(OSError, match="stopped here"):
        reconstruct(spark, config, store=DeltaRsStore(spark, config.warehouse, after_commit=stop_after_partitions))
    with pytest.raises(NotBuilt, match=r"incomplete: reconstruct \S+ stopped while committing them"):
        analyze(spark, config)
    built, events = land_build_analyze(spark, copy_upto(source, inputs, 7), wh)
    assert (built.clusters, built.resumed) == (1, 0), built.line()
    assert events.plan.rebuilt == ["c"], events.line()
    assert not (wh / "_kraftlog" / "committing" / "reconstruct.json").exists()
    scratch.step(inputs, wh)
    scratch.check(spark)
    again, _ = land_build_analyze(spark, copy_upto(source, inputs, 8), wh)  # and the next goes on again
    assert again.resumed == 1, again.line()


def test_a_reader_waits_while_a_build_commits_the_histories_and_fails_on_one_that_stopped(spark: Any,
                                                                                          tmp_path: Path) -> None:
    """A reader that takes no lease (``report``, ``state``, ``diff``, ``shell``, the notebooks' ``frames``) finding a
    build's commit mark waits while that build still holds the warehouse's lease, then reads what it committed; a
    mark whose build no longer holds the lease is a build that stopped while committing: an error at once, as it is
    to a writer (``analyze``, which holds the lease itself)."""
    import threading

    from kraftlog.analytics import frames
    from kraftlog.commits import RECONSTRUCT
    from kraftlog.lease import Lease
    from kraftlog.spark.history import built_clusters

    t0 = uid(805)
    log = [("meta", "TOPIC_RECORD", 0, {"topic_id": t0, "name": "t0"}), ("meta", "NO_OP_RECORD", 0, {})]
    config = built_upto(spark, tmp_path, log, 2)[3]
    store = store_for(spark, config)
    before = built_clusters(store)
    committing, done = threading.Event(), threading.Event()

    def build(seconds: float) -> None:  # a reconstruct's lease and its commit mark, held for ``seconds``
        with Lease(store.storage, store.warehouse, "b-1", RECONSTRUCT), store.marks.committing(RECONSTRUCT, "b-1"):
            committing.set()
            done.wait(seconds)

    topics = frames.read_table(config.warehouse, "topics_history")
    readers = {"commands": lambda: set(built_clusters(store, poll_s=0.2)), "notebooks": lambda: set(
        frames.clusters(config.warehouse)),  # (delta-rs) by the same rule, and so a history table read as it is
        "notebooks' tables": lambda: set(frames.read_table(config.warehouse, "topics_history")["topic_id"])}
    for name, read in readers.items():
        committing.clear()  # before the build starts, which may set it at once
        builder = threading.Thread(target=build, args=(3.0,))
        builder.start()
        assert committing.wait(30)
        t = time.monotonic()
        assert read() == (set(topics["topic_id"]) if "tables" in name else set(before)), name  # it waited
        waited = time.monotonic() - t
        builder.join()
        assert waited >= 1.0, (name, waited)
    committing.clear()
    builder = threading.Thread(target=build, args=(600.0,), daemon=True)  # held until ``done``
    builder.start()
    try:
        assert committing.wait(30)
        with pytest.raises(NotBuilt, match="being committed by reconstruct b-1, still after 0 s"):
            built_clusters(store, wait_s=0)
        store.lease = Lease(store.storage, store.warehouse, "a-1", "analyze")  # a writer: no build can be committing
        with pytest.raises(NotBuilt, match="incomplete: reconstruct b-1 stopped while committing them"):
            built_clusters(store)
    finally:
        store.lease = None
        done.set()
        builder.join()
    with contextlib.suppress(OSError), store.marks.committing(RECONSTRUCT, "b-1"):  # stopped, its lease released
        raise OSError("the build is stopped here")
    t = time.monotonic()
    with pytest.raises(NotBuilt, match="incomplete: reconstruct b-1 stopped while committing them"):
        built_clusters(store)
    for notebook in (lambda: frames.clusters(config.warehouse),
                     lambda: frames.state_at(config.warehouse, "topics", "c", 1),
                     lambda: frames.read_table(config.warehouse, "topics_history")):
        with pytest.raises(NotBuilt, match="incomplete: reconstruct b-1 stopped while committing them"):
            notebook()
    assert time.monotonic() - t < 5
    assert len(frames.read_table(config.warehouse, "records")) == 2  # (a table no history build commits)


def test_a_log_that_only_grew_by_noops_rewrites_only_open_windows_and_per_cluster_tables(spark: Any,
                                                                                        tmp_path: Path) -> None:
    topic = "AAAAAAAAAAAAAAAAAAAAZQ"
    partition = {"topic_id": topic, "partition_id": 0, "replicas": [1, 2, 3], "isr": [1, 2],  # under-replicated
                 "removing_replicas": [], "adding_replicas": [], "leader": 1, "leader_epoch": 0, "partition_epoch": 0}
    log = [("meta", "TOPIC_RECORD", 0, {"topic_id": topic, "name": "t"}),
           ("meta", "PARTITION_RECORD", 0, partition),
           ("meta", "PARTITION_CHANGE_RECORD", 0, {"topic_id": topic, "partition_id": 0, "leader": 2}),
           *[("meta", "NO_OP_RECORD", 0, {})] * 4]
    source = tmp_path / "src"
    write_cluster(source, GenCluster("c", log))
    inputs, wh = tmp_path / "in", tmp_path / "wh"
    land_build_analyze(spark, copy_upto(source, inputs, 4), wh)
    versions = {name: DeltaTable(str(wh / name)).version() for name in event_tables()}
    built, events = land_build_analyze(spark, copy_upto(source, inputs, 1 << 40), wh)  # three NoOps more
    assert len(events.plan.going_on) == 1, events.line()
    # no rule reads a NoOp: no history row restored nor rewritten, only the cluster's replay range
    assert (built.resumed, {t for t, n in built.rows.items() if n}) == (1, {"replay_ranges"}), built.line()
    moved = {name for name in event_tables() if DeltaTable(str(wh / name)).version() != versions[name]}
    assert "under_replicated" in moved and "log_health" in moved  # the open window's length; the log's volume
    assert not moved & {"leader_elections", "isr_changes", "config_changes", "broker_lifecycle", "snapshots"}
    scratch = FromScratch(tmp_path)
    scratch.step(inputs, wh)
    # the node writes a snapshot (state as of offset 3): the snapshots table is rebuilt for it, as from scratch
    write_snapshot(next(inputs.rglob("__cluster_metadata-0")), 4, 4,
                   [log[0], ("meta", "PARTITION_RECORD", 0, {**partition, "leader": 2})])
    version = DeltaTable(str(wh / "snapshots")).version()
    _, events = land_build_analyze(spark, inputs, wh)
    assert len(events.plan.going_on) == 1 and events.rows["snapshots"] == 1, events.line()
    assert DeltaTable(str(wh / "snapshots")).version() != version
    scratch.step(inputs, wh)
    scratch.check(spark)


def test_topic_lifecycle_goes_on_from_the_cut_and_still_sees_names_and_partitions_from_before(
        spark: Any, tmp_path: Path) -> None:
    """After the cut: a name of a topic deleted before it is used again (one increment), a topic created before it
    grows (the next: no topic changes, a partition is born; its partition from before is read too, to count it) and
    is deleted (the last). Only the rows from the cut on are rewritten, and they are those of a build from
    scratch."""
    t1, t2, t3 = "AAAAAAAAAAAAAAAAAAAAAQ", "AAAAAAAAAAAAAAAAAAAAAg", "AAAAAAAAAAAAAAAAAAAAAw"

    def partition(topic: str, p: int) -> tuple[str, str, int, dict[str, Any]]:
        return ("meta", "PARTITION_RECORD", 0, {"topic_id": topic, "partition_id": p, "replicas": [1], "isr": [1],
                                                "removing_replicas": [], "adding_replicas": [], "leader": 1,
                                                "leader_epoch": 0, "partition_epoch": 0})

    log = [("meta", "TOPIC_RECORD", 0, {"topic_id": t1, "name": "a"}), partition(t1, 0),  # batch at 0
           ("meta", "REMOVE_TOPIC_RECORD", 0, {"topic_id": t1}),  # 2
           ("meta", "TOPIC_RECORD", 0, {"topic_id": t2, "name": "b"}), partition(t2, 0),  # 3
           ("meta", "NO_OP_RECORD", 0, {}),  # 5; the cut: 6
           ("meta", "TOPIC_RECORD", 0, {"topic_id": t3, "name": "a"}), partition(t3, 0),  # 6
           partition(t2, 1), partition(t2, 2),  # 8
           ("meta", "REMOVE_TOPIC_RECORD", 0, {"topic_id": t2}),  # 10
           ("meta", "NO_OP_RECORD", 0, {})]  # 11
    source = tmp_path / "src"
    write_cluster(source, GenCluster("c", log), sizes=[2, 1, 2, 1, 2, 2, 1, 1])
    inputs, wh = tmp_path / "in", tmp_path / "wh"
    land_build_analyze(spark, copy_upto(source, inputs, 6), wh)
    before = DeltaTable(str(wh / "topic_lifecycle")).version()
    land_build_analyze(spark, copy_upto(source, inputs, 8), wh)
    _, events = land_build_analyze(spark, copy_upto(source, inputs, 10), wh)
    # t2 grew, no topic changed: t2 is read whole (t2-0 did not change), and topic_lifecycle is rebuilt for it
    assert events.plan.topics == {"c": TopicsRead(frozenset({t2}))}, events.line()
    assert "their partition events read 0 partition(s) and 1 topic(s) whole" in events.line()
    assert events.rows["topic_lifecycle"] == 1, events.line()
    _, events = land_build_analyze(spark, copy_upto(source, inputs, 1 << 40), wh)
    assert list(events.plan.going_on) == ["c"], events.line()
    table = DeltaTable(str(wh / "topic_lifecycle"))
    commits = table.history(table.version() - before)  # no row before the cut: the rows of 6 on only added
    assert {(c["operation"], c["operationParameters"].get("mode")) for c in commits} == {("WRITE", "Append")}, commits
    rows = sorted((r["log_offset"], r["topic_id"], r["topic_name"], r["event"], r["partitions_before"],
                   r["partitions_after"], r["name_reused"], r["previous_topic_id"])
                  for r in DeltaTable(str(wh / "topic_lifecycle")).to_pyarrow_table().to_pylist())
    assert rows == [(0, t1, "a", "create", 0, 1, False, None), (2, t1, "a", "delete", 1, 0, None, None),
                    (3, t2, "b", "create", 0, 1, False, None), (6, t3, "a", "create", 0, 1, True, t1),
                    (8, t2, "b", "partitions_added", 1, 3, None, None), (10, t2, "b", "delete", 3, 0, None, None)]
    assert_same_as_a_full_build(spark, inputs, wh, tmp_path)


def test_topic_lifecycle_counts_the_partitions_holding_when_a_topic_record_came_again(spark: Any,
                                                                                      tmp_path: Path) -> None:
    """A TopicRecord for a live topic id empties it (Kafka's ``TopicsDelta``); a partition added after that is born
    again. Counts are of the partitions holding at the event, so going on from a cut after the emptying writes
    what a build from scratch does (found by ``make proptest``: the delete counted partitions ever born)."""
    t1 = "AAAAAAAAAAAAAAAAAAAAAQ"

    def partition(p: int) -> tuple[str, str, int, dict[str, Any]]:
        return ("meta", "PARTITION_RECORD", 0, {"topic_id": t1, "partition_id": p, "replicas": [1], "isr": [1],
                                                "removing_replicas": [], "adding_replicas": [], "leader": 1,
                                                "leader_epoch": 0, "partition_epoch": 0})

    topic = ("meta", "TOPIC_RECORD", 0, {"topic_id": t1, "name": "a"})
    noop = ("meta", "NO_OP_RECORD", 0, {})
    log = [topic, partition(0), partition(1), topic, noop,  # 0 (batch of 2), 2, 3 (empties t1), 4; the cut: 5
           partition(0), ("meta", "REMOVE_TOPIC_RECORD", 0, {"topic_id": t1}), noop]  # 5, 6, 7
    source = tmp_path / "src"
    write_cluster(source, GenCluster("c", log), sizes=[2, 1, 1, 1, 1, 1, 1])
    inputs, wh = tmp_path / "in", tmp_path / "wh"
    land_build_analyze(spark, copy_upto(source, inputs, 5), wh)
    _, events = land_build_analyze(spark, copy_upto(source, inputs, 1 << 40), wh)
    assert list(events.plan.going_on) == ["c"], events.line()
    rows = sorted((r["log_offset"], r["event"], r["partitions_before"], r["partitions_after"])
                  for r in DeltaTable(str(wh / "topic_lifecycle")).to_pyarrow_table().to_pylist())
    assert rows == [(0, "create", 0, 1), (2, "partitions_added", 1, 2), (5, "partitions_added", 0, 1),
                    (6, "delete", 1, 0)]
    assert_same_as_a_full_build(spark, inputs, wh, tmp_path)


def test_an_hour_rebuilds_each_table_only_in_the_clusters_where_what_it_reads_changed(spark: Any,
                                                                                     tmp_path: Path) -> None:
    """Two clusters go on: in ``c`` a topic is created, ``d`` only writes NoOps (its partition's ISR short of its
    replicas since before the cut: an under-replicated window open). ``topic_lifecycle`` and ``leader_elections``
    are rebuilt in ``c`` alone, ``under_replicated`` in ``d`` too (its open window ends at the log's end, which
    moved), and a table nothing of which changed in either (``broker_lifecycle``) not at all; every table ends as
    a build from scratch makes it."""
    ta, tb, tx = uid(801), uid(802), uid(803)

    def partition(topic: str, isr: list[int]) -> tuple[str, str, int, dict[str, Any]]:
        return ("meta", "PARTITION_RECORD", 0, {"topic_id": topic, "partition_id": 0, "replicas": [1, 2], "isr": isr,
                                                "removing_replicas": [], "adding_replicas": [], "leader": 1,
                                                "leader_epoch": 0, "partition_epoch": 0})

    noop = ("meta", "NO_OP_RECORD", 0, {})
    logs = {"c": [("meta", "TOPIC_RECORD", 0, {"topic_id": ta, "name": "a"}), partition(ta, [1, 2]), noop, noop,
                  ("meta", "TOPIC_RECORD", 0, {"topic_id": tb, "name": "b"}), partition(tb, [1, 2]), noop],  # cut: 4
            "d": [("meta", "TOPIC_RECORD", 0, {"topic_id": tx, "name": "x"}), partition(tx, [1]), *[noop] * 5]}
    source = tmp_path / "src"
    for c, log in logs.items():
        write_cluster(source, GenCluster(c, log), sizes=[1])
    inputs, wh = tmp_path / "in", tmp_path / "wh"
    land_build_analyze(spark, copy_upto(source, inputs, 4), wh)
    lifecycle = DeltaTable(str(wh / "broker_lifecycle")).version()
    _, events = land_build_analyze(spark, copy_upto(source, inputs, 1 << 40), wh)
    assert sorted(events.plan.going_on) == ["c", "d"], events.line()
    left = events.plan.left
    assert (left["topic_lifecycle"], left["leader_elections"], left["broker_lifecycle"]) == (["d"], ["d"], ["c", "d"])
    assert "under_replicated" not in left, left
    narrowed = sum(len(cs) == 1 for cs in left.values())  # (topic_lifecycle, leader_elections, ...)
    assert (f"{len(left) - narrowed} table(s) left as they were, {narrowed} rebuilt only in the clusters where what "
            "they read changed") in events.line(), events.line()
    assert events.rows["topic_lifecycle"] == 2 and events.rows["under_replicated"] == 1, events.line()  # (b, b-0)
    assert DeltaTable(str(wh / "broker_lifecycle")).version() == lifecycle
    assert_same_as_a_full_build(spark, inputs, wh, tmp_path)


@pytest.mark.parametrize("going_on", [300, 3])
def test_spark_and_delta_rs_read_the_rows_analyze_replaces_alike(spark: Any, tmp_path: Path, going_on: int) -> None:
    """Hundreds of clusters going on at once, each from its own cut (a broadcast join in Spark), or a few (SQL in
    Spark): a ``Scope`` selects the same rows in Spark (the rows an event table is built from and writes) and in
    delta-rs (the rows deleted: its SQL), for the rows each kind of event table replaces and the versions it
    reads."""
    from deltalake import write_deltalake

    from kraftlog.analytics.definitions import CLUSTER, POINT
    from kraftlog.spark.analyze import Cut, EventPlan

    going = {f"c{i}": Cut(10 + i % 40, None if i % 2 else 5) for i in range(going_on)}
    assert (len({cut.resume for cut in going.values()}) > SQL_TERMS) == (going_on > 40)  # both ways of selecting
    plan = EventPlan(False, rebuilt=["r"], going_on=going, unchanged=["u"], gone=["g"])
    rows = [(c, o, to) for c in [*list(going)[:60], list(going)[-1], "r", "u", "g", "other"]
            for o in (0, 9, 10, 25, 41, 42, 400) for to in (None, 5, 25, 400)]
    df = spark.createDataFrame(rows, "cluster_id string, log_offset long, to_offset long")

    def later(c: str, v: int | None, open_: bool) -> bool:
        return (open_ and v is None) or (v is not None and v >= going[c].resume)

    expected = {
        POINT: {r for r in rows if r[0] in ("r", "g") or (r[0] in going and later(r[0], r[1], False))},
        WINDOW: {r for r in rows if r[0] in ("r", "g") or (r[0] in going and later(r[0], r[2], True))},
        CLUSTER: {r for r in rows if r[0] not in ("u", "other")},
    }
    scopes: dict[str, Scope | None] = {kind: plan.rows(_of_kind(kind)) for kind in expected}
    # the versions POINT and WINDOW tables read (the frame's columns named as a history's)
    scopes["versions"] = plan.versions(POINT)  # (from the resume offset, whatever window is open: ``Inputs.opened``)
    expected["versions"] = {r for r in rows if r[0] == "r" or (r[0] in going and later(r[0], r[2], True))}
    # the versions begun or ended since the cuts (``changed_kinds``): two columns, no open rows
    scopes["changed"] = Scope.of([], {c: cut.resume for c, cut in going.items()}, "valid_from_offset",
                                 "valid_to_offset")
    expected["changed"] = {r for r in rows if r[0] in going and (later(r[0], r[1], False) or later(r[0], r[2], False))}
    as_history = {"log_offset": "valid_from_offset", "to_offset": "valid_to_offset"}
    for kind, want in expected.items():
        scope = scopes[kind]
        assert scope is not None and not scope.empty
        frame = df.withColumnsRenamed(as_history) if kind in ("versions", "changed") else df
        assert {tuple(r) for r in scope.select(frame).collect()} == want, kind
        assert {tuple(r) for r in frame.filter(scope.sql()).collect()} == want, kind
        assert scope.select(frame).columns == frame.columns
        table = tmp_path / kind
        write_deltalake(str(table), frame.toArrow())
        DeltaTable(str(table)).delete(scope.sql())
        kept = {tuple(r.values()) for r in DeltaTable(str(table)).to_pyarrow_table().to_pylist()}
        assert kept == set(rows) - want, kind


def _batch_starts(segment: Path) -> list[tuple[int, int, int]]:
    """(base offset, byte position, size) of every batch of a segment."""
    data, pos, out = segment.read_bytes(), 0, []
    while pos + 12 <= len(data):
        base, length = struct.unpack_from(">qi", data, pos)
        out.append((base, pos, 12 + length))
        pos += 12 + length
    return out


def _node(source: Path, dest: Path, node: int, end: int, corrupt: tuple[int, ...] = (),
          drop: tuple[int, int] | None = None) -> None:
    """``dest``: a copy of the data directory ``source`` (one segment) as node ``node`` holds it: cut at offset
    ``end``, the batches holding offsets in ``corrupt`` with a flipped byte (their CRC fails), and with ``drop``
    (lo, hi), the segment split in two there with the batches between absent (a segment lost)."""
    if dest.exists():
        shutil.rmtree(dest)
    shutil.copytree(source, dest)
    meta = (source / "meta.properties").read_text()
    (dest / "meta.properties").write_text(meta.replace("node.id=1", f"node.id={node}"))
    segment = dest / "__cluster_metadata-0" / f"{0:020d}.log"
    data = bytearray(segment.read_bytes())
    batches = _batch_starts(segment)
    for (base, pos, size), (following, _, _) in zip(batches, [*batches[1:], (1 << 62, 0, 0)], strict=True):
        if any(base <= o < following for o in corrupt):
            data[pos + size - 1] ^= 0xFF
    lo, hi = drop or (end, end)
    segment.write_bytes(b"".join(bytes(data[pos:pos + size]) for base, pos, size in batches if base < min(lo, end)))
    later = [(base, bytes(data[pos:pos + size])) for base, pos, size in batches if hi <= base < end]
    if later:
        (segment.parent / f"{later[0][0]:020d}.log").write_bytes(b"".join(b for _, b in later))


def test_the_landed_log_tables_go_on_from_what_landed_since(spark: Any, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """``log_health`` and ``log_gaps`` go on from what the ingest runs since the last analysis landed: the hours from
    the earliest one it touches (a record, a copy that lost, a batch whose CRC failed: old hours too) and the gaps
    after the last offset landed before its first record; a run whose id sorts before one already analysed (its
    host's clock behind) makes them rebuild the cluster. Each step writes what a build from scratch writes."""
    from kraftlog.analytics.definitions import HOURS, LOG
    from kraftlog.analytics.events import BUILDERS
    from kraftlog.spark.analyze import gaps_after
    from kraftlog.spark.analyze import inputs as analyze_inputs
    from kraftlog.spark.store import open_store

    # 9,000 records a second apart from 22:13:20: the hours 22:00, 23:00 and 00:00
    log = [("meta", "NO_OP_RECORD", 0, {})] * 9000
    source = write_cluster(tmp_path / "src", GenCluster("c", log))
    inputs, wh = tmp_path / "in", tmp_path / "wh"
    hour = [datetime(2023, 11, 14, 22, tzinfo=UTC), datetime(2023, 11, 14, 23, tzinfo=UTC)]

    def step(*nodes: tuple[int, int, tuple[int, ...], tuple[int, int] | None]) -> AnalyzeResult:
        for node, end, corrupt, drop in nodes:
            _node(source, inputs / f"n{node}", node, end, corrupt, drop)
        _, events = land_build_analyze(spark, inputs, wh)
        store = open_store(spark, str(wh))
        whole = analyze_inputs(store)
        for name in ("log_health", "log_gaps", "controller_leadership"):  # as a build of every landed row makes them
            built = BUILDERS[name](whole).toArrow().cast(event_tables()[name].schema)
            assert table_rows(str(wh / name)) == arrow_rows(built), name
        return events

    step((1, 6000, (), (3000, 3100)))  # node 1 up to 6000, with a gap (the replay starts after it)
    # node 1 grows; node 2 holds the same, its copy of a batch at 23:53 fails its CRC
    events = step((1, 9000, (), (3000, 3100)), (2, 9000, (5990,), (3000, 3100)))
    plan = events.plan
    assert list(plan.going_on) == ["c"] and plan.landed["c"].first == 6000, events.line()
    assert plan.gaps_after == {"c": 5999} and plan.since(HOURS) == {"c": hour[1]}
    assert plan.folded == {"c": 5999}  # the new records follow the end: their counts fold into the hour built before
    assert plan.epochs_after == {"c": -1}  # one epoch, from the first offset: its row is rebuilt
    assert events.rows["log_health"] == 2 and events.rows["log_gaps"] == 0  # 23:00 and 00:00; no gap after 5999
    store = open_store(spark, str(wh))
    gap = DeltaTable(str(wh / "log_gaps")).to_pyarrow_table().to_pylist()[0]

    def after(first: int) -> int:  # where log_gaps would go on had a record at `first` landed since
        return gaps_after(store, {"c": Landed(first, first, None)}, {"c": 8999})["c"]

    assert [after(gap["from_offset"] + 5), after(100), after(9005)] == [gap["from_offset"] - 1, 99, 8999]
    # node 3: an early batch's copy fails its CRC: no record lands, the hour 22:00 is rebuilt
    events = step((3, 9000, (100,), (3000, 3100)))
    assert events.plan.landed["c"].first is None and events.plan.since(HOURS) == {"c": hour[0]}, events.line()
    assert events.rows["log_health"] == 3 and events.plan.rows(_of_kind(LOG)).empty
    # node 5 holds the first half of the gap (a segment arriving late): the gaps go on from the last offset landed
    # before it, so the gap's row, which begins right after that offset, is replaced by the smaller gap left
    events = step((5, 9000, (), (3050, 3100)))
    assert events.plan.gaps_after == {"c": 2999} and events.rows["log_gaps"] == 1, events.line()
    # node 4 lands from a host whose clock is behind: its run id sorts before those analysed, so the ledger does not
    # tell what landed since, and the landed log tables rebuild the cluster
    monkeypatch.setattr("kraftlog.spark.ingest.new_run_id", lambda: "20000101T000000-00000000")
    events = step((4, 9000, (200,), (3000, 3100)))
    assert "c" in events.plan.going_on and "c" not in events.plan.landed, events.line()
    assert events.rows["log_health"] == 3 and events.rows["log_gaps"] == 1
    assert_same_as_a_full_build(spark, inputs, wh, tmp_path)


@pytest.mark.parametrize("clusters", [40, 3])
def test_scopes_cut_at_instants_and_after_run_ids_select_in_spark_and_delta_rs_alike(spark: Any, tmp_path: Path,
                                                                                     clusters: int) -> None:
    """The cuts of the landed log tables: an hour (``HOURS``: a timestamp column at or after an instant) and a run id
    (what landed since: a string column strictly after it). Spark's select (SQL or a join), Spark's SQL and a
    delta-rs delete name the same rows."""
    from deltalake import write_deltalake

    t0 = datetime(2026, 3, 29, 0, tzinfo=UTC)  # a day with a daylight-saving change in Europe: instants, not clocks
    hours = {f"c{i}": t0.replace(hour=i % 24) for i in range(clusters)}
    runs = {f"c{i}": f"2026032{i % 10}T000000-{i:08x}" for i in range(clusters)}
    rows = [(c, t0.replace(hour=h, minute=m), f"2026032{d}T000000-{j:08x}") for c in [*hours, "w", "other"]
            for h in (0, 1, 5, 23) for m in (0, 59) for d, j in ((0, 0), (5, 3), (9, 99))]
    df = spark.createDataFrame(rows, "cluster_id string, hour timestamp, run_id string")
    cases = [(Scope.of(["w"], hours, "hour"),
              {r for r in rows if r[0] == "w" or (r[0] in hours and r[1] >= hours[r[0]])}),
             (Scope.of(["w"], runs, "run_id", strict=True),
              {r for r in rows if r[0] == "w" or (r[0] in runs and r[2] > runs[r[0]])})]
    for i, (scope, want) in enumerate(cases):
        assert {(r[0], r[1].astimezone(UTC), r[2]) for r in scope.select(df).collect()} == want, scope.columns
        assert {(r[0], r[1].astimezone(UTC), r[2]) for r in df.filter(scope.sql()).collect()} == want, scope.columns
        table = tmp_path / str(i)
        write_deltalake(str(table), df.toArrow())
        DeltaTable(str(table)).delete(scope.sql())
        kept = {(r["cluster_id"], r["hour"].astimezone(UTC), r["run_id"])
                for r in DeltaTable(str(table)).to_pyarrow_table().to_pylist()}
        assert kept == set(rows) - want, scope.columns


def test_an_hours_log_records_are_read_from_the_runs_that_landed_them(spark: Any, tmp_path: Path) -> None:
    """The least run that landed a record at or after a cut, found from the ledger alone (``landing_runs``): the
    hour's own run where the cut follows what landed before, the one before where the cut reaches back into it; no
    bound for a cluster read whole. What the analysis of the hour reads of the log is cut by it, also where another
    cluster is read whole in the same hour."""
    from pyspark.sql import functions as F

    inputs, wh = tmp_path / "in", tmp_path / "wh"
    land_and_build(spark, copy_upto(SAMPLE, inputs, 60), wh)
    _, events = land_build_analyze(spark, copy_upto(SAMPLE, inputs, 1 << 40), wh)
    store = store_for(spark, Config.load(warehouse={"path": str(wh)}))
    records = landed(store)("records").filter(F.col("source") == "log")
    by_run = {r["run_id"]: (r["lo"], r["hi"]) for r in records.groupBy("run_id").agg(
        F.min("log_offset").alias("lo"), F.max("log_offset").alias("hi")).collect()}
    (first, (_, end)), (second, (begin, last)) = sorted(by_run.items())
    assert end < begin and first < second, by_run
    (cluster,) = {r["cluster_id"] for r in records.select("cluster_id").distinct().collect()}
    runs = landing_runs(landed(store))
    for cut, run in ((0, first), (end, first), (end + 1, second), (last, second)):
        assert runs(Scope.of([], {cluster: cut})) == run, cut
        assert records.filter(F.col("log_offset") >= cut).agg(F.min("run_id")).first()[0] == run
    assert runs(Scope.of([cluster], {})) is None and runs(Scope.of([], {cluster: "20261129"})) is None
    assert events.plan.going_on
    # the builders' log records: Parquet is given the run, and skips the row groups of older runs by it
    read = Inputs({}, landed(store), records, Scope.of([], {cluster: end + 1}), landed_by=runs).log_records()
    scans = read._sc._jvm.PythonSQLUtils.explainString(read._jdf.queryExecution(), "formatted")
    assert "GreaterThanOrEqual(run_id," in scans.split("PushedFilters:", 1)[1].split("\n", 1)[0], scans
    assert sorted(arrow_rows(read.toArrow())) == sorted(arrow_rows(records.filter(F.col("log_offset") > end).toArrow()))
    # with another cluster read whole (rebuilt in the same hour), this one's reads are still bounded by run
    renamed = records.withColumn("cluster_id", F.lit("other"))
    both = records.unionByName(renamed)
    read = Inputs({}, lambda name: both, records, Scope.of(["other"], {cluster: end + 1}), landed_by=runs
                  ).log_records()
    scans = read._sc._jvm.PythonSQLUtils.explainString(read._jdf.queryExecution(), "formatted")
    assert "GreaterThanOrEqual(run_id," in scans, scans
    assert sorted(arrow_rows(read.toArrow())) == sorted(arrow_rows(
        records.filter(F.col("log_offset") > end).unionByName(renamed).toArrow()))
    # after a cut (strict): the runs that landed a record after it. log_gaps goes on from the last offset landed
    # before the hour (`end`), which an earlier run landed: it reads the records after it, of the hour's run alone
    assert runs(Scope.of([], {cluster: end}, strict=True)) == second
    assert runs(Scope.of([], {cluster: end - 1}, strict=True)) == first
    gaps = log_gaps(Inputs({}, landed(store), records, Scope.of([], {cluster: end}), landed_by=runs))
    plan = gaps._sc._jvm.PythonSQLUtils.explainString(gaps._jdf.queryExecution(), "formatted")
    assert f"GreaterThanOrEqual(run_id,{second})" in plan, plan
    assert gaps.count() == 0  # (the sample's log has no gap)


def test_the_landed_log_tables_read_only_the_clusters_they_rebuild_rows_of() -> None:
    """A cluster going on with nothing landed since is neither read nor written by the ``HOURS`` and ``LOG`` tables;
    one whose ledger does not tell (no ``landed`` entry) is read and written whole, as a cluster analysed anew."""
    from kraftlog.analytics.definitions import CLUSTER, EPOCHS, HOURS, LOG, POINT
    from kraftlog.spark.analyze import Cut, EventPlan

    hour = datetime(2026, 1, 1, 10, tzinfo=UTC)
    plan = EventPlan(False, rebuilt=["r"], going_on={"quiet": Cut(5), "new": Cut(7), "unsure": Cut(9)}, gone=["g"],
                     landed={"quiet": Landed(None, None, None), "new": Landed(12, 20, hour)}, gaps_after={"new": 11})
    assert plan.reads(HOURS) == Scope.of(["r", "unsure"], {"new": hour})
    assert plan.rows(_of_kind(HOURS)) == Scope.of(["r", "unsure", "g"], {"new": hour}, "hour")
    assert plan.reads(LOG) == Scope.of(["r", "unsure"], {"new": 11})
    assert plan.rows(_of_kind(LOG)) == Scope.of(["r", "unsure", "g"], {"new": 12}, "from_offset")
    epochs = replace(plan, epochs_after={"new": 3})
    assert epochs.reads(EPOCHS) == Scope.of(["r", "unsure"], {"new": 3})
    assert epochs.rows(_of_kind(EPOCHS)) == Scope.of(["r", "unsure", "g"], {"new": 4}, "from_offset")
    quiet = replace(plan, landed={"quiet": Landed(None, None, None), "new": Landed(None, None, None)}, gaps_after={})
    assert quiet.reads(HOURS) == Scope.of(["r", "unsure"], {})  # not every cluster of the plan whole
    assert plan.reads(CLUSTER) is None and plan.reads(POINT) == Scope.of(["r"], {"quiet": 5, "new": 7, "unsure": 9})


def test_controller_leadership_goes_on_from_the_epoch_before_the_one_that_grew(spark: Any, tmp_path: Path) -> None:
    """The epoch holding the last offset landed before the new records, and every later one, are rebuilt from the
    last record of the epoch before (which gives the failover its time): no earlier record is read. New records of
    an older epoch than that one (epochs not rising with offsets, which Kafka does not write) rebuild the cluster.
    Each step writes what a build from scratch writes."""
    from history_gen import _batches

    from kraftlog.analytics.definitions import EPOCHS
    from kraftlog.analytics.events import BUILDERS
    from kraftlog.spark.analyze import epochs_after
    from kraftlog.spark.analyze import inputs as analyze_inputs

    noops = [("meta", "NO_OP_RECORD", 0, {})] * 100
    source = tmp_path / "src"
    write_cluster(source, GenCluster("c", []))
    ts0 = 1_700_000_000_000
    segment = source / "c" / "__cluster_metadata-0" / f"{0:020d}.log"  # epochs 4, 5, 7, then 3 from offset 300
    segment.write_bytes(b"".join(_batches(noops, 100 * i, ts0, epoch, [10]) for i, epoch in enumerate((4, 5, 7, 3))))
    inputs, wh = tmp_path / "in", tmp_path / "wh"

    def step(end: int) -> AnalyzeResult:
        _, events = land_build_analyze(spark, copy_upto(source, inputs, end), wh)
        return events

    step(150)  # epochs 4 and 5 (half)
    state = wh / "analyze_state"
    shutil.copytree(state, tmp_path / "state-150")
    events = step(250)  # epoch 5 grows, epoch 7 begins
    assert events.plan.epochs_after == {"c": 99} and events.plan.reads(EPOCHS) == Scope.of([], {"c": 99})
    assert events.plan.folded == {"c": 149}  # rows 4 and 5 as built, and the records after 149 folded into them
    assert events.rows["controller_leadership"] == 2  # epochs 5 and 7
    rows = {r["epoch"]: r for r in DeltaTable(str(wh / "controller_leadership")).to_pyarrow_table().to_pylist()}
    assert [(e, r["from_offset"], r["to_offset"], r["records"], r["previous_epoch"]) for e, r in sorted(rows.items())
            ] == [(4, 0, 99, 100, None), (5, 100, 199, 100, 4), (7, 200, 249, 50, 5)]
    assert rows[5]["failover_seconds"] == 9.937  # from offset 99's time (its batch's, at 90, + 9 x 7 ms) to 100's
    store = store_for(spark, Config.load(warehouse={"path": str(wh)}))
    read = BUILDERS["controller_leadership"](analyze_inputs(store, ["c"], None, since=Scope.of([], {"c": 99})))
    assert [(r["epoch"], r["from_offset"], r["records"]) for r in read.orderBy("epoch").collect()] == [
        (4, 99, 1), (5, 100, 100), (7, 200, 50)]  # epoch 4 read from its last record only (a row not written)
    assert epochs_after(store, {"c": Landed(170, 180, None, 5)}, {"c": 249}) == {"c": 99}  # inside epoch 5
    assert epochs_after(store, {"c": Landed(90, 95, None, 4)}, {"c": 249}) == {"c": -1}  # inside the first
    # an analysis that wrote its tables up to 249, then stopped before its analyze_state row: the state says 149, the
    # tables end at 249, so the next one does not fold into them (it would count 150-249 twice) but rebuilds
    shutil.rmtree(state)
    shutil.copytree(tmp_path / "state-150", state)
    events = step(280)
    assert events.plan.folded == {} and events.plan.epochs_after == {"c": 99}, events.line()
    whole = BUILDERS["controller_leadership"](analyze_inputs(store)).toArrow().cast(
        event_tables()["controller_leadership"].schema)
    assert table_rows(str(wh / "controller_leadership")) == arrow_rows(whole)
    events = step(400)  # epoch 3 after epoch 7: the cluster's epochs rebuilt
    assert events.plan.epochs_after == {"c": -1} and events.rows["controller_leadership"] == 4
    assert_same_as_a_full_build(spark, inputs, wh, tmp_path)


def _of_kind(increment: str) -> TableDef:
    """An event table that ``analyze`` brings up to date by ``increment``."""
    return next(t for t in event_tables().values() if increment_of(t) == increment)


def test_an_hour_naming_more_partitions_than_a_threads_stack_parses_deletes_only_theirs(
        spark: Any, tmp_path: Path) -> None:
    """The benchmark's hour (1% of 5M records) names 21,864 partitions: the build deletes their current versions by an
    IN list, which delta-rs parses recursively on the calling thread. Past about 20k items that overflows a thread's
    8 MB stack and the process dies of SIGSEGV (delta-io/delta-rs#2798); the store deletes on a deeper stack."""
    from kraftlog.spark.increments import Plan
    from kraftlog.spark.predicates import TOPICS_NAMED
    from kraftlog.spark.store import open_store

    store = open_store(spark, str(tmp_path / "wh"))
    table = history_tables()["partitions"]
    store.ensure(table)

    def version(topic: str, partition: int, since: int, to: int | None) -> dict[str, Any]:
        return {f.name: None for f in table.schema} | {"cluster_id": "c", "topic_id": topic, "partition_id": partition,
                                                       "valid_from_offset": since, "valid_to_offset": to}

    rows = [version("t", 0, 0, None), version("t", 1, 0, 5), version("t", 1, 5, None), version("u", 0, 0, None)]
    data = pa.Table.from_pylist(rows, schema=table.schema)
    store.overwrite(table, store.stage_small(table, data, "r0"), "b0")
    named = [("t", 1), ("u", 0), *((f"x{i}", i) for i in range(29_998))]
    assert 20_000 < len(named) <= TOPICS_NAMED
    plan = Plan([], resumed=["c"], record_types={"PARTITION_CHANGE_RECORD"}, restored={"c": TopicsRead.of([], named)})
    where = plan.history_where("partitions")
    assert where is not None and where.count("'x") == 29_998
    store.overwrite(table, [], "b1", where)
    left = DeltaTable(str(tmp_path / "wh" / "partitions_history")).to_pyarrow_table().to_pylist()
    kept = sorted((r["topic_id"], r["partition_id"], r["valid_to_offset"]) for r in left)
    assert kept == [("t", 0, None), ("t", 1, 5)]


def test_a_small_increment_evaluates_its_expressions_interpreted_and_leaves_the_session_as_it_was(
        spark: Any, tmp_path: Path, monkeypatch: Any) -> None:
    """A reconstruct and an analyze of fewer new records than ``interpreted_below`` (NoOps aside) plan and run with
    Spark's expressions interpreted and each query planned once, its shuffles cut into no more parts than the task slots
    (``small_run_settings``), then give the session its settings back; an increment at or above the threshold
    compiles (and plans adaptively). The records counted are those landed since, NoOps left out; a first build's are
    every one landed, NoOps too, counted up to the threshold at most."""
    inputs, wh = tmp_path / "in", tmp_path / "wh"
    seen: list[tuple[str | None, ...]] = []  # the session's settings while each plan was made

    def watched(plan: Any) -> Any:
        def planned(*args: Any, **kwargs: Any) -> Any:
            seen.append(tuple(spark.conf.get(key, None) for key in mine))
            return plan(*args, **kwargs)
        return planned

    monkeypatch.setattr(history_module, "plan_build", watched(history_module.plan_build))
    monkeypatch.setattr(analyze_module, "plan_events", watched(analyze_module.plan_events))
    small: list[bool] = []  # per analysis, whether it wrote its tables' rows as a small run (by the driver)
    replace = TableStore.replace

    def counted(self: TableStore, *args: Any, **kwargs: Any) -> dict[str, int]:
        small.append(kwargs.get("small", False))
        return replace(self, *args, **kwargs)

    monkeypatch.setattr(TableStore, "replace", counted)
    # the session's own (one unset, whole-stage code compiled; one as interpreted wants it, left alone; adaptive
    # execution on, as Spark's default; more shuffle parts than task slots): cheaper than compiling every expression
    # of the sample's builds
    slots = default_parallelism(spark)
    mine = {"spark.sql.codegen.wholeStage": None, "spark.sql.codegen.factoryMode": "NO_CODEGEN",
            "spark.sql.adaptive.enabled": "true", SHUFFLE_PARTS: str(slots + 3)}
    kept = {key: spark.conf.get(key, None) for key in mine}
    given, interpreted = tuple(mine.values()), (*INTERPRETED.values(), str(slots))

    def step(end: int, below: int) -> tuple[int | None, int | None, ReconstructResult, AnalyzeResult]:
        config = Config.load(warehouse={"path": str(wh)}, identity={"cluster": "{cluster.id}"},
                             spark={"interpreted_below": below})
        ingest(spark, [str(copy_upto(SAMPLE, inputs, end))], config)
        store, first = store_for(spark, config), not (wh / "replay_state").exists()
        offsets = None if first else last_builds(spark, store, None, False).state_records(landed(store))
        built = reconstruct(spark, config)
        if first:  # (counted as a first build counts: every record; a full one reads no last build either)
            offsets = last_builds(spark, store, None, True).state_records(landed(store))
        analysed = last_analyses(store, None, first).state_records(landed(store))
        return offsets, analysed, built, analyze(spark, config)

    def changes(after: int, upto: int) -> int:  # the log records other than NoOps landed in (after, upto]
        records = DeltaTable(str(wh / "records")).to_pyarrow_table(columns=["source", "log_offset", "record_type"])
        return sum(1 for r in records.to_pylist() if r["source"] == "log" and after < r["log_offset"] <= upto
                   and r["record_type"] != "NO_OP_RECORD")

    try:
        for key, value in mine.items():
            spark.conf.unset(key) if value is None else spark.conf.set(key, value)
        offsets, analysed, first, events = step(600, 1 << 40)  # a first build: every record counted, NoOps too
        ends = [DeltaTable(str(wh / "replay_state")).to_pyarrow_table()["last_offset"][0].as_py()]
        every = DeltaTable(str(wh / "records")).count()
        assert offsets == analysed == every > changes(-1, ends[0]) > 1 and first.resumed == 0, first.line()
        assert (first.interpreted, events.plan.interpreted, seen) == (True, True, [interpreted, interpreted])
        store = store_for(spark, Config.load(warehouse={"path": str(wh)}))
        assert last_builds(spark, store, None, True).state_records(landed(store), 3) == 3  # (counted up to 3)
        offsets, analysed, grown, events = step(1200, 1)  # going on, above a threshold of 1
        ends.append(DeltaTable(str(wh / "replay_state")).to_pyarrow_table()["last_offset"][0].as_py())
        assert offsets == analysed == changes(*ends) > 1 and grown.resumed == 1, grown.line()
        assert changes(*ends) < ends[1] - ends[0]  # (NoOps not counted)
        assert (grown.interpreted, events.plan.interpreted, seen[2:4]) == (False, False, [given, given])
        offsets, analysed, grown, events = step(1 << 40, 1 << 40)  # going on, below the default
        ends.append(DeltaTable(str(wh / "replay_state")).to_pyarrow_table()["last_offset"][0].as_py())
        assert offsets == analysed == changes(*ends[1:]) > 0 and grown.resumed == 1, grown.line()
        assert (grown.interpreted, events.plan.interpreted, seen[4:]) == (True, True, [interpreted, interpreted])
        assert "expressions interpreted" in grown.line() and "expressions interpreted" in events.line()
        assert small == [True, False, True]  # a small analysis writes its tables' rows on the driver
        assert tuple(spark.conf.get(key, None) for key in mine) == given  # given back
    finally:
        for key, value in kept.items():
            spark.conf.unset(key) if value is None else spark.conf.set(key, value)


def test_a_scoped_read_lists_only_the_files_whose_statistics_let_them_hold_its_rows(spark: Any, tmp_path: Path
                                                                                     ) -> None:
    """``TableStore.read(table, scope)``: the rows ``Scope.select`` gives of the whole table, read from only the files
    whose statistics do not rule the scope out (by cluster range, by a column before the cut, ``strict`` at it, an
    open column with no null); the others are not listed, so Spark runs no task for them. (This is what keeps an
    hour of the 5M-record cluster from reading the closed versions of its full build: the files of the histories'
    closed rows end before the resume offset.)"""
    from kraftlog.analytics.definitions import analyze_state_table

    store = store_for(spark, Config.load(warehouse={"path": str(tmp_path / "wh")}))
    table = analyze_state_table()
    store.ensure(table)

    def rows(cluster: str, offsets: range, floor: bool, run: str) -> list[dict[str, Any]]:
        return [{"cluster_id": cluster, "resume_offset": o, "window_floor": o if floor or o % 2 else None,
                 "landed_run": run, "build_id": "b"} for o in offsets]

    files = {"a_early": rows("a", range(0, 10), True, "20260101T000000-0"),
             "a_late": rows("a", range(10, 20), False, "20260102T000000-0"),
             "b_early": rows("b", range(0, 10), True, "20260101T000000-0"),
             "b_late": rows("b", range(100, 110), True, "20260103T000000-0")}
    path = {}
    for name, part in files.items():
        (staged,) = store.stage_small(table, pa.Table.from_pylist(part, schema=table.schema), name)
        store.overwrite(table, [staged], name, "false")
        path[staged.path.rsplit("/", 1)[-1]] = name
    every = [r for part in files.values() for r in part]
    cases = [
        (Scope.of([], {"a": 10, "b": 50}, "resume_offset"), {"a_late", "b_late"}),
        (Scope.of([], {"a": 9}, "resume_offset", strict=True), {"a_late"}),
        (Scope.of([], {"a": 9}, "resume_offset"), {"a_early", "a_late"}),
        (Scope.of(["b"], {}), {"b_early", "b_late"}),
        (Scope.of([], {"a": 10}, "window_floor", open=True), {"a_late"}),  # (its nulls: open rows)
        (Scope.of([], {"a": "20260102T000000-0"}, "landed_run", strict=True), set()),
        (Scope.of(["b"], {"a": 15}, "window_floor", "resume_offset"), {"a_late", "b_early", "b_late"}),
        (Scope.of([], {"c": 0}, "resume_offset"), set()),
    ]
    keys = ("cluster_id", "resume_offset")
    assert {tuple(r[k] for k in keys) for r in store.read(table).collect()} == {tuple(r[k] for k in keys)
                                                                             for r in every}
    for scope, want in cases:
        listed = {path[f.path.rsplit("/", 1)[-1]] for f in store.files(table, scope)}
        assert listed == want, (scope, listed)
        read = {tuple(r[k] for k in keys) for r in store.read(table, scope).collect()}
        assert read == {tuple(r[k] for k in keys) for r in scope.select(store.read(table)).collect()}, scope
        assert {path[r.rsplit("/", 1)[-1]] for r in
                store.read(table, scope).selectExpr("input_file_name() AS f").distinct().toPandas()["f"]} <= want


def test_a_files_statistics_rule_rows_out_only_where_they_bound_them() -> None:
    """``Scope.may_hold`` keeps a file wherever its statistics leave a row possible: no statistics, a string max a
    writer may have truncated, an instant of another kind than the cut; and drops it where a column is all null."""
    from kraftlog.spark.predicates import TRUNCATED_AT

    long_id = "x" * TRUNCATED_AT

    def bounds(**columns: tuple[Any, Any, int | None]) -> Any:
        return columns.get

    scope = Scope.of([], {"c": 10}, "o")
    assert not scope.may_hold(bounds(cluster_id=("c", "c", 0), o=(0, 9, 0)), 10)
    assert scope.may_hold(bounds(cluster_id=("c", "c", 0), o=(0, 10, 0)), 10)
    assert scope.may_hold(bounds(cluster_id=("c", "c", 0)), 10)  # (no statistics of o)
    assert scope.may_hold(bounds(o=(0, 12, 0)), 10)  # (none of cluster_id)
    assert not scope.may_hold(bounds(cluster_id=("d", "e", 0), o=(0, 99, 0)), 10)
    assert not scope.may_hold(bounds(cluster_id=("c", "c", 0), o=(None, None, 10)), 10)  # every o null
    assert scope.may_hold(bounds(cluster_id=("c", "c", 0), o=(None, None, 3)), 10)  # some o not null, no bound
    assert Scope.of([], {"c": 10}, "o", open=True).may_hold(bounds(cluster_id=("c", "c", 0), o=(0, 9, 1)), 10)
    assert Scope.of([], {long_id + "z": 1}, "o").may_hold(bounds(cluster_id=("a", long_id, 0), o=(0, 5, 0)), 10)
    instant = datetime(2026, 1, 1, tzinfo=UTC)
    assert Scope.of([], {"c": instant}, "t").may_hold(
        bounds(cluster_id=("c", "c", 0), t=(datetime(2025, 1, 1), datetime(2025, 1, 2), 0)), 10)
    assert not Scope.of([], {"c": instant}, "t").may_hold(
        bounds(cluster_id=("c", "c", 0), t=(instant.replace(year=2025), instant.replace(year=2025), 0)), 10)
    # an instant's statistic in milliseconds bounds what a writer cut to them: up to the next millisecond
    assert Scope.of([], {"c": instant.replace(microsecond=500)}, "t").may_hold(
        bounds(cluster_id=("c", "c", 0), t=(instant, instant, 0)), 10)
    assert not Scope.of([], {"c": instant.replace(microsecond=1000)}, "t", strict=True).may_hold(
        bounds(cluster_id=("c", "c", 0), t=(instant, instant, 0)), 10)
