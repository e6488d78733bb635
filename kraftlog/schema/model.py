"""Typed view of Kafka message definitions (the JSON under ``schemas/``).

The rules follow Kafka's generator (``generator/src/main/java/org/apache/kafka/message``):
version ranges (``Versions.parse``), field presence (``versions`` minus ``taggedVersions``),
flexible versions and defaults (``FieldSpec.fieldDefault``).
"""

from __future__ import annotations

import base64
import re
from dataclasses import dataclass, field
from typing import Any

MAX_VERSION = 32767

PRIMITIVE_SIZES: dict[str, int] = {
    "bool": 1,
    "int8": 1,
    "int16": 2,
    "uint16": 2,
    "int32": 4,
    "uint32": 4,
    "int64": 8,
    "float64": 8,
    "uuid": 16,
}
VARIABLE_TYPES = frozenset({"string", "bytes", "records"})


@dataclass(frozen=True, slots=True)
class Versions:
    """An inclusive version range; ``Versions.NONE`` is empty."""

    lowest: int
    highest: int

    @staticmethod
    def parse(text: str | None, default: Versions | None = None) -> Versions:
        """Parse Kafka's ``"N"``, ``"N-M"``, ``"N+"`` or ``"none"``."""
        if text is None:
            if default is None:
                raise ValueError("missing version range")
            return default
        text = text.strip()
        if text == "none":
            return NONE
        if text.endswith("+"):
            return Versions(int(text[:-1]), MAX_VERSION)
        if "-" in text:
            lo, hi = text.split("-", 1)
            return Versions(int(lo), int(hi))
        return Versions(int(text), int(text))

    @property
    def empty(self) -> bool:
        return self.lowest > self.highest

    def __contains__(self, version: object) -> bool:
        return isinstance(version, int) and self.lowest <= version <= self.highest

    def __str__(self) -> str:
        if self.empty:
            return "none"
        if self.highest == MAX_VERSION:
            return f"{self.lowest}+"
        if self.lowest == self.highest:
            return str(self.lowest)
        return f"{self.lowest}-{self.highest}"


NONE = Versions(0, -1)


def json_name(name: str) -> str:
    """Kafka's JSON key for a field: the schema name with its first letter lower-cased."""
    return name[:1].lower() + name[1:]


def column_name(name: str) -> str:
    """snake_case column name for a schema field (``KRaftVersion`` -> ``kraft_version``)."""
    name = name.replace("KRaft", "Kraft")
    name = re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", name)
    name = re.sub(r"(?<=[A-Z])([A-Z][a-z])", r"_\1", name)
    return name.lower()


def record_type_name(message_name: str) -> str:
    """Kafka's ``MetadataRecordType`` enum constant (``TopicRecord`` -> ``TOPIC_RECORD``)."""
    return column_name(message_name).upper()


@dataclass(slots=True)
class FieldSpec:
    """One field of a message or struct."""

    name: str
    type: str
    versions: Versions
    nullable_versions: Versions = NONE
    tagged_versions: Versions = NONE
    tag: int | None = None
    default_text: str | None = None
    about: str = ""
    entity_type: str | None = None
    map_key: bool = False
    flexible_versions: Versions | None = None
    fields: list[FieldSpec] = field(default_factory=list)
    sensitive: bool = False
    json_name: str = ""  # Kafka's JSON key (derived)
    column: str = ""  # snake_case column name (derived)

    def __post_init__(self) -> None:
        self.json_name = json_name(self.name)
        self.column = column_name(self.name)

    @property
    def is_array(self) -> bool:
        return self.type.startswith("[]")

    @property
    def element_type(self) -> str:
        """The element type of an array field, or the type itself."""
        return self.type[2:] if self.is_array else self.type

    @property
    def is_struct(self) -> bool:
        """True when the field (or its elements) is a struct."""
        t = self.element_type
        return t not in PRIMITIVE_SIZES and t not in VARIABLE_TYPES

    def present_in(self, version: int) -> bool:
        return version in self.versions

    def tagged_in(self, version: int) -> bool:
        return version in self.tagged_versions

    def nullable_in(self, version: int) -> bool:
        return version in self.nullable_versions

    def default(self) -> Any:
        """The Python value of the field's default (``FieldSpec.fieldDefault``)."""
        text = self.default_text
        if self.is_array or self.is_struct or self.type in ("bytes", "records"):
            if text == "null":
                return None
            return [] if self.is_array else (b"" if self.type in ("bytes", "records") else None)
        t = self.type
        if t == "bool":
            return text == "true"
        if t in ("int8", "int16", "uint16", "int32", "uint32", "int64"):
            if not text:
                return 0
            return int(text, 16) if text.lower().startswith(("0x", "-0x")) else int(text)
        if t == "float64":
            return float(text) if text else 0.0
        if t == "string":
            if text == "null":
                return None
            return text or ""
        if t == "uuid":
            if not text:
                return "AAAAAAAAAAAAAAAAAAAAAA"
            return base64.urlsafe_b64encode(base64.urlsafe_b64decode(text + "==")).decode()[:22]
        raise ValueError(f"no default for type {t}")


