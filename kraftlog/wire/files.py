"""The files of a KRaft metadata log directory and how to read them.

``__cluster_metadata-0/``: segments ``<20-digit baseOffset>.log``; snapshots
``<20-digit endOffset>-<10-digit epoch>.checkpoint`` (endOffset exclusive), ``.checkpoint.deleted``
(pending deletion), ``.checkpoint.part`` (being written); ``quorum-state`` (JSON); beside it in the
data directory ``meta.properties`` and ``bootstrap.checkpoint``. The 0-0 checkpoint and
``bootstrap.checkpoint`` are bootstrap snapshots (``Snapshots.BOOTSTRAP_SNAPSHOT_ID``).
"""

from __future__ import annotations

import gc
import json
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kraftlog.wire.batches import CONTROL_MASK, Batch, Expect, Record, iter_batches
from kraftlog.wire.errors import KraftDecodeError
from kraftlog.wire.messages import Decoded, MetadataCodec, default_codec

SEGMENT = "segment"
SNAPSHOT = "snapshot"
BOOTSTRAP = "bootstrap"  # bootstrap.checkpoint or the 0-0 checkpoint
QUORUM_STATE = "quorum-state"
META_PROPERTIES = "meta.properties"

_SEGMENT_RE = re.compile(r"^(\d{20})\.log$")
_SNAPSHOT_RE = re.compile(r"^(\d{20})-(\d{10})\.checkpoint(\.deleted|\.part|-[^/]*\.part)?$")


@dataclass(frozen=True, slots=True)
class FileInfo:
    """What a file name says: its kind and, for segments and snapshots, offsets and epoch."""

    kind: str
    base_offset: int | None = None  # segments
    end_offset: int | None = None  # snapshots: exclusive end offset
    epoch: int | None = None  # snapshots
    deleted: bool = False  # *.checkpoint.deleted
    partial: bool = False  # *.checkpoint.part

    @property
    def is_log_data(self) -> bool:
        """True for files made of RecordBatches."""
        return self.kind in (SEGMENT, SNAPSHOT, BOOTSTRAP)

    @property
    def expect(self) -> Expect:
        """What the name says the batches hold (first offset, highest epoch, snapshot framing)."""
        if self.kind == SEGMENT:
            return Expect(first_offset=self.base_offset)
        if self.kind in (SNAPSHOT, BOOTSTRAP):
            return Expect(first_offset=0, max_epoch=self.epoch, snapshot=True)
        return Expect()

    @property
    def snapshot_id(self) -> str | None:
        """``<endOffset>-<epoch>`` for snapshots, as Kafka names them."""
        if self.end_offset is None:
            return None
        return f"{self.end_offset:020d}-{self.epoch:010d}"


def classify(name: str) -> FileInfo | None:
    """Classify a file by its name; None for files that are not part of the metadata log."""
    base = name.rsplit("/", 1)[-1]
    if base == "bootstrap.checkpoint":
        return FileInfo(BOOTSTRAP, end_offset=0, epoch=0)
    m = _SEGMENT_RE.match(base)
    if m:
        return FileInfo(SEGMENT, base_offset=int(m.group(1)))
    m = _SNAPSHOT_RE.match(base)
    if m:
        end, epoch, suffix = int(m.group(1)), int(m.group(2)), m.group(3) or ""
        kind = BOOTSTRAP if end == 0 and epoch == 0 else SNAPSHOT
        return FileInfo(kind, end_offset=end, epoch=epoch, deleted=suffix == ".deleted",
                        partial=suffix.endswith(".part"))
    if base == "quorum-state":
        return FileInfo(QUORUM_STATE)
    if base == "meta.properties":
        return FileInfo(META_PROPERTIES)
    return None


@dataclass(slots=True)
class LogRead:
    """Everything read from one file: batches (records decoded in place) and problems."""

    source: str
    info: FileInfo | None
    size: int
    batches: list[Batch] = field(default_factory=list)
    errors: list[KraftDecodeError] = field(default_factory=list)

    def records(self) -> Iterator[tuple[Batch, Record]]:
        """Every (batch, record) pair in file order."""
        for b in self.batches:
            for r in b.records:
                yield b, r

    @property
    def record_count(self) -> int:
        return sum(len(b.records) for b in self.batches)


_NULL_VALUE = Decoded(None, None, None, None, "error", "metadata record has a null value", 0)


def decode_value(codec: MetadataCodec, control: bool, key: bytes | None, value: bytes | None) -> Decoded:
    """The decoded value of a record of a control batch (``control``) or a metadata batch; never raises."""
    if control:
        return codec.decode_control(key, value)
    return codec.decode_metadata(value) if value is not None else _NULL_VALUE


def batch_decoder(codec: MetadataCodec) -> Callable[[Batch], None]:
    """A function that decodes every record value of a batch into ``record.decoded``."""

    def decode(batch: Batch) -> None:
        control = bool(batch.attributes & CONTROL_MASK)
        for r in batch.records:
            r.decoded = decode_value(codec, control, r.key, r.value)

    return decode


