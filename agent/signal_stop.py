"""A stop signal (SIGTERM, SIGHUP, SIGINT) turned into a call on a thread of its own.

Python runs a signal handler in the main thread between two bytecodes, whatever that
thread holds at the moment. A handler that logs can therefore deadlock: structlog's
``PrintLogger`` writes under a plain ``threading.Lock``, and a SIGTERM that arrives while
the main thread is inside a log write (or blocked in one: the handler then runs from the
write's EINTR retry) waits for a lock its own thread holds. On the real node an agent
stopped by a rollout restart said nothing and was killed at the end of its 30 s grace
period: its caps-kept decision never ran, and the cap it was writing went unrecorded.
``threading.Event.set`` from a handler has the same hazard (its condition's lock).

So the handler only writes the signal's number to a pipe (``os.write`` takes no lock of
Python's); a thread reads it and calls ``on_stop`` with the signal's name, as ordinary
code that may log and set events. The first signal stops; later ones are ignored (a
second Ctrl-C while the agent releases its caps does not cut the release short).
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Callable, Iterable

STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)


class SignalStop:
    """Installs handlers for ``signals``; ``on_stop(name)`` runs once, on its own thread."""

    def __init__(self, on_stop: Callable[[str], None], signals: Iterable[int] = STOP_SIGNALS) -> None:
        self._on_stop = on_stop
        self._read, self._write = os.pipe()
        os.set_blocking(self._write, False)
        self.thread = threading.Thread(target=self._wait, name="signal-stop", daemon=True)
        self.thread.start()
        for signum in signals:
            signal.signal(signum, self._handler)

    def _handler(self, signum: int, _frame: object) -> None:
        with contextlib.suppress(OSError):  # full (signals after the first): ignored
            os.write(self._write, bytes([signum]))

    def _wait(self) -> None:
        try:
            got = os.read(self._read, 1)
        except OSError:
            return
        if got:
            self._on_stop(signal.Signals(got[0]).name)
