"""Spark ingestion into Delta tables: canonical rows, typed tables, idempotency, recovery, divergence."""

from __future__ import annotations

import contextlib
import hashlib
import shutil
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from chispa import assert_df_equality
from conftest import SAMPLE, examples, load_job
from deltalake import DeltaTable
from encoder import batch, metadata_value, record
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ledger_history import add_history
from pyspark.sql.types import StructType
from services import repeated_keys

from kraftlog.config import Config
from kraftlog.schema.registry import load_schemas
from kraftlog.spark.ingest import IngestResult, ingest, read_table
from kraftlog.spark.store import DeltaRsStore, delta_spark_available, open_store, spark_schema
from kraftlog.tables.definitions import catalog
from kraftlog.tables.rows import file_layout
from kraftlog.wire.discover import scan
from kraftlog.wire.files import parse_meta_properties, read_file
from kraftlog.wire.redact import default_redactor

pytestmark = pytest.mark.spark
S = load_schemas()


def _config(wh: Path, **identity: str) -> Config:
    return Config.load(warehouse={"path": str(wh)}, **({"identity": identity} if identity else {}))


def _run(spark: Any, inputs: list[Path], wh: Path, **identity: str) -> IngestResult:
    return ingest(spark, [str(p) for p in inputs], _config(wh, **identity))


def _table(wh: Path, name: str) -> pa.Table:
    return DeltaTable(str(wh / name)).to_pyarrow_table()


def _expected_records(root: Path, cluster_of: Any) -> dict[tuple[Any, ...], tuple[int, int, bytes | None]]:
    """The canonical record of each key by the rules, computed with the pure decoder (no Spark).

    Log records: highest batch epoch, then lowest node; snapshots: the lowest node's whole file.
    """
    best: dict[tuple[Any, ...], tuple[tuple[int, int], Any]] = {}
    for dd in scan([str(root)]):
        meta = parse_meta_properties(Path(dd.meta_properties.path).read_text()) if dd.meta_properties else None
        node = meta.node_id if meta else None
        cluster = cluster_of(dd, meta)
        for e, _ in dd.files:
            _, snap, _, snap_offset = file_layout(e.path)
            for b, r in read_file(e.path).records():
                key = (cluster, snap, r.offset if snap is None else snap_offset, None if snap is None else r.offset)
                rank = (-b.partition_leader_epoch, node if node is not None else 1 << 30) if snap is None \
                    else (0, node if node is not None else 1 << 30)
                if key not in best or rank < best[key][0]:
                    best[key] = (rank, (b, r))
    return {k: v[1] for k, v in best.items()}


@pytest.fixture(scope="module")
def scenario(sample_warehouse: tuple[Path, IngestResult]) -> tuple[Path, IngestResult]:
    return sample_warehouse


def test_three_controllers_and_three_brokers_give_one_canonical_row_per_offset(scenario: Any) -> None:
    wh, result = scenario
    assert result.files_seen == 193 and result.errors == 0
    rec = _table(wh, "records")
    log = rec.filter(pa.compute.is_null(rec.column("snapshot_id")))
    offsets = log.column("log_offset").to_pylist()
    assert len(offsets) == len(set(offsets)) == 1994 and sorted(offsets) == list(range(1994))
    keys = list(zip(*[rec.column(c).to_pylist() for c in ("cluster_id", "snapshot_id", "log_offset",
                                                           "snapshot_seq")], strict=True))
    assert len(keys) == len(set(keys)) == result.rows_added
    assert set(rec.column("cluster_id").to_pylist()) == {"T4vFxmI9RFCnFwCmltnwag"}
    expected = _expected_records(SAMPLE, lambda dd, meta: meta.cluster_id)
    assert len(expected) == rec.num_rows


def test_typed_tables_hold_every_ok_record_of_their_type(scenario: Any) -> None:
    wh, _ = scenario
    rec = _table(wh, "records")
    counts: dict[str, int] = {}
    for t, status in zip(rec.column("record_type").to_pylist(), rec.column("status").to_pylist(), strict=True):
        if status == "ok":
            counts[t] = counts.get(t, 0) + 1
    cat = catalog()
    for rtype, n in counts.items():
        assert _table(wh, cat.by_record_type[rtype].name).num_rows == n, rtype
    assert {t.name for t in cat.typed.values()} >= {"topic_record", "no_op_record", "leader_change", "kraft_voters"}


def _expected_typed(spark: Any, table: str) -> Any:
    """A typed table built from the pure decoder's canonical copies (as Spark rows)."""
    t = catalog()[table]
    cols = [f.name for f in t.schema if f.name not in ("run_id",)]
    rows = []
    for (cluster, snap, log_offset, seq), (b, r) in _expected_records(
            SAMPLE, lambda dd, meta: meta.cluster_id).items():
        d = r.decoded
        if d.status != "ok" or (d.type != t.record_type):
            continue
        d = default_redactor()(d)
        source = "log" if snap is None else ("bootstrap" if "0000000000000000000-" in snap or
                                             snap == "bootstrap.checkpoint" else "snapshot")
        row = {"cluster_id": cluster, "source": source, "snapshot_id": snap, "log_offset": log_offset,
               "snapshot_seq": seq, "batch_epoch": b.partition_leader_epoch,
               "timestamp": datetime.fromtimestamp(r.timestamp / 1000, UTC), "record_version": d.version,
               "unknown_tagged_fields": None, "redacted_fields": list(d.redacted) or None, **(d.data or {})}
        rows.append(tuple(row.get(c) for c in cols))
    schema = StructType([f for f in spark_schema(t).fields if f.name in cols])
    return spark.createDataFrame(rows, schema)


@pytest.mark.parametrize("table", ["topic_record", "partition_change_record", "config_record",
                                   "register_broker_record", "kraft_voters", "client_quota_record"])
def test_typed_rows_equal_the_decoder_output(spark: Any, scenario: Any, table: str) -> None:
    wh, _ = scenario
    config = _config(wh)
    actual = read_table(spark, config, table).drop("run_id", "node_id")
    expected = _expected_typed(spark, table).drop("node_id")
    assert actual.count() > 0
    assert_df_equality(actual.select(*expected.columns), expected, ignore_row_order=True, ignore_nullable=True,
                       ignore_column_order=True, ignore_metadata=True)


def test_second_run_adds_nothing(spark: Any, scenario: Any) -> None:
    wh, _ = scenario
    before = {t.name: DeltaTable(str(wh / t.name)).count() for t in catalog().all() if t.name != "runs"}
    again = _run(spark, [SAMPLE], wh)
    assert (again.files_ingested, again.rows_added, again.divergent) == (0, 0, 0)
    after = {t.name: DeltaTable(str(wh / t.name)).count() for t in catalog().all() if t.name != "runs"}
    assert before == after


def test_secrets_never_reach_the_tables(scenario: Any) -> None:
    wh, _ = scenario
    for name in ("records", "config_record", "user_scram_credential_record"):
        t = _table(wh, name)
        assert "s3cr3t-key-pw" not in str(t.to_pylist())
    scram = _table(wh, "user_scram_credential_record")
    assert scram.num_rows and all(v is None for v in scram.column("salt").to_pylist())
    rec = _table(wh, "records")
    assert all(v is None for v in rec.column("raw_value").to_pylist())  # nothing failed to decode


