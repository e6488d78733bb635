"""A whole scheduled run in one Spark session: ingest, reconstruct, verify, analyze, reports.

``kraftlog run`` and ``jobs/pipeline.py``. Each step is the one its own command runs (``kraftlog ingest``,
``reconstruct``, ``verify``, ``analyze``, ``jobs/report.py --out-dir``) and takes the warehouse's lease itself;
together they share one driver: one start-up instead of five (a YARN or Kubernetes application takes tens
of seconds to start) and a JVM whose query compiler is already warm. ``verify`` checks the histories the run just
built, so it replays the snapshots only, never the log again (``verify_tables``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from pyspark.sql import SparkSession

from kraftlog.analytics.report import Period
from kraftlog.config import Config
from kraftlog.spark.analyze import analyze
from kraftlog.spark.history import reconstruct
from kraftlog.spark.ingest import ingest
from kraftlog.spark.reports import write_reports
from kraftlog.spark.store import store_for
from kraftlog.spark.verify import verify_tables
from kraftlog.state.local import verify_lines
from kraftlog.wire.discover import DataDir


@dataclass(frozen=True)
class Steps:
    """What a run does besides ingest, reconstruct and analyze."""

    verify: bool = False  # check the histories against every snapshot they reach
    report_dir: str | None = None  # write a report per cluster and an index here
    period: Period = field(default_factory=Period)  # what the reports cover
    allow_empty: bool = False  # inputs without any data directory are no error


def run_pipeline(spark: SparkSession, config: Config, inputs: list[str], steps: Steps = Steps(),
                 found: list[DataDir] | None = None, echo: Callable[[str], None] = print) -> int:
    """Run every step on the warehouse of ``config``, echoing each step's summary; the number of snapshots that
    differ from the histories (0 without ``steps.verify``). ``found``: the data directories under ``inputs``
    if the caller listed them already."""
    store = store_for(spark, config)
    if steps.report_dir is not None:
        store.storage.folder(steps.report_dir)  # (a file there: said now, not after every step)
    echo(ingest(spark, inputs, config, store, allow_empty=steps.allow_empty, found=found).line())
    echo(reconstruct(spark, config, store).line())
    differing = 0
    if steps.verify:
        lines, differing = verify_lines(verify_tables(spark, config, store), quiet=True)
        echo("\n".join(lines))
    echo(analyze(spark, config, store).line())
    if steps.report_dir is not None:
        echo("\n".join(write_reports(store, None, steps.period, steps.report_dir)))
    return differing
