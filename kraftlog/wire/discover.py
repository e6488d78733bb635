"""Find metadata log files and KRaft data directories, on any file system.

The walk is written against a ``Lister`` (list one directory) so that the same rules serve the local
tools (``os.scandir``) and the Spark jobs (``kraftlog.storage``: pyarrow file systems, local to S3, GCS, Azure, HDFS):

* a directory holding ``__cluster_metadata-0`` is a data directory: its metadata folder is listed,
  ``meta.properties`` and ``bootstrap.checkpoint`` beside it are noted, and nothing else below it is
  walked (the rest are topic partitions, possibly large);
* a path naming ``__cluster_metadata-0`` itself is taken as that folder;
* any other directory is walked into.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from kraftlog.errors import KraftlogError
from kraftlog.wire.files import BOOTSTRAP, SEGMENT, SNAPSHOT, FileInfo, classify

METADATA_DIR = "__cluster_metadata-0"
log = logging.getLogger("kraftlog")
_KIND_ORDER = {BOOTSTRAP: 0, SNAPSHOT: 1, SEGMENT: 2}


@dataclass(frozen=True, slots=True)
class Entry:
    """One directory entry as a file system reports it."""

    path: str
    name: str
    is_dir: bool
    size: int = 0
    mtime_ms: int = 0


Lister = Callable[[str], list[Entry]]


def local_lister(path: str) -> list[Entry]:
    """List a local directory; entries that cannot be followed (a symlink loop, a dangling link, a link
    back to a directory above, no permission) are skipped with a warning naming them."""
    out: list[Entry] = []
    try:
        it = os.scandir(path)
    except FileNotFoundError:
        raise
    except NotADirectoryError as not_dir:  # (worded as the object stores' listers word it: kraftlog.storage)
        raise NotADirectoryError(f"{path}: a file, not a directory") from not_dir
    except OSError as denied:  # no permission, ...
        log.warning("skipped %s: %s", path, denied.strerror)
        return out
    here = os.path.realpath(path)
    with it:
        for e in it:
            try:
                st = e.stat()
                is_dir = e.is_dir()
                if is_dir and e.is_symlink():
                    target = os.path.realpath(e.path)
                    if here == target or here.startswith(target.rstrip("/") + "/"):
                        log.warning("skipped %s: a symbolic link back to %s (a loop)", e.path, target)
                        continue
            except OSError as err:
                log.warning("skipped %s: %s", e.path, err.strerror)
                continue
            out.append(Entry(e.path, e.name, is_dir, 0 if is_dir else st.st_size, int(st.st_mtime * 1000)))
    return out


def _join(parent: str, name: str) -> str:
    return parent.rstrip("/") + "/" + name


def _basename(path: str) -> str:
    return path.rstrip("/").rsplit("/", 1)[-1]


def sort_key(path: str | Path, info: FileInfo) -> tuple[str, int, int, str]:
    """Directory, then bootstrap < snapshots < segments, then offset order."""
    p = str(path)
    offset = info.base_offset if info.base_offset is not None else (info.end_offset or 0)
    parent, _, name = p.rpartition("/")
    return (parent, _KIND_ORDER.get(info.kind, 3), offset, name)


@dataclass(slots=True)
class DataDir:
    """One node's data directory and what the walk found in it."""

    input_root: str
    root: str  # the folder holding __cluster_metadata-0
    metadata_dir: str
    meta_properties: Entry | None = None
    bootstrap_checkpoint: Entry | None = None
    quorum_state: Entry | None = None
    files: list[tuple[Entry, FileInfo]] = field(default_factory=list)

    @property
    def top(self) -> str:
        """The first directory under the input root on the way to this data directory."""
        root = self.input_root.rstrip("/")
        rel = self.root[len(root):].strip("/") if self.root.startswith(root) else ""
        return rel.split("/", 1)[0] if rel else _basename(root)


def scan(roots: Iterable[str], lister: Lister = local_lister) -> list[DataDir]:
    """Every data directory under ``roots`` with its log files (segments, snapshots, bootstrap)."""
    found: dict[str, DataDir] = {}
    for root in roots:
        root = str(root)
        if _basename(root) == METADATA_DIR:
            parent = root.rstrip("/").rsplit("/", 1)[0]
            _add(found, root, parent, lister(parent), lister)
            continue
        stack = [root]
        while stack:
            d = stack.pop()
            entries = lister(d)
            if any(e.is_dir and e.name == METADATA_DIR for e in entries):
                _add(found, root, d, entries, lister)
                continue
            stack.extend(sorted((e.path for e in entries if e.is_dir), reverse=True))
    return sorted(found.values(), key=lambda dd: dd.metadata_dir)


class NoInputError(KraftlogError):
    """The inputs hold no KRaft data directory (a wrong path would otherwise "succeed" every hour)."""


def find_data_dirs(roots: list[str], lister: Lister = local_lister, allow_empty: bool = False) -> list[DataDir]:
    """``scan``, and a ``NoInputError`` naming the roots when they hold no data directory (unless ``allow_empty``), or
    one of them is a file."""
    try:
        dirs = scan(roots, lister)
    except NotADirectoryError as e:  # (a root: what a root holds is listed as files or folders)
        raise NoInputError(f"{e}: the inputs are KRaft data directories (folders holding {METADATA_DIR}, or folders "
                           "above them); `kraftlog dump` prints a file") from e
    if not dirs and not allow_empty:
        raise NoInputError(f"no KRaft data directory (a folder holding {METADATA_DIR}) under {', '.join(roots)}")
    return dirs


def _add(found: dict[str, DataDir], input_root: str, data_dir: str, entries: list[Entry], lister: Lister) -> None:
    md = next((e.path for e in entries if e.is_dir and e.name == METADATA_DIR), _join(data_dir, METADATA_DIR))
    dd = DataDir(input_root=input_root, root=data_dir, metadata_dir=md)
    for e in entries:
        if e.name == "meta.properties" and not e.is_dir:
            dd.meta_properties = e
        elif e.name == "bootstrap.checkpoint" and not e.is_dir:
            dd.bootstrap_checkpoint = e
    files: list[tuple[Entry, FileInfo]] = []
    for e in lister(md):
        if e.is_dir:
            continue
        info = classify(e.name)
        if info is None:
            continue
        if info.kind == "quorum-state":
            dd.quorum_state = e
        elif info.is_log_data and not info.partial:
            files.append((e, info))
    if dd.bootstrap_checkpoint is not None:
        info = classify("bootstrap.checkpoint")
        assert info is not None
        files.append((dd.bootstrap_checkpoint, info))
    dd.files = sorted(files, key=lambda ef: sort_key(ef[0].path, ef[1]))
    found[md] = dd


def log_files(paths: Iterable[str | Path]) -> list[tuple[Path, FileInfo]]:
    """Every segment / snapshot / bootstrap file named by ``paths`` (files, or directories walked)."""
    found: dict[Path, FileInfo] = {}
    for p in map(Path, paths):
        if p.is_dir():
            for root, dirs, names in os.walk(p):
                dirs.sort()
                for name in names:
                    info = classify(name)
                    if info is not None and info.is_log_data and not info.partial:
                        found[Path(root) / name] = info
        else:
            info = classify(p.name)
            # a file named explicitly is read even if its name is unusual: treat it as a segment
            found[p] = info if info is not None and info.is_log_data else FileInfo(SEGMENT)
    return sorted(found.items(), key=lambda kv: sort_key(*kv))
