"""``kraftlog report``: one self-contained HTML page (tables and matplotlib plots) for one cluster and period.

A ``Report`` is drawn from pandas frames of the event tables (``kraftlog.spark.reports`` reads them with
Spark, filtered to the cluster and the period on the executors); plots are embedded as base64 PNGs, so the
file can be mailed or attached to an incident ticket as is.
"""

from __future__ import annotations

import base64
import html
import io
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import numpy as np
import pandas as pd

from kraftlog.analytics.frames import holding_at
from kraftlog.errors import PointError

MAX_ROWS = 200  # rows shown per table; the rest is counted
OPEN_ROWS = 15  # a longer table is collapsed behind a summary line (HTML <details>, no script)


@dataclass
class Period:
    """The part of the log a report covers (either end open)."""

    start: datetime | None = None
    end: datetime | None = None

    def __post_init__(self) -> None:
        if self.start is not None and self.end is not None and self.start >= self.end:
            raise PointError(f"the period's start ({_utc(self.start)}) is not before its end ({_utc(self.end)})")

    def text(self) -> str:
        def fmt(t: datetime | None, other: str) -> str:
            return _utc(t) if t else other

        return f"{fmt(self.start, 'the start of the log')} to {fmt(self.end, 'the end of the log')}"


def _utc(t: datetime) -> str:
    return t.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


# what the "now" panel draws of the image at the end of the period: the columns of each entity kind (None: all of
# them; of the partitions, only how many there are and their leaders: a big cluster has 100k+)
NOW_COLUMNS: dict[str, tuple[str, ...] | None] = {
    "brokers": None, "partitions": ("topic_id", "partition_id", "leader"), "voters": None, "features": None}


@dataclass
class Now:
    """The image at the end of the period: ``frames`` by entity kind (``NOW_COLUMNS``)."""

    offset: int
    frames: dict[str, pd.DataFrame]


@dataclass
class Report:
    cluster_id: str
    period: Period
    frames: dict[str, pd.DataFrame]
    now: Now | None = None
    activity: Activity | None = None
    generated: datetime = field(default_factory=lambda: datetime.now(UTC))

    def html(self) -> str:
        return report_html(self)

    def summary(self) -> list[tuple[str, str, bool]]:
        """The summary cards: (label, value, alarming)."""
        return _summary(self.frames)


def report_name(cluster_id: str) -> str:
    """A file name for a cluster's report (``source:id`` cluster ids hold a colon)."""
    return "report-" + "".join(c if c.isalnum() or c in "-_." else "_" for c in cluster_id) + ".html"


# -- rendering -------------------------------------------------------------------------------------------------

def _time_axis(ax: Any) -> None:
    """Dates on the x axis as people read them at any span, seconds to months (``ConciseDateFormatter``)."""
    import matplotlib.dates as mdates

    locator = mdates.AutoDateLocator(minticks=4, maxticks=10)
    ax.xaxis.set_major_locator(locator)
    ax.xaxis.set_major_formatter(mdates.ConciseDateFormatter(locator, show_offset=True))


