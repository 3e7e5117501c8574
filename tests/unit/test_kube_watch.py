"""The reflector stops promptly, whatever it was doing when asked, and retries at once
when its API server is back."""

from __future__ import annotations

import random
import threading
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


def test_a_watch_backing_off_retries_as_soon_as_another_watch_of_its_cache_gets_through() -> None:
    """After an API server outage the delay has grown (up to a minute): once one watch of
    the node gets through, the others retry at once instead of sitting the rest out (the
    node's evictions wait for every watch)."""
    cache = Cache()
    cache.set_reachable("watch-nodes", False)  # a sibling, failing too
    reflector = Reflector(mock.Mock(), PODS, cache, args=WatchArgs(backoff=BackoffArgs(initial=600, maximum=600)),
                          rng=random.Random(1))  # fmt: skip
    stop = threading.Event()
    failed = threading.Event()
    steps: list[str] = []

    def step(_stop: object = None) -> None:
        steps.append("step")
        if len(steps) == 1:
            failed.set()
            raise KubeUnreachable("connection refused")
        reflector._ok()
        stop.set()

    reflector.step = step  # type: ignore[method-assign]
    thread = threading.Thread(target=reflector.run, args=(stop,), daemon=True)
    thread.start()
    assert failed.wait(10)
    thread.join(1.0)
    assert thread.is_alive() and steps == ["step"]  # backing off: 300 to 600 s
    cache.set_reachable("watch-nodes", True)  # the API server is back
    thread.join(10)
    assert not thread.is_alive() and steps == ["step", "step"]
    assert cache.api_reachable
