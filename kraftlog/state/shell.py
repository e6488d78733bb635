"""Render an image as ``kafka-metadata-shell``'s node tree (``/image/...``), for any offset.

The node names and leaf texts follow Kafka's ``metadata/.../image/node`` classes and the ``toString`` of
``BrokerRegistration``, ``ControllerRegistration``, ``PartitionRegistration``, ``StandardAcl`` and
``ScramCredentialData`` (3.9 layout). SCRAM keys are not kept in kraftlog's image and print as
``[redacted]``, as Kafka's ``Normal`` redaction prints them.
"""

from __future__ import annotations

from typing import Any

from kraftlog.schema.registry import load_schemas
from kraftlog.state.replay import Image

Tree = dict[str, Any]  # name -> subtree, or a leaf string


def _enum(name: str, value: int) -> str:
    return load_schemas().enums[name].get(str(value), str(value))


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
            f"leaderRecoveryState={_enum('leaderRecoveryState', p['leader_recovery_state'])}, "
            f"leaderEpoch={p['leader_epoch']}, partitionEpoch={p['partition_epoch']})")


def acl_text(a: dict[str, Any]) -> str:
    return (f"StandardAcl(resourceType={_enum('aclResourceType', a['resource_type'])}, "
            f"resourceName={a['resource_name']}, patternType={_enum('aclPatternType', a['pattern_type'])}, "
            f"principal={a['principal']}, host={a['host']}, operation={_enum('aclOperation', a['operation'])}, "
            f"permissionType={_enum('aclPermissionType', a['permission_type'])})")


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
        node = _enum("configResourceType", rtype) + (f":{rname}" if rname else "")
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
        scram.setdefault(_enum("scramMechanism", mech), {})[name] = (
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
