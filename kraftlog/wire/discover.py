"""Find metadata log files and data directories on a local file system."""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from kraftlog.wire.files import BOOTSTRAP, SEGMENT, SNAPSHOT, FileInfo, classify

METADATA_DIR = "__cluster_metadata-0"
_KIND_ORDER = {BOOTSTRAP: 0, SNAPSHOT: 1, SEGMENT: 2}


def sort_key(path: Path, info: FileInfo) -> tuple[str, int, int, str]:
    """Directory, then bootstrap < snapshots < segments, then offset order."""
    offset = info.base_offset if info.base_offset is not None else (info.end_offset or 0)
    return (str(path.parent), _KIND_ORDER.get(info.kind, 3), offset, path.name)


def log_files(paths: Iterable[str | Path]) -> list[tuple[Path, FileInfo]]:
    """Every segment / snapshot / bootstrap file named by ``paths`` (files, or directories walked)."""
    found: dict[Path, FileInfo] = {}
    for p in map(Path, paths):
        if p.is_dir():
            for root, dirs, names in os.walk(p):
                dirs.sort()
                for name in names:
                    info = classify(name)
                    if info is not None and info.is_log_data:
                        found[Path(root) / name] = info
        else:
            info = classify(p.name)
            # a file named explicitly is read even if its name is unusual: treat it as a segment
            found[p] = info if info is not None and info.is_log_data else FileInfo(SEGMENT)
    return sorted(found.items(), key=lambda kv: sort_key(*kv))


@dataclass(slots=True)
class DataDir:
    """One node's data directory: the ``__cluster_metadata-0`` folder and the files beside it."""

    root: Path  # the folder holding __cluster_metadata-0 (or the metadata folder itself if alone)
    metadata_dir: Path
    meta_properties: Path | None = None
    bootstrap_checkpoint: Path | None = None
    quorum_state: Path | None = None
    files: list[tuple[Path, FileInfo]] = field(default_factory=list)


def data_dirs(paths: Iterable[str | Path]) -> list[DataDir]:
    """Every KRaft data directory under ``paths``.

    A path may be a data directory (holding ``__cluster_metadata-0``), the metadata folder itself,
    or any folder above them.
    """
    found: dict[Path, DataDir] = {}
    for p in map(Path, paths):
        candidates: list[Path] = []
        if p.name == METADATA_DIR and p.is_dir():
            candidates.append(p)
        elif p.is_dir():
            for root, dirs, _ in os.walk(p):
                dirs.sort()
                if METADATA_DIR in dirs:
                    candidates.append(Path(root) / METADATA_DIR)
                dirs[:] = [d for d in dirs if d != METADATA_DIR]
        for md in candidates:
            parent = md.parent
            dd = DataDir(root=parent, metadata_dir=md)
            if (parent / "meta.properties").is_file():
                dd.meta_properties = parent / "meta.properties"
            if (parent / "bootstrap.checkpoint").is_file():
                dd.bootstrap_checkpoint = parent / "bootstrap.checkpoint"
            if (md / "quorum-state").is_file():
                dd.quorum_state = md / "quorum-state"
            dd.files = log_files([md] + ([dd.bootstrap_checkpoint] if dd.bootstrap_checkpoint else []))
            found[md.resolve()] = dd
    return sorted(found.values(), key=lambda d: str(d.metadata_dir))
