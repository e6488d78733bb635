"""Render an image as ``kafka-metadata-shell``'s node tree (``/image/...``), for any offset.

The node names and leaf texts follow Kafka's ``metadata/.../image/node`` classes and the ``toString`` of
``BrokerRegistration``, ``ControllerRegistration``, ``PartitionRegistration``, ``StandardAcl`` and
``ScramCredentialData`` (3.9 layout). SCRAM keys are not kept in kraftlog's image and print as
``[redacted]``, as Kafka's ``Normal`` redaction prints them.
"""

from __future__ import annotations

import cmd
from collections.abc import Callable
from typing import Any

from kraftlog.errors import KraftlogError
from kraftlog.points import iso_ms
from kraftlog.schema.registry import load_schemas
from kraftlog.state.replay import Change, Image

Tree = dict[str, Any]  # name -> subtree, or a leaf string


def _enum(name: str, value: int) -> str:
    return load_schemas().enum_name(name, value)


def _ints(xs: list[int]) -> str:
    return "[" + ", ".join(str(x) for x in xs) + "]"


def _strs(xs: list[str]) -> str:
    return "[" + ", ".join(xs) + "]"


def _listeners(ls: list[dict[str, Any]]) -> str:
    return "[" + ", ".join(f"Endpoint(listenerName='{e['name']}', securityProtocol="
                           f"{_enum('securityProtocol', e['security_protocol'])}, host='{e['host']}', "
                           f"port={e['port']})" for e in ls) + "]"


def _supported(fs: list[dict[str, Any]]) -> str:
    return "{" + ", ".join(f"{f['name']}: {f['min_supported_version']}-{f['max_supported_version']}"
                           for f in fs) + "}"


def broker_text(broker_id: int, b: dict[str, Any]) -> str:
    rack = f"Optional[{b['rack']}]" if b["rack"] is not None else "Optional.empty"
    text = (f"BrokerRegistration(id={broker_id}, epoch={b['broker_epoch']}, incarnationId={b['incarnation_id']}, "
            f"listeners={_listeners(b['listeners'])}, supportedFeatures={_supported(b['supported_features'])}, "
            f"rack={rack}, fenced={str(b['fenced']).lower()}, "
            f"inControlledShutdown={str(b['in_controlled_shutdown']).lower()}, "
            f"isMigratingZkBroker={str(b['is_migrating_zk_broker']).lower()}, "
            f"directories={_strs(b['directories'])}")
    if b.get("cordoned_directories") is not None:
        text += f", cordonedDirectories={_strs(b['cordoned_directories'])}"
    return text + ")"


def controller_text(controller_id: int, c: dict[str, Any]) -> str:
    return (f"ControllerRegistration(id={controller_id}, incarnationId={c['incarnation_id']}, "
            f"zkMigrationReady={str(c['zk_migration_ready']).lower()}, listeners={_listeners(c['listeners'])}, "
            f"supportedFeatures={_supported(c['supported_features'])})")


def partition_text(p: dict[str, Any]) -> str:
    return (f"PartitionRegistration(replicas={_ints(p['replicas'])}, directories={_strs(p['directories'])}, "
            f"isr={_ints(p['isr'])}, removingReplicas={_ints(p['removing_replicas'])}, "
            f"addingReplicas={_ints(p['adding_replicas'])}, elr={_ints(p['elr'])}, "
            f"lastKnownElr={_ints(p['last_known_elr'])}, leader={p['leader']}, "
            f"leaderRecoveryState={p['leader_recovery_state']}, "
            f"leaderEpoch={p['leader_epoch']}, partitionEpoch={p['partition_epoch']})")


def acl_text(a: dict[str, Any]) -> str:
    return (f"StandardAcl(resourceType={a['resource_type']}, resourceName={a['resource_name']}, "
            f"patternType={a['pattern_type']}, principal={a['principal']}, host={a['host']}, "
            f"operation={a['operation']}, permissionType={a['permission_type']})")


def java_double(x: float) -> str:
    from kraftlog.wire.kafka_json import java_double as jd

    return jd(x)


