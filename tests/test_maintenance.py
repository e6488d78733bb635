"""Table upkeep: statistics for every filterable column, compaction, z-order and vacuum change no row."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from click.testing import CliRunner
from conftest import SAMPLE
from services import table_rows, tables

pytestmark = pytest.mark.spark


def _cli(*args: str) -> str:
    from kraftlog.cli import main

    out = CliRunner().invoke(main, list(args))
    assert out.exit_code == 0, (args, out.output, out.exception)
    return str(out.output)


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


def test_maintain_compacts_and_vacuums_without_changing_a_row(spark: Any, sample_events: Any,
                                                             tmp_path: Path) -> None:
    from deltalake import DeltaTable

    source, _ = sample_events
    wh = tmp_path / "wh"
    shutil.copytree(source, wh)
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

    _cli("maintain", "--warehouse", str(wh), "--z-order", "--retention-hours", "0")
    for n in names:
        assert table_rows(str(wh / n)) == before[n], n
    # ingest still knows what it landed (ledger and application transactions kept)
    assert "new rows 0" in _cli("ingest", str(SAMPLE), "--warehouse", str(wh))
