"""The SparkSession of a run: whoever started the job decides; the profile's ``[spark]`` fills the gaps.

In order of precedence:

1. ``SPARK_REMOTE`` (or ``spark.remote``): a Spark Connect session; only runtime SQL settings of the
   profile that the server does not already have are set;
2. a session already active in this process (a notebook, Databricks, a test): used as it is;
3. under ``spark-submit`` (the driver JVM is already running): master, deploy mode and every ``--conf``
   it was given stay; the profile's values apply only to keys spark-submit did not set;
4. anywhere else (``kraftlog ingest`` from a shell): the profile, whose embedded default is ``local[*]``.
"""

from __future__ import annotations

import argparse
import functools
import logging
import os
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from typing import Any, TypeVar

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.pandas.types import from_arrow_schema

from kraftlog.config import Config
from kraftlog.errors import TOLD, KraftlogError
from kraftlog.logs import log_to_stderr
from kraftlog.spark.jvm_names import remember_jvm_names


def is_connect(spark: SparkSession) -> bool:
    """True for a Spark Connect session (no JVM in this process: no ``sparkContext``)."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


_ARROW_TYPES = {"string": pa.string(), "long": pa.int64(), "bigint": pa.int64(), "int": pa.int32(),
                "timestamp": pa.timestamp("us", tz="UTC"), "binary": pa.binary()}


@functools.cache
def _arrow_schema(ddl: str) -> pa.Schema:
    fields = [part.split() for part in ddl.split(",")]
    return pa.schema([pa.field(name, _ARROW_TYPES[kind.lower()]) for name, kind in fields])


def local_frame(spark: SparkSession, rows: Iterable[Sequence[Any]], ddl: str) -> DataFrame:
    """Rows the driver holds as a DataFrame of the plan itself (a ``LocalRelation``, handed over as Arrow), of the
    columns ``ddl`` names (``"cluster_id string, at long"``: string, long, int, timestamp, binary).
    ``createDataFrame`` of a list makes an RDD of pickled rows instead: each join or broadcast of it runs a Spark job
    of Python tasks (0.3-1 s each in a 5M-record increment, several per run)."""
    schema = _arrow_schema(ddl)
    columns = list(zip(*rows, strict=True)) or [() for _ in schema]
    table = pa.table([pa.array(c, type=f.type) for c, f in zip(columns, schema, strict=True)], schema=schema)
    return spark.createDataFrame(table, schema=from_arrow_schema(schema))  # (Spark Connect needs it when empty)


def local_rows(df: DataFrame, *names: str) -> list[tuple[Any, ...]]:
    """The values of the columns ``names`` of ``df``'s rows, on the driver: through Arrow, a tuple per row, no ``Row``
    made (a plan's lookup of the 22k partitions an hour of the 5M-record benchmark cluster touches spent as long in
    ``Row`` item lookups as in its query)."""
    got = df.select(*names).toArrow()
    return list(zip(*(got.column(n).to_pylist() for n in names), strict=True))


def _remote() -> str | None:
    return os.environ.get("SPARK_REMOTE") or None


def _submitted_conf() -> dict[str, str] | None:
    """The settings of the JVM that launched this driver (spark-submit), or None outside spark-submit."""
    if "PYSPARK_GATEWAY_PORT" not in os.environ:
        return None
    from pyspark import SparkConf
    from pyspark.context import SparkContext

    SparkContext._ensure_initialized()  # connects to the submitting JVM; starts nothing
    return dict(SparkConf().getAll())


def _say_if_unreachable(remote: str, timeout_s: float = 5.0) -> None:
    """Warn when the Spark Connect server of ``remote`` (``sc://host:port/;...``) takes no connection: PySpark then
    retries for ten minutes or more before it fails (a server restarting is waited for), printing nothing."""
    import socket
    from urllib.parse import urlsplit

    try:
        where = urlsplit(remote.split(";", 1)[0])
        host, port = where.hostname or "localhost", where.port or 15002
    except ValueError:
        return  # (PySpark names what is wrong with the URL)
    try:
        socket.create_connection((host, port), timeout=timeout_s).close()
    except OSError as e:
        logging.getLogger("kraftlog").warning(
            "the Spark Connect server %s (SPARK_REMOTE) takes no connection (%s): Spark keeps trying for about ten "
            "minutes before it fails", remote, e.strerror or e)


def build_session(config: Config) -> SparkSession:
    """The session for a run (see the module docstring for who decides what)."""
    spark_conf = config.spark
    profile = {k: str(v) for k, v in spark_conf.get("conf", {}).items()}
    remote = _remote()
    if remote is not None:
        _say_if_unreachable(remote)
        spark = SparkSession.builder.remote(remote).getOrCreate()
        for key, value in profile.items():  # only runtime SQL settings can be set from a client
            if key.startswith("spark.sql.") and spark.conf.get(key, None) is None:
                _try_set(spark, key, value)
        return spark
    remember_jvm_names()  # (PySpark resolves a JVM name per Column built: see the module)
    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    # Python workers use this interpreter unless PYSPARK_PYTHON (or spark.pyspark.python) says otherwise
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    submitted = _submitted_conf()
    given = submitted if submitted is not None else {}
    builder = SparkSession.builder
    if "spark.app.name" not in given:
        builder = builder.appName(spark_conf.get("app_name", "kraftlog"))
    if submitted is None and spark_conf.get("master"):
        builder = builder.master(spark_conf["master"])
    for key, value in profile.items():
        if key not in given:
            builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(spark_conf.get("log_level", "WARN"))
    _say_if_archive_unused(spark)
    return spark


def _say_if_archive_unused(spark: SparkSession) -> None:
    """Warn where the driver was asked to start from a class-data archive it could not map (``kraftlog
    jvm-archive``): the hour then costs what it did without, silently."""
    from kraftlog.spark.class_archive import unused_archive

    try:
        path = unused_archive(spark)
    except Exception as e:  # a JVM without HotSpot's diagnostic bean: nothing to tell
        logging.getLogger("kraftlog").debug("class-data archive not checked: %s", e)
        return
    if path is not None:
        logging.getLogger("kraftlog").warning(
            "the driver's JVM did not start from the class-data archive %s (written for another Java or other Spark "
            "jars, or not there): write it again with `kraftlog jvm-archive`", path)


def _try_set(spark: SparkSession, key: str, value: str) -> bool:
    """Set a runtime setting of the session; False where the session does not let it change."""
    try:
        spark.conf.set(key, value)
        return True
    except Exception as e:  # a static setting the server fixed at start-up
        logging.getLogger("kraftlog").debug("not set on the session: %s (%s)", key, e)
        return False


# Spark's settings for a small increment: expressions evaluated interpreted, not compiled (Spark's own fallback
# where code generation fails), and each query planned once, not re-planned stage by stage (adaptive execution).
# Each query of a run compiles its generated code (Janino, then the JVM's JIT), a fixed cost per query that a small
# increment's few thousand rows never earn back. On the 5M-record benchmark cluster's hourly increment, interpreted:
# reconstruct + analyze 15.0-15.7 s against 16.8-17.2 s in a warm process, 25.9 s against 29.9 s in a fresh one
# (compiled, the JIT's compiler threads took 8 of the analysis's 28 CPU seconds); a full build interpreted: 219 s
# against 147 s. Adaptive execution runs each shuffle stage as a job of its own and optimizes what is left of the
# plan after each: in the same hour's analysis (some 20 queries, most over a few thousand rows) the JVM's JIT
# compiler threads took 12 of its 20 CPU seconds and the tasks 7; planned once, reconstruct + analyze 16.6-18.6 s
# against 18.2-22.2 s (median 17.5 against 19.5, eight warm runs each, two alternations). Joins are then planned
# from the tables' sizes alone, and a shuffle keeps spark.sql.shuffle.partitions parts, which adaptive execution
# would have coalesced: ``small_run_settings`` sets that to the cluster's task slots at most (a cluster set up for
# big jobs may ask for hundreds, each a task an hour's rows do not need). The files written stay one per task slot
# at most either way (``TableStore.replace`` coalesces).
INTERPRETED = {"spark.sql.codegen.wholeStage": "false", "spark.sql.codegen.factoryMode": "NO_CODEGEN",
               "spark.sql.adaptive.enabled": "false"}
SHUFFLE_PARTS = "spark.sql.shuffle.partitions"


def small_run_settings(spark: SparkSession) -> dict[str, str]:
    """What a small run sets on its session: ``INTERPRETED``, and as many shuffle parts as the cluster runs tasks at
    once (``default_parallelism``), or the session's own number where that is fewer."""
    parts = default_parallelism(spark)
    given = spark.conf.get(SHUFFLE_PARTS, None)
    if given is not None and given.isdigit():
        parts = min(parts, int(given))
    return {**INTERPRETED, SHUFFLE_PARTS: str(max(1, parts))}


@contextmanager
def interpreted(spark: SparkSession, records: Callable[[int], int], below: int) -> Iterator[bool]:
    """While the block runs, a run of fewer than ``below`` records to replay or analyse (``records(below)``: other
    than NoOps, ``kraftlog.spark.landed.state_records``, a first build's all counted; counted up to ``below`` at most,
    and not at all where ``below`` is 0) evaluates its expressions interpreted and plans each query once
    (``small_run_settings``); the session's settings are restored after. Yields whether it does: not where the
    session does not let a setting change."""
    n = records(below) if below > 0 else None
    if n is None or n >= below:
        yield False
        return
    with settings(spark, small_run_settings(spark)) as on:
        if on:
            logging.getLogger("kraftlog").info("%d records other than NoOps (below %d): expressions interpreted", n,
                                               below)
        yield on


# What a run that writes the warehouse (``kraftlog.spark.store.writing``) sets on its session where the session
# does not: the rows kraftlog's own jobs hand to Python workers (event and history rows, typed rows, lists of files)
# are small, so a batch of them is cut at spark.sql.execution.arrow.maxRecordsPerBatch rows (10,000) alone. Under a
# byte limit (Spark's default: 64 MiB) Spark sizes every Arrow vector of the batch after each row it adds: on the
# 5M-record benchmark cluster, 15% of isr_changes' task time; its staging 9.0-10.3 -> 7.3-7.6 s, leader_elections'
# 4.3-4.8 -> 3.6-3.7 s. The limit stays for the session's other queries: a ``kraft_records(content)`` over whole
# files needs it.
RUN_SETTINGS = {"spark.sql.execution.arrow.maxBytesPerBatch": str(2**31 - 1)}


@contextmanager
def run_settings(spark: SparkSession | None) -> Iterator[None]:
    """While the block runs, ``RUN_SETTINGS`` not set on the session already (a profile's, spark-submit's or the
    server's value wins); restored after. Without a session (a store that only commits), nothing."""
    if spark is None:
        yield
        return
    with settings(spark, {k: v for k, v in RUN_SETTINGS.items() if spark.conf.get(k, None) is None}):
        yield


@contextmanager
def settings(spark: SparkSession, values: dict[str, str]) -> Iterator[bool]:
    """While the block runs, the session's runtime settings ``values``, where the session lets them change; each
    changed setting is restored after (unset where it was not set). Yields whether all of them hold."""
    before = {key: spark.conf.get(key, None) for key in values}
    changed = [key for key, value in values.items() if before[key] != value and _try_set(spark, key, value)]
    try:
        yield all(before[key] == value or key in changed for key, value in values.items())
    finally:
        for key in changed:
            was = before[key]
            if was is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, was)


