"""The example Airflow DAG parses, wires ingest -> reconstruct -> analytics -> report -> maintain (or, shaped as one
application, pipeline -> maintain), and renders arguments that kraftlog's own jobs accept."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT, load_job
from services import airflow_dags_test, assert_dag_ran

from kraftlog.spark.session import job_parser

DAG_DIR = ROOT / "jobs" / "airflow"


def _loggers() -> list[logging.Logger]:
    return [logging.root, *(lg for lg in logging.root.manager.loggerDict.values() if isinstance(lg, logging.Logger))]


@contextlib.contextmanager
def logging_kept() -> Iterator[None]:
    """The process's logging as it was before the block: Airflow sets it up when first imported (the root logger at
    INFO, with a handler on the stream pytest captures then and closes at the end), and a line logged at exit (py4j's
    "Closing down clientserver connection" as a Spark session's connection is collected) would then fail to be
    written ("--- Logging error ---" after the summary)."""
    before = {lg.name: (lg.level, list(lg.handlers), lg.propagate, lg.disabled) for lg in _loggers()}
    try:
        yield
    finally:
        for lg in _loggers():
            level, handlers, lg.propagate, lg.disabled = before.get(lg.name, (logging.NOTSET, [], True, False))
            lg.handlers[:] = handlers
            lg.setLevel(level)


@pytest.fixture(scope="module", autouse=True)
def airflow() -> None:
    """Airflow and its Spark provider, imported with the process's logging kept as it was."""
    with logging_kept():
        pytest.importorskip("airflow.providers.apache.spark",
                            reason="Airflow and its Spark provider are not installed (pip install -e '.[airflow]')")


def _bag(airflow_home: Path, **env: str) -> Any:
    """The ``DagBag`` of ``DAG_DIR`` as Airflow parses it with ``env`` set (``KRAFTLOG_*``: read at parse time)."""
    from airflow.dag_processing.dagbag import DagBag

    with pytest.MonkeyPatch.context() as mp:
        for key, value in {"AIRFLOW_HOME": str(airflow_home), "AIRFLOW__CORE__LOAD_EXAMPLES": "False", **env}.items():
            mp.setenv(key, value)
        return DagBag(dag_folder=str(DAG_DIR))


def _dags(airflow_home: Path, **env: str) -> Any:
    """The ``kraftlog`` DAG as Airflow parses it with ``env`` set, parsed with no import error."""
    bag = _bag(airflow_home, **env)
    assert bag.import_errors == {}
    return bag.dags["kraftlog"]


@pytest.fixture(scope="module")
def dag(tmp_path_factory: pytest.TempPathFactory) -> Any:
    return _dags(tmp_path_factory.mktemp("airflow-home"))


@pytest.fixture(scope="module")
def one_app_dag(tmp_path_factory: pytest.TempPathFactory) -> Any:
    return _dags(tmp_path_factory.mktemp("airflow-home"), KRAFTLOG_DAG_SHAPE="one")


def test_dag_ships_the_packed_environment_when_told(tmp_path: Path) -> None:
    dag = _dags(tmp_path, KRAFTLOG_ARCHIVES="s3a://lake/dist/kraftlog-env.tar.gz", KRAFTLOG_DEPLOY_MODE="cluster")
    for task in dag.tasks:
        assert task._archives == "s3a://lake/dist/kraftlog-env.tar.gz#env"
        assert task.conf == {"spark.pyspark.python": "./env/bin/python",
                             "spark.pyspark.driver.python": "./env/bin/python"}


@pytest.mark.parametrize("shape", ["steps", "one"])
def test_dag_starts_each_driver_with_the_java_options_it_is_given(tmp_path: Path, shape: str) -> None:
    options = "-XX:SharedArchiveFile=/opt/kraftlog/kraftlog.jsa -XX:TieredStopAtLevel=1"
    dag = _dags(tmp_path, KRAFTLOG_DRIVER_JAVA_OPTIONS=options, KRAFTLOG_DAG_SHAPE=shape)
    assert dag.tasks and all(task.conf == {"spark.driver.extraJavaOptions": options} for task in dag.tasks)
    assert all(task.conf == {} for task in _dags(tmp_path, KRAFTLOG_DAG_SHAPE=shape).tasks)


def test_dag_wires_the_jobs_in_order(dag: Any) -> None:
    from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

    assert [t.task_id for t in dag.topological_sort()] == ["ingest", "reconstruct", "analytics", "report", "maintain"]
    for up, down in [("ingest", "reconstruct"), ("reconstruct", "analytics"), ("analytics", "report"),
                     ("report", "maintain")]:
        assert dag.get_task(down).upstream_task_ids == {up}
    for task in dag.tasks:
        assert isinstance(task, SparkSubmitOperator)
        assert Path(task.application).is_file() and task.application.startswith(str(ROOT / "jobs"))
    assert dag.max_active_runs == 1 and dag.tasks[0].retries >= 1


def _job_of(task: Any) -> tuple[str, list[str]]:
    """The job a task runs and its arguments (templated): spark-submit's application, or what a Spark Connect
    task runs in its own process."""
    if hasattr(task, "application"):
        return task.application, task.application_args
    return task.op_kwargs["script"], task.op_kwargs["argv"]


def _rendered(dag: Any) -> dict[str, Any]:
    """Each task's templated arguments, rendered for the run of 03:00-04:00 and parsed with its job's parser."""
    import pendulum

    start, end = pendulum.datetime(2026, 11, 21, 3, tz="UTC"), pendulum.datetime(2026, 11, 21, 4, tz="UTC")
    interval = dag.timetable.infer_manual_data_interval(run_after=end)
    assert (interval.start, interval.end) == (start, end)  # an hourly interval, not a zero-length one

    class Variables:
        @staticmethod
        def get(key: str, default: str | None = None) -> str | None:
            return {"kraftlog_inputs": "s3a://archive/a,s3a://archive/b"}.get(key, default)

    context = {"data_interval_start": start, "data_interval_end": end, "ds_nodash": "20261121",
               "var": {"value": Variables()}}
    parsed = {}
    for task in dag.tasks:
        script, args = _job_of(task)
        argv = task.render_template(args, context)
        assert not any("{{" in a for a in argv), argv
        job = load_job(Path(script).stem)
        parsed[task.task_id] = job_parser(task.task_id, getattr(job, "_options", None)).parse_args(argv)
    return parsed


HOUR = (datetime(2026, 11, 21, 3, tzinfo=UTC), datetime(2026, 11, 21, 4, tzinfo=UTC))


def test_dag_renders_the_data_interval_into_job_arguments(dag: Any) -> None:
    parsed = _rendered(dag)
    assert parsed["ingest"].inputs == ["s3a://archive/a,s3a://archive/b"]  # split by jobs/ingest.py
    assert parsed["ingest"].profile.endswith("conf/cluster.toml")
    assert parsed["reconstruct"].verify
    report = parsed["report"]
    assert (report.start, report.end) == HOUR
    assert str(report.out_dir).endswith("/20261121T0400")


def test_dag_as_one_application_runs_the_pipeline_then_upkeep(one_app_dag: Any) -> None:
    """``KRAFTLOG_DAG_SHAPE=one``: one spark-submit of jobs/pipeline.py an hour (ingest, reconstruct with verify,
    analytics and the hour's reports), then maintain."""
    assert [t.task_id for t in one_app_dag.topological_sort()] == ["pipeline", "maintain"]
    assert one_app_dag.get_task("maintain").upstream_task_ids == {"pipeline"}
    run = _rendered(one_app_dag)["pipeline"]
    assert run.inputs == ["s3a://archive/a,s3a://archive/b"] and run.verify
    assert (run.start, run.end) == HOUR and run.report_dir.endswith("/20261121T0400")
    assert run.profile.endswith("conf/cluster.toml")


def test_dag_on_spark_connect_runs_the_jobs_on_a_server_that_stays_up(tmp_path: Path) -> None:
    """``KRAFTLOG_DAG_SHAPE=connect``: the same pipeline -> maintain, each job run in the task's process on a
    session of the ``spark_connect_default`` connection's server (no application submitted)."""
    from airflow.providers.apache.spark.operators.spark_pyspark import PySparkOperator

    dag = _dags(tmp_path, KRAFTLOG_DAG_SHAPE="connect")
    assert [t.task_id for t in dag.topological_sort()] == ["pipeline", "maintain"]
    for task in dag.tasks:
        assert isinstance(task, PySparkOperator) and task.conn_id == "spark_connect_default"
        assert (ROOT / "jobs" / task.op_kwargs["script"]).is_file()
    run = _rendered(dag)["pipeline"]
    assert run.inputs == ["s3a://archive/a,s3a://archive/b"] and run.verify
    assert (run.start, run.end) == HOUR and run.report_dir.endswith("/20261121T0400")


def test_dag_refuses_a_shape_it_does_not_know(tmp_path: Path) -> None:
    bag = _bag(tmp_path, KRAFTLOG_DAG_SHAPE="single")
    assert "KRAFTLOG_DAG_SHAPE='single'" in "".join(bag.import_errors.values())


@pytest.mark.slow
def test_dag_runs_end_to_end(tmp_path: Path) -> None:
    """``airflow dags test``: the tasks, one per step, run for real (spark-submit on local[2]) over the bundled
    sample for the 03:00-04:00 interval, and leave the tables and the report of that hour. (The ``connect`` shape
    runs end to end in test_deploy, on the Spark Connect server its other checks use. The ``one`` shape is not run
    again end to end, about 150 s of the suite's two cores: its tasks are this shape's operator (``_job``) on
    jobs/pipeline.py, which spark-submit runs in test_deploy's standalone cluster, and its wiring and rendered
    arguments, parsed by the jobs' own parsers, are checked above.)"""
    run = airflow_dags_test(tmp_path, "steps")
    assert_dag_ran(run, ["ingest", "reconstruct", "analytics", "report", "maintain"])
