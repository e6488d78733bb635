"""A big KRaft cluster's metadata log, written as real segments and snapshots (for the benchmarks).

    python benchmarks/bigcluster.py OUT [--brokers 60] [--racks 3] [--topics 10000] [--partitions 150000]
                                        [--records 5000000] [--seed 1]

The generator keeps its own model of the cluster and writes what a KRaft controller would:

* bootstrap: ``metadata.version`` in a metadata transaction, the controllers, then every broker
  registered (racks round-robin) and unfenced, and the cluster default ``min.insync.replicas=2`` (with
  replication factor 3, as production clusters that produce with ``acks=all`` run);
* topics: TopicRecord, PartitionRecords (replicas spread over the racks, the first is the leader),
  some topic configs (``retention.ms``; ``min.insync.replicas`` 1 on a few, 3 on fewer: those are under
  it whenever one replica is out); each batch of creations is a metadata transaction, as Kafka writes
  big creations;
* then rounds until ``--records`` non-NoOp records are written: a rolling restart of every broker
  (controlled shutdown, leaders moved off, ISR shrunk, fenced, re-registered with a new epoch,
  unfenced, ISR expanded, preferred leaders restored), one broker crash (ISR and leader changes
  without a controlled shutdown), reassignments (adding replicas, then the new assignment),
  config (``retention.ms``, ``cleanup.policy``, ``min.insync.replicas`` of topics, of a broker) and
  client-quota churn, topic deletes and creations, producer id blocks, a controller
  failover (LeaderChange, a new epoch for the batches), NoOp records between operations;
* segments roll every ``--segment-records`` records; a snapshot of the model is written half-way
  and at the end (``<endOffset>-<epoch>.checkpoint``), so verification has something to check.

Records are encoded by ``tests/encoder.py`` from the schemas. The output is a data directory
(``meta.properties`` and ``__cluster_metadata-0``) that ``kraftlog ingest`` reads like any other.
"""

from __future__ import annotations

import argparse
import base64
import random
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from encoder import Encoder, batch, control_key, record, uvarint  # noqa: E402

from kraftlog.schema.registry import load_schemas  # noqa: E402
from kraftlog.state.entities import MIGRATING, UNASSIGNED  # noqa: E402

S = load_schemas()
_META = {spec.record_type: spec for spec in S.metadata.values()}
_CONTROL = {spec.dump_name: spec for spec in S.control.values()}
_ENCODERS: dict[str, Encoder] = {}
VERSIONS = {"REGISTER_BROKER_RECORD": 1, "BROKER_REGISTRATION_CHANGE_RECORD": 1, "PARTITION_RECORD": 1}
T0 = 1_760_000_000_000  # ms
TOPIC, BROKER = 2, 4  # ConfigResource types
MIN_ISR = "min.insync.replicas"
# the topic configs the churn sets (a value of None deletes the config)
CHURNED: dict[str, list[str | None]] = {"retention.ms": ["604800000", "86400000", None],
                                        "cleanup.policy": ["delete", "compact", None], MIN_ISR: ["1", "2", "3", None]}
GENERATOR_VERSION = 3  # part of the benchmarks' cache key: bump when the output changes


def uid(n: int) -> str:
    return base64.urlsafe_b64encode(n.to_bytes(16, "big")).decode().rstrip("=")


def metadata(rtype: str, **data: Any) -> tuple[bytes | None, bytes]:
    """(key, value) of a metadata record, encoded from the schema."""
    spec = _META[rtype]
    enc = _ENCODERS.get(rtype) or _ENCODERS.setdefault(rtype, Encoder(spec))
    version = VERSIONS.get(rtype, 0)
    assert spec.api_key is not None
    return None, uvarint(1) + uvarint(spec.api_key) + uvarint(version) + enc.encode(data, version)


def control(name: str, **data: Any) -> tuple[bytes | None, bytes]:
    spec = _CONTROL[name]
    (ctype,) = spec.control_types
    return control_key(ctype), Encoder(spec).encode(data, 0)


