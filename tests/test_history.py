"""Entity histories in Spark: equal to the sequential replay; state, diff and verify on the tables."""

from __future__ import annotations

import json
from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from click.testing import CliRunner
from conftest import SAMPLE, examples, load_job, split_replays
from deltalake import DeltaTable
from history_gen import GenCluster, clusters, write_cluster
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql import functions as F

from kraftlog.cli import main
from kraftlog.spark.history import (
    HistoryBuild,
    build_histories,
    diff,
    image_at,
    landed,
    offset_at,
    read_histories,
    state_at,
)
from kraftlog.spark.store import open_store, spark_schema
from kraftlog.state.entities import BY_NAME, KINDS, history_tables, previous_column, replay_ranges_table
from kraftlog.state.history import versions
from kraftlog.state.local import load_clusters, replay
from kraftlog.state.local import state_at as local_state_at
from kraftlog.state.local import verify as local_verify
from kraftlog.tables.definitions import catalog
from kraftlog.tables.rows import FileIdentity, FileLander, FileRef, KeepSpec

pytestmark = pytest.mark.spark

Rows = dict[tuple[str, str], list[Any]]  # (kind, cluster) -> normalised history rows


def _norm(v: Any) -> Any:
    if isinstance(v, list):
        return tuple(_norm(x) for x in v)
    if isinstance(v, dict):
        return tuple(sorted((k, _norm(x)) for k, x in v.items()))
    return v


def spark_rows(build: HistoryBuild) -> Rows:
    out: Rows = defaultdict(list)
    for kind, df in build.histories.items():
        df = df.withColumn("valid_from", F.unix_millis("valid_from")).withColumn("valid_to", F.unix_millis("valid_to"))
        for r in df.collect():
            d = r.asDict(recursive=True)
            out[(kind, d["cluster_id"])].append(_norm(d))
    return {k: sorted(v, key=repr) for k, v in out.items()}


def assert_previous_pairs(kind: str, rows: list[dict[str, Any]]) -> None:
    """Each version carries, of its kind's ``previous`` values, those of the version it replaced: the one of its
    entity that ended by update where it begins (none after a deletion or at the start)."""
    k = BY_NAME[kind]
    ending = {(tuple(r[c] for c in k.key_names), r["valid_to_offset"]): r for r in rows if r["ended_by"] == "update"}
    for r in rows:
        before = ending.get((tuple(r[c] for c in k.key_names), r["valid_from_offset"]))
        assert {n: r[previous_column(n)] for n in k.previous} == {
            n: before[n] if before else None for n in k.previous}, (kind, r)


def local_rows(root: Path, cluster_of: Any = lambda c: c) -> Rows:
    out: Rows = {}
    for cl in load_clusters([root]):
        changes: list[Any] = []
        replay(cl, on_change=changes.append)
        for kind, rows in versions(changes, cluster_of(cl.cluster_id)).items():
            assert_previous_pairs(kind, rows)
            if rows:
                out[(kind, cluster_of(cl.cluster_id))] = sorted((_norm(r) for r in rows), key=repr)
    return out


def assert_same_histories(spark_side: Rows, local_side: Rows) -> None:
    for key in sorted(spark_side.keys() | local_side.keys()):
        a, b = spark_side.get(key, []), local_side.get(key, [])
        assert a == b, (key, sorted(set(a) - set(b), key=repr)[:3], sorted(set(b) - set(a), key=repr)[:3])


def history_tables_names() -> list[str]:
    return [t.name for t in history_tables().values()]


# -- equal to the sequential replay ------------------------------------------------------------------------

def test_histories_of_the_sample_equal_the_sequential_replay(spark: Any, sample: Any) -> None:
    wh, rows = sample
    tables = history_tables()
    got: Rows = defaultdict(list)
    for kind, df in read_histories(open_store(spark, str(wh))).items():
        df = df.withColumn("valid_from", F.unix_millis("valid_from")).withColumn("valid_to", F.unix_millis("valid_to"))
        for r in df.collect():
            d = r.asDict(recursive=True)
            got[(kind, d["cluster_id"])].append(_norm(d))
    expected = local_rows(SAMPLE)
    assert_same_histories({k: sorted(v, key=repr) for k, v in got.items()}, expected)
    # every kind the scenario exercises has versions, and the tables carry their documentation
    for kind in ("brokers", "controllers", "topics", "partitions", "configs", "client_quotas", "acls", "scram_users",
                 "features", "producer_ids", "voters", "kraft_version"):
        assert rows[tables[kind].name] > 0, kind
    dt = DeltaTable(str(wh / "partitions_history"))
    assert dt.metadata().configuration["kraftlog.entity"] == "partitions"
    assert "valid_to_offset" in {f.name for f in dt.schema().fields}


