"""A schema-driven encoder that exists only in the tests.

It writes metadata values, control records and RecordBatch v2 files the way Kafka's writers do
(``AbstractApiMessageSerde.write``, ``MessageDataGenerator`` write rules, ``DefaultRecord``,
``DefaultRecordBatch``), so the decoder can be tested on bytes it did not produce itself.
"""

from __future__ import annotations

import base64
import gzip
import struct
from typing import Any

import cramjam
from crc32c import crc32c

from kraftlog.schema.model import FieldSpec, MessageSpec, StructSpec

_CODES = {"bool": "?", "int8": "b", "int16": "h", "uint16": "H", "int32": "i", "uint32": "I", "int64": "q",
          "float64": "d"}


def uvarint(value: int) -> bytes:
    value &= 0xFFFFFFFF
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def varint(value: int) -> bytes:
    return uvarint(((value << 1) ^ (value >> 31)) & 0xFFFFFFFF)


def varlong(value: int) -> bytes:
    raw = ((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF
    out = bytearray()
    while raw >= 0x80:
        out.append((raw & 0x7F) | 0x80)
        raw >>= 7
    out.append(raw)
    return bytes(out)


def uuid_bytes(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "==")


class Encoder:
    """Writes one message (a ``MessageSpec``) at a given version."""

    def __init__(self, spec: MessageSpec):
        self.spec = spec

    def encode(self, data: dict[str, Any], version: int) -> bytes:
        return self._struct(self.spec.body, data, version)

    def _struct(self, s: StructSpec, data: dict[str, Any], version: int) -> bytes:
        flexible = self.spec.flexible(version)
        out = bytearray()
        tagged: list[tuple[int, bytes]] = []
        for f in s.fields:
            if not f.present_in(version):
                continue
            value = data.get(f.column, f.default())
            if f.tagged_in(version):
                if value != f.default():
                    tagged.append((f.tag or 0, self._value(f, value, version, True)))
                continue
            out += self._value(f, value, version, flexible)
        if flexible:
            tagged += [(u["tag"], u["data"]) for u in data.get("_unknown_tagged_fields", [])]
            tagged.sort()
            out += uvarint(len(tagged))
            for tag, raw in tagged:
                out += uvarint(tag) + uvarint(len(raw)) + raw
        return bytes(out)

    def _length(self, n: int, compact: bool, wide: bool) -> bytes:
        if compact:
            return uvarint(n + 1)
        return struct.pack(">i" if wide else ">h", n)

    def _value(self, f: FieldSpec, value: Any, version: int, compact: bool) -> bytes:
        t = f.type
        if f.is_array:
            if value is None:
                return self._length(-1, compact, True)
            elem = FieldSpec(name=f.name, type=f.element_type, versions=f.versions, fields=f.fields)
            return self._length(len(value), compact, True) + b"".join(
                self._value(elem, v, version, compact) for v in value)
        if t in _CODES:
            return struct.pack(">" + _CODES[t], value)
        if t == "uuid":
            return uuid_bytes(value)
        if t == "string":
            if value is None:
                return self._length(-1, compact, False)
            raw = value.encode("utf-8")
            return self._length(len(raw), compact, False) + raw
        if t in ("bytes", "records"):
            if value is None:
                return self._length(-1, compact, True)
            return self._length(len(value), compact, True) + value
        sub = self.spec.struct_for(f)
        if f.nullable_in(version):
            return b"\xff" if value is None else b"\x01" + self._struct(sub, value, version)
        return self._struct(sub, value, version)


def metadata_value(spec: MessageSpec, data: dict[str, Any], version: int) -> bytes:
    """A framed metadata record value: frame 1, apiKey, version, body."""
    assert spec.api_key is not None
    return uvarint(1) + uvarint(spec.api_key) + uvarint(version) + Encoder(spec).encode(data, version)


def control_key(control_type: int, version: int = 0) -> bytes:
    return struct.pack(">hh", version, control_type)


def record(offset_delta: int, value: bytes | None, key: bytes | None = None, timestamp_delta: int = 0,
           headers: list[tuple[str, bytes | None]] | None = None) -> bytes:
    """One DefaultRecord."""
    body = bytearray(b"\x00")
    body += varlong(timestamp_delta) + varint(offset_delta)
    body += varint(-1) if key is None else varint(len(key)) + key
    body += varint(-1) if value is None else varint(len(value)) + value
    headers = headers or []
    body += varint(len(headers))
    for hk, hv in headers:
        raw = hk.encode()
        body += varint(len(raw)) + raw
        body += varint(-1) if hv is None else varint(len(hv)) + hv
    return varint(len(body)) + bytes(body)


def compress(codec: int, data: bytes) -> bytes:
    if codec == 0:
        return data
    if codec == 1:
        return gzip.compress(data, mtime=0)  # reproducible bytes (the header holds a time)
    if codec == 2:  # xerial snappy-java framing, two blocks to exercise the loop
        half = len(data) // 2
        out = bytearray(b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1))
        for part in (data[:half], data[half:]):
            block = bytes(cramjam.snappy.compress_raw(part))
            out += struct.pack(">i", len(block)) + block
        return bytes(out)
    if codec == 3:
        return bytes(cramjam.lz4.compress(data))
    if codec == 4:
        return bytes(cramjam.zstd.compress(data))
    raise ValueError(codec)


def batch(base_offset: int, records: list[bytes], *, epoch: int = 1, base_timestamp: int = 1_700_000_000_000,
          max_timestamp: int | None = None, control: bool = False, codec: int = 0,
          last_offset_delta: int | None = None, log_append_time: bool = False) -> bytes:
    """A RecordBatch v2 with a correct CRC-32C."""
    attrs = codec | (0x20 if control else 0) | (0x08 if log_append_time else 0)
    payload = compress(codec, b"".join(records))
    lod = len(records) - 1 if last_offset_delta is None else last_offset_delta
    after_crc = struct.pack(">hiqqqhii", attrs, lod, base_timestamp,
                            base_timestamp if max_timestamp is None else max_timestamp,
                            -1, -1, -1, len(records)) + payload
    crc = crc32c(after_crc)
    head = struct.pack(">ibI", epoch, 2, crc)
    return struct.pack(">qi", base_offset, len(head) + len(after_crc)) + head + after_crc
