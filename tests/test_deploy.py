"""kraftlog as a platform team deploys it: spark-submit's settings win, a Spark standalone cluster whose
executors run the packed environment of ``make dist``, and Spark Connect (the example Airflow DAG's jobs, then each
job, the CLI and the SQL functions, on one server). Every component is real and started here on loopback: the
Spark master and workers from pip pyspark's ``spark-class``, a Spark Connect server, Airflow (``airflow dags
test``), and an S3-compatible server for the warehouse.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT, SAMPLE
from services import (
    DagRun,
    airflow_dags_test,
    assert_dag_ran,
    assert_same_tables,
    connect_server,
    create_bucket,
    make_dist,
    moto_s3,
    run_ok,
    spark_env,
    standalone_cluster,
    upload,
)

pytestmark = [pytest.mark.slow, pytest.mark.spark]

BIN = Path(sys.executable).parent
PROBE = Path(__file__).parent / "deploy_probe.py"


def _tagged(out: str, tag: str) -> Any:
    """The JSON the probe printed on its line starting with `tag` (``PROBE`` or ``PAGES``)."""
    line = next(ln for ln in out.splitlines() if ln.startswith(tag + " "))
    return json.loads(line[len(tag) + 1:])


def _probe(out: str) -> dict[str, Any]:
    return dict(_tagged(out, "PROBE"))


def test_spark_submit_settings_win_over_the_profile(tmp_path: Path) -> None:
    profile = tmp_path / "profile.toml"
    profile.write_text('[spark]\nmaster = "local[2]"\n[spark.conf]\n"spark.sql.shuffle.partitions" = "8"\n'
                       '"spark.sql.files.maxPartitionBytes" = "64m"\n"spark.ui.enabled" = "false"\n')
    out = run_ok([str(BIN / "spark-submit"), "--master", "local[1]", "--conf", "spark.sql.shuffle.partitions=3",
                  str(PROBE), "--profile", str(profile)], spark_env(), tmp_path)
    session = _probe(out)["session"]
    assert "spark.master=local[1] " in session  # spark-submit's, not the profile's local[2]
    assert "spark.sql.shuffle.partitions=3 " in session
    assert "spark.sql.files.maxPartitionBytes=64m" in session  # set only by the profile: it applies
    # the real job, the same way: its log line reads the live session
    wh = tmp_path / "wh"
    out = run_ok([str(BIN / "spark-submit"), "--master", "local[1]", "--conf", "spark.sql.shuffle.partitions=3",
                  str(ROOT / "jobs" / "ingest.py"), "--profile", str(profile), "--warehouse", str(wh), str(SAMPLE)],
                 spark_env(), tmp_path)
    assert "spark.master=local[1] " in out and "spark.sql.shuffle.partitions=3 " in out
    assert "errors 0" in out
    assert "clientserver" not in out  # kraftlog's log lines, not py4j's at every exit (``kraftlog.logs``)


# -- a standalone cluster ----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def packed_env(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``make dist``: the wheel and the packed environment, built fresh for this run."""
    env = make_dist(tmp_path_factory.mktemp("dist"))
    assert env.stat().st_size > 10_000_000 and list(env.parent.glob("kraftlog-*.whl"))
    return env


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with standalone_cluster(tmp_path_factory.mktemp("standalone"), workers=2) as url:
        yield url


@pytest.fixture(scope="module")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    with moto_s3(tmp_path_factory.mktemp("moto")) as env:
        create_bucket(env, "kraftlog")
        upload(env, SAMPLE, "s3://kraftlog/archive/scenario-a")
        yield env


