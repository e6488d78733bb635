"""Cluster state from local data directories, without Spark: a metadata shell for any offset.

``load_clusters`` reads data directories, groups them by cluster and assembles each cluster's log the
way the ingest does (one copy per offset: a valid CRC first, then the higher batch epoch, then the
lower node id) with its snapshots. Then:

* ``replay_to`` / ``state_at``: the image at any offset or time;
* ``history``: every entity change;
* ``verify``: for every snapshot the available log reaches, the replayed state at its end offset
  against the snapshot's own contents.

Replay starts from an empty image when the log is complete from offset 0; otherwise from the base
snapshot: the earliest snapshot at or after the start of the log's last gap-free run.
"""

from __future__ import annotations

import bisect
import dataclasses
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kraftlog.points import check_in_log
from kraftlog.state.bases import Base, SnapshotRef, choose_base, run_start, snapshot_reach
from kraftlog.state.entities import KINDS
from kraftlog.state.replay import Change, Event, Image, Replayer
from kraftlog.tables.copies import SNAPSHOT_COPY_ORDER, copy_rank
from kraftlog.tables.rows import CORRUPT_BATCH, value_hash
from kraftlog.wire.discover import DataDir, find_data_dirs
from kraftlog.wire.files import BOOTSTRAP, SEGMENT, parse_meta_properties, paused_gc, read_file
from kraftlog.wire.messages import Decoded
from kraftlog.wire.redact import Redactor, default_redactor


@dataclass(frozen=True, eq=False)
class Snapshot(SnapshotRef):
    """A snapshot file's contents: state as of ``offset`` (= endOffset - 1)."""

    events: list[Event] = field(default_factory=list)
    node_id: int | None = None
    path: str = ""


@dataclass
class ClusterLog:
    """One cluster's canonical log (offset -> event) and its snapshots."""

    cluster_id: str
    nodes: list[int | None] = field(default_factory=list)
    log: dict[int, Event] = field(default_factory=dict)
    snapshots: dict[str, Snapshot] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    @property
    def offsets(self) -> list[int]:
        return sorted(self.log)

    def base(self) -> Base:
        """Where replay starts (``kraftlog.state.bases``); a problem is recorded once."""
        offsets = self.offsets
        base = choose_base(run_start(offsets), offsets[-1] if offsets else None, self.snapshots.values(),
                           self.log_epochs)
        if base.problem and base.problem not in self.problems:
            self.problems.append(base.problem)
        return base

    @property
    def log_epochs(self) -> dict[int, int]:
        """Batch epoch of the log at each snapshot's offset."""
        return {s.offset: self.log[s.offset].epoch for s in self.snapshots.values() if s.offset in self.log}

    def timestamp_offset(self, ts_ms: int) -> int:
        """The last log offset whose record timestamp is at or before ``ts_ms`` (-1 if none)."""
        best = -1
        for o in self.offsets:
            if self.log[o].timestamp <= ts_ms:
                best = o
        return best


def _events(path: str, redactor: Redactor) -> tuple[list[tuple[Event, bool]], list[str]]:
    out: list[tuple[Event, bool]] = []
    read = read_file(path)
    for b, r in read.records():
        d: Decoded = r.decoded  # type: ignore[assignment]
        ok = b.crc_valid and not b.errors
        if not ok:  # kept, but never trusted by replay (as in the records table)
            d = dataclasses.replace(d, status=CORRUPT_BATCH)
        out.append((Event(r.offset, r.timestamp, b.partition_leader_epoch, redactor(d) if d.data else d,
                          value_hash(r.key, r.value)), ok))
    return out, [e.describe() for e in read.errors]


