"""Logging setup: structlog, one JSON object a line in a cluster, readable lines locally.

Every module logs through ``structlog.get_logger()`` with key-value fields; only this
module decides how they are rendered. JSON goes to stderr (what the container runtime
collects, one event a line, ready for Loki or Elasticsearch); the local debug mode renders
the same events as aligned, coloured console lines when stderr is a terminal. stdout is
left to the console view, so ``waterline agent --local | less`` shows the view alone.

An event's sentence (structlog's ``event``) is for people and may be reworded; an event
that anything keys on (a test, an alert, a log query) also carries a stable ``code``
(``code="caps-adopted"``, kebab-case; an action record's code is its action label), and
that is what is matched.
"""

from __future__ import annotations

import logging
import sys
from typing import Any, TextIO

import structlog

FORMATS = ("json", "console")
LEVELS = ("debug", "info", "warning", "error")


def configure_logging(fmt: str = "json", level: str = "info", stream: TextIO | None = None) -> None:
    """Configure structlog for the whole process (call once, at start-up)."""
    if fmt not in FORMATS:
        raise ValueError(f"log format must be one of {FORMATS}, got {fmt!r}")
    if level not in LEVELS:
        raise ValueError(f"log level must be one of {LEVELS}, got {level!r}")
    out = stream if stream is not None else sys.stderr
    renderer: Any
    if fmt == "json":
        renderer = structlog.processors.JSONRenderer(sort_keys=False)
    else:
        renderer = structlog.dev.ConsoleRenderer(
            colors=bool(getattr(out, "isatty", lambda: False)())
        )
    processors: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        structlog.processors.StackInfoRenderer(),
    ]
    if fmt == "json":  # the console renderer formats tracebacks itself
        processors.append(structlog.processors.format_exc_info)
    structlog.configure(
        processors=[*processors, renderer],
        wrapper_class=structlog.make_filtering_bound_logger(getattr(logging, level.upper())),
        logger_factory=structlog.PrintLoggerFactory(file=out),
        cache_logger_on_first_use=False,
    )
