"""``kraftlog report``: a self-contained HTML page, filtered by period, that renders in a real browser."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from conftest import SAMPLE, load_job

from kraftlog.cli import main

CHROMIUM = next((p for p in (shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome")) if p), None)


@pytest.fixture(scope="module")
def report(sample_events: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    wh, _ = sample_events
    out = tmp_path_factory.mktemp("report") / "a.html"
    res = CliRunner().invoke(main, ["report", "--warehouse", str(wh), "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert res.output.startswith("report of T4vFxmI9RFCnFwCmltnwag")
    return out


def test_report_is_self_contained_with_every_section(report: Path) -> None:
    page = report.read_text()
    assert not re.search(r"""(src|href)=["']?(https?:|//|file:)""", page), "the page must not load anything"
    assert len(re.findall(r'src="data:image/png;base64,', page)) >= 5
    for title in ["Leader elections", "ISR churn", "Brokers", "Controllers and quorum", "Reassignments", "Topics",
                  "Configuration audit", "Log health", "Unclean and offline", "Voter changes (KIP-853)"]:
        assert f">{title}<" in page, title
    unclean = re.search(r"<tr>\s*<td>2026-11-21 03:13:11.846</td>\s*<td>996</td>\s*<td>fragile</td>.*?</tr>", page,
                        re.S)
    assert unclean and "<td>unclean</td>" in unclean.group(0)
    assert "s3cr3t" not in page and "(redacted)" in page
    assert re.search(r"<div class='v'>1</div><div class='l'>Unclean elections</div>", page)


def test_report_period_filters_events(sample_events: Any, tmp_path: Path) -> None:
    wh, _ = sample_events
    out = tmp_path / "window.html"
    res = CliRunner().invoke(main, ["report", "--warehouse", str(wh), "--cluster", "T4vFxmI9RFCnFwCmltnwag",
                                    "--from", "2026-11-21T03:12:35Z", "--to", "2026-11-21T03:13:20Z",
                                    "--out", str(out)])
    assert res.exit_code == 0, res.output
    page = out.read_text()
    assert "2026-11-21 03:12:35 UTC to 2026-11-21 03:13:20 UTC" in page
    assert "<td>fragile</td>" in page and "<td>unclean</td>" in page
    assert "<td>tmp-delete-me</td>" not in page.split("id='topics'")[1].split("id='audit'")[0]  # created at 03:08
    assert "mallory" not in page  # ACL changes at 03:09
    bad = CliRunner().invoke(main, ["report", "--warehouse", str(wh), "--from", "yesterday"])
    assert bad.exit_code == 2 and "not a time" in bad.output
    unknown = CliRunner().invoke(main, ["report", "--warehouse", str(wh), "--cluster", "nope"])
    assert unknown.exit_code == 1 and "not found" in unknown.output


def test_report_job(sample_events: Any, tmp_path: Path) -> None:
    """jobs/report.py as the DAG runs it: a folder with a page per cluster, for the run's period."""
    wh, _ = sample_events
    job = load_job("report")
    assert job.main(["--warehouse", str(wh), "--out-dir", str(tmp_path / "run"), "--from", "2026-11-21T03:10:00Z"]) == 0
    page = tmp_path / "run" / "report-T4vFxmI9RFCnFwCmltnwag.html"
    assert "2026-11-21 03:10:00 UTC to the end of the log" in page.read_text()
    index = (tmp_path / "run" / "index.html").read_text()
    assert "<a href='report-T4vFxmI9RFCnFwCmltnwag.html'>T4vFxmI9RFCnFwCmltnwag</a>" in index
    assert "<th>Unclean elections</th>" in index and "<td class='alarm'>1</td>" in index