def load_clusters(paths: Iterable[str | Path], redact: bool = True) -> list[ClusterLog]:
    """Every cluster found under ``paths`` (data directories, or folders above them).

    Data directories are grouped by ``meta.properties`` cluster.id within each path: unrelated
    deployments often share a tutorial's cluster id, so two paths are never merged. A path that holds no data
    directory, or is a file, is a ``NoInputError`` naming it (a mistyped path is not an empty cluster).
    """
    redactor: Redactor | Callable[[Decoded], Decoded] = default_redactor() if redact else (lambda d: d)
    clusters: dict[str, ClusterLog] = {}
    best: dict[str, dict[int, tuple[tuple[Any, ...], Event]]] = {}
    snapshot_rank: dict[tuple[str, str], tuple[Any, ...]] = {}
    roots = [str(p) for p in paths]
    dirs: list[tuple[str, DataDir]] = [(p, dd) for p in roots for dd in find_data_dirs([p])]
    for root, dd in dirs:
        meta = parse_meta_properties(Path(dd.meta_properties.path).read_text()) if dd.meta_properties else None
        cluster_id = (meta.cluster_id if meta else None) or dd.root
        if len(roots) > 1:
            cluster_id = f"{root}:{cluster_id}"
        node = meta.node_id if meta else None
        cl = clusters.setdefault(cluster_id, ClusterLog(cluster_id))
        cl.nodes.append(node)
        for entry, info in dd.files:
            if info.kind == BOOTSTRAP:
                continue  # ignored as state sources, as Kafka's MetadataLoader does
            events, problems = _events(entry.path, redactor)  # type: ignore[arg-type]
            cl.problems.extend(problems)
            if info.kind == SEGMENT:
                mine = best.setdefault(cluster_id, {})
                for ev, ok in events:
                    rank = copy_rank({"trusted": ok, "batch_epoch": ev.epoch, "node_id": node, "file": entry.path})
                    if ev.offset not in mine or rank < mine[ev.offset][0]:
                        mine[ev.offset] = (rank, ev)
                continue
            if problems or not all(ok for _, ok in events):
                continue  # a corrupt or incomplete snapshot is no base (Kafka would not load it)
            rank = copy_rank({"trusted": True, "node_id": node, "file": entry.path}, SNAPSHOT_COPY_ORDER)
            label = info.snapshot_id or entry.path
            if (cluster_id, label) not in snapshot_rank or rank < snapshot_rank[cluster_id, label]:
                snapshot_rank[cluster_id, label] = rank
                assert info.end_offset is not None and info.epoch is not None
                header_ts = next((e.decoded.data or {}).get("last_contained_log_timestamp", 0)
                                 for e, _ in events if e.decoded.type == "SnapshotHeader") if events else 0
                cl.snapshots[info.snapshot_id or entry.path] = Snapshot(
                    info.snapshot_id or entry.path, info.end_offset - 1, info.epoch, header_ts or 0,
                    [e for e, _ in events], node, entry.path)
    for cluster_id, mine in best.items():
        clusters[cluster_id].log = {o: ev for o, (_, ev) in mine.items()}
    return [clusters[c] for c in sorted(clusters)]


def replay(cl: ClusterLog, upto: float = math.inf, on_change: Callable[[Change], None] | None = None,
           at_offsets: Iterable[int] = (), on_offset: Callable[[int, Image], None] | None = None) -> Replayer:
    """Replay ``cl`` up to offset ``upto`` (inclusive); ``on_offset`` sees the image after each of ``at_offsets``."""
    with paused_gc():  # (the image's dicts and lists are acyclic: the cyclic GC would rescan them, for nothing)
        return _replayed(cl, upto, on_change, at_offsets, on_offset)


def _replayed(cl: ClusterLog, upto: float, on_change: Callable[[Change], None] | None, at_offsets: Iterable[int],
              on_offset: Callable[[int, Image], None] | None) -> Replayer:
    r = Replayer(on_change)
    base = cl.base()
    snap = base.snapshot
    if snap is not None:
        assert isinstance(snap, Snapshot)
        r.load_snapshot(snap.events, snap.offset, snap.timestamp)
    marks = sorted(set(at_offsets))
    mi = 0
    while mi < len(marks) and marks[mi] < base.first:
        if on_offset is not None and marks[mi] == base.first - 1:
            on_offset(marks[mi], r.image)
        mi += 1
    for o in cl.offsets:
        if o < base.first:
            continue
        if o > upto:
            break
        r.apply(cl.log[o])
        while mi < len(marks) and marks[mi] <= o:
            if marks[mi] == o and on_offset is not None:
                on_offset(o, r.image)
            mi += 1
    r.finish()
    return r


def state_at(cl: ClusterLog, offset: int | None = None, timestamp_ms: int | None = None) -> Image:
    """The image as of a log offset (inclusive), or of a time; the end of the log by default."""
    if timestamp_ms is not None:
        offset = cl.timestamp_offset(timestamp_ms)
    base = cl.base()
    floor = base.snapshot.offset if base.snapshot is not None else base.first - 1
    if offset is not None:
        offsets = cl.offsets

        def times() -> tuple[int | None, int | None]:  # of the log records past the floor (asked only for an error)
            past = offsets[bisect.bisect_right(offsets, floor):]
            return (cl.log[past[0]].timestamp, cl.log[past[-1]].timestamp) if past else (None, None)

        check_in_log(cl.cluster_id, offset, floor, max(offsets[-1] if offsets else floor, floor),
                     base.snapshot.snapshot_id if base.snapshot else None, timestamp_ms, times)
    return replay(cl, math.inf if offset is None else offset).image


@dataclass
class Difference:
    """One field of one entity that differs between two images."""

    kind: str
    key: tuple[Any, ...]
    field: str
    left: Any
    right: Any

    def describe(self) -> str:
        return f"{self.kind} {self.key}: {self.field}: {self.left!r} != {self.right!r}"


