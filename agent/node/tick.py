"""The holder of one node's memory, and the shell that carries its decisions out.

``NodeBrain`` is what the live loop, `waterline simulate` and the tests all drive: each
tick it runs the pure decision (``engine.decide``) on the tick's input, whole, with the
actuators it is handed (``executors.drive``) and keeps the memory the decision returns.
Between ticks the memory changes only through the named transitions of
``engine.state.NodeState``. A ``strategy`` (``engine.decide.Strategy``) changes
what the engine plans on: the benchmarks' reference strategies, never the agent.
"""

from __future__ import annotations

from typing import Any

from agent.model.settings import AgentSettings
from engine.batch_capacity import Published
from engine.decide import Decision, Strategy, TickInput, TickReport, decide
from engine.state import NodeState
from executors.actuators import Actuator, Hands
from executors.drive import drive

__all__ = ["NodeBrain", "TickReport"]


class NodeBrain:
    def __init__(self, settings: AgentSettings | None = None, state: NodeState | None = None,
                 strategy: Strategy | None = None) -> None:  # fmt: skip
        self.settings = settings or AgentSettings()
        self.state = state or NodeState()
        self.strategy = strategy

    def decide(self, tick: TickInput, hands: Hands) -> TickReport:
        """One sample, decided and carried out; the node's memory kept."""
        decision: Decision = drive(decide(tick, self.state, self.strategy), hands)
        self.state = decision.state
        return decision.report

    def tick(self, *, evictor: Actuator | None = None, throttler: Actuator | None = None,
             isolator: Actuator | None = None, actuators: tuple[Actuator, ...] = (),
             **inputs: Any) -> TickReport:  # fmt: skip
        """``decide`` with the input's fields (``TickInput``) as keywords, and the brain's
        settings: how simulate, the tests and the benchmarks call it. ``isolator`` None:
        no CPU isolation class is planned (the kernel's classes are what the actuators
        carry)."""
        hands = Hands(*actuators, *(a for a in (evictor, throttler, isolator) if a is not None))
        return self.decide(TickInput(settings=self.settings, support=hands.support, **inputs), hands)

    def caps(self) -> dict[str, float]:
        """The caps in force, by pod (an evicted pod's, on its way out, is not one)."""
        return self.state.caps()

    def caps_and_limits(self) -> dict[str, float]:
        """The caps, and the batch pods' CPU limits where no cap is lower (``simulate``'s
        ``throttled``)."""
        return self.state.caps_and_limits()

    def batch_capacity(self) -> Published | None:
        """The batch capacity the node publishes (None: none)."""
        return self.state.batch_capacity()

    def isolated(self) -> dict[str, list[str]]:
        """The pods in each CPU isolation class (``idle``, ``burst``), sorted."""
        return self.state.isolated()
