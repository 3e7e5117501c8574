"""Batch capacity on the guest node (cgroup v2, the kubelet's systemd cgroup driver;
issues 30 and 33): a policy's ``batchCapacity`` section has the agent, in its DaemonSet
pod, publish ``waterline.io/batch-cpu`` / ``batch-memory`` in the Node's status; a pod
requesting them (and no cpu or memory) is placed by the real scheduler, runs BestEffort,
and gets its CPU quota and memory limit from them on its pod slice and its container's
scope, set as the units' ``CPUQuotaPerSecUSec`` and ``MemoryMax`` so that a
``systemctl daemon-reload`` writes them back instead of lifting them. The policy deleted,
the resources leave the Node and the idle mark goes back; the pod deleted, the agent
forgets its units. Everything is read in the guest (the kernel's files, systemd's units,
the agent's state directory); the assertions are about what they hold, never timing.

A BestEffort ``twin`` beside the batch pod, with no batch resources, is the kubelet's and
runc's values for such a pod, read independently of the agent: what the agent recorded as
the units' own values (and gives back) must be exactly the twin's.
"""

from __future__ import annotations

import json
import time
from typing import Any

from devtools.harness.waiting import wait_until
from devtools.vm.node import LABELS, NAME
from tests import builders
from tests.vm_node.conftest import BUSY, IDLE, RELOADS, PodUnits, VmNodeRun, pod_manifest, report

NODE = {"matchLabels": dict(LABELS)}
BATCH_CPU, BATCH_MEMORY = "waterline.io/batch-cpu", "waterline.io/batch-memory"
#: The batch pod's resources: 500 millicores (a quota of 50000 in 100000), 128 MiB.
MILLICORES, MEMORY = 500, 128 * 1024**2
#: Published whatever the guest's own use (the emulated node is busy with itself).
FLOOR = {"cpu": "1", "memory": "256Mi"}
UNITS = ("CPUQuotaPerSecUSec", "CPUQuotaPeriodUSec", "MemoryMax", "CPUWeight")
FILES = ("cpu.max", "memory.max", "cpu.idle", "cpu.weight")
STATE = "/var/lib/waterline"
#: What the bus says for "unset" (``CGROUP_LIMIT_MAX``, ``USEC_INFINITY``).
UNSET = 2**64 - 1


def _published(vm: VmNodeRun) -> dict[str, str]:
    """The two resources in the Node's allocatable (absent: not there)."""
    node = json.loads(vm.kube.kubectl("get", "node", NAME, "-o", "json").stdout)
    allocatable = node["status"].get("allocatable", {})
    return {k: allocatable[k] for k in (BATCH_CPU, BATCH_MEMORY) if k in allocatable}


def _millicores(text: str) -> float:
    """The server writes 2000 as "2k"."""
    return float(text[:-1]) * 1000 if text.endswith("k") else float(text)


def _files(vm: VmNodeRun, units: PodUnits) -> dict[str, str]:
    return vm.read(*(f"{p}/{f}" for p in (units.slice_path, units.scope_path) for f in FILES))


def _state(vm: VmNodeRun, name: str) -> dict[str, Any]:
    """One of the agent's state files (hostPath ``/var/lib/waterline``; absent: {})."""
    text = vm.node.check(f"cat {STATE}/{name} 2>/dev/null || true").strip()
    return json.loads(text) if text else {}


def _as_bus(value: str) -> int:
    """``systemctl show``'s text of a property as the bus's number ("infinity": unset;
    "500ms": 500000 us)."""
    if value in ("infinity", "[not set]"):
        return UNSET
    if value.endswith("ms"):
        return int(value[:-2]) * 1000
    if value.endswith("us"):
        return int(value[:-2])
    if value.endswith("s") and value[:-1].isdigit():
        return int(value[:-1]) * 1_000_000
    return int(value)


