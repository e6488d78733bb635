"""Where files live: local disk, S3, GCS, Azure, HDFS, reached through pyarrow.fs and delta-rs (no jar).

A ``Storage`` carries the options of one run: the standard environment variables (``AWS_ENDPOINT_URL``,
``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN``, ``AWS_REGION``, ...) overlaid with
the profile's ``[storage]`` section, which uses the same names. It is small and picklable, so the
driver hands it to the executors, which open the same file systems with the same options.

Paths are URIs. ``s3a://`` and ``s3n://`` (Hadoop's names) are taken as ``s3://``; a local path is
named ``file:/abs/path``, as Hadoop qualifies it (the form earlier warehouses' ledgers hold).
"""

from __future__ import annotations

import functools
import logging
import os
import re
import shutil
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from pyarrow import fs as pafs

from kraftlog.errors import KraftlogError
from kraftlog.wire.discover import Entry, Lister, local_lister

log = logging.getLogger("kraftlog")

# the variables read from the environment (and allowed in a profile's [storage] section)
_OPTION = re.compile(r"^(AWS|AZURE|GOOGLE|HDFS)_[A-Z0-9_]+$")
_S3_ALIASES = ("s3a://", "s3n://")


class StorageError(KraftlogError, OSError):
    """A path that cannot be reached, named with the reason."""


class NotADirectory(StorageError, NotADirectoryError):
    """A file listed as a directory."""


def normalize(path: str) -> str:
    """The URI kraftlog names ``path`` by: ``s3a://b/k`` -> ``s3://b/k``; ``/x``, ``file:///x`` -> ``file:/x``."""
    for alias in _S3_ALIASES:
        if path.startswith(alias):
            return "s3://" + path[len(alias):]
    if path.startswith("file:"):
        return "file:/" + path[len("file:"):].lstrip("/")
    if "://" in path:
        return path
    return "file:" + os.path.abspath(os.path.expanduser(path))


def is_local(uri: str) -> bool:
    return uri.startswith("file:")


def local_path(uri: str) -> str:
    """The OS path of a ``file:`` URI."""
    return "/" + uri[len("file:"):].lstrip("/")


def scheme(uri: str) -> str:
    return "file" if is_local(uri) else urlsplit(uri).scheme


def bucket_root(uri: str) -> str:
    """The bucket (or container) of an object store's URI: ``s3://b/k/x`` -> ``s3://b``."""
    bucket_end = uri.index("/", uri.index("://") + 3) if uri.count("/") > 2 else len(uri)
    return uri[:bucket_end]


def join(base: str, *parts: str) -> str:
    return "/".join([base.rstrip("/"), *[p.strip("/") for p in parts]])