def quota_node_name(entity: list[list[Any]]) -> str:
    """``clientId(x)_ip(y)_user(z)`` with the parts present (Kafka's ClientQuotasImageNode)."""
    names = {"client-id": "clientId", "ip": "ip", "user": "user"}
    parts = sorted(entity, key=lambda p: ["client-id", "ip", "user"].index(p[0]) if p[0] in names else 9)
    return "_".join(f"{names.get(t, t)}({n if n is not None else ''})" for t, n in parts)


def image_tree(image: Image) -> Tree:
    """The ``/image`` subtree of Kafka's metadata shell for ``image``."""
    import json

    e = image.entities
    cluster: Tree = {"brokers": {str(k[0]): broker_text(k[0], v) for k, v in e["brokers"].items()},
                     "controllers": {str(k[0]): controller_text(k[0], v) for k, v in e["controllers"].items()}}
    configs: Tree = {}
    for (rtype, rname, name), v in e["configs"].items():
        node = rtype + (f":{rname}" if rname else "")
        configs.setdefault(node, {})[name] = v["value"]
    by_id: Tree = {}
    by_name: Tree = {}
    for (tid,), t in e["topics"].items():
        topic: Tree = {"id": tid, "name": t["name"]}
        by_id[tid] = topic
        by_name[t["name"]] = topic
    for (tid, pid), p in e["partitions"].items():
        if tid in by_id:
            by_id[tid][str(pid)] = partition_text(p)
    scram: Tree = {"SCRAM-SHA-256": {}, "SCRAM-SHA-512": {}}
    for (mech, name), v in e["scram_users"].items():
        scram.setdefault(mech, {})[name] = (
            f"ScramCredentialData(salt=[redacted], storedKey=[redacted], serverKey=[redacted], "
            f"iterations={v['iterations']})")
    features: Tree = {}
    for (name,), v in e["features"].items():
        if name == "metadata.version":
            features["metadataVersion"] = v["version_name"] or str(v["level"])
        else:
            features[f"finalized_{name}"] = str(v["level"])
    zk = e["zk_migration_state"].get(())
    features["zkMigrationState"] = zk["state_name"] if zk else "NONE"
    quotas: Tree = {}
    for (entity, key), v in e["client_quotas"].items():
        quotas.setdefault(quota_node_name(json.loads(entity)), {})[key] = java_double(v["value"])
    producer = e["producer_ids"].get(())
    tokens: Tree = {k[0]: (f"DelegationTokenData(owner={v['owner']}, requester={v['requester']}, "
                           f"renewers={_strs(v['renewers'])}, issueTimestamp={v['issue_timestamp']}, "
                           f"maxTimestamp={v['max_timestamp']}, expirationTimestamp={v['expiration_timestamp']})")
                    for k, v in e["delegation_tokens"].items()}
    return {
        "acls": {k[0]: acl_text(v) for k, v in e["acls"].items()},
        "clientQuotas": quotas,
        "cluster": cluster,
        "configs": configs,
        "delegationToken": tokens,
        "features": features,
        "producerIds": {"nextProducerId": str(producer["next_producer_id"]) if producer else "-1"},
        "provenance": f"offset {image.offset}, timestamp {image.timestamp}",
        "scram": scram,
        "topics": {"byId": by_id, "byName": by_name},
    }


def tree_text(tree: Tree | str, indent: int = 0) -> str:
    """Text as the shell's ``tree`` prints it (children sorted, two spaces per level)."""
    if isinstance(tree, str):
        return "  " * indent + tree + "\n"
    out = []
    for name in sorted(tree):
        out.append("  " * indent + f"{name}:\n")
        out.append(tree_text(tree[name], indent + 1))
    return "".join(out)


# -- history of a node -----------------------------------------------------------------------------------------

