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
import math
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kraftlog.errors import KraftlogError
from kraftlog.storage import Storage

DEFAULTS: dict[str, Any] = {
    "spark": {
        # used only where nothing else set them: spark-submit's options, an existing session and
        # SPARK_REMOTE (Spark Connect) always win (kraftlog.spark.session); an empty master sets none, and Spark's
        # own defaults decide (spark-defaults.conf's spark.master, else local[*])
        "master": "local[*]",
        "app_name": "kraftlog",
        "log_level": "WARN",
        # a reconstruct or analyze of fewer records than this (other than NoOps: landed since the last run, and
        # every one of a cluster rebuilt; in a first build every record, NoOps too;
        # kraftlog.spark.landed.state_records) evaluates Spark expressions interpreted, not compiled, and plans
        # each query once, without adaptive execution
        # (kraftlog.spark.session: INTERPRETED); 0: always compiled. Where a first build turns:
        # benchmarks/bench_interpreted.py (here between 124k and 495k records)
        "interpreted_below": 200000,
        "conf": {
            "spark.driver.memory": "4g",
            "spark.ui.showConsoleProgress": "true",
            "spark.sql.shuffle.partitions": "8",
            "spark.sql.session.timeZone": "UTC",
            "spark.sql.execution.arrow.pyspark.enabled": "true",
            "spark.python.worker.reuse": "true",
            # a scan is planned at its Parquet files' size, which undercounts what it holds in memory: three columns
            # of every log record, planned at 9.8 MiB on the 5M-record benchmark cluster (under the 10 MiB
            # broadcast threshold), were broadcast as 960 MiB, and a driver with 4g ran out of memory. Planned at
            # ten times their files' size such scans are shuffled (AQE still broadcasts what turns out small)
            "spark.sql.sources.fileCompressionFactor": "10",
            # each hash table (a broadcast join's, an aggregation's) starts with one memory page: 64 MiB with a 4g
            # driver, for a broadcast of one row. 4 MiB pages (a bigger row gets a page of its own)
            "spark.buffer.pageSize": "4m",
            # PySpark 4 records each DataFrame call's Python call site for error messages: about ten round trips
            # to the JVM per call, more than half of the driver's calls in an analysis; off by default
            "spark.python.sql.dataFrameDebugging.enabled": "false",
        },
    },
    "warehouse": {
        "path": "warehouse",
        # auto: delta-spark when its classes load in the session, else delta-rs (no jar needed)
        "writer": "auto",
        # one writer at a time (kraftlog.lease): how long a run waits for another to finish before it
        # gives up with "warehouse busy", and how long a lease lasts without renewal (a killed run's)
        "lease_wait_seconds": 3600.0,
        "lease_ttl_seconds": 300.0,
    },
    "identity": {
        "cluster": "{cluster.id}",
        "node": "{node.id}",
        "override": [],
    },
    "ingest": {
        "redact": True,
    },
    # storage options (S3 endpoint, region, credentials, ...) under the standard environment variable
    # names; they overlay the environment's (kraftlog.storage)
    "storage": {},
}

WRITERS = ("auto", "delta-rs", "delta-spark")
_LOG_LEVELS = ("ALL", "TRACE", "DEBUG", "INFO", "WARN", "ERROR", "FATAL", "OFF")

# what a value must be, beyond its type (a wrong one fails at load, naming the file and the key, not in the middle
# of a run: an empty warehouse path is the working directory, a lease that lasts 0 s lets two runs write at once)
_VALUES: dict[tuple[str, ...], tuple[Callable[[Any], bool], str]] = {
    ("spark", "log_level"): (lambda v: v.upper() in _LOG_LEVELS, f"one of {', '.join(_LOG_LEVELS)}"),
    ("spark", "interpreted_below"): (lambda v: v >= 0, "0 or more records"),
    ("warehouse", "path"): (lambda v: v.strip() != "", "a path or a URI, not empty"),
    ("warehouse", "writer"): (lambda v: v in WRITERS, f"one of {', '.join(WRITERS)}"),
    ("warehouse", "lease_wait_seconds"): (lambda v: v >= 0, "0 or more seconds (inf: wait for as long as it takes)"),
    ("warehouse", "lease_ttl_seconds"): (lambda v: 0 < v < math.inf, "more than 0 seconds, finite"),
    ("identity", "cluster"): (lambda v: v.strip() != "", "a name template, not empty"),
    ("identity", "node"): (lambda v: v.strip() != "", "a name template, not empty"),
}

