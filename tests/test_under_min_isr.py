"""``under_min_isr`` and ``under_replicated`` against their evaluation version by version (``event_oracle``) on
random histories.

Random version chains of a few partitions and of every min.insync.replicas config that can apply to them (their
topics', their leaders' brokers', the cluster default), on a small offset range so that boundaries meet: a config
changing where a partition version begins, a partition deleted or its leader moved while under min ISR, values
that are not numbers, replica sets growing and shrinking, a partition deleted and born again. Each version carries
what it replaced (``previous_*``) as the replay writes it. Many clusters per example, one Spark job.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from conftest import examples
from event_oracle import UNDER_REPLICATED, as_evaluated, replaces, under_min_isr_windows, under_replicated_windows
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kraftlog.analytics.events import Inputs, under_min_isr, under_replicated
from kraftlog.spark.store import spark_schema
from kraftlog.state.entities import history_tables, replay_ranges_table

T0 = datetime(2026, 1, 1, tzinfo=UTC)
TOPICS = {"t-a": "a", "t-b": "b"}
PARTITIONS = [("t-a", 0), ("t-a", 1), ("t-b", 0)]
CONFIGS = [("TOPIC", "a"), ("TOPIC", "b"), ("BROKER", "1"), ("BROKER", "2"), ("BROKER", "")]
Row = dict[str, Any]


def _time(offset: int | None) -> datetime | None:
    return None if offset is None else T0 + timedelta(seconds=offset)


@st.composite
def chain(draw: Any, values: st.SearchStrategy[Any]) -> list[tuple[int, int | None, str | None, Any]]:
    """The versions of one entity, ``(valid_from, valid_to, ended_by, value)``: each step a gap in offsets and a new
    value (None: the entity deleted)."""
    offset, out, live = draw(st.integers(0, 4)), [], None
    for gap, value in draw(st.lists(st.tuples(st.integers(1, 4), st.one_of(st.none(), values)), max_size=8)):
        if live is not None:
            out.append((live[0], offset, "update" if value is not None else "delete", live[1]))
            live = None
        if value is not None:
            live = (offset, value)
        offset += gap
    return out if live is None else [*out, (live[0], None, None, live[1])]


def _versions(cluster: str, key: dict[str, Any], versions: list[tuple[int, int | None, str | None, Any]],
              value: Any) -> list[Row]:
    return [{"cluster_id": cluster, **key, **value(v), "valid_from_offset": f, "valid_to_offset": t,
             "valid_from": _time(f), "valid_to": _time(t), "ended_by": e} for f, t, e, v in versions]


_PARTITION = st.tuples(st.lists(st.sampled_from([1, 2, 3]), max_size=3, unique=True), st.sampled_from([-1, 1, 2]),
                       st.sampled_from([[1, 2, 3], [1, 2, 3], [1, 2], [1, 2, 3, 4]]))


def _replaced(versions: list[Row]) -> list[Row]:
    """``versions`` (of one partition, in order) with what each replaced, as the replay writes it: the values of the
    version before where that one ended by an update where this one begins (``previous_*``; null otherwise)."""
    out: list[Row] = []
    for v in versions:
        before = out[-1] if out and replaces(v, out[-1]) else None
        out.append({**v, "previous_leader": None if before is None else before["leader"],
                    "previous_isr": None if before is None else before["isr"],
                    "previous_elr": None if before is None else [],
                    "previous_leader_recovery_state": None if before is None else "RECOVERED"})
    return out


@st.composite
def cluster(draw: Any, name: str) -> tuple[list[Row], list[Row]]:
    """The partition and config history rows of one cluster."""
    partitions = [row for topic, p in PARTITIONS for row in _replaced(_versions(
        name, {"topic_id": topic, "partition_id": p}, draw(chain(_PARTITION)),
        lambda v, topic=topic: {"topic_name": TOPICS[topic], "isr": v[0], "leader": v[1], "replicas": v[2]}))]
    configs = [row for (rtype, rname) in CONFIGS for row in _versions(
        name, {"resource_type": rtype, "resource_name": rname, "name": "min.insync.replicas"},
        draw(chain(st.sampled_from(["1", "2", "3", "x"]))), lambda v: {"value": v})]
    return partitions, configs


def _frame(spark: Any, kind: str, rows: list[Row]) -> Any:
    table = history_tables()[kind]
    return spark.createDataFrame([{f.name: r.get(f.name) for f in table.schema} for r in rows], spark_schema(table))


def _inputs(spark: Any, drawn: tuple[Any, ...]) -> Inputs:
    """What the builders read of the ``drawn`` clusters: their partition and config histories, and replay ranges
    (no base snapshot, the log's end at offset 60)."""
    ranges_table = replay_ranges_table()
    ranges = spark.createDataFrame(
        [{**{f.name: None for f in ranges_table.schema}, "cluster_id": f"c{i}", "base_offset": -1,
          "last_timestamp": _time(60)} for i in range(len(drawn))], spark_schema(ranges_table))
    partitions = [r for p, _ in drawn for r in p]
    configs = [r for _, c in drawn for r in c]
    return Inputs({"partitions": _frame(spark, "partitions", partitions), "configs": _frame(spark, "configs", configs)},
                  lambda name: None, ranges)  # type: ignore[arg-type,return-value]


# many clusters an example: one job
_CLUSTERS = st.lists(st.integers(), min_size=20, max_size=20).flatmap(
    lambda xs: st.tuples(*[cluster(f"c{i}") for i in range(len(xs))]))


@settings(max_examples=examples(9), deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(drawn=_CLUSTERS)
def test_under_min_isr_equals_its_point_by_point_evaluation(spark: Any, drawn: tuple[Any, ...]) -> None:
    got = as_evaluated(under_min_isr(_inputs(spark, drawn)).toArrow().to_pylist())
    assert got == under_min_isr_windows([r for p, _ in drawn for r in p], [r for _, c in drawn for r in c])


@settings(max_examples=examples(9), deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(drawn=_CLUSTERS)
def test_under_replicated_equals_its_version_by_version_walk(spark: Any, drawn: tuple[Any, ...]) -> None:
    """A window goes on only from the version just before it, flagged too (``islands`` orders only the flagged
    versions, so a flagged version after an unflagged one, a deletion or a gap must start a window of its own)."""
    got = as_evaluated(under_replicated(_inputs(spark, drawn)).toArrow().to_pylist(), UNDER_REPLICATED)
    assert got == under_replicated_windows([r for p, _ in drawn for r in p])
