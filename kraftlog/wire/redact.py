"""Redaction of secrets in decoded values, driven by the ``kraftlog`` annotations of ``schemas/``.

Rules (FACTS e; Kafka's ``RecordRedactor`` and ``KafkaConfigSchema.isSensitive``):

* fields listed in a schema's ``sensitiveFields`` (SCRAM salt / stored key / server key, delegation
  token ids) are always redacted;
* a config value (``sensitiveConfigValue``) is redacted when its key is PASSWORD-typed **or not known
  to be safe** for its resource type (``schemas/config_keys.json``): unknown keys, per-listener
  prefixed keys and unknown resource types are redacted, as Kafka's own log redaction does.

A redacted config value becomes ``"(redacted)"`` and a redacted bytes value ``None``. A redacted
identifier (a delegation token id) becomes ``"(redacted:<fingerprint>)"``, 64 bits of BLAKE2b: tokens
stay distinguishable in histories while the id, which with ``delegation.token.secret.key`` yields
the token's HMAC, is not disclosed (token ids are random UUIDs, so the fingerprint cannot be
inverted; config values can be guessable passwords and get no fingerprint). ``Decoded.redacted``
names the redacted columns so that no consumer mistakes a redaction for a real null.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
from typing import Any

from kraftlog.schema.model import FieldSpec, MessageSpec, column_name
from kraftlog.schema.registry import SchemaSet, load_schemas
from kraftlog.wire.messages import Decoded

REDACTED = "(redacted)"


def fingerprint(value: str) -> str:
    """The redacted form of a secret identifier: ``(redacted:<16 hex digits>)``."""
    return f"(redacted:{hashlib.blake2b(value.encode(), digest_size=8).hexdigest()})"


class ConfigSensitivity:
    """Kafka's ``isSensitive`` verdict for (resource type, config key)."""

    def __init__(self, config_keys: dict[str, Any]):
        self.type_names: dict[int, str] = {int(k): v for k, v in config_keys["resourceTypes"].items()}
        self.keys: dict[str, dict[str, str]] = config_keys["keys"]

    def is_sensitive(self, resource_type: int, name: str) -> bool:
        known = self.keys.get(self.type_names.get(resource_type, ""))
        if known is None:
            return True
        return known.get(name, "sensitive") != "safe"


class Redactor:
    """Returns a redacted copy of a ``Decoded`` when it holds a secret, else the value itself."""

    def __init__(self, schemas: SchemaSet):
        self.config = ConfigSensitivity(schemas.config_keys)
        self._always: dict[int, list[FieldSpec]] = {}
        self._config: dict[int, tuple[str, str, str]] = {}
        for key, spec in schemas.metadata.items():
            fields = [f for f in spec.body.fields if f.sensitive]
            if fields:
                self._always[key] = fields
            if spec.sensitive_config_value:
                c = spec.sensitive_config_value
                self._config[key] = (column_name(c["value"]), column_name(c["resourceType"]),
                                     column_name(c["name"]))

    def __call__(self, d: Decoded) -> Decoded:
        key = d.api_key
        if d.data is None or d.spec is None or d.spec.kind != "metadata" or key is None:
            return d
        fields = self._always.get(key)
        config = self._config.get(key)
        if fields is None and config is None:
            return d
        data = dict(d.data)
        redacted: list[str] = []
        for f in fields or ():
            if f.column in data and data[f.column] is not None:
                data[f.column] = None if f.type == "bytes" else fingerprint(str(data[f.column]))
                redacted.append(f.column)
        if config is not None:
            value_col, type_col, name_col = config
            if data.get(value_col) is not None and self.config.is_sensitive(data[type_col], data[name_col]):
                data[value_col] = REDACTED
                redacted.append(value_col)
        if not redacted:
            return d
        return dataclasses.replace(d, data=data, redacted=tuple(redacted))

    def is_sensitive_type(self, spec: MessageSpec) -> bool:
        """True for record types that may hold secrets (their raw bytes are never stored)."""
        return spec.api_key in self._always or spec.api_key in self._config


@functools.cache
def default_redactor() -> Redactor:
    return Redactor(load_schemas())