def entity_at(parts: list[str], image: Image) -> tuple[str, tuple[Any, ...]] | None:
    """The entity (kind, key) a leaf of ``image_tree(image)`` shows (``parts``: its path from ``image``)."""
    e = image.entities
    p = parts[1:] if parts[:1] == ["image"] else parts
    match p:
        case ["cluster", "brokers" | "controllers" as kind, ident] if ident.isdigit():
            return kind, (int(ident),)
        case ["topics", "byId" | "byName" as by, topic, leaf]:
            ids = [k[0] for k, v in e["topics"].items() if (k[0] if by == "byId" else v["name"]) == topic]
            if not ids:
                return None
            return ("partitions", (ids[0], int(leaf))) if leaf.isdigit() else ("topics", (ids[0],))
        case ["configs", resource, name]:
            rtype, _, rname = resource.partition(":")
            return "configs", (rtype, rname, name)
        case ["acls" | "delegationToken" as node, ident]:
            return ("acls" if node == "acls" else "delegation_tokens"), (ident,)
        case ["scram", mechanism, user]:
            return "scram_users", (mechanism, user)
        case ["features", "metadataVersion"]:
            return "features", ("metadata.version",)
        case ["features", "zkMigrationState"]:
            return "zk_migration_state", ()
        case ["features", leaf] if leaf.startswith("finalized_"):
            return "features", (leaf.removeprefix("finalized_"),)
        case ["producerIds", "nextProducerId"]:
            return "producer_ids", ()
        case ["clientQuotas", node, key]:
            import json

            entities = [k[0] for k in e["client_quotas"] if quota_node_name(json.loads(k[0])) == node]
            return ("client_quotas", (entities[0], key)) if entities else None
    return None


def node_at(tree: Tree, parts: list[str]) -> Tree | str | None:
    """The node of ``tree`` at path ``parts`` (None: no such node)."""
    node: Tree | str = tree
    for p in parts:
        if not isinstance(node, dict) or p not in node:
            return None
        node = node[p]
    return node


def history_text(parts: list[str], image: Image, versions: Callable[[str, tuple[Any, ...]], list[Change]]) -> str:
    """One line per version of the entity behind the leaf at ``parts`` (``versions(kind, key)`` gives them):
    offset, time and the leaf's text (``deleted`` at a delete)."""
    found = entity_at(parts, image)
    if found is None:
        return f"/{'/'.join(parts)}: history is kept for the leaves of one entity (a broker, partition, config, ...)"
    kind, key = found
    lines = []
    for c in versions(kind, key):
        text: Tree | str | None = "deleted"
        if c.value is not None:
            alone = Image(offset=c.offset, timestamp=c.timestamp)
            alone.entities[kind][c.key] = c.value
            if kind == "partitions":  # its topic, so the byId / byName path exists
                alone.entities["topics"].update({k: v for k, v in image.entities["topics"].items() if k[0] == c.key[0]})
            text = node_at({"image": image_tree(alone)}, parts)
        lines.append(f"offset {c.offset} ({iso_ms(c.timestamp)}): {text if isinstance(text, str) else 'deleted'}")
    return "\n".join(lines) or "no versions"


# -- the interactive shell ------------------------------------------------------------------------------------