def test_a_page_goes_into_a_folder_named_as_out_and_a_folder_is_never_a_file(sample_events: Any,
                                                                           tmp_path: Path) -> None:
    """``--out`` naming a folder (one that is there, or a path ending in /) writes ``report-<cluster>.html`` in it,
    in the CLI and the job alike (it was an IsADirectoryError traceback after the build, and left the page written
    aside beside the folder); a folder of pages given as a file (``--out-dir``, ``run --report-dir``) is refused
    before anything is built or landed."""
    from kraftlog.storage import NotADirectory

    wh, _ = sample_events
    name = "report-T4vFxmI9RFCnFwCmltnwag.html"
    (tmp_path / "there").mkdir()
    res = CliRunner().invoke(main, ["report", "--warehouse", str(wh), "--out", str(tmp_path / "there")])
    assert res.exit_code == 0 and f"{tmp_path / 'there' / name} (" in res.output, res.output
    assert load_job("report").main(["--warehouse", str(wh), "--out", f"{tmp_path / 'new'}/"]) == 0
    assert sorted(p.name for p in tmp_path.rglob("*")) == sorted(["there", "new", name, name])
    page = tmp_path / "page.html"
    page.write_text("not a folder")
    with pytest.raises(NotADirectory, match=f"file:{page}: a file, not a directory"):
        load_job("report").main(["--warehouse", str(wh), "--out-dir", str(page)])
    other = tmp_path / "other-wh"
    res = CliRunner().invoke(main, ["run", str(SAMPLE), "--warehouse", str(other), "--report-dir", str(page)])
    assert res.exit_code == 1 and "a file, not a directory" in res.output, res.output
    assert not (other / "files").exists() and page.read_text() == "not a folder"  # (nothing landed)


@pytest.mark.skipif(CHROMIUM is None, reason="no headless Chromium here (apt-get install chromium): the page is "
                    "only checked as HTML")
def test_report_renders_in_chromium(report: Path, tmp_path: Path) -> None:
    """Open the page in headless Chromium and look at the screenshot: a white page with content down to the
    log health plot, not an error page or a blank."""
    from PIL import Image

    png = tmp_path / "report.png"
    subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                    "--hide-scrollbars", "--window-size=1280,3000", f"--screenshot={png}", report.as_uri()],
                   check=True, capture_output=True, timeout=120)
    im = Image.open(png).convert("RGB")
    assert im.size == (1280, 3000)
    top = im.crop((0, 0, 1280, 120))
    colors = top.getcolors(1 << 20) or []
    assert max(colors)[1] == (255, 255, 255)  # mostly white: our page, not a browser error page
    # the summary cards and the timeline plot: many distinct colours, and the alarm card's red border
    body = im.crop((0, 120, 1280, 1000))
    assert len(body.getcolors(1 << 20) or []) > 50
    reds = sum(n for n, (r, g, b) in body.getcolors(1 << 20) or [] if r > 150 and g < 80 and b < 80)
    assert reds > 50


def test_the_report_opens_with_now_as_the_state_command_sees_it(sample_events: Any, tmp_path: Path) -> None:
    """The "now" panel is the image at the end of the period: the same brokers, partitions and voters as
    ``kraftlog state`` at that offset (local replay, another path to the same answer)."""
    import json

    from conftest import SAMPLE

    wh, _ = sample_events
    for end, offset in ((None, None), ("2026-11-21T03:13:20Z", None)):
        out = tmp_path / f"now-{offset}-{end}.html"
        args = ["report", "--warehouse", str(wh), "--out", str(out)] + (["--to", end] if end else [])
        assert CliRunner().invoke(main, args).exit_code == 0
        page = out.read_text()
        now = re.search(r"<h2 id='now'>Now: offset (\d+) \(the end of the period\)</h2>(.*?)<h2>", page, re.S)
        assert now, "the page opens with the now panel"
        at = now.group(1)
        state = json.loads(CliRunner().invoke(main, ["state", str(SAMPLE), "--at", at]).output)

        def card(label: str, panel: str = now.group(2)) -> str:
            m = re.search(rf"<div class='v'>([^<]*)</div><div class='l'>{label}</div>", panel)
            assert m, label
            return m.group(1)

        brokers = state["brokers"]
        assert int(card("fenced")) == sum(b["fenced"] for b in brokers)
        assert int(card("brokers up")) == sum(not b["fenced"] for b in brokers)
        assert int(card("partitions")) == len(state["partitions"])
        assert int(card("offline")) == sum(p["leader"] == -1 for p in state["partitions"])
        assert card("controller leader").isdigit()  # the epoch begun last at that offset
        assert card("voters") == (", ".join(str(v["voter_id"]) for v in sorted(state["voters"], key=lambda v: v[
            "voter_id"])) or "static")
    assert page.index("id='now'") < page.index("id='elections'")


