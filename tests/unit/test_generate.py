"""`waterline generate`: deterministic, exact counts, a cluster that could exist (nothing
over-committed, workloads consistent), and work for every cluster engine."""

from __future__ import annotations

import hashlib
import io
import json
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pytest

from agent.errors import InvalidObject
from agent.model.objects import Pod
from agent.scenario import Scenario, load_scenario, parse_scenario
from devtools.__main__ import run as cli_main
from devtools.generate import GenerateArgs, generate

SMALL = GenerateArgs(nodes=60, pods=1800, jobs=150, queues=8, seed=7)


def _text(args: GenerateArgs) -> str:
    out = io.StringIO()
    generate(args, out)
    return out.getvalue()


@pytest.fixture(scope="module")
def doc() -> dict[str, Any]:
    result: dict[str, Any] = json.loads(_text(SMALL))
    return result


@pytest.fixture(scope="module")
def scenario(doc: dict[str, Any]) -> Scenario:
    return parse_scenario(doc, "generated")


def _kinds(doc: dict[str, Any]) -> Counter[str]:
    return Counter(o["kind"] for o in doc["objects"])


#: sha256 of `waterline generate --nodes 50 --pods 1500 --jobs 100 --queues 5 --seed 1`.
PINNED = GenerateArgs(nodes=50, pods=1500, jobs=100, queues=5, seed=1)
PINNED_SHA256 = "a550a4cb9a2a1d0309ebff1ac1ec0b64cdde5129d2169783f6e6d26636910279"


def test_the_bytes_for_given_arguments_do_not_change() -> None:
    """A scenario is named by its arguments (benchmark figures, bug reports): a change to
    the generator that moves one random draw would silently make another cluster. Change
    this digest only together with a change meant to make different clusters."""
    assert hashlib.sha256(_text(PINNED).encode()).hexdigest() == PINNED_SHA256


def test_same_seed_same_bytes_other_seed_other_cluster() -> None:
    assert _text(SMALL) == _text(SMALL)
    other = GenerateArgs(SMALL.nodes, SMALL.pods, SMALL.jobs, SMALL.queues, seed=8)
    assert _text(other) != _text(SMALL)


@pytest.mark.parametrize(
    "args",
    [
        SMALL,
        GenerateArgs(nodes=1, pods=3, jobs=5, queues=0, seed=1),
        GenerateArgs(nodes=30, pods=40, jobs=0, queues=2, seed=2),  # fewer pods than slots
        GenerateArgs(nodes=25, pods=2000, jobs=3000, queues=3, seed=3),  # more jobs than pods
    ],
    ids=["small", "one-node", "few-pods", "many-jobs"],
)
def test_counts_are_exact(args: GenerateArgs) -> None:
    kinds = _kinds(json.loads(_text(args)))
    assert kinds["Node"] == args.nodes
    assert kinds["Pod"] == args.pods
    assert kinds["PodMigrationJob"] == args.jobs
    assert kinds["Queue"] == args.queues


def test_bad_arguments_name_the_field() -> None:
    with pytest.raises(InvalidObject, match="nodes"):
        GenerateArgs(nodes=0).validate()
    with pytest.raises(InvalidObject, match="pods"):
        GenerateArgs(pods=-1).validate()


def test_nothing_is_overcommitted(scenario: Scenario) -> None:
    """The scheduler would have accepted every bound pod: requests fit allocatable."""
    used: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for pod in scenario.store.pods:
        if pod.is_active:
            for resource, amount in pod.requests.items():
                used[pod.node_name][resource] += amount
            used[pod.node_name]["pods"] += 1
    assert used
    for name, amounts in used.items():
        node = scenario.store.nodes[name]
        for resource, amount in amounts.items():
            assert amount <= node.allocatable.get(resource, 0.0) + 1e-6, (name, resource)


def test_workloads_are_consistent(doc: dict[str, Any], scenario: Scenario) -> None:
    workloads = scenario.store.workloads
    owned: Counter[str] = Counter()
    for pod in scenario.store.pods:
        ctl = pod.controller
        assert ctl is not None, pod.key
        if ctl.kind == "Node":  # static pods' mirrors
            assert pod.is_mirror
            continue
        assert ctl.uid in workloads, f"{pod.key}: owner {ctl.kind}/{ctl.name} missing"
        assert workloads[ctl.uid].kind == ctl.kind
        owned[ctl.uid] += 1
    for w in workloads.values():
        if w.kind == "ReplicaSet":
            assert w.owner is not None and workloads[w.owner.uid].kind == "Deployment"
            assert workloads[w.owner.uid].replicas == w.replicas == owned[w.uid]
        elif w.kind in ("StatefulSet", "Job"):
            assert w.replicas == owned[w.uid]


def test_required_anti_affinity_is_respected(scenario: Scenario) -> None:
    seen: set[tuple[str, str, str]] = set()
    checked = 0
    for pod in scenario.store.pods:
        if pod.anti_affinity and pod.node_name:
            key = (pod.namespace, pod.labels["app"], pod.node_name)
            assert key not in seen, f"two replicas of {key[1]} on {key[2]}"
            seen.add(key)
            checked += 1
    assert checked


