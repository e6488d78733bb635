"""Entity histories from a sequential replay: the reference the Spark histories are tested against.

The rules, shared with ``kraftlog.spark.history``:

* the changes of one entity at one effective offset (a metadata transaction applies all its records
  at its End) collapse to the last one;
* a change that leaves the entity as it was is not a version;
* each version holds from its offset until the next version of the same entity (``ended_by``
  ``update``) or its deletion (``delete``); the current version has no end.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from kraftlog.state.entities import BY_NAME
from kraftlog.state.replay import Change, Key, Value

Version = dict[str, Any]


def versions(changes: Iterable[Change], cluster_id: str) -> dict[str, list[Version]]:
    """History rows per entity kind (``<kind>_history`` columns; timestamps in ms) from replay changes."""
    per_entity: dict[tuple[str, Key], list[tuple[int, int, Value | None]]] = {}
    for c in changes:
        steps = per_entity.setdefault((c.kind, c.key), [])
        if steps and steps[-1][0] == c.offset:
            steps[-1] = (c.offset, c.timestamp, c.value)
        else:
            steps.append((c.offset, c.timestamp, c.value))
    out: dict[str, list[Version]] = {k: [] for k in BY_NAME}
    for (kind, key), steps in per_entity.items():
        spec = BY_NAME[kind]
        kept: list[tuple[int, int, Value | None]] = []
        previous: Value | None = None
        for step in steps:
            if step[2] != previous:
                kept.append(step)
            previous = step[2]
        for i, (offset, ts, value) in enumerate(kept):
            if value is None:
                continue
            nxt = kept[i + 1] if i + 1 < len(kept) else None
            out[kind].append({
                "cluster_id": cluster_id, **dict(zip(spec.key_names, key, strict=True)),
                **{f: value.get(f) for f in spec.value_names},
                "valid_from_offset": offset, "valid_to_offset": nxt[0] if nxt else None,
                "valid_from": ts, "valid_to": nxt[1] if nxt else None,
                "ended_by": None if nxt is None else ("update" if nxt[2] is not None else "delete"),
            })
    return out