def test_standalone_cluster_with_the_packed_environment(tmp_path: Path, standalone: str, packed_env: Path,
                                                        s3: dict[str, str], sample_events: Any) -> None:
    local_wh, _ = sample_events
    submit = [str(BIN / "spark-submit"), "--master", standalone, "--archives", f"{packed_env}#env",
              "--conf", "spark.pyspark.python=./env/bin/python",
              "--conf", f"spark.pyspark.driver.python={sys.executable}",
              "--conf", "spark.executor.memory=1g", "--conf", "spark.ui.enabled=false"]
    env = spark_env(s3)
    env.pop("PYSPARK_PYTHON")
    wh = "s3://kraftlog/standalone"
    # the executors' interpreter and kraftlog, then the whole run (jobs/pipeline.py), in one application; Spark
    # Connect below runs the steps' own jobs. (No --verify: its replays run on the executors as reconstruct's do;
    # verify runs over S3 in test_s3, and in Spark Connect and the Airflow DAG.)
    out = run_ok([*submit, str(PROBE), "--warehouse", wh, "--pages", "s3://kraftlog/pages", "--then", "pipeline",
                  "--warehouse", wh, "--report-dir", "s3://kraftlog/reports", "s3://kraftlog/archive"], env, tmp_path)
    probe = _probe(out)
    assert probe["session"].startswith(f"spark.master={standalone} ")
    assert probe["python"] and all(p.endswith("/env/bin/python") and ".venv" not in p for p in probe["python"])
    assert all("/env/lib/python" in k for k in probe["kraftlog"])  # the wheel installed in the packed env
    assert "errors 0" in out and "snapshots checked" not in out
    assert "overview of 1 cluster(s): s3://kraftlog/reports/index.html" in out
    assert_same_tables(local_wh, wh, s3, leave_out=("snapshot_checks",))  # (what verify writes)
    from kraftlog.storage import Storage

    page = Storage.from_environment(environ=s3).read_bytes("s3://kraftlog/reports/index.html")
    assert b"T4vFxmI9RFCnFwCmltnwag" in page
    # the pages of several clusters, drawn by the executors in the packed environment and written to S3 by them
    from kraftlog.spark.reports import DRIVER_PAGES

    pages = _tagged(out, "PAGES")
    assert pages == [f"s3://kraftlog/pages/report-c{i}.html" for i in range(DRIVER_PAGES + 2)]
    for i, uri in enumerate(pages):
        assert f"<h1>KRaft metadata report: c{i}</h1>".encode() in Storage.from_environment(environ=s3).read_bytes(uri)


# -- Spark Connect -----------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def connect(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with connect_server(tmp_path_factory.mktemp("connect")) as url:
        yield url


@pytest.fixture(scope="module")
def connect_dag(connect: str, tmp_path_factory: pytest.TempPathFactory) -> DagRun:
    """The example Airflow DAG shaped for Spark Connect (``KRAFTLOG_DAG_SHAPE=connect``), run by ``airflow dags
    test`` on the module's server: jobs/pipeline.py (ingest, reconstruct with verify, analytics, the hour's report)
    then jobs/maintain.py, each in the task's own process on a session of the server."""
    return airflow_dags_test(tmp_path_factory.mktemp("dag"), "connect", connect)


def test_the_airflow_dag_runs_its_jobs_on_a_spark_connect_server(connect_dag: DagRun, sample_events: Any) -> None:
    assert_dag_ran(connect_dag, ["pipeline", "maintain"])
    assert "spark: connect" in connect_dag.out  # the jobs ran on the server's sessions
    local_wh, _ = sample_events
    assert_same_tables(local_wh, str(connect_dag.warehouse), {})


