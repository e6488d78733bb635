"""Render decoded values as ``kafka-dump-log --cluster-metadata-decoder`` prints them.

The payload JSON comes from Kafka's generated ``*JsonConverter.write`` via Jackson, compact:

* keys are the schema names with the first letter lower-cased, in declaration order;
* a field absent at the record's version is not printed; a tagged field equal to its default is not
  printed; non-tagged fields always are (null as ``null``);
* uuid: URL-safe Base64 without padding; bytes: standard Base64 with padding (Jackson BinaryNode);
* float64: Java's ``Double.toString`` (``1048576.0``, ``2.097152E7``).
"""

from __future__ import annotations

import base64
import json
import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from decimal import Decimal
from typing import Any

import orjson

from kraftlog.schema.model import MessageSpec, StructSpec
from kraftlog.wire.messages import Decoded
from kraftlog.wire.redact import REDACTED


def java_double(x: float) -> str:
    """``Double.toString``: decimal in [1e-3, 1e7), else ``d.dddE<n>``; shortest round-trip digits."""
    if math.isnan(x):
        return '"NaN"'
    if math.isinf(x):
        return '"Infinity"' if x > 0 else '"-Infinity"'
    if x == 0:
        return "-0.0" if math.copysign(1.0, x) < 0 else "0.0"
    a = abs(x)
    if 1e-3 <= a < 1e7:
        r = repr(x)
        if "e" in r or "E" in r:  # repr may use exponents where Java does not (not in this range today)
            r = format(Decimal(r), "f")
        return r if "." in r else r + ".0"
    sign, digits, exp = Decimal(repr(x)).as_tuple()
    ds = "".join(map(str, digits)).rstrip("0") or "0"
    exponent = len(digits) + int(exp) - 1
    mantissa = ds[0] + "." + (ds[1:] or "0")
    return ("-" if sign else "") + f"{mantissa}E{exponent}"


def dumps(obj: Any) -> str:
    """Compact JSON as Jackson writes it (floats in Java's notation)."""
    if obj is None:
        return "null"
    if obj is True:
        return "true"
    if obj is False:
        return "false"
    if isinstance(obj, int):
        return str(obj)
    if isinstance(obj, float):
        return java_double(obj)
    if isinstance(obj, str):
        return _quote(obj)
    if isinstance(obj, dict):
        return "{" + ",".join(_quote(str(k)) + ":" + dumps(v) for k, v in obj.items()) + "}"
    if isinstance(obj, list | tuple):
        return "[" + ",".join(dumps(v) for v in obj) + "]"
    if isinstance(obj, bytes | bytearray):
        return _quote(base64.b64encode(obj).decode("ascii"))
    raise TypeError(f"cannot render {type(obj).__name__} as JSON")


_quote = json.encoder.encode_basestring  # json.dumps(str, ensure_ascii=False), without its dispatch
PLAIN, FLOAT, BYTES, STRUCT = range(4)  # how a field's value is written


@dataclass(frozen=True, slots=True)
class _Out:
    """One field as Kafka's JsonConverter writes it at one version: its key, column, whether it is left out at its
    default (tagged), how its value is written, and the fields of its struct (a name is a schema identifier: its key
    needs no escaping)."""

    name: str  # the JSON key
    key: str  # as written: '"name":'
    column: str
    tagged: bool
    default: Any
    kind: int
    array: bool
    struct: _Plan | None = None
    text: Callable[[Any], str] = dumps  # a value (not null) as JSON text, chosen by the field's type


_INTEGERS = frozenset({"int8", "int16", "uint16", "int32", "uint32", "int64"})


def _int_list(value: list[int]) -> str:
    return "[" + ",".join(map(str, value)) + "]"


def _string_list(value: list[Any]) -> str:
    """An array of strings (or uuids); a null element, which no schema allows, is written as ``dumps`` does."""
    return "[" + ",".join(map(dumps, value) if None in value else map(_quote, value)) + "]"


def _struct(f: _Out) -> _Plan:
    """The plan of a struct field's struct."""
    if f.struct is None:
        raise TypeError(f"field {f.name} is not a struct")
    return f.struct


def _writer(f: _Out, element_type: str) -> Callable[[Any], str]:
    """How a field's value (not null) is written: the type decides, once per field."""
    if f.kind == STRUCT:
        sub = _struct(f)
        return (lambda v: "[" + ",".join(_text(sub, e) for e in v) + "]") if f.array else (lambda v: _text(sub, v))
    if f.kind != PLAIN:
        return lambda v: dumps(_value(f, v))
    if element_type in _INTEGERS:
        return _int_list if f.array else str
    if element_type in ("string", "uuid"):
        return _string_list if f.array else _quote
    return dumps