def _png(draw: Callable[[object], None], height: float = 3.2) -> str:
    """An ``<img>`` of a matplotlib figure drawn by ``draw(ax)``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(11, height), dpi=100)
    try:
        draw(ax)
        fig.tight_layout()
        buf = io.BytesIO()
        fig.savefig(buf, format="png")
    finally:
        plt.close(fig)
    return f'<img alt="plot" src="data:image/png;base64,{base64.b64encode(buf.getvalue()).decode()}">'


def _table(df: pd.DataFrame, columns: list[str], sort: list[str] | None = None, ascending: bool = True) -> str:
    if df.empty:
        return '<p class="none">No rows.</p>'
    if sort:
        df = df.sort_values(sort, ascending=ascending)
    view = df[[c for c in columns if c in df.columns]]
    more = len(view) - MAX_ROWS
    view = view.head(MAX_ROWS).copy()
    for c in view.columns:
        if pd.api.types.is_datetime64_any_dtype(view[c]):
            view[c] = view[c].dt.strftime("%Y-%m-%d %H:%M:%S.%f").str[:-3]
        elif view[c].dtype == object:
            view[c] = view[c].map(_cell)
    text = view.to_html(index=False, escape=True, na_rep="", border=0, classes="rows", float_format=_number)
    text += f'<p class="more">… and {more} more rows (query the table for all).</p>' if more > 0 else ""
    if len(df) <= OPEN_ROWS:
        return text
    return f"<details><summary>{len(df):,} rows (show)</summary>{text}</details>"


def _number(x: float) -> str:
    return f"{int(x)}" if float(x).is_integer() else f"{x:.6g}"


def _cell(v: object) -> object:
    if v is None:
        return ""
    if hasattr(v, "tolist"):  # numpy arrays: list columns
        v = v.tolist()
    if isinstance(v, list | tuple):
        return ", ".join(str(i) for i in v)
    if isinstance(v, dict):
        return ", ".join(f"{k}: {x}" for k, x in v.items())
    return v


def _count(df: pd.DataFrame, **equal: object) -> int:
    for k, v in equal.items():
        df = df[df[k] == v]
    return len(df)


def _changes(df: pd.DataFrame) -> pd.DataFrame:
    """Changes, without the rows that only say what was there when the histories begin."""
    return df[df["change"] != "present_at_start"] if "change" in df.columns else df


def _summary(f: dict[str, pd.DataFrame]) -> list[tuple[str, str, bool]]:
    """(label, value, alarming) cards."""
    e, health = f["leader_elections"], f["log_health"]
    unclean = _count(e, clean=False)
    flapping = f["broker_fenced_periods"]
    flapping_brokers = sorted(set(flapping[flapping["flapping"]]["broker_id"])) if not flapping.empty else []
    epochs = f["controller_leadership"]
    reassign = f["reassignments"]
    open_reassign = int(reassign["open"].sum()) if not reassign.empty else 0
    return [
        ("Log records", f"{int(health['records'].sum()) if not health.empty else 0:,}", False),
        ("Leader elections", f"{len(e):,}", False),
        ("Unclean elections", str(unclean), unclean > 0),
        ("ISR shrinks", f"{_count(f['isr_changes'], kind='shrink'):,}", False),
        ("Under min ISR windows", str(len(f["under_min_isr"])), len(f["under_min_isr"]) > 0),
        ("Broker fences", str(_count(flapping, reason="fenced")), False),
        ("Flapping brokers", ", ".join(map(str, flapping_brokers)) or "none", bool(flapping_brokers)),
        ("Controller failovers", str(int(epochs["previous_epoch"].notna().sum()) if not epochs.empty else 0), False),
        ("Reassignments (open)", f"{len(reassign)} ({open_reassign})", open_reassign > 0),
        ("Config changes", str(len(_changes(f["config_changes"]))), False),
        ("CRC failures", str(int(health["crc_failures"].sum()) if not health.empty else 0),
         bool(not health.empty and health["crc_failures"].sum() > 0)),
        ("Offset gaps", str(len(f["log_gaps"])), len(f["log_gaps"]) > 0),
    ]


def _lanes(f: dict[str, pd.DataFrame]) -> list[tuple[str, pd.Series]]:
    """The timeline's rows: (category, event times), only categories with events."""
    lanes: list[tuple[str, pd.Series]] = []
    e = f["leader_elections"]
    for kind in ["unclean", "offline", "failover", "controlled_shutdown", "elr", "reassignment", "preferred"]:
        lanes.append((f"election: {kind}", e[e["kind"] == kind]["timestamp"] if not e.empty else pd.Series()))
    isr = f["isr_changes"]
    lanes.append(("ISR shrink", isr[isr["kind"] != "expand"]["timestamp"] if not isr.empty else pd.Series()))
    b = f["broker_lifecycle"]
    for ev in ["register", "fence", "unfence", "controlled_shutdown", "unregister"]:
        lanes.append((f"broker {ev}", b[b["event"] == ev]["timestamp"] if not b.empty else pd.Series()))
    lanes.append(("controller epoch", f["controller_leadership"].get("from_time", pd.Series())))
    for name, label in [("voter_changes", "voter change"), ("feature_changes", "feature change"),
                        ("topic_lifecycle", "topic lifecycle"), ("config_changes", "config change"),
                        ("quota_changes", "quota change"), ("acl_changes", "ACL change"),
                        ("scram_changes", "SCRAM change")]:
        df = f[name]
        key = "change" if "change" in df.columns else "event"
        df = df[df[key] != "present_at_start"] if not df.empty else df
        lanes.append((label, df.get("timestamp", pd.Series())))
    lanes.append(("reassignment start", f["reassignments"].get("from_time", pd.Series())))
    return [(label, s.dropna()) for label, s in lanes if s is not None and len(s.dropna())]