@settings(max_examples=examples(6), deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture])
@given(generated=clusters(n_min=14, n_max=20))
def test_spark_histories_equal_a_sequential_replay_for_random_logs(spark: Any, tmp_path_factory: Any,
                                                                    generated: list[GenCluster]) -> None:
    root = tmp_path_factory.mktemp("gen")
    for c in generated:
        write_cluster(root, c)
    store = open_store(spark, str(tmp_path_factory.mktemp("wh")))
    build = build_histories(spark, store, table=_in_memory_tables(spark, root))
    try:
        assert_same_histories(spark_rows(build), local_rows(root))
        # and the same problems (a transaction still open at the end: the same count of its records)
        problems = {r["cluster_id"]: sorted(r["problems"])
                    for r in store.read_staged(replay_ranges_table(), build.files).collect()}
        assert problems == {cl.cluster_id: sorted(replay(cl).problems) for cl in load_clusters([root])}
    finally:
        build.release()


@settings(max_examples=examples(4), deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture])
@given(generated=clusters(n_min=14, n_max=20))
def test_a_replay_split_by_topic_equals_a_sequential_replay_for_random_logs(spark: Any, tmp_path_factory: Any,
                                                                           generated: list[GenCluster]) -> None:
    """Every replay split into three parts by topic (``Replayer.BY_TOPIC``): the same histories as the sequential
    replay, and the same ``replay_ranges`` rows as the replay not split (the parts' own problems, and the shared
    records' once)."""
    from collections import Counter

    from kraftlog.spark.replay import Layout
    from kraftlog.state.entities import replay_ranges_table

    root = tmp_path_factory.mktemp("gen")
    for c in generated:
        write_cluster(root, c)
    table = _in_memory_tables(spark, root)
    store = open_store(spark, str(tmp_path_factory.mktemp("wh")))

    def ranges(build: HistoryBuild) -> dict[str, Any]:
        rows = [r.asDict() for r in store.read_staged(replay_ranges_table(), build.files).collect()]
        return {r["cluster_id"]: {**r, "problems": Counter(r["problems"]), "build_id": None, "built_at": None}
                for r in rows}

    whole = build_histories(spark, store, table=table)
    with split_replays(3):
        build = build_histories(spark, store, table=table)
        layout = Layout.of(build.bases, 3)
    try:  # (every replay of 3 log offsets or more was split in 3)
        assert all(layout.parts[b.cluster_id] == 3 for b in build.bases
                   if b.last is not None and b.last - b.base.first >= 2)
        assert_same_histories(spark_rows(build), local_rows(root))
        assert ranges(build) == ranges(whole)
        assert len(ranges(build)) == len(generated)  # one row per cluster, whatever its parts
    finally:
        build.release()
        whole.release()


def test_the_parts_of_split_replays_land_in_the_tasks_laid_out_for_them(spark: Any) -> None:
    """``repartition`` places each part in the task ``Layout`` gave it (``task_keys``: Spark's hash of an int), so no
    two parts of a replay share a core while another core idles."""
    from kraftlog.spark.replay import _murmur3_int, task_keys

    ints = spark.range(-500, 500).select(F.col("id").cast("int").alias("k"), F.hash(F.col("id").cast("int")).alias("h"))
    assert all(_murmur3_int(r["k"]) == r["h"] for r in ints.collect())
    for n in (1, 2, 3, 7, 16):
        keys = task_keys(n)
        df = spark.createDataFrame([(t, k) for t, k in enumerate(keys)], "task int, _task int").repartition(n, "_task")
        placed = df.select("task", F.spark_partition_id().alias("p")).collect()
        assert sorted((r["task"], r["p"]) for r in placed) == [(t, t) for t in range(n)], n


