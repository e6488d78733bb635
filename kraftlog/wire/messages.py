"""Decode record values: framed metadata records and KRaft control records.

Metadata value (``AbstractApiMessageSerde``)::

    frameVersion:uvarint(=1)  apiKey:uvarint  version:uvarint  body

Control record: key ``version:int16 type:int16`` (``ControlRecordType.parse``); value for types
2-6 is the bare message body read at version 0 (``ControlRecordUtils``), for ABORT/COMMIT an int16
version then ``EndTxnMarker`` (not flexible).
"""

from __future__ import annotations

import functools
import struct
from dataclasses import dataclass, field
from typing import Any

from kraftlog.schema.model import MessageSpec
from kraftlog.schema.registry import SchemaSet, load_schemas
from kraftlog.wire.codegen import Reader, compile_readers
from kraftlog.wire.errors import SchemaReadError
from kraftlog.wire.varint import read_uvarint

# Status words carried by every decoded value (the ``status`` column of the records table).
OK = "ok"
UNKNOWN_TYPE = "unknown_type"
UNSUPPORTED_VERSION = "unsupported_version"
ERROR = "error"

_SHORT_MAX = 0x7FFF
# what a generated reader raises on bad input: its own error, running off the end, an over-long varint
_READ_ERRORS = (SchemaReadError, IndexError, struct.error, ValueError)
_h = struct.Struct(">h").unpack_from
_hh = struct.Struct(">hh").unpack_from
_hi = struct.Struct(">hi").unpack_from


@dataclass(slots=True)
class Decoded:
    """One decoded value (treat as read-only: identical NoOp values share one instance).

    ``type`` is Kafka's name (``TOPIC_RECORD``, ``LeaderChange``); ``data`` the field dict (snake_case
    keys, see ``codegen``) or None; ``status`` one of ok / unknown_type / unsupported_version / error;
    ``error`` Kafka-style reason; ``error_offset`` the byte within the value where reading failed;
    ``redacted`` the columns ``redact.Redactor`` replaced.
    """

    api_key: int | None
    type: str | None
    version: int | None
    data: dict[str, Any] | None
    status: str = OK
    error: str | None = None
    error_offset: int = -1
    spec: MessageSpec | None = field(default=None, repr=False)
    redacted: tuple[str, ...] = ()


