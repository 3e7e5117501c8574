"""The latency-critical pods the co-location benchmark runs each strategy for.

Where the web pod sits in the kubelet's tree decides what a CPU class can do for it:

* ``guaranteed``: a Guaranteed pod (0.6 core requested and limit) is a child of
  ``kubepods``, beside the ``burstable`` and ``besteffort`` QoS cgroups that hold the batch
  pods. The kernel compares it with those QoS cgroups, never with the batch pods inside
  them, and the agent marks only pod-level cgroups (the kubelet rewrites the QoS-level
  ones): the idle class can only help it as much as the QoS cgroups let it.
* ``burstable``: a Burstable pod (0.2 core requested, 0.6 limit) sits in ``burstable``,
  a sibling of the Burstable batch pods, which by their requests (0.15 core each) weigh
  more than it together: idle batch pods yield to it at once.
* ``near-limit``: a Guaranteed pod sized close to its use: its request and limit are 1.2x
  the CPU the web server was measured to use alone, at the start of the run (300 requests
  of 1 ms are 0.3 core on a quiet machine, more where another process shares the core's
  caches). Its own quota throttles it in the busier periods, whatever the batch pods do:
  what CPU burst is for. Sized from a measure, not a constant, so that it is close to its
  use on any machine, and never below it (its queue would grow without end).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

GUARANTEED, BURSTABLE = "Guaranteed", "Burstable"


@dataclass(frozen=True, slots=True)
class Case:
    key: str
    label: str
    #: The web pod's CPU request and limit, cores (0 until ``sized`` where ``near_use``).
    request: float
    limit: float
    #: Request and limit = this many times the web server's measured use (None: fixed).
    near_use: float | None = None

    @property
    def qos(self) -> str:
        return GUARANTEED if self.request >= self.limit else BURSTABLE

    def sized(self, use: float) -> Case:
        """The case for a web server measured to use ``use`` cores alone."""
        if self.near_use is None:
            return self
        cores = round(use * self.near_use, 2)
        return replace(self, request=cores, limit=cores,
                       label=f"Guaranteed web near its limit ({cores:g} core, {self.near_use:g}x its use)")  # fmt: skip


CASES: tuple[Case, ...] = (
    Case("guaranteed", "Guaranteed web (0.6 core)", 0.6, 0.6),
    Case("burstable", "Burstable web (0.2 core requested, 0.6 limit)", 0.2, 0.6),
    Case("near-limit", "Guaranteed web near its limit", 0.0, 0.0, near_use=1.2),
)


def chosen_cases(keys: str | None) -> list[Case]:
    """The cases named (comma-separated keys), in the registry's order; all when None."""
    if not keys:
        return list(CASES)
    wanted = set(keys.split(","))
    return [c for c in CASES if c.key in wanted]


def unknown_cases(keys: str | None) -> list[str]:
    return sorted(set((keys or "").split(",")) - {c.key for c in CASES} - {""})
