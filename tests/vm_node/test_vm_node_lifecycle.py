"""On the guest node (cgroup v2, the kubelet's systemd driver, the agent as deploy/'s
DaemonSet): the agent's life cycle around the caps and marks it holds through systemd.

* a ``kubectl rollout restart`` of the DaemonSet: the new agent adopts the records on the
  host path, and the kernel's ``cpu.max`` / ``cpu.idle`` are never lifted in a 20 ms
  watcher's view; the policies deleted, every value is handed back exactly;
* both uninstalls of docs/install.md (``kubectl delete -k deploy/`` and ``helm
  uninstall``): every file and unit property back as before the agent touched the pod,
  the state files naming nothing;
* an eviction through the Eviction API of a capped and marked pod: the pod goes, and
  nothing the agent held on it stays (its state files, the units' drop-ins).

Everything is read in the guest (the kernel's files, ``systemctl show``, the state
directory, the agent's container log: the API server cannot reach this kubelet). The
module's own busy BestEffort pod (``app=lcb``) keeps it apart from the other modules'
``batch`` pod; each test starts from a pod no policy holds and leaves it so.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from devtools.cluster.launcher import ClusterError
from devtools.harness.cluster import NAMESPACE, ROOT, unique
from devtools.harness.waiting import wait_until
from devtools.vm.node import LABELS, NAME, agent_pod, pod_ready
from tests import builders
from tests.chart import CHART, helm
from tests.vm_node.conftest import BUSY, PodUnits, VmNodeRun, cores, pod_manifest, report

NODE = {"matchLabels": dict(LABELS)}
LABEL = "lcb"
SCOPE = {"qosClasses": ["BestEffort"], "podSelector": {"matchLabels": {"role": LABEL}}}
#: The cap's floor, 10% of the node's 2 cores (a BestEffort pod has no limit of its own).
MIN_RATIO = 10
STATE = "/var/lib/waterline"
#: The agent's records that name pods (uid) or units (name).
RECORDS = ("cpu-quota.json", "cpu-isolation.json", "systemd-units.json")
#: The cgroup files and unit properties the agent may write; what "handed back exactly"
#: compares.
FILES = ("cpu.max", "cpu.idle", "cpu.weight", "cpu.max.burst")
PROPS = ("CPUQuotaPerSecUSec", "CPUQuotaPeriodUSec", "CPUWeight")
RELEASE = "waterline"


# -- what the guest holds -----------------------------------------------------------------


def _values(vm: VmNodeRun, pod: PodUnits) -> dict[str, str]:
    """The pod slice's and the container scope's cpu files and unit properties."""
    paths = {"slice": pod.slice_path, "scope": pod.scope_path}
    files = vm.read(*(f"{p}/{f}" for p in paths.values() for f in FILES))
    out = {f"{level} {f}": files[f"{p}/{f}"] for level, p in paths.items() for f in FILES}
    units = {"slice": pod.slice, "scope": pod.scope}
    out.update(
        {f"{level} {k}": v for level, u in units.items() for k, v in vm.show(u, *PROPS).items()}
    )
    return out


def _records(vm: VmNodeRun) -> dict[str, Any]:
    """The agent's state files on the host path (missing: None)."""
    out = vm.node.check(
        "".join(f'echo "{f}	$(cat {STATE}/{f} 2>/dev/null | tr -d "\\n")"\n' for f in RECORDS)
    )
    got = dict(line.split("\t", 1) for line in out.splitlines() if "\t" in line)
    return {f: json.loads(got[f]) if got.get(f, "").strip() else None for f in RECORDS}


def _held(records: dict[str, Any], pod: PodUnits, uid: str) -> list[str]:
    """Which records name the pod (its uid) or its units."""
    held = []
    for f in ("cpu-quota.json", "cpu-isolation.json"):
        if uid in ((records.get(f) or {}).get("pods") or {}):
            held.append(f)
    units = (records.get("systemd-units.json") or {}).get("units") or {}
    held.extend(f"systemd-units.json:{u}" for u in (pod.slice, pod.scope) if u in units)
    return held


def _named(records: dict[str, Any]) -> dict[str, int]:
    """How many pods or units each record names."""
    out = {}
    for f, doc in records.items():
        key = "units" if f == "systemd-units.json" else "pods"
        out[f] = len((doc or {}).get(key) or {})
    return out