@dataclass
class Partition:
    topic_id: str
    partition_id: int
    replicas: list[int]
    isr: list[int]
    leader: int
    leader_epoch: int = 0
    partition_epoch: int = 0
    adding: list[int] = field(default_factory=list)
    removing: list[int] = field(default_factory=list)
    directories: list[str] = field(default_factory=list)  # as Kafka's image holds them

    def __post_init__(self) -> None:
        self.directories = self.directories or [MIGRATING] * len(self.replicas)


@dataclass
class Broker:
    broker_id: int
    rack: str
    epoch: int
    incarnation: int
    fenced: bool = True
    in_controlled_shutdown: bool = False


class LogWriter:
    """Records appended as RecordBatches (one batch per operation, at most ``max_batch`` records), segments
    rolled every ``segment_records`` records."""

    def __init__(self, log_dir: Path, segment_records: int, max_batch: int = 200):
        self.dir = log_dir
        self.segment_records = segment_records
        self.max_batch = max_batch
        self.offset = 0
        self.epoch = 1
        self.now = T0
        self.records = 0  # non-NoOp
        self.noops = 0
        self._segment_start = 0
        self._out = open(self.dir / f"{0:020d}.log", "wb")  # noqa: SIM115 (rolled by hand)

    def append(self, items: list[tuple[bytes | None, bytes]], is_control: bool = False) -> None:
        for i in range(0, len(items), self.max_batch):
            group = items[i:i + self.max_batch]
            if self.offset - self._segment_start >= self.segment_records:
                self._roll()
            recs = [record(j, v, key=k, timestamp_delta=j) for j, (k, v) in enumerate(group)]
            self._out.write(batch(self.offset, recs, epoch=self.epoch, base_timestamp=self.now,
                                  max_timestamp=self.now + len(group) - 1, control=is_control))
            self.offset += len(group)
            self.now += 5 + len(group)
        if not is_control:
            self.records += len(items)

    def noop(self) -> None:
        self.append([metadata("NO_OP_RECORD")])
        self.records -= 1
        self.noops += 1
        self.now += 500

    def _roll(self) -> None:
        self._out.close()
        self._segment_start = self.offset
        self._out = open(self.dir / f"{self.offset:020d}.log", "wb")  # noqa: SIM115

    def close(self) -> None:
        self._out.close()


