"""``kraftlog jvm-archive``: a class-data archive an hourly application's driver JVM starts from, through the CLI's
profile and through spark-submit alike. Each run below asks for the archive with ``-Xshare:on`` (the JVM refuses to
start when it cannot map it) and logs where each class came from."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import ROOT, SAMPLE
from services import run_ok, spark_env

from kraftlog.cli import main
from kraftlog.errors import UsageError
from kraftlog.spark.class_archive import write_archive
from kraftlog.wire.discover import NoInputError

pytestmark = [pytest.mark.slow, pytest.mark.spark]

BIN = Path(sys.executable).parent


@pytest.fixture(scope="module")
def archive(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("jvm") / "kraftlog.jsa"
    with pytest.MonkeyPatch.context() as mp:  # a Spark Connect server's address: not the JVM whose classes are listed
        mp.setenv("SPARK_REMOTE", "sc://127.0.0.1:9")
        written = CliRunner().invoke(main, ["jvm-archive", str(out), str(SAMPLE)])
    assert written.exit_code == 0, written.output
    assert f"-XX:SharedArchiveFile={out} -XX:TieredStopAtLevel=1" in written.output
    assert out.stat().st_size > 10 << 20 and not out.with_name(out.name + ".partial").exists()
    return out


def _shared(log: Path) -> tuple[int, int]:
    """Of the classes of jars (and Java's modules) the JVM that wrote ``log`` loaded (``-Xlog:class+load``): how
    many came from the archive, how many from the jars themselves. (Lambdas and generated classes are made at run
    time, in or out of an archive.)"""
    sources = [ln.split(" source: ", 1)[1] for ln in log.read_text().splitlines() if " source: " in ln]
    return (sum(s.startswith("shared objects file") for s in sources),
            sum(s.startswith(("file:", "jar:", "jrt:")) for s in sources))


def _options(archive: Path, log: Path) -> str:
    return f"-Xshare:on -XX:SharedArchiveFile={archive} -XX:TieredStopAtLevel=1 -Xlog:class+load=info:file={log}"


def test_an_hourly_run_started_from_the_archive_loads_spark_from_it(archive: Path, tmp_path: Path) -> None:
    log = tmp_path / "classes.log"
    profile = tmp_path / "hourly.toml"
    profile.write_text(f'[spark]\nmaster = "local[2]"\n[spark.conf]\n"spark.driver.extraJavaOptions" = '
                       f'"{_options(archive, log)}"\n')
    out = run_ok([str(BIN / "kraftlog"), "run", str(SAMPLE), "--warehouse", str(tmp_path / "wh"), "--profile",
                  str(profile), "--quiet"], spark_env(), tmp_path)
    assert "errors 0" in out and "class-data archive" not in out
    shared, read = _shared(log)
    assert shared > 10_000 and read < 0.1 * shared, (shared, read)


def test_a_driver_that_did_not_start_from_its_archive_says_so(tmp_path: Path) -> None:
    profile = tmp_path / "stale.toml"  # an archive not there (as one written for another Java is not mapped either)
    profile.write_text(f'[spark]\nmaster = "local[1]"\n[spark.conf]\n"spark.driver.extraJavaOptions" = '
                       f'"-XX:SharedArchiveFile={tmp_path / "gone.jsa"} -XX:TieredStopAtLevel=1"\n')
    out = run_ok([str(BIN / "kraftlog"), "ingest", str(SAMPLE), "--warehouse", str(tmp_path / "wh"), "--profile",
                  str(profile), "--quiet"], spark_env(), tmp_path)
    assert (f"the driver's JVM did not start from the class-data archive {tmp_path / 'gone.jsa'} (written for "
            "another Java or other Spark jars, or not there): write it again with `kraftlog jvm-archive`") in out
    assert "errors 0" in out


def test_spark_submit_starts_a_job_from_the_archive(archive: Path, tmp_path: Path) -> None:
    log = tmp_path / "classes.log"
    # as the DAG's SparkSubmitOperator gives them (--driver-java-options is the same setting)
    out = run_ok([str(BIN / "spark-submit"), "--master", "local[2]",
                  "--conf", f"spark.driver.extraJavaOptions={_options(archive, log)}",
                  str(ROOT / "jobs" / "ingest.py"), "--warehouse", str(tmp_path / "wh"), str(SAMPLE)],
                 spark_env(), tmp_path)
    assert "errors 0" in out and "class-data archive" not in out
    shared, read = _shared(log)
    assert shared > 10_000 and read < 0.1 * shared, (shared, read)


def test_an_archive_that_cannot_be_written_says_why(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="is a directory"):
        write_archive(tmp_path, [str(SAMPLE)])
    (tmp_path / "nothing").mkdir()
    with pytest.raises(NoInputError, match="no KRaft data directory"):  # before any JVM starts
        write_archive(tmp_path / "k.jsa", [str(tmp_path / "nothing")])
    assert not (tmp_path / "k.jsa").exists()


def test_a_step_that_fails_is_said_with_the_end_of_what_it_printed(monkeypatch: pytest.MonkeyPatch) -> None:
    from kraftlog.spark.class_archive import _run

    monkeypatch.setenv("SPARK_REMOTE", "sc://127.0.0.1:9")
    _run([sys.executable, "-c", "import os, sys; sys.exit('SPARK_REMOTE' in os.environ)"], "the check", 60)
    with pytest.raises(UsageError, match=r"(?s)the class-data dump failed \(exit status 1\): .*no such archive"):
        _run([sys.executable, "-c", "import sys; sys.exit('no such archive')"], "the class-data dump", 60)
