"""The Python workers Spark runs kraftlog's functions in: what kraftlog changes there.

Before each task, a PySpark worker calls ``importlib.invalidate_caches()`` (``worker_util.setup_spark_files``), and
on Python 3.10 and 3.11 ``zipimport`` answers that by reading again the whole directory of every zip archive it
imported from (CPython gh-103200; 3.12 re-reads lazily): ``pyspark.zip`` and py4j's, once per package imported from
them, 16 times in a worker running kraftlog. That is most of a short task's cost: 200 one-row tasks on local[2] took
20.3 s in plain workers, 5.3 s in workers that loaded kraftlog (``benchmarks/bench_tasks.py``). So in a worker that
has loaded kraftlog an archive is read again only when it changed (its time, size or inode): the first task of a
worker pays, the tasks it runs after do not (Spark reuses a worker for the tasks that follow,
``spark.python.worker.reuse``).

And Arrow allocates from jemalloc there (``retaining_arrow_pool``): pyarrow's default, mimalloc, once a process holds
some 70 MB, took 160-230 ms to first write a fresh 14 MB buffer where jemalloc and the system's allocator took 9 ms
(Linux, pyarrow 26), and the workers build every output table in such buffers.
"""

from __future__ import annotations

import os
import sys
import zipimport
from collections.abc import Callable
from typing import Any

import pyarrow as pa

_MARK = "_kraftlog_lazy"


def _signature(path: str) -> tuple[int, int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_mtime_ns, st.st_size, st.st_ino


def lazy_zip_invalidation() -> bool:
    """Make ``zipimport.zipimporter.invalidate_caches`` read an archive's directory again only when the archive
    changed since this importer last read it (once per process; nothing on Python 3.12 and later, which reads it
    only when next used). Returns whether the process's invalidation is the lazy one."""
    if sys.version_info >= (3, 12):
        return False
    cls: Any = zipimport.zipimporter
    if getattr(cls.invalidate_caches, _MARK, False):
        return True
    original: Callable[[Any], None] = cls.invalidate_caches

    def invalidate_caches(self: Any) -> None:
        now = _signature(self.archive)
        if now is not None and getattr(self, _MARK, None) == now:
            return  # the same archive as this importer last read
        original(self)
        setattr(self, _MARK, now)

    invalidate_caches.__doc__ = original.__doc__
    setattr(invalidate_caches, _MARK, True)
    cls.invalidate_caches = invalidate_caches
    return True


def retaining_arrow_pool() -> str:
    """Make jemalloc (else the system's allocator) the process's default Arrow memory pool, unless
    ``ARROW_DEFAULT_MEMORY_POOL`` chooses one; returns the pool's backend.

    Measured on the 5M-record cluster's ingest (local[2], alternating): 81.2 and 84.2 s with mimalloc, 68.8 and
    70.9 s with jemalloc; the Python workers' CPU 132 -> 111 s, their peak memory 820 -> 755 MB."""
    if os.environ.get("ARROW_DEFAULT_MEMORY_POOL"):
        return pa.default_memory_pool().backend_name
    try:
        pool = pa.jemalloc_memory_pool()
    except NotImplementedError:  # (a pyarrow built without it)
        pool = pa.system_memory_pool()
    pa.set_memory_pool(pool)
    return pool.backend_name


def on_worker() -> bool:
    """Whether this process is a PySpark worker running a task (not a driver, not a notebook)."""
    files = sys.modules.get("pyspark.core.files")
    return bool(getattr(getattr(files, "SparkFiles", None), "_is_running_on_worker", False))


def prepare_worker() -> None:
    """What kraftlog changes in a PySpark worker when its functions are first loaded there (``kraftlog.spark``
    imports it): ``lazy_zip_invalidation``, ``retaining_arrow_pool``. Nothing elsewhere."""
    if on_worker():
        lazy_zip_invalidation()
        retaining_arrow_pool()


__all__ = ["lazy_zip_invalidation", "on_worker", "prepare_worker", "retaining_arrow_pool"]