def _total(metrics: dict[str, float], name: str) -> float:
    """A metric summed over its labels."""
    return sum(v for k, v in metrics.items() if k == name or k.startswith(name + "{"))


def _ticks(vm: VmNodeRun) -> float:
    """The agent's ticks so far; -1 while it does not answer (its liveness probe restarts
    it when a start takes longer than the probe's window under emulation)."""
    try:
        return _total(vm.metrics(), "waterline_ticks_total")
    except (ClusterError, AssertionError):
        return -1.0


def _agent_log(vm: VmNodeRun, pod: dict[str, Any]) -> list[dict[str, Any]]:
    """The agent's JSON log lines, from its container log in the guest."""
    meta = pod["metadata"]
    out = vm.node.check(
        f"cat /var/log/pods/{NAMESPACE}_{meta['name']}_{meta['uid']}/agent/*.log 2>/dev/null || true"
    )
    return _events(out)


def _events(text: str) -> list[dict[str, Any]]:
    events = []
    for line in text.splitlines():  # CRI format: time stream tag message
        parts = line.split(" ", 3)
        if len(parts) == 4 and parts[3].startswith("{"):
            try:
                events.append(json.loads(parts[3]))
            except ValueError:
                continue
    return events


def _follow(vm: VmNodeRun, pod: dict[str, Any]) -> Callable[[], list[dict[str, Any]]]:
    """Copy the agent's container log in the guest as it grows (the kubelet removes it
    with the pod): its newest file (``<restarts>.log``: the liveness probe may have
    restarted it under emulation); the returned call stops the copy and gives its lines."""
    meta = pod["metadata"]
    logs = f"/var/log/pods/{NAMESPACE}_{meta['name']}_{meta['uid']}/agent"
    copy = f"/tmp/agent-{meta['name']}.log"
    vm.node.check(f'log=$(ls -t {logs}/*.log | head -1)\nnohup tail -n +1 -F "$log" > {copy} 2>/dev/null &\n'
                  f"echo $! > {copy}.pid")  # fmt: skip

    def stop() -> list[dict[str, Any]]:
        return _events(vm.node.check(f"kill $(cat {copy}.pid) 2>/dev/null; cat {copy}"))

    return stop


def _said(events: list[dict[str, Any]], *codes: str) -> list[str]:
    skip = ("level", "timestamp", "node", "logger")
    return [", ".join(f"{k}={v}" for k, v in e.items() if k not in skip)
            for e in events if e.get("code") in codes]  # fmt: skip


# -- the module's pod and its policies ------------------------------------------------------


@pytest.fixture(scope="module")
def ns(vm: VmNodeRun) -> Iterator[str]:
    """A namespace with one busy BestEffort pod (``app=lcb``) on the guest."""
    name = vm.kube.namespace("vml")
    try:
        vm.kube.apply([pod_manifest(LABEL, name, vm.image, BUSY, {"role": LABEL})])
        vm.pod(name, LABEL)
        yield name
    finally:
        vm.kube.kubectl("delete", "namespace", name, "--wait=false", check=False)


def _pod(vm: VmNodeRun, ns: str) -> tuple[dict[str, Any], PodUnits]:
    """The module's one running pod (no other, terminating, beside it), once the agent
    holds nothing of it (a test before may have left a release under way)."""
    found: list[dict[str, Any]] = []

    def one() -> bool:
        items = json.loads(
            vm.kube.kubectl("-n", ns, "get", "pods", "-l", f"app={LABEL}", "-o", "json").stdout
        )["items"]
        found[:] = [p for p in items if p["status"].get("phase") == "Running"
                    and p["status"].get("containerStatuses", [{}])[0].get("containerID")]  # fmt: skip
        return len(items) == 1 and len(found) == 1

    wait_until(one, 600, f"one pod app={LABEL} running", interval=2)
    pod = PodUnits.of(found[0])
    held: list[str] = []

    def free() -> bool:
        held[:] = _held(_records(vm), pod, found[0]["metadata"]["uid"])
        return not held

    wait_until(free, 600, f"{pod.name} held by no record", interval=2, explain=lambda: str(held))
    return found[0], pod