def test_activity_bins_scale_with_the_period_and_long_tables_fold(spark: Any, sample_events: Any,
                                                                  tmp_path: Path) -> None:
    from datetime import UTC, datetime

    from pyspark.sql import functions as F

    from kraftlog.analytics.report import Period, bin_seconds
    from kraftlog.spark.reports import build_report
    from kraftlog.spark.store import open_store
    from kraftlog.tables.definitions import catalog

    assert [bin_seconds(s) for s in (45, 720, 6 * 3600, 30 * 86400)] == [1, 15, 300, 6 * 3600]
    wh, _ = sample_events
    store = open_store(spark, str(wh))
    start, end = datetime(2026, 11, 21, 3, 5, tzinfo=UTC), datetime(2026, 11, 21, 3, 17, tzinfo=UTC)  # 12 minutes
    rep = build_report(store, None, Period(start, end))
    assert rep.activity is not None and rep.activity.seconds == 15
    in_period = store.read(catalog()["records"]).filter(
        (F.col("source") == "log") & (F.col("timestamp") >= F.lit(start)) & (F.col("timestamp") <= F.lit(end))).count()
    assert int(rep.activity.frame["records"].sum()) == in_period > 0
    page = rep.html()
    assert "<details><summary>" in page  # a long table, folded behind its row count
    quiet = build_report(store, None, Period(datetime(2026, 11, 21, 3, 4, 0, tzinfo=UTC),
                                             datetime(2026, 11, 21, 3, 4, 1, tzinfo=UTC))).html()
    assert "No elections." in quiet and "No events in the period." in quiet  # one line, not a blank plot


def test_the_now_panel_of_a_period_ending_after_the_last_record_reads_no_record(spark: Any, sample_events: Any,
                                                                                  monkeypatch: Any) -> None:
    """The end offset of a period (``end_offsets``): where the last record built is at or before the period's end
    (an hourly report of the latest hour, or of the whole log) it is that record's, found without reading the records
    table (whose every row ``offset_at`` would scan); else the last record at or before the end, as ``offset_at``
    finds it. Both equal ``offset_at``'s answer."""
    from datetime import UTC, datetime

    from kraftlog.analytics.report import Period
    from kraftlog.spark import reports
    from kraftlog.spark.history import built_clusters, offset_at
    from kraftlog.spark.store import open_store
    from kraftlog.tables.definitions import catalog

    wh, _ = sample_events
    store = open_store(spark, str(wh))
    built = built_clusters(store)
    [(cluster_id, row)] = built.items()
    last, last_ms = row["last_offset"], row["last_ms"]
    records = store.read(catalog()["records"])

    def period(end_ms: int) -> Period:
        return Period(None, datetime.fromtimestamp(end_ms / 1000, UTC))

    def unread(*_: Any) -> int:
        raise AssertionError("offset_at read the records")

    for end_ms in (last_ms, last_ms + 3_600_000):  # at the last record's time, an hour after it
        with monkeypatch.context() as m:
            m.setattr(reports, "offsets_at", unread)
            assert reports.end_offsets(store, built, period(end_ms)) == {cluster_id: last}
        assert min(last, offset_at(records, cluster_id, end_ms)) == last
    earlier = reports.end_offsets(store, built, period(last_ms - 1))[cluster_id]  # the records read
    assert earlier == offset_at(records, cluster_id, last_ms - 1) < last
    assert reports.end_offsets(store, built, Period()) == {cluster_id: last}