def test_batch_pods_get_their_limits_as_unit_properties_that_a_daemon_reload_keeps(
    vm: VmNodeRun,
) -> None:
    ns = vm.kube.namespace("vmnb")
    section = {"marginPercent": 0, "windowSeconds": 0, "min": dict(FLOOR), "idle": True}
    vm.kube.apply([builders.policy("vmnb-batch", None, NODE, spec={"batchCapacity": section})])
    try:
        _published_then_limited(vm, ns)
    finally:
        vm.kube.kubectl("delete", "nodeqosensurancepolicy", "vmnb-batch", "--ignore-not-found")
        vm.kube.kubectl("delete", "namespace", ns, "--wait=false", check=False)


def _published_then_limited(vm: VmNodeRun, ns: str) -> None:
    wait_until(
        lambda: len(_published(vm)) == 2, 600, f"batch capacity in {NAME}'s status", interval=2
    )
    published = _published(vm)
    report("batch capacity", f"published: {published}")
    assert _millicores(published[BATCH_CPU]) >= 1000  # at least the section's min
    batch_resources = {BATCH_CPU: str(MILLICORES), BATCH_MEMORY: str(MEMORY)}
    vm.kube.apply([
        pod_manifest("batch", ns, vm.image, BUSY, {"role": "vmnb-batch"},
                     {"requests": batch_resources, "limits": batch_resources}),
        pod_manifest("twin", ns, vm.image, IDLE, {"role": "vmnb-twin"}),
    ])  # fmt: skip
    batch_pod, twin_pod = vm.pod(ns, "batch"), vm.pod(ns, "twin")
    batch, twin = PodUnits.of(batch_pod), PodUnits.of(twin_pod)
    scheduled = [c for c in batch_pod["status"]["conditions"] if c["type"] == "PodScheduled"]
    report("batch capacity", f"batch pod {batch_pod['status']['qosClass']} on {batch_pod['spec']['nodeName']}, "
                             f"{batch.slice_path}")  # fmt: skip
    assert batch_pod["status"]["qosClass"] == "BestEffort"
    assert batch_pod["spec"]["nodeName"] == NAME and scheduled[0]["status"] == "True"
    assert batch.slice_path.startswith("kubepods.slice/kubepods-besteffort.slice/")

    quota = f"{MILLICORES * 100} 100000"
    wanted = {f"{p}/{f}": v for p in (batch.slice_path, batch.scope_path)
              for f, v in (("cpu.max", quota), ("memory.max", str(MEMORY)))}  # fmt: skip
    wait_until(lambda: all(vm.read(*wanted)[k] == v for k, v in wanted.items()), 600,
               "the batch pod's quota and memory limit in its slice and scope", interval=2,
               explain=lambda: str(vm.read(*wanted)))  # fmt: skip
    props = {u: vm.show(u, *UNITS) for u in (batch.slice, batch.scope)}
    twin_props = {u: vm.show(u, *UNITS) for u in (twin.slice, twin.scope)}
    report(
        "batch capacity",
        f"limited: {vm.read(*wanted)}",
        f"units {props}",
        f"twin's units {twin_props}",
    )
    for unit in (batch.slice, batch.scope):
        assert props[unit]["CPUQuotaPerSecUSec"] == f"{MILLICORES}ms", props
        assert props[unit]["MemoryMax"] == str(MEMORY), props
    assert props[batch.slice]["CPUWeight"] == "idle"  # the section's idle: true

    # What the agent recorded as the units' own values is the kubelet's and runc's (the twin's).
    recorded = _state(vm, "systemd-units.json")["units"]
    for unit, like in ((batch.slice, twin.slice), (batch.scope, twin.scope)):
        own = recorded[unit]["original"]
        assert own, f"nothing recorded for {unit}"
        for name, value in own.items():
            assert value == _as_bus(twin_props[like][name]), (unit, name, value, twin_props[like])

    # Kernel-measured: the busy process stays within the quota.
    u0, t0 = vm.usage(batch.scope_path), time.monotonic()
    time.sleep(10)
    u1, t1 = vm.usage(batch.scope_path), time.monotonic()
    used = (u1 - u0) / 1e6 / (t1 - t0)
    stat = vm.read(f"{batch.scope_path}/cpu.stat")[f"{batch.scope_path}/cpu.stat"]
    report("batch capacity", f"kernel: {used:.3f} cores used over {t1 - t0:.1f} s under a quota of "
                             f"{MILLICORES / 1000:.2f}; cpu.stat {stat}")  # fmt: skip
    assert 0 < used <= MILLICORES / 1000 * 1.1 + 0.02

    # daemon-reloads, watched every 20 ms: nothing lifted, nothing counted.
    watched = list(wanted)
    counted = _batch_reverts(vm)
    vm.watch(watched)
    took = vm.reloads(RELOADS)
    seen = vm.seen(watched)
    after_props = {u: vm.show(u, *UNITS) for u in (batch.slice, batch.scope)}
    report("batch capacity", f"{RELOADS} daemon-reloads ({', '.join(f'{t:.1f}' for t in took)} s): seen {seen}",
           f"waterline_caps_reverted_total for batch limits: {counted} -> {_batch_reverts(vm)}")  # fmt: skip
    assert all(values == [wanted[f]] for f, values in seen.items()), (
        f"a daemon-reload changed a limit: {seen}"
    )
    assert after_props == props
    assert _batch_reverts(vm) == counted

    # The policy deleted: the resources leave the Node, the idle mark goes back exactly (to
    # the twin's); the limits are the pod's own and stay (docs/batch-capacity.md).
    vm.kube.kubectl("delete", "nodeqosensurancepolicy", "vmnb-batch")
    wait_until(
        lambda: not _published(vm), 600, f"the batch resources removed from {NAME}", interval=2
    )
    idle = f"{batch.slice_path}/cpu.idle"
    wait_until(lambda: vm.read(idle)[idle] == "0", 600, "the idle mark released", interval=2)
    files, twin_files = _files(vm, batch), _files(vm, twin)
    slice_weight = vm.show(batch.slice, "CPUWeight")
    report("batch capacity", f"policy deleted: Node {_published(vm) or 'without the resources'}; "
                             f"slice {slice_weight}, twin's {vm.show(twin.slice, 'CPUWeight')}")  # fmt: skip
    assert slice_weight == vm.show(twin.slice, "CPUWeight")
    for f in ("cpu.idle", "cpu.weight"):
        assert files[f"{batch.slice_path}/{f}"] == twin_files[f"{twin.slice_path}/{f}"], (
            files,
            twin_files,
        )
    assert all(vm.read(*wanted)[k] == v for k, v in wanted.items())

    # The pod deleted: the agent forgets its units and its limits. The object is removed at
    # once (``--force``): under emulation the kubelet took minutes to stop the container
    # (containerd: "failed to delete task: context deadline exceeded"), and what is checked
    # here is the agent, which releases a pod gone from the API whatever the kubelet does.
    uid = batch_pod["metadata"]["uid"]
    vm.kube.kubectl("-n", ns, "delete", "deployment", "batch", "--cascade=orphan")
    vm.kube.kubectl("-n", ns, "delete", "pod", batch_pod["metadata"]["name"], "--force",
                    "--grace-period=0", "--wait=false")  # fmt: skip

    def forgotten() -> bool:
        units = _state(vm, "systemd-units.json").get("units", {})
        pods = _state(vm, "batch-limits.json").get("pods", {})
        return batch.slice not in units and batch.scope not in units and uid not in pods

    wait_until(forgotten, 600, "the deleted batch pod's units and limits forgotten", interval=2)
    report("batch capacity", "pod deleted: its units and limits gone from the agent's state")


def _batch_reverts(vm: VmNodeRun) -> float:
    return sum(v for k, v in vm.metrics().items()
               if k.startswith("waterline_caps_reverted_total") and "batch_" in k)  # fmt: skip
