"""Spark: the session, the ingest, replay and event builds, the Delta stores. Loaded in a PySpark worker (by the
functions kraftlog runs there), it first prepares the worker (``kraftlog.spark.workers``)."""

from kraftlog.spark.workers import prepare_worker

prepare_worker()
