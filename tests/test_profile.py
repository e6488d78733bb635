"""Profiles and storage options: unknown keys are errors naming the key; s3a:// is s3://."""

from __future__ import annotations

import math
import re
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


@pytest.mark.parametrize(("text", "says"), [
    ("[warehouse]\npath = ''\n", "warehouse.path must be a path or a URI, not empty"),
    ("[warehouse]\nwriter = 'delta_rs'\n", "warehouse.writer must be one of auto, delta-rs, delta-spark"),
    ("[warehouse]\nlease_ttl_seconds = 0\n", "warehouse.lease_ttl_seconds must be more than 0 seconds"),
    ("[warehouse]\nlease_ttl_seconds = inf\n", "warehouse.lease_ttl_seconds must be more than 0 seconds"),
    ("[warehouse]\nlease_wait_seconds = -1\n", "warehouse.lease_wait_seconds must be 0 or more seconds"),
    ("[warehouse]\nlease_wait_seconds = nan\n", "warehouse.lease_wait_seconds must be 0 or more seconds"),
    ("[spark]\ninterpreted_below = -1\n", "spark.interpreted_below must be 0 or more records"),
    ("[spark]\nlog_level = 'LOUD'\n", "spark.log_level must be one of ALL, TRACE"),
    ("[identity]\ncluster = ''\n", "identity.cluster must be a name template, not empty"),
    ("[[identity.override]]\nprefix = '/d/1'\nnode = '1'\n", "identity.override.node must be int, not '1'"),
    ("[[identity.override]]\ncluster = 'a'\n", "each identity.override needs a prefix"),
])
def test_a_value_that_cannot_work_is_an_error_at_load_naming_the_key(tmp_path: Path, text: str, says: str) -> None:
    """Values of the right type that would fail in the middle of a run, or do harm: an empty warehouse path (the
    working directory), a lease that lasts 0 s (two runs writing at once)."""
    path = tmp_path / "p.toml"
    path.write_text(text)
    with pytest.raises(ProfileError, match=re.escape(f"{path}: {says}")):
        Config.load(path)


def test_the_edges_of_the_values_load(tmp_path: Path) -> None:
    path = tmp_path / "p.toml"
    path.write_text("[spark]\nlog_level = 'error'\ninterpreted_below = 0\nmaster = ''\n"
                    "[warehouse]\nlease_wait_seconds = inf\nlease_ttl_seconds = 0.5\nwriter = 'delta-spark'\n")
    config = Config.load(path)
    assert (config.lease_wait_seconds, config.lease_ttl_seconds, config.interpreted_below) == (math.inf, 0.5, 0)
    assert config.spark["master"] == ""  # (no master: Spark's own defaults decide, spark-defaults.conf's included)


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


def test_an_override_names_the_data_directories_under_its_prefix(tmp_path: Path) -> None:
    """``[[identity.override]]``: a data directory under the prefix (by whole names, as a URI) takes the override's
    cluster and node; one whose name only starts the same way keeps the template's."""
    from kraftlog.identity import resolve_identity
    from kraftlog.wire.discover import DataDir
    from kraftlog.wire.files import MetaProperties

    path = tmp_path / "p.toml"
    path.write_text("[identity]\ncluster = '{top}'\n"
                    "[[identity.override]]\nprefix = 's3a://archive/eu'\ncluster = 'eu-legacy'\n"
                    "[[identity.override]]\nprefix = '/data/old/'\nnode = 7\n")
    config = Config.load(path)
    meta = MetaProperties("MkU3OEVBNTcwNTJENDM2Qk", 1, None, 1, {})

    def named(root: str, input_root: str) -> tuple[str, int | None]:
        ident = resolve_identity(DataDir(input_root, root, root + "/__cluster_metadata-0"), meta, config)
        return ident.cluster_id, ident.node_id

    assert named("s3://archive/eu/node-1", "s3://archive") == ("eu-legacy", 1)
    assert named("s3://archive/eu", "s3://archive") == ("eu-legacy", 1)
    assert named("s3://archive/eu2/node-1", "s3://archive") == ("eu2", 1)
    assert named("/data/old/n1", "/data") == ("old", 7)
    assert named("file:/data/old/n1", "file:/data") == ("old", 7)
    assert named("/data/older/n1", "/data") == ("older", 1)


def test_a_renaming_is_told_by_unchanged_files_landed_under_other_names() -> None:
    """``renaming``: a data directory whose unchanged files landed under another cluster or node than it is named now
    is renamed; one with no unchanged file landed (formatted anew: a new ``cluster.id``, its files new) is not; the
    clusters landed again are the old names and the new ones landed before; a directory whose identity is in doubt
    now keeps its landed name (``doubted``)."""
    from kraftlog.identity import renaming
    from kraftlog.tables.rows import FileIdentity

    landed = {"/a": {("c1", 1)}, "/b": {("c1", 2)}, "/c": {("c3", 1)}}
    now = {"/a": FileIdentity("c1", 1, "/a"), "/b": FileIdentity("c3", 2, "/b"), "/c": FileIdentity("c3", 1, "/c"),
           "/d": FileIdentity("c4", 1, "/d")}
    got = renaming(landed, now)
    assert (got.before, got.after, got.clusters) == ({"/b": ("c1", 2)}, {"/b": ("c3", 2)}, ("c1", "c3"))
    assert got.describe() == "/b: c1 node 2 -> c3 node 2"
    assert renaming({**landed, "/b": set()}, now).before == {}  # formatted anew: no unchanged file landed
    assert renaming(landed, {**now, "/b": FileIdentity("c1", 7, "/b")}).clusters == ("c1",)
    mixed = renaming({"/b": {("c1", None), ("c1", 2)}}, {"/b": FileIdentity("c1", 2, "/b")})
    assert mixed.before == {"/b": ("c1", None)}
    doubted = renaming(landed, {**now, "/b": FileIdentity("unknown-cluster", None, "/b", "bad")})
    assert (doubted.before, doubted.doubted) == ({}, {"/b": ("c1", 2)})
