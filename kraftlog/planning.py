"""Plan an ingest run: which changed files can land directly, which compete with other copies.

A record's key is (cluster, log offset) for log segments and (cluster, snapshot id, position) for
snapshots. A file can land directly ("clean") when no record key it holds can also come from another
file of the run or was landed by an earlier run: then there is nothing to choose. That is the usual
case: a single-node cluster, or the new tail of a segment that grew since the last run (when the part
ingested before is byte-for-byte unchanged). Replicas of one log on several nodes, snapshots taken by
several nodes at the same offset, and files rewritten in place "compete": their records go through
the record-level rules of ``kraftlog.tables.copies`` (and ``kraftlog.spark.transforms`` against
landed rows).

Offsets are known from the batch headers alone (``kraftlog.tables.rows.summarize``), so planning
costs a header walk. Most clusters do not need even that: ``plan_by_name`` proves from the listing
alone (file names, data directories, the ledger) that nothing of a cluster competes, and its files
land in the same pass that reads them for the first time.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import defaultdict
from collections.abc import Hashable
from dataclasses import dataclass

from kraftlog.tables.rows import EVERY_OFFSET, Ingested, KeepSpec
from kraftlog.wire.files import FileInfo

MAX_OFFSET = (1 << 63) - 1


@dataclass(frozen=True)
class PlannedFile:
    """What the planner needs to know about one changed file."""

    path: str
    cluster_id: str
    kind: str  # segment | snapshot | bootstrap
    snapshot_id: str | None
    first_offset: int | None
    last_offset: int | None
    sha256: str
    previous_size: int | None = None  # size when an earlier run ingested this path
    previous_last_offset: int | None = None
    prefix_unchanged: bool = False  # the first previous_size bytes are what the earlier run ingested
    prefix_epoch: int | None = None  # with them: the epoch of the batch ending at previous_size

    @property
    def ingested(self) -> Ingested | None:
        """What earlier runs ingested of this segment, where it grew from it."""
        if self.kind != "segment" or not self.prefix_unchanged or self.previous_last_offset is None:
            return None
        return Ingested(self.previous_last_offset, self.previous_size or 0, self.prefix_epoch)


@dataclass(frozen=True)
class Landed:
    """What earlier runs landed for one cluster: log offset intervals and snapshot ids."""

    intervals: tuple[tuple[int, int], ...] = ()
    snapshots: frozenset[str] = frozenset()


@dataclass
class Plan:
    """``clean``: path -> what to land; ``contested``: paths whose records need record-level choice."""

    clean: dict[str, KeepSpec]
    contested: list[str]


class _Overlaps:
    """Offset intervals, each with a label, that tell whether one of another label overlaps a span, in O(log n) a
    span (a catch-up run plans thousands of files, each against the others and against what landed before): sorted
    by start, with the two greatest ends of distinct labels among the intervals starting up to each one."""

    def __init__(self, intervals: list[tuple[tuple[int, int], Hashable]]):
        intervals = sorted(intervals, key=lambda item: item[0][0])
        self.starts = [lo for (lo, _), _ in intervals]
        none: tuple[int, Hashable] = (-1 << 64, None)
        top, second = none, none  # the greatest end so far, and the greatest of another label than top's
        self.ends: list[tuple[tuple[int, Hashable], tuple[int, Hashable]]] = []
        for (_, hi), label in intervals:
            if hi > top[0]:
                top, second = (hi, label), second if label == top[1] else top
            elif hi > second[0] and label != top[1]:
                second = (hi, label)
            self.ends.append((top, second))

    def any_other(self, span: tuple[int, int], label: Hashable) -> bool:
        """Whether an interval of a label other than ``label`` overlaps ``span`` (both inclusive)."""
        i = bisect_right(self.starts, span[1])  # the intervals that start at or before its end ...
        if not i:
            return False
        top, second = self.ends[i - 1]
        return (top if top[1] != label else second)[0] >= span[0]  # ... one of which ends at or after its start


def plan_files(files: list[PlannedFile], landed: dict[str, Landed]) -> Plan:
    """Split ``files`` into clean and contested (see the module docstring)."""
    clean: dict[str, KeepSpec] = {}
    contested: list[str] = []
    by_cluster: dict[str, list[PlannedFile]] = defaultdict(list)
    for f in files:
        by_cluster[f.cluster_id].append(f)
    for cluster, group in by_cluster.items():
        done = landed.get(cluster, Landed())
        snap_count: dict[str | None, int] = defaultdict(int)
        for f in group:
            if f.kind != "segment":
                snap_count[f.snapshot_id] += 1
        # the offsets each segment would add: everything, or only the tail past what was ingested
        spans: dict[str, tuple[int, int] | None] = {}
        own: dict[str, tuple[int, int] | None] = {}
        for f in group:
            if f.kind != "segment" or f.first_offset is None or f.last_offset is None:
                spans[f.path] = None
                continue
            start = f.first_offset
            if f.prefix_unchanged and f.previous_last_offset is not None:
                start = f.previous_last_offset + 1
                own[f.path] = (f.first_offset, f.previous_last_offset)
            spans[f.path] = (start, f.last_offset) if start <= f.last_offset else None
        others = _Overlaps([(s, p) for p, s in [*spans.items(), *own.items()] if s is not None])
        prior = _Overlaps([(iv, iv) for iv in done.intervals])
        for f in group:
            grown = f.prefix_unchanged and f.previous_size is not None
            keep_batches = f.previous_size if grown else 0
            if f.kind != "segment":
                if snap_count[f.snapshot_id] == 1 and f.snapshot_id not in done.snapshots and not grown:
                    clean[f.path] = KeepSpec((EVERY_OFFSET,), 0, sha256=f.sha256)
                elif grown:  # a snapshot file does not grow; an unchanged prefix means nothing new
                    clean[f.path] = KeepSpec((), keep_batches or 0, sha256=f.sha256)
                else:
                    contested.append(f.path)
                continue
            span = spans[f.path]
            if span is None:  # no records, or nothing past what was ingested
                clean[f.path] = KeepSpec((), keep_batches or 0, sha256=f.sha256)
                continue
            # another file's offsets, or offsets landed before (but what this segment landed itself)
            if others.any_other(span, f.path) or prior.any_other(span, own.get(f.path)):
                contested.append(f.path)
            else:
                clean[f.path] = KeepSpec((span,) if grown else (EVERY_OFFSET,), keep_batches or 0, sha256=f.sha256)
    return Plan(clean, sorted(contested))


@dataclass(frozen=True)
class ListedFile:
    """What the listing says of one changed file: its cluster, data directory and name."""

    path: str
    cluster_id: str
    data_dir: str
    info: FileInfo
    known: bool = False  # an earlier run ingested this path (it grew or was rewritten)


def plan_by_name(files: list[ListedFile], landed: dict[str, Landed],
                 landed_dirs: dict[str, frozenset[str]]) -> dict[str, KeepSpec]:
    """Files that land without a header pass: those of clusters whose names prove nothing competes.

    A cluster qualifies when all of its files, in this run and in the ledger, come from one data
    directory, none was ingested before, no snapshot id repeats or was landed, and it brings at most
    one segment. Names cannot bound what several segments hold (real logs have a segment running past
    the next one's base offset), so a cluster with more than one new segment is planned from its
    headers. A new segment after landed offsets keeps its base offset and above, ``strict``ly: a
    record below it is reported, not landed twice. Clusters that do not qualify are left out:
    ``plan_files`` plans them from their headers.
    """
    out: dict[str, KeepSpec] = {}
    by_cluster: dict[str, list[ListedFile]] = defaultdict(list)
    for f in files:
        by_cluster[f.cluster_id].append(f)
    for cluster, group in by_cluster.items():
        done = landed.get(cluster, Landed())
        dirs = {f.data_dir for f in group} | landed_dirs.get(cluster, frozenset())
        snaps = [f.info.snapshot_id for f in group if f.info.kind != "segment"]
        segments = [f for f in group if f.info.kind == "segment"]
        if len(dirs) > 1 or len(segments) > 1 or any(f.known for f in group) or len(snaps) != len(set(snaps)) \
                or any(s in done.snapshots for s in snaps):
            continue
        if segments and done.intervals:
            base = segments[0].info.base_offset or 0
            if base <= max(hi for _, hi in done.intervals):
                continue
            out[segments[0].path] = KeepSpec(((base, MAX_OFFSET),), strict=True)
        elif segments:
            out[segments[0].path] = KeepSpec((EVERY_OFFSET,))
        out.update((f.path, KeepSpec((EVERY_OFFSET,))) for f in group if f.info.kind != "segment")
    return out


def pack(sizes: dict[str, int], bins: int) -> list[list[str]]:
    """Keys in at most ``bins`` groups of about equal total size (largest first, each to the lightest group); the
    groups heaviest first (Spark starts a stage's tasks in partition order: the longest ones start first)."""
    groups: list[list[str]] = [[] for _ in range(max(1, bins))]
    load = [0] * len(groups)
    for key in sorted(sizes, key=lambda k: (-sizes[k], k)):
        i = load.index(min(load))
        groups[i].append(key)
        load[i] += sizes[key]
    return [groups[i] for i in sorted(range(len(groups)), key=lambda i: -load[i]) if groups[i]]