def diff_images(left: Image, right: Image, kinds: Iterable[str] | None = None) -> list[Difference]:
    """Every entity and field that differs (``<missing>`` where an entity exists on one side only)."""
    out: list[Difference] = []
    for k in KINDS:
        if kinds is not None and k.name not in kinds:
            continue
        a, b = left.entities[k.name], right.entities[k.name]
        for key in sorted(a.keys() | b.keys(), key=repr):
            va, vb = a.get(key), b.get(key)
            if va == vb:
                continue
            if va is None or vb is None:
                out.append(Difference(k.name, key, "<entity>", "<missing>" if va is None else "present",
                                      "<missing>" if vb is None else "present"))
                continue
            for f in k.value_names:
                if va.get(f) != vb.get(f):
                    out.append(Difference(k.name, key, f, va.get(f), vb.get(f)))
    return out


@dataclass
class SnapshotCheck:
    snapshot_id: str
    offset: int
    node_id: int | None
    reachable: bool
    differences: list[Difference]
    note: str = ""


VerifyReport = list[tuple[str, list[SnapshotCheck]]]  # per cluster, its snapshot checks


def verify_lines(report: VerifyReport, quiet: bool = False) -> tuple[list[str], int]:
    """A verify report as text (a line per snapshot, then its differences; ``quiet``: only snapshots that differ;
    then the totals) and the number of snapshots that differ."""
    lines = []
    checked = differing = 0
    for cluster_id, checks in report:
        for c in checks:
            if not c.reachable:
                if not quiet:
                    lines.append(f"{cluster_id} {c.snapshot_id}: skipped ({c.note})")
                continue
            checked += 1
            differing += bool(c.differences)
            if c.differences or not quiet:
                lines.append(f"{cluster_id} {c.snapshot_id}: {len(c.differences)} difference(s)")
            lines.extend(f"  {d.describe()}" for d in c.differences)
    lines.append(f"snapshots checked: {checked}, with differences: {differing}")
    return lines, differing


def snapshot_image(s: Snapshot, previous: Image | None = None) -> Image:
    """The image a snapshot describes (loaded on top of ``previous`` as Kafka's loader does)."""
    r = Replayer()
    if previous is not None:
        r.image = previous.copy()
    r.load_snapshot(s.events, s.offset, s.timestamp)
    return r.image


def verify(cl: ClusterLog) -> list[SnapshotCheck]:
    """Replayed state vs. each snapshot's contents, at every snapshot the log reaches."""
    base = cl.base()
    offsets = cl.offsets
    last = offsets[-1] if offsets else None
    epochs = cl.log_epochs
    checks: list[SnapshotCheck] = []
    reachable: dict[int, list[Snapshot]] = {}
    for s in sorted(cl.snapshots.values(), key=lambda s: (s.offset, s.snapshot_id)):
        ok, note = snapshot_reach(s, base, last, epochs)
        if ok:
            reachable.setdefault(s.offset, []).append(s)
        else:
            checks.append(SnapshotCheck(s.snapshot_id, s.offset, s.node_id, False, [], note))

    def compare(offset: int, image: Image) -> None:
        for s in reachable.get(offset, []):
            # producer ids survive a snapshot without them: compare what the snapshot states
            expected = snapshot_image(s, image)
            checks.append(SnapshotCheck(s.snapshot_id, s.offset, s.node_id, True, diff_images(image, expected)))

    if reachable:
        replay(cl, max(reachable), at_offsets=reachable.keys(), on_offset=compare)
    return sorted(checks, key=lambda c: (c.offset, c.snapshot_id))


# -- rendering -----------------------------------------------------------------------------------------

def image_to_json(image: Image, kinds: Iterable[str] | None = None) -> dict[str, Any]:
    """The image as JSON-ready dicts: provenance, then one list of entities per kind."""
    out: dict[str, Any] = {"offset": image.offset, "timestamp": image.timestamp}
    for k in KINDS:
        if kinds is not None and k.name not in kinds:
            continue
        rows = []
        for key, value in sorted(image.entities[k.name].items(), key=lambda kv: repr(kv[0])):
            rows.append({**dict(zip(k.key_names, key, strict=True)), **value})
        out[k.name] = rows
    return out


def topic_names(*images: Image) -> dict[str, str]:
    """Topic id -> name over ``images`` (a later image's name wins: a deleted topic keeps its last name)."""
    return {key[0]: value["name"] for image in images for key, value in image.entities["topics"].items()}


def diff_to_json(diffs: list[Difference], names: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """One JSON object per difference; ``names`` (topic id -> name) adds ``topic`` to topic and partition rows."""
    out = []
    for d in diffs:
        row: dict[str, Any] = {"kind": d.kind, "key": list(d.key), "field": d.field, "from": d.left, "to": d.right}
        if names is not None and d.kind in ("topics", "partitions") and d.key[0] in names:
            row["topic"] = names[d.key[0]]
        out.append(row)
    return out
