"""The PySpark workers kraftlog runs in: an archive imported from is read again only when it changed; Arrow buffers
come from a pool that keeps the memory it was given."""

from __future__ import annotations

import importlib
import sys
import zipfile
import zipimport
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import kraftlog.spark
from kraftlog.spark.workers import lazy_zip_invalidation, on_worker, retaining_arrow_pool

_zip_caches = pytest.mark.skipif(sys.version_info >= (3, 12),
                                 reason="Python 3.12+ reads a zip archive's directory lazily itself (gh-103200)")


@pytest.fixture
def original_invalidation() -> Iterator[None]:
    """The process's ``zipimporter.invalidate_caches`` as it was (the test patches it)."""
    original = zipimport.zipimporter.invalidate_caches
    yield
    zipimport.zipimporter.invalidate_caches = original  # type: ignore[method-assign]


def _archive(path: Path, modules: dict[str, str]) -> None:
    with zipfile.ZipFile(path, "w") as z:
        for name, body in modules.items():
            z.writestr(f"{name}.py", body)


@_zip_caches
def test_an_unchanged_archive_is_read_once_and_a_changed_one_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, original_invalidation: None) -> None:
    archive = tmp_path / "lib.zip"
    _archive(archive, {"kl_zip_first": "VALUE = 1\n"})
    monkeypatch.syspath_prepend(str(archive))
    reads: list[str] = []
    read = zipimport._read_directory  # type: ignore[attr-defined]
    monkeypatch.setattr(zipimport, "_read_directory", lambda path: reads.append(path) or read(path))
    try:
        assert importlib.import_module("kl_zip_first").VALUE == 1
        assert lazy_zip_invalidation() and lazy_zip_invalidation()  # (a second call changes nothing)
        reads.clear()
        for _ in range(3):
            importlib.invalidate_caches()
        assert reads.count(str(archive)) == 1  # the first invalidation reads it, the archive unchanged since
        _archive(archive, {"kl_zip_first": "VALUE = 1\n", "kl_zip_second": "VALUE = 2\n"})
        importlib.invalidate_caches()
        assert reads.count(str(archive)) == 2
        assert importlib.import_module("kl_zip_second").VALUE == 2  # what the changed archive holds is found
    finally:
        for name in ("kl_zip_first", "kl_zip_second"):
            sys.modules.pop(name, None)
        sys.path_importer_cache.pop(str(archive), None)


def test_a_driver_is_left_as_it_is(original_invalidation: None) -> None:
    pool = pa.default_memory_pool().backend_name
    importlib.reload(kraftlog.spark)
    assert not on_worker()
    assert not getattr(zipimport.zipimporter.invalidate_caches, "_kraftlog_lazy", False)
    assert pa.default_memory_pool().backend_name == pool


@_zip_caches
def test_a_worker_that_loaded_kraftlog_reads_no_archive_again(spark: Any) -> None:
    """Each task of a worker asks ``importlib`` to invalidate its caches: once the worker has loaded kraftlog and
    invalidated once (recording what each archive was), none re-reads an archive (pyspark's, py4j's) unchanged."""

    def probe(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import kraftlog.spark  # noqa: F401  (as kraftlog's functions do in a worker)
        archives = [k for k, v in sys.path_importer_cache.items() if isinstance(v, zipimport.zipimporter)]
        importlib.invalidate_caches()  # (the next task's, in a worker Spark reuses)
        reads: list[str] = []
        read = zipimport._read_directory  # type: ignore[attr-defined]
        zipimport._read_directory = lambda path: reads.append(path) or read(path)  # type: ignore[attr-defined]
        try:
            importlib.invalidate_caches()
        finally:
            zipimport._read_directory = read  # type: ignore[attr-defined]
        for _ in batches:
            pass
        yield pa.RecordBatch.from_pylist([{"archives": len(archives), "reads": len(reads)}])

    frame = spark.range(4, numPartitions=4)
    schema = "archives long, reads long"
    rows = frame.mapInArrow(probe, schema).collect()
    if not any(r["archives"] for r in rows):
        pytest.skip("the workers import nothing from a zip archive (pyspark not from pyspark.zip)")
    assert [r["reads"] for r in rows] == [0, 0, 0, 0]


def test_workers_and_commands_allocate_arrow_buffers_from_a_retaining_pool(spark: Any) -> None:
    """A worker that loaded kraftlog builds its Arrow tables in jemalloc's pool (the system allocator's where pyarrow
    has none), not mimalloc's: ``retaining_arrow_pool``."""

    def probe(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import kraftlog.spark  # noqa: F401  (as kraftlog's functions do in a worker)
        for _ in batches:
            pass
        yield pa.RecordBatch.from_pylist([{"pool": pa.default_memory_pool().backend_name}])

    pools = {r["pool"] for r in spark.range(2, numPartitions=2).mapInArrow(probe, "pool string").collect()}
    assert pools == {_retaining()}


def test_a_pool_the_environment_chooses_is_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    before = pa.default_memory_pool()
    try:
        monkeypatch.setenv("ARROW_DEFAULT_MEMORY_POOL", "mimalloc")
        pa.set_memory_pool(pa.mimalloc_memory_pool())
        assert retaining_arrow_pool() == "mimalloc"
        monkeypatch.delenv("ARROW_DEFAULT_MEMORY_POOL")
        assert retaining_arrow_pool() == _retaining() == pa.default_memory_pool().backend_name
    finally:
        pa.set_memory_pool(before)


def _retaining() -> str:
    try:
        return pa.jemalloc_memory_pool().backend_name
    except NotImplementedError:
        return "system"
