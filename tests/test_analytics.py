"""Event tables: every scripted event of scenario A (``timeline.md``) in the right table, kind and time."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from deltalake import DeltaTable
from pyspark.sql import functions as F
from services import repeated_keys, spark_jobs

from kraftlog.analytics.definitions import event_tables
from kraftlog.analytics.events import BUILDERS
from kraftlog.spark.store import spark_schema

TOLERANCE_S = 10.0  # record time vs. the wall clock of the command that caused it


def wall(ms: int) -> datetime:
    """A ``start_ms`` / ``end_ms`` of ``timeline.md`` as a UTC time."""
    return datetime.fromtimestamp(ms / 1000, UTC)


def near(ts: Any, start_ms: int, end_ms: int | None = None, slack: float = TOLERANCE_S) -> bool:
    """``ts`` falls in [start, end] of a timeline row, give or take ``slack`` seconds."""
    t = pd.Timestamp(ts).tz_localize("UTC") if pd.Timestamp(ts).tzinfo is None else pd.Timestamp(ts)
    lo, hi = wall(start_ms), wall(end_ms or start_ms)
    return (lo - pd.Timedelta(seconds=slack)) <= t <= (hi + pd.Timedelta(seconds=slack))


@pytest.fixture(scope="module")
def events(sample_events: Any) -> dict[str, pd.DataFrame]:
    wh, _ = sample_events
    return {name: DeltaTable(str(wh / name)).to_pandas() for name in event_tables()}


def one(df: pd.DataFrame) -> pd.Series:
    assert len(df) == 1, df
    return df.iloc[0]


def test_every_event_table_is_built_with_its_schema(sample_events: Any) -> None:
    wh, output = sample_events
    assert set(BUILDERS) == set(event_tables())
    assert output.startswith("analyze ") and "event rows" in output
    for name, table in event_tables().items():
        dt = DeltaTable(str(wh / name))
        got = dt.schema().to_arrow()
        assert [f.name for f in got] == [f.name for f in table.schema], name
        assert dt.metadata().description, name
    assert {f.name for f in spark_schema(event_tables()["leader_elections"]).fields} >= {"kind", "leader"}


def test_elections(events: dict[str, pd.DataFrame]) -> None:
    e = events["leader_elections"]
    fragile = e[e.topic_name == "fragile"].sort_values("log_offset")
    # Phase 14: 101 stopped (controlled), 102 stopped (offline), then `--election-type unclean` at 03:13:10.9
    unclean = one(fragile[fragile.kind == "unclean"])
    assert near(unclean.timestamp, 1795230790898, 1795230792223)
    assert (unclean.previous_leader, unclean.leader, list(unclean.previous_isr), unclean.clean) == (-1, 101, [102],
                                                                                                   False)
    assert unclean.leader_recovery_state == "RECOVERING"
    assert one(e[~e.clean]).topic_name == "fragile"  # the only unclean election of the run
    offline = fragile[fragile.kind == "offline"]
    assert near(offline.timestamp.iloc[0], 1795230770801, 1795230775813)  # SIGTERM of 102, the last ISR member
    shut = fragile[fragile.kind == "controlled_shutdown"].iloc[0]
    assert near(shut.timestamp, 1795230758220, 1795230765236) and (shut.previous_leader, shut.leader) == (101, 102)
    # Phase 13: kafka-leader-election --election-type preferred --all-topic-partitions at 03:12:27.1
    preferred = e[(e.kind == "preferred") & e.timestamp.map(lambda t: near(t, 1795230747115, 1795230749025, 2))]
    assert len(preferred) >= 10
    assert (preferred.leader == preferred.replicas.map(lambda r: r[0])).all()
    assert "bulk" in set(preferred.topic_name) and "orders" in set(preferred.topic_name)


def test_isr_and_under_min_isr(events: dict[str, pd.DataFrame]) -> None:
    isr = events["isr_changes"]
    # Phase 12a: broker 102 killed at 03:11:30.2, dropped from every ISR when fenced (session timeout)
    shrinks = isr[(isr.kind == "shrink") & isr.removed.map(lambda r: list(r) == [102])]
    first = shrinks.timestamp.min()
    assert near(first, 1795230690217, 1795230707228)
    back = isr[(isr.kind == "expand") & isr.added.map(lambda r: 102 in list(r)) & (isr.timestamp > first)]
    assert near(back.timestamp.min(), 1795230708918, 1795230718017)  # restarted at 03:11:48.9
    umi = events["under_min_isr"]
    orders = umi[umi.topic_name == "orders"]
    assert len(orders) > 0 and set(orders.min_insync_replicas) == {2} and set(orders.config_source) == {"topic"}
    assert (orders.min_isr_size < 2).all()
    ur = events["under_replicated"]
    assert (ur.min_isr_size < ur.replicas_count).all() and (ur[~ur.open].seconds >= 0).all()


def test_brokers(events: dict[str, pd.DataFrame]) -> None:
    b = events["broker_lifecycle"]

    def at(broker: int, event: str, start_ms: int, end_ms: int | None = None) -> pd.Series:
        rows = b[(b.broker_id == broker) & (b.event == event)]
        hits = rows[rows.timestamp.map(lambda t: near(t, start_ms, end_ms))]
        assert len(hits) >= 1, (broker, event, rows)
        return hits.iloc[0]

    # Phase 12a: kill -9 of 102 at 03:11:30.2: fenced when its session expires, registered again on restart
    fence = at(102, "fence", 1795230690217, 1795230707228)
    register = at(102, "register", 1795230708918, 1795230713011)
    assert register.broker_epoch > fence.broker_epoch and register.fenced
    at(102, "unfence", 1795230708918, 1795230713011)
    assert not ((b.broker_id == 102) & (b.event == "controlled_shutdown") & (b.timestamp < register.timestamp)).any()
    # Phase 12b: SIGTERM of 103 at 03:12:00.0 is a controlled shutdown, then a restart at 03:12:10.8
    at(103, "controlled_shutdown", 1795230720030, 1795230726051)
    at(103, "register", 1795230730805, 1795230737100)
    periods = events["broker_fenced_periods"]
    p102 = periods[(periods.broker_id == 102) & (periods.reason == "fenced")]
    assert one(p102).seconds == pytest.approx((register.timestamp - fence.timestamp).total_seconds() + 1.03, abs=1.5)
    assert not periods.flapping.any()


def test_controller_failover(events: dict[str, pd.DataFrame]) -> None:
    c = events["controller_leadership"].sort_values("epoch")
    assert list(c.epoch) == [1, 3] and list(c.leader_id) == [1, 2]
    assert list(c.from_offset) == [0, 1088]  # LeaderChange records at the start of each epoch
    # controller 1 (the leader) killed at 03:13:42.7; controller 2 leads from epoch 3
    new = c.iloc[1]
    assert near(new.from_time, 1795230822711, None, 6) and new.previous_leader_id == 1
    assert 0 < new.failover_seconds < 10
    assert list(new.voters) == [1, 2, 3]


def test_voters_and_features(events: dict[str, pd.DataFrame]) -> None:
    v = events["voter_changes"].sort_values("log_offset")
    assert [list(x) for x in v.voters_after] == [[1], [1, 2], [1, 2, 3], [1, 2], [1, 2, 3]]
    assert list(v.change) == ["added", "added", "added", "removed", "added"]
    assert near(v.timestamp.iloc[1], 1795230499529, 1795230501101)  # add-controller 2
    assert near(v.timestamp.iloc[2], 1795230509397, 1795230510876)  # add-controller 3
    assert near(v.timestamp.iloc[3], 1795230902017, 1795230903597)  # remove-controller 3
    assert near(v.timestamp.iloc[4], 1795230927821, 1795230929522)  # add it back
    f = events["feature_changes"]
    mv = f[f.feature == "metadata.version"].sort_values("log_offset")
    assert list(mv.change) == ["finalized", "downgrade", "upgrade"]
    assert (mv.iloc[1].from_version, mv.iloc[1].to_version) == ("3.9-IV0", "3.8-IV0")
    assert near(mv.iloc[1].timestamp, 1795230942685, 1795230944529)
    assert near(mv.iloc[2].timestamp, 1795230961875, 1795230963563)
    assert one(events["zk_migration"]).to_state == "NONE"


def test_reassignment_and_topics(events: dict[str, pd.DataFrame]) -> None:
    r = events["reassignments"]
    bulk = one(r[r.topic_name == "bulk"])
    assert bulk.status == "completed" and not bulk.open
    assert (list(bulk.original_replicas), list(bulk.target_replicas)) == ([101, 102], [103, 101])
    assert near(bulk.from_time, 1795230637741, 1795230640507)
    assert near(bulk.to_time, 1795230670083, 1795230684827)  # "still in progress" at 03:11:10, "completed" at 03:11:23
    t = events["topic_lifecycle"]
    tmp = t[t.topic_name == "tmp-delete-me"].sort_values("log_offset")
    assert list(tmp.event) == ["create", "delete", "create"]
    assert near(tmp.timestamp.iloc[1], 1795230619414, 1795230621138)
    assert near(tmp.timestamp.iloc[2], 1795230624158, 1795230626235)
    again = tmp.iloc[2]
    assert again.name_reused and again.previous_topic_id == tmp.iloc[0].topic_id != again.topic_id
    assert (again.partitions_after, tmp.iloc[0].partitions_after) == (3, 2)
    assert near(one(t[(t.topic_name == "events") & (t.event == "delete")]).timestamp, 1795230628715, 1795230630790)
    grown = t[(t.topic_name == "orders") & (t.event == "partitions_added")]
    assert (one(grown).partitions_before, one(grown).partitions_after) == (6, 9)


def test_config_quota_acl_scram(events: dict[str, pd.DataFrame]) -> None:
    c = events["config_changes"]
    retention = c[(c.resource_name == "orders") & (c.name == "retention.ms")].sort_values("log_offset")
    assert list(retention.change)[:1] == ["set"] and retention.iloc[0].new_value == "86400000"
    assert near(retention.iloc[0].timestamp, 1795230518337, 1795230519906)
    secret = one(c[c.name == "listener.name.plaintext.ssl.key.password"])
    assert secret.redacted and "s3cr3t" not in str(secret.new_value)
    q = events["quota_changes"]
    alice = q[(q.entity_text == "user=alice") & (q.key == "producer_byte_rate")]
    assert one(alice).new_value == 1048576 and near(one(alice).timestamp, 1795230540302, 1795230542174)
    gone = q[(q.entity_text == "client-id=client-a") & (q.change == "delete")]
    assert len(gone) == 2 and all(near(ts, 1795230552572, 1795230554081) for ts in gone.timestamp)
    a = events["acl_changes"]
    mallory = a[a.principal == "User:mallory"].sort_values("log_offset")
    assert list(mallory.change) == ["created", "deleted"] and set(mallory.permission) == {"DENY"}
    s = events["scram_changes"]
    carol = s[s.user_name == "carol"].sort_values("log_offset")
    assert list(carol.change) == ["created", "deleted"]
    assert near(carol.timestamp.iloc[0], 1795230557594, 1795230559026) and near(carol.timestamp.iloc[1], 1795230560582,
                                                                   1795230562774)
    assert "stored_key" not in s.columns and "salt" not in s.columns


def test_log_health(events: dict[str, pd.DataFrame], sample: Any) -> None:
    h = events["log_health"]
    wh, _ = sample
    records = DeltaTable(str(Path(wh) / "records")).to_pandas(columns=["source", "record_type"])
    log = records[records.source == "log"]
    assert h.records.sum() == len(log)
    assert h.noop_records.sum() == (log.record_type == "NO_OP_RECORD").sum()
    assert h.crc_failures.sum() == 0 and events["log_gaps"].empty
    snaps = events["snapshots"]
    assert len(snaps) > 0 and (snaps.dropna(subset=["offsets_since_previous"]).offsets_since_previous > 0).all()


def test_every_event_table_has_one_row_per_key(sample_events: Any) -> None:
    wh, _ = sample_events
    for name, table in event_tables().items():
        assert not repeated_keys(str(wh / name), table), name


def test_a_snapshot_with_several_files_is_one_row(spark: Any) -> None:
    """A node's snapshot found in several files (its data directory under two roots, as an archive copied to a new
    prefix; a ``.checkpoint.deleted`` file as Kafka deletes it): one ``snapshots`` row, deleted where a file is, its
    size the largest file's; the node's next snapshot counts from it (each file was a row of its own, the second
    0 offsets and 0 seconds after the first)."""
    from kraftlog.analytics.events import Inputs, snapshots
    from kraftlog.spark.store import spark_schema as schema_of
    from kraftlog.state.entities import replay_ranges_table
    from kraftlog.tables.definitions import catalog

    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    a, b = "00000000000000000100-0000000001", "00000000000000000200-0000000001"
    md = "__cluster_metadata-0"
    # (path, snapshot id, deleted, size, records, minutes after t0 it was ingested)
    files = [(f"/old/n1/{md}/{a}.checkpoint", a, False, 500, 10, 0),
             (f"/new/n1/{md}/{a}.checkpoint", a, False, 700, 12, 5),
             (f"/old/n1/{md}/{b}.checkpoint", b, False, 800, 14, 0),
             (f"/old/n1/{md}/{b}.checkpoint", b, False, 900, 15, 1),  # the same file again, grown: its latest row
             (f"/old/n1/{md}/{b}.checkpoint.deleted", b, True, 900, 15, 9)]
    ledger = catalog().core["files"]
    rows = [{**{f.name: None for f in ledger.schema}, "path": p, "cluster_id": "c", "node_id": 1,
             "file_kind": "snapshot", "snapshot_id": s, "deleted_snapshot": d, "size": size, "records": n,
             "ingested_at": t0 + timedelta(minutes=m)} for p, s, d, size, n, m in files]
    header = catalog().typed["snapshot_header"]
    headers = [{**{f.name: None for f in header.schema}, "cluster_id": "c", "source": "snapshot", "snapshot_id": s,
                "log_offset": 0, "last_contained_log_timestamp": int((t0 + timedelta(seconds=sec)).timestamp() * 1000)}
               for s, sec in ((a, 10), (b, 70))]
    tables = {"files": spark.createDataFrame(rows, schema_of(ledger)),
              "snapshot_header": spark.createDataFrame(headers, schema_of(header))}
    rr = replay_ranges_table()
    ranges = spark.createDataFrame([{**{f.name: None for f in rr.schema}, "cluster_id": "c"}], schema_of(rr))
    out = snapshots(Inputs({}, tables.__getitem__, ranges)).orderBy("log_offset").collect()
    got = [(r.snapshot_id, r.log_offset, r.bytes, r.records, r.deleted, r.offsets_since_previous,
            r.seconds_since_previous) for r in out]
    assert got == [(a, 99, 700, 12, False, None, None), (b, 199, 900, 15, True, 100, 60.0)]


def test_flapping_counts_unplanned_fences_in_an_hour(spark: Any) -> None:
    """Three session-expiry fences within an hour flag the third as flapping; controlled shutdowns and
    startups do not count."""
    from datetime import timedelta

    from kraftlog.analytics.events import Inputs, broker_fenced_periods
    from kraftlog.spark.store import spark_schema as schema_of
    from kraftlog.state.entities import history_tables, replay_ranges_table

    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    # (offset, minutes, broker_epoch, fenced, in_controlled_shutdown)
    steps = [(1, 0, 1, True, False), (2, 1, 1, False, False), (3, 5, 1, True, False), (4, 6, 1, False, False),
             (5, 10, 1, False, True), (6, 11, 1, True, True), (7, 12, 7, True, False), (8, 13, 7, False, False),
             (9, 20, 7, True, False), (10, 21, 7, False, False), (11, 30, 7, True, False), (12, 31, 7, False, False)]
    table = history_tables()["brokers"]
    rows = []
    for i, (off, minute, epoch, fenced, ics) in enumerate(steps):
        nxt = steps[i + 1] if i + 1 < len(steps) else None
        row = {f.name: None for f in table.schema}
        row.update(cluster_id="c", broker_id=1, broker_epoch=epoch, fenced=fenced, in_controlled_shutdown=ics,
                   valid_from_offset=off, valid_from=t0 + timedelta(minutes=minute),
                   valid_to_offset=nxt[0] if nxt else None,
                   valid_to=t0 + timedelta(minutes=nxt[1]) if nxt else None, ended_by="update" if nxt else None)
        rows.append(row)
    brokers = spark.createDataFrame(rows, schema_of(table))
    rr = replay_ranges_table()
    ranges = spark.createDataFrame([{**{f.name: None for f in rr.schema}, "cluster_id": "c", "base_offset": -1}],
                                   schema_of(rr))
    out = broker_fenced_periods(Inputs({"brokers": brokers}, lambda name: None, ranges))  # type: ignore[arg-type]
    got = [(r.from_offset, r.reason, r.fences_last_hour, r.flapping) for r in out.orderBy("from_offset").collect()]
    # the shutdown at 6 and the fenced re-registration at 7 are one period: fenced from 6 until unfenced at 8
    assert got == [(1, "startup", 0, False), (3, "fenced", 1, False), (6, "controlled_shutdown", 1, False),
                   (9, "fenced", 2, False), (11, "fenced", 3, True)]


def test_the_partition_events_pair_versions_by_what_the_history_says_each_replaced(spark: Any, sample: Any) -> None:
    """The partition events read what a version replaced from its ``previous_*`` columns (``replaced``), which the
    replay wrote: the same pairs a window over the history gives (``with_previous``), and a full analysis keeps no
    window and no whole partition history: only the frames a builder reads twice, each a part of what it reads."""
    from chispa import assert_df_equality

    from kraftlog.analytics.events import PARTITION, replaced, with_previous
    from kraftlog.spark.analyze import Kept, inputs, plan_events, planned_frames
    from kraftlog.spark.store import open_store
    from kraftlog.state.entities import BY_NAME

    wh, _ = sample
    store = open_store(spark, str(wh))
    history = inputs(store).history("partitions")
    names = BY_NAME["partitions"].previous
    stored = replaced(history, "partitions").select(*PARTITION, "valid_from_offset", "_prev")
    window = with_previous(history, PARTITION).select(
        *PARTITION, "valid_from_offset",
        F.when(F.col("_prev").isNotNull(), F.struct(*(F.col(f"_prev.{n}").alias(n) for n in names))).alias("_prev"))
    assert_df_equality(stored, window, ignore_row_order=True, ignore_nullable=True, ignore_metadata=True)
    assert stored.filter(F.col("_prev").isNotNull()).count() > 0
    kept = Kept()
    try:
        planned = list(planned_frames(store, plan_events(store, None, True), kept))
        assert len(planned) == len(BUILDERS)
        assert all(make() is not None for _, make in planned)  # each table's frame made
        rows = {name: frame.count() for name, frame in kept.frames}
        births = history.filter(F.col("previous_leader").isNull()).count()
        assert rows.keys() == {"partitions that can fall under min.insync.replicas", "partition births by batch",
                               "partition births with counts", "partition keys reassigned",
                               "partition keys that can fall under min.insync.replicas"}
        assert rows.pop("partitions that can fall under min.insync.replicas") < history.count()
        partitions = history.select(*PARTITION).distinct().count()
        assert rows.pop("partition keys reassigned") < partitions
        assert rows.pop("partition keys that can fall under min.insync.replicas") < partitions
        assert all(0 < n < births for n in rows.values()), (rows, births)  # a row per topic and batch
    finally:
        kept.release()


def test_the_few_partitions_a_builder_orders_are_measured_so_their_versions_are_filtered_before_the_shuffle(
        spark: Any, sample: Any) -> None:
    """Where a builder orders the versions of only some partitions (``of_partitions_in``: those reassigned, those
    that can fall under min.insync.replicas), an analysis computes their keys first (``Inputs.measured``): Spark then
    plans the join knowing their size, a broadcast where they are few, and the other partitions' versions are dropped
    as they are read (on the 5M-record cluster, 4,001 partitions of 150,000 reassigned: reassignments 6.6 -> 2.7 s).
    Unmeasured, Spark's estimate of the keys is the whole scan's size: with the broadcast threshold between the two,
    the same builder shuffles every version."""
    import dataclasses

    from kraftlog.spark.analyze import Kept, inputs
    from kraftlog.spark.store import open_store

    wh, _ = sample
    x = inputs(open_store(spark, str(wh)))

    def size(frame: Any) -> int:  # Spark's own figure, as it plans a join with the frame
        return int(frame.select("*")._jdf.queryExecution().optimizedPlan().stats().sizeInBytes())

    def joins(frame: Any) -> list[str]:
        plan = frame._jdf.queryExecution().executedPlan().toString()
        return [line.strip(" :+-").split(" ")[0] for line in plan.splitlines() if "LeftSemi" in line]

    def measured_keys(kept: Kept) -> tuple[Any, Any]:  # (the builder's frame, the keys it measured)
        frame = BUILDERS["reassignments"](dataclasses.replace(x, keep=kept.keeper()))
        return frame, dict(kept.frames)["partition keys reassigned"]

    before = spark.conf.get("spark.sql.autoBroadcastJoinThreshold")
    first, again = Kept(), Kept()
    try:
        measured = size(measured_keys(first)[1])
        first.release()  # (Spark plans any frame of the same rows with the kept ones while they are kept)
        seen: dict[str, Any] = {}  # the same keys, as a builder joins them outside an analysis (not computed first)
        BUILDERS["reassignments"](dataclasses.replace(x, keep=lambda name, frame, _now: seen.setdefault(name, frame)))
        estimate = size(seen["partition keys reassigned"])
        assert 0 < measured < estimate
        spark.conf.set("spark.sql.autoBroadcastJoinThreshold", str((measured + estimate) // 2))
        assert joins(BUILDERS["reassignments"](x)) == ["SortMergeJoin"]
        assert joins(measured_keys(again)[0]) == ["BroadcastHashJoin"]
    finally:
        spark.conf.set("spark.sql.autoBroadcastJoinThreshold", before)
        first.release()
        again.release()


def test_a_builder_reading_only_empty_histories_builds_no_row(spark: Any, sample: Any) -> None:
    """The rule analyze skips a table's Spark job by (``Reads.only_of``): a builder that reads only histories,
    none whole and no landed table, builds its rows from history rows (the log's end and the replay ranges are only
    joined to them), so with those histories empty it builds none. Each such builder is run over the sample's
    replay ranges and landed tables with every history empty. And what a builder reads is the same whatever its
    inputs hold (analyze learns it once: ``_READS``): all of the sample, or none of its history."""
    import dataclasses

    from kraftlog.spark.analyze import _Reader, inputs
    from kraftlog.spark.store import open_store

    wh, _ = sample
    x = inputs(open_store(spark, str(wh)))
    empty = dataclasses.replace(x, histories={k: df.limit(0) for k, df in x.histories.items()})
    skipped = []
    for name in BUILDERS:
        frames, found = [], []
        for shape in (x, empty):
            reader = _Reader(shape)
            frames.append(BUILDERS[name](reader))
            found.append(reader.reads())
        assert found[0] == found[1], name
        if found[1].only_of(set(x.histories)):
            skipped.append(name)
            assert frames[1].count() == 0, name
    assert len(skipped) >= 12, skipped  # not a rule that never applies
    assert x.ranges.count() > 0  # (the ranges the builders join to are there)


def test_a_table_holds_rows_of_the_clusters_its_files_statistics_do_not_rule_out(spark: Any, tmp_path: Path) -> None:
    """``TableStore.may_hold`` from the log alone: delta-rs from its files' statistics; a store that cannot tell
    (the default) answers that it may."""
    import pyarrow as pa

    from kraftlog.spark.store import TableStore, open_store
    from kraftlog.state.entities import history_tables

    store = open_store(spark, str(tmp_path / "wh"))
    table = history_tables()["acls"]
    store.ensure(table)
    rows = [{f.name: None for f in table.schema} | {"cluster_id": c, "valid_from_offset": 0} for c in ("b", "d")]
    cases = [None, ["a"], ["b"], ["c"], ["d"], ["e"], ["a", "e"], ["a", "d"]]
    assert [store.may_hold(table, c) for c in cases] == [False] * len(cases)
    for r in rows:  # a file each: b..b and d..d
        store.overwrite(table, store.stage_small(table, pa.Table.from_pylist([r], schema=table.schema), "r"), "b",
                        f"cluster_id = '{r['cluster_id']}'")
    assert [store.may_hold(table, c) for c in cases] == [True, False, True, False, True, False, False, True]
    assert all(TableStore.may_hold(store, table, c) for c in cases)  # a store that cannot tell: it may
    # a table's log is read once per store; after that each answer is of the table brought up to date, whoever
    # committed since: another store (another run), or this one
    other = open_store(spark, str(tmp_path / "wh"))
    other.overwrite(table, [], "c", "cluster_id = 'd'")
    assert not store.may_hold(table, ["d"]) and store.may_hold(table, ["b"])
    store.overwrite(table, [], "c", "cluster_id = 'b'")
    assert not other.may_hold(table, ["b"]) and not store.may_hold(table)


def test_a_runs_spark_jobs_are_described_by_the_run_and_the_table_each_builds(spark: Any, tmp_path: Path) -> None:
    """In the Spark UI a run's jobs read "kraftlog <purpose> <run>", and an analysis's each "kraftlog <build>: <table>"
    (its tables are built in threads of their own); the thread's description is restored after."""
    from kraftlog.config import Config
    from kraftlog.spark.store import open_store, writing

    store = open_store(spark, str(tmp_path / "wh"))
    table = event_tables()["config_changes"]
    frame = spark.createDataFrame([], spark_schema(table))
    with writing(store, Config.load(), "R-described", "analyze"):
        store.ensure(table)
        spark.range(3).collect()
        assert store.replace([(table, lambda: (frame, None))], "B-described") == {table.name: 0}
    spark.range(2).collect()
    seen = spark_jobs(spark)
    texts = {job.description for job in seen.values()}
    assert "kraftlog analyze R-described" in texts and "kraftlog B-described: config_changes" in texts
    assert seen[max(seen)].description is None  # the job after the run
    assert spark.sparkContext.getLocalProperty("spark.job.description") is None