def test_spark_connect_runs_every_job(tmp_path: Path, connect: str, connect_dag: DagRun) -> None:
    """Each step's own job on the warehouse the DAG built there (nothing new: each goes on from it), the report's
    pages of many clusters drawn by the server's Python workers, the CLI, and the SQL functions."""
    env = spark_env({"SPARK_REMOTE": connect})
    wh = str(connect_dag.warehouse)
    py = sys.executable
    out = run_ok([py, str(ROOT / "jobs" / "ingest.py"), "--warehouse", wh, str(SAMPLE)], env, tmp_path)
    assert "spark: connect" in out and "errors 0" in out and "new rows 0" in out, out
    # nothing new: a small run, interpreted by settings of the server's session for it (given back after)
    out = run_ok([py, str(ROOT / "jobs" / "reconstruct.py"), "--warehouse", wh, "--verify"], env, tmp_path)
    assert "0 cluster(s) replayed" in out and "expressions interpreted" in out, out
    out = run_ok([py, str(ROOT / "jobs" / "analytics.py"), "--warehouse", wh], env, tmp_path)
    assert "0 cluster(s) go on" in out, out
    out = run_ok([py, str(ROOT / "jobs" / "report.py"), "--warehouse", wh, "--out-dir", str(tmp_path / "reports")],
                 env, tmp_path)
    assert (tmp_path / "reports" / "index.html").exists()
    # the pages of several clusters, drawn and written by the server's Python workers (``write_pages``): copies of
    # the sample's report under other cluster ids (the warehouse holds one cluster), as on the standalone cluster
    from kraftlog.spark.reports import DRIVER_PAGES

    pages, n = tmp_path / "pages", DRIVER_PAGES + 2
    out = run_ok([py, str(PROBE), "--warehouse", wh, "--pages", str(pages)], env, tmp_path)
    assert _probe(out)["session"].startswith("connect spark.master=")  # (through the server)
    uris = _tagged(out, "PAGES")
    assert uris == [f"file:{pages}/report-c{i}.html" for i in range(n)]  # (as normalized: a URI)
    assert sorted(p.name for p in pages.iterdir()) == sorted(f"report-c{i}.html" for i in range(n))
    assert all(f"<h1>KRaft metadata report: c{i}</h1>" in (pages / f"report-c{i}.html").read_text() for i in range(n))
    # the CLI too
    out = run_ok([str(BIN / "kraftlog"), "state", "--warehouse", wh, "--kind", "brokers"], env, tmp_path)
    assert '"brokers"' in out
    # and the SQL functions register there (a TopicRecord's bytes, decoded on the server's Python workers)
    sql = ("from kraftlog.config import Config; from kraftlog.spark.session import build_session; "
           "from kraftlog.spark.decode import register_functions; s = build_session(Config.load()); "
           "register_functions(s); print('TYPE', s.sql(\"SELECT kraft_decode(unhex("
           "'0102000174000000000000000000000000000000010000')).type AS t\").first().t); "
           f"print('TABLE', s.sql(\"SELECT record_type FROM kraft_records(unhex('{_first_batch().hex()}'))\")"
           ".first().record_type)")
    out = run_ok([py, "-c", sql], env, tmp_path)
    assert "TYPE TOPIC_RECORD" in out and "TABLE LeaderChange" in out  # the UDTF runs on the server too


def _first_batch() -> bytes:
    """The first batch of the sample's node-2 log (its LeaderChange)."""
    from kraftlog.wire.batches import Batch, iter_batches

    data = (SAMPLE / "node-2" / "__cluster_metadata-0" / "00000000000000000000.log").read_bytes()
    first = next(b for b in iter_batches(data, parse_records=False) if isinstance(b, Batch))
    return data[first.position:first.position + first.size]


def test_the_wheel_carries_the_schemas_and_loads_them_as_a_zip(packed_env: Path, tmp_path: Path) -> None:
    """``--py-files kraftlog-*.whl``: Python imports kraftlog from the zip and finds the schemas inside it."""
    wheel = next(packed_env.parent.glob("kraftlog-*.whl"))
    code = (f"import sys; sys.path.insert(0, {str(wheel)!r}); import kraftlog.schema.registry as r; "
            "s = r.load_schemas(); print(r.__file__); print(len(s.metadata), len(s.control), r.schema_root())")
    out = run_ok([sys.executable, "-c", code], spark_env(), tmp_path)
    assert f"{wheel}/kraftlog/schema/registry.py" in out and f"{wheel}/kraftlog/_schemas" in out