def test_a_layout_splits_big_replays_and_balances_the_parts_over_the_cores() -> None:
    from kraftlog.spark.bases import ClusterBase
    from kraftlog.spark.replay import SPLIT_OFFSETS, Layout
    from kraftlog.state.bases import Base

    def base(cluster: str, offsets: int) -> ClusterBase:
        return ClusterBase(cluster, cluster, Base(None, 0), offsets - 1)

    big, small = base("big", 10 * SPLIT_OFFSETS), base("small", 1000)
    layout = Layout.of([small, big], cores=4)
    assert layout.parts == {"big": 4, "small": 1} and layout.n == 4
    assert sorted(layout.tasks[("big", p)] for p in range(4)) == [0, 1, 2, 3]  # one core per part of the big one
    assert Layout.of([big], cores=1).parts == {"big": 1}
    assert Layout.of([base("mid", 2 * SPLIT_OFFSETS + 5)], cores=8).parts == {"mid": 2}


def test_the_problems_of_the_parts_of_a_replay_merge_into_the_whole_replays() -> None:
    from kraftlog.spark.replay import merge_problems
    from kraftlog.state.replay import still_open

    shared = ["offset 3: EndTransaction without BeginTransaction", "offset 9: RemoveTopic of unknown topic x"]
    parts = [[shared[0], "offset 5: UnregisterBroker of unknown broker 4", shared[1]],
             [shared[0], "offset 7: PartitionChangeRecord for unknown partition ('t', 0)", shared[1]],
             [shared[0], shared[1], "offset 12: PartitionRecord for unknown topic u",
              "offset 12: PartitionRecord for unknown topic u"]]
    assert merge_problems(parts) == [
        shared[0], "offset 5: UnregisterBroker of unknown broker 4",
        "offset 7: PartitionChangeRecord for unknown partition ('t', 0)", shared[1],
        "offset 12: PartitionRecord for unknown topic u", "offset 12: PartitionRecord for unknown topic u"]
    assert merge_problems([["a"], ["a"]]) == ["a"]
    # a transaction still open at the end: the records of each part (its own) add up
    opened = [["offset 1: X", still_open(0, 2)], ["offset 1: X", still_open(0, 0)], ["offset 1: X", still_open(0, 3)]]
    assert merge_problems(opened) == ["offset 1: X", still_open(0, 5)]


def _in_memory_tables(spark: Any, root: Path) -> Any:
    """The landed tables of the data directories under ``root`` as DataFrames (rows as the ingest makes them)."""
    refs = []
    for d in sorted(root.iterdir()):
        ident = FileIdentity(d.name, 1, str(d))
        for f in sorted((d / "__cluster_metadata-0").iterdir()):
            refs.append((FileRef(str(f), f.read_bytes(), 0, ident), KeepSpec()))
    parts: dict[str, list[pa.Table]] = defaultdict(list)
    for chunk in FileLander("gen").land(refs):
        for name, t in chunk.items():
            parts[name].append(t)
    frames = {}
    for t in catalog().all():
        data = pa.concat_tables(parts[t.name]) if parts[t.name] else t.schema.empty_table()
        frames[t.name] = spark.createDataFrame(data, spark_schema(t))
    return frames.__getitem__


# -- queries -----------------------------------------------------------------------------------------------

def _cli(*args: str) -> Any:
    result = CliRunner().invoke(main, list(args))
    return result