def test_a_tables_rows_are_written_by_every_task_slot_or_by_the_driver_in_a_small_run(
        spark: Any, tmp_path: Path, monkeypatch: Any) -> None:
    """``TableStore.replace`` writes a table's rows in as many tasks as the cluster runs at once (a file of a
    cluster each); a small run's are collected and written by the driver, in one file, with no Python task."""
    from kraftlog.config import Config
    from kraftlog.spark.session import default_parallelism
    from kraftlog.spark.store import open_store, writing

    store = open_store(spark, str(tmp_path / "wh"))
    table = event_tables()["log_gaps"]
    frame = spark.createDataFrame([("c", i, i, 1) for i in range(0, 400, 2)], spark_schema(table)).repartition(4)
    tasks: list[bool] = []  # per Python map started: whether the run was small
    mapped = type(frame).mapInArrow
    files, rows = {}, {}
    with writing(store, Config.load(), "R-writers", "analyze"):
        store.ensure(table)
        for small in (False, True):
            monkeypatch.setattr(type(frame), "mapInArrow", lambda df, *a, s=small, **k: (
                tasks.append(s), mapped(df, *a, **k))[1])
            assert store.replace([(table, lambda: (frame, None))], f"B-{small}", small=small) == {table.name: 200}
            files[small] = len(DeltaTable(str(tmp_path / "wh" / table.name)).file_uris())
            rows[small] = sorted(DeltaTable(str(tmp_path / "wh" / table.name)).to_pyarrow_table().to_pylist(),
                                 key=lambda r: r["from_offset"])
    assert files == {False: default_parallelism(spark), True: 1} and files[False] > 1
    assert tasks == [False] and rows[True] == rows[False] and len(rows[True]) == 200


