"""The whole pipeline on object storage: inputs, warehouse and report on S3 (moto's server on loopback).

Only the standard S3 API is spoken, configured by the standard ``AWS_*`` variables; no Hadoop connector,
no jar: executors read and write through pyarrow, the driver commits with delta-rs.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from conftest import SAMPLE
from services import assert_same_tables, create_bucket, environment, moto_s3, s3_requests, upload

pytestmark = pytest.mark.spark

@pytest.fixture(scope="module")
def moto_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("moto")


@pytest.fixture(scope="module")
def s3(moto_dir: Path) -> Iterator[dict[str, str]]:
    with moto_s3(moto_dir) as env, environment(env):
        create_bucket(env, "kraftlog")
        yield env


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
    # multipart upload's three requests for a small file, no folder marker (and its bucket check) before it. (pyarrow
    # leaves a marker of the folder of a key it deletes: only kraftlog's scratch folders, once a run.)
    sent = s3_requests(moto_dir / "moto.log")
    assert sum(m == "PUT" for m, _ in sent) > 300 and not any("?uploads" in p for _, p in sent)
    folders = {p for m, p in sent if m == "PUT" and p.endswith("/")}
    assert folders <= {"/kraftlog/warehouse/_kraftlog/pending/", "/kraftlog/warehouse/_kraftlog/staging/"}, folders

    storage = Storage.from_environment(environ=s3)
    page = storage.read_bytes("s3://kraftlog/reports/scenario-a.html").decode()
    assert page.startswith("<!DOCTYPE html>") and "<td>unclean</td>" in page
    assert assert_same_tables(local_wh, wh, s3) > 40
    # the notebooks' pandas reader takes the S3 warehouse as it is
    from kraftlog.analytics.frames import read_table

    assert len(read_table(wh, "leader_elections")) == len(read_table(local_wh, "leader_elections")) > 0
    # the lease objects live beside the tables, on the same storage
    assert storage.is_dir("s3://kraftlog/warehouse/_kraftlog/lease")