# where a profile may hold tables of its own choosing (Spark conf keys, storage options)
_FREE_FORM = {("spark", "conf"), ("storage",)}
_OVERRIDE: dict[str, type] = {"prefix": str, "cluster": str, "node": int}


class ProfileError(KraftlogError, ValueError):
    """A profile that cannot be used: unknown keys, wrong types; names the file and the key."""


def _check(data: dict[str, Any], spec: dict[str, Any], where: tuple[str, ...], source: str) -> None:
    for key, value in data.items():
        name = ".".join((*where, key))
        if key not in spec:
            raise ProfileError(f"{source}: unknown key {name!r} (known here: {', '.join(sorted(spec))})")
        expected = spec[key]
        if (*where, key) in _FREE_FORM:
            if not isinstance(value, dict):
                raise ProfileError(f"{source}: {name} must be a table")
        elif isinstance(expected, dict):
            if not isinstance(value, dict):
                raise ProfileError(f"{source}: {name} must be a table")
            _check(value, expected, (*where, key), source)
        elif isinstance(expected, list):
            if not isinstance(value, list) or not all(isinstance(o, dict) for o in value):
                raise ProfileError(f"{source}: {name} must be an array of tables")
            for o in value:
                for k, v in o.items():
                    if k not in _OVERRIDE:
                        raise ProfileError(f"{source}: unknown key {name}.{k!r} (known here: "
                                           f"{', '.join(sorted(_OVERRIDE))})")
                    if not isinstance(v, _OVERRIDE[k]) or isinstance(v, bool):
                        raise ProfileError(f"{source}: {name}.{k} must be {_OVERRIDE[k].__name__}, not {v!r}")
                if not str(o.get("prefix", "")).strip():
                    raise ProfileError(f"{source}: each {name} needs a prefix (the data directories it names), "
                                       f"not {o!r}")
        elif expected is not None and not isinstance(value, type(expected)) and not (
                isinstance(expected, float) and isinstance(value, int)):
            raise ProfileError(f"{source}: {name} must be {type(expected).__name__}, not {value!r}")
        elif (*where, key) in _VALUES:
            holds, what = _VALUES[(*where, key)]
            if not holds(value):  # (NaN holds no comparison: it fails each rule on a number)
                raise ProfileError(f"{source}: {name} must be {what}, not {value!r}")


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
            try:
                with open(path, "rb") as fh:
                    profile = tomllib.load(fh)
            except OSError as e:
                raise ProfileError(f"{path}: cannot read the profile ({e.strerror or e})") from e
            except tomllib.TOMLDecodeError as e:
                raise ProfileError(f"{path}: not valid TOML ({e})") from e
            _check(profile, DEFAULTS, (), str(path))
            data = _merge(data, profile)
        _check(overrides, DEFAULTS, (), "settings")
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
    def interpreted_below(self) -> int:
        return int(self.data["spark"]["interpreted_below"])

    @property
    def storage(self) -> Storage:
        """How to reach object stores: the standard environment overlaid with ``[storage]``."""
        try:
            return Storage.from_environment(self.data["storage"])
        except ValueError as e:
            raise ProfileError(str(e)) from e

    @property
    def lease_wait_seconds(self) -> float:
        return float(self.data["warehouse"]["lease_wait_seconds"])

    @property
    def lease_ttl_seconds(self) -> float:
        return float(self.data["warehouse"]["lease_ttl_seconds"])

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