def _timeline(lanes: list[tuple[str, pd.Series]]) -> Callable[[object], None]:
    """Every event as a dot on one time axis, a row per category."""

    def draw(ax) -> None:  # type: ignore[no-untyped-def]
        for i, (label, times) in enumerate(lanes):
            color = "#c0392b" if label.startswith(("election: unclean", "election: offline")) else "#2c6fbb"
            ax.scatter(pd.to_datetime(times), [i] * len(times), s=14, color=color, alpha=0.7)
        ax.set_yticks(range(len(lanes)), [label for label, _ in lanes])
        ax.grid(axis="x", alpha=0.3)
        ax.set_xlabel("record time (UTC)")
        _time_axis(ax)
        ax.invert_yaxis()

    return draw


def _bar_chart(series: pd.Series, xlabel: str, height: float, color: str = "#2c6fbb") -> str:
    """A bar chart of ``series``, or one line when there is nothing to draw."""
    if series.empty:
        return f'<p class="none">No {html.escape(xlabel)}.</p>'
    return _png(_bars(series, xlabel, color), height)


def _bars(series: pd.Series, xlabel: str, color: str = "#2c6fbb") -> Callable[[object], None]:
    def draw(ax) -> None:  # type: ignore[no-untyped-def]
        ax.barh([str(i) for i in series.index], series.values, color=color)
        ax.invert_yaxis()
        ax.set_xlabel(xlabel)
        for i, v in enumerate(series.values):
            ax.text(v, i, f" {v}", va="center", fontsize=8)

    return draw


def _fenced_gantt(periods: pd.DataFrame) -> Callable[[object], None]:
    """A bar per fenced period (open ones to the end of the log: ``seconds`` counts to there)."""
    colors = {"startup": "#95a5a6", "controlled_shutdown": "#f39c12", "fenced": "#c0392b"}

    def draw(ax) -> None:  # type: ignore[no-untyped-def]
        from matplotlib.patches import Patch

        brokers = sorted(set(periods["broker_id"]))
        for _, p in periods.iterrows():
            start = pd.Timestamp(p["from_time"])
            ax.barh(brokers.index(p["broker_id"]), pd.Timedelta(seconds=float(p["seconds"] or 0)), left=start,
                    height=0.6, color=colors.get(p["reason"], "#2c6fbb"))
        ax.set_yticks(range(len(brokers)), [f"broker {b}" for b in brokers])
        ax.grid(axis="x", alpha=0.3)
        ax.legend(handles=[Patch(color=c, label=r) for r, c in colors.items()], loc="upper left", fontsize=8)
        ax.set_xlabel("record time (UTC)")
        _time_axis(ax)

    return draw


BIN_SECONDS = (1, 5, 15, 30, 60, 300, 900, 1800, 3600, 3 * 3600, 6 * 3600, 12 * 3600, 86400, 7 * 86400)


def bin_seconds(span_seconds: float, bins: int = 120) -> int:
    """The width of the activity bins for a period of ``span_seconds``: the finest that gives at most ``bins``."""
    return next((w for w in BIN_SECONDS if span_seconds / w <= bins), BIN_SECONDS[-1])