def test_state_from_the_tables_equals_the_state_from_the_data_directories(sample: Any) -> None:
    wh, _ = sample
    cluster = load_clusters([SAMPLE])[0]
    mid = cluster.offsets[len(cluster.offsets) // 2]
    ts_point = cluster.log[cluster.offsets[len(cluster.offsets) // 3]].timestamp
    later = cluster.log[cluster.offsets[2 * len(cluster.offsets) // 3]].timestamp
    when = datetime.fromtimestamp(later / 1000 + 0.5, UTC).isoformat().replace("+00:00", "Z")
    for point in (None, str(mid), f"ms:{ts_point}", when):
        extra = ["--at", point] if point else []
        a = _cli("state", "--warehouse", str(wh), *extra)
        b = _cli("state", str(SAMPLE), *extra)
        assert a.exit_code == 0, a.output
        assert b.exit_code == 0, b.output
        assert json.loads(a.output) == json.loads(b.output), point
    for outside in ("2001-01-01T00:00:00Z", "99999999"):  # the same error, naming offsets and times
        a, b = _cli("state", "--warehouse", str(wh), "--at", outside), _cli("state", str(SAMPLE), "--at", outside)
        assert a.exit_code == b.exit_code == 1 and a.output == b.output, (a.output, b.output)
        first, last = (datetime.fromtimestamp(cluster.log[cluster.offsets[i]].timestamp / 1000, UTC) for i in (0, -1))
        assert f"its log records from {first:%Y-%m-%dT%H:%M:%S}" in a.output and f"to {last:%Y-%m-%dT%H:%M:%S}" in \
            a.output, a.output
    doc = json.loads(_cli("state", "--warehouse", str(wh), "--at", str(mid), "--kind", "partitions").output)
    assert doc["offset"] == mid and doc["partitions"] and set(doc) == {"cluster_id", "offset", "timestamp",
                                                                        "partitions"}


def test_diff_from_the_tables_equals_the_diff_from_the_data_directories(spark: Any, sample: Any) -> None:
    wh, _ = sample
    cluster = load_clusters([SAMPLE])[0]
    a, b = cluster.offsets[len(cluster.offsets) // 4], cluster.offsets[-1]
    spark_out = _cli("diff", "--warehouse", str(wh), "--from", str(a), "--to", str(b))
    local_out = _cli("diff", str(SAMPLE), "--from", str(a), "--to", str(b))
    assert spark_out.exit_code == 0 and local_out.exit_code == 0, spark_out.output + local_out.output
    rows = [json.loads(x) for x in spark_out.output.splitlines()]
    assert rows and rows == [json.loads(x) for x in local_out.output.splitlines()]
    # the library diff (a DataFrame) names the same changed fields
    hist = read_histories(open_store(spark, str(wh)))
    changed = diff(hist, cluster.cluster_id, a, b).select("kind", "field").distinct().collect()
    assert {(r["kind"], r["field"]) for r in changed} == {(r["kind"], r["field"]) for r in rows}


def test_library_state_at_and_image_at(spark: Any, sample: Any) -> None:
    wh, _ = sample
    store = open_store(spark, str(wh))
    cluster = load_clusters([SAMPLE])[0]
    at = cluster.offsets[len(cluster.offsets) // 2]
    state = state_at(read_histories(store), cluster.cluster_id, at, ["partitions", "brokers"])
    assert set(state) == {"partitions", "brokers"}
    expected = local_state_at(cluster, at)
    assert state["partitions"].count() == len(expected.entities["partitions"])
    image = image_at(store, cluster.cluster_id, at)
    assert image.entities == expected.entities and image.offset == at
    with pytest.raises(LookupError, match="no histories"):
        image_at(store, "no-such-cluster")


def test_state_before_the_histories_start_is_refused(tmp_path: Path) -> None:
    c = GenCluster("late", [("meta", "TOPIC_RECORD", 0, {"topic_id": "AAAAAAAAAAAAAAAAAAAAAQ", "name": "t"})],
                   snapshot=[("meta", "TOPIC_RECORD", 0, {"topic_id": "AAAAAAAAAAAAAAAAAAAAAg", "name": "s"})],
                   snapshot_offset=9)
    write_cluster(tmp_path, c)
    out = _cli("state", str(tmp_path), "--at", "3")
    assert out.exit_code != 0 and "known from offset 9" in out.output


# -- verify ------------------------------------------------------------------------------------------------

def test_verify_on_the_tables_checks_the_snapshots_the_local_verify_checks(spark: Any, sample: Any) -> None:
    wh, _ = sample
    out = _cli("verify", "--warehouse", str(wh), "--quiet")
    assert out.exit_code == 0, out.output
    local = [c for cl in load_clusters([SAMPLE]) for c in local_verify(cl) if c.reachable]
    assert len(local) > 100 and all(not c.differences for c in local)
    assert out.output.strip().endswith(f"snapshots checked: {len(local)}, with differences: 0")


def test_verify_reports_a_snapshot_that_disagrees_with_the_log(spark: Any, tmp_path: Path) -> None:
    """A snapshot whose contents the log does not produce: both verifies name the entity and field and exit 1.

    Also the entry points on a warehouse of two clusters: ``kraftlog reconstruct``, a partial rebuild
    (``--cluster``) that leaves the other cluster's rows alone, and ``jobs/reconstruct.py --verify``
    as a data-quality gate.
    """
    t1 = "AAAAAAAAAAAAAAAAAAAAAQ"
    log = [("meta", "TOPIC_RECORD", 0, {"topic_id": t1, "name": "orders"}),
           ("meta", "CONFIG_RECORD", 0, {"resource_type": 2, "resource_name": "orders", "name": "retention.ms",
                                         "value": "1000"})]
    root = tmp_path / "data"
    d = write_cluster(root, GenCluster("bad", log))
    write_cluster(root, GenCluster("good", log[:1]))
    wrong = GenCluster("x", [], snapshot=[("meta", "TOPIC_RECORD", 0, {"topic_id": t1, "name": "orders"}),
                                          ("meta", "CONFIG_RECORD", 0, {"resource_type": 2, "resource_name": "orders",
                                                                        "name": "retention.ms", "value": "2000"})],
                       snapshot_offset=1)
    snap_dir = write_cluster(tmp_path / "w", wrong) / "__cluster_metadata-0"
    src = next(snap_dir.glob("*.checkpoint"))
    # the log's epoch (4) at offset 1: the snapshot belongs to this history
    (d / "__cluster_metadata-0" / "00000000000000000002-0000000004.checkpoint").write_bytes(src.read_bytes())
    difference = "configs ('TOPIC', 'orders', 'retention.ms'): value: '1000' != '2000'"
    local = _cli("verify", str(root))
    assert local.exit_code == 1 and difference in local.output
    assert "snapshots checked: 1, with differences: 1" in local.output

    wh = tmp_path / "wh"
    assert _cli("ingest", str(root), "--warehouse", str(wh), "--quiet").exit_code == 0
    tables = _cli("verify", "--warehouse", str(wh))
    assert tables.exit_code == 1, tables.output
    assert difference in tables.output and "snapshots checked: 1, with differences: 1" in tables.output

    assert _cli("reconstruct", "--warehouse", str(wh)).exit_code == 0
    topics = DeltaTable(str(wh / "topics_history"))
    version = topics.version()
    assert sorted(topics.to_pyarrow_table().column("cluster_id").to_pylist()) == ["bad", "good"]
    job = load_job("reconstruct")
    assert job.main(["--warehouse", str(wh), "--cluster", "bad", "--verify"]) == 1  # the gate fails the task
    kept = DeltaTable(str(wh / "snapshot_checks")).to_pyarrow_table().to_pylist()
    assert [(r["cluster_id"], [(d["field"], d["histories"], d["snapshot"]) for d in r["differences"]])
            for r in kept] == [("bad", [("value", '"1000"', '"2000"')])]
    again = _cli("verify", "--warehouse", str(wh))  # the check kept stands: told again, not replayed again
    assert again.exit_code == 1 and difference in again.output, again.output
    assert DeltaTable(str(wh / "topics_history")).version() == version  # nothing new: nothing rewritten
    assert job.main(["--warehouse", str(wh), "--cluster", "bad", "--full"]) == 0
    topics = DeltaTable(str(wh / "topics_history"))
    assert topics.version() > version  # the rows of "bad" were replaced ...
    assert sorted(topics.to_pyarrow_table().column("cluster_id").to_pylist()) == ["bad", "good"]  # ... only


def test_every_history_table_is_written_even_when_empty(spark: Any, sample: Any) -> None:
    wh, rows = sample
    for k in KINDS:
        assert DeltaTable(str(wh / f"{k.name}_history")).version() >= 1, k.name  # written, even when empty
        assert f"{k.name}_history" in rows
    ranges = DeltaTable(str(wh / "replay_ranges")).to_pyarrow_table().to_pylist()
    assert len(ranges) == 1 and ranges[0]["base_snapshot_id"] is None and ranges[0]["first_offset"] == 0
    assert ranges[0]["last_offset"] == load_clusters([SAMPLE])[0].offsets[-1]


def test_landed_source_reads_every_catalog_table(spark: Any, sample: Any) -> None:
    wh, _ = sample
    table = landed(open_store(spark, str(wh)))
    assert table("records").count() > 10_000
    assert table("kraft_voters").count() > 0


def test_a_leafs_history_is_the_same_from_the_tables_and_from_data_directories(spark: Any, sample: Any) -> None:
    """The shell's ``history PATH``: every version of one entity, from the history tables (``versions_of``) and
    from the sequential replay of the data directories, printed alike."""
    from kraftlog.spark.history import image_at, versions_of
    from kraftlog.state.shell import history_text

    wh, _ = sample
    store = open_store(spark, str(wh))
    (cl,) = load_clusters([SAMPLE])
    image = image_at(store, cl.cluster_id)
    changes: list[Any] = []
    replay(cl, on_change=changes.append)
    paths = ["/image/topics/byName/orders/0", "/image/cluster/brokers/101", "/image/features/metadataVersion"]
    lines = {}
    for path in paths:
        parts = [p for p in path.split("/") if p]
        tables = history_text(parts, image, lambda kind, key: versions_of(store, cl.cluster_id, kind, key))
        local = history_text(parts, image, lambda kind, key: [c for c in changes if (c.kind, c.key) == (kind, key)])
        assert tables == local and tables.startswith("offset "), path
        lines[path] = tables.splitlines()
    assert len(lines[paths[0]]) > 3 and all("PartitionRegistration(" in line for line in lines[paths[0]])


@pytest.mark.parametrize("offsets", [[0, 1, 2], [0, 1, 5, 6, 7], [3], [10, 12, 13, 20], [4, 5, 6, 9]])
def test_the_runs_of_landed_log_offsets_start_where_the_local_rule_says(spark: Any, offsets: list[int]) -> None:
    """Where a cluster's replay can start (its last gap-free run of log offsets): ``_runs`` orders only the offsets
    of clusters with a gap, and agrees with the local rule (``run_start``) beside a cluster without one."""
    from kraftlog.spark.bases import _runs
    from kraftlog.state.bases import run_start

    rows = [("gapped", o) for o in offsets] + [("whole", o) for o in range(100, 105)]
    log = spark.createDataFrame(rows, "cluster_id string, log_offset long").select(
        "cluster_id", "log_offset", F.timestamp_millis(F.col("log_offset")).alias("timestamp"),
        F.lit(1).alias("batch_epoch"), F.lit(7).cast("long").alias("value_hash"))
    runs = _runs(log)
    gapped = runs["gapped"]
    assert (gapped.first, gapped.last, gapped.records) == (offsets[0], offsets[-1], len(offsets))
    start = gapped.inner if gapped.inner is not None else gapped.first
    assert start == run_start(offsets)
    assert runs["whole"].inner is None and (runs["whole"].first, runs["whole"].last) == (100, 104)


@settings(max_examples=examples(8), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=st.lists(st.tuples(st.sampled_from([0, 0, 0, 1, 5, 40]), st.integers(-5, 20)), max_size=40),
       at=st.integers(80, 400), span=st.sampled_from([1, 2, 1024]), known=st.sampled_from([None, "first", "last"]))
def test_offset_at_is_the_last_record_at_or_before_the_time_read_from_the_end(
        spark: Any, steps: list[tuple[int, int]], at: int, span: int, known: str | None) -> None:
    """``offset_at`` with Spark (``kraftlog.points.last_offset_at``, tested apart in ``test_points``): the same
    answer as the last offset among every record at or before the time, where offsets skip (a gap in the log) and
    times go back (a controller's clock behind), other clusters' and snapshot rows beside."""
    rows, offset, ms = [], -1, 100
    for gap, step in steps:
        offset, ms = offset + gap + 1, ms + step
        rows.append(("c", "log", offset, ms))
    mine = [(o, t) for _, _, o, t in rows]
    rows += [("other", "log", offset + 7, 0), ("c", "snapshot", offset + 9, 0)]
    records = spark.createDataFrame([(c, s, o, datetime.fromtimestamp(t / 1000, UTC)) for c, s, o, t in rows],
                                    "cluster_id string, source string, log_offset long, timestamp timestamp")
    hint = {None: None, "first": mine[0][0] if mine else None, "last": mine[-1][0] if mine else None}[known]
    expected = max((o for o, t in mine if t <= at), default=-1)
    assert offset_at(records, "c", at, hint, span=span) == expected


def test_offsets_and_states_of_hundreds_of_clusters_are_read_together(spark: Any) -> None:
    """``offsets_at`` and ``states_at`` of 400 clusters at once (a report of a fleet): each cluster's answer is its
    own, as asked alone. Their bounds are SQL parsed into one balanced expression (``offsets_at``) or, past
    ``SQL_TERMS`` clusters, a join (``states_at``): a filter of 400 terms built as columns overflows the JVM's stack."""
    import random

    from kraftlog.spark.history import offsets_at, state_at, states_at

    rng = random.Random(5)
    records, versions, times, at = [], [], {}, {}
    for i in range(400):
        c = f"c{i:03d}"
        for o in range(rng.randrange(1, 6)):
            records.append((c, "log", o, datetime.fromtimestamp((100 + 10 * o) / 1000, UTC)))
            versions.append((c, o, rng.choice([None, o + rng.randrange(1, 4)])))
        times[c] = (100 + 10 * rng.randrange(0, 6) + rng.choice([-1, 0, 5]), None)
        at[c] = rng.randrange(0, 6)
    df = spark.createDataFrame(records, "cluster_id string, source string, log_offset long, timestamp timestamp")
    expected = {c: max((o for cc, _, o, t in records if cc == c and t.timestamp() * 1000 <= ms), default=-1)
                for c, (ms, _) in times.items()}
    assert offsets_at(df, times) == expected
    hist = {"v": spark.createDataFrame(versions, "cluster_id string, valid_from_offset long, valid_to_offset long")}
    together = {tuple(r) for r in states_at(hist, at)["v"].collect()}
    assert together == {v for v in versions if v[1] <= at[v[0]] and (v[2] is None or v[2] > at[v[0]])}
    assert {tuple(r) for r in state_at(hist, "c007", at["c007"])["v"].collect()} == {
        v for v in together if v[0] == "c007"}


@pytest.mark.parametrize("apart", [64, 1])
def test_verify_reads_only_the_versions_that_can_hold_at_a_snapshot_it_checks(spark: Any, monkeypatch: Any,
                                                                               apart: int) -> None:
    """``holding_within``: every version that holds at one of the snapshots' offsets of its cluster passes (what the
    comparison joins them with decides), versions ended before the first or begun after the last do not, and the
    bound is a filter of literals in the plan (what a Parquet reader prunes row groups by); bounded per cluster,
    or by one bound for all (``BOUND_APART``)."""
    import random

    from kraftlog.spark import verify

    monkeypatch.setattr(verify, "BOUND_APART", apart)
    rng = random.Random(7)
    versions = []
    for c in ("a", "b", "c"):
        for _ in range(400):
            start = rng.randrange(0, 1000)
            versions.append((c, start, rng.choice([None, start + rng.randrange(1, 200)])))
    probes = [(c, "s", rng.randrange(0, 1000), f"{c}@s") for c in ("a", "b") for _ in range(2)]
    df = spark.createDataFrame(versions, "cluster_id string, valid_from_offset long, valid_to_offset long")
    kept = {tuple(r) for r in df.filter(verify.holding_within(probes)).collect()}

    def holds(v: tuple[str, int, int | None], at: int) -> bool:
        return v[1] <= at and (v[2] is None or v[2] > at)

    at = {c: [p[2] for p in probes if p[0] == c] for c in ("a", "b", "c")}
    assert {v for v in versions if any(holds(v, a) for a in at[v[0]])} <= kept
    every = [p[2] for p in probes]

    def bounds(c: str) -> tuple[int, int]:  # the offsets a version of cluster c may hold at to be read
        return (min(at[c]), max(at[c])) if apart > 1 else (min(every), max(every))

    assert all(v[1] <= bounds(v[0])[1] and (v[2] is None or v[2] > bounds(v[0])[0]) for v in kept)
    assert len(kept) < len(versions) and (apart == 1 or not any(v[0] == "c" for v in kept))
    scan = df.filter(verify.holding_within(probes))._jdf.queryExecution().optimizedPlan().toString()
    assert "valid_to_offset" in scan and str(max(every)) in scan


def test_the_offset_at_a_time_of_the_notebooks_equals_the_commands(spark: Any, sample: Any) -> None:
    """``kraftlog.analytics.frames.offset_at`` (delta-rs, for notebooks) and the commands' (Spark) find the same
    offset as the last record at or before each time, before the first record, between records and after the last,
    reading from the end of the log both."""
    import pandas as pd

    from kraftlog.analytics import frames

    wh, _ = sample
    [cluster] = frames.clusters(wh)
    log = frames.read_table(wh, "records", cluster, ["source", "log_offset", "timestamp"])
    log = log[log["source"] == "log"]
    times = sorted(log["timestamp"].unique())
    records = open_store(spark, str(wh)).read(catalog()["records"])
    ms = pd.Timedelta(milliseconds=1)
    for t in [times[0] - ms, times[0], times[len(times) // 3], times[len(times) // 2] + ms, times[-1] - ms, times[-1],
              times[-1] + ms]:
        expected = int(log[log["timestamp"] <= t]["log_offset"].max()) if (log["timestamp"] <= t).any() else -1
        assert frames.offset_at(wh, cluster, t) == expected, t
        assert offset_at(records, cluster, int(pd.Timestamp(t).value // 1_000_000)) == expected, t
