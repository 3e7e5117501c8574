"""The node's eviction limits, kept across restarts (``evictions.json`` in the state dir).

A restart (a rolling update, a crash loop) must not hand the node a full token bucket
and forget every cool-down: with caps adopted (``agent.node.resume``) a rule starts
triggered, and an agent crashing every 30 s would otherwise evict a bucket's burst each
time. So the bucket (tokens, sample time) and each action's last eviction round are
saved whenever an eviction took a token or started a round, and read back at start:
the bucket refills for the time the agent was down, the cool-downs run on.

Wall-clock times (the loop's sample time). What cannot be trusted is dropped with a
warning and the limits start as a first start would: a file that does not parse, a time
in the future (a clock that jumped back), a count that is no number. Only the live
in-cluster agent keeps it: local mode and ``--dry-run`` evict nothing.
"""

from __future__ import annotations

import json
import math
import os
from typing import Any

import structlog

from agent.files import atomic_write
from agent.model.numbers import EPSILON
from agent.node.loop import TickOutcome
from agent.node.tick import NodeBrain
from engine.limits import TokenBucket

MEMORY_FILE = "evictions.json"
FORMAT_VERSION = 1
#: A saved time this far ahead of the clock is a clock that jumped back: not trusted.
CLOCK_SKEW_SECONDS = 5.0


def _time(value: object, now: float) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if not math.isfinite(value) or value > now + CLOCK_SKEW_SECONDS:
        return None
    return float(value)


class EvictionMemory:
    """Loads the limits into a brain at start; as an after-tick hook, saves them when an
    eviction changed them."""

    def __init__(self, state_dir: str, brain: NodeBrain, logger: Any = None) -> None:
        self.path = os.path.join(state_dir, MEMORY_FILE)
        self.brain = brain
        self.log = logger or structlog.get_logger()
        #: The rounds in the file, and the bucket's tokens last seen: a write is owed when
        #: the rounds moved or tokens were taken since.
        self._rounds: dict[str, float] = {}
        self._tokens: float | None = None

    def load(self, now: float) -> None:
        try:
            with open(self.path, "rb") as f:
                doc = json.loads(f.read())
        except FileNotFoundError:
            return
        except (OSError, ValueError) as err:
            self.log.warning("eviction limits not resumed: the file cannot be read",
                             path=self.path, error=str(err))  # fmt: skip
            return
        if not isinstance(doc, dict) or doc.get("version") != FORMAT_VERSION:
            self.log.warning("eviction limits not resumed: unknown format", path=self.path)
            return
        bucket, rounds = None, {}
        saved = doc.get("bucket")
        if isinstance(saved, dict):
            tokens, at = saved.get("tokens"), _time(saved.get("at"), now)
            if at is not None and isinstance(tokens, (int, float)) and not isinstance(tokens, bool) \
                    and math.isfinite(tokens) and tokens >= 0:  # fmt: skip
                bucket = TokenBucket(float(tokens), at)
        saved = doc.get("lastEvictionRound")
        if isinstance(saved, dict):
            for action, value in saved.items():
                at = _time(value, now)
                if isinstance(action, str) and at is not None:
                    rounds[action] = at
        self.brain.state.resume_limits(bucket, rounds)
        state = self.brain.state
        self._rounds = dict(state.last_eviction_round)
        self._tokens = None if state.bucket is None else state.bucket.tokens
        self.log.info("eviction limits resumed from the state dir",
                      tokens=None if state.bucket is None else round(state.bucket.tokens, 2),
                      cooling=sorted(state.last_eviction_round))  # fmt: skip

    def _document(self) -> dict[str, Any]:
        state = self.brain.state
        out: dict[str, Any] = {"version": FORMAT_VERSION,
                               "lastEvictionRound": dict(sorted(state.last_eviction_round.items()))}  # fmt: skip
        if state.bucket is not None:
            out["bucket"] = {"tokens": state.bucket.tokens, "at": state.bucket.at}
        return out

    def __call__(self, outcome: TickOutcome) -> None:
        state = self.brain.state
        tokens = None if state.bucket is None else state.bucket.tokens
        taken = tokens is not None and (self._tokens is None or tokens < self._tokens - EPSILON)
        if not taken and state.last_eviction_round == self._rounds:
            # A bucket only refilling needs no write: the next start recomputes the refill
            # from the saved time.
            self._tokens = tokens
            return
        try:
            atomic_write(self.path, json.dumps(self._document()).encode())
        except OSError as err:  # owed still: tried again next tick
            self.log.warning("eviction limits not saved", path=self.path, error=str(err))
            return
        self._rounds, self._tokens = dict(state.last_eviction_round), tokens
