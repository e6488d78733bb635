"""The decoder's one error type.

A ``KraftDecodeError`` names where (file and absolute byte position) and why. The wire layer
yields them as values next to the batches and records it could read, so one bad batch never
stops the rest of a file; it raises one only when it cannot go on at all (e.g. an unreadable file).
"""

from __future__ import annotations

from typing import Any


class KraftDecodeError(Exception):
    """A precise decoding problem: ``<file>@<position>: <reason>``.

    ``kind`` is a stable keyword for tables and summaries: ``crc_mismatch``, ``truncated``,
    ``bad_length``, ``bad_magic``, ``bad_record``, ``bad_value``, ``unknown_type``,
    ``unsupported_version``, ``compression``, ``io``, ``offset_out_of_range``.
    """

    def __init__(self, reason: str, *, source: str = "", position: int = -1, kind: str = "bad_value"):
        self.reason = reason
        self.source = source
        self.position = position
        self.kind = kind
        super().__init__(self.describe())

    def describe(self) -> str:
        where = self.source or "<bytes>"
        if self.position >= 0:
            where = f"{where}@{self.position}"
        return f"{where}: {self.reason}"

    def at(self, source: str, position: int) -> KraftDecodeError:
        """A copy of this error located in ``source`` at absolute ``position``."""
        return KraftDecodeError(self.reason, source=source, position=position, kind=self.kind)

    def __reduce__(self) -> tuple[type, tuple[str], dict[str, object]]:  # picklable for Spark workers
        return (KraftDecodeError, (self.reason,), {"source": self.source, "position": self.position,
                                                   "kind": self.kind})

    def __setstate__(self, state: dict[str, Any] | None) -> None:
        self.__dict__.update(state or {})
        self.args = (self.describe(),)


class SchemaReadError(Exception):
    """Raised inside generated readers; carries the offset within the value being read."""

    def __init__(self, message: str, position: int):
        super().__init__(message)
        self.message = message
        self.position = position
