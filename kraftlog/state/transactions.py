"""Metadata transactions (KIP-868) from their markers alone (FACTS d.3).

Records between a BeginTransaction and the EndTransaction that closes it are applied together, at the
End's offset and time; those of an aborted transaction, or of one still open at the end of the
input, are not applied. A Begin inside a transaction, and an End or Abort outside one, are data errors:
reported and skipped (the transaction in progress goes on).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

BEGIN, END, ABORT = "BEGIN_TRANSACTION_RECORD", "END_TRANSACTION_RECORD", "ABORT_TRANSACTION_RECORD"
MARKERS = (BEGIN, END, ABORT)


@dataclass(frozen=True)
class Transaction:
    """Records at offsets in (begin, close) belong to it; ``close`` is None while it is open."""

    begin: int
    close: int | None
    close_ts: int | None
    committed: bool


def transactions(markers: Iterable[tuple[int, int, str]]) -> tuple[list[Transaction], list[str]]:
    """Transactions and problems from ``(offset, timestamp_ms, marker type)`` in offset order."""
    out: list[Transaction] = []
    problems: list[str] = []
    begin: int | None = None
    for offset, ts, kind in markers:
        if kind == BEGIN:
            if begin is not None:
                problems.append(f"offset {offset}: BeginTransaction inside the transaction begun at {begin}")
            else:
                begin = offset
        elif begin is None:
            problems.append(f"offset {offset}: {'EndTransaction' if kind == END else 'AbortTransaction'} "
                            "without BeginTransaction")
        else:
            out.append(Transaction(begin, offset, ts, kind == END))
            begin = None
    if begin is not None:
        out.append(Transaction(begin, None, None, False))
        problems.append(f"transaction begun at offset {begin} is still open at the end of the input: its records "
                        "are not applied")
    return out, problems