def _throttle_and_idle() -> list[dict[str, Any]]:
    """The pod capped (a line the node never gets under: to the floor) and marked idle."""
    return [
        builders.action("vml-throttle", throttle={"minCPURatio": MIN_RATIO, "stepCPURatio": 10},
                        cool_down=300, scope=SCOPE),
        builders.policy("vml-cpu", [builders.rule("high", "cpu_total_usage", "0.05", "vml-throttle",
                                                  avoidanceThreshold=2, restoreThreshold=3)], NODE),
        builders.policy("vml-idle", None, NODE, spec={"cpuIsolation": {"idle": {"scope": SCOPE}}}),
    ]  # fmt: skip


def _delete_policies(vm: VmNodeRun, evict: str = "") -> None:
    for kind, name in (("nodeqosensurancepolicy", "vml-cpu"), ("nodeqosensurancepolicy", "vml-idle"),
                       ("nodeqosensurancepolicy", "vml-evict"), ("avoidanceaction", "vml-throttle"),
                       ("avoidanceaction", evict)):  # fmt: skip
        if not name:
            continue
        vm.kube.kubectl("delete", kind, name, "--ignore-not-found", check=False)


def _capped_and_marked(vm: VmNodeRun, pod: PodUnits) -> tuple[str, dict[str, str]]:
    """Wait for the scope's cap and the slice's idle mark; the cap's file and the units'
    properties then."""
    cpu_max, idle = f"{pod.scope_path}/cpu.max", f"{pod.slice_path}/cpu.idle"

    def both() -> bool:
        now = vm.read(cpu_max, idle)
        return now[cpu_max] not in ("", "max 100000") and now[idle] == "1"

    wait_until(both, 600, "the pod capped and marked idle", interval=2,
               explain=lambda: str(vm.read(cpu_max, idle)))  # fmt: skip
    return vm.read(cpu_max)[cpu_max], _props(vm, pod)


def _props(vm: VmNodeRun, pod: PodUnits) -> dict[str, str]:
    """The scope's and the slice's properties the agent may set."""
    return {f"{level} {k}": v for level, unit in (("scope", pod.scope), ("slice", pod.slice))
            for k, v in vm.show(unit, *PROPS).items()}  # fmt: skip


def _agent_ready(vm: VmNodeRun, other_than: str | None = None) -> dict[str, Any]:
    """The agent's pod on the guest once Ready (another than ``other_than``)."""
    found: list[dict[str, Any]] = []

    def ready() -> bool:
        pod = agent_pod(vm.kube.cluster, NAME)
        found[:] = [pod] if pod is not None else []
        return pod_ready(pod) and pod is not None and pod["metadata"]["name"] != other_than

    wait_until(ready, 900, f"the agent's pod Ready on {NAME}", interval=2)
    return found[0]


def _agent_gone(vm: VmNodeRun) -> None:
    def gone() -> bool:
        out = vm.kube.kubectl("get", "pods", "-A", "-l", "app.kubernetes.io/name=waterline-agent",
                              "--field-selector", f"spec.nodeName={NAME}", "-o", "name",
                              check=False).stdout  # fmt: skip
        return not out.strip()

    wait_until(gone, 600, f"no agent pod on {NAME}", interval=2)


def _scale_controller(vm: VmNodeRun) -> None:
    """The controller does nothing here and would take the emulated CPUs (as ``vm`` does)."""
    vm.kube.kubectl(
        "-n", NAMESPACE, "scale", "deployment", "waterline-controller", "--replicas=0", check=False
    )


# -- 1. a rollout restart keeps the caps -----------------------------------------------------


