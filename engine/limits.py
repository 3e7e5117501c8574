"""The safety limits on evictions that no policy can lift (DESIGN.md "Safety limits").

Precision decides *which* pods; these bound *how many*:

* ``maxPodsPerRound`` of the action: a round (one action in one tick, across its
  metrics) stops after that many evictions;
* the node's token bucket (agent setting ``evictionRateLimit``), refilled continuously by
  sample time, so `simulate` is deterministic; it starts full at the node's first sample;
* the cluster brake (the controller's ``waterline-brake`` ConfigMap), an input of the tick.

When several bind, the first of ``LIMITS`` is reported. The brake and the rate limit stop
every round of the node for that tick; maxPodsPerRound only its own round.

API faults never multiply: after the first 5xx, timeout or throttling 429 the node's next
round waits an exponential backoff with jitter, at least what ``Retry-After`` asked. The
jitter is a hash of the node and the attempt, so replays and tests see the same delays
while 5,000 agents still spread out.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

from agent.model.numbers import EPSILON
from agent.model.settings import EvictionRateLimit

CLUSTER_BRAKE = "clusterBrake"
MAX_PODS_PER_ROUND = "maxPodsPerRound"
EVICTION_RATE_LIMIT = "evictionRateLimit"
#: Reporting precedence, first wins.
LIMITS = (CLUSTER_BRAKE, MAX_PODS_PER_ROUND, EVICTION_RATE_LIMIT)
#: Limits that stop every round of the node for the tick once they bind.
NODE_WIDE = frozenset({CLUSTER_BRAKE, EVICTION_RATE_LIMIT})


def first_limit(current: str | None, new: str) -> str:
    """The limit to report of two that bound in one tick."""
    if current is None:
        return new
    return min(current, new, key=LIMITS.index)


@dataclass(slots=True)
class TokenBucket:
    tokens: float
    at: float  # sample time of the last refill

    @classmethod
    def full(cls, limit: EvictionRateLimit, now: float) -> TokenBucket:
        return cls(float(limit.burst), now)

    def refill(self, limit: EvictionRateLimit, now: float) -> None:
        elapsed = max(0.0, now - self.at)
        self.tokens = min(float(limit.burst), self.tokens + elapsed * limit.per_minute / 60.0)
        self.at = max(self.at, now)

    def has_token(self) -> bool:
        return self.tokens >= 1.0 - EPSILON

    def take(self) -> None:
        self.tokens = max(0.0, self.tokens - 1.0)

    def copy(self) -> TokenBucket:
        return TokenBucket(self.tokens, self.at)


@dataclass(frozen=True, slots=True)
class BackoffArgs:
    initial: float = 5.0
    maximum: float = 300.0
    factor: float = 2.0
    jitter: float = 0.2  # each delay is within +-20% of the exponential one


BACKOFF = BackoffArgs()


def backoff_delay(node: str, attempt: int, retry_after: float | None,
                  args: BackoffArgs = BACKOFF) -> float:
    """Seconds the node's next eviction round waits after its ``attempt``-th fault in a
    row (1 = the first): exponential, jittered by a hash of (node, attempt), never less
    than the server's Retry-After."""
    base = min(args.maximum, args.initial * args.factor ** max(0, attempt - 1))
    unit = zlib.crc32(f"{node}/{attempt}".encode()) / 0xFFFFFFFF  # in [0, 1]
    delay = min(args.maximum, base * (1.0 + args.jitter * (2.0 * unit - 1.0)))
    return max(delay, retry_after or 0.0)


@dataclass(slots=True)
class FaultBackoff:
    """The node's eviction backoff: faults in a row and when the next round may run."""

    attempts: int = 0
    until: float = float("-inf")

    def waiting(self, now: float) -> bool:
        return now < self.until

    def fault(self, node: str, now: float, retry_after: float | None) -> float:
        self.attempts += 1
        delay = backoff_delay(node, self.attempts, retry_after)
        self.until = now + delay
        return delay

    def answered(self) -> None:
        """The API answered (evicted, refused by a budget, gone): the faults are over."""
        self.attempts = 0
        self.until = float("-inf")


class RoundLimits:
    """The limits of one tick's eviction rounds on one node: asked before every attempt
    (``allow``), told every answer (``note``).

    A Preview decision runs against a copy of the bucket, so it never takes a real token:
    the copy is the bucket as live evictions leave it, less what previews would have
    taken. So a preview sees the limits a live round would see at that point, and a
    preview that runs the copy dry stops only the preview rounds, never a live one."""

    def __init__(self, node: str, now: float, brake: bool, rate: EvictionRateLimit,
                 bucket: TokenBucket, backoff: FaultBackoff) -> None:
        self.node = node
        self.now = now
        self.brake = brake
        self.rate = rate
        self.buckets = {False: bucket, True: bucket.copy()}  # by preview
        self.backoff = backoff
        #: The limit reported on the tick (the first of LIMITS that stopped a round).
        self.limited: str | None = None
        #: Every (live / preview) round of the node is over for this tick (the brake, the
        #: rate limit, an API fault), by preview.
        self.stopped = {False: False, True: False}
        #: Evictions per round (action) this tick, and the rounds a limit ended.
        self.counts: dict[str, int] = {}
        self.ended: set[str] = set()
        #: Set when an API fault ended the rounds: seconds until the next round.
        self.backoff_delay: float | None = None
        #: A live round was held back by the backoff of an earlier fault.
        self.backing_off = False

    def binding(self, action: str, max_pods: int | None, preview: bool) -> str | None:
        """The first limit that forbids the next attempt of this round, if any."""
        if self.brake:
            return CLUSTER_BRAKE
        if max_pods is not None and self.counts.get(action, 0) >= max_pods:
            return MAX_PODS_PER_ROUND
        if self.rate.enabled and not self.buckets[preview].has_token():
            return EVICTION_RATE_LIMIT
        return None

    def allow(self, action: str, max_pods: int | None, preview: bool) -> bool:
        """May the round of ``action`` attempt one more eviction? Called only while its
        gap is open and a candidate remains, so a refusal is a round a limit stopped."""
        if self.stopped[preview] or action in self.ended:
            return False
        if not preview and self.backoff.waiting(self.now):
            self.backing_off = True
            return False
        limit = self.binding(action, max_pods, preview)
        if limit is None:
            return True
        self.limited = first_limit(self.limited, limit)
        if limit in NODE_WIDE:
            self._stop(preview)
        else:
            self.ended.add(action)
        return False

    def _stop(self, preview: bool) -> None:
        """A live stop ends the preview rounds too (what they copy is spent or faulting);
        a preview's own stop ends only the preview rounds."""
        self.stopped[True] = True
        if not preview:
            self.stopped[False] = True

    def note(self, action: str, preview: bool, result: str, retry_after: float | None) -> None:
        """Count an answer: an eviction takes a token and counts toward the round; an API
        fault ends every round of the tick and starts (or lengthens) the backoff."""
        if result == "evicted":
            self.counts[action] = self.counts.get(action, 0) + 1
            self.buckets[True].take()  # a live eviction leaves the preview's copy less too
            if not preview:
                self.buckets[False].take()
        if preview:
            return
        if result == "failed":
            self._stop(False)
            self.backoff_delay = self.backoff.fault(self.node, self.now, retry_after)
        else:
            self.backoff.answered()
