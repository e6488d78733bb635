"""Generate one flat reader function per (struct, version) from a ``MessageSpec``.

Interpreting a schema for every record is where naive decoders lose 10x, so the definitions are
compiled once into Python source: runs of fixed-width fields become one ``struct.unpack_from``,
single-byte varints take an inline fast path, tagged fields a ``if tag == N`` chain. The rules are
those of Kafka's ``MessageDataGenerator``:

* a field is on the wire at version v iff v is in ``versions`` and not in ``taggedVersions``;
* flexible versions use compact lengths (uvarint of n+1) and end every struct with a tag buffer;
* a tagged field absent from the buffer takes its default; unknown tags are kept as raw bytes;
* a known tag not valid at v fails with ``Tag N is not valid for version V``.

A reader is ``read(buf, pos, end) -> (dict, pos)``: the dict is keyed by snake_case column names,
holds every field present at that version (tagged ones filled with defaults) and, only when the
input had them, ``_unknown_tagged_fields``: a list of ``{"tag": int, "data": bytes}``.
Readers raise ``SchemaReadError``, ``IndexError``, ``struct.error`` or ``ValueError`` (over-long
varint) on bad input; callers turn those into ``KraftDecodeError`` with a file position.
"""

from __future__ import annotations

import base64
import struct
from collections.abc import Callable
from typing import Any

from kraftlog.schema.model import PRIMITIVE_SIZES, FieldSpec, MessageSpec, StructSpec
from kraftlog.wire.errors import SchemaReadError
from kraftlog.wire.varint import read_uvarint

Reader = Callable[[bytes, int, int], tuple[dict[str, Any], int]]

UNKNOWN_TAGS = "_unknown_tagged_fields"

_STRUCT_CODES = {
    "bool": "?",
    "int8": "b",
    "int16": "h",
    "uint16": "H",
    "int32": "i",
    "uint32": "I",
    "int64": "q",
    "float64": "d",
    "uuid": "16s",
}


_UUIDS: dict[bytes, str] = {}  # text by raw UUID, as ``uuid_text`` made it
UUIDS_KEPT = 1 << 16  # at most so many (forgotten all at once past that)


def uuid_text(raw: bytes) -> str:
    """Kafka's text form of a UUID: URL-safe Base64 of the 16 bytes, no padding. Remembered (up to ``UUIDS_KEPT``):
    a log names the same topics and log directories record after record, and a look-up costs a fifth of encoding."""
    text = _UUIDS.get(raw)
    if text is None:
        if len(_UUIDS) >= UUIDS_KEPT:
            _UUIDS.clear()
        text = _UUIDS[bytes(raw)] = base64.urlsafe_b64encode(raw)[:22].decode("ascii")
    return text