def _unit(seconds: int) -> str:
    for size, name in ((86400, "day"), (3600, "hour"), (60, "minute"), (1, "second")):
        if seconds % size == 0:
            n = seconds // size
            return name if n == 1 else f"{n} {name}s"
    return f"{seconds} s"


@dataclass
class Activity:
    """Log records of the period in bins of ``seconds`` (scaled to the period): ``frame`` has ``start``,
    ``records`` and ``noop_records``."""

    seconds: int
    frame: pd.DataFrame


def _records_per_bin(activity: Activity) -> Callable[[object], None]:
    """A column per bin, its metadata records below its NoOp records. Each series is one collection of rectangles,
    not a patch per column (matplotlib's ``bar``), and the legend sits above the axes, not where it overlaps least
    (``loc="best"``, searched on every draw): a chart of 102 bins took 400 ms to draw and encode, now 165."""
    def draw(ax) -> None:  # type: ignore[no-untyped-def]
        import matplotlib.dates as mdates
        from matplotlib.patches import Patch

        h = activity.frame.sort_values("start")
        x = mdates.date2num(h["start"])
        meta = (h["records"] - h["noop_records"]).to_numpy(dtype=float)
        series = ((0.0, meta, "#2c6fbb", "metadata records"),
                  (meta, h["noop_records"].to_numpy(dtype=float), "#bdc3c7", "NoOp records"))
        for bottom, height, color, _ in series:
            _columns(ax, x, activity.seconds * 0.8 / 86400, bottom, height, color)  # (widths in days)
        ax.autoscale_view()
        ax.set_ylim(bottom=0)
        ax.xaxis_date()
        ax.set_ylabel(f"records per {_unit(activity.seconds)}")
        ax.legend(handles=[Patch(color=color, label=label) for _, _, color, label in series], fontsize=8,
                  loc="lower left", bbox_to_anchor=(0, 1), ncols=2, frameon=False)
        ax.grid(axis="y", alpha=0.3)
        _time_axis(ax)

    return draw


def _columns(ax: Any, left: Any, width: float, bottom: Any, height: Any, color: str) -> None:
    """Rectangles from ``left`` to ``left + width`` and ``bottom`` to ``bottom + height`` (arrays, or a number for
    all), as one collection."""
    from matplotlib.collections import PolyCollection

    left = np.asarray(left, dtype=float)
    bottom = np.broadcast_to(np.asarray(bottom, dtype=float), left.shape)
    top = bottom + np.asarray(height, dtype=float)
    right = left + width
    corners = np.stack([np.column_stack(c) for c in ((left, bottom), (left, top), (right, top), (right, bottom))], 1)
    ax.add_collection(PolyCollection(list(corners), facecolors=color, edgecolors="none"))


_CSS = """
body{font-family:-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:24px 32px;color:#222;max-width:1200px}
h1{font-size:24px;margin-bottom:4px}
h2{font-size:19px;margin-top:36px;border-bottom:2px solid #2c6fbb;padding-bottom:4px}
h3{font-size:15px;margin-top:22px} .meta{color:#666;font-size:13px}
.cards{display:flex;flex-wrap:wrap;gap:10px;margin:16px 0}
.card{border:1px solid #ddd;border-radius:6px;padding:8px 14px;min-width:140px;background:#fafbfc}
.card .v{font-size:20px;font-weight:600} .card .l{font-size:12px;color:#666}
.card.alarm{border-color:#c0392b;background:#fdf0ee}
.card.alarm .v{color:#c0392b}
table.rows{border-collapse:collapse;font-size:12px;margin:6px 0} table.rows th{background:#eef3f9;text-align:left}
table.rows td,table.rows th{padding:3px 8px;border-bottom:1px solid #e5e5e5;vertical-align:top}
.none,.more{color:#777;font-size:13px;font-style:italic} img{max-width:100%} nav a{margin-right:12px;font-size:13px}
.now{display:flex;gap:32px;flex-wrap:wrap;align-items:flex-start}
"""


