"""The co-location benchmark's statistics: pooled percentiles, intervals by a block
bootstrap over rounds, and a verdict that may say it cannot tell.

Why these choices (issue 29):

* **Pooled nearest-rank percentiles.** Every request of every round of a window kind is
  one sample; the p99.9 is the value at rank ``ceil(0.999 n)``, a real response time, not
  an interpolation. A median of per-round percentiles would judge each round on a few
  dozen tail requests.
* **Enough tail.** A percentile is only quoted as measured when at least ``MIN_BEYOND``
  (100) requests lie beyond it: a p99.9 needs 100,000 requests. Below that the verdict on
  it is *undecided*, whatever its value.
* **Block bootstrap over rounds.** Requests within a round are not independent (one
  throttling stall delays a dozen in a row, a noisy neighbour slows a whole window), the
  rounds are. Resampling whole rounds, with the contended window and its own baseline of
  the same round kept together (paired), gives the interval of the ratio.
* **Three verdicts.** *meets*: the interval's worse end is within the goal; *fails*: its
  better end is beyond it; otherwise *undecided*. Too few rounds (``MIN_ROUNDS``) for the
  bootstrap to mean anything is undecided too, with the reason.
"""

from __future__ import annotations

import bisect
import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

#: Requests that must lie beyond a percentile for it to count as measured.
MIN_BEYOND = 100
#: Rounds below which an interval is not trusted (a bootstrap of 3 rounds has 10 samples).
MIN_ROUNDS = 10
#: Bootstrap resamples: enough for the 2.5% / 97.5% ends to move by less than the figures' rounding.
RESAMPLES = 2000
MEETS, FAILS, UNDECIDED = "meets", "fails", "undecided"


def nearest_rank(ordered: Sequence[float], q: float) -> float:
    """The nearest-rank ``q`` percentile of an already sorted sample: the value at rank
    ``ceil(q n)`` (1-based); NaN for an empty sample."""
    if not ordered:
        return math.nan
    if not 0.0 < q <= 1.0:
        raise ValueError(f"percentile q must be in (0, 1], got {q}")
    return ordered[max(1, math.ceil(q * len(ordered) - 1e-9)) - 1]


def beyond(n: int, q: float) -> int:
    """Requests of a sample of ``n`` that lie beyond its nearest-rank ``q`` percentile."""
    return n - max(1, math.ceil(q * n - 1e-9)) if n else 0


def pooled(rounds: Sequence[Sequence[float]]) -> list[float]:
    """Every round's samples in one sorted list."""
    return sorted(v for r in rounds for v in r)


@dataclass(frozen=True, slots=True)
class Interval:
    """A figure and its 95% interval; ``rounds`` the rounds it was resampled from."""

    value: float
    low: float
    high: float
    rounds: int

    def text(self, fmt: str = "{:.2f}") -> str:
        if math.isnan(self.value):
            return "-"
        return f"{fmt.format(self.value)} [{fmt.format(self.low)}-{fmt.format(self.high)}]"


def bootstrap(rounds: int, statistic: Callable[[Sequence[int]], float], *, seed: int = 29,
              resamples: int = RESAMPLES) -> Interval:  # fmt: skip
    """``statistic`` of every round (its value) and its 95% interval: the 2.5% and 97.5%
    percentiles of the statistic over ``resamples`` draws of ``rounds`` round indices with
    replacement (a block bootstrap whose blocks are rounds). The statistic takes the list
    of round indices, so paired figures of one round stay together. Seeded: the same
    records give the same interval."""
    if rounds < 1:
        return Interval(math.nan, math.nan, math.nan, 0)
    value = statistic(list(range(rounds)))
    rng = random.Random(seed)
    draws = sorted(
        s for s in (statistic([rng.randrange(rounds) for _ in range(rounds)]) for _ in range(resamples))
        if not math.isnan(s)
    )  # fmt: skip
    if not draws:
        return Interval(value, math.nan, math.nan, rounds)
    return Interval(value, nearest_rank(draws, 0.025), nearest_rank(draws, 0.975), rounds)


class Pool:
    """Per-round sorted samples, ready for the pooled percentile of any multiset of rounds
    (a bootstrap resample) without pooling them again: a binary search over the union's
    values, counting each round's samples at or below with ``bisect`` (about 0.1 ms a
    resample of ten rounds of 15,000 requests, where sorting the pool takes 50)."""

    def __init__(self, rounds: Sequence[Sequence[float]]) -> None:
        self.rounds = [sorted(r) for r in rounds]
        self.union = sorted(v for r in self.rounds for v in r)

    def at(self, q: float, idx: Sequence[int]) -> float:
        """The nearest-rank ``q`` percentile of the rounds ``idx`` pooled (with repeats)."""
        counts: dict[int, int] = {}
        for i in idx:
            counts[i] = counts.get(i, 0) + 1
        total = sum(c * len(self.rounds[i]) for i, c in counts.items())
        if not total:
            return math.nan
        k = max(1, math.ceil(q * total - 1e-9))
        lo, hi = 0, len(self.union) - 1
        while lo < hi:  # the least value with at least k samples at or below it
            mid = (lo + hi) // 2
            v = self.union[mid]
            if sum(c * bisect.bisect_right(self.rounds[i], v) for i, c in counts.items()) >= k:
                hi = mid
            else:
                lo = mid + 1
        return self.union[lo]


