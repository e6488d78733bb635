"""Tables that SQL engines read as they are: no column is a reserved word, a table of another layout is never
mixed with this one's (derived tables are rebuilt, landed ones refused)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from conftest import SAMPLE

from kraftlog.analytics.definitions import event_tables
from kraftlog.spark.store import warehouse_tables
from kraftlog.tables.definitions import TableDef

# Trino's reserved keywords (trino.io/docs/current/language/reserved.html) and Spark SQL's reserved keywords in
# ANSI mode (spark.apache.org/docs/latest/sql-ref-ansi-compliance.html), as far as they could be column names
TRINO = {"alter", "and", "as", "between", "by", "case", "cast", "constraint", "create", "cross", "cube",
         "current_catalog", "current_date", "current_path", "current_role", "current_schema", "current_time",
         "current_timestamp", "current_user", "deallocate", "delete", "describe", "distinct", "drop", "else", "end",
         "escape", "except", "execute", "exists", "extract", "false", "for", "from", "full", "group", "grouping",
         "having", "in", "inner", "insert", "intersect", "into", "is", "join", "json_array", "json_exists",
         "json_object", "json_query", "json_table", "json_value", "left", "like", "listagg", "localtime",
         "localtimestamp", "natural", "normalize", "not", "null", "on", "or", "order", "outer", "prepare",
         "recursive", "right", "rollup", "select", "skip", "table", "then", "trim", "true", "uescape", "union",
         "unnest", "using", "values", "when", "where", "with"}
SPARK_ANSI = {"all", "and", "any", "as", "authorization", "both", "case", "cast", "check", "collate", "column",
              "constraint", "create", "cross", "current_date", "current_time", "current_timestamp", "current_user",
              "distinct", "else", "end", "escape", "except", "false", "fetch", "for", "foreign", "from", "full",
              "grant", "group", "having", "in", "inner", "intersect", "into", "is", "join", "lateral", "leading",
              "left", "natural", "not", "null", "offset", "on", "only", "or", "order", "outer", "overlaps",
              "primary", "references", "right", "select", "session_user", "some", "table", "then", "time", "to",
              "trailing", "union", "unique", "unknown", "user", "using", "when", "where", "with"}


def _every_table() -> list[TableDef]:
    return list(warehouse_tables().values())


def test_no_column_of_any_table_is_a_reserved_word() -> None:
    duckdb = pytest.importorskip("duckdb")
    reserved = {r[0] for r in duckdb.sql(
        "SELECT keyword_name FROM duckdb_keywords() WHERE keyword_category = 'reserved'").fetchall()}
    assert "offset" in reserved and len(reserved) > 50
    clashes = {(t.name, c) for t in _every_table() for c in t.columns
               if c.lower() in reserved | TRINO | SPARK_ANSI}
    assert clashes == set()
    for t in event_tables().values():  # and DuckDB reads each event table's columns unquoted
        empty = pa.Table.from_batches([], t.schema)  # noqa: F841 (DuckDB finds it by name)
        duckdb.sql(f"SELECT {', '.join(t.columns)} FROM empty ORDER BY {t.key[-1]}").fetchall()


def test_read_table_reads_every_kind_of_table(spark: Any, sample_events: Any) -> None:
    from kraftlog.config import Config
    from kraftlog.errors import UsageError
    from kraftlog.spark.ingest import read_table

    wh, _ = sample_events
    config = Config.load(warehouse={"path": str(wh)})
    kinds = {t.kind: t.name for t in _every_table()}  # one table of each kind
    assert set(kinds) == {"core", "typed", "history", "event"}
    for name in [*kinds.values(), "replay_ranges", "leader_elections", "brokers_history"]:
        assert read_table(spark, config, name).count() >= 0
    assert read_table(spark, config, "leader_elections").count() > 0
    with pytest.raises(UsageError, match="leader_elections"):
        read_table(spark, config, "nope")


def test_enum_columns_hold_kafkas_names_in_histories_and_events(sample_events: Any) -> None:
    from deltalake import DeltaTable

    from kraftlog.schema.registry import load_schemas

    wh, _ = sample_events
    enums = load_schemas().enums
    columns = {("configs_history", "resource_type"): "configResourceType",
               ("config_changes", "resource_type"): "configResourceType",
               ("acls_history", "resource_type"): "aclResourceType", ("acls_history", "operation"): "aclOperation",
               ("acls_history", "pattern_type"): "aclPatternType",
               ("acls_history", "permission_type"): "aclPermissionType",
               ("acl_changes", "permission"): "aclPermissionType",
               ("scram_users_history", "mechanism"): "scramMechanism", ("scram_changes", "mechanism"): "scramMechanism",
               ("partitions_history", "leader_recovery_state"): "leaderRecoveryState",
               ("leader_elections", "leader_recovery_state"): "leaderRecoveryState"}
    for (table, column), kind in columns.items():
        values = set(DeltaTable(str(wh / table)).to_pyarrow_table(columns=[column]).column(column).to_pylist())
        assert values and values <= set(enums[kind].values()), (table, column, values)
    configs = DeltaTable(str(wh / "configs_history")).to_pyarrow_table().to_pylist()
    assert {"TOPIC", "BROKER"} <= {c["resource_type"] for c in configs}  # the sample sets both


def test_an_event_table_of_an_older_layout_is_rebuilt_and_a_landed_one_refused(
        spark: Any, sample_events: Any, tmp_path: Path) -> None:
    from click.testing import CliRunner
    from deltalake import DeltaTable, write_deltalake

    from kraftlog.cli import main

    built, _ = sample_events
    wh = tmp_path / "wh"
    shutil.copytree(built, wh)
    want = DeltaTable(str(wh / "leader_elections")).to_pyarrow_table()
    old = want.rename_columns(["offset" if c == "log_offset" else c for c in want.column_names])
    shutil.rmtree(wh / "leader_elections")
    write_deltalake(str(wh / "leader_elections"), old)  # as kraftlog wrote it before log_offset
    out = CliRunner().invoke(main, ["analyze", "--warehouse", str(wh), "--cluster", "T4vFxmI9RFCnFwCmltnwag"])
    assert out.exit_code == 0, out.output
    again = DeltaTable(str(wh / "leader_elections"))
    assert again.metadata().configuration["kraftlog.schema"] == event_tables()["leader_elections"].fingerprint
    assert again.to_pyarrow_table().sort_by("log_offset").equals(want.sort_by("log_offset"))

    files = DeltaTable(str(wh / "files")).to_pyarrow_table()
    shutil.rmtree(wh / "files")
    write_deltalake(str(wh / "files"), files.drop_columns(["errors"]))  # a landed table of another layout
    out = CliRunner().invoke(main, ["ingest", str(SAMPLE), "--warehouse", str(wh)])
    assert out.exit_code == 1 and "table files was written by a kraftlog with another layout" in out.output
    assert "ingest into a new warehouse" in out.output and "Traceback" not in out.output


def test_a_partition_history_from_before_its_previous_columns_is_rebuilt_with_its_events(
        spark: Any, sample_events: Any, tmp_path: Path) -> None:
    """A warehouse of a kraftlog whose partition history had no ``previous_*`` columns (their values would be null in
    place, and the partition events read them): reconstruct drops and rebuilds the history, analyze its clusters
    anew, and every table equals the one built from scratch."""
    from click.testing import CliRunner
    from deltalake import DeltaTable, write_deltalake

    from kraftlog.cli import main
    from kraftlog.state.entities import BY_NAME, history_tables, previous_column

    built, _ = sample_events
    wh = tmp_path / "wh"
    shutil.copytree(built, wh)
    history = history_tables()["partitions"].name
    want = {t: DeltaTable(str(wh / t)).to_pyarrow_table() for t in (history, "leader_elections", "isr_changes")}
    before = want[history].drop_columns([previous_column(n) for n in BY_NAME["partitions"].previous])
    shutil.rmtree(wh / history)
    write_deltalake(str(wh / history), before)  # as kraftlog wrote it before
    for step in ("reconstruct", "analyze"):
        out = CliRunner().invoke(main, [step, "--warehouse", str(wh)])
        assert out.exit_code == 0, out.output
    for table, rows in want.items():
        again = DeltaTable(str(wh / table)).to_pyarrow_table().select(rows.column_names)
        order = [("cluster_id", "ascending"), ("topic_id", "ascending"), ("partition_id", "ascending"),
                 ("log_offset" if "log_offset" in rows.column_names else "valid_from_offset", "ascending")]
        assert again.sort_by(order).equals(rows.sort_by(order)), table
    assert before.num_rows and want[history].column("previous_leader").null_count < want[history].num_rows