def test_migration_jobs_point_at_pods(doc: dict[str, Any], scenario: Scenario) -> None:
    pods = {p.key: p for p in scenario.store.pods}
    jobs = [o for o in doc["objects"] if o["kind"] == "PodMigrationJob"]
    refs = [f"{j['spec']['podRef']['namespace']}/{j['spec']['podRef']['name']}" for j in jobs]
    assert len(set(refs)) == len(refs), "one job per pod"
    missing = [r for r in refs if r not in pods]
    assert missing and all("/gone-" in r for r in missing)
    assert len(missing) < len(refs) * 0.05
    assert any(pods[r].is_daemonset for r in refs if r in pods)
    assert {j["status"]["phase"] for j in jobs} == {"Pending", "Running"}
    owners = [pods[r].controller for r in refs if r in pods]
    batch = Counter(o.uid for o in owners if o is not None and o.kind == "Job")
    assert max(batch.values()) > 1, "some batch Jobs migrate together"


def _cpu_util(scenario: Scenario) -> dict[str, float]:
    used: dict[str, float] = defaultdict(float)
    for pod in scenario.store.pods:
        if pod.is_active:
            used[pod.node_name] += pod.request("cpu")
    return {n: 100 * used[n] / node.allocatable["cpu"] for n, node in scenario.store.nodes.items()}


def test_defrag_has_sources_and_targets(scenario: Scenario) -> None:
    util = _cpu_util(scenario)
    nodes = scenario.store.nodes
    usable = [n for n in nodes if nodes[n].ready and not nodes[n].unschedulable]
    by_node: dict[str, list[Pod]] = scenario.store.pods_by_node()
    sources = [
        n
        for n in usable
        if util[n] < 30 and any(not p.is_daemonset and not p.is_mirror for p in by_node[n])
    ]
    targets = [n for n in usable if 70 < util[n] < 90]
    assert len(sources) >= 2
    assert len(targets) >= len(sources)


def test_pending_daemonset_pods_do_not_fit_their_node(scenario: Scenario) -> None:
    util = _cpu_util(scenario)
    pending = [p for p in scenario.store.pods if p.is_daemonset and not p.node_name]
    assert pending
    for pod in pending:
        assert pod.node_affinity is not None
        node_name = pod.name.split("-", 2)[-1]
        node = scenario.store.nodes[node_name]
        free = node.allocatable["cpu"] * (1 - util[node_name] / 100)
        assert free < pod.request("cpu"), pod.key


def test_some_queues_starve(scenario: Scenario) -> None:
    """A queue with pending pods whose allocation is below its deserved share, by the
    queue engine's own report (SIMULATE.md keys)."""
    from agent.simulate.sections import run_section

    report = run_section("queues", scenario)
    pending: dict[str, set[str]] = defaultdict(set)
    for pod in scenario.store.pods:
        if pod.phase == "Pending" and not pod.node_name and "qos.waterline.io/queue" in pod.labels:
            pending[pod.labels["qos.waterline.io/queue"]].update(pod.requests)
    starving = [
        name
        for name, q in report["queues"].items()
        if pending[name]
        and any(
            q["allocated"].get(r, 0.0) < q["deserved"].get(r, 0.0) - 1e-6 for r in pending[name]
        )
    ]
    assert starving
    overused = [
        name
        for name, q in report["queues"].items()
        if q["allocated"].get("cpu", 0.0) > q["deserved"].get("cpu", 0.0) + 1e-6
    ]
    assert overused, "some queues hold more than their share"


@pytest.mark.slow
def test_core_objects_pass_kubernetes_schemas(doc: dict[str, Any]) -> None:
    """Nodes, Pods (the first hundred), Namespaces, PDBs and PriorityClasses are
    what the API server would serve (workload objects are kept slim on purpose: the
    engines read only their identity and replicas)."""
    import kubernetes_validate  # in the lock: never missing

    seen: Counter[str] = Counter()
    for obj in doc["objects"]:
        kind = obj["kind"]
        if kind in ("Node", "Pod", "Namespace", "PodDisruptionBudget", "PriorityClass") and (
            seen[kind] < 100
        ):
            kubernetes_validate.validate(obj, "1.29.0", strict=True)
            seen[kind] += 1
    assert seen["Pod"] == 100 and seen["Node"] == SMALL.nodes


def test_generated_custom_resources_pass_the_crd_schemas(doc: dict[str, Any]) -> None:
    from tests.unit.test_deploy import _validate

    for obj in doc["objects"]:
        if obj["kind"] in ("Queue", "PodMigrationJob"):
            _validate(obj)


def test_every_cluster_engine_has_work(scenario: Scenario) -> None:
    from agent.simulate.sections import SECTIONS

    report: dict[str, Any] = {s.key: s.run(scenario) for s in SECTIONS if s.key != "nodes"}
    assert report["arbitration"]["passed"] and report["arbitration"]["waiting"]
    assert report["arbitration"]["failed"]
    assert report["defrag"]["migrations"]
    assert report["queues"]["queues"]
    assert report["daemonset"]


def test_command_writes_a_loadable_file(tmp_path: Path) -> None:
    out = tmp_path / "cluster.json"
    code = cli_main(
        ["generate", "--nodes", "12", "--pods", "300", "--jobs", "20", "--queues", "3"]
        + ["--seed", "5", "--out", str(out)]
    )
    assert code == 0
    scenario = load_scenario(out)
    assert len(scenario.store.nodes) == 12 and len(scenario.store.pods) == 300
    assert scenario.config["defrag"]["lowThresholds"] == 30
    assert cli_main(["generate", "--nodes", "0", "--out", str(out)]) == 2
