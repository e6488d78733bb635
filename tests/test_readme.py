"""The README's code blocks are true: Python and SQL run against the sample warehouse, profile snippets load,
and every command line names commands, options, jobs and make targets that exist; every file, Python name and link
the README and the benchmark log (``benchmarks/RESULTS.md``) point to exists.

Placeholders of synopses (``PATH...``, ``DIR``) and cluster-only lines (``spark-submit --master yarn``) are not run;
their commands, options and jobs are checked against the real ones.
"""

from __future__ import annotations

import importlib
import os
import re
import shlex
import shutil
import tomllib
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from conftest import ROOT, SAMPLE

from kraftlog.cli import main

BLOCKS = re.findall(r"```(\w*)\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
CLUSTER = "T4vFxmI9RFCnFwCmltnwag"  # the sample's cluster


def _blocks(lang: str) -> list[str]:
    return [body for kind, body in BLOCKS if kind == lang]


def test_the_readme_has_the_blocks_this_test_runs() -> None:
    kinds = {k for k, _ in BLOCKS}
    assert kinds <= {"bash", "python", "sql", "toml", ""}, kinds
    assert len(_blocks("python")) >= 3 and len(_blocks("sql")) >= 2 and _blocks("toml")


@pytest.fixture()
def readme_dir(sample_events: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A working directory as the README assumes: ``data/`` (a node's data directory) and ``warehouse/``."""
    wh, _ = sample_events
    shutil.copytree(SAMPLE / "node-2", tmp_path / "data")
    (tmp_path / "warehouse").symlink_to(wh)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_every_python_block_runs(spark: Any, readme_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for body in _blocks("python"):
        namespace: dict[str, Any] = {"spark": spark}
        exec(compile(body, "README.md", "exec"), namespace)
    assert namespace  # the last block's names: histories, a state and a diff
    assert namespace["leaders"].count() > 0 and namespace["changes"].count() > 0


def test_every_sql_block_runs(spark: Any, readme_dir: Path) -> None:
    from deltalake import DeltaTable

    from kraftlog.spark.decode import register_functions

    register_functions(spark)
    metadata = readme_dir / "data" / "__cluster_metadata-0"
    ran = 0
    for body in _blocks("sql"):
        statements = [s.strip() for s in re.sub(r"--[^\n]*", "", body).split(";") if s.strip()]
        for sql in statements:
            if "delta_scan(" in sql:  # DuckDB: its delta extension cannot be downloaded here; the same table
                duckdb = pytest.importorskip("duckdb")  # through delta-rs, the query unchanged otherwise
                name = re.search(r"delta_scan\('warehouse/(\w+)'\)", sql).group(1)  # type: ignore[union-attr]
                events = DeltaTable(str(readme_dir / "warehouse" / name)).to_pyarrow_table()  # noqa: F841
                rows = duckdb.sql(re.sub(r"delta_scan\('[^']+'\)", "events", sql)).fetchall()
            else:  # the archive of the example is the sample's node on local disk
                rows = spark.sql(re.sub(r"`s3://[^`]+`", f"`{metadata}`", sql)).collect()
            ran += 1
            assert rows is not None
    assert ran >= 4


def test_every_profile_snippet_loads(tmp_path: Path) -> None:
    from kraftlog.config import Config

    for body in _blocks("toml"):
        tomllib.loads(body)
        (tmp_path / "p.toml").write_text(body)
        Config.load(str(tmp_path / "p.toml"))  # unknown keys would be refused


def _command_lines() -> list[list[str]]:
    """Every command of the bash blocks, continuation lines joined, comments and shell variables dropped."""
    out = []
    for body in _blocks("bash"):
        text = re.sub(r"\\\n\s*", " ", body)
        for line in text.splitlines():
            line = line.split(" #", 1)[0].strip()
            if not line or line.startswith("#") or re.match(r"^[A-Z_]+=", line):
                continue
            out.append(shlex.split(line.replace("$COMMON", "").replace("$(which python)", "python")))
    return out


def test_every_command_line_names_what_exists() -> None:
    lines = _command_lines()
    targets = set(re.findall(r"^([a-z][\w-]*):", (ROOT / "Makefile").read_text(), re.M))
    checked = 0
    for argv in lines:
        if argv[0] == "make":
            assert set(argv[1:]) <= targets, argv
        elif argv[0] == "kraftlog":
            command = argv[1]
            help_text = CliRunner().invoke(main, [command, "--help"]).output
            assert "Usage:" in help_text, argv
            for opt in (a.strip("[]").split("=")[0] for a in argv[2:] if a.lstrip("[").startswith("--")):
                assert opt in help_text, (command, opt)
        elif argv[0] == "spark-submit":
            job = next(a for a in argv if a.endswith(".py"))
            assert (ROOT / "jobs" / os.path.basename(job)).exists(), job
            job_args = argv[argv.index(job) + 1:]
            src = (ROOT / "jobs" / os.path.basename(job)).read_text() + (ROOT / "kraftlog" / "spark" /
                                                                        "session.py").read_text()
            for opt in (a for a in job_args if a.startswith("--")):
                assert f'"{opt}"' in src, (job, opt)
        else:
            pytest.fail(f"a README command this test does not know: {argv}")
        checked += 1
    assert checked >= 15


DOCS = ("README.md", "benchmarks/RESULTS.md")
_PATH = re.compile(r"(?<![\w./-])((?:kraftlog|benchmarks|jobs|conf|schemas|tests|notebooks|samples)/[\w./*-]*[\w/])")
_NAME = re.compile(r"`(kraftlog(?:\.\w+)+)")
_LINK = re.compile(r"\]\(([^)\s]+)\)")


def _anchor(heading: str) -> str:
    """GitHub's anchor of a Markdown heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _resolves(dotted: str) -> bool:
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj: Any = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        try:
            for attr in parts[i:]:
                obj = getattr(obj, attr)
        except AttributeError:
            return False
        return True
    return False


def test_every_path_name_and_link_the_docs_give_exists() -> None:
    """The files (``benchmarks/bench_fleet.py``), Python names (``kraftlog.spark.landed.state_records``) and links
    (``[Performance](#performance-make-bench)``) the README and the benchmark log point to exist: a module moved or
    a function renamed leaves no stale pointer behind."""
    checked = 0
    for doc in DOCS:
        path = ROOT / doc
        text = path.read_text()
        for name in sorted(set(_PATH.findall(text))):
            assert any(ROOT.glob(name)) if "*" in name else (ROOT / name).exists(), (doc, name)
            checked += 1
        for name in sorted(set(_NAME.findall(text))):
            assert _resolves(name), (doc, name)
            checked += 1
        for link in _LINK.findall(text):
            if link.startswith("http"):
                continue
            target, _, anchor = link.partition("#")
            where = (path.parent / target).resolve() if target else path
            assert where.exists(), (doc, link)
            if anchor:
                headings = re.findall(r"^#+ (.+)$", where.read_text(), re.M)
                assert anchor in {_anchor(h) for h in headings}, (doc, link)
            checked += 1
    assert checked >= 50, checked
