"""The reflector stops promptly, whatever it was doing when asked."""

from __future__ import annotations

import random
from unittest import mock

from agent.kube.cache import Cache
from agent.kube.resources import PODS
from agent.kube.watching import Reflector


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