def test_where_the_earliest_open_window_began_is_read_from_the_open_rows_files(spark: Any, sample_events: Any,
                                                                               monkeypatch: Any) -> None:
    """``analyze_state.window_floor`` (per cluster, where the earliest window open in a ``WINDOW`` table began): the
    store reads it on the driver from the files its log says hold open rows (``open_least``), the same as the rows
    tell in Spark; where those files are too many bytes, Spark reads them."""
    from kraftlog.analytics.definitions import WINDOW, increment_of
    from kraftlog.spark import store as store_module
    from kraftlog.spark.analyze import window_floors
    from kraftlog.spark.store import open_store

    wh, _ = sample_events
    store = open_store(spark, str(wh))
    windows = [t for t in event_tables().values() if increment_of(t) == WINDOW]
    clusters = [r[0] for r in store.read(windows[0]).select("cluster_id").distinct().collect()]
    expected = {t.name: {r[0]: r[1] for r in store.read(t).filter(F.col("to_offset").isNull())
                         .groupBy("cluster_id").agg(F.min("from_offset")).collect()} for t in windows}
    assert any(expected.values())  # (the sample ends with windows open)
    assert {t.name: store.open_least(t, "from_offset", clusters) for t in windows} == expected
    assert all(store.open_least(t, "from_offset", ["no-such-cluster"]) == {} for t in windows)
    floors = window_floors(store, clusters)
    assert floors == {c: min(f[c] for f in expected.values() if c in f) for c in set().union(*expected.values())}
    monkeypatch.setattr(store_module, "OPEN_READ_BYTES", 0)
    assert [store.open_least(t, "from_offset", clusters) for t in windows if expected[t.name]] == [None] * len(
        [t for t in windows if expected[t.name]])
    assert window_floors(store, clusters) == floors