def test_the_now_panels_of_several_clusters_ask_their_questions_together(spark: Any, tmp_path: Path,
                                                                         monkeypatch: Any) -> None:
    """The now panels of a report of several clusters: each cluster's end offset and image are what its own would
    be (``offset_at``, ``state_at``), found in as many rounds of questions about the records as the cluster that
    asks most would ask alone (one query a round for all the clusters, not one per cluster), and one read of each
    kind of history for all."""
    from datetime import UTC, datetime

    import pandas as pd
    from history_gen import TS0, GenCluster, write_cluster

    from kraftlog.analytics.report import NOW_COLUMNS, Period
    from kraftlog.config import Config
    from kraftlog.spark import history, reports
    from kraftlog.spark.ingest import ingest
    from kraftlog.spark.store import open_store
    from kraftlog.state.entities import history_tables
    from kraftlog.tables.definitions import catalog

    topic = "AAAAAAAAAAAAAAAAAAAAZQ"
    partition = {"topic_id": topic, "partition_id": 0, "replicas": [1, 2, 3], "isr": [1, 2, 3],
                 "removing_replicas": [], "adding_replicas": [], "leader": 1, "leader_epoch": 0, "partition_epoch": 0}

    def leader(broker: int) -> tuple[str, str, int, dict[str, Any]]:
        return ("meta", "PARTITION_CHANGE_RECORD", 0, {"topic_id": topic, "partition_id": 0, "leader": broker})

    start = [("meta", "TOPIC_RECORD", 0, {"topic_id": topic, "name": "t"}), ("meta", "PARTITION_RECORD", 0, partition)]
    noop = ("meta", "NO_OP_RECORD", 0, {})
    logs = {"a": [*start, noop, noop, noop, leader(2), noop, noop],  # led by 2 after the period's end
            "b": [*start, leader(3), *[noop] * 10],  # by 3 before it
            "c": start}  # its last record before the end: asked nothing
    source = tmp_path / "src"
    for c, log in logs.items():
        write_cluster(source, GenCluster(c, log), sizes=[1])
    config = Config.load(warehouse={"path": str(tmp_path / "wh")}, identity={"cluster": "{cluster.id}"})
    ingest(spark, [str(source)], config)
    history.reconstruct(spark, config)
    store = open_store(spark, config.warehouse)
    built = history.built_clusters(store)
    end = Period(None, datetime.fromtimestamp((TS0 + 4_500) / 1000, UTC))  # after offset 4's record, before 5's

    rounds: list[set[str]] = []
    answer = history._LogOffsets.answer

    def asked(self: Any, asks: Any) -> Any:
        rounds.append(set(asks))
        return answer(self, asks)

    monkeypatch.setattr(history._LogOffsets, "answer", asked)
    now = reports.now_frames(store, built, sorted(logs), end)
    together = list(rounds)
    records = store.read(catalog()["records"])
    alone = {}
    for c in ("a", "b"):
        rounds.clear()
        alone[c] = history.offset_at(records, c, TS0 + 4_500, built[c]["last_offset"])
        assert len(rounds) <= len(together)
    assert {c: n.offset for c, n in now.items()} == {**alone, "c": 1} == {"a": 4, "b": 4, "c": 1}
    assert len(together) == 3 and all(r == {"a", "b"} for r in together), together
    assert {c: n.frames["partitions"]["leader"].tolist() for c, n in now.items()} == {"a": [1], "b": [3], "c": [1]}
    histories = {k: store.read(history_tables()[k]) for k in NOW_COLUMNS}
    for c, n in now.items():
        for kind, df in history.state_at(histories, c, n.offset).items():
            cols = NOW_COLUMNS[kind]
            expected = (df.select(*cols) if cols else df.drop("cluster_id")).toPandas()
            pd.testing.assert_frame_equal(n.frames[kind], expected)


def test_the_rows_of_many_clusters_are_split_in_one_pass_as_each_cluster_filtered_alone() -> None:
    """``by_cluster``: each cluster's frame equals its rows filtered alone (order, types, a fresh index), an empty
    frame of the same columns for a cluster with none, and a frame of its own (changing it changes no other)."""
    import random

    import pandas as pd

    from kraftlog.spark.reports import by_cluster

    rng = random.Random(3)
    df = pd.DataFrame({"cluster_id": [rng.choice("abcd") for _ in range(200)], "n": range(200),
                       "x": [rng.choice([None, 1.5, 2.0]) for _ in range(200)], "s": [str(i) for i in range(200)]})
    split = by_cluster(df, ["a", "b", "c", "z"])
    for c, frame in split.items():
        pd.testing.assert_frame_equal(frame, df[df["cluster_id"] == c].drop(columns="cluster_id")
                                      .reset_index(drop=True))
    split["a"].loc[0, "n"] = -1
    assert (df["n"] >= 0).all() and (split["b"]["n"] >= 0).all()