def test_a_rollout_restart_keeps_the_cap_and_the_mark_and_the_release_is_exact(
    vm: VmNodeRun, ns: str
) -> None:
    start = time.monotonic()
    old, pod = _pod(vm, ns)
    before = _values(vm, pod)
    cpu_max, idle = f"{pod.scope_path}/cpu.max", f"{pod.slice_path}/cpu.idle"
    try:
        vm.kube.apply(_throttle_and_idle())
        cap, props = _capped_and_marked(vm, pod)
        agent = _agent_ready(vm)
        old_log = _follow(vm, agent)
        vm.watch([cpu_max, idle])
        restarted = time.monotonic()
        vm.kube.kubectl("-n", NAMESPACE, "rollout", "restart", "daemonset/waterline-agent")
        new = _agent_ready(vm, other_than=agent["metadata"]["name"])
        ready_after = time.monotonic() - restarted
        # The new agent has adopted (its log says so once its first tick has run).
        adopted: list[dict[str, Any]] = []

        def adopting() -> bool:
            adopted[:] = [
                e for e in _agent_log(vm, new) if e.get("code") in ("caps-adopted", "marks-adopted")
            ]
            return bool(adopted)

        wait_until(adopting, 300, "the new agent's adoption logged", interval=2)
        # A few of its ticks with the records adopted.
        wait_until(lambda: _ticks(vm) >= 0, 600, "the new agent answering", interval=2)
        ticks = [_ticks(vm)]
        wait_until(lambda: _ticks(vm) >= ticks[0] + 3, 600,
                   "three ticks of the new agent", interval=2)  # fmt: skip
        seen = vm.seen([cpu_max, idle])
        watched = time.monotonic() - restarted
        props_after = _props(vm, pod)
        old_said = old_log()
        new_said = _agent_log(vm, new)
        metrics = vm.metrics()
    finally:
        vm.node.run("touch /tmp/watch-stop")  # the watcher ends, whatever happened
        _delete_policies(vm)
    released: list[dict[str, str]] = []

    def handed_back() -> bool:
        released[:] = [_values(vm, pod)]
        return released[0] == before

    wait_until(handed_back, 600, "every value handed back", interval=2,
               explain=lambda: str({k: (before[k], v) for k, v in released[0].items() if before.get(k) != v}))  # fmt: skip
    records = _records(vm)
    took = time.monotonic() - start
    reverted = {k: v for k, v in metrics.items() if k.startswith("waterline_caps_reverted_total")}
    report("rollout restart",
           f"capped {cap}, marked idle; units {props}",
           f"rollout restart: new agent {new['metadata']['name']} Ready {ready_after:.0f} s after it; "
           f"watched {watched:.0f} s at 20 ms: cpu.max seen {seen[cpu_max]}, cpu.idle seen {seen[idle]}",
           f"units after {props_after}",
           *[f"old agent: {s}" for s in _said(old_said, "caps-kept", "caps-kept-unsure", "caps-released",
                                              "quota-restored", "stopping")],
           *[f"new agent: {s}" for s in _said(new_said, "caps-adopted", "marks-adopted", "quota-restored",
                                              "caps-released", "quota-rebuilt")],
           f"reverted {reverted or 0}; policies deleted: every file and property as before; "
           f"records name {_held(records, pod, old['metadata']['uid']) or 'nothing of it'}",
           f"test took {took:.0f} s")  # fmt: skip
    assert all(v != "max 100000" and cores(v) <= cores(cap) for v in seen[cpu_max]), seen[cpu_max]
    assert seen[idle] == ["1"], seen[idle]
    assert props_after == props
    assert not [
        e for e in new_said if e.get("code") in ("quota-restored", "caps-released", "quota-rebuilt")
    ]
    assert not any(reverted.values()), reverted


# -- 2. both uninstalls hand every value back -------------------------------------------------


def _installed_by(vm: VmNodeRun, how: str) -> None:
    """The agent installed by ``how`` ("kubectl": deploy/, "helm": the chart), whatever
    installed it before; its pod Ready on the guest."""
    by_helm = (
        helm(
            "status", RELEASE, "--namespace", NAMESPACE, kubeconfig=vm.kube.kubeconfig, check=False
        ).returncode
        == 0
    )
    if how == "helm" and not by_helm:
        vm.kube.kubectl("delete", "-k", str(ROOT / "deploy"), "--ignore-not-found", "--wait", "--timeout", "300s",
                        timeout=330, check=False)  # fmt: skip
        wait_until(lambda: vm.kube.kubectl("get", "namespace", NAMESPACE, check=False).returncode != 0, 300,
                   f"namespace {NAMESPACE} gone", interval=2)  # fmt: skip
        helm("install", RELEASE, str(CHART), "--namespace", NAMESPACE, "--create-namespace",
             "--set", "controller.enabled=false", kubeconfig=vm.kube.kubeconfig)  # fmt: skip
    elif how == "kubectl" and (by_helm or vm.kube.kubectl("-n", NAMESPACE, "get", "daemonset", "waterline-agent",
                                                          check=False).returncode != 0):  # fmt: skip
        if by_helm:
            helm("uninstall", RELEASE, "--namespace", NAMESPACE, "--wait", "--timeout", "300s",
                 kubeconfig=vm.kube.kubeconfig)  # fmt: skip
        vm.kube.install(again=True)
        _scale_controller(vm)
    _agent_ready(vm)


