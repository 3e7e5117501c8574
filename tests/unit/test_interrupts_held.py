"""An interrupt (Ctrl-C, SIGTERM, SIGHUP) that lands while a demo or a benchmark starts a
child is held until the child is recorded, then taken: never lost inside ``fork``, never
leaving a child the clean-up does not know; the child itself can still be stopped."""

from __future__ import annotations

import os
import signal
import subprocess

import pytest

from devtools.demo.cgroups import INTERRUPTS, interrupts_held
from devtools.demo.live import terminate_as_interrupt


def blocked(pid: int) -> int:
    with open(f"/proc/{pid}/status", encoding="ascii") as f:
        line = next(ln for ln in f if ln.startswith("SigBlk:"))
    return int(line.split()[1], 16)


def bits(signals: frozenset[int]) -> int:
    return sum(1 << (s - 1) for s in signals)


def test_an_interrupt_while_held_is_taken_when_the_start_is_recorded() -> None:
    recorded = []
    with terminate_as_interrupt(), pytest.raises(KeyboardInterrupt):
        with interrupts_held():
            os.kill(os.getpid(), signal.SIGTERM)  # pending, not raised here
            recorded.append("child")
        pytest.fail("the held SIGTERM was not taken when the block ended")
    assert recorded == ["child"]
    assert blocked(os.getpid()) & bits(INTERRUPTS) == 0  # the mask is the caller's again


def test_a_child_started_while_held_gets_the_callers_mask_back_and_can_be_stopped() -> None:
    with interrupts_held() as restore:
        assert blocked(os.getpid()) & bits(INTERRUPTS) == bits(INTERRUPTS)
        child = subprocess.Popen(["sleep", "30"], preexec_fn=restore)  # noqa: S607
    try:
        assert blocked(child.pid) & bits(INTERRUPTS) == 0
        child.send_signal(signal.SIGTERM)
        assert child.wait(timeout=10) == -signal.SIGTERM
    finally:
        child.kill()
