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
* ``near-limit``: a Guaranteed pod sized close to its use: its request and limit are set
  so that web, at the run's rate and its measured CPU per request, uses 85% of them
  (``bench.colocation_protocol.NEAR_LIMIT_USE``). Its own quota throttles it in the
  busier periods, whatever the batch pods do: what CPU burst is for. It is its own
  labelled case, judged apart from the goal's Guaranteed and Burstable pods.

Every case but ``near-limit`` has a 0.6 core limit; the run's rate is set so that web
uses 45% of it (``bench.colocation_protocol``).
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
    #: Sized so that web uses this share of its limit (None: fixed, sized by the rate).
    near_use: float | None = None

    @property
    def qos(self) -> str:
        return GUARANTEED if self.request >= self.limit else BURSTABLE

    def sized(self, cpu_per_request: float, rate: float) -> Case:
        """The case for web at ``rate`` costing ``cpu_per_request`` CPU-seconds each."""
        if self.near_use is None:
            return self
        from bench.colocation_protocol import near_limit

        cores = near_limit(cpu_per_request, rate, self.near_use)
        return replace(self, request=cores, limit=cores,
                       label=f"Guaranteed web near its limit ({cores:g} core, {self.near_use:.0%} used)")  # fmt: skip


CASES: tuple[Case, ...] = (
    Case("guaranteed", "Guaranteed web (0.6 core)", 0.6, 0.6),
    Case("burstable", "Burstable web (0.2 core requested, 0.6 limit)", 0.2, 0.6),
    Case("near-limit", "Guaranteed web near its limit", 0.0, 0.0, near_use=0.85),
)


#: The cases of a full run: the goal's two (near-limit is judged apart: ``--cases near-limit``).
FULL_CASES = "guaranteed,burstable"


def chosen_cases(keys: str | None) -> list[Case]:
    """The cases named (comma-separated keys), in the registry's order; all when None."""
    if not keys:
        return list(CASES)
    wanted = set(keys.split(","))
    return [c for c in CASES if c.key in wanted]


def unknown_cases(keys: str | None) -> list[str]:
    return sorted(set((keys or "").split(",")) - {c.key for c in CASES} - {""})
