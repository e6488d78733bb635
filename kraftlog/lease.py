"""One writer at a time per warehouse: an expiring lease taken with an atomic create-if-absent.

Runs that write a warehouse (ingest, reconstruct, analyze, maintain) hold its lease. The lease is a sequence of
small JSON objects ``<warehouse>/_kraftlog/lease/<generation>.json``; a run takes generation ``n + 1``
by creating that object only if it does not exist (``Storage.create``: a hard link on a local disk, a
conditional PUT with ``If-None-Match: *`` on S3, the same on GCS and Azure), so of two runs racing for
it exactly one wins. The holder renews its object's ``expires_at`` while it works and marks it
``released`` at the end. A run killed with ``kill -9`` stops renewing: once its lease has expired the
next run takes the next generation, and rolls the dead run's staged work forward (``TableStore.recover``).

A holder that finds a later generation than its own has lost the lease (it was paused for longer than
the lease lasts) and stops before its next commit (``Lease.check``).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from pyarrow import fs as pafs

from kraftlog.errors import KraftlogError
from kraftlog.storage import Storage, join, normalize

log = logging.getLogger("kraftlog")

LEASE_DIR = "_kraftlog/lease"
DEFAULT_TTL_S = 300.0  # a holder renews every third of this
WAIT_TOLD_S = 60.0  # a run waiting for the lease says so when it starts, when the holder changes, and then every minute
KEEP_GENERATIONS = 20  # older lease objects are removed by the next holder


class WarehouseBusy(KraftlogError, RuntimeError):
    """Another run holds the warehouse's lease."""


class LeaseLost(KraftlogError, RuntimeError):
    """Another run took the lease while this one still worked (it was paused for longer than the lease)."""