def _cards(cards: list[tuple[str, str, bool]]) -> str:
    return "<div class='cards'>" + "".join(
        f"<div class='card{' alarm' if bad else ''}'><div class='v'>{html.escape(v)}</div>"
        f"<div class='l'>{html.escape(label)}</div></div>" for label, v, bad in cards) + "</div>"


def now_cards(now: Now, f: dict[str, pd.DataFrame]) -> list[tuple[str, str, bool]]:
    """What Kafka UIs show first, at the end of the period: (label, value, alarming). Windows (under-replicated,
    under min.insync.replicas) are the event tables' windows holding at that offset, so the rules are theirs."""
    b, p, v = now.frames["brokers"], now.frames["partitions"], now.frames["voters"]
    fenced = int(b["fenced"].sum()) if not b.empty else 0
    shutdown = int(b["in_controlled_shutdown"].sum()) if not b.empty else 0
    offline = int((p["leader"] == -1).sum()) if not p.empty else 0
    under = len(holding_at(f["under_replicated"], now.offset, "from_offset", "to_offset"))
    under_min = len(holding_at(f["under_min_isr"], now.offset, "from_offset", "to_offset"))
    epochs = f["controller_leadership"]  # to_offset is the epoch's last offset: the epoch is the last one begun
    begun = epochs[epochs["from_offset"] <= now.offset] if not epochs.empty else epochs
    leader = str(int(begun.sort_values("epoch").iloc[-1]["leader_id"])) if not begun.empty else "unknown"
    return [
        ("brokers up", str(len(b) - fenced), False), ("fenced", str(fenced), fenced > 0),
        ("in controlled shutdown", str(shutdown), shutdown > 0), ("controller leader", leader, leader == "unknown"),
        ("voters", ", ".join(str(x) for x in sorted(v["voter_id"])) if not v.empty else "static", False),
        ("partitions", str(len(p)), False), ("offline", str(offline), offline > 0),
        ("under-replicated", str(under), under > 0), ("under min ISR", str(under_min), under_min > 0),
    ]


def _now_panel(now: Now, f: dict[str, pd.DataFrame]) -> str:
    b, p, feats = now.frames["brokers"], now.frames["partitions"], now.frames["features"]
    leaders = (p[p["leader"] >= 0].groupby("leader").size().rename("leaders").rename_axis("broker_id").reset_index()
               if not p.empty else pd.DataFrame({"broker_id": pd.Series(dtype="int64"),
                                                 "leaders": pd.Series(dtype="int64")}))
    brokers = b.merge(leaders, on="broker_id", how="left").fillna({"leaders": 0}) if not b.empty else b
    return (f"<h2 id='now'>Now: offset {now.offset} (the end of the period)</h2>" + _cards(now_cards(now, f))
            + "<div class='now'><div>" + _table(brokers, ["broker_id", "fenced", "in_controlled_shutdown", "rack",
                                                         "broker_epoch", "leaders"], ["broker_id"])
            + "</div><div>" + _table(feats, ["name", "level", "version_name"], ["name"]) + "</div></div>")


_SECTIONS = [("now", "Now"), ("elections", "Leader elections"), ("isr", "ISR churn"), ("brokers", "Brokers"),
             ("controllers", "Controllers and quorum"), ("reassignments", "Reassignments"), ("topics", "Topics"),
             ("audit", "Configuration audit"), ("health", "Log health")]


