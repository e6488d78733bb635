"""Run configuration: an embedded default (the ``local`` profile) overlaid with a TOML file.

``conf/local.toml`` and ``conf/cluster.toml`` are examples; any key left out keeps its default.

Cluster and node identity come from each data directory's ``meta.properties`` by default. Many
deployments share a ``cluster.id`` (tutorial defaults such as ``MkU3OEVBNTcwNTJENDM2Qk``), so the name
kraftlog gives a cluster is a template over: ``{cluster.id}``, ``{node.id}``, ``{top}`` (the first
directory under the input root), ``{root}`` (the input root's own name) and ``{data_dir}``; explicit
``[[identity.override]]`` entries, matched by path prefix, win over the template.
"""

from __future__ import annotations

import copy
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DEFAULTS: dict[str, Any] = {
    "spark": {
        "master": "local[*]",
        "app_name": "kraftlog",
        "conf": {
            "spark.driver.memory": "4g",
            "spark.ui.showConsoleProgress": "true",
            "spark.sql.shuffle.partitions": "8",
            "spark.sql.session.timeZone": "UTC",
            "spark.sql.execution.arrow.pyspark.enabled": "true",
            "spark.sql.execution.arrow.maxBytesPerBatch": "67108864",
            "spark.python.worker.reuse": "true",
            # local disks answer a stat in microseconds: list explicit file paths on the driver
            # (the cluster profile keeps Spark's parallel listing, better for object stores)
            "spark.sql.sources.parallelPartitionDiscovery.threshold": "100000",
            # files are packed into tasks by bytes plus this cost per file: KRaft segments are often
            # small, and the default (4 MB) would balance tasks by file count instead of bytes
            "spark.sql.files.openCostInBytes": "65536",
        },
    },
    "warehouse": {
        "path": "warehouse",
        # auto: delta-spark when its classes load in the session, else delta-rs (no jar needed)
        "writer": "auto",
    },
    "identity": {
        "cluster": "{cluster.id}",
        "node": "{node.id}",
        "override": [],
    },
    "ingest": {
        "redact": True,
    },
}


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = _merge(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


@dataclass(frozen=True)
class Override:
    """Identity for every data directory whose path starts with ``prefix``."""

    prefix: str
    cluster: str | None = None
    node: int | None = None


@dataclass(frozen=True)
class Config:
    """The merged configuration."""

    data: dict[str, Any]

    @classmethod
    def load(cls, path: str | Path | None = None, **overrides: Any) -> Config:
        """Defaults, then the TOML file (if any), then keyword overrides (``warehouse={"path": ...}``)."""
        data = copy.deepcopy(DEFAULTS)
        if path is not None:
            with open(path, "rb") as fh:
                data = _merge(data, tomllib.load(fh))
        return cls(_merge(data, overrides))

    @property
    def warehouse(self) -> str:
        return str(self.data["warehouse"]["path"])

    @property
    def writer(self) -> str:
        return str(self.data["warehouse"]["writer"])

    @property
    def spark(self) -> dict[str, Any]:
        return dict(self.data["spark"])

    @property
    def redact(self) -> bool:
        return bool(self.data["ingest"]["redact"])

    @property
    def cluster_template(self) -> str:
        return str(self.data["identity"]["cluster"])

    @property
    def node_template(self) -> str:
        return str(self.data["identity"]["node"])

    @property
    def overrides(self) -> list[Override]:
        return [Override(o["prefix"], o.get("cluster"), o.get("node")) for o in self.data["identity"]["override"]]
