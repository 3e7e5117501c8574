"""The holder of one node's memory, and the shell that carries its decisions out.

``NodeBrain`` is what the live loop, `waterline simulate` and the tests all drive: each
tick it runs the pure decision (``agent.node.decide``) with the actuators it is handed
(``executors.drive``) and keeps the memory the decision returns. Between ticks the
memory changes only through the named transitions of ``executors.state.NodeState``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from agent.model.objects import Node, Pod
from agent.model.policy import PolicySet
from agent.model.settings import AgentSettings
from agent.model.usage import PodUsage
from agent.node.decide import Decision, TickInput, TickReport, decide
from executors.actuators import CpuIsolator, CpuThrottler, Evictor, NoIsolation
from executors.drive import Hands, drive
from executors.state import NodeState

__all__ = ["NodeBrain", "TickReport"]


class NodeBrain:
    def __init__(self, settings: AgentSettings | None = None, state: NodeState | None = None) -> None:
        self.settings = settings or AgentSettings()
        self.state = state or NodeState()

    def tick(
        self,
        *,
        now: float,
        node: Node,
        pods: Sequence[Pod],
        metrics: Mapping[str, float],
        usage: Mapping[str, PodUsage],
        policies: PolicySet,
        namespace_labels: Callable[[str], Mapping[str, str]],
        evictor: Evictor,
        throttler: CpuThrottler,
        isolator: CpuIsolator | None = None,
        brake: bool = False,
        evictions_take_effect: bool = True,
        provisional: bool = False,
    ) -> TickReport:
        """One sample: decide and act. ``isolator`` None: no CPU isolation class is
        planned. ``brake``: the cluster brake is set (no eviction this tick; throttling
        goes on). ``evictions_take_effect`` False: evictions are reported and not
        performed (local mode, --dry-run). ``provisional``: the objects are a saved copy
        (no cap or mark is handed back for what is missing from it)."""
        hands = Hands(evictor, throttler, isolator or NoIsolation())
        tick = TickInput(now=now, node=node, pods=pods, metrics=metrics, usage=usage,
                         policies=policies, namespace_labels=namespace_labels,
                         settings=self.settings, brake=brake,
                         evictions_take_effect=evictions_take_effect,
                         support=hands.isolator.support, provisional=provisional)
        decision: Decision = drive(decide(tick, self.state), hands)
        self.state = decision.state
        return decision.report

    def caps(self) -> dict[str, float]:
        """The caps in force, by pod (an evicted pod's, on its way out, is not one)."""
        return self.state.caps()

    def isolated(self) -> dict[str, list[str]]:
        """The pods in each CPU isolation class (``idle``, ``burst``), sorted."""
        return self.state.isolated()
