"""The health of background threads (reflectors, the elector), for ``/healthz``.

A background loop that dies silently leaves a process that answers probes and does
nothing. Each loop therefore reports here: ``beat`` when an iteration went well, ``failed``
when it caught an error (it logs, backs off and tries again). The board tells apart:

* *failing*: the loop runs but its last attempt failed (the API server is unreachable,
  a bug in one object's handling): shown with the error and since when; the process is
  still useful (caches stay warm, the next attempt may work), so liveness stays green
  and readiness is the caller's decision;
* *dead*: the thread is gone (it returned or raised past its own guard): liveness fails,
  so the kubelet restarts the process.

Thread-safe; the clock is injected so tests read exact ages.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ThreadState:
    name: str
    alive: bool
    #: The error of the last attempt when it failed, else "".
    error: str = ""
    #: Clock reading when the current run of failures started (None: not failing).
    failing_since: float | None = None
    last_beat: float | None = None

    @property
    def failing(self) -> bool:
        return self.failing_since is not None


class ThreadBoard:
    """Every background loop of a process, by name."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._lock = threading.Lock()
        self._threads: dict[str, threading.Thread | None] = {}
        self._states: dict[str, ThreadState] = {}

    def register(self, name: str, thread: threading.Thread | None = None) -> None:
        """Track ``name``; with ``thread`` its liveness is read from the thread itself."""
        with self._lock:
            self._threads[name] = thread
            self._states.setdefault(name, ThreadState(name, True))

    def beat(self, name: str) -> None:
        with self._lock:
            self._states[name] = ThreadState(name, True, last_beat=self.clock())

    def failed(self, name: str, error: str) -> None:
        with self._lock:
            old = self._states.get(name) or ThreadState(name, True)
            since = old.failing_since if old.failing_since is not None else self.clock()
            self._states[name] = ThreadState(name, True, error, since, old.last_beat)

    def states(self) -> list[ThreadState]:
        with self._lock:
            out = []
            for name in sorted(self._states):
                state = self._states[name]
                thread = self._threads.get(name)
                alive = thread is None or thread.is_alive()
                out.append(
                    ThreadState(name, alive, state.error, state.failing_since, state.last_beat)
                )
            return out

    def dead(self) -> list[str]:
        return [s.name for s in self.states() if not s.alive]

    def failing(self) -> list[ThreadState]:
        return [s for s in self.states() if s.alive and s.failing]

    def report(self) -> str:
        """One line per thread: ``<name>: ok | failing for 12s: <error> | dead``."""
        now = self.clock()
        lines = []
        for s in self.states():
            if not s.alive:
                lines.append(f"{s.name}: dead")
            elif s.failing_since is not None:
                lines.append(f"{s.name}: failing for {now - s.failing_since:.0f}s: {s.error}")
            else:
                lines.append(f"{s.name}: ok")
        return "\n".join(lines)


__all__ = ["ThreadBoard", "ThreadState"]