class Cluster:
    """The model of the cluster and the operations that write its log."""

    def __init__(self, out: Path, brokers: int, racks: int, topics: int, partitions: int, seed: int,
                 segment_records: int):
        self.rng = random.Random(seed)
        self.log_dir = out / "__cluster_metadata-0"
        self.log_dir.mkdir(parents=True, exist_ok=True)
        (out / "meta.properties").write_text(f"version=1\ncluster.id={uid(7)}\nnode.id=3000\n")
        self.log = LogWriter(self.log_dir, segment_records)
        self.brokers = {b: Broker(b, f"rack-{b % racks}", 0, b) for b in range(1, brokers + 1)}
        self.racks = racks
        self.topics: dict[str, str] = {}  # id -> name
        self.partitions: dict[tuple[str, int], Partition] = {}
        self.configs: dict[tuple[int, str, str], str] = {}
        self.quotas: dict[tuple[str, str], float] = {}
        self.next_topic = 0
        self.next_producer_id = 0
        self.target_topics, self.target_partitions = topics, partitions

    # -- helpers ------------------------------------------------------------------------------------------
    def _change(self, p: Partition, *, leader: int | None = None, isr: list[int] | None = None,
                replicas: list[int] | None = None, adding: list[int] | None = None,
                removing: list[int] | None = None) -> tuple[bytes | None, bytes]:
        data: dict[str, Any] = {"topic_id": p.topic_id, "partition_id": p.partition_id}
        for attr, column, value in (("isr", "isr", isr), ("replicas", "replicas", replicas),
                                    ("adding", "adding_replicas", adding), ("removing", "removing_replicas", removing)):
            if value is not None:
                if attr == "replicas":  # DirectoryId.createDirectoriesFrom: new replicas are UNASSIGNED
                    where = dict(zip(p.replicas, p.directories, strict=True))
                    p.directories = [where.get(r, UNASSIGNED) for r in value]
                setattr(p, attr, list(value))
                data[column] = getattr(p, attr)
        if leader is not None:
            p.leader = leader
            p.leader_epoch += 1
            data["leader"] = leader
        p.partition_epoch += 1
        return metadata("PARTITION_CHANGE_RECORD", **data)

    def _partition_record(self, p: Partition) -> tuple[bytes | None, bytes]:
        return metadata("PARTITION_RECORD", topic_id=p.topic_id, partition_id=p.partition_id, replicas=p.replicas,
                        isr=p.isr, removing_replicas=p.removing, adding_replicas=p.adding, leader=p.leader,
                        leader_epoch=p.leader_epoch, partition_epoch=p.partition_epoch, directories=p.directories)

    def _register(self, b: Broker) -> tuple[bytes | None, bytes]:
        return metadata("REGISTER_BROKER_RECORD", broker_id=b.broker_id, incarnation_id=uid(10_000 + b.incarnation),
                        broker_epoch=b.epoch, end_points=[
                            {"name": "PLAINTEXT", "host": f"broker-{b.broker_id}.kafka", "port": 9092,
                             "security_protocol": 0}],
                        features=[{"name": "metadata.version", "min_supported_version": 1,
                                   "max_supported_version": 21}],
                        rack=b.rack, fenced=b.fenced, in_controlled_shutdown=b.in_controlled_shutdown)

    def _assignment(self, n: int) -> list[int]:
        ids = list(self.brokers)
        first = self.rng.choice(ids)
        out = [first]
        while len(out) < n:  # next racks first, as Kafka's rack-aware assignment does
            b = self.rng.choice(ids)
            if b not in out and (self.brokers[b].rack not in {self.brokers[x].rack for x in out}
                                 or len(out) >= self.racks):
                out.append(b)
        return out

    # -- operations ---------------------------------------------------------------------------------------
    def bootstrap(self) -> None:
        self.log.append([metadata("BEGIN_TRANSACTION_RECORD", name="Bootstrap records"),
                         metadata("FEATURE_LEVEL_RECORD", name="metadata.version", feature_level=21),
                         metadata("END_TRANSACTION_RECORD")])
        self.log.append([metadata("REGISTER_CONTROLLER_RECORD", controller_id=3000 + c, incarnation_id=uid(20_000 + c),
                                  zk_migration_ready=False, end_points=[
                                      {"name": "CONTROLLER", "host": f"controller-{c}", "port": 9093,
                                       "security_protocol": 0}], features=[])
                         for c in range(3)])
        for b in self.brokers.values():
            b.epoch = self.log.offset
            self.log.append([self._register(b)])
        for b in self.brokers.values():
            b.fenced = False
            self.log.append([metadata("BROKER_REGISTRATION_CHANGE_RECORD", broker_id=b.broker_id,
                                      broker_epoch=b.epoch, fenced=-1)])
        self.log.append([self._config(BROKER, "", MIN_ISR, "2")])  # the cluster default

    def create_topics(self, count: int, partitions_each: int) -> None:
        items = [metadata("BEGIN_TRANSACTION_RECORD", name="CreateTopics")]
        for _ in range(count):
            self.next_topic += 1
            tid, name = uid(1_000_000 + self.next_topic), f"topic-{self.next_topic:06d}"
            self.topics[tid] = name
            items.append(metadata("TOPIC_RECORD", name=name, topic_id=tid))
            for pid in range(partitions_each):
                replicas = self._assignment(3)
                p = Partition(tid, pid, replicas, list(replicas), replicas[0])
                self.partitions[(tid, pid)] = p
                items.append(self._partition_record(p))
            if self.rng.random() < 0.3:
                items.append(self._config(TOPIC, name, "retention.ms", str(self.rng.choice([3_600_000, 86_400_000]))))
            if (strict := self.rng.random()) < 0.08:
                items.append(self._config(TOPIC, name, MIN_ISR, "3" if strict < 0.02 else "1"))
        items.append(metadata("END_TRANSACTION_RECORD"))
        self.log.append(items)

    def _config(self, rtype: int, rname: str, key: str, value: str | None) -> tuple[bytes | None, bytes]:
        if value is None:
            self.configs.pop((rtype, rname, key), None)
        else:
            self.configs[(rtype, rname, key)] = value
        return metadata("CONFIG_RECORD", resource_type=rtype, resource_name=rname, name=key, value=value)

    def restart(self, b: Broker) -> None:
        """A controlled shutdown, then the broker back with a new epoch."""
        log = self.log
        b.in_controlled_shutdown = True
        log.append([metadata("BROKER_REGISTRATION_CHANGE_RECORD", broker_id=b.broker_id, broker_epoch=b.epoch,
                             in_controlled_shutdown=1)])
        self._leave(b.broker_id)
        b.fenced, b.in_controlled_shutdown = True, False
        log.append([metadata("BROKER_REGISTRATION_CHANGE_RECORD", broker_id=b.broker_id, broker_epoch=b.epoch,
                             fenced=1)])
        log.noop()
        b.epoch, b.incarnation = log.offset, b.incarnation + 1000
        log.append([self._register(b)])
        b.fenced = False
        log.append([metadata("BROKER_REGISTRATION_CHANGE_RECORD", broker_id=b.broker_id, broker_epoch=b.epoch,
                             fenced=-1)])
        self._rejoin(b.broker_id)

    def crash(self, b: Broker) -> None:
        """A broker lost without a controlled shutdown: fenced, then back later."""
        b.fenced = True
        self.log.append([metadata("BROKER_REGISTRATION_CHANGE_RECORD", broker_id=b.broker_id, broker_epoch=b.epoch,
                                  fenced=1)])
        self._leave(b.broker_id)
        for _ in range(3):
            self.log.noop()
        b.epoch, b.incarnation = self.log.offset, b.incarnation + 1000
        b.fenced = True
        self.log.append([self._register(b)])
        b.fenced = False
        self.log.append([metadata("BROKER_REGISTRATION_CHANGE_RECORD", broker_id=b.broker_id, broker_epoch=b.epoch,
                                  fenced=-1)])
        self._rejoin(b.broker_id)

    def _leave(self, broker: int) -> None:
        items = []
        for p in self.partitions.values():
            if broker not in p.isr:
                continue
            isr = [r for r in p.isr if r != broker]
            if p.leader == broker:
                alive = [r for r in isr if not self.brokers[r].fenced]
                items.append(self._change(p, leader=alive[0] if alive else -1, isr=isr or [broker]))
            else:
                items.append(self._change(p, isr=isr))
        self.log.append(items)

    def _rejoin(self, broker: int) -> None:
        expand, preferred = [], []
        for p in self.partitions.values():
            if broker in p.replicas and broker not in p.isr:
                expand.append(self._change(p, isr=[*p.isr, broker]))
        self.log.append(expand)
        for p in self.partitions.values():
            if p.replicas[0] == broker and p.leader != broker:
                preferred.append(self._change(p, leader=broker))
        self.log.append(preferred)

    def reassign(self, count: int) -> None:
        keys = self.rng.sample(sorted(self.partitions), min(count, len(self.partitions)))
        start, finish = [], []
        for k in keys:
            p = self.partitions[k]
            new = self._assignment(3)
            adding = [r for r in new if r not in p.replicas]
            removing = [r for r in p.replicas if r not in new]
            if not adding:
                continue
            start.append(self._change(p, replicas=[*p.replicas, *adding], adding=adding, removing=removing))
            leader = p.leader if p.leader in new else new[0]
            finish.append(self._change(p, replicas=new, isr=new, adding=[], removing=[],
                                       leader=leader if leader != p.leader else None))
        self.log.append(start)
        self.log.noop()
        self.log.append(finish)

    def churn(self) -> None:
        items = []
        names = list(self.topics.values())
        for _ in range(50):
            key = self.rng.choice(list(CHURNED))
            items.append(self._config(TOPIC, self.rng.choice(names), key, self.rng.choice(CHURNED[key])))
            user = f"user-{self.rng.randrange(200)}"
            key = self.rng.choice(["producer_byte_rate", "consumer_byte_rate"])
            remove = self.rng.random() < 0.2
            self.quotas.pop((user, key), None) if remove else self.quotas.__setitem__((user, key), 1048576.0)
            items.append(metadata("CLIENT_QUOTA_RECORD", entity=[{"entity_type": "user", "entity_name": user}],
                                  key=key, value=1048576.0, remove=remove))
        broker = str(self.rng.choice(list(self.brokers)))
        items.append(self._config(BROKER, broker, "log.cleaner.threads", "2"))
        if self.rng.random() < 0.3:  # a broker's own min.insync.replicas (in force for the partitions it leads)
            items.append(self._config(BROKER, broker, MIN_ISR, self.rng.choice(["1", None])))
        self.log.append(items)
        self.next_producer_id += 1000
        self.log.append([metadata("PRODUCER_IDS_RECORD", broker_id=1, broker_epoch=self.brokers[1].epoch,
                                  next_producer_id=self.next_producer_id)])

    def delete_topics(self, count: int) -> None:
        for tid in self.rng.sample(sorted(self.topics), min(count, len(self.topics))):
            name = self.topics.pop(tid)
            for part in [k for k in self.partitions if k[0] == tid]:
                del self.partitions[part]
            for config in [k for k in self.configs if k[0] == TOPIC and k[1] == name]:
                del self.configs[config]
            self.log.append([metadata("REMOVE_TOPIC_RECORD", topic_id=tid)])

    def failover(self) -> None:
        self.log.epoch += 1
        self.log.append([control("LeaderChange", version=0, leader_id=3000 + self.log.epoch % 3,
                                 voters=[{"voter_id": 3000 + c} for c in range(3)],
                                 granting_voters=[{"voter_id": 3000 + c} for c in range(2)])], is_control=True)

    # -- snapshots ----------------------------------------------------------------------------------------
    def snapshot(self) -> None:
        """The model as a snapshot at the current end of the log."""
        end = self.log.offset
        items = [control("SnapshotHeader", version=0, last_contained_log_timestamp=self.log.now)]
        body = [metadata("FEATURE_LEVEL_RECORD", name="metadata.version", feature_level=21)]
        body += [metadata("REGISTER_CONTROLLER_RECORD", controller_id=3000 + c, incarnation_id=uid(20_000 + c),
                          zk_migration_ready=False, end_points=[{"name": "CONTROLLER", "host": f"controller-{c}",
                                                                 "port": 9093, "security_protocol": 0}], features=[])
                 for c in range(3)]
        body += [self._register(b) for b in self.brokers.values()]
        for tid, name in self.topics.items():
            body.append(metadata("TOPIC_RECORD", name=name, topic_id=tid))
        body += [self._partition_record(p) for p in self.partitions.values()]
        body += [metadata("CONFIG_RECORD", resource_type=k[0], resource_name=k[1], name=k[2], value=v)
                 for k, v in self.configs.items()]
        body += [metadata("CLIENT_QUOTA_RECORD", entity=[{"entity_type": "user", "entity_name": u}], key=k, value=v,
                          remove=False) for (u, k), v in self.quotas.items()]
        if self.next_producer_id:
            body.append(metadata("PRODUCER_IDS_RECORD", broker_id=1, broker_epoch=self.brokers[1].epoch,
                                 next_producer_id=self.next_producer_id))
        out = bytearray()
        offset = 0
        out += batch(offset, [record(0, items[0][1], key=items[0][0])], epoch=self.log.epoch, control=True,
                     base_timestamp=self.log.now)
        offset += 1
        for i in range(0, len(body), 500):
            group = body[i:i + 500]
            out += batch(offset, [record(j, v, key=k) for j, (k, v) in enumerate(group)], epoch=self.log.epoch,
                         base_timestamp=self.log.now)
            offset += len(group)
        key, value = control("SnapshotFooter", version=0)
        out += batch(offset, [record(0, value, key=key)], epoch=self.log.epoch, control=True,
                     base_timestamp=self.log.now)
        (self.log_dir / f"{end:020d}-{self.log.epoch:010d}.checkpoint").write_bytes(bytes(out))


