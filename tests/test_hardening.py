"""Hostile input built from real files (scenario A, written by Kafka 3.9): bounded work, located errors.

Each test here failed before the reader checked what the CRC does not cover (base offsets, epochs),
bounded a batch by what Kafka can write, and required a snapshot's header and footer.
"""

from __future__ import annotations

import re
import shutil
import struct
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import SCENARIO_A, load_job, need, with_peak
from crc32c import crc32c

from kraftlog.wire.batches import HEADER_SIZE, MAX_BATCH_SIZE_BYTES, Batch, iter_batches
from kraftlog.wire.columns import read_columns
from kraftlog.wire.files import read_file, read_log

NODE = SCENARIO_A / "node-2" / "__cluster_metadata-0"


def _segment() -> Path:
    """The largest real segment of scenario A's node 2."""
    return max(need(NODE).glob("*.log"), key=lambda p: p.stat().st_size)


def _snapshot() -> Path:
    return max(need(NODE).glob("*.checkpoint"), key=lambda p: p.stat().st_size)


def _batches(data: bytes) -> list[Batch]:
    return [b for b in iter_batches(data, parse_records=False) if isinstance(b, Batch)]


def _with_crc(data: bytearray, pos: int) -> None:
    end = pos + 12 + struct.unpack_from(">i", data, pos + 8)[0]
    struct.pack_into(">I", data, pos + 17, crc32c(bytes(data[pos + 21:end])))


def _copy(tmp_path: Path, src: Path, data: bytes, name: str | None = None) -> Path:
    out = tmp_path / (name or src.name)
    out.write_bytes(data)
    return out


# -- 1. decompression bomb: work per batch bounded by Kafka's own limits --------------------------------------

def _bomb(records: int, record: bytes, base_offset: int, epoch: int) -> bytes:
    """One gzip batch of ``records`` copies of ``record`` (a real record's bytes), built in chunks."""
    z = zlib.compressobj(9, zlib.DEFLATED, 31)
    chunk = record * (1 << 16)
    parts = [z.compress(chunk) for _ in range(records >> 16)]
    parts.append(z.compress(record * (records & 0xFFFF)) + z.flush())
    payload = b"".join(parts)
    header = struct.pack(">qiibIhiqqqhii", base_offset, HEADER_SIZE - 12 + len(payload), epoch, 2, 0, 1,
                         records - 1, 0, 0, -1, -1, -1, records)
    out = bytearray(header + payload)
    _with_crc(out, 0)
    return bytes(out)


