"""End to end on a real node: the agent in its pod, started by the kubelet from deploy/,
acting on pods the kubelet runs, measured by the kernel (tests/e2e/kernel.py), never by
what the agent reports. The tests run in this order, the last one uninstalls.

Figures (CPU per window, caps, quotas) are printed at the end of the run; the assertions
are about what the kernel enforces and what the API server recorded, not about timing:
the machine is shared, so every wait is for a condition, with a generous limit.
"""

from __future__ import annotations

import json
import re
import statistics
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from devtools.harness.cluster import BIN, NAMESPACE
from devtools.harness.logs import coded, log_events
from devtools.harness.waiting import wait_until
from tests import builders
from tests.e2e.conftest import (
    AGENT,
    BATCH,
    CONTROLLER,
    IDLE,
    OVERLAY,
    STATE_DIR,
    WATCHED,
    RealNodeRun,
    Work,
    deployment,
    report,
)
from tests.e2e.kernel import CPU, PodCgroups, Sampler, Window, cores_of, read, table
from tests.need import need

#: The throttle action: caps never below 2% of the pod's limit (or of the node's 2 cores),
#: handed back 10% a tick. Low floors: on a busy day this shared host leaves the pods a
#: few tenths of a core, and the line must be reachable above the floors.
MIN_RATIO, STEP_RATIO = 2, 10
#: The node selector of the e2e policies: the real node only.
REAL_NODE = {"matchLabels": {"waterline.test/real-node": "true"}}


