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
from decimal import Decimal
from typing import Any

from kraftlog.schema.model import FieldSpec, MessageSpec, StructSpec
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
        return json.dumps(obj, ensure_ascii=False)
    if isinstance(obj, dict):
        return "{" + ",".join(json.dumps(str(k), ensure_ascii=False) + ":" + dumps(v) for k, v in obj.items()) + "}"
    if isinstance(obj, list | tuple):
        return "[" + ",".join(dumps(v) for v in obj) + "]"
    if isinstance(obj, bytes | bytearray):
        return dumps(base64.b64encode(obj).decode("ascii"))
    raise TypeError(f"cannot render {type(obj).__name__} as JSON")


def struct_to_json(spec: MessageSpec, struct: StructSpec, version: int, data: dict[str, Any],
                   redacted: tuple[str, ...] = ()) -> dict[str, Any]:
    """One struct's fields as Kafka's JsonConverter writes them (a dict in output order)."""
    out: dict[str, Any] = {}
    for f in struct.fields:
        if not f.present_in(version) or f.column not in data:
            continue
        value = data[f.column]
        if f.column in redacted:  # a redacted identifier keeps its fingerprint
            out[f.json_name] = value if isinstance(value, str) else REDACTED
            continue
        if f.tagged_in(version) and value == f.default():
            continue
        out[f.json_name] = _value_to_json(spec, f, version, value)
    return out


def _value_to_json(spec: MessageSpec, f: FieldSpec, version: int, value: Any) -> Any:
    if value is None:
        return None
    if f.is_struct:
        sub = spec.struct_for(f)
        if f.is_array:
            return [struct_to_json(spec, sub, version, v) for v in value]
        return struct_to_json(spec, sub, version, value)
    if f.element_type in ("bytes", "records"):
        if f.is_array:
            return [base64.b64encode(v).decode("ascii") if v is not None else None for v in value]
        return base64.b64encode(value).decode("ascii")
    if f.element_type == "float64":
        return [float(v) for v in value] if f.is_array else float(value)
    return value


def payload(decoded: Decoded) -> dict[str, Any] | None:
    """The ``data`` object Kafka prints for a decoded value (None when it could not be decoded)."""
    if decoded.data is None:
        return None
    spec = decoded.spec
    if spec is None:  # values without a schema (EndTxnMarker): keys are already final
        return {_camel(k): v for k, v in decoded.data.items()}
    return struct_to_json(spec, spec.body, decoded.version or 0, decoded.data, decoded.redacted)


def _camel(column: str) -> str:
    head, *rest = column.split("_")
    return head + "".join(p.title() for p in rest)
