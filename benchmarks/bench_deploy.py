"""Wall time of the pipeline (ingest, reconstruct, analyze) on each deployment path, for the sample and the corpus.

Paths, each with real components on loopback (started here, as the tests start them):

* ``local``: ``kraftlog`` CLI, ``local[2]``, inputs and warehouse on local disk;
* ``s3``: the same, inputs and warehouse on an S3-compatible server (moto's);
* ``standalone``: ``spark-submit`` to a standalone master with two one-core workers, executors in the packed
  environment of ``make dist``, inputs and warehouse on S3;
* ``connect``: the jobs through ``SPARK_REMOTE`` to a Spark Connect server (``local[2]``), S3.

Each step is a separate process, as a scheduler runs them, so every figure includes Spark's start-up.

    .venv/bin/python benchmarks/bench_deploy.py --json out/bench-deploy.json [--paths local,s3] [--inputs sample]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

from common import ROOT, run_command, save_results

sys.path.insert(0, str(ROOT / "tests"))
from services import (
    connect_server,
    create_bucket,
    make_dist,
    moto_s3,
    spark_env,
    standalone_cluster,
    upload,
)

BIN = Path(sys.executable).parent
STEPS = ("ingest", "reconstruct", "analyze")
JOBS = {"ingest": "ingest.py", "reconstruct": "reconstruct.py", "analyze": "analytics.py"}


@contextmanager
def _services(paths: list[str], work: Path) -> Iterator[dict[str, Any]]:
    with ExitStack() as stack:
        out: dict[str, Any] = {}
        if set(paths) & {"s3", "standalone", "connect"}:
            out["s3"] = stack.enter_context(moto_s3(work))
            create_bucket(out["s3"], "bench")
        if "standalone" in paths:
            out["env"] = make_dist(work / "dist")
            (work / "standalone").mkdir()
            out["master"] = stack.enter_context(standalone_cluster(work / "standalone", workers=2))
        if "connect" in paths:
            (work / "connect").mkdir()
            out["remote"] = stack.enter_context(connect_server(work / "connect"))
        yield out


def pipeline(path: str, source: Path, name: str, svc: dict[str, Any], work: Path, profile: Path,
             java_options: str = "") -> dict[str, float]:
    """Seconds per step of one path on one input; ``java_options``: of every JVM of the application (its driver's,
    and on a cluster its executors'), as ``kraftlog jvm-archive`` prints them."""
    s3 = svc.get("s3", {})
    if path == "local":
        inputs, wh, env = str(source), str(work / f"wh-{name}-local"), spark_env()
    else:
        inputs, wh, env = f"s3://bench/{name}", f"s3://bench/wh-{name}-{path}", spark_env(s3)
    jvm = ["--conf", f"spark.driver.extraJavaOptions={java_options}",
           "--conf", f"spark.executor.extraJavaOptions={java_options}"] if java_options else []
    out: dict[str, float] = {}
    for step in STEPS:
        args = ["--warehouse", wh, "--profile", str(profile)] + ([inputs] if step == "ingest" else [])
        if path in ("local", "s3"):
            cmd = [str(BIN / "kraftlog"), step, *args]
        elif path == "standalone":
            env = {k: v for k, v in env.items() if k != "PYSPARK_PYTHON"}
            cmd = [str(BIN / "spark-submit"), "--master", svc["master"], "--archives", f"{svc['env']}#env",
                   "--conf", "spark.pyspark.python=./env/bin/python",
                   "--conf", f"spark.pyspark.driver.python={sys.executable}", "--conf", "spark.executor.memory=1500m",
                   *jvm, str(ROOT / "jobs" / JOBS[step]), *args]
        else:
            env = {**env, "SPARK_REMOTE": svc["remote"]}
            cmd = [sys.executable, str(ROOT / "jobs" / JOBS[step]), *args]
        out[step] = round(run_command(cmd, env, work)[0], 1)
    out["total"] = round(sum(out.values()), 1)
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--paths", default="local,s3,standalone,connect")
    ap.add_argument("--inputs", default="sample,corpus")
    ap.add_argument("--corpus", type=Path, default=ROOT.parent / "shared" / "corpus" / "real")
    ap.add_argument("--java-options", default="",
                    help="options of every JVM of the pipeline's applications (drivers; executors on a cluster), "
                         "e.g. what `kraftlog jvm-archive` prints; not of the Connect server")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    paths = args.paths.split(",")
    sources = {"sample": ROOT / "samples" / "scenario-a", "corpus": args.corpus}
    names = [n for n in args.inputs.split(",") if sources[n].exists()]
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="kraftlog-bench-deploy-") as tmp:
        work = Path(tmp)
        base = ('[spark]\nmaster = "local[2]"\nlog_level = "ERROR"\n[spark.conf]\n'
                '"spark.ui.enabled" = "false"\n"spark.ui.showConsoleProgress" = "false"\n'
                + (f'"spark.driver.extraJavaOptions" = "{args.java_options}"\n' if args.java_options else ""))
        profiles = {"sample": work / "sample.toml", "corpus": work / "corpus.toml"}
        profiles["sample"].write_text(base)
        # corpus clusters share tutorial ids: name them by their repository's folder too
        profiles["corpus"].write_text(base + '[identity]\ncluster = "{top}:{cluster.id}"\n')
        with _services(paths, work) as svc:
            for name in names:
                if "s3" in svc:
                    n = upload(svc["s3"], sources[name], f"s3://bench/{name}")
                    print(f"{name}: {n} files uploaded", flush=True)
                for path in paths:
                    r = pipeline(path, sources[name], name, svc, work, profiles[name],
                                 args.java_options if path != "connect" else "")
                    results[f"{name}/{path}"] = r
                    print(f"{name:7} {path:10} " + "  ".join(f"{k} {v:6.1f} s" for k, v in r.items()), flush=True)
    results["machine"] = {"cores": os.cpu_count()}
    results["java_options"] = args.java_options
    save_results(args.json, results)


if __name__ == "__main__":
    main()
