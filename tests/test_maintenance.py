"""Table upkeep: statistics for every filterable column, compaction, z-order and vacuum change no row."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from conftest import SAMPLE, load_job
from services import table_rows, tables

pytestmark = pytest.mark.spark


def _cli(*args: str) -> str:
    from kraftlog.cli import main

    out = CliRunner().invoke(main, list(args))
    assert out.exit_code == 0, (args, out.output, out.exception)
    return str(out.output)


def _second_cluster(dest: Path) -> Path:
    """The sample as another cluster's (``second-cluster-id-0000``) at ``dest``."""
    shutil.copytree(SAMPLE, dest)
    for meta in dest.rglob("meta.properties"):
        meta.write_text("\n".join("cluster.id=second-cluster-id-0000" if line.startswith("cluster.id=") else line
                                  for line in meta.read_text().splitlines()) + "\n")
    return dest


def test_landed_files_carry_time_and_id_statistics(sample_warehouse: Any) -> None:
    from deltalake import DeltaTable

    wh, _ = sample_warehouse
    dt = DeltaTable(str(wh / "records"))
    actions = pa.table(dt.get_add_actions(flatten=True))
    data = dt.to_pyarrow_table(columns=["timestamp", "log_offset", "record_type"])
    ts = pc.min_max(data.column("timestamp"))
    assert pc.min(actions.column("min.timestamp")).as_py() <= ts["min"].as_py()
    assert pc.max(actions.column("max.timestamp")).as_py() >= ts["max"].as_py()
    assert pc.max(actions.column("max.timestamp")).as_py().timestamp() - ts["max"].as_py().timestamp() < 0.001
    assert pc.min(actions.column("min.record_type")).as_py() == pc.min(data.column("record_type")).as_py()
    # a reader skips every file for a time after the log's end
    after = ts["max"].as_py().replace(year=ts["max"].as_py().year + 1)
    assert dt.to_pyarrow_dataset().count_rows(filter=pc.field("timestamp") > pa.scalar(after)) == 0


def open_apart(wh: Path) -> tuple[list[str], set[str]]:
    """The files of ``wh`` that hold rows a next build rewrites (a null ``TableDef.open_column``: a current version,
    an open window) beside closed rows; and the kinds of the tables that have such rows."""
    from deltalake import DeltaTable

    from kraftlog.spark.maintenance import all_tables

    mixed, opened = [], set()
    for t in all_tables():
        if t.open_column is None or not (wh / t.name).exists():
            continue
        for a in pa.table(DeltaTable(str(wh / t.name)).get_add_actions(flatten=True)).to_pylist():
            nulls = a[f"null_count.{t.open_column}"]
            opened |= {t.kind} if nulls else set()
            mixed += [f"{t.name}/{a['path']}"] if 0 < nulls < a["num_records"] else []
    return mixed, opened


def test_maintain_compacts_and_vacuums_without_changing_a_row(spark: Any, sample_events: Any,
                                                             tmp_path: Path) -> None:
    from deltalake import DeltaTable

    source, _ = sample_events
    wh = tmp_path / "wh"
    shutil.copytree(source, wh)
    # the rows an hourly build rewrites are in files of their own (its delete skips the others): as built ...
    assert open_apart(wh) == ([], {"history", "event"})
    names = [n for n in tables(wh) if n != "runs"]
    before = {n: table_rows(str(wh / n)) for n in names}
    files_before = {n: len(DeltaTable(str(wh / n)).file_uris()) for n in names}
    assert max(files_before.values()) > 1  # two tasks wrote records: something to compact

    out = _cli("maintain", "--warehouse", str(wh), "--retention-hours", "0")
    assert "files compacted" in out and "vacuumed" in out
    for n in names:
        dt = DeltaTable(str(wh / n))
        assert table_rows(str(wh / n)) == before[n], n
        assert len(dt.file_uris()) <= max(1, files_before[n]), n
        on_disk = {p.name for p in (wh / n).glob("*.parquet")}
        assert on_disk == {Path(u).name for u in dt.file_uris()}, n  # vacuumed: only referenced files remain
    assert len(DeltaTable(str(wh / "records")).file_uris()) == 1
    assert open_apart(wh) == ([], {"history", "event"})  # ... and compacted
    for n in names:  # the next run reads each table's log from a checkpoint of its latest version, and no commit
        dt = DeltaTable(str(wh / n))
        assert json.loads((wh / n / "_delta_log" / "_last_checkpoint").read_text())["version"] == dt.version(), n

    _cli("maintain", "--warehouse", str(wh), "--z-order", "--retention-hours", "0")
    for n in names:
        assert table_rows(str(wh / n)) == before[n], n
    # ingest still knows what it landed (ledger and application transactions kept)
    assert "new rows 0" in _cli("ingest", str(SAMPLE), "--warehouse", str(wh))


