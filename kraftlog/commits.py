"""Marks of builds that commit several tables one after another, and what a reader does while one is there.

A history build (``reconstruct``) commits each entity history, then where each cluster stands: the tables are
whole only together. Before its first commit it writes a mark, after its last it removes it, so a build that stops
between them (killed, or a commit failed) leaves the mark for the next build (which then replays every cluster from
its base) and for readers. A reader that takes no lease (``report``, ``state``, ``diff``, ``shell``, the notebooks)
finding a mark waits while that build still holds the warehouse's lease, and fails at once on a build that stopped.
No Spark: the commands and the notebooks (delta-rs) follow this one rule.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TypeVar

from kraftlog.errors import NotBuilt
from kraftlog.lease import DEFAULT_TTL_S, current_holder
from kraftlog.storage import Storage, join

RECONSTRUCT = "reconstruct"  # what a history build's lease and its commit mark are taken for

T = TypeVar("T")
log = logging.getLogger("kraftlog")


@dataclass(frozen=True)
class CommitMarks:
    """The commit marks of a warehouse's builds (``_kraftlog/committing/<purpose>.json``)."""

    storage: Storage
    warehouse: str

    def _uri(self, purpose: str) -> str:
        return join(self.warehouse, "_kraftlog", "committing", f"{purpose}.json")

    @contextmanager
    def committing(self, purpose: str, build_id: str) -> Iterator[None]:
        """Mark build ``build_id`` of ``purpose`` as committing while the block runs; the mark stays where the block
        raises (the build stopped: its tables hold some of its commits and not others)."""
        uri = self._uri(purpose)
        self.storage.write_bytes(uri, json.dumps({"build_id": build_id}).encode())  # whole or not at all
        yield
        self.storage.delete(uri)

    def marked(self, purpose: str) -> str | None:
        """The id of the build of ``purpose`` whose mark is there (committing now, or stopped while committing);
        None: no build is between its first and last commit."""
        try:
            mark = self.storage.read_bytes(self._uri(purpose))  # (one GET on an object store)
        except FileNotFoundError:
            return None
        return str(json.loads(mark)["build_id"])

    def read_histories(self, read: Callable[[], T], leased: bool, wait_s: float = DEFAULT_TTL_S,
                       poll_s: float = 1.0) -> T:
        """``read()`` of the tables a history build commits, as no build left them half committed: read again
        after a build committing them (its mark is there, and it holds the warehouse's lease) has finished, waiting
        up to ``wait_s``; ``NotBuilt`` where a build stopped while committing them (its mark left, the lease no
        longer its own), until the next build has replayed from the bases. ``leased``: the reader holds the lease
        itself (a writer), so no build can be committing."""
        deadline = time.monotonic() + wait_s
        while True:
            value = read()
            building = self.marked(RECONSTRUCT)
            if building is None:
                return value
            holder = None if leased else current_holder(self.storage, self.warehouse)
            if holder is None or not holder.live() or holder.run != building:
                raise NotBuilt(f"the entity histories under {self.warehouse} are incomplete: reconstruct {building} "
                               "stopped while committing them (run `kraftlog reconstruct`: it replays every cluster "
                               "from its base)")
            if time.monotonic() >= deadline:
                raise NotBuilt(f"the entity histories under {self.warehouse} are being committed by reconstruct "
                               f"{building}, still after {wait_s:.0f} s: try again once it has finished")
            log.info("reconstruct %s is committing the histories under %s: waiting for it", building, self.warehouse)
            time.sleep(poll_s)