def _action(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return builders.action(name, spec=spec)


def _policy(name: str, metric: str, value: str, action: str, restore: int = 3) -> dict[str, Any]:
    high = builders.rule("high", metric, value, action, avoidanceThreshold=2, restoreThreshold=restore)
    return builders.policy(name, [high], REAL_NODE)


@contextmanager
def following(real: RealNodeRun, pod: str, folder: Path) -> Iterator[Path]:
    """``kubectl logs -f`` of a pod into a file while the block runs (a pod that is
    deleted takes its log with it)."""
    out = folder / f"{pod}.log"
    with open(out, "w") as f:
        proc = subprocess.Popen(  # noqa: S603
            [str(BIN / "kubectl"), "--kubeconfig", str(real.kube.kubeconfig), "-n", NAMESPACE, "logs", "-f", pod],
            stdout=f, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        yield out
    finally:
        proc.terminate()
        proc.wait(10)


def _at(event: dict[str, Any]) -> datetime:
    """When an agent log line was written (structlog's ISO UTC timestamp)."""
    return datetime.fromisoformat(str(event.get("timestamp", "1970-01-01T00:00:00Z")).replace("Z", "+00:00"))


def agent_events(real: RealNodeRun, namespace: str, pod: str, reason: str) -> list[dict[str, Any]]:
    items = real.get("events", "-n", namespace, "--field-selector",
                     f"involvedObject.name={pod},reason={reason}")["items"]  # fmt: skip
    return [e for e in items if e.get("reportingComponent") == "waterline-agent"]


# -- the agent's pod: what it runs as ----------------------------------------------------

PROBE = r"""
echo '== status'; grep -E '^(CapPrm|CapEff|CapBnd|CapAmb|NoNewPrivs|Seccomp):' /proc/self/status
echo '== init'; grep -E '^(Name|CapEff):' /proc/1/status
echo '== uid'; id -u
echo '== writes'
for f in /probe /tmp/probe /sys/fs/cgroup/cpu/cpu.shares /sys/fs/cgroup/cpuacct/cpuacct.usage \
         /sys/fs/cgroup/memory/memory.limit_in_bytes /host/proc/sys/kernel/hostname; do
  if err=$( (: >> "$f") 2>&1); then echo "$f: opened for writing"; else echo "$f: ${err##*: }"; fi
done
echo '== environ'; if err=$(cat /host/proc/1/environ 2>&1 >/dev/null); then echo read; else echo "${err##*: }"; fi
echo '== mountinfo'; cat /proc/self/mountinfo
"""
#: Mounts the container runtime makes in every container (runc's defaults and the masked
#: and read-only paths of a container that is not privileged), and the kubelet's files.
RUNTIME_MOUNTS = {"/", "/proc", "/dev", "/dev/pts", "/dev/mqueue", "/dev/shm", "/sys", "/sys/fs/cgroup",
                  "/etc/hosts", "/etc/hostname", "/etc/resolv.conf", "/dev/termination-log"}  # fmt: skip
MASKED = re.compile(r"^/proc/(acpi|asound|bus|fs|irq|sys|sysrq-trigger|kcore|keys|latency_stats|"
                    r"timer_list|timer_stats|sched_debug|scsi|interrupts)$|^/sys/(firmware|devices/virtual/powercap)$")  # fmt: skip


def _sections(out: str) -> dict[str, list[str]]:
    sections: dict[str, list[str]] = {}
    current = ""
    for line in out.splitlines():
        if line.startswith("== "):
            current = line[3:]
            sections[current] = []
        elif current:
            sections[current].append(line)
    return sections


def claimed_paths(container: dict[str, Any]) -> set[str]:
    return {m["mountPath"] for m in container["volumeMounts"]}


def _top_mounts(mountinfo: list[str]) -> dict[str, str]:
    """Mount point -> "ro"/"rw" of the mount on top there (the one a path reaches)."""
    top = {}
    for line in mountinfo:
        fields = line.split()
        top[fields[4]] = fields[5].split(",")[0]
    return top


def test_the_agent_pod_runs_as_its_manifests_say(real: RealNodeRun) -> None:
    pod = real.agent_pod()
    (container,) = pod["spec"]["containers"]
    sc = container["securityContext"]
    out = real.kubectl("-n", NAMESPACE, "exec", pod["metadata"]["name"], "--", "sh", "-c", PROBE).stdout
    s = _sections(out)
    status = dict(line.split(":\t") for line in s["status"])
    # The exec'd shell runs with the container's process settings: no capability at all,
    # no way to gain one, the runtime's seccomp filter; uid 0 as the manifest says.
    assert sc["capabilities"] == {"drop": ["ALL"]} and sc["allowPrivilegeEscalation"] is False
    assert {k: status[k] for k in ("CapPrm", "CapEff", "CapBnd", "CapAmb")} == dict.fromkeys(
        ("CapPrm", "CapEff", "CapBnd", "CapAmb"), "0000000000000000")
    assert (status["NoNewPrivs"], status["Seccomp"]) == ("1", "2")
    assert s["uid"] == [str(sc["runAsUser"])] == ["0"]
    # The agent itself, seen from the host: its container cgroup's tasks.
    cg = PodCgroups.of(pod)
    pids = (CPU / cg.container("agent") / "cgroup.procs").read_text().split()
    agent_status = {}
    for pid in pids:
        if "waterline" in Path(f"/proc/{pid}/cmdline").read_text():
            agent_status = dict(line.split(":\t", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines())
    assert agent_status, f"no waterline process among {pids}"
    assert (agent_status["CapEff"], agent_status["CapBnd"], agent_status["NoNewPrivs"]) == (
        "0000000000000000", "0000000000000000", "1")
    # Read-only root; every host mount read-only but the ones the manifest makes writable.
    writes = dict(line.rsplit(": ", 1) for line in s["writes"])
    assert sc["readOnlyRootFilesystem"] is True
    assert writes["/probe"] == "Read-only file system"
    assert writes["/tmp/probe"] == ("opened for writing" if "/tmp" in claimed_paths(container) else "Read-only file system")
    for path in ("/sys/fs/cgroup/cpu/cpu.shares", "/sys/fs/cgroup/cpuacct/cpuacct.usage",
                 "/sys/fs/cgroup/memory/memory.limit_in_bytes", "/host/proc/sys/kernel/hostname"):  # fmt: skip
        assert writes[path] == "Read-only file system", (path, writes[path])
    # uid 0 with no capability cannot read the environment of the host's root processes.
    assert s["environ"] == ["Permission denied"]
    # The mounts: exactly the claimed ones (with the claimed access) and the runtime's own.
    claimed = {m["mountPath"].replace("/var/run/", "/run/"): "ro" if m.get("readOnly") else "rw"
               for m in container["volumeMounts"]}  # fmt: skip
    top = _top_mounts(s["mountinfo"])
    hierarchies = {p for p in top if p.startswith("/sys/fs/cgroup/") and p.count("/") == 4}
    extra = {p: access for p, access in top.items()
             if p not in claimed and p not in RUNTIME_MOUNTS and p not in hierarchies and not MASKED.match(p)}  # fmt: skip
    assert not extra, f"mounts the manifest does not claim: {extra}"
    assert {p: top.get(p) for p in claimed} == claimed
    assert top["/"] == top["/sys"] == "ro"
    assert all(top[h] == "ro" for h in hierarchies)
    writable = sorted(p for p, access in top.items() if access == "rw" and not MASKED.match(p))
    report("agent pod",
           f"pod {pod['metadata']['name']}: exec'd shell CapEff {status['CapEff']} CapBnd {status['CapBnd']} "
           f"NoNewPrivs {status['NoNewPrivs']} Seccomp {status['Seccomp']} uid {s['uid'][0]}",
           f"the agent (host pid {', '.join(pids)}): CapEff {agent_status['CapEff']} CapBnd {agent_status['CapBnd']}",
           f"/proc/1 in the container is the host's ({' '.join(s['init'])}): hostPID",
           "writes: " + "; ".join(f"{p}: {r}" for p, r in writes.items()),
           f"/host/proc/1/environ: {s['environ'][0]}",
           f"{len(top)} mount points, claimed: " + ", ".join(f"{p} {a}" for p, a in sorted(claimed.items())),
           "writable: " + ", ".join(writable))  # fmt: skip


# -- the controller ----------------------------------------------------------------------


OK_ROUNDS = 'waterline_controller_rounds_total{outcome="ok"}'


def _metrics(ip: str) -> str:
    with urllib.request.urlopen(f"http://{ip}:9108/metrics", timeout=10) as resp:  # noqa: S310
        return str(resp.read().decode())


def _sample(text: str, name: str) -> float:
    values = [float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name)]
    return sum(values)


def test_the_controller_wins_its_lease_and_runs_rounds(real: RealNodeRun) -> None:
    pods: dict[str, str] = {}
    lease: dict[str, Any] = {}

    def holder() -> bool:
        pods.clear()
        pods.update({p["metadata"]["name"]: p["status"]["podIP"] for p in real.pods(NAMESPACE, CONTROLLER)})
        found = real.kubectl("-n", NAMESPACE, "get", "lease", "waterline-controller", "-o", "json", check=False)
        lease.clear()
        if found.returncode == 0:
            lease.update(json.loads(found.stdout)["spec"])
        return bool(lease.get("holderIdentity")) and lease["holderIdentity"] in pods

    wait_until(holder, 180, interval=2)
    leader = lease["holderIdentity"]
    seen: dict[str, str] = {}

    def rounds() -> bool:
        seen["leader"] = _metrics(pods[leader])  # from the host, to the pod's IP on the bridge
        return _sample(seen["leader"], OK_ROUNDS) >= 1

    wait_until(rounds, 180, interval=2)
    ok = _sample(seen["leader"], OK_ROUNDS)
    assert _sample(seen["leader"], "waterline_controller_leader ") == 1
    followers = {n: _sample(_metrics(ip), "waterline_controller_leader ") for n, ip in pods.items() if n != leader}
    assert followers and set(followers.values()) == {0}
    report("controller",
           f"lease waterline-controller held by {leader} (renewed {lease.get('renewTime')}, "
           f"{lease.get('leaseDurationSeconds')} s)",
           f"leader {pods[leader]}:9108/metrics: waterline_controller_leader 1, rounds ok {ok:.0f}",
           "followers: " + ", ".join(f"{n} leader={v:.0f}" for n, v in followers.items()))  # fmt: skip


# -- CPU: caps, kept under the line, handed back -----------------------------------------


@pytest.fixture(scope="package")
def cpu_line(real: RealNodeRun, work: Work) -> float:
    """The CPU waterline, from what the pods use with no cap: the node's pods' CPU minus
    half of what the batch pods burn (this host is shared, so a fixed number of cores
    would be above the pods' use on a busy day and far below it on a quiet one). Then the
    policy and its throttle action are installed."""
    work.load(True)
    sampler = Sampler({n: work.pods[n] for n in BATCH}, "main")
    sampler.window(2)
    windows = [sampler.window(2) for _ in range(4)]
    node = statistics.mean(w.node_pods for w in windows)
    batch = statistics.mean(sum(w.pods.values()) for w in windows)
    report("cpu waterline", "no policy yet, the batch pods burning:", *table(windows))
    if batch < 0.12:
        need(f"the batch pods got {batch:.2f} cores on this busy host: too little to cap and measure")
    line = round(node - batch / 2, 2)
    report("cpu waterline", f"node's pods {node:.2f} cores, batch pods {batch:.2f}: waterline {line:.2f} cores "
                            f"(cpu_total_usage, the sum of the pods' cgroups)")  # fmt: skip
    real.kube.apply([
        _action("e2e-throttle", {
            "coolDownSeconds": 300,
            "throttle": {"cpuThrottle": {"minCPURatio": MIN_RATIO, "stepCPURatio": STEP_RATIO}},
            "scope": {"qosClasses": ["BestEffort", "Burstable"], "podSelector": {"matchLabels": {"role": "batch"}}},
        }),
        _policy("e2e-cpu", "cpu_total_usage", f"{line}", "e2e-throttle"),
    ])  # fmt: skip
    return line


def _wait_capped(real: RealNodeRun, work: Work, ticks: int = 5) -> dict[str, str]:
    """The batch pods' caps once some have been in force for a few ticks in a row."""
    since: list[float] = []

    def settled() -> bool:
        if not work.capped():
            since.clear()
        elif not since:
            since.append(time.monotonic())
        return bool(since) and time.monotonic() - since[0] >= ticks

    wait_until(settled, 300, interval=1)
    return work.capped()


def _under_caps(windows: list[Window], names: list[str]) -> list[str]:
    """Windows where a capped pod used more than its cap (10% and 0.02 cores of slack for
    the accounting at the window's edges)."""
    over = []
    for w in windows:
        for n in names:
            cap = max((c for c in (w.caps0.get(n), w.caps.get(n)) if c is not None), default=None)
            if cap is not None and w.pods[n] > cap * 1.1 + 0.02:
                over.append(f"t={w.t:.1f} {n} {w.pods[n]:.3f} > cap {cap:.3f}")
    return over


def _cores(quota: str, period: str = "100000") -> float:
    value = cores_of(quota, period)
    return float("inf") if value is None else value


def test_a_cpu_waterline_caps_the_batch_pods_and_hands_the_caps_back(
    real: RealNodeRun, work: Work, cpu_line: float
) -> None:
    work.load(True)
    capped = sorted(_wait_capped(real, work))
    sampler = Sampler({n: work.pods[n] for n in BATCH}, "main")
    windows = [sampler.window(2) for _ in range(10)]
    node = statistics.mean(w.node_pods for w in windows)
    report("cpu caps", f"capped by the agent: {', '.join(capped)}; kernel-measured over 2 s windows "
                       "(CPU used/cap, cores):", *table(windows, cpu_line),
           f"node's pods, mean {node:.2f} cores against the waterline {cpu_line:.2f}")  # fmt: skip
    assert not _under_caps(windows, capped)
    still = [n for n in capped if all(w.caps[n] is not None for w in windows)]
    assert still, "no batch pod stayed capped"
    assert node <= cpu_line + max(0.1, 0.1 * cpu_line)
    for name in capped:
        assert agent_events(real, work.namespace, work.pods[name].name, "Throttled")
    # The load goes: the caps come back up a step a tick, then the kubelet's quota exactly.
    work.load(False)
    start = time.monotonic()
    history: dict[str, list[tuple[float, str]]] = {n: [] for n in capped}
    deadline = start + 300
    while time.monotonic() < deadline:
        for n in capped:
            quota = work.pods[n].quota("main")
            if not history[n] or history[n][-1][1] != quota:
                history[n].append((time.monotonic() - start, quota))
        if all(history[n][-1][1] == work.original_quota(n) for n in capped):
            break
        time.sleep(0.25)
    for n in capped:
        report("cpu hand-back", f"{n}: " + " -> ".join(f"{q} ({t:.1f} s)" for t, q in history[n])
               + f"; kubelet wrote {work.original_quota(n)}")  # fmt: skip
    for n in capped:
        values = [q for _t, q in history[n]]
        assert values[-1] == work.original_quota(n), f"{n} not handed back: {values}"
        assert [_cores(v) for v in values] == sorted(_cores(v) for v in values), values
    assert any(len(history[n]) >= 3 for n in capped), "handed back at once, not step by step"
    for name in capped:
        assert agent_events(real, work.namespace, work.pods[name].name, "Restored")


# -- the agent restarts under load: the caps stay ----------------------------------------


def test_caps_stay_in_force_across_a_rollout_restart_of_the_agent(
    real: RealNodeRun, work: Work, cpu_line: float, tmp_path: Path
) -> None:
    work.load(True)
    before = _wait_capped(real, work)
    old = real.agent_pod()["metadata"]["name"]
    sampler = Sampler({n: work.pods[n] for n in BATCH}, "main")
    windows: list[Window] = []
    marks: list[str] = []
    seen: set[str] = set()
    lost: list[str] = []
    new: str | None = None
    with following(real, old, tmp_path) as old_log:
        restarted_at = datetime.now(UTC)
        real.kubectl("-n", NAMESPACE, "rollout", "restart", "daemonset/waterline-agent")
        ready_at = None
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            w = sampler.window(1)
            windows.append(w)
            for n in before:  # until the new agent is ready nobody may hand a cap back
                if new is None and work.pods[n].quota("main") == work.original_quota(n):
                    lost.append(f"t={w.t:.1f} {n}")
            agents = real.get("pods", "-n", NAMESPACE, "-l", AGENT)["items"]
            names = {p["metadata"]["name"]: p for p in agents}
            if old in names and names[old]["metadata"].get("deletionTimestamp") and "stopping" not in seen:
                seen.add("stopping")
                marks.append(f"t={w.t:.1f}s old stopping: {old}")
            if old not in names and "gone" not in seen:
                seen.add("gone")
                marks.append(f"t={w.t:.1f}s old gone")
            for name, p in names.items():
                ready = any(c["type"] == "Ready" and c["status"] == "True" for c in p["status"].get("conditions", []))
                if name != old and ready and new is None:
                    new, ready_at = name, time.monotonic()
                    marks.append(f"t={w.t:.1f}s new ready: {new}")
            if ready_at is not None and time.monotonic() - ready_at > 15:
                break
    assert new is not None, "the new agent never became ready"
    new_log = real.kubectl("-n", NAMESPACE, "logs", new).stdout
    (tmp_path / f"{new}.log").write_text(new_log)  # beside the old agent's, for a failure
    adopted = coded(new_log, "caps-adopted")
    kept = coded(old_log.read_text(), "caps-kept")
    report("agent restart", "caps before: " + ", ".join(f"{n} {q}" for n, q in sorted(before.items())),
           *marks, *table(windows, cpu_line),
           f"old agent: {kept[0]['event'] if kept else 'no caps-kept line'}",
           *[f"new agent: {_said(e)}" for e in adopted] or ["new agent: no adoption line"])  # fmt: skip
    # Neither agent hands a cap back in a restart, and no cap is found at its original
    # meanwhile. (Until 2026-11-26 one was, in 3 suite runs that day: the new agent started on
    # the objects its predecessor saved up to 60 s before, older than the policy, and
    # handed both caps back as "action removed" for its first tick. The stopping agent now
    # saves its objects, and a saved copy hands nothing back: see agent/node/saved.py.)
    since = [e for e in [*log_events(old_log.read_text()), *log_events(new_log)]
             if _at(e) >= restarted_at]  # the old agent's log is its whole life
    handed = [e["code"] for e in since if e.get("code") in ("quota-restored", "caps-released", "quota-rebuilt")]
    assert not handed, handed
    assert not lost, lost
    assert not _under_caps(windows, sorted(before))
    assert kept and kept[0].get("pods", 0) >= 1
    # Adopted (at once, or once the API server's pods came for those its saved copy lacked),
    # none handed back by the restart.
    assert sum(e["adopted"] for e in adopted) >= len(before), adopted
    assert not [e for e in adopted if e["handed_back"]], adopted


# -- memory: an eviction through the Eviction API ----------------------------------------


def test_a_memory_waterline_evicts_through_the_eviction_api(real: RealNodeRun, work: Work) -> None:
    ns = work.namespace
    (old,) = real.pods(ns, "app=victim")
    old_name, old_uid = old["metadata"]["name"], old["metadata"]["uid"]
    evict = _action("e2e-evict", {
        "coolDownSeconds": 3600,  # one round: the replacement is not evicted in turn
        "eviction": {"terminationGracePeriodSeconds": 1},
        "scope": {"qosClasses": ["BestEffort"], "podSelector": {"matchLabels": {"role": "victim"}}},
    })  # fmt: skip
    # Far below any node's working set: triggered at the first samples.
    policy = _policy("e2e-memory", "memory_total_usage", "64Mi", "e2e-evict", restore=1)
    start = time.monotonic()
    real.kube.apply([evict, policy])
    replacement: list[dict[str, Any]] = []
    try:
        def replaced() -> bool:
            pods = real.get("pods", "-n", ns, "-l", "app=victim")["items"]
            replacement[:] = [p for p in pods if p["metadata"]["uid"] != old_uid
                              and p["status"].get("phase") == "Running"]  # fmt: skip
            return bool(replacement) and all(p["metadata"]["uid"] != old_uid for p in pods)

        wait_until(replaced, 240, interval=1)
    finally:
        real.kubectl("delete", "nodeqosensurancepolicy", "e2e-memory", "--ignore-not-found")
        real.kubectl("delete", "avoidanceaction", "e2e-evict", "--ignore-not-found")
    took = time.monotonic() - start
    new = replacement[0]
    (status,) = new["status"]["containerStatuses"]
    evicted = agent_events(real, ns, old_name, "Evicted")
    killing = [e for e in real.get("events", "-n", ns, "--field-selector", f"involvedObject.name={old_name}")["items"]
               if e["reason"] == "Killing"]  # fmt: skip
    created = [e for e in real.get("events", "-n", ns, "--field-selector", "reason=SuccessfulCreate")["items"]
               if new["metadata"]["name"] in e["message"]]  # fmt: skip
    report("memory eviction",
           f"{old_name} evicted; its Event: {evicted[0]['message'] if evicted else 'none'}",
           f"kubelet: {killing[0]['message'] if killing else 'no Killing event'}",
           f"ReplicaSet: {created[0]['message'] if created else 'no SuccessfulCreate event'}",
           f"replacement {new['metadata']['name']} on {new['spec']['nodeName']}, container "
           f"{status['containerID'][:25]}... started {status['state'].get('running', {}).get('startedAt')}, "
           f"{took:.0f} s after the policy")  # fmt: skip
    assert evicted, "no Evicted event from the agent on the pod"
    assert killing, "the kubelet did not stop the evicted pod"
    assert created, "the ReplicaSet did not make the replacement"
    assert new["spec"]["nodeName"] == real.node.name and "running" in status["state"]
    assert status["containerID"].startswith("containerd://")


# -- uninstall: every cap released, the kubelet's quotas back exactly --------------------

#: What the agent logs about stopping and handing caps back.
STOPPING = ("stopping", "caps-released", "quota-restored", "caps-kept", "caps-kept-unsure")


def _said(event: dict[str, Any]) -> str:
    """A log line of the agent, shortly."""
    skip = ("event", "level", "timestamp", "node", "container", "error")
    return f"{event['event']}" + "".join(f", {k}={v}" for k, v in event.items() if k not in skip)


def _uninstalled(real: RealNodeRun, work: Work, test: str, how: str, delete: Any, log_dir: Path) -> list[dict[str, Any]]:
    """Uninstall under load with ``delete``; check that the kubelet's files are back and
    the state holds nothing; the agent's log lines about it."""
    work.load(True)
    capped = _wait_capped(real, work)
    agent = real.agent_pod()["metadata"]["name"]
    since = datetime.now(UTC)
    with following(real, agent, log_dir) as log:
        delete()
        wait_until(lambda: not real.kubectl("get", "pods", "-n", NAMESPACE, "-l", AGENT, "-o", "name",
                                                "--ignore-not-found").stdout.strip(), 300, interval=1)  # fmt: skip
    after = {n: work.pods[n].files() for n in WATCHED}
    changed = {n: {k: (work.originals[n][k], v) for k, v in after[n].items() if work.originals[n].get(k) != v}
               for n in WATCHED}  # fmt: skip
    state = STATE_DIR / "cpu-quota.json"
    held = json.loads(state.read_text()).get("pods", {}) if state.exists() else {}
    said = [e for e in log_events(log.read_text()) if _at(e) >= since
            and (e.get("code") in STOPPING or e.get("status") in (401, 403))]  # fmt: skip
    sampler = Sampler({n: work.pods[n] for n in BATCH}, "main")
    windows = [sampler.window(2) for _ in range(2)]
    report(test, "caps before: " + ", ".join(f"{n} {q}" for n, q in sorted(capped.items())), how,
           *[f"agent: {_said(e)}" for e in said],
           *[f"{n}: {len(after[n])} cpu files of the pod and its containers, "
             f"{'all as the kubelet wrote them' if not changed[n] else changed[n]}; container quota "
             f"{work.pods[n].quota('main')}" for n in WATCHED],
           f"state file: {len(held)} pods held", "then, with no agent, the batch pods unbounded:",
           *table(windows))  # fmt: skip
    assert not any(changed.values()), changed
    assert not held
    return said


# -- the idle class: a resize by the real kubelet ------------------------------------------


def _idle_policy() -> dict[str, Any]:
    idle = {"scope": {"qosClasses": ["Burstable"], "podSelector": {"matchLabels": {"role": "resizable"}}}}
    return builders.policy("e2e-idle", None, REAL_NODE, spec={"cpuIsolation": {"idle": idle}})


def _resized(pod: dict[str, Any], request: str, limit: str) -> bool:
    """The kubelet has applied the resize: no resize condition left and the container's
    status resources are the new ones."""
    if any(c["type"] in ("PodResizePending", "PodResizeInProgress") for c in pod["status"].get("conditions", [])):
        return False
    res = next((s.get("resources") or {} for s in pod["status"].get("containerStatuses", [])), {})
    return (res.get("requests") or {}).get("cpu") == request and (res.get("limits") or {}).get("cpu") == limit


def test_the_real_kubelet_resizes_an_idle_pod_and_the_mark_comes_back(real: RealNodeRun, work: Work) -> None:
    """While ``cpu.idle`` is 1 the kernel refuses ``cpu.shares`` writes, and an in-place
    resize makes the kubelet write the pod's. The agent lifts the mark while the resize is
    under way and puts it back once it is done, recording the kubelet's new weight: what a
    release later writes back (DESIGN.md "CPU isolation")."""
    ns = work.namespace
    real.kube.apply([deployment("resizable", ns, IDLE, {"role": "resizable"},
                                {"requests": {"cpu": "100m", "memory": "32Mi"},
                                 "limits": {"cpu": "500m", "memory": "32Mi"}})])  # fmt: skip
    try:
        pod = real.ready_pod(ns, "app=resizable")
        cg = PodCgroups.of(pod)
        pod_dir = CPU / cg.rel

        def files() -> tuple[str, str, str]:
            return (read(pod_dir / "cpu.idle"), read(pod_dir / "cpu.shares"), cg.quota("main"))

        before = files()
        timeline: list[str] = []
        try:
            real.kube.apply([_idle_policy()])
            wait_until(lambda: files()[0] == "1", 60, interval=0.2)
            marked = files()
            layout = real.kube.cluster.layout
            kubelet_log = layout.logs / "kubelet.log" if layout is not None else None
            offset = kubelet_log.stat().st_size if kubelet_log is not None and kubelet_log.exists() else 0
            start = time.monotonic()
            real.kubectl("-n", ns, "patch", "pod", cg.name, "--subresource", "resize", "--patch",
                         json.dumps({"spec": {"containers": [{"name": "main", "resources": {
                             "requests": {"cpu": "200m"}, "limits": {"cpu": "700m"}}}]}}))  # fmt: skip
            last: tuple[str, str, str] | None = None
            done_at: float | None = None
            while time.monotonic() - start < 180:
                now = files()
                if now != last:
                    timeline.append(f"t={time.monotonic() - start:5.1f}s  idle {now[0]}  shares {now[1]}  "
                                    f"quota {now[2]}")  # fmt: skip
                    last = now
                if done_at is None and _resized(real.get("pods", "-n", ns, cg.name), "200m", "700m"):
                    done_at = time.monotonic() - start
                    timeline.append(f"t={done_at:5.1f}s  the kubelet reports the resize done")
                if done_at is not None and now[0] == "1" and now[2] == "70000":
                    break
                time.sleep(0.2)
            after = files()
            refused = [] if kubelet_log is None else [
                line.strip()[:300] for line in kubelet_log.read_bytes()[offset:].decode(errors="replace").splitlines()
                if "invalid argument" in line and cg.uid in line]  # fmt: skip
            agent_log = real.kubectl("-n", NAMESPACE, "logs", real.agent_pod()["metadata"]["name"]).stdout
            said = [e for e in log_events(agent_log) if "/resizable-" in str(e.get("pod", ""))]
        finally:
            real.kubectl("delete", "nodeqosensurancepolicy", "e2e-idle", "--ignore-not-found")
        released: list[tuple[str, str, str]] = []
        try:
            wait_until(lambda: files()[0] == "0", 60, interval=0.2)
            released.append(files())
        finally:
            report("idle class and an in-place resize",
                   f"before: idle {before[0]}  shares {before[1]}  quota {before[2]} (requests 100m, limit 500m)",
                   f"marked: idle {marked[0]}  shares {marked[1]}", "resize to requests 200m, limit 700m:",
                   *timeline, f"after: idle {after[0]}  shares {after[1]}  quota {after[2]}",
                   f"kubelet: {len(refused)} writes refused with EINVAL meanwhile"
                   + (f", the first: {refused[0]}" if refused else ""),
                   *[f"policy deleted: idle {r[0]}  shares {r[1]}  quota {r[2]}" for r in released],
                   *[f"agent: {_said(e)}" for e in said[-8:]])  # fmt: skip
    finally:
        real.kubectl("-n", ns, "delete", "deployment", "resizable", "--wait", "--timeout", "60s", check=False)
    assert done_at is not None, "the kubelet never finished the resize"
    # Marked again (an idle cgroup's cpu.shares reads the kernel's idle weight, 3) over the
    # kubelet's new quota (700m); the weight recorded is the kubelet's new one (200m: 204),
    # so the release writes that back, not the one recorded before the resize (102).
    assert after == ("1", "3", "70000"), after
    assert [str(e.get("weight_before")) for e in said if e.get("code") == "idle"][-1] == "204", said
    assert released == [("0", "204", "70000")], released


def test_an_uninstall_that_keeps_the_crds_releases_every_cap(
    real: RealNodeRun, work: Work, cpu_line: float, tmp_path: Path
) -> None:
    """Everything but the CRDs deleted (as ``helm uninstall`` does): the policies stay, so
    only the agent's own uninstall check can hand the caps back, with its ServiceAccount
    and RBAC already gone (401) when it is stopped. Then installed again."""
    out = real.kubectl("kustomize", str(OVERLAY)).stdout
    kept = [d for d in yaml.safe_load_all(out) if d and d["kind"] != "CustomResourceDefinition"]
    manifest = json.dumps({"apiVersion": "v1", "kind": "List", "items": kept})

    def delete() -> None:
        real.kubectl("delete", "-f", "-", "--wait", "--timeout", "300s", input=manifest, timeout=330)

    said = _uninstalled(real, work, "uninstall, CRDs kept", f"kubectl delete of {len(kept)} objects, every "
                        "one but the CRDs: the policies stay", delete, tmp_path)  # fmt: skip
    # In a cluster the agent releases only on an uninstall (a restart keeps: caps-kept).
    released = [e for e in said if e.get("code") == "caps-released"]
    assert released, said
    real.install()


def test_uninstall_releases_every_cap_and_gives_the_original_quotas_back(
    real: RealNodeRun, work: Work, cpu_line: float, tmp_path: Path
) -> None:
    done: list[str] = []

    def delete() -> None:
        done.extend(real.uninstall().stdout.splitlines())

    said = _uninstalled(real, work, "uninstall", "kubectl delete -k tests/e2e/overlay (CRDs and policies "
                        "with it)", delete, tmp_path)  # fmt: skip
    report("uninstall", f"{len(done)} objects deleted")
    assert any(e.get("code") in ("caps-released", "quota-restored") for e in said), said