class MetadataCodec:
    """Compiled readers for every metadata and control record of a ``SchemaSet``."""

    def __init__(self, schemas: SchemaSet):
        self.schemas = schemas
        self._readers: dict[int, dict[int, Reader]] = {
            key: compile_readers(spec) for key, spec in schemas.metadata.items()
        }
        self._control: dict[int, tuple[MessageSpec, Reader]] = {}
        for ctype, spec in schemas.control.items():
            if spec.name != "EndTxnMarker":
                self._control[ctype] = (spec, compile_readers(spec, range(0, 1))[0])
        self._max_version = {k: s.valid_versions.highest for k, s in schemas.metadata.items()}
        # NoOpRecord v0 is 94% of real logs: answer it without a call
        noop = next(s for s in schemas.metadata.values() if s.name == "NoOpRecord")
        self._noop = bytes([1, noop.api_key or 0, 0, 0])
        self._noop_decoded = Decoded(noop.api_key, "NO_OP_RECORD", 0, {}, spec=noop)  # shared: read-only

    # -- metadata ---------------------------------------------------------------------------
    def decode_metadata(self, value: bytes) -> Decoded:
        """Decode a framed metadata record value; never raises."""
        if value == self._noop:
            return self._noop_decoded
        if len(value) >= 3 and value[0] == 1 and value[1] < 128 and value[2] < 128:
            api_key, version, pos = value[1], value[2], 3  # one-byte varints: the usual case
        else:
            framed = self._frame(value)
            if isinstance(framed, Decoded):
                return framed
            api_key, version, pos = framed
        spec = self.schemas.metadata.get(api_key)
        if spec is None:
            return Decoded(api_key, None, version, None, UNKNOWN_TYPE, f"Unknown metadata id {api_key}", pos)
        rtype = spec.record_type
        reader = self._readers[api_key].get(version)
        if reader is None:
            return Decoded(api_key, rtype, version, None, UNSUPPORTED_VERSION,
                           f"{rtype} version {version} is newer than the schemas (newest known: "
                           f"{self._max_version[api_key]})", pos, spec)
        try:
            data, end = reader(value, pos, len(value))
        except _READ_ERRORS as e:
            return _fail(api_key, rtype, version, f"Failed to deserialize record with type {api_key}: "
                         f"{_reason(e)}", getattr(e, "position", len(value)), spec)
        if end != len(value):
            return _fail(api_key, rtype, version,
                         f"Found {len(value) - end} byte(s) of garbage after {api_key}", end, spec)
        return Decoded(api_key, rtype, version, data, spec=spec)

    @staticmethod
    def _frame(value: bytes) -> tuple[int, int, int] | Decoded:
        """The general frame parse (``AbstractApiMessageSerde.read``): (apiKey, version, body start)."""
        try:
            frame, pos = _short(value, 0, "frame version")
            if frame == 0:
                return _fail(None, None, None, "Could not deserialize metadata record with frame version 0. "
                             "Note that upgrades from the preview release of KRaft in 2.8 to newer versions "
                             "are not supported.", 0)
            if frame != 1:
                return _fail(None, None, None, "Could not deserialize metadata record due to unknown frame "
                             f"version {frame}(only frame version 1 is supported)", 0)
            api_key, pos = _short(value, pos, "type")
            version, pos = _short(value, pos, "version")
        except _FrameError as e:
            return _fail(None, None, None, str(e), e.position)
        return api_key, version, pos

    # -- control ----------------------------------------------------------------------------
    def decode_control(self, key: bytes | None, value: bytes | None) -> Decoded:
        """Decode a control record from its key and value; never raises."""
        if key is None or len(key) < 4:
            return _fail(None, "UNKNOWN", None, f"Invalid control record key: {0 if key is None else len(key)} "
                         "bytes, at least 4 expected", 0)
        key_version, ctype = _hh(key, 0)
        if key_version < 0:
            return _fail(None, "UNKNOWN", None, f"Invalid version found for control record: {key_version}. "
                         "May indicate data corruption", 0)
        if ctype in (0, 1):
            name = self.schemas.control_type_names[ctype]
            if value is None or len(value) < 6:
                return _fail(ctype, "EndTxnMarker", 0, f"{name} marker value too short", 0)
            marker_version, epoch = _hi(value, 0)
            if marker_version < 0:
                return _fail(ctype, "EndTxnMarker", 0, f"Invalid version found for end transaction marker: "
                             f"{marker_version}. May indicate data corruption", 0)
            return Decoded(ctype, "EndTxnMarker", 0, {"control_type": name, "coordinator_epoch": epoch})
        entry = self._control.get(ctype)
        if entry is None:
            return Decoded(ctype, "UNKNOWN", None, None, UNKNOWN_TYPE, f"Unknown control record type {ctype}", 0)
        spec, reader = entry
        assert spec.dump_name is not None
        if value is None:
            return _fail(ctype, spec.dump_name, 0, "control record has a null value", 0, spec)
        try:
            data, _ = reader(value, 0, len(value))
        except _READ_ERRORS as e:
            return _fail(ctype, spec.dump_name, 0, f"Failed to deserialize {spec.name}: {_reason(e)}",
                         getattr(e, "position", len(value)), spec)
        return Decoded(ctype, spec.dump_name, 0, data, spec=spec)


class _FrameError(Exception):
    def __init__(self, message: str, position: int):
        super().__init__(message)
        self.position = position


def _short(value: bytes, pos: int, entity: str) -> tuple[int, int]:
    """``AbstractApiMessageSerde.unsignedIntToShort``."""
    try:
        val, nxt = read_uvarint(value, pos)
    except (IndexError, ValueError) as e:
        raise _FrameError(f"Error while reading {entity}: {_reason(e)}", pos) from None
    if val > _SHORT_MAX:
        raise _FrameError(f"Value for {entity} was too large.", pos)
    return val, nxt


def _reason(e: Exception) -> str:
    if isinstance(e, SchemaReadError):
        return e.message
    if isinstance(e, IndexError | struct.error):
        return "the value ended before the field was complete"
    return str(e)


def _fail(api_key: int | None, rtype: str | None, version: int | None, reason: str, offset: int,
          spec: MessageSpec | None = None) -> Decoded:
    return Decoded(api_key, rtype, version, None, ERROR, reason, offset, spec)


@functools.cache
def default_codec() -> MetadataCodec:
    """The codec for the packaged ``schemas/`` (compiled once per process)."""
    return MetadataCodec(load_schemas())