class MetadataShell(cmd.Cmd):
    """``kafka-metadata-shell``'s prompt over kraftlog's image at any point: ``ls``, ``cd``, ``pwd``, ``cat``,
    ``find``, ``tree``, and ``at <point>`` to move in time. ``image_at(point)`` gives the image at a point
    (data directories or a warehouse: the command line chooses)."""

    intro = "kraftlog metadata shell: ls, cd, pwd, cat, find, tree, history, at <point>, help, exit"

    def __init__(self, image_at: Callable[[str | None], Image], point: str | None = None,
                 stdin: Any = None, stdout: Any = None,
                 versions: Callable[[str, tuple[Any, ...]], list[Change]] | None = None):
        super().__init__(stdin=stdin, stdout=stdout)
        if stdin is not None:
            self.use_rawinput = False
        self.image_at = image_at
        self.versions = versions
        self.image = Image()
        self.cwd: list[str] = ["image"]
        self.tree: Tree = {}
        self._move(point)

    # -- state ----------------------------------------------------------------------------------------------
    def _move(self, point: str | None) -> None:
        image = self.image = self.image_at(point)
        self.tree = {"image": image_tree(image)}
        self.where = f"offset {image.offset}"
        if self._node(self.cwd) is None:
            self.cwd = ["image"]
        self.prompt = f"[{self.where}] /{'/'.join(self.cwd)} > "

    def _path(self, arg: str) -> list[str]:
        parts = [] if arg.startswith("/") else list(self.cwd)
        for p in arg.split("/"):
            if p in ("", "."):
                continue
            if p == "..":
                if parts:
                    parts.pop()
            else:
                parts.append(p)
        return parts

    def _node(self, parts: list[str]) -> Tree | str | None:
        return node_at(self.tree, parts)

    def _say(self, text: str) -> None:
        self.stdout.write(text.rstrip("\n") + "\n")

    def _resolve(self, arg: str) -> tuple[list[str], Tree | str] | None:
        parts = self._path(arg.strip())
        node = self._node(parts)
        if node is None:
            self._say(f"{arg.strip() or '.'}: no such node")
            return None
        return parts, node

    # -- commands -------------------------------------------------------------------------------------------
    def do_ls(self, arg: str) -> None:
        """ls [path]: the children of a node (a leaf: its name)."""
        found = self._resolve(arg)
        if found is not None:
            parts, node = found
            self._say("\n".join(sorted(node)) if isinstance(node, dict) else parts[-1])

    def do_cd(self, arg: str) -> None:
        """cd [path]: move to a node (no path: /image)."""
        found = self._resolve(arg or "/image")
        if found is None:
            return
        parts, node = found
        if not isinstance(node, dict):
            self._say(f"{arg}: not a directory")
            return
        self.cwd = parts
        self.prompt = f"[{self.where}] /{'/'.join(self.cwd)} > "

    def do_pwd(self, arg: str) -> None:
        """pwd: where you are."""
        self._say("/" + "/".join(self.cwd))

    def do_cat(self, arg: str) -> None:
        """cat path: the text of a leaf."""
        found = self._resolve(arg)
        if found is not None:
            _, node = found
            self._say(node if isinstance(node, str) else f"{arg}: is a directory")

    def do_tree(self, arg: str) -> None:
        """tree [path]: a node and everything under it."""
        found = self._resolve(arg)
        if found is not None:
            parts, node = found
            self._say(tree_text({parts[-1]: node} if parts else node))

    def do_find(self, arg: str) -> None:
        """find [path]: every node under a path, one per line."""
        found = self._resolve(arg)
        if found is None:
            return
        parts, node = found
        lines: list[str] = []

        def walk(prefix: str, n: Tree | str) -> None:
            lines.append(prefix)
            if isinstance(n, dict):
                for name in sorted(n):
                    walk(f"{prefix}/{name}", n[name])

        walk("/" + "/".join(parts), node)
        self._say("\n".join(lines))

    def do_history(self, arg: str) -> None:
        """history path: every version of a leaf (a broker, partition, config, ACL, ...) over the whole log."""
        found = self._resolve(arg)
        if found is None or self.versions is None:
            return
        self._say(history_text(found[0], self.image, self.versions))

    def do_at(self, arg: str) -> None:
        """at <point>: the image at an offset, a time (2026-11-21T03:14:00Z, now, -1h) or latest."""
        try:
            self._move(arg.strip() or None)
        except KraftlogError as e:
            self._say(str(e))

    def do_exit(self, arg: str) -> bool:
        """exit: leave the shell (also: quit, Ctrl-D)."""
        return True

    do_quit = do_exit
    do_EOF = do_exit

    def emptyline(self) -> bool:
        return False

    def default(self, line: str) -> None:
        self._say(f"unknown command: {line.split()[0]} (help lists the commands)")

    def completenames(self, text: str, *ignored: Any) -> list[str]:
        return [n for n in super().completenames(text, *ignored) if n != "EOF"]

    def completedefault(self, text: str, line: str, begidx: int, endidx: int) -> list[str]:
        head, _, stem = text.rpartition("/")
        node = self._node(self._path(head)) if head or text.startswith("/") else self._node(self.cwd)
        if not isinstance(node, dict):
            return []
        return [(head + "/" if head or text.startswith("/") else "") + n for n in sorted(node) if n.startswith(stem)]
