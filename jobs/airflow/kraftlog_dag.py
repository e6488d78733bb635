"""Airflow DAG: land the KRaft metadata logs, rebuild the histories, derive the event tables, write a report.

    ingest -> reconstruct -> analytics -> report -> maintain      (KRAFTLOG_DAG_SHAPE=steps, the default)
    pipeline -> maintain                                          (KRAFTLOG_DAG_SHAPE=one, or connect)

Each task runs one of kraftlog's spark-submit jobs (``jobs/*.py``) with the same profile (``--profile``): as a
``SparkSubmitOperator`` (``steps`` and ``one``), or in the task's own process (``connect``). ``steps``: a task per
step, each retried on its own, each its own application.
``one``: ``jobs/pipeline.py`` runs ingest, reconstruct (with verify), analytics and the reports as one application,
one driver start-up and one JVM warm-up an hour instead of four (a 5M-record cluster's hourly increment: 36 s
against 56 s on local[2]); a failed hour is retried whole, which redoes only what the failed attempt did not commit.
``connect``: the same two jobs, each run in the Airflow task's own process on a session of a Spark Connect server
that stays up between runs (the ``spark_connect_default`` connection, ``PySparkOperator``): no application starts
and the server's JVM is warm from the hours before (the 5M-record cluster's hourly increment: 18 s a run against
32 s as a fresh application); the Airflow worker needs kraftlog installed (it is the driver's side: the storage
credentials too), and so does the server's Python.
Every step is idempotent (ingest adds only new records; the others
replace their tables in one commit), so retries and backfills are safe. The report covers the run's
data interval (``{{ data_interval_start }}`` to ``{{ data_interval_end }}``).

Configure with Airflow Variables (or the environment of the scheduler):

* ``kraftlog_home``: where kraftlog's ``jobs/`` and ``conf/`` are (default: this repository);
* ``kraftlog_conf``: the TOML profile (default: ``conf/cluster.toml``);
* ``kraftlog_inputs``: the archive roots to ingest, comma separated (e.g. ``s3a://kafka-archive/``);
* ``kraftlog_reports``: where the HTML reports go (a folder per run, a page per cluster);
and the ``spark_default`` connection (master, deploy mode). In the scheduler's environment:

* ``KRAFTLOG_ARCHIVES``: the packed environment of ``make dist`` (any URL the cluster's Spark fetches); shipped as
  ``--archives <it>#env``, executors (and, in cluster deploy mode, the driver) run ``./env/bin/python``;
* ``KRAFTLOG_PY_FILES``: instead, the kraftlog wheel for ``--py-files`` (when its dependencies are installed on
  the Spark nodes);
* ``KRAFTLOG_DEPLOY_MODE``: ``cluster`` when the connection submits in cluster mode;
* ``KRAFTLOG_DRIVER_JAVA_OPTIONS``: the Java options of each application's driver (``steps`` and ``one``), e.g. those
  ``kraftlog jvm-archive`` prints: the driver starts from a class-data archive (a file on the host that runs the
  driver: the Airflow worker in client mode) and its JIT stops at its first tier, which an hour's run profits from;
* ``KRAFTLOG_DAG_SHAPE``: ``steps`` (default), ``one`` or ``connect``, read when the DAG is parsed.
"""

from __future__ import annotations

import importlib.util
import os
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import DAG, BaseOperator
from airflow.timetables.interval import CronDataIntervalTimetable

HOME = os.environ.get("KRAFTLOG_HOME", str(Path(__file__).resolve().parents[2]))


def _var(name: str, default: str) -> str:
    """A Jinja reference to an Airflow Variable, read when the task runs (not when the DAG is parsed)."""
    return "{{ var.value.get(" + repr(name) + ", " + repr(default) + ") }}"


