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

Version = dict[str, Any]  # a history row by column name
Row = tuple[Any, ...]  # a history row in its table's column order (``COLUMNS``)
Step = tuple[int, int, Value | None]  # effective offset, timestamp (ms), value (None: deleted)
Made = tuple[int, int, Value | None, Value | None]  # a step that made a version, and the value it replaced
_ENDS = ("valid_from_offset", "valid_to_offset", "valid_from", "valid_to", "ended_by")


COLUMNS = {kind: tuple(k.history_table().schema.names) for kind, k in BY_NAME.items()}
"""The columns of each kind's history rows, in table order: the one source of the row layout."""


def _getter(names: tuple[str, ...]) -> Callable[[Value], tuple[Any, ...]]:
    """The values of ``names`` in a value, as a tuple (``KeyError`` where one is missing)."""
    if not names:
        return lambda _v: ()
    if len(names) == 1:
        return lambda v: (v[names[0]],)
    return itemgetter(*names)


def _row_maker(kind: str) -> Callable[[str, Key, Made, Step | None], Row]:
    """How a version of ``kind`` becomes its row (``COLUMNS``): cluster, key, value (a column missing from the value:
    null), the ``previous_<name>`` columns from the value it replaced (None: it replaced none), then where and when
    it holds. A tuple: a third less for Arrow to convert than a dict, and cheaper to make."""
    k = BY_NAME[kind]
    layout = ("cluster_id", *k.key_names, *k.value_names, *(previous_column(n) for n in k.previous), *_ENDS)
    if layout != COLUMNS[kind]:
        raise AssertionError(f"{kind} rows would be made as {layout}, its table's columns are {COLUMNS[kind]}")
    names, values, previous = k.value_names, _getter(k.value_names), _getter(k.previous)
    no_value, no_previous = (None,) * len(names), (None,) * len(k.previous)

    def row(cluster_id: str, key: Key, made: Made, nxt: Step | None) -> Row:
        offset, ts, value, replaced = made
        try:
            held = no_value if value is None else values(value)
        except KeyError:
            held = tuple(value.get(c) for c in names)  # type: ignore[union-attr]
        before = no_previous if replaced is None else previous(replaced)
        if nxt is None:
            return (cluster_id, *key, *held, *before, offset, None, ts, None, None)
        return (cluster_id, *key, *held, *before, offset, nxt[0], ts, nxt[1],
                "update" if nxt[2] is not None else "delete")
    return row


_ROWS = {kind: _row_maker(kind) for kind in BY_NAME}


def as_dict(kind: str, row: Row) -> Version:
    """A history row of ``kind`` by column name."""
    return dict(zip(COLUMNS[kind], row, strict=True))


class Versions:
    """History rows (``<kind>_history`` columns in order, ``COLUMNS``; timestamps in ms) of one cluster from its
    replay changes.

    ``emit(kind, row)`` receives each version once it is closed, and the current ones at ``finish``.
    """

    def __init__(self, cluster_id: str, emit: Callable[[str, Row], None]):
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

    def _row(self, kind: str, key: Key, made: Made, nxt: Step | None) -> Row:
        return _ROWS[kind](self.cluster_id, key, made, nxt)


def versions(changes: Iterable[Change], cluster_id: str) -> dict[str, list[Version]]:
    """Every history row per entity kind from a cluster's replay changes."""
    out: dict[str, list[Version]] = {k: [] for k in BY_NAME}
    history = Versions(cluster_id, lambda kind, row: out[kind].append(as_dict(kind, row)))
    for c in changes:
        history.add(c)
    history.finish()
    return out
