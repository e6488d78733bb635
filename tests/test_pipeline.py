"""``kraftlog run``: every step in one session, to the tables the steps build one by one; ``verify`` on a warehouse
checks the histories the warehouse holds."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from click.testing import CliRunner
from conftest import SAMPLE
from services import assert_same_tables, tables

from kraftlog.cli import main

CLUSTER = "T4vFxmI9RFCnFwCmltnwag"  # the sample's cluster


def _cli(*args: str) -> Any:
    return CliRunner().invoke(main, list(args))


def _versions(wh: Path) -> dict[str, int]:
    from deltalake import DeltaTable

    return {name: DeltaTable(str(wh / name)).version() for name in tables(wh)}


def test_run_builds_what_the_steps_build_and_a_second_run_changes_nothing(spark: Any, sample_events: Any,
                                                                          tmp_path: Path, monkeypatch: Any) -> None:
    steps_wh, _ = sample_events  # ingest, reconstruct, analyze as separate commands
    wh, reports = tmp_path / "wh", tmp_path / "reports"
    out = _cli("run", str(SAMPLE), "--warehouse", str(wh), "--verify", "--report-dir", str(reports))
    assert out.exit_code == 0, out.output
    assert "snapshots checked: 132, with differences: 0" in out.output
    assert f"overview of 1 cluster(s): file:{reports}/index.html" in out.output
    assert CLUSTER in (reports / "index.html").read_text()
    assert (reports / f"report-{CLUSTER}.html").stat().st_size > 100_000
    assert assert_same_tables(steps_wh, str(wh), {}) > 40  # landed, histories, events, their states

    versions = _versions(wh)

    def unread(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("analyze read its inputs with every cluster unchanged")

    monkeypatch.setattr("kraftlog.spark.analyze.inputs", unread)
    again = _cli("run", str(SAMPLE), "--warehouse", str(wh))
    assert again.exit_code == 0, again.output
    assert "new rows 0," in again.output
    assert "0 cluster(s) replayed (0 going on from their last build), 1 unchanged, 0 read whole" in again.output
    assert "0 cluster(s) go on from their last analysis, 0 analysed anew, 1 unchanged" in again.output
    grown = {name for name, v in _versions(wh).items() if v != versions[name]}
    assert grown <= {"runs"}, grown  # only the run's own summary row: no table rewritten


def test_verify_on_a_warehouse_checks_the_histories_it_holds(spark: Any, sample: Any, tmp_path: Path) -> None:
    """A history row changed after ``reconstruct`` (the landed tables unchanged): ``verify --full`` names it, as it
    checks the tables queries read; building histories aside would have found nothing."""
    from deltalake import DeltaTable

    built, _ = sample
    wh = tmp_path / "wh"
    shutil.copytree(built, wh)
    topics = DeltaTable(str(wh / "topics_history"))
    current = [r for r in topics.to_pyarrow_table().to_pylist() if r["valid_to_offset"] is None]
    victim = sorted(current, key=lambda r: r["topic_id"])[0]
    topics.update(predicate=f"topic_id = '{victim['topic_id']}' AND valid_to_offset IS NULL",
                  updates={"name": "'renamed-behind-kafkas-back'"})
    out = _cli("verify", "--warehouse", str(wh), "--quiet", "--full")  # every snapshot, as checks kept stand
    assert out.exit_code == 1, out.output
    assert f"topics ('{victim['topic_id']}',): name: 'renamed-behind-kafkas-back' != '{victim['name']}'" in out.output
