"""Load ``schemas/`` once and look definitions up by apiKey or control type."""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from importlib import resources
from importlib.abc import Traversable
from pathlib import Path
from typing import Any

from kraftlog.schema.model import MessageSpec, message_from_document


def schema_root() -> Traversable:
    """The ``schemas/`` folder: packaged as ``kraftlog._schemas``, or the source checkout's."""
    try:
        root = resources.files("kraftlog._schemas")
        if root.joinpath("enums.json").is_file():
            return root
    except ModuleNotFoundError:
        pass
    return Path(__file__).resolve().parents[2] / "schemas"


def _walk(root: Traversable, prefix: str = "") -> list[tuple[str, Traversable]]:
    out: list[tuple[str, Traversable]] = []
    for entry in sorted(root.iterdir(), key=lambda e: e.name):
        if entry.is_dir():
            out.extend(_walk(entry, f"{prefix}{entry.name}/"))
        elif entry.name.endswith(".json"):
            out.append((prefix + entry.name, entry))
    return out


@dataclass(frozen=True)
class SchemaSet:
    """Every definition under ``schemas/`` plus the reference tables beside them."""

    messages: tuple[MessageSpec, ...]
    enums: dict[str, dict[str, str]]
    config_keys: dict[str, Any]

    @functools.cached_property
    def metadata(self) -> dict[int, MessageSpec]:
        """Metadata record definitions by apiKey (current and removed ones)."""
        return {m.api_key: m for m in self.messages if m.kind == "metadata" and m.api_key is not None}

    @functools.cached_property
    def control(self) -> dict[int, MessageSpec]:
        """Control record value definitions by control type id."""
        return {t: m for m in self.messages if m.kind == "control" for t in m.control_types}

    @functools.cached_property
    def control_type_names(self) -> dict[int, str]:
        """ControlRecordType names by id (ABORT, COMMIT, LEADER_CHANGE, ...)."""
        return {t: n for m in self.messages if m.kind == "control" for t, n in m.control_types.items()}

    def by_name(self, name: str) -> MessageSpec:
        for m in self.messages:
            if m.name == name:
                return m
        raise KeyError(name)

    def enum_name(self, kind: str, value: int) -> str:
        """Kafka's name of ``value`` in enum ``kind`` (``schemas/enums.json``); the number as text if unknown."""
        return self.enums[kind].get(str(value), str(value))

    def metadata_version_name(self, level: int) -> str:
        """``3.9-IV0`` for feature level 21; ``level 99`` for levels newer than the schemas."""
        return self.enums["metadataVersion"].get(str(level), f"level {level}")


@functools.cache
def load_schemas() -> SchemaSet:
    """Load and cache all of ``schemas/``."""
    root = schema_root()
    messages: list[MessageSpec] = []
    enums: dict[str, dict[str, str]] = {}
    config_keys: dict[str, Any] = {}
    for rel, entry in _walk(root):
        doc = json.loads(entry.read_text(encoding="utf-8"))
        if rel == "enums.json":
            enums = {k: v for k, v in doc.items() if isinstance(v, dict)}
        elif rel == "config_keys.json":
            config_keys = doc
        elif "message" in doc:
            messages.append(message_from_document(doc, rel))
    return SchemaSet(tuple(messages), enums, config_keys)
