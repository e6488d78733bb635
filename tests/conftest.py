"""Shared fixtures: the ``../shared`` reference material and one SparkSession for the whole run."""

from __future__ import annotations

import contextlib
import os
import sys
import tracemalloc
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

T = TypeVar("T")
ROOT = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("KRAFTLOG_SHARED", ROOT.parent / "shared"))
CORPUS = SHARED / "corpus"
SCENARIO_A = SHARED / "scenarios" / "A"
KAFKA = SHARED / "kafka"

sys.path.insert(0, str(Path(__file__).parent))  # tests/encoder.py and helpers


def examples(n: int) -> int:
    """Hypothesis examples of a Spark-built property: ``n`` (what CI runs) times ``KRAFTLOG_EXAMPLES`` (``make
    proptest`` runs many more)."""
    return n * max(1, int(os.environ.get("KRAFTLOG_EXAMPLES", "1")))


@contextlib.contextmanager
def split_replays(parts: int = 3) -> Iterator[None]:
    """Every cluster's replay split by topic into ``parts`` parts (``kraftlog.spark.replay.Layout``), however small
    its log (as a big cluster's is on a machine of ``parts`` cores)."""
    import kraftlog.spark.replay as replay_module

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(replay_module, "SPLIT_OFFSETS", 1)
        mp.setattr(replay_module, "default_parallelism", lambda spark: parts)
        yield


def load_job(name: str) -> Any:
    """A spark-submit job of ``jobs/`` (``ingest``, ``report``, ...) as a module, to call its ``main(argv)``."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"job_{name}", ROOT / "jobs" / f"{name}.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def with_peak(call: Callable[[], T]) -> tuple[T, int]:
    """``call()``'s result and the peak of the memory it allocated (bytes, as ``tracemalloc`` counts them)."""
    tracemalloc.start()
    try:
        out = call()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return out, peak


def need(path: Path) -> Path:
    """Skip the calling test, with the reason, when a piece of ``../shared`` is not there."""
    if not path.exists():
        pytest.skip(f"reference material not available: {path} (tests read ../shared when it is present)")
    return path


@pytest.fixture(scope="session")
def shared() -> Path:
    return need(SHARED)


@pytest.fixture(scope="session")
def scenario_a() -> Path:
    return need(SCENARIO_A)


@pytest.fixture(scope="session")
def corpus() -> Path:
    return need(CORPUS)


@pytest.fixture(scope="session")
def kafka_ref() -> Path:
    return need(KAFKA)


@pytest.fixture(scope="session")
def spark():  # type: ignore[no-untyped-def]
    """One local SparkSession for the whole run, or for each of ``make test``'s worker processes (two cores, few
    shuffle partitions).

    Its expressions are interpreted, not compiled (``spark.sql.codegen.factoryMode=NO_CODEGEN``, Spark's own fallback
    path, same results): the tests' inputs are a few rows, where compiling every projection with Janino is most of a
    query's cost (test_increments: 568 s compiled, 473 s interpreted). Its JVM stops the JIT at C1 with the serial
    collector (``SHORT_JVM``, as the JVMs the tests start): on test_history and test_analytics the same wall time
    (176 and 180 s) for 213 instead of 271 CPU-seconds, the C2 compiler's threads' work (with ``make test``'s two
    workers the suite's wall time did not move measurably: 26:25 and 26:26, one run each). The jobs the tests start
    as processes (``make run``, spark-submit, the DAG, Spark Connect) compile as production does, and their tables are
    compared with this session's."""
    pytest.importorskip("pyspark")
    from services import SHORT_JVM

    from kraftlog.config import Config
    from kraftlog.spark.session import build_session

    config = Config.load(spark={"master": "local[2]", "app_name": "kraftlog-tests", "log_level": "ERROR",
                                "conf": {"spark.sql.shuffle.partitions": "4", "spark.ui.enabled": "false",
                                         "spark.ui.showConsoleProgress": "false", "spark.driver.memory": "2g",
                                         "spark.driver.extraJavaOptions": SHORT_JVM,
                                         "spark.sql.codegen.factoryMode": "NO_CODEGEN"}})
    session = build_session(config)
    yield session
    session.stop()


SAMPLE = ROOT / "samples" / "scenario-a"


