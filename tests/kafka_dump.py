"""Parse the text that ``kafka-dump-log.sh --cluster-metadata-decoder`` prints (the reference decode)."""

from __future__ import annotations

import gzip
import re
from dataclasses import dataclass, field
from pathlib import Path

_KV = re.compile(r"(\w+): (\S+)")
_RECORD = re.compile(r"^\| offset: (-?\d+) (CreateTime|LogAppendTime|NoTimestampType): (-?\d+) keySize: (-?\d+) "
                     r"valueSize: (-?\d+) sequence: (-?\d+) headerKeys: \[(.*?)\] (.*)$")


@dataclass
class RefRecord:
    offset: int
    timestamp: int
    key_size: int
    value_size: int
    payload: str | None = None  # the JSON after "payload: " for metadata records
    payload_error: str | None = None  # "Error at ..." text
    control_name: str | None = None  # SnapshotHeader, KRaftVersion, LEADER_CHANGE(2), ...
    control_json: str | None = None


@dataclass
class RefBatch:
    fields: dict[str, str]
    records: list[RefRecord] = field(default_factory=list)

    def int(self, key: str) -> int:
        return int(self.fields[key])


@dataclass
class RefDump:
    header: list[str] = field(default_factory=list)
    batches: list[RefBatch] = field(default_factory=list)
    trailing: list[str] = field(default_factory=list)  # "Found N invalid bytes at the end ..."


def parse_dump(path: Path) -> RefDump:
    opener = gzip.open if path.suffix == ".gz" else open
    out = RefDump()
    with opener(path, "rt", encoding="utf-8") as fh:  # type: ignore[operator]
        for line in fh:
            line = line.rstrip("\n")
            if line.startswith("baseOffset:"):
                out.batches.append(RefBatch(dict(_KV.findall(line))))
            elif line.startswith("| offset:"):
                m = _RECORD.match(line)
                assert m, line
                rec = RefRecord(int(m.group(1)), int(m.group(3)), int(m.group(4)), int(m.group(5)))
                rest = m.group(8)
                if rest.startswith("payload: "):
                    text = rest[len("payload: "):]
                    if text.startswith("Error at"):
                        rec.payload_error = text
                    else:
                        rec.payload = text
                elif rest.startswith("controlType: "):
                    rec.control_name = rest[len("controlType: "):]
                elif rest.startswith("endTxnMarker: "):
                    rec.control_name = rest
                else:
                    name, _, js = rest.partition(" ")
                    rec.control_name = name.rstrip(":")
                    rec.control_json = js
                out.batches[-1].records.append(rec)
            elif line.startswith("Found "):
                out.trailing.append(line)
            elif line:
                out.header.append(line)
    return out


def reference_for(data_file: Path, shared: Path) -> Path | None:
    """The reference dump of a data file of ``shared`` (corpus, local runs, scenario A), if there is one."""
    rel = data_file.relative_to(shared)
    parts = rel.parts
    if parts[:2] == ("corpus", "real"):
        ref = shared / "corpus" / "reference" / "kafka-3.9-dump-log" / Path(*parts[2:])
        ref = ref.with_name(ref.name + ".txt.gz")
    elif parts[:2] == ("corpus", "local"):
        ref = shared / "corpus" / "local" / parts[2] / "dump-log-output" / (data_file.name + ".txt")
    elif parts[:2] == ("scenarios", "A"):
        ref = shared / "scenarios" / "A" / "reference" / "dump-log" / parts[2] / (data_file.name + ".txt")
    else:
        return None
    return ref if ref.exists() else None