@dataclass(frozen=True)
class Storage:
    """Options for reaching object stores; ``options`` use the standard environment variables' names."""

    options: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def from_environment(cls, section: Mapping[str, Any] | None = None,
                         environ: Mapping[str, str] | None = None) -> Storage:
        """The standard variables of ``environ`` (default: ``os.environ``), overlaid with a profile section."""
        env = os.environ if environ is None else environ
        options = {k: v for k, v in env.items() if _OPTION.match(k)}
        for k, v in (section or {}).items():
            if not _OPTION.match(k):
                raise ValueError(f"[storage] {k}: not a storage option (expected a standard variable name such as "
                                 "AWS_ENDPOINT_URL, AWS_REGION, AWS_ACCESS_KEY_ID, AZURE_STORAGE_ACCOUNT_NAME)")
            options[k] = str(v)
        return cls(dict(sorted(options.items())))

    # -- file systems -------------------------------------------------------------------------------
    def filesystem(self, uri: str) -> tuple[pafs.FileSystem, str]:
        """(pyarrow file system, path inside it) for ``uri``."""
        uri = normalize(uri)
        if is_local(uri):
            return pafs.LocalFileSystem(), local_path(uri)
        parts = urlsplit(uri)
        if parts.scheme == "s3":
            return _s3(tuple(sorted(self.options.items()))), (parts.netloc + parts.path).rstrip("/")
        try:
            filesystem, path = pafs.FileSystem.from_uri(uri)
        except Exception as e:  # pyarrow raises ArrowInvalid / ArrowNotImplementedError / OSError
            raise StorageError(f"{uri}: cannot open this file system with pyarrow ({e})") from e
        return filesystem, path

    def delta_options(self) -> dict[str, str]:
        """delta-rs ``storage_options``: the same variables (plain-HTTP endpoints allowed, as for a local server)."""
        out = dict(self.options)
        if self.endpoint.startswith("http://"):
            out.setdefault("AWS_ALLOW_HTTP", "true")
        return out

    @property
    def endpoint(self) -> str:
        """The S3 endpoint the options name ("" for AWS's own)."""
        return self.options.get("AWS_ENDPOINT_URL_S3") or self.options.get("AWS_ENDPOINT_URL") or ""

    def table_uri(self, uri: str) -> str:
        """The URI delta-rs opens: a local path for ``file:``, else the normalized URI."""
        uri = normalize(uri)
        return local_path(uri) if is_local(uri) else uri

    def delta_table(self, uri: str) -> Any:
        """The ``deltalake.DeltaTable`` at ``uri`` (its log read once), None where there is no Delta table."""
        from deltalake import DeltaTable
        from deltalake.exceptions import TableNotFoundError

        try:
            return DeltaTable(self.table_uri(uri), storage_options=self.delta_options())
        except TableNotFoundError:
            return None

    # -- operations ---------------------------------------------------------------------------------
    def lister(self) -> Lister:
        """List one directory: ``os.scandir`` for local paths (fast), pyarrow for the others."""
        def lister(path: str) -> list[Entry]:
            uri = normalize(path)
            if is_local(uri):
                try:
                    return [Entry("file:" + e.path, e.name, e.is_dir, e.size, e.mtime_ms)
                            for e in local_lister(local_path(uri))]
                except FileNotFoundError as e:
                    raise StorageError(f"{uri}: no such directory") from e
                except NotADirectoryError as e:
                    raise NotADirectory(f"{uri}: a file, not a directory") from e
            filesystem, base = self.filesystem(uri)
            prefix = uri[: len(uri) - len(uri.split("://", 1)[1])]  # "s3://"
            infos = filesystem.get_file_info(pafs.FileSelector(base, allow_not_found=True))
            if not infos:  # (an object store lists an object's own key as an empty folder)
                found = filesystem.get_file_info(base).type
                if found == pafs.FileType.NotFound:
                    raise StorageError(f"{uri}: no such directory")
                if found == pafs.FileType.File:
                    raise NotADirectory(f"{uri}: a file, not a directory")
            return [Entry(prefix + i.path, i.base_name, i.type == pafs.FileType.Directory,
                          int(i.size or 0) if i.type == pafs.FileType.File else 0,
                          int(i.mtime_ns // 1_000_000) if i.mtime_ns is not None else 0) for i in infos]
        return lister

    def read_bytes(self, uri: str, size: int | None = None, start: int = 0) -> bytes:
        """The content of ``uri``; with ``size``, its bytes from ``start`` up to ``size`` at most (one ranged read on
        an object store): a file appended to since it was listed (a live log segment) is read as it was listed."""
        uri = normalize(uri)
        if is_local(uri):
            with open(local_path(uri), "rb") as fh:
                if size is None:
                    return fh.read()
                fh.seek(start)
                return fh.read(max(0, size - start))
        if scheme(uri) in OBJECT_SCHEMES and (size is None or 0 < size - start <= SINGLE_GET_BYTES):
            import obstore
            from obstore.exceptions import BaseError

            store, key = self._object_store(uri)
            try:  # one GET: pyarrow's readers ask the object's size first (a HEAD) for every file; (the bytes are
                # copied out of obstore's buffer once: a bigger range is read by pyarrow, into its bytes directly)
                return bytes(obstore.get(store, key, options={} if size is None else {"range": (start, size)}).bytes())
            except BaseError:  # (a missing object is a FileNotFoundError, raised as it is)
                pass  # a range past the end of an object cut since it was listed, ...: read as pyarrow reads it
        filesystem, path = self.filesystem(uri)
        if size is None:
            with filesystem.open_input_stream(path) as fh:
                return bytes(fh.read())
        with filesystem.open_input_file(path) as fh:
            return bytes(fh.read_at(max(0, min(size, fh.size()) - start), start))

    def write_bytes(self, uri: str, data: bytes) -> None:
        """Write ``uri`` whole: readers see the old content or the new, never part (an object store's PUT;
        a local file is written aside and renamed)."""
        uri = normalize(uri)
        if is_local(uri):
            path = local_path(uri)
            tmp = _write_aside(path, data)
            try:
                os.replace(tmp, path)
            except OSError:  # (``path`` a folder: nothing is left beside it)
                os.unlink(tmp)
                raise
            return
        filesystem, path = self.filesystem(uri)
        with open_output(filesystem, path) as out:
            out.write(data)

    def delete(self, uri: str) -> None:
        """Remove the file ``uri`` (on an object store one DELETE: pyarrow's makes a marker of its folder after)."""
        uri = normalize(uri)
        if is_local(uri):
            os.remove(local_path(uri))
        elif scheme(uri) in OBJECT_SCHEMES:
            import obstore

            obstore.delete(*self._object_store(uri))
        else:
            filesystem, path = self.filesystem(uri)
            filesystem.delete_file(path)

    def delete_tree(self, uri: str) -> None:
        """Remove the folder ``uri`` and all under it, if it is there (on an object store: the keys under it)."""
        uri = normalize(uri)
        if is_local(uri):
            if os.path.exists(local_path(uri)):
                shutil.rmtree(local_path(uri))
        elif scheme(uri) in OBJECT_SCHEMES:
            import obstore

            store, key = self._object_store(uri)
            keys = [meta["path"] for chunk in obstore.list(store, prefix=key.rstrip("/") + "/") for meta in chunk]
            if keys:
                obstore.delete(store, keys)
        else:
            filesystem, path = self.filesystem(uri)
            if filesystem.get_file_info(path).type != pafs.FileType.NotFound:
                filesystem.delete_dir(path)

    def create(self, uri: str, data: bytes) -> bool:
        """Create ``uri`` with ``data`` only if nothing is there; False when it already exists. Atomic on a
        local disk (written aside, then hard-linked in), S3 (``If-None-Match: *``), GCS and Azure (obstore)."""
        uri = normalize(uri)
        if is_local(uri):
            path = local_path(uri)
            tmp = _write_aside(path, data)
            try:
                os.link(tmp, path)
            except FileExistsError:
                return False
            finally:
                os.unlink(tmp)
            return True
        if scheme(uri) in OBJECT_SCHEMES:
            import obstore
            from obstore.exceptions import AlreadyExistsError

            store, key = self._object_store(uri)
            try:
                obstore.put(store, key, data, mode="create")
            except AlreadyExistsError:
                return False
            return True
        # HDFS and others: no create-if-absent through pyarrow; check, then write (not atomic)
        log.warning("%s: this file system offers no atomic create; the lease only guards against runs that are "
                    "not started within the same instant", uri)
        if self.exists(uri):
            return False
        self.write_bytes(uri, data)
        return True

    def _object_store(self, uri: str) -> tuple[Any, str]:
        """An obstore store for the bucket or container of ``uri`` (one per bucket and options: its connections
        are kept), and the key inside it."""
        root = bucket_root(uri)
        key = uri[len(root):].lstrip("/")
        if scheme(uri) != "s3":
            return _obstore(root, (), False), key
        config = tuple(sorted((_S3_CONFIG[k], v) for k, v in self.options.items() if k in _S3_CONFIG))
        return _obstore(root, config, self.endpoint.startswith("http://")), key

    def file_type(self, uri: str) -> pafs.FileType:
        """What ``uri`` is: a file, a directory, or not found (one request)."""
        filesystem, path = self.filesystem(uri)
        return filesystem.get_file_info(path).type

    def exists(self, uri: str) -> bool:
        return self.file_type(uri) != pafs.FileType.NotFound

    def is_dir(self, uri: str) -> bool:
        return self.file_type(uri) == pafs.FileType.Directory

    def folder(self, uri: str) -> str:
        """``uri`` normalized, where files can be written under it: a folder, or nothing yet; a file there is a
        ``NotADirectory``, and nothing yet in a bucket that is not there a ``StorageError`` (``check_bucket``)."""
        uri = normalize(uri)
        found = self.file_type(uri)
        if found == pafs.FileType.File:
            raise NotADirectory(f"{uri}: a file, not a directory")
        if found == pafs.FileType.NotFound:
            self.check_bucket(uri)
        return uri

    def check_bucket(self, uri: str) -> None:
        """Raise ``StorageError`` when ``uri`` is in an object store's bucket (or container) that is not there, or
        that the credentials cannot see: what is written under it would fail (one request; nothing to check
        elsewhere)."""
        if scheme(uri) not in OBJECT_SCHEMES:
            return
        bucket = bucket_root(uri)
        if bucket != uri.rstrip("/") and self.file_type(bucket) == pafs.FileType.NotFound:
            raise StorageError(f"{uri}: the bucket {bucket} is not there, or these credentials cannot see it: create "
                               "it first, or check the storage options ([storage], AWS_* ...)")


# pyarrow's file systems whose "folders" are only key prefixes: nothing to create before writing a key
OBJECT_STORES = frozenset({"s3", "gcs", "abfs"})
# the URI schemes of object stores, reached through obstore where one request does what pyarrow does in two
OBJECT_SCHEMES = frozenset({"s3", "gs", "az", "abfs", "abfss"})
SINGLE_GET_BYTES = 64 << 20


def open_output(filesystem: pafs.FileSystem, path: str) -> Any:
    """A new output stream for ``path``, its parent folders made first where the file system has folders (on an
    object store a key needs none, and making one is a bucket check and a marker object more per file)."""
    parent = path.rsplit("/", 1)[0]
    if parent and filesystem.type_name not in OBJECT_STORES:
        filesystem.create_dir(parent, recursive=True)
    return filesystem.open_output_stream(path)


def _write_aside(path: str, data: bytes) -> str:
    """``data`` written to a temporary file beside ``path`` (its folder created); returns the temporary path."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.{os.getpid()}.{threading.get_ident()}.tmp"
    try:
        with open(tmp, "wb") as fh:
            fh.write(data)
    except OSError:  # (a full disk: no part of a file is left behind)
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return tmp


# obstore's names for the standard S3 variables
_S3_CONFIG = {"AWS_ACCESS_KEY_ID": "aws_access_key_id", "AWS_SECRET_ACCESS_KEY": "aws_secret_access_key",
              "AWS_SESSION_TOKEN": "aws_session_token", "AWS_REGION": "aws_region",
              "AWS_DEFAULT_REGION": "aws_default_region", "AWS_ENDPOINT_URL": "aws_endpoint",
              "AWS_ENDPOINT_URL_S3": "aws_endpoint"}


@functools.lru_cache(maxsize=8)
def _obstore(root: str, s3_config: tuple[tuple[str, str], ...], allow_http: bool) -> Any:
    """An obstore store for ``root`` (``s3://bucket``, ``gs://bucket``, ...); S3 with ``s3_config``."""
    from obstore.store import from_url

    if not root.startswith("s3://"):
        return from_url(root)
    config: Any = dict(s3_config)
    config["aws_conditional_put"] = "etag"  # If-None-Match on PUT: S3 (since 2024), MinIO, R2, moto
    options: Any = {"allow_http": allow_http}
    return from_url(root, config=config, client_options=options)


@functools.lru_cache(maxsize=8)
def _s3(options: tuple[tuple[str, str], ...]) -> pafs.S3FileSystem:
    """One pyarrow S3 file system per set of options (pyarrow does not read AWS_ENDPOINT_URL itself). Its output
    streams open lazily, so a file smaller than a part is one PUT, not a multipart upload's three requests."""
    o = dict(options)
    kwargs: dict[str, Any] = {"allow_delayed_open": True}
    endpoint = Storage(o).endpoint
    if endpoint:
        kwargs["endpoint_override"] = endpoint
        kwargs["scheme"] = urlsplit(endpoint).scheme or "https"
    region = o.get("AWS_REGION") or o.get("AWS_DEFAULT_REGION")
    if region:
        kwargs["region"] = region
    if o.get("AWS_ACCESS_KEY_ID") and o.get("AWS_SECRET_ACCESS_KEY"):
        kwargs.update(access_key=o["AWS_ACCESS_KEY_ID"], secret_key=o["AWS_SECRET_ACCESS_KEY"],
                      session_token=o.get("AWS_SESSION_TOKEN"))
    if o.get("AWS_S3_ADDRESSING_STYLE") == "virtual" or o.get("AWS_VIRTUAL_HOSTED_STYLE_REQUEST") == "true":
        kwargs["force_virtual_addressing"] = True
    return pafs.S3FileSystem(**kwargs)
