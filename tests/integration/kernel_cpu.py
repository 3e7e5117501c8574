"""The kernel's CPU figures as bounds that a busy machine cannot break.

Tests on real cgroups share two cores with whatever else runs: a busy loop may get far
less CPU than it asks for, so "the loop reached X cores" is a figure of the machine, not
of the product. A test asserts what the agent wrote exactly (the files read back, its
state, its outcome) and uses the kernel's figures only in ways load cannot break:

* Load only lowers what a cgroup gets, so usage under a CFS quota stays under what the
  quota lets through (:func:`cap_allows`), however busy the machine is.
* ``nr_throttled`` growing while a quota is set is the kernel saying the quota stopped the
  cgroup; load never throttles a cgroup, so it cannot fake that (:func:`cpu_stat`).
* Each read is stamped with the clock just before and just after it (:class:`Stamped`):
  a window taken from the outer stamps is never shorter than the one the reads spanned,
  however long the test waited between a read and its clock (a niced test on a busy
  core can wait tens of milliseconds). A rate the agent computes from a counter and the
  clock read inside two calls lies between what the test's reads around those calls
  allow (:func:`rate_bounds`), however long the calls took.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

T = TypeVar("T")

#: The kernel notices a spent quota at the next scheduler tick (4 ms at HZ 250, 10 ms at
#: HZ 100): a cgroup may run that much over before it is throttled (paid back later).
TICK_S = 0.01
#: The kubelet's CFS period, seconds.
PERIOD_S = 0.1


def cap_allows(cap: float, seconds: float, period_s: float = PERIOD_S) -> float:
    """The most CPU seconds a cgroup capped at ``cap`` cores can use in a window of
    ``seconds``: the quota of every period the window touches (its first and last ones in
    part: two more), 10% for the kernel's accounting, and one tick of overrun."""
    return cap * (1.1 * seconds + 2 * period_s) + TICK_S


@dataclass(frozen=True)
class Stamped(Generic[T]):
    """A value read between two readings of the monotonic clock."""

    before: float
    value: T
    after: float


def stamped(read: Callable[[], T]) -> Stamped[T]:
    before = time.monotonic()
    value = read()
    return Stamped(before, value, time.monotonic())


def longest(first: Stamped[object], last: Stamped[object]) -> float:
    """Seconds from just before the first read to just after the last: never shorter
    than the window the two reads spanned."""
    return last.after - first.before


#: A call between two stamped reads of the same counters: (before it, after it).
Around = tuple[Stamped[Any], Stamped[Any]]


def rate_bounds(first: Around, second: Around, key: Any) -> tuple[float, float]:
    """The least and the most a rate of counter ``key`` can be (its units a second) when
    computed from a read of the counter and of the clock inside each of two calls, given
    the test's stamped reads of the same counters just before and just after each call."""
    (lo1, hi1), (lo2, hi2) = first, second
    least = max(0, lo2.value[key] - hi1.value[key]) / (hi2.after - lo1.before)
    most = (hi2.value[key] - lo1.value[key]) / (lo2.before - hi1.after)
    return least, most


def cpu_stat(path: str | Path) -> dict[str, int]:
    """A cgroup's ``cpu.stat`` (``nr_periods``, ``nr_throttled``, ``throttled_time``; v1
    kernels with burst add ``nr_bursts`` and ``burst_time``)."""
    text = Path(path).read_text(encoding="ascii")
    return {k: int(v) for k, v in (line.split() for line in text.splitlines())}


def assert_quota_binds(caps: dict[str, float], cpu_seconds: Callable[[str], float],
                       throttled: Callable[[str], int], explain: Callable[[], str] | None = None,
                       seconds: float = 2.0) -> None:
    """Each capped pod (key -> cap, cores) is throttled by the kernel (only a quota does
    that) and uses no more than its quota lets through over a window of at least
    ``seconds``: the kernel's proof that the caps bind, which load cannot fake."""
    from devtools.harness.waiting import wait_until

    first = {key: stamped(lambda key=key: cpu_seconds(key)) for key in caps}
    before = {key: throttled(key) for key in caps}
    wait_until(lambda: all(throttled(key) > before[key] for key in caps), 60,
               "the kernel throttling every capped pod", explain=explain)  # fmt: skip
    time.sleep(max(0.0, seconds - (time.monotonic() - min(s.before for s in first.values()))))
    last = {key: stamped(lambda key=key: cpu_seconds(key)) for key in caps}
    for key, cap in caps.items():
        used, window = last[key].value - first[key].value, longest(first[key], last[key])
        print(f"{key} capped at {cap}: {used:.4f} cpu-s in {window:.2f} s")
        assert used <= cap_allows(cap, window), (key, used, window)