def default_parallelism(spark: SparkSession) -> int:
    """How many tasks run at once: the cluster's cores (classic), else ``spark.default.parallelism``."""
    if not is_connect(spark):
        return int(spark.sparkContext.defaultParallelism)
    for key in ("spark.default.parallelism", "spark.kraftlog.parallelism"):
        value = spark.conf.get(key, None)
        if value:
            return int(value)
    master = spark.conf.get("spark.master", "") or ""
    if master.startswith("local["):
        inner = master[len("local["):].split(",")[0].rstrip("]")
        return os.cpu_count() or 2 if inner == "*" else int(inner)
    return os.cpu_count() or 2


@contextmanager
def described(spark: SparkSession | None, text: str) -> Iterator[None]:
    """The Spark jobs this thread starts while the block runs carry ``text`` as their description: the Spark UI's
    job and SQL pages name what each is for ("kraftlog analyze <build>: leader_elections"), not the call site
    ("collectToPython at <unknown>:0"). The thread's description before is restored. A Connect client sets no
    description: its operations carry ``text`` as a tag instead (no comma in it). Without a session (a store that
    only commits) there is nothing to describe."""
    if spark is None:
        yield
        return
    if is_connect(spark):
        spark.addTag(text)
        try:
            yield
        finally:
            spark.removeTag(text)
        return
    context = spark.sparkContext
    before = context.getLocalProperty("spark.job.description")
    context.setJobDescription(text)
    try:
        yield
    finally:
        context.setLocalProperty("spark.job.description", before)  # type: ignore[arg-type]  # (None: unset)


