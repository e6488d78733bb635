"""py4j's name lookups, remembered on the driver of a classic (non-Connect) session.

PySpark builds every Column through py4j, and py4j resolves a JVM name anew on each use: ``F.col`` asks the JVM
what ``functions`` and ``functions.col`` are, ``_to_seq`` what ``PythonUtils`` is, ``jvm.java.util.ArrayList``
what ``java``, ``java.util`` and ``ArrayList`` are. The JVM answers a simple name it cannot load as given by
trying it under each of the gateway's star imports, and a name that is no class (``functions`` as given, each of
its wrong imports, ``java.util``) costs a search through every jar of Spark's class path (287 in pip pyspark 4);
a JVM does not remember a miss. One ingest, reconstruct and analyze of a small cluster asked ~1,900 names; 200
small frames built in a loop ask 2,802 (7 with the answers kept: ``test_jvm_names``).

``remember_jvm_names`` keeps the answers that cannot change while the JVM lives:

- a class found for a dotted name (``org.apache.spark.sql.functions``) or a package a dotted name stands for
  (``java.util``): dotted names do not go through the imports;
- a class found for a simple name (``functions``): the gateway's imports are PySpark's, made at start-up;
- a static method of a class (``functions.col``): a proxy that names the class and the method, no state.

Not kept: what a simple name is when it is no class (``java``): an import made later may make it one; fields
(their value may change); errors.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

_MEMO = "_kraftlog_names"


def _remembering(lookup: Callable[[Any, str], Any], kept: tuple[type, ...], shared: bool
                 ) -> Callable[[Any, str], Any]:
    """``lookup`` (a ``__getattr__``) remembering its answers of the ``kept`` types: per object, or with ``shared``
    per gateway and qualified name (a package or class proxy is made anew by each lookup of a name not kept)."""

    def remembered(self: Any, name: str) -> Any:
        owner = self._gateway_client if shared else self
        key = (self._fqn, name) if shared else name
        memo = owner.__dict__.get(_MEMO)
        if memo is not None and key in memo:
            return memo[key]
        answer = lookup(self, name)
        if isinstance(answer, kept):
            owner.__dict__.setdefault(_MEMO, {})[key] = answer
        return answer

    remembered.__wrapped__ = lookup  # type: ignore[attr-defined]
    return remembered


def remember_jvm_names() -> None:
    """Make py4j remember the answers to name lookups that cannot change (see the module docstring).
    Idempotent."""
    from py4j.java_gateway import JavaClass, JavaMember, JavaPackage, JVMView

    for cls, kept, shared in ((JVMView, (JavaClass,), False), (JavaPackage, (JavaClass, JavaPackage), True),
                              (JavaClass, (JavaMember, JavaClass), True)):
        lookup = cls.__getattr__
        if not hasattr(lookup, "__wrapped__"):
            cls.__getattr__ = _remembering(lookup, kept, shared)