@pytest.fixture(scope="session")
def sample_warehouse(spark, tmp_path_factory):  # type: ignore[no-untyped-def]
    """The bundled sample (scenario A) ingested once into a warehouse: (path, IngestResult)."""
    from kraftlog.config import Config
    from kraftlog.spark.ingest import ingest

    wh = tmp_path_factory.mktemp("sample-wh")
    return wh, ingest(spark, [str(SAMPLE)], Config.load(warehouse={"path": str(wh)}))


@pytest.fixture(scope="session")
def sample(spark, sample_warehouse):  # type: ignore[no-untyped-def]
    """The sample warehouse with its histories built by ``kraftlog reconstruct``: (path, rows per table)."""
    from click.testing import CliRunner
    from deltalake import DeltaTable

    from kraftlog.cli import main
    from kraftlog.state.entities import history_tables

    wh, _ = sample_warehouse
    out = CliRunner().invoke(main, ["reconstruct", "--warehouse", str(wh)])
    assert out.exit_code == 0, out.output
    assert "history rows" in out.output
    names = [t.name for t in history_tables().values()]
    return wh, {t: DeltaTable(str(wh / t)).count() for t in [*names, "replay_ranges"]}


@pytest.fixture(scope="session")
def sample_events(spark, sample):  # type: ignore[no-untyped-def]
    """The sample warehouse with its histories verified (``snapshot_checks``) and its event tables built by ``kraftlog
    analyze``: (path, CLI output of analyze)."""
    from click.testing import CliRunner

    from kraftlog.cli import main

    wh, _ = sample
    checked = CliRunner().invoke(main, ["verify", "--warehouse", str(wh), "--quiet"])
    assert checked.exit_code == 0, checked.output
    out = CliRunner().invoke(main, ["analyze", "--warehouse", str(wh)])
    assert out.exit_code == 0, out.output
    return wh, out.output


# The test files that take longest, longest first: about 950 s (increments), 420 (deploy), 390 (airflow_dag), 190
# (ingest), 170 (history), 140 (concurrency), 130 (s3), 100 (history_corpus), 90 (class_archive), summed per file
# from CI's ``--durations`` with two workers. ``make test`` hands whole files to its workers in collection order
# (``--dist loadfile --no-loadscope-reorder``), so these go first and the short files fill in behind them, for the
# two workers to end together; xdist's default order (files with more tests first) put deploy, s3 and concurrency
# (4 tests each) among the last.
RUN_FIRST = ("test_increments.py", "test_deploy.py", "test_airflow_dag.py", "test_ingest.py", "test_history.py",
             "test_concurrency.py", "test_s3.py", "test_history_corpus.py", "test_class_archive.py")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test that uses the SparkSession (directly or through a fixture) is marked ``spark``, so
    ``-m 'not spark'`` runs exactly the tests that start no Spark in this process; the files of ``RUN_FIRST`` are
    moved to the front, in its order (each file's tests keep theirs)."""
    for item in items:
        if "spark" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.spark)
    rank = {name: k for k, name in enumerate(RUN_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(RUN_FIRST)))


def joined_sample_log() -> tuple[bytes, str]:
    """node-1's segments of the sample as one segment (the offsets go on): many batches, control batches, epochs."""
    parts = sorted(SAMPLE.glob("node-1/__cluster_metadata-0/*.log"))
    return b"".join(p.read_bytes() for p in parts), f"{0:020d}.log"


def damaged_logs(data: bytes) -> list[tuple[str, bytes]]:
    """The joined log, and versions of it with what real damage does, at batches spread over it: a flipped bit
    under the CRC, a raised epoch and a moved base offset (which the CRC does not cover), a torn tail."""
    from kraftlog.wire.columns import read_columns

    whole = read_columns(data, "x.log")
    out = [("clean", data), ("torn tail", data[:-5])]
    for b in range(3, len(whole.positions), max(1, len(whole.positions) // 7)):
        at = int(whole.positions[b])
        flipped = bytearray(data)
        flipped[at + 70] ^= 0x10
        raised = bytearray(data)
        raised[at + 12:at + 16] = (int(whole.headers["partition_leader_epoch"][b]) + 1).to_bytes(4, "big")
        moved = bytearray(data)
        moved[at:at + 8] = (int(whole.headers["base_offset"][b]) + 1).to_bytes(8, "big")
        out += [(f"crc {b}", bytes(flipped)), (f"epoch {b}", bytes(raised)), (f"offset {b}", bytes(moved))]
    return out