def report_html(report: Report) -> str:
    """The report as one HTML document."""
    f = report.frames
    e, isr, periods, health = f["leader_elections"], f["isr_changes"], f["broker_fenced_periods"], f["log_health"]
    out: list[str] = []
    w = out.append
    w(f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>kraftlog report: "
      f"{html.escape(report.cluster_id)}</title><style>{_CSS}</style></head><body>")
    w(f"<h1>KRaft metadata report: {html.escape(report.cluster_id)}</h1>")
    w(f"<p class='meta'>Period: {html.escape(report.period.text())} · generated "
      f"{report.generated:%Y-%m-%d %H:%M:%S} UTC by kraftlog from the event tables</p>")
    w("<nav>" + "".join(f"<a href='#{a}'>{t}</a>" for a, t in _SECTIONS) + "</nav>")
    if report.now is not None:
        w(_now_panel(report.now, f))
    w("<h2>Over the period</h2>" + _cards(report.summary()))
    lanes = _lanes(f)
    w("<h3>Everything that happened</h3>" + (_png(_timeline(lanes), 1.2 + 0.28 * len(lanes)) if lanes else
                                             '<p class="none">No events in the period.</p>'))

    w("<h2 id='elections'>Leader elections</h2>")
    kinds = e["kind"].value_counts() if not e.empty else pd.Series(dtype=int)
    w(_bar_chart(kinds, "elections", 2.4))
    w("<h3>Unclean and offline</h3>" + _table(e[e["kind"].isin(["unclean", "offline"])] if not e.empty else e, [
        "timestamp", "log_offset", "topic_name", "partition_id", "kind", "previous_leader", "leader", "previous_isr",
        "isr", "leader_epoch", "leader_recovery_state"], ["log_offset"]))
    w("<h3>By topic and kind</h3>")
    w(_table(e.groupby(["topic_name", "kind"]).size().unstack(fill_value=0).rename_axis(columns=None).reset_index()
             if not e.empty else e,
             ["topic_name", *sorted(set(e["kind"]))] if not e.empty else []))

    w("<h2 id='isr'>ISR churn</h2>")
    shrinks = (isr[isr["kind"] != "expand"].groupby("topic_name").size().sort_values(ascending=False).head(15)
               if not isr.empty else pd.Series(dtype=int))
    w("<h3>ISR shrinks by topic</h3>" + _bar_chart(shrinks, "shrinks", 2.8, "#e67e22"))
    w("<h3>Under min.insync.replicas</h3>" + _table(f["under_min_isr"], [
        "topic_name", "partition_id", "from_time", "to_time", "seconds", "open", "min_isr_size",
        "min_insync_replicas", "config_source"], ["from_offset"]))
    ur = f["under_replicated"]
    w("<h3>Longest under-replicated windows</h3>" + _table(
        ur.sort_values("seconds", ascending=False).head(25) if not ur.empty else ur,
        ["topic_name", "partition_id", "from_time", "to_time", "seconds", "open", "min_isr_size", "replicas_count"]))

    w("<h2 id='brokers'>Brokers</h2>")
    if not periods.empty:
        w("<h3>Fenced periods</h3>" + _png(_fenced_gantt(periods), 1 + 0.45 * periods["broker_id"].nunique()))
    w(_table(periods, ["broker_id", "reason", "from_time", "to_time", "seconds", "open", "fences_last_hour",
                       "flapping"], ["broker_id", "from_offset"]))
    w("<h3>Lifecycle</h3>" + _table(f["broker_lifecycle"], [
        "timestamp", "log_offset", "broker_id", "event", "broker_epoch", "incarnation_id", "fenced"], ["log_offset"]))

    w("<h2 id='controllers'>Controllers and quorum</h2><h3>Leadership by epoch</h3>")
    w(_table(f["controller_leadership"], ["epoch", "leader_id", "from_time", "to_time", "from_offset", "to_offset",
                                          "records", "voters", "granting_voters", "failover_seconds"], ["epoch"]))
    w("<h3>Voter changes (KIP-853)</h3>" + _table(f["voter_changes"], [
        "timestamp", "log_offset", "voter_id", "change", "directory_id", "endpoints", "voters_after"], ["log_offset"]))
    w("<h3>Feature changes</h3>" + _table(f["feature_changes"], [
        "timestamp", "log_offset", "feature", "change", "from_version", "to_version", "from_level", "to_level"],
        ["log_offset"]))
    w("<h3>ZooKeeper migration (KIP-866)</h3>" + _table(f["zk_migration"], [
        "timestamp", "log_offset", "from_state", "to_state"], ["log_offset"]))

    w("<h2 id='reassignments'>Reassignments</h2>" + _table(f["reassignments"], [
        "topic_name", "partition_id", "status", "from_time", "to_time", "seconds", "original_replicas",
        "target_replicas", "final_replicas"], ["from_offset"]))

    w("<h2 id='topics'>Topics</h2>" + _table(f["topic_lifecycle"], [
        "timestamp", "log_offset", "topic_name", "topic_id", "event", "partitions_before", "partitions_after",
        "name_reused", "previous_topic_id"], ["log_offset"]))

    w("<h2 id='audit'>Configuration audit</h2><p class='meta'>Sensitive values are redacted in the tables. "
      "Values present when the histories begin are not listed.</p>")
    w("<h3>Configs</h3>" + _table(_changes(f["config_changes"]), [
        "timestamp", "log_offset", "resource_type", "resource_name", "name", "change", "old_value", "new_value"],
        ["log_offset"]))
    w("<h3>Client quotas</h3>" + _table(_changes(f["quota_changes"]), [
        "timestamp", "log_offset", "entity_text", "key", "change", "old_value", "new_value"], ["log_offset"]))
    w("<h3>ACLs</h3>" + _table(_changes(f["acl_changes"]), [
        "timestamp", "log_offset", "change", "principal", "host", "operation", "permission", "resource_type",
        "resource_name", "pattern_type"], ["log_offset"]))
    w("<h3>SCRAM credentials</h3>" + _table(_changes(f["scram_changes"]), [
        "timestamp", "log_offset", "user_name", "mechanism", "change", "iterations_before", "iterations",
        "credential_changed"], ["log_offset"]))

    w("<h2 id='health'>Log health</h2>")
    if report.activity is not None and not report.activity.frame.empty:
        w(_png(_records_per_bin(report.activity), 2.8))
    else:
        w('<p class="none">No log records in the period.</p>')
    w(_table(health, ["hour", "records", "noop_records", "noop_share", "control_records", "batches", "crc_failures",
                      "divergent_records", "snapshots", "snapshot_bytes"], ["hour"]))
    snaps = f["snapshots"]
    w("<h3>Snapshots</h3>" + _table(snaps, ["node_id", "snapshot_id", "timestamp", "bytes", "records",
                                            "offsets_since_previous", "seconds_since_previous", "deleted"],
                                    ["timestamp", "node_id"], False))
    w("<h3>Offset gaps</h3>" + _table(f["log_gaps"], ["from_offset", "to_offset", "missing"], ["from_offset"]))
    w("</body></html>")
    return "\n".join(out)