def generate(out: Path, brokers: int = 60, racks: int = 3, topics: int = 10_000, partitions: int = 150_000,
             records: int = 5_000_000, seed: int = 1, segment_records: int = 1_000_000) -> dict[str, Any]:
    """Write the cluster under ``out`` (a data directory); returns what was written."""
    t0 = time.perf_counter()
    c = Cluster(out, brokers, racks, topics, partitions, seed, segment_records)
    c.bootstrap()
    each = max(1, partitions // topics)
    for _ in range(0, topics, 100):
        c.create_topics(min(100, topics - len(c.topics)), each)
        c.log.noop()
    snapped = False
    rounds = 0
    while c.log.records < records:
        rounds += 1
        for b in list(c.brokers.values()):
            c.restart(b)
            c.log.noop()
            if c.log.records >= records:
                break
            if b.broker_id % 10 == 0:
                c.churn()
                c.reassign(max(1, partitions // 1000))
            if not snapped and c.log.records >= records // 2:
                c.snapshot()
                snapped = True
        if c.log.records < records:
            c.crash(c.brokers[c.rng.choice(list(c.brokers))])
            c.delete_topics(max(1, topics // 200))
            c.create_topics(max(1, topics // 200), each)
            c.failover()
    c.log.close()
    c.snapshot()
    return {"records": c.log.records, "noops": c.log.noops, "end_offset": c.log.offset, "rounds": rounds,
            "topics": len(c.topics), "partitions": len(c.partitions), "brokers": brokers,
            "bytes": sum(f.stat().st_size for f in c.log_dir.iterdir()),
            "seconds": round(time.perf_counter() - t0, 1)}


def generated(root: Path, records: int, partitions: int = 150_000, topics: int = 10_000
              ) -> tuple[Path, dict[str, Any] | None]:
    """The big cluster of this size under ``root`` (its data directory is ``<path>/node-3000``), generated unless
    an earlier run left it; with what was written when generated now. It is written aside and renamed once
    complete, so that a generation killed midway is never taken for a finished one."""
    where = root / f"bigcluster-v{GENERATOR_VERSION}-{records}-{partitions}-{topics}"
    if where.exists():
        return where, None
    aside = where.with_name(where.name + ".partial")
    shutil.rmtree(aside, ignore_errors=True)
    print(f"generating {where} ...", flush=True)
    written = generate(aside / "node-3000", topics=topics, partitions=partitions, records=records)
    aside.rename(where)
    return where, written


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", type=Path)
    ap.add_argument("--brokers", type=int, default=60)
    ap.add_argument("--racks", type=int, default=3)
    ap.add_argument("--topics", type=int, default=10_000)
    ap.add_argument("--partitions", type=int, default=150_000)
    ap.add_argument("--records", type=int, default=5_000_000, help="non-NoOp records to write (at least)")
    ap.add_argument("--segment-records", type=int, default=1_000_000)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args(argv)
    print(generate(a.out, a.brokers, a.racks, a.topics, a.partitions, a.records, a.seed, a.segment_records))


if __name__ == "__main__":
    main()
