"""A stop signal never deadlocks the agent (agent/signal_stop.py): the handler returns at
once even when the main thread holds the log's write lock, and the stop, with its log
line, happens on the SignalStop thread as soon as that lock is free."""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Iterator

import pytest
from structlog._output import _get_lock_for_file

from agent.signal_stop import SignalStop


@pytest.fixture
def usr1() -> Iterator[None]:
    before = signal.getsignal(signal.SIGUSR1)
    yield
    signal.signal(signal.SIGUSR1, before)


def test_a_signal_while_the_main_thread_holds_the_log_lock_stops_without_deadlock(usr1: None) -> None:
    lock = _get_lock_for_file(sys.stdout)  # what structlog's PrintLogger writes under
    stopped = threading.Event()
    said: list[str] = []

    def on_stop(name: str) -> None:
        with lock:  # what logging "stopping" does
            said.append(name)
        stopped.set()

    SignalStop(on_stop, (signal.SIGUSR1,))
    with lock:  # the main thread in the middle of a log write
        os.kill(os.getpid(), signal.SIGUSR1)
        for _ in range(1000):  # bytecodes: the handler runs here, and must return
            pass
        assert not stopped.wait(0.2)  # the stop waits for the lock, on its own thread
    assert stopped.wait(10)
    assert said == ["SIGUSR1"]


def test_only_the_first_signal_stops(usr1: None) -> None:
    calls: list[str] = []
    done = threading.Event()
    stop = SignalStop(lambda name: (calls.append(name), done.set()), (signal.SIGUSR1,))
    os.kill(os.getpid(), signal.SIGUSR1)
    assert done.wait(10)
    os.kill(os.getpid(), signal.SIGUSR1)
    stop.thread.join(5)
    assert calls == ["SIGUSR1"] and not stop.thread.is_alive()
