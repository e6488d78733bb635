"""Build a SparkSession from a ``Config`` (the ``[spark]`` section)."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Callable

from pyspark.sql import SparkSession

from kraftlog.config import Config


def build_session(config: Config) -> SparkSession:
    """The session for ``config``; Python workers use this interpreter unless PYSPARK_PYTHON says otherwise."""
    spark_conf = config.spark
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = SparkSession.builder.appName(spark_conf.get("app_name", "kraftlog"))
    if spark_conf.get("master"):
        builder = builder.master(spark_conf["master"])
    for key, value in spark_conf.get("conf", {}).items():
        builder = builder.config(key, str(value))
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(spark_conf.get("log_level", "WARN"))
    return spark


def job_parser(description: str, extra: Callable[[argparse.ArgumentParser], None] | None = None
               ) -> argparse.ArgumentParser:
    """The argument parser of a spark-submit job: ``--conf``, ``--warehouse`` and the job's own (``extra``)."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--conf", help="TOML profile (conf/local.toml, conf/cluster.toml)")
    ap.add_argument("--warehouse", help="where the Delta tables live (overrides the profile)")
    if extra is not None:
        extra(ap)
    return ap


def job_arguments(description: str, argv: list[str] | None = None,
                  extra: Callable[[argparse.ArgumentParser], None] | None = None
                  ) -> tuple[argparse.Namespace, Config, SparkSession]:
    """The parsed arguments of a spark-submit job, its config and the session."""
    args = job_parser(description, extra).parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    config = Config.load(args.conf, **({"warehouse": {"path": args.warehouse}} if args.warehouse else {}))
    return args, config, build_session(config)