def render_index(pages: list[tuple[Report, str]], period: Period) -> str:
    """An overview of many clusters' reports: one row per cluster with its summary figures, linking to its page
    (``pages``: the report and the page's file name, relative to the index)."""
    rows = []
    labels: list[str] = []
    for report, href in sorted(pages, key=lambda p: p[0].cluster_id):
        cards = report.summary()
        labels = [label for label, _, _ in cards]
        cells = "".join(f"<td class='{'alarm' if bad else ''}'>{html.escape(v)}</td>" for _, v, bad in cards)
        rows.append(f"<tr><td><a href='{html.escape(href)}'>{html.escape(report.cluster_id)}</a></td>{cells}</tr>")
    head = "".join(f"<th>{html.escape(label)}</th>" for label in labels)
    return (f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>kraftlog reports</title>"
            f"<style>{_CSS} td.alarm{{color:#c0392b;font-weight:600;background:#fdf0ee}}</style></head><body>"
            f"<h1>KRaft metadata reports: {len(pages)} cluster(s)</h1>"
            f"<p class='meta'>Period: {html.escape(period.text())}. Red: worth a look.</p>"
            f"<table class='rows'><thead><tr><th>cluster</th>{head}</tr></thead><tbody>{''.join(rows)}</tbody>"
            f"</table></body></html>")
