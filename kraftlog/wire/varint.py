"""Kafka's variable-length integers (``ByteUtils``).

* unsigned varint (LEB128, at most 5 bytes): the message layer (frame, compact lengths, tags);
* zigzag varint (5 bytes) and varlong (10 bytes): the record layer (``DefaultRecord``).

Each reader takes ``(buf, pos)`` and returns ``(value, next_pos)``; it raises ``IndexError`` when
the bytes end and ``ValueError`` for an over-long encoding, as Kafka's readers do.
"""

from __future__ import annotations


def read_uvarint(buf: bytes, pos: int) -> tuple[int, int]:
    """Unsigned varint of at most 5 bytes (``ByteUtils.readUnsignedVarint``)."""
    value = 0
    shift = 0
    while True:
        b = buf[pos]
        pos += 1
        if b < 0x80:
            return value | (b << shift), pos
        value |= (b & 0x7F) << shift
        shift += 7
        if shift > 28:
            raise ValueError("Varint is too long, the most significant bit in the 5th byte is set")


def read_varint(buf: bytes, pos: int) -> tuple[int, int]:
    """Zigzag-encoded int32 (``ByteUtils.readVarint``)."""
    raw, pos = read_uvarint(buf, pos)
    raw &= 0xFFFFFFFF
    return (raw >> 1) ^ -(raw & 1), pos


def read_varlong(buf: bytes, pos: int) -> tuple[int, int]:
    """Zigzag-encoded int64 of at most 10 bytes (``ByteUtils.readVarlong``)."""
    value = 0
    shift = 0
    while True:
        b = buf[pos]
        pos += 1
        if b < 0x80:
            value |= b << shift
            break
        value |= (b & 0x7F) << shift
        shift += 7
        if shift > 63:
            raise ValueError("Varlong is too long, most significant bit in the 10th byte is set")
    value &= 0xFFFFFFFFFFFFFFFF
    return (value >> 1) ^ -(value & 1), pos
