"""One leader round without an API server: the engines' plans reach the acts (queue
preemption holds the room with a placeholder, nominates it, then evicts), and queue preemption pauses while a Queue is invalid (the shares of the others depend on it)."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from unittest import mock

import yaml
from structlog.testing import capture_logs

from agent.cluster.config import parse_config
from agent.cluster.controller import Controller, ControllerDeps
from agent.cluster.resources import QUEUES
from agent.model.objects import Pod
from agent.model.store import ObjectStore
from agent.model.timeutil import parse_time

SCENARIO = Path(__file__).resolve().parents[1] / "scenarios" / "queues-basic.yaml"


def controller() -> tuple[Controller, list[tuple[str, str]]]:
    config = parse_config({"queues": {"enabled": True}})
    ctl = Controller(ControllerDeps(mock.Mock(), "solo"), config, interval=60)
    evicted: list[tuple[str, str]] = []

    def evict(pod: Pod, source: str = "migration") -> None:
        evicted.append((pod.key, source))

    def nominate(pod: Pod, node: str, source: str) -> None:
        evicted.append((f"nominate {pod.key} to {node}", source))

    def create_placeholder(body: dict[str, Any]) -> bool:
        evicted.append((f"placeholder {body['metadata']['name']}", body["spec"]["priorityClassName"]))
        return True

    def create_priority_class(body: dict[str, Any]) -> bool:
        evicted.append(("class", body["metadata"]["name"]))
        return True

    ctl.writer.time_left = lambda: 10.0  # type: ignore[method-assign]
    ctl.writer.evict = evict  # type: ignore[method-assign,assignment]
    ctl.writer.nominate = nominate  # type: ignore[method-assign,assignment]
    ctl.writer.create_placeholder = create_placeholder  # type: ignore[method-assign,assignment]
    ctl.writer.create_priority_class = create_priority_class  # type: ignore[method-assign]
    ctl.writer.event = lambda ref, type_, reason, message: evicted.append((f"event {ref.name}", reason))  # type: ignore[method-assign]
    return ctl, evicted


def test_queue_preemption_evicts_when_enabled_and_pauses_on_an_invalid_queue() -> None:
    doc = yaml.safe_load(SCENARIO.read_text())
    now = parse_time(doc["now"]) or 0.0
    store = ObjectStore.from_dicts(doc["objects"])

    ctl, evicted = controller()
    ctl.round(store, now)
    # the room is held for the pending pod by a placeholder nominated to the node before
    # its victim goes
    (placeholder,) = [a for a, _ in evicted if a.startswith("placeholder ")]
    name = placeholder.removeprefix("placeholder ")
    assert name.startswith("reclaim-q2-b-")
    assert evicted == [("class", "waterline-reclaim-0"), (placeholder, "waterline-reclaim-0"),
                       (f"nominate waterline-system/{name} to n1", "queues"),
                       ("default/q1-low", "queues"), ("event q2-b", "ReclaimHeld")]  # fmt: skip

    ctl, evicted = controller()
    bad = {"kind": "Queue", "metadata": {"name": "q9"}, "spec": {"weight": -1}}
    ctl.cache.replace(QUEUES.kind, [*[q for q in doc["objects"] if q["kind"] == "Queue"], bad])
    with capture_logs() as logs:
        ctl.round(store, now)
    assert evicted == []
    assert any(e.get("code") == "engine-skipped" and e["engine"] == "queues" for e in logs)


def test_a_round_that_could_not_write_or_read_is_a_failure() -> None:
    ctl, _ = controller()
    ctl.cache.set_reachable("pods", True)
    assert ctl._round_trouble() is None
    ctl.writer.failures = 2
    assert ctl._round_trouble() == "2 write(s) failed"
    assert ctl._round_trouble() is None  # counted once per round
    ctl.cache.set_reachable("pods", False)
    assert "the API server cannot be read" in (ctl._round_trouble() or "")


def test_queue_preemption_takes_no_new_victims_for_a_pod_whose_room_is_held() -> None:
    """The next rounds see the same pod pending (its placeholder not yet seen): no new
    victim goes until the hold expires; then a new hold starts."""
    doc = yaml.safe_load(SCENARIO.read_text())
    now = parse_time(doc["now"]) or 0.0
    store = ObjectStore.from_dicts(doc["objects"])
    ctl, acts = controller()
    ctl.round(store, now)
    first = list(acts)
    ctl.round(store, now + 10)
    assert acts == first and set(ctl.plan_acts.holds) == {"default/q2-b"}
    ctl.round(store, now + 241)  # expired (4 rounds): given up, the plan's reclaim starts again
    again = acts[len(first):]
    assert ("event q2-b", "ReclaimExpired") in again
    assert [a for a, _ in again].count("default/q1-low") == 1


def test_a_pod_in_no_queue_gets_one_warning_and_one_warning_event_not_one_a_round() -> None:
    """A pod whose queue label names no Queue is in no queue's figures: the controller
    says so (log code ``queue-pod-skipped``, a Warning Event ``UnknownQueue`` on the pod)
    when it first sees it, not again each round while it stays so."""
    doc = yaml.safe_load(SCENARIO.parent.joinpath("queues-unknown-queue.yaml").read_text())
    now = parse_time(doc["now"]) or 0.0
    store = ObjectStore.from_dicts(doc["objects"])
    ctl, _ = controller()
    events: list[tuple[str, str, str, str]] = []
    ctl.writer.event = lambda ref, type_, reason, message: events.append(  # type: ignore[method-assign]
        (f"{ref.namespace}/{ref.name}", type_, reason, message)
    )
    with capture_logs() as logs:
        ctl.round(store, now)
        ctl.round(store, now + 60)
    skipped = [(e["pod"], e["reason"]) for e in logs if e.get("code") == "queue-pod-skipped"]
    assert skipped == [("default/stray-pending", 'UnknownQueue ""'), ("default/stray-running", "UnknownQueue q9")]
    unknown = [e for e in events if e[2] == "UnknownQueue"]  # (the reclaim's own aside)
    assert [(pod, type_) for pod, type_, _, _ in unknown] == [
        ("default/stray-pending", "Warning"),
        ("default/stray-running", "Warning"),
    ]
    assert "names queue q9, which does not exist" in unknown[1][3]


def test_an_unreadable_cost_gets_one_warning_and_one_warning_event_naming_the_annotation() -> None:
    """A queue pod whose pod-deletion-cost or eviction-cost is not an integer is read as 0
    (docs/controller.md): the controller says so (log code ``queue-cost-unreadable``, a
    Warning Event ``UnreadableCost`` on the pod naming the annotation and the value) when
    it first sees it, not again each round while it stays so."""
    doc = yaml.safe_load(SCENARIO.parent.joinpath("queues-unreadable-cost.yaml").read_text())
    now = parse_time(doc["now"]) or 0.0
    store = ObjectStore.from_dicts(doc["objects"])
    ctl, acts = controller()
    events: list[tuple[str, str, str, str]] = []
    ctl.writer.event = lambda ref, type_, reason, message: events.append(  # type: ignore[method-assign]
        (f"{ref.namespace}/{ref.name}", type_, reason, message)
    )
    with capture_logs() as logs:
        ctl.round(store, now)
        ctl.round(store, now + 60)
    warned = [(e["pod"], e["annotation"], e["value"]) for e in logs if e.get("code") == "queue-cost-unreadable"]
    assert warned == [("default/a", "controller.kubernetes.io/pod-deletion-cost", "high"),
                      ("default/c", "scheduling.koordinator.sh/eviction-cost", "1.5")]  # fmt: skip
    bad = [e for e in events if e[2] == "UnreadableCost"]
    assert [(pod, type_) for pod, type_, _, _ in bad] == [("default/a", "Warning"), ("default/c", "Warning")]
    assert "controller.kubernetes.io/pod-deletion-cost='high'" in bad[0][3]
    # read as 0, as documented: a (the oldest, cost "high") goes, not b (cost 5)
    assert ("default/a", "queues") in acts and ("default/b", "queues") not in acts


def test_the_live_figures_count_only_the_victims_evicted_this_round() -> None:
    """The ``planned`` gauge and the ``queue preemption`` log line count what simulate's
    ``queues.victims`` does (tests/scenarios/queues-deferred-same-node.yaml): w1's victim,
    evicted; not w2's, whose reclaim waits for w1's hand-over on the same node (``deferred``),
    nor, in the next round, w1's again (its room is held: no new victims)."""
    doc = yaml.safe_load(SCENARIO.parent.joinpath("queues-deferred-same-node.yaml").read_text())
    now = parse_time(doc["now"]) or 0.0
    store = ObjectStore.from_dicts(doc["objects"])

    def figures(ctl: Controller, at: float) -> tuple[float | None, list[dict[str, Any]]]:
        with capture_logs() as logs:
            ctl.round(store, at)
        planned = ctl.metrics.registry.get_sample_value("waterline_controller_planned", {"planner": "queues"})
        return planned, [e for e in logs if e["event"] == "queue preemption"]

    ctl, acts = controller()
    planned, (line,) = figures(ctl, now)
    assert planned == 1 and [a for a, s in acts if s == "queues" and a.startswith("default/")] == ["default/a1"]
    assert (line["victims"], line["reclaims"]) == (["default/a1"], ["default/w1->n1: default/a1"])
    assert line["deferred"] == {"default/w2": "NodeHeld n1"}
    evicted = len(acts)
    planned, (line,) = figures(ctl, now + 60)  # w1 held, its placeholder not yet seen
    assert planned == 0 and line["victims"] == [] and line["deferred"] == {"default/w2": "NodeHeld n1"}
    assert len(acts) == evicted

    disabled = Controller(ControllerDeps(mock.Mock(), "solo"), parse_config({"queues": {"enabled": False}}),
                          interval=60)  # fmt: skip
    disabled.writer.evict = lambda pod, source="migration": acts.append((pod.key, source))  # type: ignore[method-assign,assignment]
    planned, (line,) = figures(disabled, now)
    assert planned == 1 and line["victims"] == ["default/a1"] and line["enabled"] is False
    assert len(acts) == evicted and disabled.plan_acts.holds == {}
