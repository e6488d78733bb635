"""Decompress a RecordBatch's records with the codec named in its attributes.

KRaft writers always use codec 0 (none); readers still accept 1-4 (``DefaultRecordBatch``):
gzip (RFC 1952, zlib), snappy in xerial snappy-java stream framing (or a bare snappy block), lz4 frame
and zstd (all three through cramjam). Every decoder is bounded: the output may not exceed ``limit``
bytes, whatever the input claims (lz4 and zstd decompress into a buffer that grows up to ``limit + 1``).
"""

from __future__ import annotations

import struct
import zlib

import cramjam

from kraftlog.wire.varint import read_uvarint

CODEC_NAMES = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}
XERIAL_MAGIC = b"\x82SNAPPY\x00"


class DecompressionError(Exception):
    """The codec is unknown, the stream is corrupt, or it expands past the limit."""


def decompress(codec: int, data: bytes, limit: int) -> bytes:
    """Decompress ``data`` with Kafka codec id ``codec`` into at most ``limit`` bytes."""
    try:
        if codec == 1:
            return _gzip(data, limit)
        if codec == 2:
            return _snappy(data, limit)
        if codec == 3:
            return _lz4(data, limit)
        if codec == 4:
            return _zstd(data, limit)
    except DecompressionError:
        raise
    except Exception as e:  # each library has its own error types
        raise DecompressionError(f"{CODEC_NAMES[codec]}: {e}") from None
    raise DecompressionError(f"unknown compression codec {codec}")


def _check(size: int, limit: int) -> None:
    if size > limit:
        raise DecompressionError(f"records expand past {limit} bytes")


def _gzip(data: bytes, limit: int) -> bytes:
    d = zlib.decompressobj(wbits=47)  # gzip or zlib header
    out = d.decompress(data, limit + 1)
    _check(len(out), limit)
    if not d.eof:
        raise DecompressionError("gzip: stream is truncated")
    return out


def _snappy(data: bytes, limit: int) -> bytes:
    if not data.startswith(XERIAL_MAGIC):
        return _snappy_block(data, limit)
    # xerial framing: 8-byte magic, int32 version, int32 compatible version, then [int32 size, block]*
    pos = 16
    parts: list[bytes] = []
    total = 0
    while pos < len(data):
        if pos + 4 > len(data):
            raise DecompressionError("snappy: truncated xerial block header")
        (size,) = struct.unpack_from(">i", data, pos)
        pos += 4
        if size < 0 or pos + size > len(data):
            raise DecompressionError(f"snappy: xerial block of {size} bytes overruns the batch")
        block = _snappy_block(data[pos : pos + size], limit - total)
        total += len(block)
        parts.append(block)
        pos += size
    return b"".join(parts)


def _snappy_block(block: bytes, limit: int) -> bytes:
    claimed, _ = read_uvarint(block, 0)  # the block's own length preamble, checked before allocating
    _check(claimed, limit)
    return bytes(cramjam.snappy.decompress_raw(block))


def _into(codec: str, data: bytes, limit: int) -> bytes:
    """cramjam's ``decompress_into`` a buffer that grows (64 times the input, then 8 times more each try) up to
    ``limit + 1`` bytes: memory follows what the stream really holds, and one that fills that is too large."""
    size = min(limit + 1, max(1 << 16, len(data) << 6))
    while True:
        buf = bytearray(size)
        try:
            n = getattr(cramjam, codec).decompress_into(data, buf)
        except cramjam.DecompressionError as e:
            if "failed to write whole buffer" not in str(e):
                raise DecompressionError(f"{codec}: {e}") from None
            if size > limit:
                raise DecompressionError(f"records expand past {limit} bytes") from None
            size = min(limit + 1, size << 3)
            continue
        _check(n, limit)
        return bytes(memoryview(buf)[:n])


def _lz4(data: bytes, limit: int) -> bytes:
    return _into("lz4", data, limit)


def _zstd(data: bytes, limit: int) -> bytes:
    return _into("zstd", data, limit)