def expect_of(source: str) -> Expect:
    """What the name of ``source`` says its batches hold (nothing for a name that is not Kafka's)."""
    info = classify(source) if source else None
    return info.expect if info is not None else Expect()


def iter_log(data: bytes, source: str = "", codec: MetadataCodec | None = None
             ) -> Iterator[Batch | KraftDecodeError]:
    """Yield each batch of a segment or snapshot with its records decoded, and each framing problem."""
    return iter_batches(data, source, on_batch=batch_decoder(codec or default_codec()), expect=expect_of(source))


def read_log(data: bytes, source: str = "", codec: MetadataCodec | None = None) -> LogRead:
    """Read a whole segment or snapshot held in memory."""
    out = LogRead(source, classify(source) if source else None, len(data))
    batches, errors = out.batches, out.errors
    with paused_gc():
        collect(iter_log(data, source, codec), batches, errors)
    return out


@contextmanager
def paused_gc() -> Iterator[None]:
    """Pause the cyclic GC while building many acyclic objects (it would rescan them, for nothing)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def collect(items: Iterator[Batch | KraftDecodeError], batches: list[Batch],
            errors: list[KraftDecodeError]) -> None:
    """Put the batches of ``items`` into ``batches`` and every problem, framing or in a batch, into ``errors``.

    An incomplete snapshot (no SnapshotHeader or SnapshotFooter) is not a snapshot Kafka would load:
    every batch of it carries the problem, so none of its records is trusted (nor used as a base).
    """
    for item in items:
        if isinstance(item, Batch):
            batches.append(item)
            if item.errors:
                errors.extend(item.errors)
        else:
            errors.append(item)
            if item.kind == "snapshot_incomplete":
                for b in batches:
                    b.add_error(item)


def read_file(path: str | Path, codec: MetadataCodec | None = None) -> LogRead:
    """Read one segment or snapshot file; an unreadable file becomes one ``io`` error."""
    p = Path(path)
    try:
        data = p.read_bytes()
    except OSError as e:
        out = LogRead(str(p), classify(p.name), 0)
        out.errors.append(KraftDecodeError(f"cannot read: {e.strerror}", source=str(p), kind="io"))
        return out
    return read_log(data, str(p), codec)


# -- side files -----------------------------------------------------------------------------------

def parse_properties(text: str) -> dict[str, str]:
    """Parse a Java ``.properties`` file (``meta.properties``): ``key=value`` lines, ``#`` comments."""
    props: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        sep = min((i for i in (line.find("="), line.find(":")) if i >= 0), default=-1)
        if sep < 0:
            props[line] = ""
            continue
        props[line[:sep].strip()] = line[sep + 1 :].strip().replace("\\:", ":").replace("\\=", "=")
    return props


@dataclass(frozen=True, slots=True)
class MetaProperties:
    """``meta.properties``: the identity of a node's data directory."""

    cluster_id: str | None
    node_id: int | None
    directory_id: str | None
    version: int | None
    raw: dict[str, str]
    problem: str | None = None  # why Kafka would not accept it (``MetaProperties``): the identity is in doubt


def parse_meta_properties(text: str) -> MetaProperties:
    """Parse ``meta.properties`` (v0: ``broker.id``; v1: ``node.id``, ``directory.id``).

    What Kafka's ``MetaProperties`` would reject (binary bytes, no version 0 or 1, no cluster.id, a node
    id that is not a number) is kept as ``problem``.
    """
    p = parse_properties(text)
    node = p.get("node.id", p.get("broker.id"))
    version = p.get("version")
    node_id = int(node) if node not in (None, "") and node.lstrip("-").isdigit() else None
    problem = None
    if "\x00" in text or "\ufffd" in text:
        problem = "meta.properties is not a text properties file (binary bytes)"
    elif version not in ("0", "1"):
        problem = f"meta.properties has no version 0 or 1 (version={version!r})"
    elif not p.get("cluster.id"):
        problem = "meta.properties has no cluster.id"
    elif node is not None and node_id is None:
        problem = f"meta.properties: node id {node!r} is not a number"
    elif version == "1" and node is None:
        problem = "meta.properties version 1 has no node.id"
    return MetaProperties(
        cluster_id=p.get("cluster.id") or None,
        node_id=node_id,
        directory_id=p.get("directory.id"),
        version=int(version) if version and version.isdigit() else None,
        raw=p,
        problem=problem,
    )


def parse_quorum_state(text: str) -> dict[str, Any]:
    """Parse ``quorum-state`` (QuorumStateData JSON plus ``data_version``) into snake_case keys."""
    from kraftlog.schema.model import column_name

    doc = json.loads(text)
    if not isinstance(doc, dict):
        raise KraftDecodeError("quorum-state is not a JSON object", kind="bad_value")
    out: dict[str, Any] = {column_name(k[:1].upper() + k[1:]) if k != "data_version" else k: v
                           for k, v in doc.items()}
    return out