@dataclass(frozen=True)
class Holder:
    """Who holds a lease, and until when."""

    generation: int
    run: str
    purpose: str
    host: str
    pid: int
    acquired_at: float
    expires_at: float
    released: bool = False

    def to_json(self) -> bytes:
        return json.dumps(self.__dict__, sort_keys=True).encode()

    @classmethod
    def from_json(cls, generation: int, data: bytes) -> Holder:
        d = json.loads(data)
        d["generation"] = generation
        return cls(**d)

    def live(self) -> bool:
        """Whether the holder still holds it: not released, and renewed before it expired."""
        return not self.released and self.expires_at >= time.time()

    def describe(self) -> str:
        since = datetime.fromtimestamp(self.acquired_at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        until = datetime.fromtimestamp(self.expires_at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        return (f"busy since {since} by {self.purpose} run {self.run} (host {self.host}, pid {self.pid}); "
                f"its lease expires at {until} unless renewed")


class Lease:
    """The lease of one warehouse; ``with Lease(...):`` around a run that writes it."""

    def __init__(self, storage: Storage, warehouse: str, run: str, purpose: str, ttl_s: float = DEFAULT_TTL_S,
                 wait_s: float = 0.0, poll_s: float = 2.0):
        self.storage, self.warehouse = storage, normalize(warehouse)
        self.dir = join(self.warehouse, LEASE_DIR)
        self.run, self.purpose, self.ttl_s, self.wait_s, self.poll_s = run, purpose, ttl_s, wait_s, poll_s
        self.generation: int | None = None
        self.acquired_at = 0.0
        self._stop = threading.Event()
        self._lost: str | None = None
        self._thread: threading.Thread | None = None

    # -- the objects --------------------------------------------------------------------------------
    def _name(self, generation: int) -> str:
        return f"{generation:020d}.json"

    def generations(self) -> list[int]:
        filesystem, path = self.storage.filesystem(self.dir)
        try:
            infos = filesystem.get_file_info(pafs.FileSelector(path, allow_not_found=True))
        except FileNotFoundError:  # being created by another run right now
            return []
        return sorted(int(i.base_name[:-5]) for i in infos
                      if i.base_name.endswith(".json") and i.base_name[:-5].isdigit())

    def holder(self, generation: int) -> Holder:
        return Holder.from_json(generation, self.storage.read_bytes(join(self.dir, self._name(generation))))

    def current(self) -> Holder | None:
        """The latest generation's holder (None for a warehouse never leased)."""
        gens = self.generations()
        return self.holder(gens[-1]) if gens else None

    def _record(self, generation: int, released: bool = False) -> Holder:
        return Holder(generation, self.run, self.purpose, socket.gethostname(), os.getpid(), self.acquired_at,
                      time.time() + self.ttl_s, released)

    # -- taking and giving back ---------------------------------------------------------------------
    def acquire(self) -> Lease:
        """Take the lease, waiting up to ``wait_s`` for a live holder to finish; else ``WarehouseBusy``."""
        deadline = time.time() + self.wait_s
        said: tuple[str, float] | None = None  # (the holder told of, when)
        while True:
            current = self.current()
            if current is None or not current.live():
                if current is not None and not current.released:
                    log.warning("taking over the lease of %s run %s, which expired without being released "
                                "(the run was killed)", current.purpose, current.run)
                generation = (current.generation if current else 0) + 1
                self.acquired_at = time.time()
                if self.storage.create(join(self.dir, self._name(generation)), self._record(generation).to_json()):
                    self.generation = generation
                    self._start_renewing()
                    self._prune(generation)
                    log.info("lease %d of %s taken for %s run %s", generation, self.warehouse, self.purpose, self.run)
                    return self
                continue  # another run created that generation first: look again
            if time.time() >= deadline:
                raise WarehouseBusy(f"warehouse {self.warehouse} is {current.describe()}")
            if said is None or said[0] != current.run or time.time() - said[1] >= WAIT_TOLD_S:
                log.info("warehouse %s is %s; waiting up to %.0f s more", self.warehouse, current.describe(),
                         deadline - time.time())
                said = (current.run, time.time())
            time.sleep(min(self.poll_s, max(0.0, deadline - time.time())) or self.poll_s)

    def check(self) -> None:
        """Raise ``LeaseLost`` if another run took the lease (call before committing)."""
        if self.generation is None:
            raise LeaseLost("the lease was not taken")
        if self._lost is None and self._superseded():
            self._lost = "a later generation exists"
        if self._lost is not None:
            raise LeaseLost(f"lease {self.generation} of {self.warehouse} lost ({self._lost}): nothing more is "
                            "committed by this run; the next run completes its staged work")

    def _superseded(self) -> bool:
        """True when another run created a later generation than the one held."""
        return self.generation is not None and any(g > self.generation for g in self.generations())

    def release(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self.generation is not None and self._lost is None:
            self._write(self._record(self.generation, released=True))
        self.generation = None

    def __enter__(self) -> Lease:
        return self.acquire()

    def __exit__(self, *exc: Any) -> None:
        self.release()

    # -- renewing -----------------------------------------------------------------------------------
    def _write(self, record: Holder) -> None:
        self.storage.write_bytes(join(self.dir, self._name(record.generation)), record.to_json())

    def _start_renewing(self) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=self._renew, name="kraftlog-lease", daemon=True)
        self._thread.start()

    def _renew(self) -> None:
        while not self._stop.wait(self.ttl_s / 3):
            try:
                if self._superseded():
                    self._lost = "a later generation exists"
                    return
                assert self.generation is not None
                self._write(self._record(self.generation))
            except Exception as e:  # a storage hiccup: try again at the next beat
                log.warning("could not renew the lease of %s: %s", self.warehouse, e)

    def _prune(self, generation: int) -> None:
        for g in self.generations():
            if g <= generation - KEEP_GENERATIONS:
                with contextlib.suppress(OSError):
                    self.storage.delete(join(self.dir, self._name(g)))


def current_holder(storage: Storage, warehouse: str) -> Holder | None:
    """Who holds (or last held) a warehouse's lease, for a reader that takes none (None: never leased)."""
    return Lease(storage, warehouse, run="", purpose="").current()