class _Emitter:
    """Accumulates the source of one module of reader functions."""

    def __init__(self, spec: MessageSpec):
        self.spec = spec
        self.lines: list[str] = []
        self.consts: dict[str, Any] = {}
        self.done: set[str] = set()
        self.counter = 0

    def fresh(self, stem: str) -> str:
        self.counter += 1
        return f"{stem}{self.counter}"

    def const(self, value: Any, stem: str = "_k") -> str:
        name = self.fresh(stem)
        self.consts[name] = value
        return name

    # -- functions ---------------------------------------------------------------------------
    def function(self, struct_spec: StructSpec, version: int) -> str:
        name = f"read_{struct_spec.name}_v{version}"
        if name in self.done:
            return name
        self.done.add(name)
        flexible = self.spec.flexible(version)
        body: list[str] = []
        present = [f for f in struct_spec.fields if f.present_in(version)]
        wire = [f for f in present if not f.tagged_in(version)]
        tagged = [f for f in present if f.tagged_in(version)]
        out_vars: list[tuple[str, str]] = []

        # group runs of fixed-width primitives into one unpack
        i = 0
        while i < len(wire):
            f = wire[i]
            if f.type in _STRUCT_CODES and not f.is_array:
                run = [f]
                j = i + 1
                while j < len(wire) and wire[j].type in _STRUCT_CODES and not wire[j].is_array:
                    run.append(wire[j])
                    j += 1
                fmt = ">" + "".join(_STRUCT_CODES[g.type] for g in run)
                unpack = self.const(struct.Struct(fmt).unpack_from, "_s")
                size = struct.calcsize(fmt)
                names = [self.fresh("v") for _ in run]
                body.append(f"{', '.join(names)}, = {unpack}(buf, pos)")
                body.append(f"pos += {size}")
                for g, v in zip(run, names, strict=True):
                    if g.type == "uuid":
                        body.append(f"{v} = _uuid({v})")
                    out_vars.append((g.column, v))
                i = j
                continue
            v = self.fresh("v")
            body.extend(self.read_value(f, v, version, self.compact(f, flexible), "end"))
            out_vars.append((f.column, v))
            i += 1

        body.append("d = {" + ", ".join(f"{k!r}: {v}" for k, v in out_vars) + "}")
        if flexible:
            body.extend(self.tag_buffer(struct_spec, version, tagged))
        body.append("return d, pos")
        self.lines.append(f"def {name}(buf, pos, end):")
        self.lines.extend("    " + line for line in body)
        self.lines.append("")
        return name

    def compact(self, f: FieldSpec, flexible: bool) -> bool:
        return flexible if f.flexible_versions is None else not f.flexible_versions.empty

    def tag_buffer(self, struct_spec: StructSpec, version: int, tagged: list[FieldSpec]) -> list[str]:
        body = [*self.uvarint("ntags")]
        for f in tagged:
            default = f.default()
            body.append(f"d[{f.column!r}] = {self.const(default) if isinstance(default, list) else repr(default)}"
                        + (".copy()" if isinstance(default, list) else ""))
        body.append("for _ in range(ntags):")
        loop = [*self.uvarint("tag"), *self.uvarint("size")]
        loop.append("stop = pos + size")
        loop.append("if stop > end:")
        loop.append("    raise _E(f'tagged field {tag} of size {size} overruns the struct', pos)")
        first = True
        for f in tagged:
            v = self.fresh("t")
            kw = "if" if first else "elif"
            first = False
            loop.append(f"{kw} tag == {f.tag}:")
            inner = self.read_value(f, v, version, True, "stop")
            inner.append(f"d[{f.column!r}] = {v}")
            inner.append("if pos != stop:")
            inner.append(f"    raise _E('tagged field {f.name} (tag {f.tag}) did not fill its {{size}} bytes', pos)")
            loop.extend("    " + line for line in inner)
        invalid = sorted({g.tag for g in struct_spec.fields
                          if g.tag is not None and not g.tagged_in(version)} - {g.tag for g in tagged})
        for t in invalid:
            kw = "if" if first else "elif"
            first = False
            loop.append(f"{kw} tag == {t}:")
            loop.append(f"    raise _E('Tag {t} is not valid for version {version}', pos)")
        other = "else:" if not first else "if True:"
        loop.append(other)
        loop.append(f"    d.setdefault({UNKNOWN_TAGS!r}, []).append({{'tag': tag, 'data': bytes(buf[pos:stop])}})")
        loop.append("    pos = stop")
        body.extend("    " + line for line in loop)
        return body

    # -- values ------------------------------------------------------------------------------
    def uvarint(self, var: str) -> list[str]:
        return [
            "b = buf[pos]",
            "if b < 128:",
            f"    {var} = b",
            "    pos += 1",
            "else:",
            f"    {var}, pos = _uv(buf, pos)",
        ]

    def length(self, var: str, compact: bool, wide: bool) -> list[str]:
        """Read a length or count: compact uvarint n+1, else int16 (strings) or int32."""
        if compact:
            return [*self.uvarint(var), f"{var} -= 1"]
        code = "i" if wide else "h"
        unpack = self.const(struct.Struct(">" + code).unpack_from, "_s")
        return [f"{var}, = {unpack}(buf, pos)", f"pos += {4 if wide else 2}"]

    def null_or_fail(self, f: FieldSpec, var: str, version: int) -> list[str]:
        if f.nullable_in(version):
            return [f"    {var} = None"]
        return [f"    raise _E('non-nullable field {f.name} was serialized as null', pos)"]

    def read_value(self, f: FieldSpec, var: str, version: int, compact: bool, end: str) -> list[str]:
        t = f.type
        if f.is_array:
            return self.read_array(f, var, version, compact, end)
        if t in _STRUCT_CODES:
            unpack = self.const(struct.Struct(">" + _STRUCT_CODES[t]).unpack_from, "_s")
            lines = [f"{var}, = {unpack}(buf, pos)", f"pos += {PRIMITIVE_SIZES[t]}"]
            if t == "uuid":
                lines.append(f"{var} = _uuid({var})")
            return lines
        if t in ("string", "bytes", "records"):
            n = self.fresh("n")
            lines = self.length(n, compact, wide=t != "string")
            lines.append(f"if {n} < 0:")
            lines.extend(self.null_or_fail(f, var, version))
            lines.append("else:")
            inner: list[str] = []
            if t == "string":
                inner.append(f"if {n} > 0x7fff:")
                inner.append(f"    raise _E(f'string field {f.name} had invalid length {{{n}}}', pos)")
            inner.append(f"if pos + {n} > {end}:")
            inner.append(f"    raise _E(f'{f.name}: {{{n}}} bytes claimed, {{{end} - pos}} left', pos)")
            if t == "string":
                inner.append(f"{var} = buf[pos:pos + {n}].decode('utf-8', 'replace')")
            else:
                inner.append(f"{var} = bytes(buf[pos:pos + {n}])")
            inner.append(f"pos += {n}")
            lines.extend("    " + line for line in inner)
            return lines
        # a single (non-array) struct
        sub = self.function(self.spec.struct_for(f), version)
        if f.nullable_in(version):
            flag = self.fresh("p")
            return [
                f"{flag} = buf[pos]",
                "pos += 1",
                f"if {flag} >= 128:",  # int8 -1 marks null
                f"    {var} = None",
                "else:",
                f"    {var}, pos = {sub}(buf, pos, {end})",
            ]
        return [f"{var}, pos = {sub}(buf, pos, {end})"]

    def read_array(self, f: FieldSpec, var: str, version: int, compact: bool, end: str) -> list[str]:
        n = self.fresh("n")
        et = f.element_type
        lines = self.length(n, compact, wide=True)
        lines.append(f"if {n} < 0:")
        lines.extend(self.null_or_fail(f, var, version))
        lines.append(f"elif {n} > {end} - pos:")
        lines.append(f"    raise _E(f'Tried to allocate a collection of size {{{n}}}, but there are only "
                     f"{{{end} - pos}} bytes remaining.', pos)")
        lines.append("else:")
        inner: list[str] = []
        if et in _STRUCT_CODES and et != "uuid":
            size = PRIMITIVE_SIZES[et]
            code = _STRUCT_CODES[et]
            inner.append(f"if pos + {size} * {n} > {end}:")
            inner.append(f"    raise _E(f'{f.name}: {{{n}}} elements overrun the value', pos)")
            inner.append(f"{var} = list(_unpack(f'>{{{n}}}{code}', buf, pos))")
            inner.append(f"pos += {size} * {n}")
        elif et == "uuid":
            inner.append(f"if pos + 16 * {n} > {end}:")
            inner.append(f"    raise _E(f'{f.name}: {{{n}}} uuids overrun the value', pos)")
            inner.append(f"{var} = [_uuid(buf[i:i + 16]) for i in range(pos, pos + 16 * {n}, 16)]")
            inner.append(f"pos += 16 * {n}")
        else:
            elem = FieldSpec(name=f.name, type=et, versions=f.versions, fields=f.fields)
            ev = self.fresh("e")
            inner.append(f"{var} = []")
            inner.append(f"for _ in range({n}):")
            body = self.read_value(elem, ev, version, compact, end)
            body.append(f"{var}.append({ev})")
            inner.extend("    " + line for line in body)
        lines.extend("    " + line for line in inner)
        return lines


def compile_readers(spec: MessageSpec, versions: range | None = None) -> dict[int, Reader]:
    """Compile a reader for every valid version of ``spec`` (or the versions given)."""
    emitter = _Emitter(spec)
    vs = versions if versions is not None else range(spec.valid_versions.lowest,
                                                     spec.valid_versions.highest + 1)
    names = {v: emitter.function(spec.body, v) for v in vs}
    namespace: dict[str, Any] = {
        "_uv": read_uvarint,
        "_E": SchemaReadError,
        "_uuid": uuid_text,
        "_unpack": struct.unpack_from,
    }
    namespace.update(emitter.consts)
    source = "\n".join(emitter.lines)
    exec(compile(source, f"<kraftlog readers for {spec.name}>", "exec"), namespace)
    readers = {v: namespace[n] for v, n in names.items()}
    for r in readers.values():
        r.__kraftlog_source__ = source
    return readers