@pytest.mark.parametrize("records", [30_000_000, 1_000_000])
def test_a_gzip_bomb_is_an_error_on_its_batch_and_the_file_before_it_is_kept(tmp_path: Path, records: int) -> None:
    src = _segment()
    data = src.read_bytes()
    last = _batches(data)[-1]
    first = data[last.position + HEADER_SIZE:last.position + HEADER_SIZE + 64]
    record = first[:1 + first[0] // 2]  # the last batch's first record (a one-byte length varint)
    bomb = _bomb(records, record, last.last_offset + 1, last.partition_leader_epoch)
    assert len(bomb) < 1 << 20  # a small file
    path = _copy(tmp_path, src, data + bomb)
    out, peak = with_peak(lambda: read_file(path))
    kept = read_file(src)
    assert out.record_count == kept.record_count  # every record before the bomb
    too_many = records > MAX_BATCH_SIZE_BYTES // 7  # found from the header, before decompressing
    assert [(e.kind, e.position) for e in out.errors] == [
        ("bad_count", len(data)) if too_many else ("compression", len(data) + HEADER_SIZE)]
    assert str(path) in out.errors[0].describe()
    assert peak < 3 * MAX_BATCH_SIZE_BYTES + len(data) * 40


def test_compressed_batches_cannot_expand_a_file_past_its_budget(tmp_path: Path) -> None:
    from encoder import batch, record

    src = _segment()
    data = src.read_bytes()
    last = _batches(data)[-1]
    big = [record(i, bytes([1, 20, 0]) + bytes(1 << 20)) for i in range(7)]  # 7 MiB of records, each batch
    nxt, epoch = last.last_offset + 1, last.partition_leader_epoch
    one, two = batch(nxt, big, codec=1, epoch=epoch), batch(nxt + 7, big, codec=1, epoch=epoch)
    out = read_file(_copy(tmp_path, src, data + one + two))
    assert [(e.kind, e.position) for e in out.errors] == [("compression", len(data) + len(one) + HEADER_SIZE)]
    assert "expand past 16 times its size" in out.errors[0].reason
    assert out.record_count == read_file(src).record_count + 7  # the first one was read


@pytest.mark.parametrize("codec", [1, 2, 3, 4], ids=["gzip", "snappy", "lz4", "zstd"])
def test_every_codec_stops_at_the_limit_whatever_the_stream_holds(codec: int) -> None:
    from encoder import compress

    payload = compress(codec, bytes(64 << 20))  # 64 MiB of zeros: a few KB to a few MB on disk
    header = struct.pack(">qiibIhiqqqhii", 0, HEADER_SIZE - 12 + len(payload), 0, 2, 0, codec, 0, 0, 0, -1, -1, -1, 1)
    data = bytearray(header + payload)
    _with_crc(data, 0)
    out, peak = with_peak(lambda: read_log(bytes(data), "c.log"))
    assert [(e.kind, e.position) for e in out.errors] == [("compression", HEADER_SIZE)]
    assert "expand past" in out.errors[0].reason and peak < 3 * MAX_BATCH_SIZE_BYTES


# -- 2. fields outside the CRC: base offset and partition leader epoch ---------------------------------------

def _flipped(field_at: int, xor: int, which: int) -> tuple[bytes, Batch, bytes]:
    data = _segment().read_bytes()
    b = _batches(data)[which]
    out = bytearray(data)
    out[b.position + field_at] ^= xor
    return data, b, bytes(out)


@pytest.mark.parametrize(("field_at", "xor", "which"), [
    (0, 0x10, 5),  # base offset: its top byte (far beyond the next file)
    (7, 0x01, 5),  # base offset: one off (overlaps the batch before)
    (7, 0x01, 0),  # the first batch: disagrees with the file name
    (12, 0x80, 7),  # partition leader epoch: negative
    (12, 0x40, 7),  # partition leader epoch: far up
    (14, 0x01, 7),  # partition leader epoch: up, seen at the batch after, which falls below it
])
def test_a_flip_outside_the_crc_is_an_error_on_that_batch(tmp_path: Path, field_at: int, xor: int,
                                                          which: int) -> None:
    clean, hit, data = _flipped(field_at, xor, which)
    path = _copy(tmp_path, _segment(), data)
    out = read_file(path)
    bad = [b for b in out.batches if b.errors]
    assert [b.position for b in bad] == [hit.position]
    assert bad[0].errors[0].kind == "out_of_order" and f"{path}@{hit.position}" in bad[0].errors[0].describe()
    assert out.record_count == read_file(_segment()).record_count  # the other batches go on
    cols = read_columns(data, str(path))  # the ingest's reader: the same verdict
    assert not cols.vectorized
    rows = [i for i, e in enumerate(cols.batch_errors) if e]
    assert [int(cols.positions[i]) for i in rows] == [hit.position]
    assert np.array_equal(cols.offset[cols.batch != rows[0]], read_columns(clean, str(_segment())).offset[
        cols.batch != rows[0]])


def test_a_segment_whose_name_disagrees_with_its_batches_is_flagged(tmp_path: Path) -> None:
    src = _segment()
    path = _copy(tmp_path, src, src.read_bytes(), f"{int(src.stem) + 1:020d}.log")
    out = read_file(path)
    assert out.batches[0].errors and "base offset" in out.batches[0].errors[0].reason
    assert all(b.errors for b in out.batches)  # the name pins every batch: none of them is where it says


# -- 3. incomplete snapshots ----------------------------------------------------------------------------------

def test_a_snapshot_cut_before_its_footer_is_incomplete_and_untrusted(tmp_path: Path) -> None:
    src = _snapshot()
    data = src.read_bytes()
    cut = data[:_batches(data)[-1].position]  # at a batch boundary: only the footer is missing
    out = read_file(_copy(tmp_path, src, cut))
    assert [e.kind for e in out.errors] == ["snapshot_incomplete"] and out.errors[0].position == len(cut)
    assert "SnapshotFooter" in out.errors[0].reason
    assert out.batches and all(b.errors for b in out.batches)  # no record of it is trusted
    cols = read_columns(cut, str(tmp_path / src.name))
    assert not cols.vectorized and all(cols.batch_errors)


def test_a_snapshot_without_its_header_or_bytes_is_an_error(tmp_path: Path) -> None:
    src = _snapshot()
    data = src.read_bytes()
    second = _batches(data)[1].position
    headless = bytearray(data[second:])
    out = read_file(_copy(tmp_path, src, bytes(headless)))
    kinds = {e.kind for e in out.errors}
    assert "snapshot_incomplete" in kinds and "SnapshotHeader" in " ".join(e.reason for e in out.errors)
    empty = read_file(_copy(tmp_path, src, b""))
    assert [(e.kind, e.position) for e in empty.errors] == [("empty", 0)] and src.name in empty.errors[0].describe()
    assert not read_columns(b"", src.name).vectorized
    rolled = read_file(_copy(tmp_path, src, b"", "00000000000000000900.log"))  # a segment just rolled: no batch yet
    assert rolled.errors == [] and rolled.batches == [] and read_columns(b"", rolled.source).errors == []


def test_a_whole_snapshot_is_still_clean(tmp_path: Path) -> None:
    src = _snapshot()
    out = read_log(src.read_bytes(), str(src))
    assert out.errors == [] and read_columns(src.read_bytes(), str(src)).vectorized


def test_local_replay_does_not_start_from_an_incomplete_snapshot(tmp_path: Path) -> None:
    from kraftlog.state.local import load_clusters

    node = tmp_path / "node-2"
    shutil.copytree(need(SCENARIO_A / "node-2"), node)
    snaps = sorted((node / "__cluster_metadata-0").glob("*.checkpoint"))
    for p in snaps:  # every snapshot cut short: none may be a base
        data = p.read_bytes()
        p.write_bytes(data[:_batches(data)[-1].position])
    cl = load_clusters([node])[0]
    assert cl.snapshots == {} or all(s.snapshot_id not in {p.name.split(".")[0] for p in snaps}
                                     for s in cl.snapshots.values())


# -- 6. input and command-line errors: located, early (before Spark), non-zero ---------------------------------

def _no_spark(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail the test if the command starts Spark (what can be told without it must be)."""
    import kraftlog.spark.session as session

    def refuse(*_: object, **__: object) -> None:
        raise AssertionError("Spark was started")

    monkeypatch.setattr(session, "build_session", refuse)


def test_ingest_of_a_missing_path_or_an_input_without_data_fails_before_spark(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from click.testing import CliRunner

    from kraftlog.cli import main

    _no_spark(monkeypatch)
    wh = str(tmp_path / "wh")
    missing = CliRunner().invoke(main, ["ingest", str(tmp_path / "nonexistent"), "--warehouse", wh])
    assert missing.exit_code == 1 and "no such directory" in missing.output and "Traceback" not in missing.output
    (tmp_path / "empty" / "sub").mkdir(parents=True)
    nothing = CliRunner().invoke(main, ["ingest", str(tmp_path / "empty"), "--warehouse", wh])
    assert nothing.exit_code == 1 and "no KRaft data directory" in nothing.output and "empty" in nothing.output
    segment = _segment()  # a file given where a data directory goes: one line, no traceback (NotADirectoryError)
    a_file = CliRunner().invoke(main, ["ingest", str(segment), "--warehouse", wh])
    assert a_file.exit_code == 1 and isinstance(a_file.exception, SystemExit), a_file.output
    assert f"file:{segment}: a file, not a directory" in a_file.output and "kraftlog dump" in a_file.output
    assert not (tmp_path / "wh").exists()


@pytest.mark.parametrize("command", [["verify"], ["state"], ["diff", "--from", "0"], ["shell", "--path", "/"]])
def test_the_local_commands_name_a_path_without_data_or_a_file_in_one_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: list[str]) -> None:
    """verify, state, diff and shell on data directories: an input that holds none (a mistyped folder: verify said
    "snapshots checked: 0" and exit status 0) or is a file (a traceback) fails in one line naming it."""
    from click.testing import CliRunner

    from kraftlog.cli import main

    _no_spark(monkeypatch)
    (tmp_path / "empty" / "sub").mkdir(parents=True)
    nothing = CliRunner().invoke(main, [*command, str(need(SCENARIO_A / "node-2")), str(tmp_path / "empty")])
    assert nothing.exit_code == 1 and isinstance(nothing.exception, SystemExit), nothing.output
    assert f"no KRaft data directory (a folder holding __cluster_metadata-0) under {tmp_path / 'empty'}" in \
        nothing.output
    segment = _segment()
    a_file = CliRunner().invoke(main, [*command, str(segment)])
    assert a_file.exit_code == 1 and isinstance(a_file.exception, SystemExit), a_file.output
    assert f"{segment}: a file, not a directory" in a_file.output and "kraftlog dump" in a_file.output


def test_a_period_that_ends_before_it_starts_is_a_usage_error_before_spark(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """``--from`` not before ``--to`` (a report of nothing, or of a swapped period) in the CLI's report and run and in
    the jobs' report and pipeline: exit status 2 naming both ends, before Spark starts."""
    from click.testing import CliRunner

    from kraftlog.cli import main

    _no_spark(monkeypatch)
    says = "the period's start (2026-11-21 04:00:00 UTC) is not before its end (2026-11-21 03:00:00 UTC)"
    period = ["--from", "2026-11-21T04:00:00Z", "--to", "2026-11-21T03:00:00Z"]
    for command in (["report"], ["run", str(SCENARIO_A)]):
        result = CliRunner().invoke(main, [*command, *period, "--warehouse", str(tmp_path / "wh")])
        assert result.exit_code == 2 and says in result.output, result.output
    for job, more in (("report", ["--out", str(tmp_path / "r.html")]), ("pipeline", [str(SCENARIO_A)])):
        with pytest.raises(SystemExit) as stopped:
            load_job(job).main([*period, *more])
        assert stopped.value.code == 2 and says in capsys.readouterr().err
    assert not (tmp_path / "wh").exists() and not (tmp_path / "r.html").exists()
    from datetime import UTC, datetime

    from kraftlog.analytics.report import Period
    from kraftlog.errors import PointError

    at = datetime(2026, 11, 21, 3, tzinfo=UTC)
    assert Period(at, None).start == Period(None, at).end == at  # (an open end: nothing to compare)
    with pytest.raises(PointError, match="is not before"):
        Period(at, at)


def test_a_storage_endpoint_that_cannot_be_reached_is_one_line_before_spark(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What a storage service (or the operating system) refuses ends in one line naming the bucket and the reason,
    not a traceback: an object store's endpoint nothing listens on, for the warehouse and for an input."""
    from click.testing import CliRunner

    from kraftlog.cli import main

    _no_spark(monkeypatch)
    for key, value in {"AWS_ENDPOINT_URL": "http://127.0.0.1:1", "AWS_ACCESS_KEY_ID": "k",
                       "AWS_SECRET_ACCESS_KEY": "s", "AWS_REGION": "us-east-1"}.items():
        monkeypatch.setenv(key, value)
    node = str(need(SCENARIO_A / "node-2"))
    for args in (["ingest", node, "--warehouse", "s3://b/wh"], ["ingest", "s3://b/in", "--warehouse", str(tmp_path)]):
        result = CliRunner().invoke(main, args)
        assert result.exit_code == 1 and isinstance(result.exception, SystemExit), result.output
        assert "in bucket 'b'" in result.output and "connect" in result.output.lower(), result.output


def test_a_directory_that_is_not_a_warehouse_is_never_written_into(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    from click.testing import CliRunner

    from kraftlog.cli import main

    _no_spark(monkeypatch)
    other = tmp_path / "reports"
    other.mkdir()
    (other / "q3.csv").write_text("a,b\n")
    result = CliRunner().invoke(main, ["ingest", str(need(SCENARIO_A / "node-2")), "--warehouse", str(other)])
    assert result.exit_code == 1 and "not a kraftlog warehouse" in result.output and "q3.csv" in result.output
    assert sorted(p.name for p in other.iterdir()) == ["q3.csv"]


def test_a_warehouse_another_run_makes_while_one_looks_is_listed_again(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """Two runs started together on a new warehouse (CI, on S3): one lists it and finds nothing, the other takes the
    lease, which makes it, then the first checks that nothing is there. It is a directory now, of kraftlog's: the
    first goes on (and waits for the lease); it used to fail with "not a directory, so not a kraftlog warehouse"."""
    from kraftlog.spark.store import NotAWarehouseError, check_warehouse
    from kraftlog.storage import Storage, StorageError

    storage = Storage.from_environment()
    wh = tmp_path / "wh"

    real = Storage.lister
    looked: list[str] = []

    def racing(self: Storage) -> Any:  # the first listing finds nothing; the other run's lease lands right after
        listing = real(self)

        def lister(path: str) -> list[Any]:
            if looked:
                return listing(path)
            looked.append(path)
            (wh / "_kraftlog" / "lease").mkdir(parents=True)
            raise StorageError(f"{path}: no such directory")
        return lister

    monkeypatch.setattr(Storage, "lister", racing)
    check_warehouse(storage, str(wh))  # no error: listed again, it holds kraftlog's lease
    assert looked == [f"file:{wh}"]
    monkeypatch.undo()
    check_warehouse(storage, str(tmp_path / "new"))  # nothing there: a new warehouse
    (tmp_path / "file").write_text("x")
    with pytest.raises(NotAWarehouseError, match="not a directory"):
        check_warehouse(storage, str(tmp_path / "file"))
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "q3.csv").write_text("a,b\n")
    with pytest.raises(NotAWarehouseError, match=r"q3\.csv"):
        check_warehouse(storage, str(tmp_path / "other"))


def test_a_call_on_a_deep_stack_gives_its_result_or_raises_its_error_here() -> None:
    """delta-rs deletes run on a thread of ``DEEP_STACK`` bytes (an IN list of 20k+ items overflows 8 MB): the call's
    value comes back, its exception is raised on the caller's thread, and threads started after keep the default (the
    depth itself: test_increments' delete naming 30,000 partitions)."""
    import threading

    from kraftlog.spark.store import DEEP_STACK, on_deep_stack

    before = threading.stack_size()
    assert DEEP_STACK > 8 << 20 and before != DEEP_STACK
    assert on_deep_stack(lambda: threading.current_thread().name).startswith("kraftlog-deep-stack")
    assert threading.stack_size() == before

    def failing() -> None:
        raise ValueError("bad predicate")

    with pytest.raises(ValueError, match="bad predicate"):
        on_deep_stack(failing)
    assert threading.stack_size() == before


@pytest.mark.spark
def test_allow_empty_accepts_an_input_without_data(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from click.testing import CliRunner

    from kraftlog.cli import main

    (tmp_path / "empty").mkdir()
    result = CliRunner().invoke(main, ["ingest", str(tmp_path / "empty"), "--warehouse", str(tmp_path / "wh"),
                                       "--allow-empty", "--quiet"])
    assert result.exit_code == 0, result.output
    assert "files 0" in result.output
    # the hour after goes through: nothing to replay or analyse yet, no error (a DAG's first hours on a new cluster)
    for command, said in (("reconstruct", "0 cluster(s) replayed"), ("analyze", "0 event rows written")):
        after = CliRunner().invoke(main, [command, "--warehouse", str(tmp_path / "wh")])
        assert after.exit_code == 0 and said in after.output, after.output


@pytest.mark.spark
def test_a_cluster_named_that_never_landed_is_an_error_naming_those_that_did(spark: Any, sample: Any) -> None:
    """``reconstruct``, ``analyze`` and ``verify`` of ``--cluster`` names that name no landed cluster (a typo) fail
    naming the landed ones, as ``state`` and ``report`` do: they used to end in "0 cluster(s) replayed" as if all
    were done. A cluster is named by its id, or the part after ``source:``, as everywhere."""
    from click.testing import CliRunner

    from kraftlog.cli import main
    from kraftlog.config import Config
    from kraftlog.errors import ClusterNotFound
    from kraftlog.spark.store import landed_clusters, store_for
    from kraftlog.spark.verify import verify_tables

    wh, _ = sample
    for command in ("reconstruct", "analyze"):
        result = CliRunner().invoke(main, [command, "--warehouse", str(wh), "--cluster", "T4vFxmI9"])
        assert result.exit_code == 1 and result.output.strip().splitlines()[-1] == (
            "Error: cluster 'T4vFxmI9' not found; known: T4vFxmI9RFCnFwCmltnwag"), (command, result.output)
    config = Config.load(warehouse={"path": str(wh)})
    with pytest.raises(ClusterNotFound, match="'nope' not found; known: T4vFxmI9RFCnFwCmltnwag"):
        verify_tables(spark, config, clusters=["nope"])
    store = store_for(spark, config)
    assert landed_clusters(store, ["T4vFxmI9RFCnFwCmltnwag"] * 2) == ["T4vFxmI9RFCnFwCmltnwag"]
    assert landed_clusters(store, None) is None


@pytest.mark.spark
def test_a_warehouse_where_nothing_landed_is_told_in_one_line_and_not_made(spark, tmp_path: Path  # type: ignore[no-untyped-def]
                                                                          ) -> None:
    """``reconstruct``, ``verify``, ``analyze`` and ``maintain`` of a warehouse no ingest wrote (a mistyped path) fail
    with one line saying so, before they take its lease: they used to make the folder, and the first two to end in
    delta-rs' traceback (``TableNotFoundError``)."""
    from click.testing import CliRunner

    from kraftlog.cli import main

    wh = tmp_path / "mistyped"
    for command in ("reconstruct", "verify", "analyze", "maintain"):
        result = CliRunner().invoke(main, [command, "--warehouse", str(wh)])
        assert result.exit_code == 1 and isinstance(result.exception, SystemExit), (command, result.output)
        assert result.output.strip().splitlines()[-1] == (
            f"Error: nothing landed under file:{wh}: run `kraftlog ingest` first"), (command, result.output)
        assert not wh.exists(), command


def test_symlink_loops_are_skipped_with_a_warning(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    from kraftlog.state.local import load_clusters

    shutil.copytree(need(SCENARIO_A / "node-2"), tmp_path / "in" / "node-2")
    (tmp_path / "in" / "self").symlink_to("self")  # ELOOP
    (tmp_path / "in" / "node-2" / "up").symlink_to("..")  # a walk that would never end
    (tmp_path / "in" / "deeper").mkdir()
    (tmp_path / "in" / "deeper" / "back").symlink_to(tmp_path / "in")
    with caplog.at_level("WARNING", logger="kraftlog"):
        clusters = load_clusters([tmp_path / "in"])
    assert [c.cluster_id for c in clusters] == [load_clusters([SCENARIO_A / "node-2"])[0].cluster_id]
    warned = caplog.text
    assert "self" in warned and "back" in warned and "loop" in warned


def test_a_directory_named_like_a_segment_and_points_outside_the_log_are_named(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from kraftlog.cli import main

    odd = tmp_path / "00000000000000000000.log"
    odd.mkdir()
    result = CliRunner().invoke(main, ["dump", str(odd)])
    assert result.exit_code == 1 and str(odd) in result.output
    node = str(need(SCENARIO_A / "node-2"))
    before = CliRunner().invoke(main, ["state", node, "--at", "2001-01-01T00:00:00Z"])
    assert before.exit_code == 1 and "before the first record" in before.output and "to offset" in before.output
    assert re.search(r"its log records from 20\d\d-\d\d-\d\dT[0-9:.]+Z to 20\d\d-", before.output), before.output
    after = CliRunner().invoke(main, ["state", node, "--at", "99999999"])
    assert after.exit_code == 1 and "outside the log" in after.output


# -- 5. identity: a cluster id shared by unrelated clusters, a malformed meta.properties -----------------------

TUTORIAL_ID = ["PugalendiArumugam__Docker-Kafka-Installation", "SimoneBrancato__AudioMood",
               "andreazerbinati__kafka-test"]


def _ledger(wh: Path) -> list[dict]:  # type: ignore[type-arg]
    from deltalake import DeltaTable

    return DeltaTable(str(wh / "files")).to_pyarrow_table().to_pylist()


@pytest.mark.spark
def test_unrelated_clusters_sharing_a_cluster_id_are_reported_and_can_be_named_apart(
        spark, corpus: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from kraftlog.config import Config
    from kraftlog.spark.ingest import ingest

    inputs = tmp_path / "in"  # three deployments of a tutorial: one cluster.id, three clusters
    inputs.mkdir()
    for r in TUTORIAL_ID:
        (inputs / r).symlink_to(need(corpus / "real" / r))
    roots = [str(inputs)]
    wh = tmp_path / "wh"
    result = ingest(spark, roots, Config.load(warehouse={"path": str(wh)}))
    assert result.identity_conflicts == result.files_seen > 0 and "IDENTITY CONFLICTS" in result.line()
    doubted = {r["data_dir"] for r in _ledger(wh) if any("identity conflict" in e for e in r["errors"])}
    assert len(doubted) == 3 and all(r["status"] != "ok" for r in _ledger(wh))

    apart = tmp_path / "apart"  # the README's way: the repository folder in the cluster name
    named = ingest(spark, roots, Config.load(warehouse={"path": str(apart)},
                                             identity={"cluster": "{cluster.id}-{top}"}))
    assert named.identity_conflicts == 0 and named.divergent == 0
    assert len({r["cluster_id"] for r in _ledger(apart)}) == 3


@pytest.mark.spark
def test_a_malformed_meta_properties_is_an_error_on_its_directory(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from kraftlog.config import Config
    from kraftlog.spark.ingest import ingest

    for name, text in (("junk", b"\x00\x17\xff\xfe binary"), ("abc", b"version=1\ncluster.id=c\nnode.id=abc\n")):
        node = tmp_path / name / "node-2"
        shutil.copytree(need(SCENARIO_A / "node-2"), node)
        (node / "meta.properties").write_bytes(text)
    wh = tmp_path / "wh"
    result = ingest(spark, [str(tmp_path / "junk"), str(tmp_path / "abc")], Config.load(warehouse={"path": str(wh)}))
    rows = _ledger(wh)
    assert rows and all(r["status"] != "ok" and "meta.properties" in r["errors"][0] for r in rows)
    assert any("binary" in r["errors"][0] for r in rows)
    assert any("'abc' is not a number" in r["errors"][0] for r in rows)
    assert result.identity_conflicts == len(rows)


@pytest.mark.spark
def test_the_tables_do_not_start_replay_from_an_incomplete_snapshot(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from kraftlog.config import Config
    from kraftlog.spark.bases import cluster_bases
    from kraftlog.spark.history import landed
    from kraftlog.spark.ingest import ingest
    from kraftlog.spark.store import store_for

    node = tmp_path / "in" / "node-2"
    shutil.copytree(need(SCENARIO_A / "node-2"), node)
    for p in (node / "__cluster_metadata-0").glob("*.log"):
        p.unlink()  # only snapshots: replay has to start from one
    cut = max((node / "__cluster_metadata-0").glob("*.checkpoint"))
    data = cut.read_bytes()
    cut.write_bytes(data[:_batches(data)[-1].position])  # the newest, without its footer
    config = Config.load(warehouse={"path": str(tmp_path / "wh")})
    ingest(spark, [str(tmp_path / "in")], config)
    (base,) = cluster_bases(landed(store_for(spark, config)))
    assert base.base.snapshot is not None and base.base.snapshot.snapshot_id != cut.name.split(".")[0]
    assert cut.name.split(".")[0] not in {s.snapshot_id for s in base.snapshots}


def test_an_unreachable_spark_connect_server_is_told_at_once(caplog: pytest.LogCaptureFixture) -> None:
    """PySpark waits ten minutes or more for a Spark Connect server it cannot reach (one restarting), printing
    nothing: the job says at once that SPARK_REMOTE's server takes no connection; a listening one, nothing."""
    import logging
    import socket

    from kraftlog.spark.session import _say_if_unreachable

    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        port = listening.getsockname()[1]
        with caplog.at_level(logging.WARNING, logger="kraftlog"):
            _say_if_unreachable(f"sc://127.0.0.1:{port}/;user_id=x")
        assert not caplog.records
    with caplog.at_level(logging.WARNING, logger="kraftlog"):
        _say_if_unreachable(f"sc://127.0.0.1:{port}")  # (closed now)
    (said,) = [r.getMessage() for r in caplog.records]
    assert f"sc://127.0.0.1:{port} (SPARK_REMOTE) takes no connection" in said and "ten minutes" in said


@pytest.mark.parametrize("job", ["ingest", "reconstruct", "analytics", "report", "maintain", "pipeline"])
def test_a_job_that_kraftlog_refuses_exits_1_with_one_line(tmp_path: Path, job: str) -> None:
    """A spark-submit job run as a process (as spark-submit and the DAG run it) says what kraftlog refused in one
    line and exits 1, before Spark starts (a profile value that cannot work), as the CLI does; not a traceback."""
    import subprocess
    import sys

    from conftest import ROOT

    profile = tmp_path / "bad.toml"
    profile.write_text("[warehouse]\nlease_ttl_seconds = 0\n")
    more = {"ingest": [str(SCENARIO_A)], "pipeline": [str(SCENARIO_A)], "report": ["--out-dir", str(tmp_path)]}
    run = subprocess.run([sys.executable, str(ROOT / "jobs" / f"{job}.py"), "--profile", str(profile),
                          *more.get(job, [])], capture_output=True, text=True, timeout=300)
    assert run.returncode == 1, run.stderr
    assert run.stderr.strip().endswith(f"ERROR {profile}: warehouse.lease_ttl_seconds must be more than 0 seconds, "
                                       "finite, not 0") and "Traceback" not in run.stderr, run.stderr
