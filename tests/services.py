"""Real services started by the tests and benchmarks, on loopback and free ports: an S3-compatible server
(moto's), a Spark standalone cluster and a Spark Connect server (from pip pyspark), and ``make dist``."""

from __future__ import annotations

import os
import shutil
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import pyarrow as pa
import pytest

if TYPE_CHECKING:
    from kraftlog.tables.definitions import TableDef


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for_port(port: int, seconds: float = 60, proc: subprocess.Popen | None = None) -> None:  # type: ignore[type-arg]
    deadline = time.time() + seconds
    while time.time() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"the server exited with {proc.returncode} before listening on {port}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.2)
    raise TimeoutError(f"nothing listens on 127.0.0.1:{port} after {seconds} s")


S3_ENV = ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION", "AWS_ALLOW_HTTP")


@contextmanager
def moto_s3(log_dir: Path) -> Iterator[dict[str, str]]:
    """moto's standalone S3 server on a free loopback port; yields the standard AWS_* variables for it."""
    exe = shutil.which("moto_server", path=str(Path(sys.executable).parent)) or shutil.which("moto_server")
    if exe is None:
        pytest.skip("moto_server is not installed (pip install 'moto[server]', part of the dev extra)")
    port = free_port()
    log = open(log_dir / "moto.log", "wb")  # noqa: SIM115 (closed below)
    proc = subprocess.Popen([exe, "-H", "127.0.0.1", "-p", str(port)], stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_for_port(port, proc=proc)
        yield {"AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}", "AWS_ACCESS_KEY_ID": "kraftlog-test",
               "AWS_SECRET_ACCESS_KEY": "kraftlog-test-secret", "AWS_REGION": "us-east-1", "AWS_ALLOW_HTTP": "true"}
    finally:
        proc.terminate()
        proc.wait(30)
        log.close()


def s3_requests(log: Path) -> list[tuple[str, str]]:
    """The (method, path and query) of each request moto's server logged so far."""
    import re

    plain = re.sub(r"\x1b\[[0-9;]*m", "", log.read_text(errors="replace"))  # werkzeug colours some lines
    return re.findall(r'"([A-Z]+) (\S+) HTTP/', plain)


@contextmanager
def environment(values: dict[str, str]) -> Iterator[None]:
    """``os.environ`` with ``values`` set, restored afterwards."""
    before = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in before.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def create_bucket(env: dict[str, str], bucket: str) -> None:
    """Create a bucket with a plain S3 CreateBucket request (pyarrow's S3 client, no SDK of our own)."""
    from pyarrow import fs as pafs

    s3 = pafs.S3FileSystem(endpoint_override=env["AWS_ENDPOINT_URL"], scheme="http", region=env["AWS_REGION"],
                           access_key=env["AWS_ACCESS_KEY_ID"], secret_key=env["AWS_SECRET_ACCESS_KEY"],
                           allow_bucket_creation=True)
    s3.create_dir(bucket)


def upload(env: dict[str, str], local: Path, uri: str) -> int:
    """Copy a local tree to ``s3://bucket/prefix``; returns the number of files."""
    from kraftlog.storage import Storage, join

    storage = Storage.from_environment(environ=env)
    n = 0
    for p in sorted(local.rglob("*")):
        if p.is_file():
            storage.write_bytes(join(uri, str(p.relative_to(local))), p.read_bytes())
            n += 1
    return n



# columns that name where or when a run read or wrote, not what the log holds
VOLATILE = {"run_id", "file", "path", "data_dir", "ingested_at", "modification_time", "winner_file", "loser_file",
            "started_at", "finished_at", "seconds", "inputs", "writer", "build_id", "built_at", "lineage", "landed_run",
            "landed_files", "landed_digest", "history_build_id", "checked_at"}


def land_build_analyze(spark: Any, inputs: Path, wh: Path, full: bool = False,
                       before_build: Callable[[Any], object] | None = None) -> tuple[Any, Any]:
    """Ingest ``inputs`` into the warehouse ``wh`` (each cluster named by its cluster.id), then reconstruct and
    analyze (``full``: from scratch); ``before_build``: called with the run's ``Config`` once the inputs landed.
    Returns the ``ReconstructResult`` and the ``AnalyzeResult``."""
    from kraftlog.config import Config
    from kraftlog.spark.analyze import analyze
    from kraftlog.spark.history import reconstruct
    from kraftlog.spark.ingest import ingest

    config = Config.load(warehouse={"path": str(wh)}, identity={"cluster": "{cluster.id}"})
    ingest(spark, [str(inputs)], config)
    if before_build is not None:
        before_build(config)
    return reconstruct(spark, config, full=full), analyze(spark, config, full=full)


class SparkJob(NamedTuple):
    description: str | None
    call_site: str  # (the name the UI shows a job without a description by)


def spark_jobs(spark: Any) -> dict[int, SparkJob]:
    """The Spark jobs this application ran, by id, as its status store (what the Spark UI shows) keeps them."""
    jobs = spark.sparkContext._jsc.sc().statusStore().jobsList(None)
    out = {}
    for i in range(jobs.size()):
        job = jobs.apply(i)
        text = job.description()
        out[int(job.jobId())] = SparkJob(text.get() if text.isDefined() else None, str(job.name()))
    return out


def table_rows(uri: str, options: dict[str, str] | None = None) -> list[str]:
    """A Delta table's rows without the ``VOLATILE`` columns, as sorted JSON lines."""
    from deltalake import DeltaTable

    return arrow_rows(DeltaTable(uri, storage_options=options).to_pyarrow_table())


def repeated_keys(uri: str, table: TableDef) -> list[tuple[Any, ...]]:
    """The keys (``TableDef.key``) more than one row of ``table``'s Delta table at ``uri`` holds."""
    from collections import Counter

    from deltalake import DeltaTable

    keys = DeltaTable(uri).to_pyarrow_table(columns=list(table.key)).to_pylist()
    return [k for k, n in Counter(tuple(r.values()) for r in keys).items() if n > 1]


def arrow_rows(t: pa.Table) -> list[str]:
    """An Arrow table's rows without the ``VOLATILE`` columns, as sorted JSON lines."""
    import json

    t = t.drop_columns([c for c in t.column_names if c in VOLATILE])
    return sorted(json.dumps(r, sort_keys=True, default=str) for r in t.to_pylist())


def tables(wh: Path) -> list[str]:
    """The Delta tables of a local warehouse."""
    return sorted(p.name for p in wh.iterdir() if (p / "_delta_log").is_dir())


def assert_same_tables(local_wh: Path, wh: str, storage_env: dict[str, str], leave_out: tuple[str, ...] = ()
                       ) -> int:
    """Every table of ``local_wh`` but ``runs`` (and ``leave_out``) holds the same rows in ``wh`` (any URI,
    reached with the ``AWS_*`` variables of ``storage_env``); returns how many tables were compared."""
    from kraftlog.storage import Storage

    storage = Storage.from_environment(environ=storage_env)
    names = [n for n in tables(local_wh) if n not in ("runs", *leave_out)]
    for name in names:
        assert table_rows(storage.table_uri(f"{wh}/{name}"), storage.delta_options()) == \
            table_rows(str(local_wh / name)), name
    return len(names)


# -- Spark ---------------------------------------------------------------------------------------------------

ROOT = Path(__file__).resolve().parents[1]


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent


# what a JVM the tests start (a job, a master, a worker, an executor, a Connect server) runs with: code compiled by
# C1 alone and the serial collector. Each lives a minute or two over tiny inputs, too short for C2's compiles (on the
# two cores that also run the job) to pay back: the sample's ``kraftlog run`` 87 -> 69 s. It changes no result.
# With C1 alone the JVM reserves 48 MB of code cache, not the 240 MB of tiered compilation: the Connect server, which
# serves every job of a test, filled it (CI: "CodeCache is full. Compiler has been disabled", then a fatal "Out of
# space in CodeCache" that stopped its SparkContext); so the tiered size is kept.
SHORT_JVM = "-XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=240m -XX:+UseSerialGC"


def spark_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment for Spark processes: this venv's Python on both sides, loopback only, JVMs tuned for a
    short life (``SHORT_JVM``, read by every ``java`` they start, executors included)."""
    return {**os.environ, "SPARK_HOME": str(spark_home()), "PYSPARK_PYTHON": sys.executable,
            "PYSPARK_DRIVER_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1", "JDK_JAVA_OPTIONS": SHORT_JVM,
            **(extra or {})}


def run_ok(cmd: list[str], env: dict[str, str], cwd: Path, timeout: float = 900) -> str:
    """What ``cmd`` printed (stdout, then stderr), asserting it exited 0 (the end of its output otherwise)."""
    run = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    out = run.stdout + run.stderr
    assert run.returncode == 0, (cmd, out[-5000:])
    return out


def make_dist(dest: Path) -> Path:
    """``make dist`` into ``dest``; returns the packed environment."""
    run_ok(["make", "--no-print-directory", "dist", f"DIST={dest}"], spark_env(), ROOT, timeout=1200)
    return dest / "kraftlog-env.tar.gz"


def _alive_workers(ui_port: int) -> int:
    """Workers registered with a standalone master, from its web UI's JSON (0 while the UI is not up yet)."""
    import json
    import urllib.request

    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{ui_port}/json/", timeout=5) as r:
            return int(json.load(r).get("aliveworkers", 0))
    except OSError:
        return 0


def _stop(procs: list[subprocess.Popen]) -> None:  # type: ignore[type-arg]
    for p in reversed(procs):
        p.terminate()
    for p in procs:
        try:
            p.wait(60)
        except subprocess.TimeoutExpired:
            p.kill()


@contextmanager
def standalone_cluster(work: Path, workers: int = 2, cores: int = 1, memory: str = "2g") -> Iterator[str]:
    """A Spark standalone master and ``workers`` workers, separate JVMs from ``spark-class``; yields the master URL.

    The workers get no ``PYSPARK_PYTHON``: an application's executors use the Python it names
    (``spark.pyspark.python``, e.g. the packed environment).
    """
    spark_class = str(spark_home() / "bin" / "spark-class")
    port, ui = free_port(), free_port()
    env = spark_env({"SPARK_LOG_DIR": str(work)})
    env.pop("PYSPARK_PYTHON")
    procs = [subprocess.Popen([spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                               "--port", str(port), "--webui-port", str(ui)], env=env,
                              stdout=open(work / "master.log", "wb"), stderr=subprocess.STDOUT)]  # noqa: SIM115
    try:
        wait_for_port(port, 120, procs[0])
        url = f"spark://127.0.0.1:{port}"
        for i in range(workers):
            procs.append(subprocess.Popen(
                [spark_class, "org.apache.spark.deploy.worker.Worker", url, "--host", "127.0.0.1", "--cores",
                 str(cores), "--memory", memory, "--webui-port", str(free_port()), "--work-dir", str(work / f"w{i}")],
                env=env, stdout=open(work / f"worker{i}.log", "wb"), stderr=subprocess.STDOUT))  # noqa: SIM115
        deadline = time.time() + 120
        while _alive_workers(ui) < workers:
            if time.time() > deadline:
                raise TimeoutError("the standalone workers did not register with the master")
            time.sleep(1)
        yield url
    finally:
        _stop(procs)


@contextmanager
def connect_server(work: Path, master: str = "local[2]", conf: Mapping[str, str] | None = None,
                   long_lived: bool = False) -> Iterator[str]:
    """A Spark Connect server (pip pyspark's jar) on a free loopback port; yields its ``sc://`` URL. ``conf``: more
    settings; ``long_lived``: the JVM as Spark starts it (not ``SHORT_JVM``), a server that serves many runs."""
    port = free_port()
    settings = {"spark.connect.grpc.binding.port": str(port), "spark.connect.grpc.binding.address": "127.0.0.1",
                "spark.ui.enabled": "false", "spark.sql.session.timeZone": "UTC",
                "spark.default.parallelism": master[6:-1] if master.startswith("local[") else "2", **(conf or {})}
    env = spark_env()
    if long_lived:
        env.pop("JDK_JAVA_OPTIONS")
    proc = subprocess.Popen(
        [str(Path(sys.executable).parent / "spark-submit"), "--class",
         "org.apache.spark.sql.connect.service.SparkConnectServer", "--master", master,
         *[arg for key, value in settings.items() for arg in ("--conf", f"{key}={value}")], "spark-internal"],
        env=env, cwd=work, stdout=open(work / "server.log", "wb"), stderr=subprocess.STDOUT)  # noqa: SIM115
    try:
        wait_for_port(port, 180, proc)
        yield f"sc://127.0.0.1:{port}"
    finally:
        _stop([proc])


class DagRun(NamedTuple):
    """What ``airflow dags test`` of kraftlog's DAG printed, and the warehouse and report directory it wrote."""

    out: str
    warehouse: Path
    reports: Path


def airflow_dags_test(work: Path, shape: str, connect: str | None = None) -> DagRun:
    """``airflow dags test`` of ``jobs/airflow`` (``KRAFTLOG_DAG_SHAPE=shape``) for 03:00-04:00 on 2026-11-21 over
    the bundled sample, its tasks run for real: spark-submit on local[2], or (``connect``: a server's ``sc://`` URL)
    the jobs in the task's process on that Spark Connect server. Fails unless every command succeeds."""
    import json

    bin_dir = Path(sys.executable).parent
    if not (bin_dir / "spark-submit").exists() or not (bin_dir / "airflow").exists():
        pytest.skip(f"spark-submit or the airflow CLI not in {bin_dir} (pip install -e '.[spark,airflow]')")
    profile = work / "profile.toml"
    wh, reports = work / "warehouse", work / "reports"
    profile.write_text('[spark]\nmaster = "local[2]"\n[spark.conf]\n"spark.sql.shuffle.partitions" = "4"\n'
                       f'"spark.ui.enabled" = "false"\n[warehouse]\npath = "{wh}"\n')
    env = {**spark_env(), "AIRFLOW_HOME": str(work / "airflow"),
           "AIRFLOW__CORE__DAGS_FOLDER": str(ROOT / "jobs" / "airflow"), "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
           "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
           "AIRFLOW_CONN_SPARK_DEFAULT": '{"conn_type": "spark", "host": "local[2]"}',
           "AIRFLOW_VAR_KRAFTLOG_CONF": str(profile), "AIRFLOW_VAR_KRAFTLOG_REPORTS": str(reports),
           "AIRFLOW_VAR_KRAFTLOG_INPUTS": str(ROOT / "samples" / "scenario-a"), "KRAFTLOG_DAG_SHAPE": shape}
    if connect is not None:
        host, port = connect.removeprefix("sc://").split(":")
        env["AIRFLOW_CONN_SPARK_CONNECT_DEFAULT"] = json.dumps({"conn_type": "spark_connect", "host": host,
                                                                "port": int(port)})
    airflow = str(bin_dir / "airflow")
    for cmd in (["db", "migrate"], ["dags", "reserialize"], ["dags", "test", "kraftlog", "2026-11-21T04:00:00+00:00"]):
        out = run_ok([airflow, *cmd], env, work, timeout=1200)
    return DagRun(out, wh, reports)


def assert_dag_ran(run: DagRun, tasks: list[str]) -> None:
    """The DAG's run succeeded with ``tasks`` in order, and left the tables and the hour's report page."""
    import re

    from deltalake import DeltaTable

    assert "state=success" in run.out  # the run's, once its tasks all succeeded
    assert re.findall(r"\[DAG TEST\] end task task_id=(\w+)", run.out) == tasks
    assert DeltaTable(str(run.warehouse / "leader_elections")).count() > 0  # ingest, reconstruct and analytics ran
    page = (run.reports / "20261121T0400" / "report-T4vFxmI9RFCnFwCmltnwag.html").read_text()
    assert "2026-11-21 03:00:00 UTC to 2026-11-21 04:00:00 UTC" in page and "<td>unclean</td>" in page


def copy_upto(source: Path, dest: Path, end: int, skip: tuple[str, ...] = (), ends: Mapping[str, int] | None = None
              ) -> Path:
    """``source``'s data directories in ``dest`` as they were when the log ended at offset ``end`` (exclusive; in
    the data directories named in ``ends``, at their own offset): later batches cut off, later segments and
    snapshots absent; files named in ``skip`` left out."""
    if dest.exists():
        shutil.rmtree(dest)
    shutil.copytree(source, dest)
    for f in sorted(dest.rglob("__cluster_metadata-0/*")):
        if f.suffix not in (".log", ".checkpoint"):
            continue
        stop = (ends or {}).get(f.parent.parent.name, end)
        start = int(f.name.split(".")[0].split("-")[0])
        if f.name in skip or (f.suffix == ".checkpoint" and start > stop) or (f.suffix == ".log" and start >= stop):
            f.unlink()
        elif f.suffix == ".log":
            data = f.read_bytes()
            pos = 0
            while pos + 12 <= len(data):
                base, length = struct.unpack_from(">qi", data, pos)
                if base >= stop:
                    break
                pos += 12 + length
            f.write_bytes(data[:pos])
    return dest

