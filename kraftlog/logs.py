"""kraftlog's log lines on stderr: its own messages (the ``kraftlog`` logger) at the level asked, those of the
libraries it drives (py4j's "Closing down clientserver connection" at every exit, Spark's Python side) only from
WARNING up, so a run's output is kraftlog's."""

from __future__ import annotations

import logging

LOGGER = "kraftlog"


def log_to_stderr(level: int = logging.INFO, fmt: str = "%(asctime)s %(message)s",
                  datefmt: str | None = "%H:%M:%S") -> None:
    """Log kraftlog's messages of ``level`` and up, and other loggers' warnings and errors, to stderr (where the
    process has no logging set up yet: an embedding application's own set-up is left as it is)."""
    logging.basicConfig(level=logging.WARNING, format=fmt, datefmt=datefmt)
    logging.getLogger(LOGGER).setLevel(level)