def _uninstalled(
    vm: VmNodeRun,
    ns: str,
    test: str,
    how: str,
    uninstall: Callable[[], object],
    released: tuple[str, ...],
) -> None:
    """Cap and mark the pod, uninstall with ``uninstall``; every file and property back as
    before, the records naming nothing, and the stopping agent saying one of ``released``."""
    start = time.monotonic()
    _old, pod = _pod(vm, ns)
    before = _values(vm, pod)
    vm.kube.apply(_throttle_and_idle())
    cap, props = _capped_and_marked(vm, pod)
    agent = _agent_ready(vm)
    held = _named(_records(vm))
    log = _follow(vm, agent)
    began = time.monotonic()
    uninstall()
    _agent_gone(vm)
    gone_after = time.monotonic() - began
    after = _values(vm, pod)
    records = _records(vm)
    said = log()
    changed = {k: (before[k], after.get(k)) for k in before if after.get(k) != before[k]}
    report(test, f"{how}: capped {cap}, marked idle (units {props}); records named {held}",
           f"the agent's pod gone {gone_after:.0f} s after",
           *[f"agent: {s}" for s in _said(said, "caps-kept", "caps-kept-unsure", "caps-released",
                                          "quota-restored", "stopping")],
           f"after: {changed or 'every file and unit property as before'}",
           f"records left: {_named(records)}", f"test took {time.monotonic() - start:.0f} s")  # fmt: skip
    assert not changed, changed
    assert not any(_named(records).values()), records
    assert [e for e in said if e.get("code") in released], _said(
        said, *{str(e.get("code")) for e in said}
    )


def test_kubectl_delete_k_deploy_hands_every_value_back(vm: VmNodeRun, ns: str) -> None:
    _installed_by(vm, "kubectl")
    try:
        _uninstalled(vm, ns, "kubectl delete -k deploy/", "kubectl delete -k deploy/ (CRDs and policies with it)",
                     lambda: vm.kube.kubectl("delete", "-k", str(ROOT / "deploy"), "--wait", "--timeout", "300s",
                                             timeout=330),
                     # The CRDs go first, and the policies with them: a restore may come first.
                     ("caps-released", "quota-restored"))  # fmt: skip
    finally:
        _delete_policies(vm)


def test_helm_uninstall_hands_every_value_back(vm: VmNodeRun, ns: str) -> None:
    _installed_by(vm, "helm")
    try:
        _uninstalled(vm, ns, "helm uninstall", "helm uninstall (CRDs and the policies stay)",
                     lambda: helm("uninstall", RELEASE, "--namespace", NAMESPACE, "--wait", "--timeout", "300s",
                                  kubeconfig=vm.kube.kubeconfig),
                     # The policies stay: only the agent's uninstall check hands back.
                     ("caps-released",))  # fmt: skip
    finally:
        _delete_policies(vm)
        _installed_by(vm, "kubectl")  # as the session's other tests expect it


# -- 3. an eviction through the Eviction API (last: it replaces the pod) ----------------------