def test_the_pages_of_many_clusters_are_drawn_by_executors_as_the_driver_draws_them(sample_events: Any, spark: Any,
                                                                                     tmp_path: Path,
                                                                                     monkeypatch: Any) -> None:
    """``write_pages``: past ``DRIVER_PAGES`` pages, executor tasks draw and write them (the driver draws none);
    each page is the one its report draws on the driver, byte for byte, at its own URI, in the reports' order; up to
    ``DRIVER_PAGES``, the driver draws them."""
    import dataclasses

    from kraftlog.analytics.report import Period, report_name
    from kraftlog.spark import reports
    from kraftlog.spark.store import open_store
    from kraftlog.storage import join, normalize

    wh, _ = sample_events
    store = open_store(spark, str(wh))
    sample = reports.build_reports(store, None, Period())[0]
    many = [dataclasses.replace(sample, cluster_id=f"src{i}:{sample.cluster_id}", frames={
        # (each its own page: a table cut to its first i rows)
        **sample.frames, "leader_elections": sample.frames["leader_elections"].head(i)}) for i in range(5)]
    on_driver: list[str] = []
    write_page = reports._write_page

    def counted(report: Any, out_dir: str, storage: Any) -> str:
        on_driver.append(report.cluster_id)
        return write_page(report, out_dir, storage)

    monkeypatch.setattr(reports, "_write_page", counted)
    uris = reports.write_pages(store, many, str(tmp_path / "many"))
    assert on_driver == []
    assert uris == [join(normalize(str(tmp_path / "many")), report_name(r.cluster_id)) for r in many]
    pages = [(tmp_path / "many" / report_name(r.cluster_id)).read_text() for r in many]
    assert pages == [r.html() for r in many] and len(set(pages)) == len(many)
    few = many[:reports.DRIVER_PAGES]
    reports.write_pages(store, few, str(tmp_path / "few"))
    assert on_driver == [r.cluster_id for r in few]
    assert [(tmp_path / "few" / report_name(r.cluster_id)).read_text() for r in few] == [r.html() for r in few]


def test_the_records_per_bin_are_stacked_columns_one_collection_a_series() -> None:
    """The log health chart: each bin a column from its start, 0.8 of its width, metadata records from 0 and the
    NoOp records on top of them; a series is one collection, the legend above the axes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.dates as mdates
    import matplotlib.pyplot as plt
    import numpy as np
    import pandas as pd

    from kraftlog.analytics.report import Activity, _records_per_bin

    start = pd.to_datetime(["2026-11-21T03:00:30Z", "2026-11-21T03:00:00Z", "2026-11-21T03:02:00Z"])
    frame = pd.DataFrame({"start": start, "records": [10, 7, 3], "noop_records": [4, 7, 0]})
    fig, ax = plt.subplots()
    try:
        _records_per_bin(Activity(30, frame))(ax)
        assert len(ax.collections) == 2 and not ax.patches  # (no patch per column)
        order = frame.sort_values("start")
        left = mdates.date2num(order["start"])
        for collection, (low, high) in zip(ax.collections, (
                (np.zeros(3), order["records"] - order["noop_records"]),
                (order["records"] - order["noop_records"], order["records"])), strict=True):
            boxes = [p.get_extents() for p in collection.get_paths()]
            np.testing.assert_allclose([b.x0 for b in boxes], left)
            np.testing.assert_allclose([b.x1 - b.x0 for b in boxes], [24 / 86400] * 3)
            np.testing.assert_allclose([b.y0 for b in boxes], low)
            np.testing.assert_allclose([b.y1 for b in boxes], high)
        assert ax.get_ylim()[0] == 0 and ax.get_ylim()[1] >= 10
        assert [t.get_text() for t in ax.get_legend().get_texts()] == ["metadata records", "NoOp records"]
        assert ax.get_legend()._loc != 0  # (not "best": searched on every draw)
    finally:
        plt.close(fig)