def test_tables_are_documented_delta_tables_readable_by_delta_rs_and_duckdb(scenario: Any) -> None:
    duckdb = pytest.importorskip("duckdb")
    wh, _ = scenario
    dt = DeltaTable(str(wh / "records"))
    meta = dt.metadata()
    assert meta.name == "records" and "one row per record" in (meta.description or "").lower()
    assert meta.configuration["kraftlog.key"] == "cluster_id,source,snapshot_id,log_offset,snapshot_seq"
    fields = {f.name: f for f in dt.schema().fields}
    assert "Raft epoch" in fields["batch_epoch"].metadata["comment"]
    assert (wh / "records" / "_delta_log" / "00000000000000000000.json").exists()
    con = duckdb.connect()
    dataset = DeltaTable(str(wh / "topic_record")).to_pyarrow_dataset()
    con.register("topics", dataset)
    names = {r[0] for r in con.execute("select distinct name from topics").fetchall()}
    assert {"orders", "payments", "fragile", "tmp-delete-me"} <= names


def test_duckdb_reads_the_tables_with_its_own_delta_reader(scenario: Any) -> None:
    duckdb = pytest.importorskip("duckdb")
    wh, _ = scenario
    con = duckdb.connect()
    try:
        con.execute("INSTALL delta; LOAD delta;")
    except Exception as e:  # the extension comes from extensions.duckdb.org
        pytest.skip(f"DuckDB's delta extension is not installable here: {str(e).splitlines()[0][:120]}")
    n = con.execute(f"select count(*) from delta_scan('{wh / 'records'}')").fetchone()[0]
    assert n == DeltaTable(str(wh / "records")).count()


def test_delta_spark_reads_and_writes_where_its_jar_is_on_the_classpath(spark: Any, tmp_path: Path) -> None:
    if not delta_spark_available(spark):
        pytest.skip("delta-spark's jar (io.delta) is not on the Spark classpath: Maven Central is unreachable "
                    "here, so the delta-spark writer is tested where the jar resolves")
    cfg = Config.load(warehouse={"path": str(tmp_path), "writer": "delta-spark"})
    result = ingest(spark, [str(SAMPLE / "node-1")], cfg)
    assert result.writer == "delta-spark" and result.rows_added > 0
    assert spark.read.format("delta").load(str(tmp_path / "records")).count() == result.rows_added


def test_the_delta_spark_writer_asked_for_without_its_jar_is_one_line_saying_so(spark: Any, tmp_path: Path) -> None:
    if delta_spark_available(spark):
        pytest.skip("delta-spark's jar is on the classpath here: the writer works (the test above)")
    from click.testing import CliRunner

    from kraftlog.cli import main

    profile = tmp_path / "p.toml"
    profile.write_text(f'[warehouse]\npath = "{tmp_path / "wh"}"\nwriter = "delta-spark"\n')
    asked = CliRunner().invoke(main, ["ingest", str(SAMPLE / "node-1"), "--profile", str(profile)])
    assert asked.exit_code == 1 and isinstance(asked.exception, SystemExit), asked.output  # (not a traceback)
    assert "writer = delta-spark, but io.delta classes are not on the Spark classpath" in asked.output


def test_kraft_records_and_kraft_typed_explode_files_in_sql_as_the_ingest_lands_them(spark: Any,
                                                                                     tmp_path: Path) -> None:
    from kraftlog.spark.decode import RECORD_COLUMNS, register_functions

    register_functions(spark)
    node = SAMPLE / "node-2"  # one node: every record of every file lands
    wh = tmp_path / "wh"
    _run(spark, [node], wh)
    # Spark's file listing skips names starting with "_": name the metadata folder itself
    files = (spark.read.format("binaryFile").option("pathGlobFilter", "{*.log,*.checkpoint}")
             .load([str(node / "__cluster_metadata-0"), str(node / "bootstrap.checkpoint")]))
    files.createOrReplaceTempView("kraft_files")
    keys = list(RECORD_COLUMNS)
    exploded = spark.sql("SELECT r.* FROM kraft_files, LATERAL kraft_records(content, path) r").select(*keys)
    landed = open_store(spark, str(wh)).read(catalog()["records"]).select(*keys)
    assert exploded.count() == landed.count() > 1000
    assert exploded.exceptAll(landed).count() == 0 and landed.exceptAll(exploded).count() == 0
    changes = spark.sql("SELECT t.log_offset, t.partition_id, t.leader FROM kraft_files, "
                        "LATERAL kraft_typed(content, 'partition_change_record', path) t")
    want = _table(wh, "partition_change_record").select(["log_offset", "partition_id", "leader"]).to_pylist()
    assert sorted(tuple(r) for r in changes.collect()) == sorted(tuple(r.values()) for r in want) and want
    with pytest.raises(Exception, match="typed table"):
        spark.sql("SELECT * FROM kraft_files, LATERAL kraft_typed(content, 'nope', path) t").collect()


def test_kraft_decode_sql_function(spark: Any) -> None:
    from kraftlog.spark.decode import register_functions

    register_functions(spark)
    value = metadata_value(S.metadata[2], {"name": "orders", "topic_id": "AAAAAAAAAAAAAAAAAAAAAQ"}, 0)
    row = spark.sql(f"select kraft_decode(unhex('{value.hex()}')) as d").collect()[0]["d"]
    assert (row["type"], row["version"], row["status"]) == ("TOPIC_RECORD", 0, "ok")
    assert row["data_json"] == '{"name":"orders","topicId":"AAAAAAAAAAAAAAAAAAAAAQ"}'
    bad = spark.sql("select kraft_decode(unhex('0163000000')) as d").collect()[0]["d"]
    assert bad["status"] == "unknown_type" and bad["error"] == "Unknown metadata id 99"
    ctl = spark.sql("select kraft_decode_control(unhex('00000004'), unhex('000000')) as d").collect()[0]["d"]
    assert ctl["type"] == "SnapshotFooter"


# -- incremental, interrupted, divergent ------------------------------------------------------------

def _copy_node(dst: Path, node: str = "node-1") -> Path:
    out = dst / node
    shutil.copytree(SAMPLE / node, out)
    for p in out.rglob("*"):
        p.chmod(0o644 if p.is_file() else 0o755)
    return out


