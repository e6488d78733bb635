"""The whole pipeline on object storage: inputs, warehouse and report on S3 (moto's server on loopback).

Only the standard S3 API is spoken, configured by the standard ``AWS_*`` variables; no Hadoop connector,
no jar: executors read and write through pyarrow, the driver commits with delta-rs.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from click.testing import CliRunner
from conftest import SAMPLE
from services import assert_same_tables, create_bucket, environment, moto_s3, s3_requests, upload

pytestmark = pytest.mark.spark
T = TypeVar("T")

@pytest.fixture(scope="module")
def moto_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("moto")


@pytest.fixture(scope="module")
def s3(moto_dir: Path) -> Iterator[dict[str, str]]:
    with moto_s3(moto_dir) as env, environment(env):
        create_bucket(env, "kraftlog")
        yield env


def settled(read: Callable[[], list[T]], wait: float = 0.3) -> list[T]:
    """What ``read`` returns once two reads ``wait`` seconds apart agree."""
    last = read()
    while True:
        time.sleep(wait)
        now = read()
        if now == last:
            return now
        last = now


def run(*args: str) -> Any:
    from kraftlog.cli import main

    out = CliRunner().invoke(main, list(args))
    assert out.exit_code == 0, (args, out.output, out.exception)
    return out


def test_the_pipeline_on_s3_equals_the_local_run(spark: Any, sample_events: Any, s3: dict[str, str],
                                                 moto_dir: Path) -> None:
    from kraftlog.storage import Storage

    local_wh, _ = sample_events
    assert upload(s3, SAMPLE, "s3://kraftlog/archive/scenario-a") > 30
    wh = "s3://kraftlog/warehouse"
    first = run("ingest", "s3a://kraftlog/archive", "--warehouse", wh)  # Hadoop's scheme name is taken as s3://
    assert "errors 0" in first.output and "[delta-rs]" in first.output
    assert "new rows 0" in run("ingest", "s3://kraftlog/archive", "--warehouse", wh).output  # idempotent
    run("reconstruct", "--warehouse", wh)
    assert "with differences: 0" in run("verify", "--warehouse", wh, "--quiet").output
    run("analyze", "--warehouse", wh)
    report = run("report", "--warehouse", wh, "--out", "s3://kraftlog/reports/scenario-a.html")
    assert "s3://kraftlog/reports/scenario-a.html" in report.output
    # every object kraftlog wrote (archive copies, staged Parquet, manifests, leases, the report) is one PUT: no
    # multipart upload's three requests for a small file, no folder marker (and its bucket check) before it, nor
    # after a delete (a manifest committed, a run's scratch files)
    sent = s3_requests(moto_dir / "moto.log")
    assert sum(m == "PUT" for m, _ in sent) > 300 and not any("?uploads" in p for _, p in sent)
    assert [p for m, p in sent if m == "PUT" and p.endswith("/")] == []
    # nor is a Parquet file (a table's, a run's staging) asked its size before it is read: its size is known
    assert [p for m, p in sent if m == "HEAD" and p.endswith(".parquet")] == []

    storage = Storage.from_environment(environ=s3)
    page = storage.read_bytes("s3://kraftlog/reports/scenario-a.html").decode()
    assert page.startswith("<!DOCTYPE html>") and "<td>unclean</td>" in page
    assert assert_same_tables(local_wh, wh, s3) > 40
    # the notebooks' pandas reader takes the S3 warehouse as it is
    from kraftlog.analytics.frames import read_table

    assert len(read_table(wh, "leader_elections")) == len(read_table(local_wh, "leader_elections")) > 0
    # the lease objects live beside the tables, on the same storage
    assert storage.is_dir("s3://kraftlog/warehouse/_kraftlog/lease")
    # and so does the history build's commit mark: put before its commits, deleted after the last
    mark = "/kraftlog/warehouse/_kraftlog/committing/reconstruct.json"
    assert [m for m, p in sent if p == mark and m != "GET"] == ["PUT"]  # (each check for it: one GET)
    assert not storage.exists("s3:/" + mark)


def test_a_read_is_one_get_and_a_delete_one_request(s3: dict[str, str], moto_dir: Path) -> None:
    """Storage.read_bytes on S3: whole, or from ``start`` up to ``size`` (a live segment is read as it was listed),
    in one GET each (no HEAD first); a range past an object's end reads what is there; a missing one is
    FileNotFoundError (ingest leaves out a file removed since it was listed). Deletes leave no folder marker."""
    from kraftlog.storage import Storage

    storage = Storage.from_environment(environ=s3)
    uri = "s3://kraftlog/reads/00000000000000000000.log"
    storage.write_bytes(uri, b"0123456789")
    before = len(s3_requests(moto_dir / "moto.log"))
    assert [storage.read_bytes(uri), storage.read_bytes(uri, 6, 2), storage.read_bytes(uri, 20, 8)] == [
        b"0123456789", b"2345", b"89"]
    sent = settled(lambda: s3_requests(moto_dir / "moto.log")[before:])  # (a request is logged once answered)
    assert [m for m, _ in sent] == ["GET"] * 3, sent
    assert storage.read_bytes(uri, 5, 5) == b""
    with pytest.raises(FileNotFoundError):
        storage.read_bytes("s3://kraftlog/reads/gone.log", 10)
    # a delete is one request (no marker of the folder left after it); a tree goes with one listing and one request
    storage.write_bytes("s3://kraftlog/reads/a/b/x.json", b"{}")
    before = len(s3_requests(moto_dir / "moto.log"))
    storage.delete(uri)
    storage.delete_tree("s3://kraftlog/reads")
    sent = settled(lambda: s3_requests(moto_dir / "moto.log")[before:])
    assert [m for m, _ in sent] == ["POST", "GET", "POST"], sent  # (obstore deletes with S3's DeleteObjects)
    assert not storage.exists("s3://kraftlog/reads/a/b/x.json") and not storage.exists(uri)


def test_a_warehouse_on_s3_is_checked_as_a_local_one_is(s3: dict[str, str]) -> None:
    """check_warehouse on S3: nothing under the prefix, a new warehouse; an object at the warehouse's own key (S3
    lists it as an empty folder) refused as a local file is (and as an input); other things under it refused, named;
    kraftlog's tables under it, a warehouse."""
    from kraftlog.spark.store import NotAWarehouseError, check_warehouse
    from kraftlog.storage import Storage
    from kraftlog.wire.discover import NoInputError, find_data_dirs

    storage = Storage.from_environment(environ=s3)
    check_warehouse(storage, "s3://kraftlog/check/new")
    storage.write_bytes("s3://kraftlog/check/file", b"x")
    with pytest.raises(NotAWarehouseError, match="a file, not a directory"):
        check_warehouse(storage, "s3://kraftlog/check/file")
    with pytest.raises(NoInputError, match="s3://kraftlog/check/file: a file, not a directory"):  # (an input, too)
        find_data_dirs(["s3://kraftlog/check/file"], storage.lister())
    storage.write_bytes("s3://kraftlog/check/other/q3.csv", b"a,b\n")
    with pytest.raises(NotAWarehouseError, match=r"q3\.csv"):
        check_warehouse(storage, "s3://kraftlog/check/other")
    storage.write_bytes("s3://kraftlog/check/ours/_kraftlog/lease", b"{}")
    check_warehouse(storage, "s3://kraftlog/check/ours")
    # a new warehouse in a bucket that is not there: said before the run (it was the lease's PUT's NoSuchBucket
    # traceback, after Spark had started), through the CLI too (the module's environment names the server)
    from kraftlog.cli import main
    from kraftlog.storage import StorageError

    with pytest.raises(StorageError, match="s3://typo/wh: the bucket s3://typo is not there"):
        check_warehouse(storage, "s3://typo/wh")
    with pytest.raises(StorageError, match="s3://typo/reports: the bucket s3://typo is not there"):
        storage.folder("s3://typo/reports")  # (a folder of report pages: `run --report-dir` checks it first)
    assert storage.folder("s3a://kraftlog/reports/new") == "s3://kraftlog/reports/new"
    cli = CliRunner().invoke(main, ["ingest", str(SAMPLE / "node-2"), "--warehouse", "s3://typo/wh"])
    assert cli.exit_code == 1 and "the bucket s3://typo is not there" in cli.output, cli.output


