"""Profiles and storage options: unknown keys are errors naming the key; s3a:// is s3://."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kraftlog.config import Config, ProfileError
from kraftlog.storage import Storage, normalize

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("profile", sorted((ROOT / "conf").glob("*.toml")), ids=lambda p: p.name)
def test_the_shipped_profiles_load(profile: Path) -> None:
    Config.load(profile)


@pytest.mark.parametrize(("text", "key"), [
    ("[warehouse]\npaht = 'x'\n", "'warehouse.paht'"),
    ("[sparkk]\nmaster = 'local'\n", "'sparkk'"),
    ("[identity]\n[[identity.override]]\nprefx = 'a'\n", "'prefx'"),
    ("[storage]\nendpoint = 'http://x'\n", "endpoint"),
])
def test_an_unknown_key_is_an_error_naming_it(tmp_path: Path, text: str, key: str) -> None:
    path = tmp_path / "p.toml"
    path.write_text(text)
    with pytest.raises(ProfileError) as e:
        Config.load(path).storage  # noqa: B018 (storage options are checked when used)
    assert key in str(e.value)
    assert str(path) in str(e.value) or "[storage]" in str(e.value)


def test_a_wrong_type_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "p.toml"
    path.write_text("[warehouse]\nlease_wait_seconds = 'soon'\n")
    with pytest.raises(ProfileError, match="lease_wait_seconds must be float"):
        Config.load(path)


def test_storage_options_come_from_the_environment_and_the_profile_wins(tmp_path: Path) -> None:
    env = {"AWS_ENDPOINT_URL": "http://127.0.0.1:1", "AWS_REGION": "eu-west-1", "HOME": "/root"}
    storage = Storage.from_environment({"AWS_REGION": "us-east-1"}, env)
    assert dict(storage.options) == {"AWS_ENDPOINT_URL": "http://127.0.0.1:1", "AWS_REGION": "us-east-1"}
    assert storage.delta_options()["AWS_ALLOW_HTTP"] == "true"


def test_paths_are_named_as_uris() -> None:
    assert normalize("s3a://bucket/a/b") == normalize("s3://bucket/a/b") == "s3://bucket/a/b"
    assert normalize("/x/y") == normalize("file:///x/y") == normalize("file:/x/y") == "file:/x/y"
    assert normalize("gs://b/k") == "gs://b/k"


def test_a_narrow_scan_of_a_big_table_is_planned_too_big_to_broadcast(spark: Any, tmp_path: Path) -> None:
    """Parquet undercounts what a scan holds in memory (sorted offsets compress a hundredfold): the embedded
    profile plans scans at ten times their files' size (``spark.sql.sources.fileCompressionFactor``), so a join
    shuffles a narrow projection of a big table rather than build all of it on the driver as a broadcast; the
    same join plans a broadcast when the files' size is taken as it is."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from pyspark.sql import functions as F

    n = 200_000
    pq.write_table(pa.table({"cluster_id": ["c"] * n, "log_offset": pa.array(range(n), pa.int64()),
                             "batch_base_offset": pa.array([i - i % 8 for i in range(n)], pa.int64())}),
                   tmp_path / "records.parquet")
    size = (tmp_path / "records.parquet").stat().st_size
    records = spark.read.parquet(str(tmp_path))
    births = spark.range(10).select(F.lit("c").alias("cluster_id"), F.col("id").alias("log_offset"))

    def plan() -> str:  # (a left join can only build its right side: the records)
        return str(births.join(records, ["cluster_id", "log_offset"], "left")._jdf.queryExecution().executedPlan())

    assert spark.conf.get("spark.sql.sources.fileCompressionFactor") == "10"
    before = {k: spark.conf.get(k) for k in ("spark.sql.autoBroadcastJoinThreshold",
                                             "spark.sql.sources.fileCompressionFactor")}
    spark.conf.set("spark.sql.autoBroadcastJoinThreshold", str(size * 3))  # above the files, below 10x them
    try:
        assert "BroadcastExchange" not in plan() and "SortMergeJoin" in plan()
        spark.conf.set("spark.sql.sources.fileCompressionFactor", "1")
        assert "BroadcastExchange" in plan()
    finally:
        for key, value in before.items():
            spark.conf.set(key, value)


def test_a_run_hands_rows_to_python_in_batches_cut_by_rows_alone(spark: Any, tmp_path: Path) -> None:
    """While a run writes the warehouse (``writing``) its jobs' Arrow batches to Python are cut at
    ``maxRecordsPerBatch`` rows, with no byte limit (Spark measures the batch after every row to keep one); the
    session's other queries keep Spark's 64 MiB limit, which a ``kraft_records(content)`` over whole files needs."""
    import pyarrow as pa
    from pyspark.sql import functions as F

    from kraftlog.spark.store import store_for, writing

    rows = spark.range(10_000, numPartitions=1).select(F.repeat(F.lit("x"), 8192).alias("s"))  # 80 MiB

    def batches() -> list[int]:
        def sizes(it: Any) -> Any:  # a row per batch received: its rows
            for b in it:
                yield pa.RecordBatch.from_pydict({"n": [b.num_rows]})
        return [r["n"] for r in rows.mapInArrow(sizes, "n long").collect()]

    key = "spark.sql.execution.arrow.maxBytesPerBatch"
    assert spark.conf.get(key, None) is None
    assert len(batches()) > 1  # (64 MiB)
    config = Config.load(warehouse={"path": str(tmp_path / "wh")})
    with writing(store_for(spark, config), config, "run-1", "test"):
        assert batches() == [10_000]
    assert spark.conf.get(key, None) is None and len(batches()) > 1
    spark.conf.set(key, str(32 << 20))  # a value the session sets is left as it is
    try:
        with writing(store_for(spark, config), config, "run-2", "test"):
            assert len(batches()) > 2
    finally:
        spark.conf.unset(key)


def test_a_small_run_cuts_its_shuffles_into_no_more_parts_than_task_slots(spark: Any) -> None:
    """Without adaptive execution a shuffle keeps ``spark.sql.shuffle.partitions`` parts: a small run sets that to the
    cluster's task slots, or leaves the session's own number where it is fewer; either is given back after."""
    from pyspark.sql import functions as F

    from kraftlog.spark.session import SHUFFLE_PARTS, default_parallelism, interpreted

    slots, own = default_parallelism(spark), spark.conf.get(SHUFFLE_PARTS)

    def parts() -> int:  # of a query's shuffle, as it runs
        return spark.range(100).groupBy((F.col("id") % 7).alias("k")).count().rdd.getNumPartitions()

    try:
        for given, want in ((slots * 50, slots), (1, 1)):
            spark.conf.set(SHUFFLE_PARTS, str(given))
            with interpreted(spark, lambda upto: 10, 100) as small:
                assert small and spark.conf.get("spark.sql.adaptive.enabled") == "false"
                assert parts() == want
            with interpreted(spark, lambda upto: 100, 100) as small:  # not small: as the session has it
                assert not small and spark.conf.get(SHUFFLE_PARTS) == str(given)
            assert spark.conf.get(SHUFFLE_PARTS) == str(given)
        with interpreted(spark, lambda upto: 1 // 0, 0) as small:  # 0: always compiled, and nothing counted
            assert not small
    finally:
        spark.conf.set(SHUFFLE_PARTS, own)
