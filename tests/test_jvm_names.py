"""py4j's name lookups, remembered on the driver (``kraftlog.spark.jvm_names``)."""

from __future__ import annotations

from typing import Any

import pytest

pytestmark = pytest.mark.spark


def test_columns_built_again_ask_the_jvm_no_name_again(spark: Any, monkeypatch: Any) -> None:
    """Once a session is built, building the same columns again sends the JVM no name lookup (py4j's reflection
    commands), and the frames built compute what they did; a name that may change is asked each time."""
    from py4j import protocol
    from pyspark.sql import functions as F

    client = spark.sparkContext._gateway._gateway_client
    asked: list[tuple[str, str]] = []
    send = type(client).send_command

    def counting(self: Any, command: str, *args: Any, **kwargs: Any) -> Any:
        if command.startswith(protocol.REFLECTION_COMMAND_NAME):
            sub, name = command.split("\n")[1:3]
            asked.append((sub, name))
        return send(self, command, *args, **kwargs)

    monkeypatch.setattr(type(client), "send_command", counting)

    def build(i: int) -> Any:
        return (spark.range(3).withColumn("x", F.col("id") + F.lit(i))
                .select(F.struct("id", F.array("x")).alias("s"), F.sum("x").over(_window()).alias("t")))

    first = build(0)
    asked.clear()
    frames = [build(i) for i in range(1, 21)]
    assert asked == []  # (without remembering: ~14 lookups a frame, each several jar searches in the JVM)
    assert [r.t for r in frames[4].collect()] == [r.t + 3 * 5 for r in first.collect()]
    # a simple name that is no class is asked again: an import made later may make it one
    jvm = spark.sparkContext._jvm
    assert jvm.java.util.ArrayList is jvm.java.util.ArrayList  # a dotted name's class: kept
    asked.clear()
    jvm.java  # noqa: B018
    jvm.java  # noqa: B018
    assert asked == [("u", "java")] * 2


def _window() -> Any:
    from pyspark.sql import Window

    return Window.orderBy("id").rowsBetween(Window.unboundedPreceding, Window.unboundedFollowing)