def carried(spark: SparkSession | None, call: Callable[..., Any]) -> Callable[..., Any]:
    """``call``, to run on another thread as part of this thread's work: the Spark jobs it starts carry this thread's
    description (``described``), or over Connect its tags (a new thread has none of either)."""
    if spark is None:
        return call
    if is_connect(spark):
        texts = sorted(spark.getTags())
    else:
        text = spark.sparkContext.getLocalProperty("spark.job.description")
        texts = [] if text is None else [text]

    @functools.wraps(call)
    def run(*args: Any, **kwargs: Any) -> Any:
        with ExitStack() as stack:
            for text in texts:
                stack.enter_context(described(spark, text))
            return call(*args, **kwargs)
    return run


class JobThreads(ThreadPoolExecutor):
    """A thread pool for Spark jobs run side by side: each call submitted runs ``carried`` from the submitting thread,
    so its jobs are named in the Spark UI (and cancelled with its tags) as the run's that started them."""

    def __init__(self, spark: SparkSession | None, workers: int) -> None:
        super().__init__(workers)
        self.spark = spark

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        return super().submit(carried(self.spark, fn), *args, **kwargs)


Item = TypeVar("Item")
Out = TypeVar("Out")


def in_threads(call: Callable[[Item], Out], items: list[Item], jobs: int) -> list[Out]:
    """``call`` on each of ``items``, ``jobs`` at a time in threads (each waits on storage or delta-rs, not on a Spark
    job: those go through ``JobThreads``); the results in order (an exception raised once every call ended)."""
    if not items:
        return []
    with ThreadPoolExecutor(max(1, min(jobs, len(items)))) as pool:
        return list(pool.map(call, items))


