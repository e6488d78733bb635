"""A class-data archive of the JVM classes a kraftlog run loads (Java's AppCDS), for a driver that starts each hour.

A scheduled hour that is an application of its own (``kraftlog run`` from cron or Airflow, a ``spark-submit``
per hour) starts a JVM that loads some 18,000 classes of Spark's jars, parses and verifies each, before the hour's
work begins; its JIT then compiles Catalyst's code for queries it runs once. A class-data archive holds those
classes already parsed and verified: the JVM maps it at start-up (``-XX:SharedArchiveFile``). Stopping the JIT at
its first tier (``-XX:TieredStopAtLevel=1``) spends less of the hour compiling code that runs once, and more of a
full build's running slower code: use both for the hourly application, neither for a rebuild
(``Archive.options``).

``write_archive`` runs kraftlog's pipeline on a data directory (the bundled sample) in a JVM of its own that lists
the classes it loads (``-XX:DumpLoadedClassList``), then has the same Java dump them, with the same class path, into
the archive. An archive matches one Java build and one set of Spark jars: where either changed, the JVM starts
without it (``-Xshare:auto``, Java's default), so a stale archive costs the time it saved, nothing else, and kraftlog's
session says so as it starts (``unused_archive``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kraftlog.errors import KraftlogError, UsageError

# the JVM options of a driver started for one hour's run, after the archive's own
HOURLY_OPTIONS = ("-XX:TieredStopAtLevel=1",)


@dataclass(frozen=True)
class Archive:
    """An archive written: where, how many classes it holds, and the driver's Java options that use it."""

    path: Path
    classes: int
    java: str

    @property
    def options(self) -> str:
        """The driver's Java options of an hourly application (``spark.driver.extraJavaOptions``)."""
        return " ".join((f"-XX:SharedArchiveFile={self.path}", *HOURLY_OPTIONS))


def write_archive(out: Path, inputs: list[str], python: str = sys.executable, timeout_s: float = 1800) -> Archive:
    """Write the class-data archive ``out`` of the classes a run of ``inputs`` loads (its pipeline in a child
    process, on a warehouse of its own that is then removed), dumped by the Java that ran it."""
    from kraftlog.config import Config
    from kraftlog.storage import normalize
    from kraftlog.wire.discover import find_data_dirs

    out = out.resolve()
    if out.is_dir():
        raise UsageError(f"{out} is a directory: give the archive's file name (e.g. {out / 'kraftlog.jsa'})")
    find_data_dirs([normalize(p) for p in inputs], Config.load().storage.lister())  # none: said before a JVM starts
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="kraftlog-classes-") as tmp:
        work = Path(tmp)
        classes, facts = work / "classes.lst", work / "jvm.json"
        _run([python, "-m", "kraftlog.spark.class_archive", str(classes), str(facts), str(work / "warehouse"),
              *inputs], "the run that lists the classes", timeout_s)
        jvm = json.loads(facts.read_text())
        java = str(Path(jvm["java_home"]) / "bin" / "java")
        aside = out.with_name(out.name + ".partial")  # a dump that fails leaves no half archive, under either name
        try:
            _run([java, "-Xshare:dump", f"-XX:SharedClassListFile={classes}", f"-XX:SharedArchiveFile={aside}",
                  "-cp", jvm["class_path"], *jvm["module_options"]], "the class-data dump", timeout_s)
            aside.replace(out)
        finally:
            aside.unlink(missing_ok=True)
        listed = sum(1 for line in classes.read_text().splitlines() if line and not line.startswith("#"))
    return Archive(out, listed, java)


def _run(command: list[str], what: str, timeout_s: float) -> None:
    """Run ``command`` with this environment, but a Spark Connect server's address (``SPARK_REMOTE``: the classes
    listed are those of a JVM started here); its failure a ``UsageError`` with the end of what it printed."""
    env = {k: v for k, v in os.environ.items() if k not in ("SPARK_REMOTE", "SPARK_CONNECT_MODE_ENABLED")}
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, check=False, env=env)
    if done.returncode != 0:
        tail = "\n".join((done.stderr or done.stdout).strip().splitlines()[-15:])
        raise UsageError(f"{what} failed (exit status {done.returncode}): {' '.join(command[:4])} ...\n{tail}")


def unused_archive(spark: Any) -> str | None:
    """The class-data archive this session's driver JVM was asked to start from (``-XX:SharedArchiveFile``) where
    it did not (written for another Java or other Spark jars: Java's ``-Xshare:auto`` then starts without any), else
    None (none asked for, or mapped)."""
    asked = [a.split("=", 1)[1] for a in _arguments(spark) if a.startswith("-XX:SharedArchiveFile=")]
    if not asked:
        return None
    java = spark.sparkContext._jvm.java
    bean = java.lang.management.ManagementFactory.getPlatformMXBean(
        java.lang.Class.forName("com.sun.management.HotSpotDiagnosticMXBean"))
    return None if str(bean.getVMOption("UseSharedSpaces").getValue()) == "true" else asked[-1]


def _arguments(spark: Any) -> list[str]:
    """The options the session's driver JVM was started with."""
    runtime = spark.sparkContext._jvm.java.lang.management.ManagementFactory.getRuntimeMXBean()
    return [str(a) for a in runtime.getInputArguments()]


def _record(classes: str, facts: str, warehouse: str, inputs: list[str]) -> None:
    """(In the child process.) Run the pipeline on ``inputs`` twice (a first build, then an hour with nothing new)
    in a local session whose JVM lists the classes it loads into ``classes``; write that JVM's Java home, class path
    and module options to ``facts``."""
    from kraftlog.config import Config
    from kraftlog.spark.pipeline import run_pipeline
    from kraftlog.spark.session import build_session

    config = Config.load(warehouse={"path": warehouse}, spark={
        "master": "local[2]", "log_level": "ERROR",
        "conf": {"spark.driver.extraJavaOptions": f"-XX:DumpLoadedClassList={classes}",
                 "spark.ui.showConsoleProgress": "false"}})
    spark = build_session(config)
    for _ in range(2):
        run_pipeline(spark, config, inputs, echo=lambda _: None)
    system = spark.sparkContext._jvm.java.lang.System  # type: ignore[union-attr]
    Path(facts).write_text(json.dumps({
        "java_home": system.getProperty("java.home"), "class_path": system.getProperty("java.class.path"),
        "module_options": [a for a in _arguments(spark) if a.startswith(("--add-modules", "--add-exports"))]}))
    spark.stop()


if __name__ == "__main__":
    try:
        _record(sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:])
    except KraftlogError as e:  # the error alone, for the parent's message
        sys.exit(f"error: {e}")
