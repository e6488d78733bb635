"""Entity histories from replay changes: one rule for the local commands and the Spark build.

* the changes of one entity at one effective offset (a metadata transaction applies all its records
  at its End) collapse to the last one;
* a change that leaves the entity as it was is not a version;
* each version holds from its offset until the next version of the same entity (``ended_by``
  ``update``) or its deletion (``delete``); the current version has no end;
* a version replaced the one before it where that one ended by ``update``; it carries the values
  its kind names (``EntityKind.previous``) as that one had them, as ``previous_<name>``.

``Versions`` applies these rules as changes stream in (offset order), handing each version over as
soon as it is closed: it holds one step per entity, so its memory follows the image, not the log.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from operator import itemgetter
from typing import Any

from kraftlog.state.entities import BY_NAME, previous_column
from kraftlog.state.replay import Change, Key, Value

Version = dict[str, Any]
Step = tuple[int, int, Value | None]  # effective offset, timestamp (ms), value (None: deleted)
Made = tuple[int, int, Value | None, Value | None]  # a step that made a version, and the value it replaced


def _previous_of(kind: str) -> Callable[[Value | None], dict[str, Any]]:
    """The ``previous_<name>`` columns of a version of ``kind`` from the value it replaced (None: none)."""
    names = BY_NAME[kind].previous
    columns = tuple(previous_column(n) for n in names)
    none: dict[str, Any] = dict.fromkeys(columns)
    if not names:
        return lambda _replaced: none
    get = itemgetter(*names) if len(names) > 1 else (lambda v: (v[names[0]],))
    return lambda replaced: none if replaced is None else dict(zip(columns, get(replaced), strict=True))


_PREVIOUS = {kind: _previous_of(kind) for kind in BY_NAME}


class Versions:
    """History rows (``<kind>_history`` columns, timestamps in ms) of one cluster from its replay changes.

    ``emit(kind, row)`` receives each version once it is closed, and the current ones at ``finish``.
    """

    def __init__(self, cluster_id: str, emit: Callable[[str, Version], None]):
        self.cluster_id = cluster_id
        self.emit = emit
        self._last: dict[tuple[str, Key], Made] = {}  # the last step that made a version (or deleted one)
        # the latest change of each entity at the offset changes arrive at now (more may share it)
        self._pending: dict[tuple[str, Key], Step] = {}
        self._at: int | None = None

    def add(self, c: Change) -> None:
        """Take one change (changes arrive in effective offset order: once one comes at a later offset, those before
        are final, and the versions they close are handed over then, in the order they end)."""
        if c.offset != self._at:
            self._settle_pending()
            self._at = c.offset
        self._pending[(c.kind, c.key)] = (c.offset, c.timestamp, c.value)

    def resume(self, kind: str, key: Key, offset: int, timestamp: int, value: Value,
               replaced: Value | None = None) -> None:
        """Take a version a previous run left current (before any change), with the values it replaced (at least
        those its kind keeps, ``EntityKind.previous``; None: it replaced none)."""
        self._last[(kind, key)] = (offset, timestamp, value, replaced)

    def finish(self) -> None:
        """End of the input: settle every pending change and emit the current versions."""
        self._settle_pending()
        for (kind, key), made in self._last.items():
            if made[2] is not None:
                self.emit(kind, self._row(kind, key, made, None))
        self._last.clear()

    def _settle_pending(self) -> None:
        for entity, step in self._pending.items():
            self._settle(entity, step)
        self._pending.clear()

    def _settle(self, entity: tuple[str, Key], step: Step) -> None:
        last = self._last.get(entity)
        before = last[2] if last is not None else None
        if step[2] == before:
            return  # no change: not a version
        if last is not None and before is not None:
            self.emit(entity[0], self._row(entity[0], entity[1], last, step))
        self._last[entity] = (*step, before)  # (after a deletion, None: the next version replaced none)

    def _row(self, kind: str, key: Key, made: Made, nxt: Step | None) -> Version:
        spec = BY_NAME[kind]
        offset, ts, value, replaced = made
        return {
            "cluster_id": self.cluster_id, **dict(zip(spec.key_names, key, strict=True)), **(value or {}),
            **_PREVIOUS[kind](replaced),
            "valid_from_offset": offset, "valid_to_offset": nxt[0] if nxt else None,
            "valid_from": ts, "valid_to": nxt[1] if nxt else None,
            "ended_by": None if nxt is None else ("update" if nxt[2] is not None else "delete"),
        }


def versions(changes: Iterable[Change], cluster_id: str) -> dict[str, list[Version]]:
    """Every history row per entity kind from a cluster's replay changes."""
    out: dict[str, list[Version]] = {k: [] for k in BY_NAME}
    history = Versions(cluster_id, lambda kind, row: out[kind].append(row))
    for c in changes:
        history.add(c)
    history.finish()
    return out
