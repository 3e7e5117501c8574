"""Background threads survive any exception and tell /healthz about it (issue 11)."""

from __future__ import annotations

import random
import threading
from typing import Any
from unittest import mock

from agent.cluster.health import ControllerHealth
from agent.kube.cache import Cache
from agent.kube.health import ThreadBoard
from agent.kube.leases import ElectionArgs, LeaderElector
from agent.kube.resources import PODS
from agent.kube.watching import Reflector


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_reflector_survives_a_bug_reports_failing_and_recovers() -> None:
    clock = Clock()
    board = ThreadBoard(clock)
    reflector = Reflector(mock.Mock(), PODS, Cache(), rng=random.Random(1), board=board)
    stop = threading.Event()
    attempts: list[str] = []

    def step(_stop: Any = None) -> None:
        attempts.append("step")
        if len(attempts) == 1:
            raise RuntimeError("a bug in handling one object")
        reflector._ok()  # the second attempt lists fine
        stop.set()

    def sleep(seconds: float) -> None:
        (state,) = board.states()
        assert state.failing and "RuntimeError: a bug" in state.error
        assert "watch-pods: failing for 0s: KubeError: RuntimeError" in board.report()
        clock.now += seconds

    reflector.step = step  # type: ignore[method-assign]
    reflector.run(stop, sleep=sleep)  # returns instead of dying on the RuntimeError
    assert attempts == ["step", "step"]
    assert board.report() == "watch-pods: ok"


def test_the_elector_survives_a_bug_in_an_attempt() -> None:
    board = ThreadBoard()
    backend = mock.Mock()
    backend.get.side_effect = ZeroDivisionError("boom")
    elector = LeaderElector(backend, "a", ElectionArgs(), board=board)
    assert elector._guarded_step() == ElectionArgs().retry_period
    (state,) = board.states()
    assert state.name == "elector" and "ZeroDivisionError: boom" in state.error


def test_liveness_fails_when_a_background_thread_is_dead() -> None:
    board = ThreadBoard()
    dead = threading.Thread(target=lambda: None)
    dead.start()
    dead.join()
    alive = threading.Event()
    running = threading.Thread(target=alive.wait)
    running.start()
    try:
        board.register("elector", running)
        board.register("watch-pods", dead)
        health = ControllerHealth(board)
        ok, body = health.live()
        assert not ok
        assert body.splitlines() == [
            "background thread(s) dead: watch-pods",
            "elector: ok",
            "watch-pods: dead",
        ]
        board.register("watch-pods", running)
        assert health.live()[0]
    finally:
        alive.set()
        running.join()


def test_a_failed_round_makes_the_leader_unready() -> None:
    clock = Clock()
    board = ThreadBoard(clock)
    health = ControllerHealth(board, stale_after=30, clock=clock, source_ready=lambda: True)
    health.beat(True)
    assert health.ready()[0]
    clock.now += 31
    health.beat(False)  # rounds that could not read or write
    ok, body = health.ready()
    assert not ok and body.startswith("no successful tick for 31s")