def test_a_retention_is_hours_of_0_or_more_and_keeps_what_a_fraction_of_an_hour_asks(spark: Any, sample_events: Any,
                                                                                    tmp_path: Path) -> None:
    """``--retention-hours`` below 0 or NaN are usage errors before Spark starts, nothing compacted (they ended in
    delta-rs' ValueError, or int()'s, after the first table was); a fraction of an hour is rounded up, not down: 0.5
    keeps the files compaction just left unreferenced (rounded down to 0, as before, it removed them)."""
    from deltalake import DeltaTable

    from kraftlog.cli import main

    source, _ = sample_events
    wh = tmp_path / "wh"
    shutil.copytree(source, wh)
    # a second cluster's run: the landed tables get files to compact (a small build writes a file of each cluster's
    # rows per table, open rows apart: nothing to compact in the others)
    _cli("ingest", str(_second_cluster(tmp_path / "b")), "--warehouse", str(wh))
    versions = {n: DeltaTable(str(wh / n)).version() for n in tables(wh)}
    for bad in ("-5", "nan"):  # usage errors, before Spark starts (the job's too)
        out = CliRunner().invoke(main, ["maintain", "--warehouse", str(wh), "--retention-hours", bad])
        assert out.exit_code == 2 and out.output.strip().splitlines()[-1] == (
            f"Error: Invalid value for '--retention-hours': retention of {float(bad)} hours: a number of hours, "
            "0 or more"), out.output
        with pytest.raises(SystemExit) as exit_status:
            load_job("maintain").main(["--warehouse", str(wh), "--retention-hours", bad])
        assert exit_status.value.code == 2
    assert {n: DeltaTable(str(wh / n)).version() for n in tables(wh)} == versions  # nothing compacted
    most = "records"
    written = {p.name for p in (wh / most).glob("*.parquet")}
    assert len(written) > 1, most  # something to compact
    out = _cli("maintain", "--warehouse", str(wh), "--retention-hours", "0.5")
    assert "vacuumed 0," in out, out
    assert len(DeltaTable(str(wh / most)).file_uris()) < len(written), most  # compacted ...
    assert written < {p.name for p in (wh / most).glob("*.parquet")}, most  # ... and the files it replaced kept


def test_compaction_keeps_a_fleets_tables_clustered_by_cluster_and_time(spark: Any, tmp_path: Path,
                                                                       monkeypatch: Any) -> None:
    """Runs land cluster A's first part, cluster B, then the rest of A: maintain leaves each file's rows sorted by
    cluster and time, row groups of one cluster (but where a file passes from one cluster to the next), and a reader
    of one cluster skips the other's row groups; no row changes and ingest stays idempotent."""
    import pyarrow.dataset as ds
    from deltalake import DeltaTable
    from services import copy_upto

    from kraftlog.spark import maintenance

    wh = tmp_path / "wh"
    for source in (copy_upto(SAMPLE, tmp_path / "a", 1850), _second_cluster(tmp_path / "b"), SAMPLE):
        _cli("ingest", str(source), "--warehouse", str(wh))
    names = [n for n in tables(wh) if n != "runs"]
    before = {n: table_rows(str(wh / n)) for n in names}
    monkeypatch.setattr(maintenance, "ROW_GROUP_ROWS", 500)
    assert "files compacted" in _cli("maintain", "--warehouse", str(wh), "--no-vacuum")

    for n in names:
        assert table_rows(str(wh / n)) == before[n], n
    dt = DeltaTable(str(wh / "records"))
    assert len(dt.file_uris()) == 1
    path = dt.file_uris()[0]
    rows = pq.read_table(path, columns=["cluster_id", "timestamp"])
    assert rows.equals(rows.sort_by([("cluster_id", "ascending"), ("timestamp", "ascending")]))
    meta = pq.ParquetFile(path).metadata
    column = meta.schema.names.index("cluster_id")
    bounds = [(meta.row_group(i).column(column).statistics.min, meta.row_group(i).column(column).statistics.max)
              for i in range(meta.num_row_groups)]
    assert meta.num_row_groups > 4 and sum(lo != hi for lo, hi in bounds) <= 1
    fragment = next(iter(ds.dataset(path).get_fragments()))
    wanted = fragment.split_by_row_group(pc.field("cluster_id") == "second-cluster-id-0000")
    assert 0 < sum(f.row_groups[0].num_rows for f in wanted) < rows.num_rows
    assert "files compacted 0 -> 0" in _cli("maintain", "--warehouse", str(wh), "--no-vacuum")  # nothing new
    assert "new rows 0" in _cli("ingest", str(SAMPLE), "--warehouse", str(wh))


def test_a_tables_log_checkpoints_itself_every_ten_commits(spark: Any, tmp_path: Path) -> None:
    """A reader opens a table from its last checkpoint and the commits since: kraftlog's tables checkpoint every 10
    commits (Delta Lake's default; delta-rs's is 100), so an hourly run reads a few log objects per table, not 100."""
    from deltalake import DeltaTable

    from kraftlog.spark.store import open_store
    from kraftlog.state.entities import history_tables

    store = open_store(spark, str(tmp_path / "wh"))
    table = history_tables()["acls"]
    store.ensure(table)
    row = pa.Table.from_pylist([{f.name: None for f in table.schema} | {"cluster_id": "a", "valid_from_offset": 0}],
                               schema=table.schema)
    for k in range(12):
        store.overwrite(table, store.stage_small(table, row, f"r{k}"), f"b{k}")
    dt = DeltaTable(str(tmp_path / "wh" / "acls_history"))
    assert dt.metadata().configuration["delta.checkpointInterval"] == "10" and dt.version() == 12
    assert sorted(p.name for p in (tmp_path / "wh" / "acls_history" / "_delta_log").glob("*.checkpoint.parquet")) == [
        f"{9:020d}.checkpoint.parquet"]
    assert dt.to_pyarrow_table().num_rows == 1
