"""RFC 3339 timestamps as float seconds since the epoch (UTC)."""

from __future__ import annotations

import time
from datetime import UTC, datetime


def parse_time(value: object) -> float | None:
    """Parse an RFC 3339 timestamp; None stays None. Raises ValueError on garbage."""
    if value is None or value == "":
        return None
    if isinstance(value, datetime):
        moment = value if value.tzinfo else value.replace(tzinfo=UTC)
        return moment.timestamp()
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if not isinstance(value, str):
        raise ValueError(f"not a timestamp: {value!r}")
    text = value.strip()
    if text.endswith(("Z", "z")):
        text = text[:-1] + "+00:00"
    moment = datetime.fromisoformat(text)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


def parse_time_or_none(value: object) -> float | None:
    """``parse_time`` for a time anyone may have written (an annotation, a ConfigMap, an
    Event): None when it is missing or unreadable."""
    try:
        return parse_time(value)
    except ValueError:
        return None


def format_time(epoch: float) -> str:
    """Render epoch seconds as RFC 3339 UTC with a Z, the fraction cut off (as the API
    server writes a metav1.Time)."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))