@dataclass(slots=True)
class StructSpec:
    """A named struct: a message body, an inline struct or a common struct."""

    name: str
    fields: list[FieldSpec]

    def field_named(self, name: str) -> FieldSpec:
        for f in self.fields:
            if f.name == name:
                return f
        raise KeyError(f"{self.name} has no field {name}")


@dataclass(slots=True)
class MessageSpec:
    """A message definition plus kraftlog's annotations (``kraftlog`` block of the schema file)."""

    name: str
    kind: str  # metadata | control | control-key | quorum-state
    valid_versions: Versions
    flexible_versions: Versions
    body: StructSpec
    structs: dict[str, StructSpec]
    api_key: int | None = None
    record_type: str | None = None  # MetadataRecordType enum name, e.g. TOPIC_RECORD
    control_types: dict[int, str] = field(default_factory=dict)  # control type id -> ControlRecordType name
    dump_name: str | None = None  # the word kafka-dump-log prints before a control record's JSON
    removed_in: str | None = None
    first_in: str | None = None
    history: dict[str, str] = field(default_factory=dict)
    sensitive_config_value: dict[str, str] | None = None  # fields of a config record whose value may be secret
    path: str = ""
    raw: dict[str, Any] = field(default_factory=dict)

    @property
    def table(self) -> str:
        """Name of the typed table for this record type."""
        return column_name(self.name)

    def flexible(self, version: int) -> bool:
        return version in self.flexible_versions

    def struct_for(self, spec: FieldSpec) -> StructSpec:
        """The struct a struct-typed field refers to (inline or common)."""
        return self.structs[spec.element_type]

    def all_fields(self) -> list[FieldSpec]:
        """Every field of the body, in declaration order."""
        return list(self.body.fields)


def _field_from_json(obj: dict[str, Any], sensitive: set[str], prefix: str) -> FieldSpec:
    tagged = Versions.parse(obj.get("taggedVersions"), NONE)
    versions = Versions.parse(obj.get("versions"), tagged if not tagged.empty else None)
    flex = obj.get("flexibleVersions")
    path = f"{prefix}{obj['name']}"
    spec = FieldSpec(
        name=obj["name"],
        type=obj["type"],
        versions=versions,
        nullable_versions=Versions.parse(obj.get("nullableVersions"), NONE),
        tagged_versions=tagged,
        tag=obj.get("tag"),
        default_text=obj.get("default"),
        about=obj.get("about", ""),
        entity_type=obj.get("entityType"),
        map_key=bool(obj.get("mapKey", False)),
        flexible_versions=Versions.parse(flex) if flex is not None else None,
        fields=[_field_from_json(f, sensitive, path + ".") for f in obj.get("fields", [])],
        sensitive=path in sensitive,
    )
    return spec


def _collect_structs(fields: list[FieldSpec], out: dict[str, StructSpec]) -> None:
    for f in fields:
        if f.fields:
            out[f.element_type] = StructSpec(f.element_type, f.fields)
            _collect_structs(f.fields, out)


def message_from_document(doc: dict[str, Any], path: str = "") -> MessageSpec:
    """Build a MessageSpec from one ``schemas/**.json`` document."""
    msg = doc["message"]
    ann = doc.get("kraftlog", {})
    sensitive = set(ann.get("sensitiveFields", []))
    fields = [_field_from_json(f, sensitive, "") for f in msg.get("fields", [])]
    structs: dict[str, StructSpec] = {}
    for common in msg.get("commonStructs", []):
        cfields = [_field_from_json(f, sensitive, common["name"] + ".") for f in common["fields"]]
        structs[common["name"]] = StructSpec(common["name"], cfields)
        _collect_structs(cfields, structs)
    _collect_structs(fields, structs)
    kind = ann["kind"]
    return MessageSpec(
        name=msg["name"],
        kind=kind,
        valid_versions=Versions.parse(msg["validVersions"]),
        flexible_versions=Versions.parse(msg.get("flexibleVersions", "none")),
        body=StructSpec(msg["name"], fields),
        structs=structs,
        api_key=msg.get("apiKey"),
        record_type=record_type_name(msg["name"]) if kind == "metadata" else None,
        control_types={int(k): v for k, v in ann.get("controlTypes", {}).items()},
        dump_name=ann.get("dumpName"),
        removed_in=ann.get("removedIn"),
        first_in=ann.get("firstIn"),
        history=dict(ann.get("history", {})),
        sensitive_config_value=ann.get("sensitiveConfigValue"),
        path=path,
        raw=doc,
    )
