"""What lets an hourly ``reconstruct`` cost what the hour touched, on the replayer alone (no Spark).

* A replay going on needs in its image only the entity kinds its records' rules read (``Replayer.kinds_read``)
  and, of the topics and partitions, only the partitions its PartitionChanges name and the topics its other
  topic and partition records name, whole (``Replayer.topics_read``): it restores, and rewrites, only those open
  versions, so a big cluster's hour that touches a few partitions costs those, not its 10k topics and 150k
  partitions.
* Closed versions are handed over in the order they end, so the history files' Parquet statistics on
  ``valid_to_offset`` let an increment skip the row groups of versions that ended before it.
"""

from __future__ import annotations

import copy
from typing import Any

from history_gen import Item, _encode, log_items
from hypothesis import HealthCheck, given, settings

from kraftlog.spark.predicates import TOPICS_NAMED, named_topics
from kraftlog.state.history import Versions, as_dict
from kraftlog.state.replay import Change, Event, Replayer, TopicsRead
from kraftlog.wire.messages import default_codec


def events(items: list[Item], start: int = 0) -> list[Event]:
    """The generated records decoded, as the landed tables give them to replay, from offset ``start``."""
    codec = default_codec()
    out = []
    for offset, item in enumerate(items, start):
        key, value, is_control = _encode(item)
        d = codec.decode_control(key, value) if is_control else codec.decode_metadata(value)
        out.append(Event(offset, 1000 + offset, 1, d))
    return out


def replayed(evs: list[Event]) -> Replayer:
    r = Replayer()
    for e in evs:
        r.apply(e)
    return r


def named(evs: list[Event]) -> list[tuple[str, str | None, int | None]]:
    """(record type, topic id, partition id) of each record, as the Spark build reads them from the typed tables."""
    return [(e.decoded.type or "", data.get("topic_id"), data.get("partition_id"))
            for e in evs if e.decoded.status == "ok" for data in [e.decoded.data or {}]]


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(log=log_items(min_size=1, max_size=60), later=log_items(min_size=1, max_size=30))
def test_records_change_the_same_with_only_the_kinds_partitions_and_topics_they_name(log: list[Item],
                                                                                   later: list[Item]) -> None:
    head, tail = events(log), events(later, len(log))
    whole = replayed(head)
    if whole.open_transaction is not None:  # the build goes on from the Begin (its records are replayed again)
        begin = whole.open_transaction
        head, tail = head[:begin], head[begin:] + tail
        whole = replayed(head)
    records = named(tail)
    topics = Replayer.topics_read(records)
    kinds = Replayer.kinds_read(t for t, _, _ in records)
    part = copy.deepcopy(whole)
    # only the kinds the records' rules read: a rule touching another kind fails here (no such kind in the image)
    part.image.entities = {kind: entities for kind, entities in part.image.entities.items() if kind in kinds}
    if topics is not None:
        for kind in Replayer.TOPIC_KINDS & kinds:
            part.image.entities[kind] = {k: v for k, v in whole.image.entities[kind].items() if topics.holds(kind, k)}
    left = {kind: {k: v for k, v in whole.image.entities[kind].items() if k not in part.image.entities.get(kind, {})}
            for kind in whole.image.entities}
    found: dict[str, list[Change]] = {"whole": [], "part": []}
    whole.on_change, part.on_change = found["whole"].append, found["part"].append
    for e in tail:
        whole.apply(e)
        part.apply(e)
    whole.finish()
    part.finish()
    assert found["part"] == found["whole"]
    assert part.problems == whole.problems
    # the entities left out are those the records never touched: the whole image still holds them as they were
    assert {kind: {k: whole.image.entities[kind].get(k) for k in out} for kind, out in left.items()} == left
    assert part.image.entities == {kind: {k: v for k, v in whole.image.entities[kind].items() if k not in left[kind]}
                                   for kind in kinds}


def test_kinds_read_are_those_the_rules_of_the_record_types_read_or_change() -> None:
    assert Replayer.kinds_read(["PARTITION_CHANGE_RECORD", "CONFIG_RECORD", "NO_OP_RECORD"]) == {"partitions",
                                                                                               "configs"}
    assert Replayer.kinds_read(["REMOVE_TOPIC_RECORD"]) == {"topics", "partitions", "configs"}
    assert Replayer.kinds_read(["BEGIN_TRANSACTION_RECORD", "NO_OP_RECORD"]) == set()


def test_topics_read_names_partitions_of_partition_changes_topics_of_topic_records_and_any_for_clear_elr() -> None:
    records = [("PARTITION_CHANGE_RECORD", "a", 0), ("TOPIC_RECORD", "b", None), ("REMOVE_TOPIC_RECORD", "c", None),
               ("PARTITION_RECORD", "d", 2), ("PARTITION_CHANGE_RECORD", "b", 1), ("PARTITION_CHANGE_RECORD", "e", 3),
               ("CONFIG_RECORD", None, None), ("FENCE_BROKER_RECORD", None, None)]
    read = Replayer.topics_read(records)
    # a PartitionRecord reads its topic: the topic whole; b's partition: b is whole
    assert read == TopicsRead(frozenset({"b", "c", "d"}), frozenset({("a", 0), ("e", 3)}))
    assert read is not None and read.holds("partitions", ("a", 0)) and read.holds("partitions", ("d", 7))
    assert read.holds("topics", ("d",)) and not read.holds("topics", ("a",))  # a PartitionChange reads no topic
    assert not read.holds("partitions", ("a", 1))
    assert Replayer.topics_read([("FENCE_BROKER_RECORD", None, None)]) == TopicsRead()
    assert Replayer.topics_read([*records, ("CLEAR_ELR_RECORD", None, None)]) is None


def test_an_increment_naming_more_than_a_list_holds_reads_its_topics_whole_then_every_topic() -> None:
    many = TopicsRead.of([], [(f"t{i % 10}", i) for i in range(TOPICS_NAMED + 1)])
    assert named_topics(many) == TopicsRead(frozenset(f"t{i}" for i in range(10)))
    assert named_topics(TopicsRead.of([f"t{i}" for i in range(TOPICS_NAMED + 1)], [])) is None
    assert named_topics(None) is None
    few = TopicsRead.of(["a"], [("a", 1), ("b", 0)])
    assert named_topics(few) == few == TopicsRead(frozenset({"a"}), frozenset({("b", 0)}))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(log=log_items(min_size=1, max_size=80))
def test_closed_versions_are_handed_over_in_the_order_they_end(log: list[Item]) -> None:
    rows: list[dict[str, Any]] = []
    history = Versions("c", lambda kind, row: rows.append(as_dict(kind, row)))
    r = Replayer(history.add)
    for e in events(log):
        r.apply(e)
    r.finish()
    history.finish()
    ends = [row["valid_to_offset"] for row in rows]
    closed = ends[:len(ends) - ends.count(None)]
    assert None not in closed and closed == sorted(closed)  # in the order they end, then the current ones
