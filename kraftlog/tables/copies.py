"""The one canonical copy of each record among competing files of one cluster (no Spark).

Several nodes hold copies of the same log (every controller replicates it) and of the same snapshots.
The rules for the one copy that lands, per record key:

* log records, key ``log_offset``: a copy from a trusted batch (valid CRC, in order) beats a corrupt
  one; then the copy with the highest batch epoch wins (a later leader overwrote an uncommitted suffix);
  ties go to the lowest node id (unknown last), then the file (``LOG_COPY_ORDER``);
* snapshot and bootstrap records, key (``snapshot_id``, ``snapshot_seq``): records are never mixed
  across copies of a snapshot: one whole file wins: a whole trusted one first, then the lowest node id
  (unknown last), then the file (``SNAPSHOT_COPY_ORDER``).

The orders are data: ``choose`` (numpy, one run's files), ``copy_rank`` (the local commands) and
``kraftlog.spark.transforms`` (this run's winners against landed rows) all read them.

Losing copies whose bytes differ are reported as divergence; identical copies (replicas) are not.
``choose`` works on the narrow ``INDEX`` rows of the files (``FileIndexer``), column-wise in numpy.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kraftlog.tables.definitions import catalog
from kraftlog.tables.rows import INDEX, SHARED_ID, FileIndexer, FileRef, Ingested, file_layout, project, record_json
from kraftlog.wire.columns import LogColumns, read_columns, read_ranges
from kraftlog.wire.files import SEGMENT, decode_value
from kraftlog.wire.messages import default_codec
from kraftlog.wire.redact import default_redactor

NO_NODE = np.iinfo(np.int64).max  # unknown node ids sort last
SAME_EPOCH = "same_epoch_conflict"  # divergence reason: two copies differ at one offset and epoch

# competing copies of one record, best first: (column, direction); unknown (null) values sort last.
# "trusted": from a batch with a valid CRC and no other problem (INDEX ``crc_valid``); "file": the path
# (file ids follow path order within a run)
LOG_COPY_ORDER: tuple[tuple[str, str], ...] = (
    ("trusted", "desc"), ("batch_epoch", "desc"), ("node_id", "asc"), ("file", "asc"))
SNAPSHOT_COPY_ORDER: tuple[tuple[str, str], ...] = (("trusted", "desc"), ("node_id", "asc"), ("file", "asc"))


def copy_rank(copy: Mapping[str, Any], order: tuple[tuple[str, str], ...] = LOG_COPY_ORDER) -> tuple[Any, ...]:
    """A sort key of one copy (``copy``: its values by the order's column names): the best copy sorts first."""
    key: list[Any] = []
    for column, direction in order:
        v = copy[column]
        if v is None:
            key.append((1, 0))
        else:
            key.append((0, -v if direction == "desc" else v))
    return tuple(key)


def _sort_keys(order: tuple[tuple[str, str], ...], columns: Mapping[str, np.ndarray]) -> list[np.ndarray]:
    """``np.lexsort`` keys (least significant first) for ``order`` over ``columns`` (nulls already mapped last)."""
    keys = []
    for column, direction in reversed(order):
        v = columns[column]
        keys.append(~v if v.dtype == np.bool_ and direction == "desc" else -v.astype(np.int64)
                    if direction == "desc" else v)
    return keys


# what ``choose`` reports per losing copy: the divergence table's columns (its JSON not yet rendered),
# plus the losing copy's raw key and value, and whether it is a control record, to render it from
DIVERGENCE_SOURCE = pa.schema(
    [f for f in catalog()["divergence"].schema if f.name != "run_id"]
    + [pa.field(f"loser_{f.name}", f.type) for f in INDEX if f.name in ("key", "value", "is_control", "api_key")])


@dataclass(frozen=True)
class Choice:
    """The outcome for the files of one cluster.

    ``keep``: per file id, the inclusive ranges of record positions (log offsets, or positions in a
    snapshot) that land; ``divergence``: one ``DIVERGENCE_SOURCE`` row per losing copy that differs;
    ``columns``: each file as read, by file id (for the land pass, which need not read them again);
    ``index``: the files' ``INDEX`` rows, ``wins`` marks the winning copies among them.
    """

    keep: dict[int, list[tuple[int, int]]]
    divergence: pa.Table
    columns: dict[int, LogColumns]
    index: pa.Table
    wins: np.ndarray

    @property
    def conflicts(self) -> dict[str, str]:
        """``conflicts`` of this choice's divergence."""
        return conflicts(self.divergence)

    @property
    def winners(self) -> pa.Table:
        """The ``INDEX`` rows of the winning copies (built when asked: the land pass does not)."""
        return self.index.filter(pa.array(self.wins))


def conflicts(divergence: pa.Table) -> dict[str, str]:
    """Per file path, why it is no copy of the log it lost to: records that differ from the winning copy's at the
    same offset and epoch (``divergence``: ``DIVERGENCE_SOURCE`` rows). One raft log never holds two records there
    (the Log Matching property), so the two files are logs of different clusters that share a cluster id."""
    d = divergence.filter(pc.equal(divergence["reason"], SAME_EPOCH))
    out: dict[str, str] = {}
    for path, offset, winner in zip(*(d[c].to_pylist() for c in ("loser_file", "log_offset", "winner_file")),
                                    strict=True):
        out.setdefault(path, f"identity conflict: records differ from {winner}'s at the same offset and "
                             f"epoch (first at offset {offset}): not a copy of the same log; {SHARED_ID}")
    return out


@dataclass(frozen=True)
class Part:
    """What ``choose_in_parts`` decided for some records: per file id, the ranges of them that land (``keep``, as
    in ``Choice``), the divergence among their copies and the ``INDEX`` rows of their winning copies."""

    keep: dict[int, list[tuple[int, int]]]
    divergence: pa.Table
    winners: pa.Table


def choose_in_parts(files: list[FileRef], indexer: FileIndexer | None = None,
                    decided: Mapping[int, Ingested] | None = None) -> Iterator[Part]:
    """``choose``, a part at a time, for files too big to hold at once (a segment grows to 1 GiB, and every node of
    a cluster holds a copy): the snapshots first, together and whole; then the segments, each read a range of
    batches at a time (``read_ranges``), the copies of the log offsets every segment still being read has been
    read past decided together. Every copy of a record is in the same part, so each is decided as ``choose``
    decides it; what is in memory follows the ranges, not the files. ``keep`` runs of consecutive parts may join.
    """
    indexer = indexer or FileIndexer()
    decided = decided or {}
    segments = {f.file_id: f for f in files if file_layout(f.path)[0].kind == SEGMENT}
    others = [f for f in files if f.file_id not in segments]
    if others:
        yield _part(others, pa.concat_tables([indexer.file_rows(f) for f in others]))
    reading: dict[int, Iterator[LogColumns]] = {}
    for i, f in segments.items():
        grown = decided.get(i)
        assert grown or not f.start, f"{f.path}: read from byte {f.start} without what was decided before it"
        reading[i] = (grown and grown.ranges(f.content, f.path, f.start)) or read_ranges(f.content, f.path) \
            or iter(())
    read_to = dict.fromkeys(reading, -(1 << 63))  # the highest log offset read of each segment
    pending: list[pa.Table] = []
    while reading or pending:
        low = min(read_to[i] for i in reading) if reading else None
        for i in [i for i in reading if read_to[i] == low]:  # the segments read least far: their next range
            cols = next(reading[i], None)
            if cols is None:
                del reading[i]
                continue
            if len(cols.offset):
                read_to[i] = int(cols.offset.max())
            grown = decided.get(i)
            pending.append(indexer.file_rows(segments[i], cols, after=grown.last_offset if grown else None))
        rows = pa.concat_tables(pending) if pending else INDEX.empty_table()
        pending = []
        if reading:  # the offsets past what some segment still being read has been read to wait for it
            ready = pc.less_equal(rows["log_offset"], min(read_to[i] for i in reading))
            pending, rows = [rows.filter(pc.invert(ready))], rows.filter(ready)
        if rows.num_rows:
            yield _part(list(segments.values()), rows)


def join_runs(runs: list[tuple[int, int]], more: list[tuple[int, int]]) -> None:
    """Append the inclusive ranges ``more`` (a later part's ``keep`` of a file) to ``runs``, joining ranges that
    meet: the ranges ``choose`` gives for the parts together."""
    for lo, hi in more:
        if runs and runs[-1][1] + 1 == lo:
            runs[-1] = (runs[-1][0], hi)
        else:
            runs.append((lo, hi))


def _part(files: list[FileRef], index: pa.Table) -> Part:
    keep, divergence, wins = _decide(files, index)
    return Part(keep, divergence, index.filter(pa.array(wins)))


def choose(files: list[FileRef], indexer: FileIndexer | None = None, decided: Mapping[int, Ingested] | None = None
           ) -> Choice:
    """The canonical copy of every record of ``files`` (the competing files of one cluster).

    ``decided``: by file id, the segments grown since earlier runs ingested them: their records up to what those
    runs ingested are left out (the file is read whole here; ``choose_in_parts``, which a run uses, reads only what
    it grew by). They took part in that run's choice, and what landed then is what this run's winners meet
    (``transforms.against_existing``), with the same order of copies."""
    indexer = indexer or FileIndexer()
    decided = decided or {}

    columns: dict[int, LogColumns] = {}
    rows = []
    for f in files:
        grown = decided.get(f.file_id)
        columns[f.file_id] = read_columns(f.content, f.path)
        rows.append(indexer.file_rows(f, columns[f.file_id], after=grown.last_offset if grown else None))
    index = pa.concat_tables(rows) if files else INDEX.empty_table()
    keep, divergence, wins = _decide(files, index)
    return Choice(keep, divergence, columns, index, wins)


def _decide(files: list[FileRef], index: pa.Table) -> tuple[dict[int, list[tuple[int, int]]], pa.Table, np.ndarray]:
    """The choice among the copies in ``index`` (the ``INDEX`` rows of ``files``; all copies of each record):
    ``Choice``'s ``keep``, ``divergence`` and ``wins``."""
    n = index.num_rows
    file_id = index["file_id"].to_numpy()
    position = pc.coalesce(index["snapshot_seq"], index["log_offset"]).to_numpy()
    node = pc.fill_null(index["node_id"].cast(pa.int64()), NO_NODE).to_numpy()
    epoch = index["batch_epoch"].to_numpy()
    value_hash = index["value_hash"].to_numpy()
    snapshot = index["snapshot_id"].dictionary_encode()
    snap_code = pc.fill_null(snapshot.combine_chunks().indices, -1).to_numpy().astype(np.int64)

    trusted = index["crc_valid"].to_numpy(zero_copy_only=False)
    winner = np.full(n, -1, np.int64)  # per row: the row of the winning copy of its key (-1: none)
    log = np.flatnonzero(snap_code < 0)
    if log.size:
        by = {"trusted": trusted[log], "batch_epoch": epoch[log], "node_id": node[log], "file": file_id[log]}
        order = log[np.lexsort((*_sort_keys(LOG_COPY_ORDER, by), position[log]))]
        first = np.append(True, position[order][1:] != position[order][:-1])
        winner[order] = order[first][np.cumsum(first) - 1]
    snap = np.flatnonzero(snap_code >= 0)
    if snap.size:
        untrusted_files = np.unique(file_id[snap][~trusted[snap]])
        whole = ~np.isin(file_id[snap], untrusted_files)  # a snapshot copy is trusted as a whole
        by = {"trusted": whole, "node_id": node[snap], "file": file_id[snap]}
        order = snap[np.lexsort((*_sort_keys(SNAPSHOT_COPY_ORDER, by), snap_code[snap]))]
        first = np.append(True, snap_code[order][1:] != snap_code[order][:-1])
        winning_file = dict(zip(snap_code[order[first]].tolist(), file_id[order[first]].tolist(), strict=True))
        won = snap[file_id[snap] == np.asarray([winning_file[c] for c in snap_code[snap].tolist()], np.int64)]
        key = (snap_code << 40) | position  # positions in a snapshot stay far below 2**40
        won = won[np.argsort(key[won], kind="stable")]
        at = np.clip(np.searchsorted(key[won], key[snap]), 0, won.size - 1)
        winner[snap] = np.where(key[won][at] == key[snap], won[at], -1)
    has_winner = winner >= 0
    w = np.where(has_winner, winner, 0)
    wins = has_winner & (file_id == file_id[w])
    loses = ~wins & (~has_winner | (value_hash != value_hash[w]))
    return _ranges(file_id[wins], position[wins]), _divergence(files, index, loses, w, has_winner), wins


def _ranges(file_id: np.ndarray, position: np.ndarray) -> dict[int, list[tuple[int, int]]]:
    """Contiguous runs of positions per file."""
    out: dict[int, list[tuple[int, int]]] = {}
    if not file_id.size:
        return out
    order = np.lexsort((position, file_id))
    f, p = file_id[order], position[order]
    starts = np.flatnonzero(np.append(True, (f[1:] != f[:-1]) | (p[1:] - p[:-1] > 1)))
    ends = np.append(starts[1:], f.size) - 1
    for fid, lo, hi in zip(f[starts].tolist(), p[starts].tolist(), p[ends].tolist(), strict=True):
        out.setdefault(fid, []).append((lo, hi))
    return out


def _divergence(files: list[FileRef], index: pa.Table, loses: np.ndarray, w: np.ndarray, has_winner: np.ndarray
                ) -> pa.Table:
    rows = np.flatnonzero(loses)
    if not rows.size:
        return DIVERGENCE_SOURCE.empty_table()
    loser = index.take(pa.array(rows))
    won = index.take(pa.array(w[rows]))
    valid = pa.array(~has_winner[rows])  # as a mask: True where there is no winning copy
    paths = {f.file_id: f.path for f in files}
    sources = {f.file_id: file_layout(f.path)[2] for f in files}

    def by_file(table: pa.Table, of: dict[int, str]) -> pa.Array:
        return pa.array([of[i] for i in table["file_id"].to_pylist()], pa.string())

    def winner_column(name: str) -> pa.Array:
        column = won[name].combine_chunks()
        return pc.if_else(valid, pa.nulls(len(column), column.type), column)

    epoch = loser["batch_epoch"].to_numpy()
    w_epoch = won["batch_epoch"].to_numpy()
    corrupt = ~loser["crc_valid"].to_numpy(zero_copy_only=False)
    reason = np.where(loser["snapshot_id"].is_valid().to_numpy(zero_copy_only=False), "snapshot_copy_differs",
                      np.where(corrupt, "corrupt_copy", np.where(epoch < w_epoch, "lower_epoch", SAME_EPOCH)))
    columns = {
        "cluster_id": loser["cluster_id"], "source": by_file(loser, sources), "snapshot_id": loser["snapshot_id"],
        "log_offset": loser["log_offset"], "snapshot_seq": loser["snapshot_seq"], "reason": pa.array(reason),
        "winner_node_id": winner_column("node_id"),
        "winner_file": pc.if_else(valid, pa.nulls(len(rows), pa.string()), by_file(won, paths)),
        "winner_batch_epoch": winner_column("batch_epoch"), "winner_value_hash": winner_column("value_hash"),
        "loser_node_id": loser["node_id"], "loser_file": by_file(loser, paths),
        "loser_batch_epoch": loser["batch_epoch"], "loser_value_hash": loser["value_hash"],
        "loser_record_type": pa.nulls(len(rows), pa.string()), "loser_timestamp": loser["timestamp"],
        "loser_data_json": pa.nulls(len(rows), pa.string()), "loser_key": loser["key"], "loser_value": loser["value"],
        "loser_is_control": loser["is_control"], "loser_api_key": loser["api_key"],
    }
    return pa.table(columns, schema=DIVERGENCE_SOURCE)


def render_divergence(rows: pa.RecordBatch | pa.Table, run_id: str) -> pa.Table:
    """``divergence`` table rows from ``DIVERGENCE_SOURCE``-shaped rows: a losing copy's type and JSON
    are rendered from its raw bytes where they are missing (it was not landed)."""
    codec, redactor = default_codec(), default_redactor()
    cols = [rows.column(n).to_pylist() for n in ("loser_data_json", "loser_record_type", "loser_key",
                                                 "loser_value", "loser_is_control")]
    data, types = [], []
    for j, t, k, v, ctl in zip(*cols, strict=True):
        if v is not None:
            d = decode_value(codec, ctl, k, v)
            j = j if j is not None else record_json(d, redactor)
            t = t if t is not None else d.type
        data.append(j)
        types.append(t)
    for name, values in (("loser_data_json", data), ("loser_record_type", types)):
        rows = rows.set_column(rows.schema.get_field_index(name), name, pa.array(values, pa.string()))
    return project(rows, catalog()["divergence"], run_id)