def test_a_store_reads_a_tables_log_once_a_run_and_sees_a_table_another_run_made_anew(spark: Any, tmp_path: Path
                                                                                      ) -> None:
    """delta-rs: within a run a table's log is read once, then brought up to date; a new run reads it again, as
    another run may have dropped the table and created it anew (its versions begin again at 0)."""
    import pyarrow as pa

    from kraftlog.config import Config
    from kraftlog.spark.store import open_store, writing
    from kraftlog.state.entities import history_tables

    config = Config.load(warehouse={"path": str(tmp_path / "wh")})
    table = history_tables()["acls"]
    ours, theirs = open_store(spark, config.warehouse), open_store(spark, config.warehouse)

    def put(store: Any, cluster: str, run: str) -> None:
        store.ensure(table)
        row = {f.name: None for f in table.schema} | {"cluster_id": cluster, "valid_from_offset": 0}
        store.overwrite(table, store.stage_small(table, pa.Table.from_pylist([row], schema=table.schema), run), run)

    with writing(ours, config, "r1", "test"):
        put(ours, "b", "r1")
        assert ours.table(table) is ours.table(table) and ours.may_hold(table, ["b"])
    with writing(theirs, config, "r2", "test"):
        theirs.drop(table)
        put(theirs, "d", "r2")
    with writing(ours, config, "r3", "test"):
        assert ours.may_hold(table, ["d"]) and not ours.may_hold(table, ["b"])


def test_a_frame_is_made_once_per_name_and_a_thread_waits_only_for_the_name_it_asks() -> None:
    """The event builders run in threads of their own (``TableStore.replace``) and share the frames analyze makes
    by name (the histories' filters, the persisted shared frames): while one thread makes a name, another makes a
    different name at once, and a third asking for the first name gets that same value, made once."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    from kraftlog.spark.analyze import _Once

    once, made = _Once(), list[str]()
    started, release = threading.Event(), threading.Event()

    def slow() -> object:
        made.append("a")
        started.set()
        assert release.wait(30)
        return object()

    with ThreadPoolExecutor(3) as pool:
        first = pool.submit(once.get, "a", slow)
        assert started.wait(30)
        again = pool.submit(once.get, "a", lambda: made.append("a again"))
        other = pool.submit(once.get, "b", lambda: made.append("b") or "B")
        assert other.result(timeout=30) == "B"  # not held up by "a", still being made
        assert not again.done()  # waits for "a"
        release.set()
        assert again.result(timeout=30) is first.result(timeout=30)
    assert sorted(made) == ["a", "b"]