CONF = _var("kraftlog_conf", f"{HOME}/conf/cluster.toml")
INPUTS = _var("kraftlog_inputs", os.environ.get("KRAFTLOG_INPUTS", f"{HOME}/samples"))
REPORTS = _var("kraftlog_reports", f"{HOME}/out/reports")
PY_FILES = os.environ.get("KRAFTLOG_PY_FILES") or None
ARCHIVES = os.environ.get("KRAFTLOG_ARCHIVES") or None
CLUSTER_MODE = os.environ.get("KRAFTLOG_DEPLOY_MODE", "client") == "cluster"
SHAPE = os.environ.get("KRAFTLOG_DAG_SHAPE", "steps")
DRIVER_JAVA_OPTIONS = os.environ.get("KRAFTLOG_DRIVER_JAVA_OPTIONS", "").strip()
if SHAPE not in ("steps", "one", "connect"):
    raise ValueError(f"KRAFTLOG_DAG_SHAPE={SHAPE!r}: expected 'steps', 'one' or 'connect'")


def _submit_conf() -> dict[str, str]:
    """The packed environment's Python for the executors (and the driver in cluster deploy mode); the driver's Java
    options."""
    conf = {"spark.driver.extraJavaOptions": DRIVER_JAVA_OPTIONS} if DRIVER_JAVA_OPTIONS else {}
    if ARCHIVES is None:
        return conf
    conf["spark.pyspark.python"] = "./env/bin/python"
    if CLUSTER_MODE:
        conf["spark.pyspark.driver.python"] = "./env/bin/python"
    return conf

default_args = {
    "owner": "platform",
    "retries": 2,
    "retry_delay": timedelta(minutes=5),
}


def run_job(script: str, argv: list[str], spark: Any = None) -> None:
    """Run kraftlog's ``jobs/<script>`` in this process with ``argv``, on the active session (``spark``, the
    task's Spark Connect session: the job's ``build_session`` takes the active one); fail on a non-zero exit."""
    path = Path(HOME) / "jobs" / script
    spec = importlib.util.spec_from_file_location(f"kraftlog_job_{path.stem}", path)
    if spec is None or spec.loader is None:
        raise FileNotFoundError(path)
    job = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(job)
    code = job.main(argv)
    if code:
        raise RuntimeError(f"{script} {' '.join(argv)} exited {code}")


def _job(task_id: str, script: str, args: list[str]) -> BaseOperator:
    if SHAPE == "connect":
        from airflow.providers.apache.spark.operators.spark_pyspark import PySparkOperator

        return PySparkOperator(task_id=task_id, python_callable=run_job, conn_id="spark_connect_default",
                               op_kwargs={"script": script, "argv": ["--profile", CONF, *args]})
    return SparkSubmitOperator(
        task_id=task_id,
        application=f"{HOME}/jobs/{script}",
        application_args=["--profile", CONF, *args],
        py_files=PY_FILES,
        archives=f"{ARCHIVES}#env" if ARCHIVES else None,
        conf=_submit_conf(),
        name=f"kraftlog-{task_id}",
        conn_id="spark_default",
    )


with DAG(
    dag_id="kraftlog",
    description="KRaft metadata logs to Delta tables: ingest, histories, event tables, report, upkeep",
    schedule=CronDataIntervalTimetable("0 * * * *", timezone="UTC"),  # runs cover [start, end) of each hour
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,  # the steps replace whole tables: one run at a time
    default_args=default_args,
    tags=["kafka", "kraft", "kraftlog"],
) as dag:
    period = ["--from", "{{ data_interval_start.isoformat() }}", "--to", "{{ data_interval_end.isoformat() }}"]
    report_dir = REPORTS + "/{{ data_interval_end.strftime('%Y%m%dT%H%M') }}"  # one page per cluster
    maintain = _job("maintain", "maintain.py", [])  # compact the hour's small files by cluster, vacuum week-old ones
    if SHAPE in ("one", "connect"):
        _job("pipeline", "pipeline.py", [INPUTS, "--verify", *period, "--report-dir", report_dir]) >> maintain
    else:
        ingest = _job("ingest", "ingest.py", [INPUTS])  # roots separated by commas
        reconstruct = _job("reconstruct", "reconstruct.py", ["--verify"])
        analytics = _job("analytics", "analytics.py", [])
        report = _job("report", "report.py", [*period, "--out-dir", report_dir])
        ingest >> reconstruct >> analytics >> report >> maintain
