"""Name the cluster and node a data directory belongs to (see ``config`` for the templates)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from kraftlog.config import Config
from kraftlog.errors import ClusterNotFound
from kraftlog.storage import normalize
from kraftlog.tables.rows import SHARED_ID, FileIdentity
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
    problem = None if meta is None or meta.problem is None else \
        f"{dd.meta_properties.path if dd.meta_properties else dd.root}: {meta.problem}"
    for o in config.overrides:
        if _under(dd.root, o.prefix):
            cluster = o.cluster or cluster
            node = o.node if o.node is not None else node
            problem = None  # named by the operator
    return FileIdentity(cluster, node, dd.root, problem)


def same_node_twice(identities: dict[str, tuple[FileIdentity, str | None]]) -> dict[str, str]:
    """Data directories that claim one (cluster, node) with different ``directory.id``s, by data directory:
    two disks cannot both hold one node's metadata log, so they are unrelated clusters sharing a cluster id
    (or one node's data directory copied and reformatted). ``identities``: data dir -> (identity, directory.id)."""
    by_node: dict[tuple[str, int], dict[str, str]] = {}
    for root, (ident, directory_id) in identities.items():
        if ident.node_id is not None and directory_id:
            by_node.setdefault((ident.cluster_id, ident.node_id), {})[root] = directory_id
    out = {}
    for (cluster, node), dirs in by_node.items():
        if len(set(dirs.values())) > 1:
            for root in dirs:
                others = ", ".join(sorted(r for r in dirs if r != root))
                out[root] = (f"identity conflict: {root} and {others} both claim node {node} of cluster {cluster} "
                             f"with different directory.id; {SHARED_ID}")
    return out


@dataclass(frozen=True)
class Renaming:
    """Data directories that landed under other names than the profile gives them now."""

    before: dict[str, tuple[str, int | None]]  # data dir -> the (cluster, node) it landed as
    after: dict[str, tuple[str, int | None]]  # data dir -> the (cluster, node) the profile names it
    clusters: tuple[str, ...]  # the clusters to land again: the names landed under, and the new names landed before
    # data dir -> the (cluster, node) it landed as, where its identity now is in doubt (a ``meta.properties`` broken
    # since): not a renaming, the name it landed under stands
    doubted: dict[str, tuple[str, int | None]] = field(default_factory=dict)

    def describe(self) -> str:
        """Each data directory, ``dir: cluster/node -> cluster/node``, on one line."""
        def name(c: str, n: int | None) -> str:
            return c if n is None else f"{c} node {n}"
        return "; ".join(f"{d}: {name(*self.before[d])} -> {name(*self.after[d])}" for d in sorted(self.before))


def renaming(landed: Mapping[str, Iterable[tuple[str, int | None]]], now: Mapping[str, FileIdentity]) -> Renaming:
    """The data directories of ``now`` (data dir -> its identity now) holding a file the ledger has unchanged under
    another cluster or node (``landed``: data dir -> the (cluster, node)s its unchanged files landed as). An unchanged
    file is the same bytes, so the same log, which the profile now names otherwise; a data directory formatted anew
    (a new ``cluster.id``) holds new files, which land under its new name and rename nothing. A data directory whose
    identity is in doubt now (``FileIdentity.problem``) renames nothing either: it is ``doubted``."""
    before: dict[str, tuple[str, int | None]] = {}
    after: dict[str, tuple[str, int | None]] = {}
    doubted: dict[str, tuple[str, int | None]] = {}
    for d, names in landed.items():
        ident = now.get(d)
        other = sorted((n for n in names if ident is not None and n != (ident.cluster_id, ident.node_id)),
                       key=lambda n: (n[0], -1 if n[1] is None else n[1]))
        if ident is None or not other:
            continue
        if ident.problem:
            doubted[d] = other[0]
        else:
            before[d], after[d] = other[0], (ident.cluster_id, ident.node_id)
    known = {c for names in landed.values() for c, _ in names}
    clusters = {c for c, _ in before.values()} | {c for c, _ in after.values() if c in known}
    return Renaming(before, after, tuple(sorted(clusters)), doubted)


def _fill(template: str, values: dict[str, str]) -> str:
    out = template
    for k, v in values.items():
        out = out.replace("{" + k + "}", v)
    return out


def _under(path: str, prefix: str) -> bool:
    """``path`` is ``prefix`` or inside it, compared as URIs (local paths with or without ``file:``, ``s3a://`` as
    ``s3://``) and by whole names: ``/archive/eu`` holds ``/archive/eu/node-1``, not ``/archive/eu2``."""
    path, prefix = normalize(path).rstrip("/"), normalize(prefix).rstrip("/")
    return path == prefix or path.startswith(prefix + "/")


def choose_cluster(known: list[str], cluster: str | None) -> str:
    """The one cluster of ``known`` that ``cluster`` names (its id, or the part after ``source:``), or the
    only one when ``cluster`` is None."""
    if cluster is not None:
        hits = [c for c in known if c == cluster] or [c for c in known if c.endswith(":" + cluster)]
        if len(hits) != 1:
            raise ClusterNotFound(f"cluster {cluster!r} not found; known: {', '.join(known) or 'none'}")
        return hits[0]
    if len(known) != 1:
        raise ClusterNotFound("several clusters: " + ", ".join(known) + "; choose one with --cluster")
    return known[0]