def test_an_eviction_of_a_capped_idle_pod_leaves_nothing_held(vm: VmNodeRun, ns: str) -> None:
    start = time.monotonic()
    old, pod = _pod(vm, ns)
    uid = old["metadata"]["uid"]
    # An action of its own: the agent keeps each action's cool-down on the host path
    # (evictions.json), across restarts and uninstalls: an action of an earlier run's name
    # would still be cooling down.
    evict = unique("vml-evict")
    try:
        vm.kube.apply(_throttle_and_idle())
        cap, props = _capped_and_marked(vm, pod)
        held = _held(_records(vm), pod, uid)
        # A second line the capped pod still keeps the node over (0.05 cores): evict it,
        # once (the cool-down keeps its replacement).
        vm.kube.apply([
            builders.action(evict, eviction={"terminationGracePeriodSeconds": 1}, cool_down=3600, scope=SCOPE),
            builders.policy("vml-evict", [builders.rule("evict", "cpu_total_usage", "0.05", evict,
                                                        avoidanceThreshold=2, restoreThreshold=3)], NODE),
        ])  # fmt: skip
        evicted_at = time.monotonic()
        new: list[dict[str, Any]] = []

        def replaced() -> bool:
            """Evicted (deleted through the Eviction API: terminating or gone) and its
            replacement running."""
            items = json.loads(
                vm.kube.kubectl("-n", ns, "get", "pods", "-l", f"app={LABEL}", "-o", "json").stdout
            )["items"]
            new[:] = [
                p
                for p in items
                if p["metadata"]["uid"] != uid and p["status"].get("phase") == "Running"
            ]
            mine = [p for p in items if p["metadata"]["uid"] == uid]
            return bool(new) and all(p["metadata"].get("deletionTimestamp") for p in mine)

        wait_until(replaced, 600, f"{old['metadata']['name']} evicted and replaced", interval=2)
        replaced_after = time.monotonic() - evicted_at
    finally:
        _delete_policies(vm, evict)
    events = json.loads(vm.kube.kubectl("-n", ns, "get", "events", "--field-selector",
                                        f"involvedObject.name={old['metadata']['name']}", "-o", "json").stdout)["items"]  # fmt: skip
    evicted = [
        e
        for e in events
        if e["reason"] == "Evicted" and e.get("reportingComponent") == "waterline-agent"
    ]
    killing = [e for e in events if e["reason"] == "Killing"]

    # The agent forgets the pod's records once the pod is gone: the kubelet's kill may
    # take minutes under emulation (containerd's task delete timing out, retried).
    left: list[str] = []
    gone: list[float] = []

    def forgotten() -> bool:
        if (
            not gone
            and vm.kube.kubectl(
                "-n", ns, "get", "pod", old["metadata"]["name"], check=False
            ).returncode
        ):
            gone.append(time.monotonic() - evicted_at)
        left[:] = _held(_records(vm), pod, uid)
        return bool(gone) and not left

    wait_until(forgotten, 1200, "the evicted pod gone and the agent's records of it dropped", interval=2,
               explain=lambda: f"gone: {bool(gone)}, still held: {left}")  # fmt: skip
    dropped_after = time.monotonic() - evicted_at
    # systemd dropped the transient units with their runtime properties (no drop-in left).
    leftovers = vm.node.check(f"ls -d /run/systemd/system.control/*{uid.replace('-', '_')}* "
                              f"/run/systemd/transient/*{uid.replace('-', '_')}* 2>/dev/null || true").split()  # fmt: skip
    units = {u: vm.show(u, "LoadState", "ActiveState") for u in (pod.slice, pod.scope)}
    metrics = vm.metrics()
    took = time.monotonic() - start
    report("eviction",
           f"{old['metadata']['name']} capped {cap} ({props}), marked idle; held in {held}",
           f"evicted and replaced {replaced_after:.0f} s after the eviction policy, the pod object gone "
           f"{gone[0]:.0f} s after, its records dropped {dropped_after:.0f} s after; Event: "
           f"{evicted[0]['message'] if evicted else 'none'}; kubelet: {killing[0]['message'] if killing else 'none'}",
           f"after: records holding it {left or 'none'}; units {units}; drop-ins left {leftovers or 'none'}",
           f"actions: {({k: v for k, v in metrics.items() if k.startswith('waterline_actions_total')})}",
           f"test took {took:.0f} s")  # fmt: skip
    assert "cpu-quota.json" in held and "cpu-isolation.json" in held, held
    assert (
        f"systemd-units.json:{pod.scope}" in held and f"systemd-units.json:{pod.slice}" in held
    ), held
    assert evicted, f"no Evicted event from the agent on the pod: {[e['reason'] for e in events]}"
    assert not leftovers, leftovers
    assert all(
        u.get("LoadState") == "not-found" or u.get("ActiveState") == "inactive"
        for u in units.values()
    ), units