def test_executors_read_parquet_with_no_request_for_its_size(spark: Any, s3: dict[str, str], moto_dir: Path) -> None:
    """Where Spark has no connector for the store, executors read the Parquet files of a table (or of a run's
    staging) with pyarrow, handed each file's size (from the Delta log, a listing or the file's staging): a file
    is read by GETs alone, with no HEAD first: a small one in one GET, as the driver reads a small staged file."""
    import pyarrow as pa
    from pyspark.sql.pandas.types import from_arrow_schema

    from kraftlog.spark.staging import staged_rows, write_parquet
    from kraftlog.spark.store import read_parquet_with_pyarrow
    from kraftlog.storage import Storage

    storage = Storage.from_environment(environ=s3)
    data = pa.table({"cluster_id": ["a", "b", "c"], "n": [1, 2, 3]})
    files = [write_parquet("t", "s3://kraftlog/parquet", data, storage, f"part={i}/") for i in range(4)]
    before = len(s3_requests(moto_dir / "moto.log"))
    read = read_parquet_with_pyarrow(spark, [f.spec for f in files], from_arrow_schema(data.schema), storage)
    assert sorted(map(tuple, read.collect())) == sorted(tuple(r.values()) for r in data.to_pylist() * 4)
    assert staged_rows(files[:1], storage).to_pylist() == data.to_pylist()
    sent = settled(lambda: s3_requests(moto_dir / "moto.log")[before:])
    assert [m for m, _ in sent] == ["GET"] * (4 + 1), sent
    # a large file is read by ranges (here every file counts as large): a footer, then the columns, no HEAD
    before = len(s3_requests(moto_dir / "moto.log"))
    ranged = read_parquet_with_pyarrow(spark, [f.spec for f in files], from_arrow_schema(data.schema), storage, 0)
    assert ranged.count() == 12
    sent = settled(lambda: s3_requests(moto_dir / "moto.log")[before:])
    assert {m for m, _ in sent} == {"GET"} and len(sent) >= 2 * 4, sent