class _Plan:
    """The fields of one struct as written at one version, in declaration order, and ``write``: its JSON text with
    nothing redacted, for data holding every field (a reader's dict; else ``KeyError``), as one function compiled
    from the fields (the field loop unrolled, each field's key and default bound). It fills a dict in the fields'
    order for orjson to write: a plain value (a number, string, boolean or a list of them) as it is, which orjson
    writes as Jackson does; the others as the JSON text of their writer (``_writer``: Base64 bytes, Java's doubles,
    nested structs). The ingest writes every distinct record value through it; ``_text`` falls back to ``_fields``
    where it cannot serve (a field missing, a value orjson refuses: a string with a lone surrogate)."""

    __slots__ = ("fields", "write")

    def __init__(self, fields: tuple[_Out, ...]) -> None:
        self.fields = fields
        env: dict[str, Any] = {"dumps": orjson.dumps, "text": orjson.Fragment}
        lines = ["def write(data):", "    out = {}"]
        for i, f in enumerate(fields):
            env[f"t{i}"], env[f"d{i}"] = f.text, f.default
            value = "v" if f.kind == PLAIN else f"(None if v is None else text(t{i}(v)))"
            add = f"out[{f.name!r}] = {value}"
            lines += [f"    v = data[{f.column!r}]",
                      f"    if not v == d{i}:\n        {add}" if f.tagged else f"    {add}"]  # (tagged: not at default)
        lines.append("    return dumps(out).decode()")
        exec(compile("\n".join(lines), "<kraftlog JSON writer>", "exec"), env)
        self.write: Callable[[dict[str, Any]], str] = env["write"]


_PLANS: dict[tuple[int, str, int], tuple[MessageSpec, _Plan]] = {}


def _plan(spec: MessageSpec, struct: StructSpec, version: int) -> _Plan:
    """How ``struct`` is written at ``version`` (made once per struct and version)."""
    key = (id(spec), struct.name, version)
    found = _PLANS.get(key)
    if found is None:
        out = []
        for f in struct.fields:
            if not f.present_in(version):
                continue
            t = f.element_type
            kind = STRUCT if f.is_struct else BYTES if t in ("bytes", "records") else FLOAT if t == "float64" \
                else PLAIN
            sub = _plan(spec, spec.struct_for(f), version) if kind == STRUCT else None
            field = _Out(f.json_name, f'"{f.json_name}":', f.column, f.tagged_in(version), f.default(), kind,
                         f.is_array, sub)
            out.append(replace(field, text=_writer(field, t)))
        found = _PLANS[key] = (spec, _Plan(tuple(out)))  # (the spec kept alive: its id stays its own)
    return found[1]


def _fields(plan: _Plan, data: dict[str, Any], redacted: tuple[str, ...]
            ) -> list[tuple[_Out, Any, bool]]:
    """The fields of ``plan`` written for ``data``: field, value, and whether it is a redacted identifier (which
    keeps its fingerprint); a field missing from ``data`` is left out. (A value with nothing redacted and every
    field is written by ``plan.write``.)"""
    out = []
    for f in plan.fields:
        column = f.column
        if column not in data:
            continue
        value = data[column]
        if redacted and column in redacted:
            out.append((f, value if isinstance(value, str) else REDACTED, True))
        elif not (f.tagged and value == f.default):
            out.append((f, value, False))
    return out


def _value(f: _Out, value: Any) -> Any:
    if value is None:
        return None
    if f.kind == STRUCT:
        sub = _struct(f)
        return [_object(sub, v) for v in value] if f.array else _object(sub, value)
    if f.kind == BYTES:
        return [None if v is None else _b64(v) for v in value] if f.array else _b64(value)
    if f.kind == FLOAT:
        return [float(v) for v in value] if f.array else float(value)
    return value


def _object(plan: _Plan, data: dict[str, Any], redacted: tuple[str, ...] = ()) -> dict[str, Any]:
    return {f.name: value if kept else _value(f, value) for f, value, kept in _fields(plan, data, redacted)}


def _text(plan: _Plan, data: dict[str, Any], redacted: tuple[str, ...] = ()) -> str:
    if not redacted:
        try:
            return plan.write(data)
        except (KeyError, orjson.JSONEncodeError):  # a field missing from ``data`` (not a reader's dict), a value
            pass  # orjson refuses: field by field below
    return "{" + ",".join([f.key + (dumps(value) if kept or value is None else f.text(value))
                           for f, value, kept in _fields(plan, data, redacted)]) + "}"


def _b64(value: bytes) -> str:
    return base64.b64encode(value).decode("ascii")


def struct_to_json(spec: MessageSpec, struct: StructSpec, version: int, data: dict[str, Any],
                   redacted: tuple[str, ...] = ()) -> dict[str, Any]:
    """One struct's fields as Kafka's JsonConverter writes them (a dict in output order)."""
    return _object(_plan(spec, struct, version), data, redacted)


def payload(decoded: Decoded) -> dict[str, Any] | None:
    """The ``data`` object Kafka prints for a decoded value (None when it could not be decoded)."""
    if decoded.data is None:
        return None
    spec = decoded.spec
    if spec is None:  # values without a schema (EndTxnMarker): keys are already final
        return {_camel(k): v for k, v in decoded.data.items()}
    return struct_to_json(spec, spec.body, decoded.version or 0, decoded.data, decoded.redacted)


def payload_json(decoded: Decoded) -> str | None:
    """``dumps(payload(decoded))``, written straight from the decoded value (no dict in between)."""
    spec = decoded.spec
    if decoded.data is None or spec is None:
        p = payload(decoded)
        return None if p is None else dumps(p)
    return _text(_plan(spec, spec.body, decoded.version or 0), decoded.data, decoded.redacted)


def _camel(column: str) -> str:
    head, *rest = column.split("_")
    return head + "".join(p.title() for p in rest)
