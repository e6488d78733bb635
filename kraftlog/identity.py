"""Name the cluster and node a data directory belongs to (see ``config`` for the templates)."""

from __future__ import annotations

from kraftlog.config import Config
from kraftlog.storage import normalize
from kraftlog.tables.rows import FileIdentity
from kraftlog.wire.discover import DataDir
from kraftlog.wire.files import MetaProperties


def resolve_identity(dd: DataDir, meta: MetaProperties | None, config: Config) -> FileIdentity:
    """The identity of ``dd``: overrides by path prefix, else the configured templates."""
    values = {
        "cluster.id": (meta.cluster_id if meta else None) or "unknown-cluster",
        "node.id": "" if meta is None or meta.node_id is None else str(meta.node_id),
        "top": dd.top,
        "root": dd.input_root.rstrip("/").rsplit("/", 1)[-1],
        "data_dir": dd.root,
    }
    cluster = _fill(config.cluster_template, values)
    node_text = _fill(config.node_template, values)
    node = int(node_text) if node_text.lstrip("-").isdigit() else None
    for o in config.overrides:
        if _norm(dd.root).startswith(_norm(o.prefix)):
            cluster = o.cluster or cluster
            node = o.node if o.node is not None else node
    return FileIdentity(cluster, node, dd.root)


def _fill(template: str, values: dict[str, str]) -> str:
    out = template
    for k, v in values.items():
        out = out.replace("{" + k + "}", v)
    return out


def _norm(path: str) -> str:
    """Compare paths as URIs: local ones with or without ``file:``, ``s3a://`` as ``s3://``."""
    return normalize(path)