def test_a_grown_active_segment_and_a_new_segment_add_only_the_new_records(spark: Any, tmp_path: Path) -> None:
    data = tmp_path / "data"
    node = _copy_node(data)
    md = node / "__cluster_metadata-0"
    last = sorted(md.glob("*.log"))[-1]
    full = last.read_bytes()
    last.write_bytes(full[: len(full) // 2 + 7])  # the active segment, caught mid-batch
    wh = tmp_path / "wh"
    first = _run(spark, [data], wh)
    assert first.errors >= 1  # the truncated tail is reported, the rest lands
    ledger = _table(wh, "files")
    tail = next(e for p, e in zip(ledger.column("path").to_pylist(), ledger.column("errors").to_pylist(), strict=True)
            if p.endswith(last.name))
    assert "invalid bytes at the end" in tail[0] and last.name in tail[0]
    n1 = DeltaTable(str(wh / "records")).count()

    last.write_bytes(full)  # the segment grew
    second = _run(spark, [data], wh)
    assert second.files_ingested == 1 and second.files_clean == 1 and second.files_contested == 0
    expected = {r.offset for _, r in read_file(last).records()} - {
        r.offset for _, r in read_file_prefix(full[: len(full) // 2 + 7], last.name)}
    assert second.rows_added == len(expected) > 0
    assert DeltaTable(str(wh / "records")).count() == n1 + len(expected)
    batches = _table(wh, "batches")
    pairs = list(zip(batches.column("file").to_pylist(), batches.column("position").to_pylist(), strict=True))
    assert len(pairs) == len(set(pairs))  # each batch of the grown file landed once
    # and every one of them: the batch the first run saw cut short lands now
    assert sum(1 for f, _ in pairs if f.endswith(last.name)) == len(read_file(last).batches)


def test_a_segment_kafka_has_just_rolled_is_no_problem_and_lands_when_it_grows(spark: Any, tmp_path: Path) -> None:
    """Kafka rolls a segment by creating the next one empty, named by its base offset, then appends to it: a run that
    lists it in between reports no problem (``kafka-dump-log`` prints no error for it either), and the next run lands
    what it grew by."""
    md = _copy_node(tmp_path / "data") / "__cluster_metadata-0"
    end = read_file(sorted(md.glob("*.log"))[-1]).batches[-1]
    rolled = md / f"{end.last_offset + 1:020d}.log"
    rolled.touch()
    wh = tmp_path / "wh"
    first = _run(spark, [tmp_path / "data"], wh)
    assert first.errors == 0, first.line()
    row = next(r for r in _table(wh, "files").to_pylist() if r["path"].endswith(rolled.name))
    assert (row["status"], row["error_count"], row["errors"], row["records"]) == ("empty", 0, [], 0)

    noop = metadata_value(next(m for m in S.metadata.values() if m.record_type == "NO_OP_RECORD"), {}, 0)
    rolled.write_bytes(batch(end.last_offset + 1, [record(0, noop)], epoch=end.partition_leader_epoch,
                             base_timestamp=end.max_timestamp + 500))
    second = _run(spark, [tmp_path / "data"], wh)
    assert (second.errors, second.files_ingested, second.rows_added) == (0, 1, 1), second.line()
    offsets = [r["log_offset"] for r in _table(wh, "records").select(["log_offset", "snapshot_id"]).to_pylist()
               if r["snapshot_id"] is None]
    assert max(offsets) == end.last_offset + 1 and len(offsets) == len(set(offsets))


def test_active_segments_growing_on_every_node_land_as_the_whole_log_at_once(spark: Any, tmp_path: Path) -> None:
    """The hourly case: the active segment grows on all six nodes and new snapshots land on each. Every landed table
    equals landing the end at once, and the choice among copies reads only past what each segment had (the records
    of its prefix took part in an earlier run's choice)."""
    from services import copy_upto, table_rows

    hourly, once, inputs = tmp_path / "hourly", tmp_path / "once", tmp_path / "in"
    runs = [_run(spark, [copy_upto(SAMPLE, inputs, end)], hourly) for end in (1850, 1900, 1 << 40)]
    last = runs[-1]
    snapshot_records = sum(read_file(p).record_count for p in inputs.rglob("0*.checkpoint")
                           if int(p.name.split("-")[0]) > 1900)
    segment = read_file(next(inputs.rglob("00000000000000001818.log"))).record_count  # every node's active one
    # the choice read exactly the log records new since (each new snapshot is on one node: it lands unopposed), not
    # the segments' prefixes (176 records)
    assert 0 < last.chosen == last.rows_added - snapshot_records < segment
    _run(spark, [SAMPLE], once)
    cat = catalog()
    for t in [*cat.core.values(), *cat.typed.values()]:
        if t.name not in ("runs", "files"):  # what each run did and read, not what landed
            assert table_rows(str(hourly / t.name)) == table_rows(str(once / t.name)), t.name
    # each file's last ledger row tells the whole file, though the last runs read only what the segments grew by
    # (from their last batch landed on: its position and digest are the whole file's)
    whole = ["path", "size", "batches", "control_batches", "records", "crc_failures", "first_offset", "last_offset",
             "metadata_version", "status", "error_count", "tail_position", "tail_sha256"]
    versions: dict[str, list[dict[str, Any]]] = {}
    for r in sorted(_table(hourly, "files").select([*whole, "content_sha256", "ingested_at"]).to_pylist(),
                    key=lambda r: r["ingested_at"]):
        versions.setdefault(r["path"], []).append(r)
    def rows(ledger: Any) -> list[tuple[Any, ...]]:  # paths from the node directory on
        return sorted(("node-" + r["path"].split("/node-", 1)[1], *(r[c] for c in whole[1:])) for r in ledger)

    assert rows(v[-1] for v in versions.values()) == rows(_table(once, "files").select(whole).to_pylist())
    # content_sha256: of the bytes read whole, or chained from the version before and the bytes the file grew by
    chained = 0
    for path, (*before, end) in versions.items():
        data = Path(path.removeprefix("file:")).read_bytes()
        if end["content_sha256"] != hashlib.sha256(data).hexdigest():
            prev = before[-1]  # unchanged where the file did not grow (a copy touched: its ledger row the same)
            assert end["content_sha256"] == (prev["content_sha256"] if len(data) == prev["size"] else hashlib.sha256(
                prev["content_sha256"].encode() + data[prev["size"]:]).hexdigest()), path
            chained += 1
    assert chained == 6  # every node's active segment


def test_segments_a_live_controller_appends_to_while_the_run_reads_them_land(spark: Any, tmp_path: Path) -> None:
    """A live data directory: every node's active segment gets a batch (a NoOp, as a quiet controller writes one
    every 500 ms) every 20 ms while the run lists, plans and lands it. Each pass reads a file as it was listed, so
    every grown segment lands up to its listed size (none is left over as changed since the plan), and the next run
    takes the rest: the same tables as landing the final files at once."""
    import threading

    from services import arrow_rows, copy_upto

    live, once = tmp_path / "live", tmp_path / "once"
    inputs = copy_upto(SAMPLE, tmp_path / "in", 1850)
    _run(spark, [inputs], live)
    growing = sorted(inputs.rglob("00000000000000001818.log"))
    end = read_file(growing[0]).batches[-1]  # every replica ends with it (the log up to offset 1850)
    last, epoch = end.last_offset, end.partition_leader_epoch
    noop = metadata_value(next(m for m in S.metadata.values() if m.record_type == "NO_OP_RECORD"), {}, 0)
    done = threading.Event()

    def append() -> None:  # the same batch on every replica, whole, as Kafka appends
        offset = last + 1
        while not done.is_set():
            data = batch(offset, [record(0, noop)], epoch=epoch, base_timestamp=1_763_700_000_000 + offset)
            for p in growing:
                with p.open("ab") as fh:
                    fh.write(data)
            offset += 1
            done.wait(0.02)

    writer = threading.Thread(target=append)
    writer.start()
    try:
        during = _run(spark, [inputs], live)
    finally:
        done.set()
        writer.join()
    assert during.files_deferred == 0 and during.files_ingested == 6, during.line()
    ledger = _table(live, "files").filter(pa.compute.equal(pa.compute.field("run_id"), during.run_id)).to_pylist()
    assert sorted(Path(r["path"]).name for r in ledger) == ["00000000000000001818.log"] * 6
    assert all(Path(r["path"].removeprefix("file:")).stat().st_size > r["size"] for r in ledger)  # grew meanwhile
    _run(spark, [inputs], live)
    shutil.copytree(inputs, tmp_path / "final")
    _run(spark, [tmp_path / "final"], once)

    def rows(uri: Path) -> list[str]:  # the listing may catch the replicas a batch apart: the first to hold an
        t = DeltaTable(str(uri)).to_pyarrow_table()  # offset lands its copy (identical to the others) then
        return arrow_rows(t.drop_columns([c for c in ("node_id", "file_position") if c in t.column_names]))

    cat = catalog()
    for t in [*cat.core.values(), *cat.typed.values()]:
        if t.name not in ("runs", "files"):
            assert rows(live / t.name) == rows(once / t.name), t.name


def test_a_ledger_of_an_earlier_kraftlog_gains_the_tail_columns_in_place(spark: Any, tmp_path: Path) -> None:
    """A warehouse whose ``files`` ledger an earlier kraftlog wrote (no ``tail_position``, ``tail_sha256``) gains
    them in place, its rows kept: the grown segments are read whole once (their tails unknown), and from the rows
    that run writes on, from their last batch."""
    from deltalake import write_deltalake
    from services import copy_upto, table_rows

    from kraftlog.tables.definitions import _fingerprint

    wh, once, inputs = tmp_path / "wh", tmp_path / "once", tmp_path / "in"
    _run(spark, [copy_upto(SAMPLE, inputs, 1850)], wh)
    files = catalog()["files"]
    older = pa.schema([f for f in files.schema if f.name not in ("tail_position", "tail_sha256")])
    rows = _table(wh, "files").select(older.names).cast(older)
    shutil.rmtree(wh / "files")
    DeltaTable.create(str(wh / "files"), schema=older, name="files",
                      configuration={**files.table_properties(), "kraftlog.schema": _fingerprint(older)},
                      raise_if_key_not_exists=False)
    write_deltalake(str(wh / "files"), rows, mode="append")

    second = _run(spark, [copy_upto(SAMPLE, inputs, 1900)], wh)  # copied again: every file touched
    ledger = _table(wh, "files")
    assert ledger.column_names == files.columns and ledger.num_rows == rows.num_rows + second.files_ingested
    assert DeltaTable(str(wh / "files")).metadata().configuration["kraftlog.schema"] == files.fingerprint
    new = ledger.filter(pa.compute.invert(pa.compute.is_in(ledger["run_id"], rows["run_id"]))).to_pylist()
    assert all(r["tail_position"] is not None for r in new if r["file_kind"] == "segment")
    assert all(r["content_sha256"] == hashlib.sha256(Path(r["path"].removeprefix("file:")).read_bytes()).hexdigest()
               for r in new)  # read whole
    # executors reading the Parquet files themselves (object stores with no Hadoop connector) see the same
    # (handed each file's size from the Delta log, which the store lists with each active file's URI)
    from kraftlog.spark.store import read_parquet_with_pyarrow
    from kraftlog.storage import normalize

    store = DeltaRsStore(spark, str(wh))
    for name in ("files", "records"):  # (records: in partition folders)
        specs = store.files(catalog()[name])
        assert sorted(normalize(s.path) for s in specs) == sorted(
            normalize(u) for u in DeltaTable(str(wh / name)).file_uris())
        assert all(s.size == Path(s.path.removeprefix("file:")).stat().st_size for s in specs)
    read = read_parquet_with_pyarrow(spark, store.files(files), spark_schema(files), Config.load().storage)
    def pairs(rows: Any) -> list[tuple[str, int]]:
        return sorted((run, -1 if tail is None else tail) for run, tail in rows)

    assert pairs(read.select("run_id", "tail_position").collect()) == \
        pairs(zip(ledger["run_id"].to_pylist(), ledger["tail_position"].to_pylist(), strict=True))
    _run(spark, [copy_upto(SAMPLE, inputs, 1 << 40)], wh)

    def plain(r: dict[str, Any]) -> str:
        return hashlib.sha256(Path(r["path"].removeprefix("file:")).read_bytes()).hexdigest()

    chained = [r for r in _table(wh, "files").to_pylist()
               if r["path"].endswith("1818.log") and r["content_sha256"] != plain(r)]
    assert len(chained) >= 5  # read from their last batch on (node-103's did not grow)
    _run(spark, [SAMPLE], once)
    assert table_rows(str(wh / "records")) == table_rows(str(once / "records"))


def test_the_landed_rows_a_run_compares_its_winners_with(spark: Any) -> None:
    """Of a cluster whose competing files are all grown segments, the log records past the lowest offset already
    decided and the competing snapshots' records; of a cluster with a new or rewritten segment, every record; of a
    cluster where only snapshots compete, their records alone."""
    from kraftlog.spark.ingest import winners_may_meet
    from kraftlog.tables.rows import Ingested

    rows = [(c, s, o) for c in "abc" for s, o in [(None, 5), (None, 50), ("00000000000000000040-0000000001", 3),
                                                    ("00000000000000000090-0000000002", 7)]]
    landed = spark.createDataFrame(rows, "cluster_id string, snapshot_id string, log_offset long")
    files = {"/n1/__cluster_metadata-0/00000000000000000000.log": "a",  # grown, decided up to 20
             "/n2/__cluster_metadata-0/00000000000000000000.log": "a",  # grown, decided up to 30
             "/n1/__cluster_metadata-0/00000000000000000090-0000000002.checkpoint": "a",
             "/n1/__cluster_metadata-0/00000000000000000012.log": "b",  # new: read whole
             "/n2/__cluster_metadata-0/00000000000000000040-0000000001.checkpoint": "c"}
    decided = {"/n1/__cluster_metadata-0/00000000000000000000.log": Ingested(20, 900),
               "/n2/__cluster_metadata-0/00000000000000000000.log": Ingested(30, 1200)}
    kept = landed.filter(winners_may_meet(sorted(files), files, decided)).collect()
    assert {(r.cluster_id, r.snapshot_id, r.log_offset) for r in kept} == {
        ("a", None, 50), ("a", "00000000000000000090-0000000002", 7), *(r for r in rows if r[0] == "b"),
        ("c", "00000000000000000040-0000000001", 3)}
    assert landed.filter(winners_may_meet([], {}, {})).count() == 0


def read_file_prefix(data: bytes, name: str) -> Any:
    from kraftlog.wire.files import read_log

    return read_log(data, name).records()


def test_an_interrupted_run_is_completed_by_the_next_one(spark: Any, scenario: Any, tmp_path: Path) -> None:
    class Killed(Exception):
        pass

    commits: list[str] = []

    def kill_after_first_commit(table: str) -> None:
        commits.append(table)
        raise Killed(table)

    wh = tmp_path / "wh"
    config = _config(wh)
    store = DeltaRsStore(spark, str(wh), after_commit=kill_after_first_commit)
    with pytest.raises(Killed):
        ingest(spark, [str(SAMPLE)], config, store=store)
    assert len(commits) == 1
    assert DeltaTable(str(wh / "files")).count() == 0  # the ledger is committed last: nothing counts as done
    again = ingest(spark, [str(SAMPLE)], config)
    assert len(again.recovered) == 1 and again.files_ingested == 0
    reference, _ = scenario
    for t in catalog().all():
        if t.name in ("runs",):
            continue
        got = _table(wh, t.name).drop_columns(["run_id"] + (["ingested_at"] if t.name == "files" else []))
        want = _table(reference, t.name).drop_columns(["run_id"] + (["ingested_at"] if t.name == "files" else []))
        assert got.num_rows == want.num_rows, t.name
        key = [c for c in t.key if c in got.column_names] or got.column_names[:1]
        assert got.sort_by([(k, "ascending") for k in key]).to_pylist() == \
            want.sort_by([(k, "ascending") for k in key]).to_pylist() or t.name in ("batches", "files"), t.name


def _node_dir(root: Path, node: int, cluster: str, segment: bytes) -> None:
    d = root / f"node-{node}"
    (d / "__cluster_metadata-0").mkdir(parents=True)
    (d / "meta.properties").write_text(f"version=1\ncluster.id={cluster}\nnode.id={node}\n")
    (d / "__cluster_metadata-0" / "00000000000000000000.log").write_bytes(segment)


def _topics(base: int, names: list[str], epoch: int) -> bytes:
    spec = S.metadata[2]
    recs = [record(i, metadata_value(spec, {"name": n, "topic_id": "AAAAAAAAAAAAAAAAAAAAAQ"}, 0))
            for i, n in enumerate(names)]
    return batch(base, recs, epoch=epoch)


def test_the_higher_epoch_copy_wins_within_a_run_and_the_loser_is_recorded(spark: Any, tmp_path: Path) -> None:
    data = tmp_path / "data"
    common = _topics(0, ["a", "b", "c"], 1)
    _node_dir(data, 1, "c1", common + _topics(3, ["d", "e"], 1))  # an uncommitted suffix of epoch 1
    _node_dir(data, 2, "c1", common + _topics(3, ["x", "y", "z"], 2))  # the new leader's log
    wh = tmp_path / "wh"
    result = _run(spark, [data], wh)
    topics = _table(wh, "topic_record").sort_by("log_offset")
    assert topics.column("name").to_pylist() == ["a", "b", "c", "x", "y", "z"]
    assert topics.column("node_id").to_pylist()[3:] == [2, 2, 2]
    div = _table(wh, "divergence").sort_by("log_offset")
    assert result.divergent == 2 and div.column("log_offset").to_pylist() == [3, 4]
    assert div.column("reason").to_pylist() == ["lower_epoch", "lower_epoch"]
    assert div.column("loser_node_id").to_pylist() == [1, 1] and div.column("winner_batch_epoch")[0].as_py() == 2
    assert '"name":"d"' in div.column("loser_data_json")[0].as_py()


def test_a_landed_row_is_replaced_by_a_later_seen_higher_epoch_copy(spark: Any, tmp_path: Path) -> None:
    common = _topics(0, ["a", "b", "c"], 1)
    first, both = tmp_path / "first", tmp_path / "both"
    _node_dir(first, 1, "c1", common + _topics(3, ["d", "e"], 1))
    _node_dir(both, 1, "c1", common + _topics(3, ["d", "e"], 1))
    _node_dir(both, 2, "c1", common + _topics(3, ["x", "y", "z"], 2))
    wh = tmp_path / "wh"
    _run(spark, [first], wh)
    assert _table(wh, "topic_record").sort_by("log_offset").column("name").to_pylist() == ["a", "b", "c", "d", "e"]
    second = _run(spark, [both], wh)
    assert second.files_contested >= 1
    topics = _table(wh, "topic_record").sort_by("log_offset")
    assert topics.column("name").to_pylist() == ["a", "b", "c", "x", "y", "z"]
    records = _table(wh, "records")
    offsets = records.column("log_offset").to_pylist()
    assert sorted(offsets) == [0, 1, 2, 3, 4, 5]
    div = _table(wh, "divergence").to_pylist()
    replaced = sorted((r for r in div if r["reason"] == "replaced_by_higher_epoch"), key=lambda r: r["log_offset"])
    assert [r["log_offset"] for r in replaced] == [3, 4]  # the rows landed from first/ lost to epoch 2
    assert all("/first/" in r["loser_file"] and r["loser_batch_epoch"] == 1 for r in replaced)
    assert '"name":"d"' in replaced[0]["loser_data_json"]
    lost = sorted((r for r in div if r["reason"] == "lower_epoch"), key=lambda r: r["log_offset"])
    assert [(r["log_offset"], r["loser_node_id"]) for r in lost] == [(3, 1), (4, 1)]  # both/node-1, this run
    third = _run(spark, [both], wh)
    assert (third.rows_added, third.divergent) == (0, 0)


def _rows(wh: Path, name: str) -> list[dict[str, Any]]:
    """The rows of table ``name`` but for the columns that name the run, in key order."""
    t = _table(wh, name)
    t = t.drop_columns([c for c in ("run_id", "ingested_at") if c in t.column_names])
    return sorted(t.to_pylist(), key=lambda r: tuple(str(r[k]) for k in catalog()[name].key))


def _named(wh: Path, prefix: Path, cluster: str) -> Config:
    return Config.load(warehouse={"path": str(wh)},
                       identity={"override": [{"prefix": str(prefix), "cluster": cluster}]})


def test_data_directories_the_profile_renames_after_landing_land_again_under_the_new_names(
        spark: Any, tmp_path: Path) -> None:
    """Two nodes landed as one cluster, the higher-epoch copy of node 2 winning offsets 3-5; an override then names
    node 2 apart (the README's remedy for an identity conflict). Relabelling node 2's rows would leave each cluster
    without the offsets the other's copy had won: both clusters land again, each equal to a warehouse that had the
    new names from the start, and the names given back restore the first warehouse."""
    data = tmp_path / "data"
    common = _topics(0, ["a", "b", "c"], 1)
    _node_dir(data, 1, "c1", common + _topics(3, ["d", "e"], 1))
    _node_dir(data, 2, "c1", common + _topics(3, ["x", "y", "z"], 2))
    _node_dir(data / "other", 1, "c9", common + _topics(3, ["d", "e"], 1))
    wh, fresh = tmp_path / "wh", tmp_path / "fresh"
    first = _run(spark, [data], wh)
    assert first.renamed == 0
    # in the same run as the renaming, a landed row of another cluster is replaced by a higher-epoch copy: both
    # delete from ``records`` and ``topic_record``, in the one delete per table a run commits
    _node_dir(data / "other", 2, "c9", common + _topics(3, ["x", "y", "z"], 2))
    before = {t: _rows(wh, t) for t in ("records", "topic_record", "files", "divergence")}
    assert {r["cluster_id"] for r in before["records"]} == {"c1", "c9"}

    renamed = ingest(spark, [str(data)], _named(wh, data / "node-2", "c2"))
    assert (renamed.renamed, renamed.relanded) == (1, ["c1", "c2"])
    assert "1 data directory renamed (landed anew: c1, c2)" in renamed.line()
    ingest(spark, [str(data)], _named(fresh, data / "node-2", "c2"))
    for t in ("records", "topic_record", "batches", "files"):
        assert _rows(wh, t) == _rows(fresh, t), t
    names = {(r["cluster_id"], r["name"]) for r in _table(wh, "topic_record").to_pylist()}
    assert names == {("c1", n) for n in "abcde"} | {("c2", n) for n in "abcxyz"} | {("c9", n) for n in "abcxyz"}
    assert len(_table(wh, "records")) == 5 + 6 + 6
    again = ingest(spark, [str(data)], _named(wh, data / "node-2", "c2"))
    assert (again.files_ingested, again.renamed) == (0, 0)

    back = _run(spark, [data], wh)
    assert back.relanded == ["c1", "c2"]
    for t, rows in before.items():
        c1 = [r for r in rows if r["cluster_id"] == "c1"]
        assert [r for r in _rows(wh, t) if r["cluster_id"] != "c9"] == c1, t


def test_a_data_directory_found_under_a_second_root_lands_nothing_twice(spark: Any, tmp_path: Path) -> None:
    """The same node's data directory under a second root (an archive copied to a new prefix) is read again, as a
    copy of the one landed: no landed row changes, the ledger gains its files, and the event tables the pipeline
    then builds have one row per key (``snapshots`` had a row per file of a node's snapshot)."""
    from click.testing import CliRunner

    from kraftlog.analytics.definitions import event_tables
    from kraftlog.cli import main

    wh = tmp_path / "wh"
    _copy_node(tmp_path / "archive")
    _run(spark, [tmp_path / "archive"], wh)
    landed = {t: _rows(wh, t) for t in ("records", "partition_change_record", "snapshot_header")}
    _copy_node(tmp_path / "archive-2")
    again = _run(spark, [tmp_path / "archive", tmp_path / "archive-2"], wh)
    assert again.files_ingested == len(list((tmp_path / "archive-2").rglob("*.log"))) + len(
        list((tmp_path / "archive-2").rglob("*.checkpoint")))
    for t, rows in landed.items():
        assert _rows(wh, t) == rows, t
    ledger = _table(wh, "files").to_pylist()
    assert any("/archive-2/" in r["path"] for r in ledger) and any("/archive/" in r["path"] for r in ledger)
    files = [r for r in ledger if r["file_kind"] == "snapshot"]
    assert len(files) == 2 * len({r["snapshot_id"] for r in files})  # every snapshot twice, in each root
    for command in ("reconstruct", "analyze"):
        out = CliRunner().invoke(main, [command, "--warehouse", str(wh)])
        assert out.exit_code == 0, out.output
    assert _table(wh, "snapshots").num_rows == len({r["snapshot_id"] for r in files}) > 1
    for name, table in event_tables().items():
        assert not repeated_keys(str(wh / name), table), name


def test_a_data_directory_whose_meta_properties_broke_after_landing_keeps_its_landed_name(
        spark: Any, tmp_path: Path) -> None:
    """A ``meta.properties`` without its ``cluster.id`` names no cluster (``unknown-cluster``, in doubt): that is no
    renaming, so nothing lands again and the directory's new segment lands under the name it landed as, the problem
    in its ledger row."""
    data = tmp_path / "data"
    _node_dir(data, 1, "c1", _topics(0, ["a", "b"], 1))
    wh = tmp_path / "wh"
    _run(spark, [data], wh)
    (data / "node-1" / "meta.properties").write_text("version=1\nnode.id=1\n")
    (data / "node-1" / "__cluster_metadata-0" / "00000000000000000002.log").write_bytes(_topics(2, ["c"], 1))
    hour = _run(spark, [data], wh)
    assert (hour.renamed, hour.names_kept, hour.rows_added) == (0, 0, 1)
    topics = _table(wh, "topic_record").sort_by("log_offset").to_pylist()
    assert [(r["cluster_id"], r["name"]) for r in topics] == [("c1", n) for n in "abc"]
    new = next(r for r in _table(wh, "files").to_pylist() if r["path"].endswith("00000000000000000002.log"))
    assert new["cluster_id"] == "c1" and "cluster.id" in new["errors"][0]


def test_the_histories_and_events_of_a_cluster_renamed_after_landing_are_those_of_its_new_name(
        spark: Any, tmp_path: Path) -> None:
    """After a renaming, ``reconstruct`` and ``analyze`` drop the old name (gone) and build the new one: every table
    equals that of a warehouse that had the new name from the start. Until then, ``state --warehouse`` of the old
    name says that nothing of it is landed any more."""
    from click.testing import CliRunner
    from services import table_rows, tables

    from kraftlog.cli import main
    from kraftlog.spark.analyze import analyze
    from kraftlog.spark.history import reconstruct

    data = tmp_path / "data"
    for node in (1, 2):
        _node_dir(data, node, "c1", _topics(0, ["a", "b", "c"], 1))
    wh, fresh = tmp_path / "wh", tmp_path / "fresh"
    configs = (_config(wh), _config(wh, cluster="prod-{cluster.id}"), _config(fresh, cluster="prod-{cluster.id}"))
    for i, config in enumerate(configs):
        ingest(spark, [str(data)], config)
        if i == 1:  # renamed, not built yet
            old = CliRunner().invoke(main, ["state", "--warehouse", str(wh), "--cluster", "c1", "--kind", "topics"])
            assert old.exit_code == 0 and '"c"' in old.stdout, old.output
            assert ("warning: nothing of c1 is landed any more (its data directories land under another name): "
                    "`kraftlog reconstruct` drops its histories") in old.stderr
        reconstruct(spark, config)
        analyze(spark, config)
    assert {r["cluster_id"] for r in _table(wh, "topics_history").to_pylist()} == {"prod-c1"}
    for name in tables(fresh):
        if name not in ("runs",):
            assert table_rows(str(wh / name)) == table_rows(str(fresh / name)), name


def test_data_directories_renamed_after_their_old_segments_were_deleted_keep_their_landed_names(
        spark: Any, tmp_path: Path) -> None:
    """A live data directory's first segment deleted by Kafka after landing: its rows cannot be read again, so a
    renaming profile keeps the names landed, says so, and the directory's new segment lands under them too."""
    data = tmp_path / "data"
    _node_dir(data, 1, "c1", _topics(0, ["a", "b"], 1))
    log_dir = data / "node-1" / "__cluster_metadata-0"
    (log_dir / "00000000000000000002.log").write_bytes(_topics(2, ["c"], 1))
    wh = tmp_path / "wh"
    _run(spark, [data], wh)
    (log_dir / "00000000000000000000.log").unlink()
    (log_dir / "00000000000000000003.log").write_bytes(_topics(3, ["d"], 1))
    kept = ingest(spark, [str(data)], _named(wh, data / "node-1", "renamed"))
    assert (kept.names_kept, kept.renamed, kept.rows_added) == (1, 0, 1)
    assert "RENAMING REFUSED for 1 data directory (their files landed before are gone)" in kept.line()
    topics = _table(wh, "topic_record").sort_by("log_offset").to_pylist()
    assert [(r["cluster_id"], r["name"]) for r in topics] == [("c1", n) for n in "abcd"]
    assert {r["cluster_id"] for r in _table(wh, "files").to_pylist()} == {"c1"}


@contextlib.contextmanager
def _collected() -> Iterator[list[int]]:
    """The number of rows of each ``collect`` to the driver while in the block."""
    from pyspark.sql.classic.dataframe import DataFrame

    counts: list[int] = []
    collect = DataFrame.collect

    def counted(self: Any) -> Any:
        rows = collect(self)
        counts.append(len(rows))
        return rows

    DataFrame.collect = counted  # type: ignore[method-assign]
    try:
        yield counts
    finally:
        DataFrame.collect = collect  # type: ignore[method-assign]


def test_an_ingest_collects_what_its_listing_names_not_the_history_of_the_ledger(spark: Any, tmp_path: Path) -> None:
    """The ledger grows by a row per file version (millions a year in a fleet): a run reads in Spark the latest row of
    each file it found and, of the clusters it lands, what it plans against. With 20,000 rows of history (other
    clusters' files, older versions of its own: ``ledger_history``), the hour's ingest of two grown segments lands
    what a warehouse without that history lands, and the driver collects a few dozen rows, not the ledger."""

    data = tmp_path / "data"
    common = _topics(0, ["a", "b", "c"], 1)
    for node in (1, 2):
        _node_dir(data, node, "c1", common)
    whs = [tmp_path / "wh", tmp_path / "plain"]
    for wh in whs:
        _run(spark, [data], wh)
    add_history(whs[0], 20_000)
    for node in (1, 2):  # the hour: both nodes' active segment grew
        with open(data / f"node-{node}" / "__cluster_metadata-0" / "00000000000000000000.log", "ab") as fh:
            fh.write(_topics(3, ["d", "e"], 1))
    with _collected() as collected:
        hour = _run(spark, [data], whs[0])
    assert (hour.files_ingested, hour.rows_added) == (2, 2)
    assert sum(collected) < 100, collected
    _run(spark, [data], whs[1])
    assert _rows(whs[0], "records") == _rows(whs[1], "records")
    assert [r["name"] for r in _rows(whs[0], "topic_record")] == list("abcde")


def test_a_run_collects_of_its_listing_what_changed_and_the_names_its_directories_landed_under(
        spark: Any, tmp_path: Path) -> None:
    """``compare``: of 60 files listed (an archive keeps every file), the driver collects the rows of the one that
    grew and the one that is new, and per data directory the names its unchanged files landed as."""

    from kraftlog.spark.ledger import compare
    from kraftlog.storage import normalize

    data = tmp_path / "data"
    _node_dir(data, 1, "c1", _topics(0, ["t0"], 1))
    log_dir = data / "node-1" / "__cluster_metadata-0"
    for i in range(1, 60):
        (log_dir / f"{i:020d}.log").write_bytes(_topics(i, [f"t{i}"], 1))
    wh = tmp_path / "wh"
    _run(spark, [data], wh)
    with open(log_dir / f"{59:020d}.log", "ab") as fh:
        fh.write(_topics(60, ["t60"], 1))
    (log_dir / f"{61:020d}.log").write_bytes(_topics(61, ["t61"], 1))
    listed = [(normalize(e.path), e.size, e.mtime_ms, normalize(dd.root)) for dd in scan([str(data)])
              for e, _ in dd.files]
    with _collected() as collected:
        got = compare(DeltaRsStore(spark, str(wh)), catalog(), listed)
    assert len(listed) == 61 and sum(collected) == 3, collected
    assert {Path(p).name: r is None for p, r in got.changed.items()} == {f"{59:020d}.log": False,
                                                                         f"{61:020d}.log": True}
    grown = got.changed[next(p for p in got.changed if p.endswith("59.log"))]
    assert grown is not None and grown["last_offset"] == 59
    assert got.names == {listed[0][3]: {("c1", 1)}}


def test_the_maximal_offset_intervals_of_each_cluster(spark: Any) -> None:
    """``maximal``: of each cluster's intervals, those no other one holds (an interval inside another adds nothing to
    the overlap tests of the plan); equal ones once."""
    from kraftlog.spark.ledger import maximal
    from kraftlog.spark.session import local_frame

    ddl = "cluster_id string, first_offset long, last_offset long"
    spans = local_frame(spark, [("a", 0, 10), ("a", 0, 5), ("a", 3, 10), ("a", 4, 12), ("a", 20, 30), ("a", 20, 30),
                                ("a", 21, 25), ("b", 0, 5), ("b", 1, 2)], ddl)
    want = local_frame(spark, [("a", 0, 10), ("a", 4, 12), ("a", 20, 30), ("b", 0, 5)], ddl)
    assert_df_equality(maximal(spans), want, ignore_row_order=True)


@st.composite
def _landed_and_segments(draw: Any) -> tuple[list[tuple[int, int]], list[Any]]:
    """Offset intervals landed before (those of the grown segments' parts landed among them) and changed segments of
    one cluster: new ones, and grown ones (their part landed before unchanged)."""
    from kraftlog.planning import PlannedFile

    def span() -> tuple[int, int]:
        lo = draw(st.integers(0, 60))
        return lo, lo + draw(st.integers(0, 15))

    landed = [span() for _ in range(draw(st.integers(0, 6)))]
    files = []
    for i in range(draw(st.integers(1, 4))):
        first, last = span()
        grown = last > first and draw(st.booleans())
        before = draw(st.integers(first, last - 1)) if grown else None
        if before is not None:
            landed.append((first, before))
        files.append(PlannedFile(f"s{i}.log", "c", "segment", None, first, last, "x", 10 if grown else None, before,
                                 grown))
    return landed, files


@settings(max_examples=examples(25), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=_landed_and_segments())
def test_a_plan_against_the_maximal_intervals_landed_is_the_plan_against_all_of_them(spark: Any, case: Any) -> None:
    """``landed_before`` gives the plan only the maximal intervals landed (a growing segment leaves one interval per
    hour): the plan is the same as against every interval, the grown segments' own parts included."""
    from kraftlog.planning import Landed, plan_files
    from kraftlog.spark.ledger import maximal
    from kraftlog.spark.session import local_frame

    landed, files = case
    spans = local_frame(spark, [("c", lo, hi) for lo, hi in landed], "cluster_id string, first_offset long, "
                        "last_offset long")
    kept = tuple(sorted((r["first_offset"], r["last_offset"]) for r in maximal(spans).collect()))
    assert plan_files(files, {"c": Landed(kept)}) == plan_files(files, {"c": Landed(tuple(sorted(landed)))})


def test_a_corrupt_copy_loses_to_a_valid_replica_and_is_reported(spark: Any, tmp_path: Path) -> None:
    data = tmp_path / "data"
    seg = _topics(0, ["a", "b", "c"], 1)
    bad = bytearray(seg)
    bad[seg.index(b"b")] ^= 0x02  # "b" -> "`": CRC mismatch on node 1, the lowest node
    _node_dir(data, 1, "c1", bytes(bad))
    _node_dir(data, 2, "c1", seg)
    wh = tmp_path / "wh"
    result = _run(spark, [data], wh)
    assert result.errors == 1
    assert _table(wh, "topic_record").sort_by("log_offset").column("name").to_pylist() == ["a", "b", "c"]
    ledger = _table(wh, "files").to_pylist()
    node1 = next(r for r in ledger if "node-1" in r["path"])
    assert node1["status"] == "errors" and node1["crc_failures"] == 1 and "@0: CRC mismatch" in node1["errors"][0]
    crc = {r["node_id"]: r["crc_valid"] for r in _table(wh, "batches").to_pylist()}
    assert crc == {1: False, 2: True}


def test_files_of_a_corrupt_segment_land_with_their_problems_marked(spark: Any, tmp_path: Path) -> None:
    data = tmp_path / "data"
    seg = _topics(0, ["a"], 1) + _topics(1, ["b"], 1)
    bad = bytearray(seg)
    bad[seg.index(b"b")] ^= 0x02
    _node_dir(data, 1, "c1", bytes(bad) + b"\x00\x01\x02")
    wh = tmp_path / "wh"
    result = _run(spark, [data], wh)
    assert result.errors == 2
    rec = {r["log_offset"]: r for r in _table(wh, "records").to_pylist()}
    assert rec[0]["status"] == "ok" and rec[1]["status"] == "corrupt_batch" and "CRC mismatch" in rec[1]["error"]
    assert rec[1]["raw_value"] is not None  # not a sensitive type: raw bytes kept where decoding is not trusted
    assert _table(wh, "topic_record").column("name").to_pylist() == ["a"]  # typed tables hold trusted rows only


def test_jobs_ingest_entry_point_and_cli(spark: Any, tmp_path: Path) -> None:
    from click.testing import CliRunner

    from kraftlog.cli import main

    job = load_job("ingest")
    assert job.main([str(SAMPLE / "node-2"), "--warehouse", str(tmp_path / "a")]) == 0
    assert DeltaTable(str(tmp_path / "a" / "records")).count() > 1000
    result = CliRunner().invoke(main, ["ingest", str(SAMPLE / "node-2"), "--warehouse", str(tmp_path / "a"),
                                       "--quiet"])
    assert result.exit_code == 0, result.output
    assert "ingested 0" in result.output and "new rows 0" in result.output


def test_reads_of_landed_tables_go_through_spark(spark: Any, scenario: Any) -> None:
    wh, _ = scenario
    store = open_store(spark, str(wh))
    df = store.read(catalog()["records"])
    plan = df._jdf.queryExecution().executedPlan().toString()
    assert "FileScan parquet" in plan  # executors scan the table's files; nothing is collected to the driver
    assert df.filter("record_type = 'TOPIC_RECORD'").count() == DeltaTable(str(wh / "topic_record")).count()


def test_a_landed_corrupt_row_is_replaced_by_a_later_seen_trusted_copy(spark: Any, tmp_path: Path) -> None:
    # the copy choice is one order for one run and across runs: before, a later run only replaced landed rows
    # of a lower epoch, so a corrupt copy landed first stayed while a valid copy of the same epoch existed
    good = _topics(0, ["a", "b", "c"], 1)
    bad = bytearray(good)
    bad[good.index(b"b")] ^= 0x02  # CRC mismatch
    first, both = tmp_path / "first", tmp_path / "both"
    _node_dir(first, 2, "c1", bytes(bad))
    _node_dir(both, 2, "c1", bytes(bad))
    _node_dir(both, 3, "c1", good)
    wh = tmp_path / "wh"
    _run(spark, [first], wh)
    assert {r["status"] for r in _table(wh, "records").to_pylist()} == {"corrupt_batch"}
    _run(spark, [both], wh)
    rows = sorted(_table(wh, "records").to_pylist(), key=lambda r: r["log_offset"])
    assert [(r["log_offset"], r["status"], r["node_id"]) for r in rows] == [(0, "ok", 3), (1, "ok", 3), (2, "ok", 3)]
    assert _table(wh, "topic_record").sort_by("log_offset").column("name").to_pylist() == ["a", "b", "c"]
    div = _table(wh, "divergence").to_pylist()
    replaced = sorted(r["log_offset"] for r in div if r["reason"] == "replaced_by_better_copy")
    assert replaced == [1]  # the landed row of first/node-2 whose bytes differ (as among one run's copies)
    assert {r["reason"] for r in div} == {"replaced_by_better_copy", "corrupt_copy"}  # both/node-2 lost this run


def test_a_new_segment_reaching_below_its_base_offset_is_reported_not_landed_twice(spark: Any,
                                                                                     tmp_path: Path) -> None:
    data = tmp_path / "data"
    _node_dir(data, 1, "c1", _topics(0, ["a", "b", "c"], 1))
    wh = tmp_path / "wh"
    first = _run(spark, [data], wh)
    assert (first.files_clean, first.files_contested, first.rows_added) == (1, 0, 3)  # planned by its name
    # a new segment named for offset 3 that also holds offset 2 again (a damaged copy)
    (data / "node-1" / "__cluster_metadata-0" / "00000000000000000003.log").write_bytes(
        _topics(2, ["c", "d", "e"], 1))
    second = _run(spark, [data], wh)
    assert (second.rows_added, second.errors) == (2, 2)
    # the batch's base offset (outside its CRC) disagrees with the name: its records land, untrusted
    names = _table(wh, "topic_record").sort_by("log_offset").column("name").to_pylist()
    assert names == ["a", "b", "c"]
    records = _table(wh, "records").to_pylist()
    assert sorted((r["log_offset"], r["status"]) for r in records if r["log_offset"] > 2) == [
        (3, "corrupt_batch"), (4, "corrupt_batch")]
    ledger = next(r for r in _table(wh, "files").to_pylist() if r["path"].endswith("3.log"))
    assert ledger["status"] == "errors" and "base offset 2 where the file's name says 3" in ledger["errors"][0]
    assert "outside the offsets this segment's name allows (3 and above), first at offset 2" in ledger["errors"][1]


def test_meta_properties_read_through_storage(tmp_path: Path) -> None:
    from kraftlog.spark.inputs import read_meta_properties
    from kraftlog.storage import Storage

    paths = []
    for node in (1, 2):
        d = tmp_path / f"n{node}"
        d.mkdir()
        (d / "meta.properties").write_text(f"#\nversion=1\ncluster.id=c-{node}\nnode.id={node}\ndirectory.id=d{node}\n")
        paths.append(f"file:{d / 'meta.properties'}")
    read = read_meta_properties(paths, Storage())
    assert {p: (m.cluster_id, m.node_id, m.directory_id, m.version) for p, m in read.items()} == \
        {paths[0]: ("c-1", 1, "d1", 1), paths[1]: ("c-2", 2, "d2", 1)}


def test_each_cluster_is_read_whole_by_one_task_without_a_shuffle(spark: Any, tmp_path: Path) -> None:
    import pyarrow as pa

    from kraftlog.spark.inputs import Content, FileSpec, by_cluster
    from kraftlog.storage import Storage

    files, specs = {}, []
    for c in range(5):
        for n in range(3):
            f = tmp_path / f"c{c}-n{n}.log"
            f.write_bytes(bytes(100 * (c + 1)))
            files[f"file:{f}"] = f"cluster-{c}"
            specs.append(FileSpec(f"file:{f}", f.stat().st_size, 0))

    def paths(batches: Any) -> Any:
        seen = []
        for b in batches:
            assert all(isinstance(c, Content) and len(c.data) == (int(c.path.rsplit("/c", 1)[1][0]) + 1) * 100
                       for c in b)
            seen += [c.path for c in b]
        yield pa.RecordBatch.from_pylist([{"paths": seen}])

    groups = by_cluster(spark, specs, files, Storage())
    df = groups.map(spark, paths, pa.schema([("paths", pa.list_(pa.string()))]))
    assert "Exchange" not in df._jdf.queryExecution().executedPlan().toString()
    parts = [r["paths"] for r in df.collect()]
    assert len(parts) == spark.sparkContext.defaultParallelism  # one group per core here
    assert sorted(p for part in parts for p in part) == sorted(files)
    for part in parts:  # every cluster in a task has all its files there
        clusters = {files[p] for p in part}
        assert sum(1 for p in files if files[p] in clusters) == len(part)


def test_a_batch_of_file_contents_holds_one_big_file_or_a_few_small_ones(tmp_path: Path, monkeypatch: Any) -> None:
    """A task holds a batch's contents at once: a batch never passes ``BYTES_PER_BATCH`` but for a file bigger on its
    own, so a task's memory follows its biggest file, not how many files its cluster has."""
    import kraftlog.spark.inputs as inputs
    from kraftlog.storage import Storage

    monkeypatch.setattr(inputs, "BYTES_PER_BATCH", 1000)
    sizes = [300, 300, 300, 2500, 300, 900, 200, 100, 50, 50, 50, 50, 50, 50, 50]
    specs = []
    for i, n in enumerate(sizes):
        f = tmp_path / f"{i:02d}.log"
        f.write_bytes(bytes(n))
        specs.append(inputs.FileSpec(f"file:{f}", n, 0))
    batches = [[len(c.data) for c in b] for b in inputs.read_contents(specs, Storage())]
    assert batches == [[300, 300, 300], [2500], [300], [900], [200, 100, 50, 50, 50, 50, 50, 50], [50]]


def test_a_new_cluster_too_big_to_decide_at_once_is_planned_from_its_headers_to_the_same_rows(
        spark: Any, scenario: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A new cluster's files are decided together in one task only up to ``TOGETHER_BYTES`` (that task holds all
    their columns at once); a bigger one goes through the header pass: the landed tables are the same."""
    from services import table_rows

    import kraftlog.spark.ingest as ingest_module

    monkeypatch.setattr(ingest_module, "TOGETHER_BYTES", 0)
    result = ingest(spark, [str(SAMPLE)], Config.load(warehouse={"path": str(tmp_path)}))
    assert result.files_contested < scenario[1].files_contested  # only files whose offsets overlap
    # the files that land directly are not the cluster's one task: they spread over the tasks by bytes (local[2]:
    # two), each writing its own records file (in one task, the cluster's first ingest used one core)
    assert len(list((tmp_path / "records").rglob("*.parquet"))) >= 2
    cat = catalog()
    for t in [*cat.core.values(), *cat.typed.values()]:
        if t.name == "runs":  # what each run did (this one planned differently), not what landed
            continue
        assert table_rows(str(tmp_path / t.name)) == table_rows(str(scenario[0] / t.name)), t.name
