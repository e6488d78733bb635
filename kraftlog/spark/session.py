"""Build a SparkSession from a ``Config`` (the ``[spark]`` section)."""

from __future__ import annotations

import os
import sys

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