def job_parser(description: str, extra: Callable[[argparse.ArgumentParser], None] | None = None
               ) -> argparse.ArgumentParser:
    """The argument parser of a spark-submit job: ``--profile``, ``--warehouse`` and the job's own (``extra``)."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--profile", help="TOML profile (conf/local.toml, conf/cluster.toml); Spark settings given to "
                    "spark-submit win over the profile's")
    ap.add_argument("--warehouse", help="where the Delta tables live (overrides the profile)")
    if extra is not None:
        extra(ap)
    return ap


def job_arguments(description: str, argv: list[str] | None = None,
                  extra: Callable[[argparse.ArgumentParser], None] | None = None,
                  check: Callable[[argparse.Namespace], object] | None = None
                  ) -> tuple[argparse.Namespace, Config, SparkSession]:
    """The parsed arguments of a spark-submit job, its config and the session. ``check`` looks at the arguments
    together before Spark starts: a ``KraftlogError`` it raises is a usage error (exit status 2)."""
    parser = job_parser(description, extra)
    args = parser.parse_args(argv)
    if check is not None:
        try:
            check(args)
        except KraftlogError as e:
            parser.error(str(e))
    log_to_stderr(fmt="%(asctime)s %(levelname)s %(message)s", datefmt=None)
    overrides: dict[str, Any] = {"warehouse": {"path": args.warehouse}} if args.warehouse else {}
    config = Config.load(args.profile, **overrides)
    spark = build_session(config)
    logging.getLogger("kraftlog").info("spark: %s", describe(spark))
    return args, config, spark


def run_job(main: Callable[[], int]) -> int:
    """A spark-submit job's exit status: ``main``'s, or 1 after one line (the ``kraftlog`` logger's ERROR) for what
    kraftlog (``KraftlogError``), the operating system or a storage service (``OSError``) refused, as the CLI says
    it; any other exception is a bug and keeps its traceback."""
    try:
        return main()
    except TOLD as e:
        logging.getLogger("kraftlog").error("%s", e)
        return 1


def describe(spark: SparkSession) -> str:
    """The live session's deciding settings, as one line (master, deploy mode, app, partitioning)."""
    keys = ("spark.master", "spark.submit.deployMode", "spark.app.name", "spark.sql.shuffle.partitions",
            "spark.sql.files.maxPartitionBytes")
    values = []
    for key in keys:
        try:
            values.append(f"{key}={spark.conf.get(key, None)}")
        except Exception:  # a setting a Connect server does not expose
            values.append(f"{key}=?")
    return ("connect " if is_connect(spark) else "") + " ".join(values)
