"""Mutants of real files and a fuzz target over the file readers: no exception escapes, every change to the
output is reported, the records before the damage are kept, memory stays bounded (``benchmarks/mutants.py``)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from conftest import ROOT, need
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(ROOT / "benchmarks"))
import mutants as M

MEMORY_LIMIT = 500 << 20


def _files(shared: Path) -> list[Path]:
    files = M.real_files(shared)
    if not files:
        need(shared / "scenarios" / "A" / "node-2")
    return files


def _last_batch_epoch(o: M.Outcome, files: dict[str, Path]) -> bool:
    """A flip that raised the epoch of a file's last batch: nothing after it in the file contradicts it."""
    name, _, where = o.name.partition(":")
    at = int(where.rsplit("@", 1)[1])
    last = M._batches(files[name].read_bytes())[-1]
    return last.position + 12 <= at < last.position + 16


@pytest.mark.slow
def test_hundreds_of_mutants_of_real_files_end_in_located_errors(shared: Path) -> None:
    files = _files(shared)
    outcomes = M.run(files, per_file=10, bombs=2)
    s = M.summary(outcomes)
    assert s["mutants"] >= 400 and s["by_kind"]["gzip_bomb"] == 2  # type: ignore[index]
    assert s["tracebacks"] == []
    assert s["prefix_lost"] == []
    by_name = {p.name: p for p in files}
    assert [o.name for o in outcomes if o.silent and not _last_batch_epoch(o, by_name)] == []
    assert max(o.peak_bytes for o in outcomes) < MEMORY_LIMIT


_FILES = M.real_files()


@pytest.mark.skipif(not _FILES, reason=f"reference material not available: {M.SHARED} (real files to fuzz)")
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(which=st.integers(0, max(len(_FILES) - 1, 0)), at=st.floats(0, 1, exclude_max=True),
       edits=st.lists(st.tuples(st.integers(0, 4096), st.binary(min_size=1, max_size=16)), min_size=1, max_size=4),
       cut=st.booleans())
def test_fuzzed_real_files_never_raise_and_keep_what_comes_before(which: int, at: float,
                                                                 edits: list[tuple[int, bytes]], cut: bool) -> None:
    path = _FILES[which]
    data = path.read_bytes()
    first = int(at * len(data))
    out = bytearray(data)
    for skip, new in edits:  # overwrite bytes from ``first`` on (and cut the rest, sometimes)
        p = min(first + skip, len(out))
        out[p:p + len(new)] = new
    if cut:
        del out[min(first + sum(len(n) for _, n in edits), len(out)):]
    mutant = M.Mutant(path, "fuzz", first, bytes(out))
    original, _, _ = M._trusted_dump(data, str(path))
    before = [r for b in M._batches(data) if b.position + b.size <= first
              for r in original if b.base_offset <= r[0] <= b.last_offset]
    o = M.evaluate(mutant, original, before)
    assert o.traceback is None
    assert o.prefix_kept
    assert o.peak_bytes < MEMORY_LIMIT
