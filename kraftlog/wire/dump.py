"""``kraftlog dump``: one JSON object per record, and ``--summary`` counts (no Spark)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kraftlog.schema.registry import load_schemas
from kraftlog.wire.batches import Batch, Record
from kraftlog.wire.errors import KraftDecodeError
from kraftlog.wire.files import FileInfo, iter_log, paused_gc
from kraftlog.wire.kafka_json import dumps, payload
from kraftlog.wire.messages import Decoded
from kraftlog.wire.redact import default_redactor

DUMP_KEYS = ("file", "position", "baseOffset", "offset", "partitionLeaderEpoch", "timestamp", "isControl",
             "type", "version", "data", "error")


def record_line(source: str, batch: Batch, record: Record, decoded: Decoded) -> dict[str, Any]:
    """The dump object of one record (``data`` as Kafka prints it)."""
    error = decoded.error
    if batch.errors:
        error = "; ".join([e.reason for e in batch.errors] + ([error] if error else []))
    return {
        "file": source,
        "position": batch.position,
        "baseOffset": batch.base_offset,
        "offset": record.offset,
        "partitionLeaderEpoch": batch.partition_leader_epoch,
        "timestamp": record.timestamp,
        "isControl": batch.is_control,
        "type": decoded.type,
        "version": decoded.version,
        "data": payload(decoded),
        "error": error,
    }


def error_line(source: str, error: KraftDecodeError) -> dict[str, Any]:
    """The dump object of a problem that is not attached to a record."""
    line: dict[str, Any] = dict.fromkeys(DUMP_KEYS)
    line.update(file=source, position=error.position, error=error.reason)
    return line


def dump_lines(files: list[tuple[Path, FileInfo]], redact: bool = True,
               problems: Summary | None = None) -> Iterator[str]:
    """Yield the JSON lines of ``kraftlog dump`` for ``files``; ``problems`` counts each file's problems."""
    redactor: Callable[[Decoded], Decoded] = default_redactor() if redact else (lambda d: d)
    found = problems if problems is not None else Summary()
    for path, _info in files:
        source = str(path)
        try:
            data = path.read_bytes()
        except OSError as e:
            found.problem(f"{source}: cannot read: {e.strerror}")
            yield dumps(error_line(source, KraftDecodeError(f"cannot read: {e.strerror}", kind="io")))
            continue
        for item in iter_log(data, source):
            if isinstance(item, KraftDecodeError):
                found.problem(item.describe())
                yield dumps(error_line(source, item))
                continue
            for problem in item.errors:
                found.problem(problem.describe())
            if not item.records and item.errors:
                for problem in item.errors:
                    line = error_line(source, problem)
                    line.update(baseOffset=item.base_offset, partitionLeaderEpoch=item.partition_leader_epoch,
                                isControl=item.is_control)
                    yield dumps(line)
                continue
            for r in item.records:
                assert r.decoded is not None
                if r.decoded.error and not item.errors:
                    found.problem(f"{source}@{item.position}: offset {r.offset}: {r.decoded.error}")
                yield dumps(record_line(source, item, r, redactor(r.decoded)))


SHOWN = 50  # problems kept for ``kraftlog dump --summary`` to print


@dataclass
class Summary:
    """Counts for ``kraftlog dump --summary``."""

    files: int = 0
    bytes: int = 0
    batches: int = 0
    control_batches: int = 0
    records: int = 0
    crc_failures: int = 0
    errors: list[str] = field(default_factory=list)  # the first SHOWN problems
    error_count: int = 0
    types: Counter[tuple[str, int | None]] = field(default_factory=Counter)
    log_offsets: tuple[int, int] | None = None
    snapshots: list[str] = field(default_factory=list)
    metadata_version: int | None = None
    metadata_version_offset: int | None = None

    def add_file(self, path: Path, info: FileInfo) -> None:
        self.files += 1
        try:
            data = path.read_bytes()
        except OSError as e:
            self.problem(f"{path}: cannot read: {e.strerror}")
            return
        self.bytes += len(data)
        if info.kind == "snapshot" and info.snapshot_id:
            self.snapshots.append(info.snapshot_id + (" (deleted)" if info.deleted else ""))
        with paused_gc():
            for item in iter_log(data, str(path)):
                if isinstance(item, KraftDecodeError):
                    self.problem(item.describe())
                    continue
                self._add_batch(item, info)

    def problem(self, text: str) -> None:
        """Count a problem; the first ``SHOWN`` are kept to print (a hostile file may hold millions)."""
        self.error_count += 1
        if len(self.errors) < SHOWN:
            self.errors.append(text)

    def _add_batch(self, batch: Batch, info: FileInfo) -> None:
        self.batches += 1
        self.control_batches += batch.is_control
        self.crc_failures += not batch.crc_valid
        for e in batch.errors:
            self.problem(e.describe())
        for r in batch.records:
            d = r.decoded
            assert d is not None
            self.records += 1
            self.types[(d.type or f"apiKey {d.api_key}", d.version)] += 1
            if d.error and not batch.errors:
                self.problem(f"{batch.position}: offset {r.offset}: {d.error}")
            if info.kind == "segment":
                lo, hi = self.log_offsets or (r.offset, r.offset)
                self.log_offsets = (min(lo, r.offset), max(hi, r.offset))
                if (d.type == "FEATURE_LEVEL_RECORD" and d.data and d.data.get("name") == "metadata.version"
                        and (self.metadata_version_offset is None or r.offset >= self.metadata_version_offset)):
                    self.metadata_version = d.data["feature_level"]
                    self.metadata_version_offset = r.offset

    def render(self) -> str:
        schemas = load_schemas()
        mv = "unknown"
        if self.metadata_version is not None:
            mv = f"{schemas.metadata_version_name(self.metadata_version)} (feature level {self.metadata_version}, " \
                 f"set at offset {self.metadata_version_offset})"
        lines = [
            f"files: {self.files}  bytes: {self.bytes}",
            f"batches: {self.batches} (control: {self.control_batches})  records: {self.records}  "
            f"CRC failures: {self.crc_failures}  errors: {self.error_count}",
            "log offsets: " + (f"{self.log_offsets[0]}..{self.log_offsets[1]}" if self.log_offsets else "none"),
            f"snapshots: {len(self.snapshots)}" + (f" (newest {max(self.snapshots)})" if self.snapshots else ""),
            f"metadata.version: {mv}",
            "",
            f"{'type':<40} {'version':>7} {'records':>9}",
        ]
        for (t, v), n in sorted(self.types.items(), key=lambda kv: (kv[0][0], kv[0][1] or -1)):
            lines.append(f"{t:<40} {'' if v is None else v:>7} {n:>9}")
        if self.errors:
            lines.append("")
            lines.append("errors:")
            lines.extend(f"  {e}" for e in self.errors)
            if self.error_count > len(self.errors):
                lines.append(f"  ... {self.error_count - len(self.errors)} more")
        return "\n".join(lines)
