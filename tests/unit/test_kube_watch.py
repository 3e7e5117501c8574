"""The reflector stops promptly, whatever it was doing when asked, and retries at once
when its API server is back."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from unittest import mock

from agent.kube.backoff import BackoffArgs
from agent.kube.cache import Cache
from agent.kube.errors import KubeUnreachable
from agent.kube.resources import PODS
from agent.kube.watching import Reflector, WatchArgs


def test_a_stop_while_the_watch_opens_closes_it_at_once() -> None:
    """stop() found no stream to close (it was still opening): the watch must not then
    wait on a quiet stream until its timeout (seen on the real server after a restart)."""
    stream = mock.MagicMock()
    stream.__iter__.side_effect = AssertionError("read a stream it was told to stop")
    api = mock.Mock()
    reflector = Reflector(api, PODS, Cache(), rng=random.Random(1))

    def opening(*_args: object) -> object:
        reflector.stop()
        return stream

    api.stream.side_effect = opening
    reflector.resource_version = "7"
    reflector.watch()
    stream.close.assert_called_once()
    assert reflector._stream is None


def _failing_once(cache: Cache, meanwhile: Callable[[], None] = lambda: None) -> tuple[threading.Thread, list[str], threading.Event]:
    """A reflector on ``cache`` (backing off 600 s) whose first attempt fails, ``meanwhile``
    run while that request is in flight, and whose second gets through; running."""
    reflector = Reflector(mock.Mock(), PODS, cache, args=WatchArgs(backoff=BackoffArgs(initial=600, maximum=600)),
                          rng=random.Random(1))  # fmt: skip
    stop, failed = threading.Event(), threading.Event()
    steps: list[str] = []

    def step(_stop: object = None) -> None:
        steps.append("step")
        if len(steps) == 1:
            meanwhile()
            failed.set()
            raise KubeUnreachable("connection refused")
        reflector._ok()
        stop.set()

    reflector.step = step  # type: ignore[method-assign]
    thread = threading.Thread(target=reflector.run, args=(stop,), daemon=True)
    thread.start()
    return thread, steps, failed


def test_a_watch_backing_off_retries_as_soon_as_another_watch_of_its_cache_gets_through() -> None:
    """After an API server outage the delay has grown (up to a minute): once one watch of
    the node gets through, the others retry at once instead of sitting the rest out (the
    node's evictions wait for every watch)."""
    cache = Cache()
    cache.set_reachable("watch-nodes", False)  # a sibling, failing too
    thread, steps, failed = _failing_once(cache)
    assert failed.wait(10)
    thread.join(1.0)
    assert thread.is_alive() and steps == ["step"]  # backing off: 300 to 600 s
    cache.set_reachable("watch-nodes", True)  # the API server is back
    thread.join(10)
    assert not thread.is_alive() and steps == ["step", "step"]
    assert cache.api_reachable


def test_a_sibling_that_recovers_while_the_request_is_in_flight_still_wakes_the_watch() -> None:
    """An API server that drops packets fails a request by its timeout: a sibling can get
    through meanwhile, before this watch starts backing off."""
    cache = Cache()
    cache.set_reachable("watch-nodes", False)
    thread, steps, _ = _failing_once(cache, lambda: cache.set_reachable("watch-nodes", True))
    thread.join(10)
    assert not thread.is_alive() and steps == ["step", "step"]


def test_flapping_siblings_cut_a_watchs_backoff_short_once_until_it_gets_through() -> None:
    """A partial outage (429s, some 5xx): siblings that keep failing and recovering must
    not make every watch retry at each flap (5,000 nodes at once); one early retry, then
    the delay grows as usual."""
    cache = Cache()
    waits: list[float] = []
    reflector = Reflector(mock.Mock(), PODS, cache, args=WatchArgs(backoff=BackoffArgs(initial=0.2, maximum=0.2, jitter=0)),
                          rng=random.Random(1))  # fmt: skip
    stop = threading.Event()
    steps: list[str] = []

    def step(_stop: object = None) -> None:
        steps.append("step")
        cache.set_reachable("watch-nodes", False)
        cache.set_reachable("watch-nodes", True)  # a sibling flaps during every attempt
        if len(steps) == 4:
            stop.set()
        raise KubeUnreachable("connection reset")

    real_back_off = reflector._back_off

    def timed(stop_: threading.Event, delay: float) -> None:
        started = time.monotonic()
        real_back_off(stop_, delay)
        waits.append(time.monotonic() - started)

    reflector._back_off = timed  # type: ignore[method-assign]
    reflector.step = step  # type: ignore[method-assign]
    reflector.run(stop)
    assert len(steps) == 4
    assert waits[0] < 0.1  # cut short: a sibling got through meanwhile
    assert all(w >= 0.19 for w in waits[1:])  # then the whole delay, flaps or not
