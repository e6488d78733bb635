"""kraftlog's own exception types: a problem of the input, the warehouse, the profile or the request.

The command line and the spark-submit jobs turn a ``KraftlogError``, and what the operating system or a storage
service refused (``OSError``), into one line and exit status 1 (``TOLD``); any other exception is a bug and keeps
its traceback. The subclasses also derive from the built-in type they used to be (a caller
catching ``LookupError`` still catches ``ClusterNotFound``). Problems inside files are not raised: the
wire layer yields them as ``kraftlog.wire.errors.KraftDecodeError`` values next to what it could read.
"""

from __future__ import annotations


class KraftlogError(Exception):
    """A problem to tell the user as is (what, where, and what to do)."""


# what is told in one line, not as a traceback: kraftlog's own errors and what the surroundings refused (an unreachable
# endpoint, no permission, a full disk: pyarrow's, obstore's and the OS's messages name the path)
TOLD: tuple[type[BaseException], ...] = (KraftlogError, OSError)


class ClusterNotFound(KraftlogError, LookupError):
    """No cluster, or several, match the one asked for."""


class NotBuilt(KraftlogError, LookupError):
    """The tables a command reads are not there yet (run ``ingest``, ``reconstruct`` or ``analyze`` first)."""


class PointError(KraftlogError, ValueError):
    """A point of the log (``--at``, ``--from``, ``--to``) that cannot be read or is outside the log."""


class UsageError(KraftlogError, ValueError):
    """Options that do not go together, or a value kraftlog does not support."""