Rounds = Pool | Sequence[Sequence[float]]


def _pool(rounds: Rounds) -> Pool:
    return rounds if isinstance(rounds, Pool) else Pool(rounds)


def quantile_ratio(window: Rounds, base: Rounds, q: float, **kw: int) -> Interval:
    """The pooled ``q`` percentile of ``window`` over that of ``base`` (lists per round,
    the same rounds in the same order) with its interval."""
    top, bottom = _pool(window), _pool(base)
    if len(top.rounds) != len(bottom.rounds):
        raise ValueError(f"paired rounds: {len(top.rounds)} windows against {len(bottom.rounds)} baselines")

    def ratio(idx: Sequence[int]) -> float:
        b = bottom.at(q, idx)
        return top.at(q, idx) / b if b > 0 else math.nan

    return bootstrap(len(top.rounds), ratio, **kw)


def quantile(rounds: Rounds, q: float, **kw: int) -> Interval:
    """The pooled ``q`` percentile of per-round samples, with its interval."""
    pool = _pool(rounds)
    return bootstrap(len(pool.rounds), lambda idx: pool.at(q, idx), **kw)


def share(top: Sequence[float], bottom: Sequence[float], **kw: int) -> Interval:
    """sum(top) / sum(bottom) over the same rounds, in percent, with its interval (a ratio
    of sums: a round with more work weighs more, as it does in the node's day)."""
    if len(top) != len(bottom):
        raise ValueError(f"paired rounds: {len(top)} against {len(bottom)}")

    def ratio(idx: Sequence[int]) -> float:
        den = sum(bottom[i] for i in idx)
        return sum(top[i] for i in idx) / den * 100.0 if den > 0 else math.nan

    return bootstrap(len(top), ratio, **kw)


@dataclass(frozen=True, slots=True)
class Verdict:
    word: str  # MEETS, FAILS or UNDECIDED
    why: str = ""

    def text(self) -> str:
        return self.word if not self.why else f"{self.word} ({self.why})"


def judge(interval: Interval, goal: float, *, at_most: bool = True,
          unsure: str | None = None) -> Verdict:  # fmt: skip
    """The verdict of one figure against its goal: ``at_most`` a figure that must stay at
    or below ``goal`` (a latency ratio), else at or above it (batch CPU kept). ``unsure``:
    a reason the figure cannot carry a verdict (too few rounds, too thin a tail)."""
    if math.isnan(interval.low) or math.isnan(interval.high):
        return Verdict(UNDECIDED, "no interval")
    worse, better = (interval.high, interval.low) if at_most else (interval.low, interval.high)
    beyond_goal = (lambda v: v > goal) if at_most else (lambda v: v < goal)
    if unsure is not None:
        return Verdict(UNDECIDED, unsure)
    if interval.rounds < MIN_ROUNDS:
        few = f"{interval.rounds} round" + ("s" if interval.rounds != 1 else "")
        return Verdict(UNDECIDED, f"{few} < {MIN_ROUNDS}")
    if beyond_goal(better):
        return Verdict(FAILS)
    if not beyond_goal(worse):
        return Verdict(MEETS)
    return Verdict(UNDECIDED, "the interval straddles the goal")


def combine(verdicts: Sequence[Verdict]) -> Verdict:
    """A goal of several figures: fails when any fails, meets when all meet, else undecided
    (with the first reason)."""
    if any(v.word == FAILS for v in verdicts):
        return Verdict(FAILS)
    if verdicts and all(v.word == MEETS for v in verdicts):
        return Verdict(MEETS)
    return next(
        (Verdict(UNDECIDED, v.why) for v in verdicts if v.word == UNDECIDED), Verdict(UNDECIDED)
    )


def thin_tail(samples: Sequence[int], q: float) -> str | None:
    """Why a pooled ``q`` percentile of samples of these sizes is not measured, or None:
    fewer than ``MIN_BEYOND`` requests beyond it in one of them."""
    short = [n for n in samples if beyond(n, q) < MIN_BEYOND]
    if not short:
        return None
    return f"{beyond(min(short), q)} requests beyond the p{q * 100:g} < {MIN_BEYOND}"
