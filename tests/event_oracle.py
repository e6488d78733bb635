"""Event tables computed the slow, obvious way from a warehouse's histories: oracles for the Spark builders.

``under_min_isr_windows`` evaluates every point of every partition one by one, as the table's description says:
each version begun, each deletion, each min.insync.replicas boundary applying to the partition (its topic's
config, its leader's broker config, the cluster default), with the version and the configs holding there.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

from deltalake import DeltaTable

Row = dict[str, Any]


def _rows(wh: Path, name: str) -> list[Row]:
    return DeltaTable(str(wh / name)).to_pyarrow_table().to_pylist()


def _holds(v: Row, at: int) -> bool:
    return v["valid_from_offset"] <= at and (v["valid_to_offset"] is None or at < v["valid_to_offset"])


def _int(value: str | None) -> int | None:
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def under_min_isr_windows(partitions: list[Row], configs: list[Row]) -> list[tuple[Any, ...]]:
    """The ``under_min_isr`` rows (cluster, topic id and name, partition, from/to offset and time,
    min.insync.replicas and its source, smallest ISR), evaluated point by point from the rows of the partition and
    config histories."""
    mir: dict[str, list[Row]] = defaultdict(list)
    for c in configs:
        if c["name"] == "min.insync.replicas":
            mir[c["cluster_id"]].append(c)
    versions: dict[tuple[str, str, int], list[Row]] = defaultdict(list)
    for p in partitions:
        versions[(p["cluster_id"], p["topic_id"], p["partition_id"])].append(p)
    return sorted((w for key, vs in versions.items() for w in _windows(key, vs, mir[key[0]])), key=repr)


def evaluated(wh: Path) -> list[tuple[Any, ...]]:
    """``under_min_isr_windows`` of the histories of warehouse ``wh``."""
    return under_min_isr_windows(_rows(wh, "partitions_history"), _rows(wh, "configs_history"))


def _applies(c: Row, v: Row) -> bool:
    """Whether min.insync.replicas config version ``c`` applies to partition version ``v``."""
    name = c["resource_name"]
    return (name == v["topic_name"]) if c["resource_type"] == "TOPIC" else name in ("", str(v["leader"]))


def _in_force(mir: list[Row], v: Row, at: int) -> tuple[int, str]:
    """min.insync.replicas in force for partition version ``v`` at ``at``, and where it comes from."""
    for source, rtype, name in (("topic", "TOPIC", v["topic_name"]), ("broker", "BROKER", str(v["leader"])),
                                ("cluster_default", "BROKER", "")):
        found = [_int(c["value"]) for c in mir
                 if c["resource_type"] == rtype and c["resource_name"] == name and _holds(c, at)]
        if found and found[0] is not None:
            return found[0], source
    return 1, "kafka_default"


def _windows(key: tuple[str, str, int], vs: list[Row], mir: list[Row]) -> list[tuple[Any, ...]]:
    """The windows of one partition (``key``) from its versions ``vs`` and its cluster's ``mir`` configs."""
    def holding(at: int) -> Row | None:
        return next((v for v in vs if _holds(v, at)), None)

    points: dict[int, Any] = {}  # offset -> its latest time
    candidates = [(v["valid_from_offset"], v["valid_from"]) for v in vs]
    candidates += [(v["valid_to_offset"], v["valid_to"]) for v in vs if v["ended_by"] == "delete"]
    for c in mir:
        for at, time in ((c["valid_from_offset"], c["valid_from"]), (c["valid_to_offset"], c["valid_to"])):
            v = None if at is None else holding(at)
            if v is not None and _applies(c, v):
                candidates.append((at, time))
    for at, time in candidates:
        points[at] = max(points.get(at, time), time)
    out, window = [], None
    for at in sorted(points):
        v = holding(at)
        value, source = _in_force(mir, v, at) if v is not None else (0, "")
        if v is not None and len(v["isr"]) < value:
            if window is None:
                window = [*key[:2], v["topic_name"], key[2], at, points[at], None, None, value, source, len(v["isr"])]
            window[10] = min(window[10], len(v["isr"]))
        elif window is not None:
            window[6], window[7] = at, points[at]
            out.append(tuple(window))
            window = None
    return out if window is None else [*out, tuple(window)]


def replaces(v: Row, before: Row) -> bool:
    """Whether version ``v`` replaced ``before``, the version of the same entity before it: that one ended by an
    update where ``v`` begins."""
    return before["ended_by"] == "update" and before["valid_to_offset"] == v["valid_from_offset"]


def under_replicated_windows(partitions: list[Row]) -> list[tuple[Any, ...]]:
    """The ``under_replicated`` rows (cluster, topic id and name, partition, from/to offset and time, smallest ISR,
    replica count at the start) walked version by version: a window is a run of versions with fewer in-sync replicas
    than replicas, each replacing the one before (that one ended by an update where it began)."""
    versions: dict[tuple[str, str, int], list[Row]] = defaultdict(list)
    for p in partitions:
        versions[(p["cluster_id"], p["topic_id"], p["partition_id"])].append(p)
    out = []
    for key, vs in versions.items():
        window: list[Any] | None = None
        before: Row | None = None
        for v in sorted(vs, key=lambda v: v["valid_from_offset"]):
            if window is not None and not (before is not None and replaces(v, before)):
                out.append(tuple(window))
                window = None
            if len(v["isr"]) < len(v["replicas"]):
                if window is None:
                    window = [*key[:2], v["topic_name"], key[2], v["valid_from_offset"], v["valid_from"], None, None,
                              len(v["isr"]), len(v["replicas"])]
                window[6], window[7] = v["valid_to_offset"], v["valid_to"]
                window[8] = min(window[8], len(v["isr"]))
            elif window is not None:
                out.append(tuple(window))
                window = None
            before = v
        if window is not None:
            out.append(tuple(window))
    return sorted(out, key=repr)


UNDER_REPLICATED = ["cluster_id", "topic_id", "topic_name", "partition_id", "from_offset", "from_time", "to_offset",
                    "to_time", "min_isr_size", "replicas_count"]  # the columns ``under_replicated_windows`` gives


COLUMNS = ["cluster_id", "topic_id", "topic_name", "partition_id", "from_offset", "from_time", "to_offset", "to_time",
           "min_insync_replicas", "config_source", "min_isr_size"]  # the columns ``under_min_isr_windows`` gives


def as_evaluated(rows: list[Row], columns: list[str] = COLUMNS) -> list[tuple[Any, ...]]:
    """Rows of an event table as its oracle gives them (``columns``: by default ``under_min_isr``'s)."""
    return sorted((tuple(r[c] for c in columns) for r in rows), key=repr)


def under_min_isr_rows(wh: Path) -> list[tuple[Any, ...]]:
    """The ``under_min_isr`` table of warehouse ``wh`` as ``under_min_isr_windows`` gives it."""
    return as_evaluated(_rows(wh, "under_min_isr"))
