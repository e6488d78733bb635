"""Refresh ``schemas/`` from a copy of Apache Kafka's message definitions.

Each document under ``schemas/`` has three parts:

* ``message``: Kafka's definition, unchanged but for its ``//`` comments (moved to ``source.comments``);
* ``source``: where it came from (repository, commit, path);
* ``kraftlog``: our annotations (kind, control type ids, sensitive fields, release history).

Re-importing replaces ``message`` and ``source`` and keeps ``kraftlog``, so a Kafka upgrade is one command::

    python -m kraftlog.schema.importer ../shared/kafka/schemas schemas --commit <sha>
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click

# Where each folder of the shared copy lives in the Kafka tree.
KAFKA_PATHS = {
    "metadata": "metadata/src/main/resources/common/metadata",
    "control": "clients/src/main/resources/common/message",
    "other": "raft/src/main/resources/common/message",
}


def strip_json_comments(text: str) -> tuple[str, list[str]]:
    """Remove ``//`` comments (outside strings) from Kafka's JSON; return the JSON and the comments."""
    out: list[str] = []
    comments: list[str] = []
    i, n = 0, len(text)
    in_string = False
    while i < n:
        c = text[i]
        if in_string:
            out.append(c)
            if c == "\\" and i + 1 < n:
                out.append(text[i + 1])
                i += 2
                continue
            if c == '"':
                in_string = False
            i += 1
            continue
        if c == '"':
            in_string = True
            out.append(c)
            i += 1
            continue
        if c == "/" and i + 1 < n and text[i + 1] == "/":
            end = text.find("\n", i)
            end = n if end < 0 else end
            comments.append(text[i + 2 : end].strip())
            i = end
            continue
        out.append(c)
        i += 1
    return "".join(out), comments


def load_kafka_json(path: Path) -> tuple[dict[str, Any], list[str]]:
    """Parse one of Kafka's ``*.json`` message definitions."""
    body, comments = strip_json_comments(path.read_text(encoding="utf-8"))
    # the licence header is not worth keeping; the version notes are
    notes = [c for c in comments if c and not _is_licence_line(c)]
    return json.loads(body), notes


def _is_licence_line(line: str) -> bool:
    keys = ("Licensed to the Apache", "contributor license", "NOTICE file", "this work for", "The ASF",
            "(the \"License\")", "the License.", "http://www.apache.org", "Unless required", "distributed under",
            "WITHOUT WARRANTIES", "See the License", "limitations under")
    return any(k in line for k in keys)


def kafka_source_files(kafka_dir: Path) -> list[tuple[Path, str, str]]:
    """Every definition in a shared copy: (file, our relative output path, Kafka path)."""
    found: list[tuple[Path, str, str]] = []
    for folder, kafka_path in KAFKA_PATHS.items():
        for f in sorted((kafka_dir / folder).glob("*.json")):
            found.append((f, f"{folder}/{f.name}", f"{kafka_path}/{f.name}"))
    for f in sorted((kafka_dir / "historical").glob("*/*.json")):
        commit = f.parent.name
        found.append((f, f"historical/{f.name}", f"{KAFKA_PATHS['metadata']}/{f.name}@{commit}"))
    return found


def import_schemas(kafka_dir: Path, out_dir: Path, repo: str, commit: str) -> list[Path]:
    """Write or refresh our documents from Kafka's; returns the files written."""
    written: list[Path] = []
    for src, rel, kafka_path in kafka_source_files(kafka_dir):
        message, notes = load_kafka_json(src)
        target = out_dir / rel
        existing: dict[str, Any] = {}
        if target.exists():
            existing = json.loads(target.read_text(encoding="utf-8"))
        path, _, at = kafka_path.partition("@")
        doc = {
            "source": {"repo": repo, "commit": at or commit, "path": path, "comments": notes},
            "kraftlog": existing.get("kraftlog", {"kind": "unclassified"}),
            "message": message,
        }
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(doc, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        if doc["kraftlog"].get("kind") == "unclassified":
            print(f"warning: {rel} is new; classify it in its 'kraftlog' block", file=sys.stderr)
        written.append(target)
    return written


@click.command()
@click.argument("kafka_dir", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.argument("out_dir", type=click.Path(file_okay=False, path_type=Path))
@click.option("--repo", default="apache/kafka", show_default=True)
@click.option("--commit", required=True, help="Kafka commit the definitions were copied from")
def main(kafka_dir: Path, out_dir: Path, repo: str, commit: str) -> None:
    """Refresh OUT_DIR (schemas/) from Kafka's definitions in KAFKA_DIR."""
    for f in import_schemas(kafka_dir, out_dir, repo, commit):
        click.echo(str(f))


if __name__ == "__main__":
    main()
