"""On the guest node (cgroup v2, the kubelet's systemd cgroup driver): the pod slices and
container scopes the real kubelet and runc make, and the agent, in its DaemonSet pod,
capping and marking through systemd so that a ``systemctl daemon-reload`` keeps the
values. Everything is read in the guest: the kernel's files and systemd's units; the
assertions are about what they hold, never about timing.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from devtools.harness.waiting import wait_until
from devtools.vm import node_address
from devtools.vm.node import LABELS, NAMESPACE, agent_pod
from tests import builders
from tests.vm_node.conftest import RELOADS, PodUnits, VmNodeRun, cores, report

NODE = {"matchLabels": dict(LABELS)}
#: The cap's floor: 10% of the node's 2 cores (a BestEffort pod has no limit of its own);
#: steps of 10%.
MIN_RATIO, STEP_RATIO = 10, 10


# -- the real kubelet's layout under the systemd driver --------------------------------------


def test_the_kubelet_puts_pods_in_systemd_slices_and_runc_in_scopes(
    vm: VmNodeRun, work: dict[str, PodUnits]
) -> None:
    for name, pod in work.items():
        units = {u: vm.show(u, "ControlGroup", "ActiveState") for u in (pod.slice, pod.scope)}
        procs = vm.read(f"{pod.scope_path}/cgroup.procs")[f"{pod.scope_path}/cgroup.procs"]
        report("layout", f"{name}: {pod.scope_path} (procs {procs})")
        assert units[pod.slice] == {"ControlGroup": f"/{pod.slice_path}", "ActiveState": "active"}
        assert units[pod.scope] == {"ControlGroup": f"/{pod.scope_path}", "ActiveState": "active"}
        assert procs, f"{name}: no process in its scope"
    # A Guaranteed pod sits directly under kubepods.slice; its limit is the scope's own
    # property (runc sets it through systemd), and the kernel's cpu.max is that.
    lc = work["lc"]
    assert lc.slice_path == f"kubepods.slice/{lc.slice}"
    files = vm.read(f"{lc.scope_path}/cpu.max", f"{lc.slice_path}/cpu.max")
    quota = vm.show(lc.scope, "CPUQuotaPerSecUSec")
    report("layout", f"lc (Guaranteed, 200m): scope cpu.max {files[f'{lc.scope_path}/cpu.max']}, "
                     f"{quota}; slice cpu.max {files[f'{lc.slice_path}/cpu.max']}")  # fmt: skip
    assert files[f"{lc.scope_path}/cpu.max"] == "20000 100000"
    assert quota == {"CPUQuotaPerSecUSec": "200ms"}
    assert work["batch"].slice_path.startswith("kubepods.slice/kubepods-besteffort.slice/")


def test_the_api_server_reaches_the_guests_kubelet_on_this_machine(
    vm: VmNodeRun, work: dict[str, PodUnits]
) -> None:
    """``kubectl logs`` and ``exec`` on the guest: the Node's address is one this machine's
    loopback holds and qemu forwards to the guest's kubelet (devtools/vm/node_address.py).
    Its address was 10.0.2.15 before, not routable here, so the API server's connection left
    the machine by its default route."""
    node = vm.kube.kubectl("get", "node", vm.node.name, "-o", "json").stdout
    addresses = {a["type"]: a["address"] for a in json.loads(node)["status"]["addresses"]}
    assert addresses["InternalIP"] in node_address.CANDIDATES
    name = work["batch"].name
    ns = vm.kube.kubectl("get", "pods", "-A", "--field-selector", f"metadata.name={name}",
                         "-o", "jsonpath={.items[0].metadata.namespace}").stdout  # fmt: skip
    said = vm.kube.kubectl("-n", ns, "exec", name, "--", "sh", "-c", "echo reached $(hostname)").stdout
    assert said.strip() == f"reached {name}"
    agent = agent_pod(vm.kube.cluster, vm.node.name)
    assert agent is not None
    logs = vm.kube.kubectl("-n", NAMESPACE, "logs", agent["metadata"]["name"], "--tail", "200").stdout
    report("layout", f"kubectl exec and logs through {addresses['InternalIP']}: {len(logs.splitlines())} lines of the agent's log")
    assert "agent started" in logs


# -- a cap, set as the scope's property: a daemon-reload keeps it -----------------------------


@pytest.fixture
def capped(vm: VmNodeRun, work: dict[str, PodUnits]) -> Any:
    """A policy whose line the node never gets under (0.05 cores), so the agent caps the
    batch pod down to its floor and holds it there; deleted at the end."""
    vm.kube.apply([
        builders.action("vmn-throttle", throttle={"minCPURatio": MIN_RATIO, "stepCPURatio": STEP_RATIO},
                        cool_down=300, scope={"qosClasses": ["BestEffort"],
                                              "podSelector": {"matchLabels": {"role": "batch"}}}),
        builders.policy("vmn-cpu", [builders.rule("high", "cpu_total_usage", "0.05", "vmn-throttle",
                                                  avoidanceThreshold=2, restoreThreshold=3)], NODE),
    ])  # fmt: skip
    try:
        yield
    finally:
        vm.kube.kubectl("delete", "nodeqosensurancepolicy", "vmn-cpu", "--ignore-not-found")
        vm.kube.kubectl("delete", "avoidanceaction", "vmn-throttle", "--ignore-not-found")


def test_the_agent_caps_through_the_scope_and_a_daemon_reload_keeps_the_cap(
    vm: VmNodeRun, work: dict[str, PodUnits], capped: Any
) -> None:
    batch = work["batch"]
    cpu_max = f"{batch.scope_path}/cpu.max"
    before = vm.show(batch.scope, "CPUQuotaPerSecUSec", "CPUQuotaPeriodUSec")
    history: list[str] = []
    same: list[str] = []

    def held() -> bool:
        """Capped, and the same cap at five reads in a row (the steps down are over)."""
        value = vm.read(cpu_max)[cpu_max]
        if not history or history[-1] != value:
            history.append(value)
        same[:] = [*same, value] if same and same[-1] == value else [value]
        return value != "max 100000" and len(same) >= 5

    wait_until(held, 600, "the batch pod capped and held", interval=2,
               explain=lambda: f"cpu.max seen: {history}")  # fmt: skip
    cap = vm.read(cpu_max)[cpu_max]
    prop = vm.show(batch.scope, "CPUQuotaPerSecUSec", "CPUQuotaPeriodUSec")
    # Kernel-measured, over a window at the cap.
    u0, t0 = vm.usage(batch.scope_path), time.monotonic()
    time.sleep(10)
    u1, t1 = vm.usage(batch.scope_path), time.monotonic()
    used = (u1 - u0) / 1e6 / (t1 - t0)
    vm.watch([cpu_max])
    took = vm.reloads(RELOADS)
    seen = vm.seen([cpu_max])[cpu_max]
    after = vm.read(cpu_max)[cpu_max]
    prop_after = vm.show(batch.scope, "CPUQuotaPerSecUSec", "CPUQuotaPeriodUSec")
    metrics = vm.metrics()
    reverted = {k: v for k, v in metrics.items() if k.startswith("waterline_caps_reverted_total")}
    report("cap through systemd",
           f"cpu.max on the way down: {' -> '.join(history)}",
           f"unit before {before}; capped {prop}",
           f"kernel: {used:.3f} cores used over {t1 - t0:.1f} s at the cap {cores(cap):.2f}",
           f"{RELOADS} daemon-reloads ({', '.join(f'{t:.1f}' for t in took)} s): cpu.max seen {seen}, "
           f"after {after}; unit after {prop_after}",
           f"waterline_cgroup_writes_through_systemd {metrics.get('waterline_cgroup_writes_through_systemd')}, "
           f"reverted {reverted or 0}")  # fmt: skip
    assert metrics.get("waterline_cgroup_writes_through_systemd") == 1.0
    assert prop["CPUQuotaPerSecUSec"] != before["CPUQuotaPerSecUSec"], (
        "the cap is not the scope's property"
    )
    assert used <= cores(cap) * 1.1 + 0.02
    assert seen == [cap], f"a daemon-reload changed cpu.max: {seen}"
    assert after == cap and prop_after == prop
    assert not any(reverted.values()), reverted
    # The policy goes: the scope's own value comes back, as a property and in the kernel.
    vm.kube.kubectl("delete", "nodeqosensurancepolicy", "vmn-cpu")
    wait_until(
        lambda: vm.read(cpu_max)[cpu_max] == "max 100000", 600, "the cap released", interval=2
    )
    released = vm.show(batch.scope, "CPUQuotaPerSecUSec", "CPUQuotaPeriodUSec")
    report("cap through systemd", f"released: cpu.max max 100000, unit {released}")
    assert released == before


# -- the idle mark, set as the pod slice's CPUWeight=idle ----------------------------------------


def test_the_idle_mark_is_the_slices_property_and_a_daemon_reload_keeps_it(
    vm: VmNodeRun, work: dict[str, PodUnits]
) -> None:
    batch = work["batch"]
    idle = f"{batch.slice_path}/cpu.idle"
    weight = f"{batch.slice_path}/cpu.weight"
    before = vm.read(idle, weight)
    unit_before = vm.show(batch.slice, "CPUWeight")
    scope = {
        "scope": {"qosClasses": ["BestEffort"], "podSelector": {"matchLabels": {"role": "batch"}}}
    }
    vm.kube.apply([builders.policy("vmn-idle", None, NODE, spec={"cpuIsolation": {"idle": scope}})])
    try:
        wait_until(
            lambda: vm.read(idle)[idle] == "1", 600, "the batch pod's slice marked idle", interval=2
        )
        unit = vm.show(batch.slice, "CPUWeight")
        vm.watch([idle])
        took = vm.reloads(RELOADS)
        seen = vm.seen([idle])[idle]
        after = vm.read(idle)[idle]
        report("idle through systemd",
               f"before: {before}, unit {unit_before}; marked: unit {unit}",
               f"{RELOADS} daemon-reloads ({', '.join(f'{t:.1f}' for t in took)} s): cpu.idle seen {seen}, "
               f"after {after}")  # fmt: skip
        assert unit == {"CPUWeight": "idle"}
        assert seen == ["1"], f"a daemon-reload changed cpu.idle: {seen}"
        assert after == "1"
    finally:
        vm.kube.kubectl("delete", "nodeqosensurancepolicy", "vmn-idle", "--ignore-not-found")
    wait_until(lambda: vm.read(idle)[idle] == "0", 600, "the idle mark released", interval=2)
    released = vm.read(idle, weight)
    unit_released = vm.show(batch.slice, "CPUWeight")
    report("idle through systemd", f"released: {released}, unit {unit_released}")
    assert released == before
    assert unit_released == unit_before
