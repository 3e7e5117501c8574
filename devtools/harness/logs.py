"""The agent's JSON log as the tests read it: by the stable ``code`` each event carries
(``code="caps-adopted"``), never by its sentence, which is for people and may be reworded.
"""

from __future__ import annotations

import json
from typing import Any


def log_events(text: str | bytes) -> list[dict[str, Any]]:
    """The JSON objects of a log, one a line, in order (other lines skipped: kubectl's,
    a traceback's)."""
    lines = text.decode(errors="replace") if isinstance(text, bytes) else text
    events = []
    for raw in lines.splitlines():
        try:
            value = json.loads(raw)
        except ValueError:
            continue
        if isinstance(value, dict):
            events.append(value)
    return events


def coded(text: str | bytes, *codes: str, pod: str | None = None) -> list[dict[str, Any]]:
    """The events of a log with one of ``codes`` (for one pod, when given), in order."""
    return [e for e in log_events(text)
            if e.get("code") in codes and (pod is None or e.get("pod") == pod)]  # fmt: skip
