"""The one way the tests and the benchmarks wait for what another thread, process or
server does: poll a condition until it holds, or fail saying what was not reached.

The machine is shared (2 cores, several suites and builds at once): timeouts are
generous, and a timeout is a failure, never a measurement.
"""

from __future__ import annotations

import time
from collections.abc import Callable


def wait_until(
    condition: Callable[[], object],
    timeout: float = 60.0,
    what: str = "",
    interval: float = 0.05,
    explain: Callable[[], str] | None = None,
) -> float:
    """Poll ``condition`` until it is true; return the seconds it took. After ``timeout``
    seconds raise AssertionError naming ``what`` (or the condition) and, when given,
    ``explain()`` (a log's tail, the last figures)."""
    start = time.monotonic()
    while not condition():
        if time.monotonic() - start > timeout:
            said = f"not reached in {timeout:g} s: {what or condition}"
            raise AssertionError(f"{said}\n{explain()}" if explain is not None else said)
        time.sleep(interval)
    return time.monotonic() - start
