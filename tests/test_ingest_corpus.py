"""Ingest the whole real corpus (each repository its own cluster) and check it against the manifest."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable

from kraftlog.config import Config
from kraftlog.spark.ingest import ingest
from kraftlog.tables.definitions import catalog
from kraftlog.tables.rows import file_layout
from kraftlog.wire.discover import scan
from kraftlog.wire.files import parse_meta_properties, read_file

pytestmark = [pytest.mark.slow, pytest.mark.spark]


def _manifest(corpus: Path) -> dict[str, dict[str, str]]:
    with open(corpus / "MANIFEST.tsv", newline="") as fh:
        rows = list(csv.DictReader(fh, delimiter="\t"))
    return {f"{r['repo'].replace('/', '__')}/{r['path']}": r for r in rows if r["batches"]}


def test_whole_corpus_lands_as_the_manifest_and_the_decoder_say(spark: Any, corpus: Path, tmp_path: Path) -> None:
    real = corpus / "real"
    wh = tmp_path / "wh"
    config = Config.load(warehouse={"path": str(wh)}, identity={"cluster": "{top}:{cluster.id}"})
    first = ingest(spark, [str(real)], config)
    assert first.rows_added > 340_000
    # two repositories have errors: one kept empty files and an emptied meta.properties; the other holds two
    # histories in one directory (segments 0 and 47 overlap with other records at the same offsets and epochs)
    ledger = DeltaTable(str(wh / "files")).to_pyarrow_table().to_pylist()
    assert first.errors > 0 and {r["path"].split("/corpus/real/")[1].split("/")[0] for r in ledger
                                 if r["error_count"]} == {"HotoMazur__library", "HastarTara__NE_streaming_project"}

    # every file: the ledger's counts equal the manifest's
    manifest = _manifest(corpus)
    ledger = DeltaTable(str(wh / "files")).to_pyarrow_table().to_pylist()
    seen = {}
    for row in ledger:
        rel = row["path"].split("/corpus/real/", 1)[1]
        seen[rel] = row
    assert set(manifest) <= set(seen)
    for rel, m in manifest.items():
        got = seen[rel]
        assert (got["batches"], got["records"], got["control_batches"], got["crc_failures"]) == \
            (int(m["batches"]), int(m["records"]), int(m["control_batches"]), int(m["crc_bad"])), rel
        if m["metadata_version"]:
            assert got["metadata_version"] == m["metadata_version"], rel

    # canonical keys: exactly the distinct record keys of every cluster, computed without Spark
    expected = set()
    for dd in scan([str(real)]):
        meta = parse_meta_properties(Path(dd.meta_properties.path).read_text()) if dd.meta_properties else None
        cluster = f"{dd.top}:{meta.cluster_id if meta and meta.cluster_id else 'unknown-cluster'}"
        for e, _ in dd.files:
            _, snap, _, snap_offset = file_layout(e.path)
            for _, r in read_file(e.path).records():
                expected.add((cluster, snap, r.offset if snap is None else snap_offset,
                              None if snap is None else r.offset))
    rec = DeltaTable(str(wh / "records")).to_pyarrow_table(
        columns=["cluster_id", "snapshot_id", "log_offset", "snapshot_seq", "record_type", "status"])
    keys = list(zip(*[rec.column(c).to_pylist() for c in ("cluster_id", "snapshot_id", "log_offset",
                                                           "snapshot_seq")], strict=True))
    assert len(keys) == len(set(keys)) and set(keys) == expected
    assert len({k[0] for k in keys}) >= 38

    # typed tables: one row per ok record of their type
    per_type: dict[str, int] = {}
    for t, st in zip(rec.column("record_type").to_pylist(), rec.column("status").to_pylist(), strict=True):
        if st == "ok":
            per_type[t] = per_type.get(t, 0) + 1
    for rtype, n in per_type.items():
        assert DeltaTable(str(wh / catalog().by_record_type[rtype].name)).count() == n, rtype

    # the two lifetimes left in one data directory are reported, not mixed silently
    div = DeltaTable(str(wh / "divergence")).to_pyarrow_table().to_pylist()
    assert div and all(r["cluster_id"].startswith("HastarTara") for r in div)

    again = ingest(spark, [str(real)], config)
    assert (again.files_ingested, again.rows_added, again.divergent) == (0, 0, 0)
