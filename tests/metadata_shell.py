"""Parse the ``kafka-metadata-shell`` dumps of scenario A (``### tree /image/<x>`` sections)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any


def _parse_tree(lines: list[str]) -> dict[str, Any]:
    root: dict[str, Any] = {}
    stack: list[tuple[int, dict[str, Any]]] = [(-1, root)]
    pending: tuple[int, dict[str, Any], str] | None = None  # a "name:" line whose content is not known yet
    for raw in lines:
        if not raw.strip():
            continue
        indent = (len(raw) - len(raw.lstrip(" "))) // 2
        text = raw.strip()
        if pending is not None:
            p_indent, p_parent, p_name = pending
            if indent > p_indent and not text.endswith(":"):
                p_parent[p_name] = text  # a leaf under the pending node
                pending = None
                continue
            node: dict[str, Any] = {}
            p_parent[p_name] = node
            stack.append((p_indent, node))
            pending = None
        while stack and stack[-1][0] >= indent:
            stack.pop()
        parent = stack[-1][1]
        if text.endswith(":"):
            pending = (indent, parent, text[:-1])
        else:
            parent[text] = text
    if pending is not None:
        pending[1][pending[2]] = {}
    return root


def parse_shell_dump(path: Path) -> dict[str, Any]:
    """``{"acls": {...}, "cluster": {...}, ..., "clientQuotas": {entity: {key: value}}}``."""
    text = path.read_text()
    out: dict[str, Any] = {"clientQuotas": {}}
    for m in re.finditer(r"^### tree /image/(\S+)\n(.*?)(?=^### |\Z)", text, re.S | re.M):
        name, body = m.group(1), m.group(2)
        if name.startswith("clientQuotas/"):
            entity = name.split("/", 1)[1]
            prefix = f"tree /image/clientQuotas/{entity}"
            if "No such file or directory" in body:
                continue  # a default entity the 3.9 shell cannot resolve
            body = body.replace(prefix, "", 1)
            out["clientQuotas"][entity] = _parse_tree(body.splitlines())
        elif name != "provenance":
            out[name] = _parse_tree(body.splitlines())
    return out
