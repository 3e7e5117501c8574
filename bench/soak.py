"""The agent's own cost over time (issue 32): memory, CPU, descriptors and threads of the
agent process against the real kube-apiserver, with pods coming and going.

    python -m bench soak                      # 1 hour, 250 pods, 10 pods replaced a minute
    python -m bench soak --minutes 15         # a short run
    python -m bench soak --minutes 1440       # the full day (documented, not run here)
    python -m bench soak --rss                # the memory figure of docs/agent-cost.md only

A cluster of devtools/harness/cluster.py is started in a temporary folder and deploy/ installed; a
kwok node (64 cores, 300 pods) gets ``--pods`` pause pods of two ReplicaSets (one stays,
one churns), a policy of two rules selecting the node, and the agent, run as its own
process (``python -m agent agent``, as the DaemonSet runs it) with a token of its
ServiceAccount bound to the DaemonSet's pod on that node, its cgroup root a fake v2 tree
(kwok runs no containers: the pods have no cgroup and no figure; the agent's work per
tick is the same bar the reads), ticking every second.

During the run:

* **churn**: every minute ``--churn`` pods of the churning ReplicaSet are deleted (its
  controller makes new ones at once: as many created as deleted);
* **policy edits**: every quarter of the run the policy's waterline changes;
* **an API server restart** at half time (kill -9, started again on the same port).

Every ``--sample`` seconds (default 60) the agent's RSS (VmRSS), CPU seconds
(utime+stime), open file descriptors, threads, ticks (its /metrics) and the watch
faults its log reports (``watch failed`` and ``watch recovered`` lines: a reconnect after a
fault) are recorded. The records go to ``--out`` (default ``soak-<time>/``:
``samples.jsonl``, ``agent.log``, ``soak.html``: a self-contained page with SVG plots,
and each plot alone, ``soak-<figure>.svg``).
The slope of RSS per hour is fitted by least squares over the samples after the first
quarter of the run (the caches fill, the allocator settles) and printed with its 95%
interval; "no growth" is an interval that holds 0.

``--rss`` instead runs the agent three times for 20 ticks on the same node and prints
the peak RSS it logs when it stops (``max_rss_mib``), as docs/install.md measured it.
``--python PATH`` runs the agent with another interpreter (a venv of
requirements/runtime.lock only, as the image has: no dev tools imported by accident).

``--real`` soaks the agent as the DaemonSet runs it on a real node instead: this host
joined to the cluster as ``make node`` does (devtools.cluster.node: containerd, the kubelet,
kube-proxy; root; one per host), hack/node/overlay installed (deploy/ for cgroup v1 with the
cgroupfs driver, the image loaded from the local engine: ``--image`` runs another local
image under the project's name), ``--real-pods`` (default 6) pause pods of a ReplicaSet on
it, ``--churn`` (default 2) of them replaced a minute, the same policy, edits and restart.
The figures are read from the DaemonSet pod's process on this host (the pod has hostPID:
the container's process, found by its container id in /proc/*/cgroup), the ticks from its
/metrics on the pod's address, the watch faults from ``kubectl logs``; the agent reads real
cgroups here, of real pods. The node is taken down at the end, whatever happened.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from agent.kube.deleting import delete
from agent.kube.resources import PODS
from bench.flags import Limit, OneLine, check
from bench.outcome import NothingMeasured, need_built_control_plane
from bench.verdicts import every_run
from devtools.harness.agent_env import POOL_LABEL, QOS, Pool
from devtools.harness.cluster import AGENT_SA, BIN, NAMESPACE, RealCluster
from devtools.harness.cluster import start as start_cluster
from devtools.harness.fake_cgroups import FakeTree

ROOT = Path(__file__).resolve().parent.parent
CHURNING = 20  # pods of the churning ReplicaSet
#: t (95%, two-sided) for small degrees of freedom; the normal figure beyond.
_T95 = {1: 12.71, 2: 4.30, 3: 3.18, 4: 2.78, 5: 2.57, 6: 2.45, 7: 2.36, 8: 2.31, 9: 2.26,
        10: 2.23, 12: 2.18, 15: 2.13, 20: 2.09, 30: 2.04, 60: 2.00}  # fmt: skip


def _t95(dof: int) -> float:
    if dof > 60:
        return 1.96
    return _T95[max(k for k in _T95 if k <= max(dof, 1))]


def slope(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """Least-squares slope of ys over xs and the half-width of its 95% interval."""
    n = len(xs)
    if n < 3:
        return math.nan, math.nan
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx
    a = my - b * mx
    residual = sum((y - a - b * x) ** 2 for x, y in zip(xs, ys, strict=True)) / (n - 2)
    return b, _t95(n - 2) * math.sqrt(residual / sxx)


# -- the agent process --------------------------------------------------------------


class Sampled(Protocol):
    """An agent the soak samples: its own process (kwok) or the DaemonSet's (real node)."""

    def sample(self) -> dict[str, Any]: ...

    def running(self) -> bool: ...


def process_figures(pid: int) -> dict[str, Any]:
    """RSS, peak RSS, threads, open descriptors and CPU seconds of a process, from /proc."""
    status = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines())
    stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    tck = os.sysconf("SC_CLK_TCK")
    return {
        "rss_mib": int(status["VmRSS"].split()[0]) / 1024,
        "hwm_mib": int(status["VmHWM"].split()[0]) / 1024,
        "threads": int(status["Threads"]),
        "fds": len(os.listdir(f"/proc/{pid}/fd")),
        "cpu_seconds": (int(stat[11]) + int(stat[12])) / tck,
    }


def ticks_of(url: str) -> float | None:
    """waterline_ticks_total summed, from an agent's /metrics; None when it does not answer."""
    try:
        with urllib.request.urlopen(url, timeout=5) as r:  # noqa: S310
            text = r.read().decode()
    except OSError:
        return None
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("waterline_ticks_total{"))  # fmt: skip


def count_events(lines: Sequence[str], event: str) -> int:
    """Lines of a JSON log whose event starts with ``event``."""
    return sum(f'"event": "{event}' in line or f'"event":"{event}' in line for line in lines)


class AgentProcess:
    """``python -m agent agent`` in cluster mode on a fake cgroup tree; /metrics on a port."""

    def __init__(self, python: str, kubeconfig: Path, node: str, tmp: Path, log: Path,
                 ticks: int | None = None, tree: Path = ROOT) -> None:  # fmt: skip
        FakeTree(tmp / "cg", 2)
        self.port = _free_port()
        args = [python, "-m", "agent", "agent", "--kubeconfig", str(kubeconfig),
                "--node-name", node, "--node-cpu", "pods", "--cgroup-root", str(tmp / "cg"),
                "--proc-root", "/proc", "--state-dir", str(tmp / "state"),
                "--metrics-addr", f"127.0.0.1:{self.port}", "--interval", "1"]  # fmt: skip
        if ticks is not None:
            args += ["--ticks", str(ticks)]
        self.log = log
        env = {**os.environ, "PYTHONPATH": str(tree), "POD_NAMESPACE": "waterline-system"}
        self.proc = subprocess.Popen(args, cwd=tmp, env=env, stdout=subprocess.DEVNULL,  # noqa: S603
                                     stderr=log.open("ab"))  # fmt: skip

    def sample(self) -> dict[str, Any]:
        lines = self.log.read_text(errors="replace").splitlines()
        return {**process_figures(self.proc.pid), "ticks": ticks_of(f"http://127.0.0.1:{self.port}/metrics"),
                "watch_faults": count_events(lines, "watch failed"),
                "watch_recovered": count_events(lines, "watch recovered")}  # fmt: skip

    def running(self) -> bool:
        return self.proc.poll() is None

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


AGENT_LABEL = "app.kubernetes.io/name=waterline-agent"
#: What a user of this host installs on the real node (deploy/ for cgroup v1, pinned to it).
REAL_OVERLAY = ROOT / "hack" / "node" / "overlay"
#: The agent's state on the host (deploy/daemonset.yaml's hostPath): a new node starts clean.
STATE_DIR = Path("/var/lib/waterline")
STATE_FILES = ("cpu-quota.json", "objects.json", "evictions.json")


class DaemonSetAgent:
    """The DaemonSet's agent on the real node, sampled as ``AgentProcess`` is: its
    container's process (found by the container id in /proc/*/cgroup: the pod runs with
    hostPID, so the process is this host's), /metrics on the pod's address, its log through
    ``kubectl logs``. A restarted container is found again and counted."""

    def __init__(self, kube: RealCluster, node: str, log: Path) -> None:
        self.kube, self.node, self.log = kube, node, log
        self.pid, self.ip, self.pod, self.restarts = 0, "", "", 0
        self._find()

    def _find(self, timeout: float = 120) -> None:
        self.pod = self.kube.wait_for_pod(NAMESPACE, f"spec.nodeName={self.node}", AGENT_LABEL, timeout)
        pod = json.loads(self.kube.kubectl("-n", NAMESPACE, "get", "pod", self.pod, "-o", "json").stdout)
        status = next(c for c in pod["status"]["containerStatuses"] if c["name"] == "agent")
        self.ip, self.restarts = pod["status"]["podIP"], int(status.get("restartCount", 0))
        self.pid = agent_pid(status["containerID"].split("://", 1)[1])

    def sample(self) -> dict[str, Any]:
        if not Path(f"/proc/{self.pid}").exists():
            self._find()
        lines = self.kube.kubectl("-n", NAMESPACE, "logs", self.pod, "-c", "agent", check=False).stdout.splitlines()
        self.log.write_text("\n".join(lines) + "\n")
        return {**process_figures(self.pid), "ticks": ticks_of(f"http://{self.ip}:9108/metrics"),
                "watch_faults": count_events(lines, "watch failed"),
                "watch_recovered": count_events(lines, "watch recovered"),
                "restarts": self.restarts, "pid": self.pid}  # fmt: skip

    def running(self) -> bool:
        return True  # the kubelet restarts it; sample() finds it again


def agent_pid(container_id: str, proc: Path = Path("/proc")) -> int:
    """The agent's process in a container: the oldest process (lowest pid) in the
    container's cgroup whose command line says ``agent``."""
    found = []
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if container_id not in (entry / "cgroup").read_text():
                continue
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue  # gone meanwhile
        if b"agent" in argv:
            found.append(int(entry.name))
    if not found:
        raise RuntimeError(f"no agent process in container {container_id}")
    return min(found)


def _stale_state() -> None:
    for name in STATE_FILES:
        (STATE_DIR / name).unlink(missing_ok=True)


def real_soak(kube: RealCluster, args: argparse.Namespace, out: Path, tmp: Path) -> None:
    """The soak of the DaemonSet's agent on this host as a real node (``make node``'s
    RealNode), installed from hack/node/overlay, with ``--real-pods`` pause pods churning."""
    from devtools.cluster.images import PAUSE_IMAGE, default_images, save_images
    from devtools.cluster.node import LABELS, RealNode, missing_prerequisites

    problems = missing_prerequisites(BIN)
    if problems:
        raise NothingMeasured("no real node here: " + "; ".join(problems))
    project, _ = default_images()
    local = args.image or project
    node = RealNode(kube.cluster, images=save_images([local], kube.cluster))
    _stale_state()
    node.up(timeout=600)
    pool: Pool | None = None
    try:
        if local != project:  # deploy/ runs the project's name: that image under it
            node.ctr("images", "tag", "--force", local, project)
        kube.kubectl("apply", "-k", str(REAL_OVERLAY))
        kube.kubectl("-n", NAMESPACE, "rollout", "status", "daemonset/waterline-agent", "--timeout", "300s",
                     timeout=320)  # fmt: skip
        pool = Pool(kube, "soak-real")
        kube.kubectl("label", "node", node.name, f"{POOL_LABEL}={pool.namespace}", "--overwrite")
        kube.apply([{
            "apiVersion": "apps/v1", "kind": "ReplicaSet",
            "metadata": {"name": "churn", "namespace": pool.namespace},
            "spec": {"replicas": args.real_pods, "selector": {"matchLabels": {"app": "churn"}},
                     "template": {"metadata": {"labels": {"app": "churn"}},
                                  "spec": {"nodeSelector": dict(LABELS), "terminationGracePeriodSeconds": 1,
                                           "containers": [{"name": "main", "image": PAUSE_IMAGE,
                                                           "imagePullPolicy": "Never"}]}}},
        }])  # fmt: skip
        pool.running("churn", args.real_pods, timeout=300)
        policy = _policy(pool, "40")
        _policy(pool, "40", name=policy)
        agent = DaemonSetAgent(kube, node.name, out / "agent.log")
        print(f"the agent: pod {agent.pod}, pid {agent.pid}, image {local}")
        _run(kube, args, out, agent, pool, policy,
             f"the DaemonSet's agent on the real node {node.name}, {args.real_pods} real pods")  # fmt: skip
    finally:
        try:
            kube.kubectl("delete", "-k", str(REAL_OVERLAY), "--ignore-not-found", "--wait", "--timeout", "300s",
                         check=False, timeout=330)  # fmt: skip
            if pool is not None:
                pool.close()
        finally:
            node.down()
            _stale_state()


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# -- the cluster's side ---------------------------------------------------------------


def _node_with_pods(kube: RealCluster, pool: Pool, pods: int) -> str:
    node = kube.node(labels=pool.labels, allocatable={"cpu": "64", "memory": "256Gi", "pods": "300"})
    pool.nodes.append(node)
    churning = min(CHURNING, pods // 2)
    pool.replicaset("steady", pods - churning, node=node)
    pool.replicaset("churn", churning, node=node)
    pool.running("steady", pods - churning, timeout=600)
    pool.running("churn", churning, timeout=300)
    return node


def _policy(pool: Pool, value: str, name: str | None = None) -> str:
    action = "soak-throttle"
    if name is None:
        pool.action({"coolDownSeconds": 300, "throttle": {"cpuThrottle": {"minCPURatio": 10,
                                                                          "stepCPURatio": 10}}},
                    name=action)  # fmt: skip
        return pool.policy(action, value=value, name=f"soak-{pool.namespace}")
    pool.kube.apply([{
        "apiVersion": QOS, "kind": "NodeQOSEnsurancePolicy", "metadata": {"name": name},
        "spec": {"nodeSelector": {"matchLabels": dict(pool.labels)},
                 "objectiveEnsurances": [
                     {"name": "cpu", "actionName": action, "restoreThreshold": 1,
                      "metricRule": {"name": "cpu_total_usage", "value": value}},
                     {"name": "mem", "actionName": action,
                      "metricRule": {"name": "memory_total_utilization", "value": "95"}}]}},
    ])  # fmt: skip
    return name


def _agent_kubeconfig(kube: RealCluster, node: str, minutes: float) -> Path:
    """The agent's identity on ``node`` (as ``RealCluster.agent_kubeconfig``), its token
    good for the whole run (a day's soak outlives the 2 h default)."""
    pod = kube.wait_for_pod(NAMESPACE, f"spec.nodeName={node}", "app.kubernetes.io/name=waterline-agent")
    hours = max(2, math.ceil(minutes / 60) + 1)
    token = kube.token(AGENT_SA, pod=pod, duration=f"{hours}h")
    return kube.token_kubeconfig(token, name=f"soak-agent-{node}")


def _churn(pool: Pool, count: int) -> int:
    gone = 0
    for pod in pool.pods("churn")[:count]:
        if pod["metadata"].get("deletionTimestamp"):
            continue
        delete(pool.api, PODS, pod["metadata"]["name"], pool.namespace)
        gone += 1
    return gone


# -- the report -------------------------------------------------------------------------


def _svg(samples: Sequence[Mapping[str, Any]], key: str, label: str, marks: list[tuple[float, str]]) -> str:
    pts = [(s["t_min"], s[key]) for s in samples if s.get(key) is not None]
    w, h, pad = 640, 180, 40
    if len(pts) < 2:
        return f"<p>{label}: fewer than two samples</p>"
    x0, x1 = min(p[0] for p in pts), max(p[0] for p in pts) or 1
    ys = [p[1] for p in pts]
    y0, y1 = min(ys), max(ys)
    if y1 - y0 < 1e-9:
        y0, y1 = y0 - 1, y1 + 1

    def sx(x: float) -> float:
        return pad + (x - x0) / ((x1 - x0) or 1) * (w - 2 * pad)

    def sy(y: float) -> float:
        return h - pad + (y - y0) / (y1 - y0) * (2 * pad - h)

    line = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in pts)
    mark = "".join(f'<line x1="{sx(t):.1f}" y1="{pad / 2}" x2="{sx(t):.1f}" y2="{h - pad}" '
                   f'stroke="#c33" stroke-dasharray="3,3"/><text x="{sx(t) + 3:.1f}" y="{pad / 2 + 10}" '
                   f'font-size="10" fill="#c33">{what}</text>' for t, what in marks if x0 <= t <= x1)  # fmt: skip
    return (
        f'<h3>{label}</h3><svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}">'
        f'<rect width="{w}" height="{h}" fill="#fff" stroke="#ccc"/>{mark}'
        f'<polyline fill="none" stroke="#236" stroke-width="1.5" points="{line}"/>'
        f'<text x="4" y="{sy(y1) + 4:.1f}" font-size="10">{y1:.4g}</text>'
        f'<text x="4" y="{sy(y0) + 4:.1f}" font-size="10">{y0:.4g}</text>'
        f'<text x="{pad}" y="{h - 8}" font-size="10">{x0:.0f} min</text>'
        f'<text x="{w - pad - 30}" y="{h - 8}" font-size="10">{x1:.0f} min</text></svg>'
    )


def _report(out: Path, samples: list[dict[str, Any]], marks: list[tuple[float, str]], summary: str) -> None:
    figures = (("rss_mib", "RSS (MiB)"), ("cpu_per_tick_ms", "CPU per tick (ms, between samples)"),
               ("fds", "open file descriptors"), ("threads", "threads"),
               ("watch_faults", "watch faults (cumulative)"))  # fmt: skip
    plots = ""
    for key, label in figures:
        plot = _svg(samples, key, label, marks)
        plots += plot
        if "<svg" in plot:  # each plot alone too, for a document to show
            (out / f"soak-{key}.svg").write_text(plot[plot.index("<svg"):])
    (out / "soak.html").write_text(
        "<!doctype html><meta charset=utf-8><title>waterline agent soak</title>"
        f"<body style='font-family:sans-serif'><h2>waterline agent soak</h2><pre>{summary}</pre>"
        f"{plots}</body>"
    )


# -- the runs -----------------------------------------------------------------------------


def _slope_text(samples: Sequence[Mapping[str, Any]], what: str) -> str:
    b, half = slope([s["t_min"] / 60 for s in samples], [s["rss_mib"] for s in samples])
    return (f"{what} {b:+.2f} MiB/h (95% interval {b - half:+.2f} .. {b + half:+.2f}, "
            f"{len(samples)} samples)")  # fmt: skip


def summarize(samples: list[dict[str, Any]], minutes: float, pods: int) -> str:
    """The run in a few lines: RSS and its slope per hour after the first quarter (the
    caches fill) and after the API server restart (its relist's one step left out), CPU per
    tick, descriptors, threads, watch faults."""
    rss = [s["rss_mib"] for s in samples]
    per_tick = [s["cpu_per_tick_ms"] for s in samples if s.get("cpu_per_tick_ms")]
    after_restart = [s for s in samples if s["t_min"] > minutes / 2 + 0.5]
    return (
        f"{len(samples)} samples over {minutes:g} min, {pods} pods, "
        f"{samples[-1].get('churned', 0)} replaced, "
        f"3 policy edits, an API server restart at {minutes / 2:g} min\n"
        f"RSS {min(rss):.1f}-{max(rss):.1f} MiB (last {rss[-1]:.1f}); RSS slope: "
        f"{_slope_text([s for s in samples if s['t_min'] >= minutes / 4], 'after the first quarter')}; "
        f"{_slope_text(after_restart, 'after the restart')}\n"
        f"CPU per tick: median {statistics.median(per_tick) if per_tick else math.nan:.2f} ms "
        f"(range {min(per_tick, default=math.nan):.2f}-{max(per_tick, default=math.nan):.2f})\n"
        f"fds {min(s['fds'] for s in samples)}-{max(s['fds'] for s in samples)}, threads "
        f"{min(s['threads'] for s in samples)}-{max(s['threads'] for s in samples)}, watch "
        f"faults {samples[-1]['watch_faults']}, recovered {samples[-1]['watch_recovered']}"
        + (f", agent restarts {samples[-1]['restarts']}" if "restarts" in samples[-1] else "")
    )


def soak(kube: RealCluster, args: argparse.Namespace, out: Path, tmp: Path) -> None:
    pool = Pool(kube, "soak")
    node = _node_with_pods(kube, pool, args.pods)
    policy = _policy(pool, "40")
    _policy(pool, "40", name=policy)  # the second rule, by the same path as the edits
    agent = AgentProcess(args.python, _agent_kubeconfig(kube, node, args.minutes), node, tmp,
                         out / "agent.log")
    try:
        _run(kube, args, out, agent, pool, policy, f"{args.pods} pods on {node}")
    finally:
        agent.stop()
        pool.close()
    if agent.proc.returncode not in (0, -15, None):
        print(f"the agent exited with {agent.proc.returncode}: see {out / 'agent.log'}")


def _run(kube: RealCluster, args: argparse.Namespace, out: Path, agent: Sampled, pool: Pool,
         policy: str, what: str) -> None:  # fmt: skip
    """The soak's schedule around a running agent: samples, churn, policy edits, the API
    server restart at half time; then the summary and the plots."""
    samples: list[dict[str, Any]] = []
    marks: list[tuple[float, str]] = []
    start = time.monotonic()
    end = start + args.minutes * 60
    edits = [start + args.minutes * 60 * q / 4 for q in (1, 2, 3)]
    restart_at = start + args.minutes * 30
    restarted = False
    churned = 0
    next_sample = start + 5
    next_churn = start + 60
    print(f"soak: {what}, {args.minutes} min, churn {args.churn}/min, "
          f"a sample every {args.sample} s; records in {out}")
    with (out / "samples.jsonl").open("w") as f:
        while time.monotonic() < end and agent.running():
            now = time.monotonic()
            if now >= next_sample:
                s = {"t_min": (now - start) / 60, **agent.sample(), "churned": churned}
                if samples and s["ticks"] and samples[-1].get("ticks"):
                    dt = s["ticks"] - samples[-1]["ticks"]
                    s["cpu_per_tick_ms"] = ((s["cpu_seconds"] - samples[-1]["cpu_seconds"])
                                            / dt * 1e3 if dt > 0 else None)  # fmt: skip
                samples.append(s)
                f.write(json.dumps(s) + "\n")
                f.flush()
                print(f"  {s['t_min']:6.1f} min rss {s['rss_mib']:.1f} MiB fds {s['fds']} "
                      f"threads {s['threads']} ticks {s['ticks']} cpu/tick "
                      f"{s.get('cpu_per_tick_ms') or 0:.2f} ms watch faults {s['watch_faults']}",
                      flush=True)  # fmt: skip
                next_sample += args.sample
            if args.churn and now >= next_churn:
                churned += _churn(pool, args.churn)
                next_churn += 60
            if edits and now >= edits[0]:
                edits.pop(0)
                _policy(pool, str(30 + 5 * len(edits)), name=policy)
                marks.append(((now - start) / 60, "policy edit"))
            if not restarted and now >= restart_at:
                restarted = True
                marks.append(((now - start) / 60, "apiserver restart"))
                kube.restart_apiserver()
            time.sleep(1)
    if not samples:
        raise NothingMeasured("no sample was taken")
    summary = summarize(samples, args.minutes, args.pods if not args.real else args.real_pods)
    print(summary)
    _report(out, samples, marks, summary)
    print(f"plot: {out / 'soak.html'}")


def rss_only(kube: RealCluster, args: argparse.Namespace, out: Path, tmp: Path) -> None:
    """Three runs of 20 ticks per tree, the trees in turn; the peak RSS each run logs
    when it stops."""
    pool = Pool(kube, "rss")
    try:
        node = _node_with_pods(kube, pool, args.pods)
        policy = _policy(pool, "40")
        _policy(pool, "40", name=policy)
        trees = args.tree or [ROOT]
        peaks: dict[Path, list[float]] = {t: [] for t in trees}
        for run in range(3):
            for i, tree in enumerate(trees):
                log = out / f"agent-rss-{i}-{run}.log"
                agent = AgentProcess(args.python, _agent_kubeconfig(kube, node, 10), node,
                                     tmp / f"r{i}-{run}", log, ticks=20, tree=tree)
                agent.proc.wait(300)
                stopped = [json.loads(line) for line in log.read_text().splitlines()
                           if '"agent stopped"' in line]  # fmt: skip
                peaks[tree].append(stopped[-1]["max_rss_mib"] if stopped else math.nan)
        for tree, got in peaks.items():
            print(f"agent in cluster mode ({tree}), {args.pods} running pods on its node, 20 "
                  f"ticks, peak RSS (max_rss_mib) of 3 runs: {', '.join(f'{p:.1f}' for p in got)} "
                  f"MiB (goal < 80 MiB: {every_run(got, 80.0, below=True)}; {args.python})")
    finally:
        pool.close()


#: The soak's flags and what each must be, checked before any cluster starts.
LIMITS: tuple[Limit, ...] = (
    ("--minutes", lambda v: v > 0, "must be > 0"),
    ("--pods", lambda v: v >= 1, "must be >= 1"),
    ("--churn", lambda v: v >= 0, "must be >= 0 pods a minute"),
    ("--sample", lambda v: v > 0, "must be > 0 seconds"),
    ("--real-pods", lambda v: v >= 1, "must be >= 1"),
)
#: What ``summarize`` reads of every record.
SAMPLE_KEYS = ("t_min", "rss_mib", "fds", "threads", "watch_faults", "watch_recovered")


def read_samples(folder: Path, minutes: float, real: bool) -> list[dict[str, Any]]:
    """A run's ``samples.jsonl`` for ``--report``; ValueError naming the file, the line and
    what is wrong (not there, empty, a line cut, a figure missing, samples past ``--minutes``,
    a real-node run without ``--real`` or the other way): the summary is of those flags."""
    path = folder / "samples.jsonl"
    if not path.is_file():
        raise ValueError(f"--report: no samples.jsonl in {folder}")
    samples = []
    for no, line in enumerate(path.read_text().splitlines(), 1):
        try:
            record = json.loads(line)
        except ValueError:
            raise ValueError(f"{path}: line {no} is not a JSON record (cut?): {line[:60]!r}") from None
        missing = [k for k in SAMPLE_KEYS if not isinstance(record, dict) or k not in record]
        if missing:
            raise ValueError(f"{path}: line {no} has no {', '.join(missing)}")
        samples.append(record)
    if not samples:
        raise ValueError(f"{path}: no samples")
    gaps = [b["t_min"] - a["t_min"] for a, b in zip(samples, samples[1:], strict=False)]
    if samples[-1]["t_min"] > minutes + statistics.median(gaps or [1.0]):
        raise ValueError(f"{path}: the samples run to {samples[-1]['t_min']:.1f} min, past --minutes {minutes:g}: "
                         "give the run's --minutes")  # fmt: skip
    if ("restarts" in samples[-1]) != real:  # only the real node's agent is counted restarting
        raise ValueError(f"{path}: a {'kwok' if real else 'real-node'} run's samples: "
                         f"{'leave out' if real else 'add'} --real")  # fmt: skip
    return samples


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    """The flags, refused in one line (exit 2) before anything starts."""
    parser = OneLine("soak", description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=60.0, help="how long the soak runs (default 60)")
    parser.add_argument("--pods", type=int, default=250, help="running pods on the agent's kwok node (default 250)")
    parser.add_argument("--churn", type=int, default=None, help="pods replaced a minute (default 10; --real: 2)")
    parser.add_argument("--sample", type=float, default=60.0, help="seconds between samples (default 60)")
    parser.add_argument("--out", type=Path, default=None,
                        help="the run's folder (samples.jsonl, the page); default: ./soak-DATE")
    parser.add_argument("--python", default=sys.executable, help="the interpreter that runs the agent (default: this one)")
    parser.add_argument("--rss", action="store_true",
                        help="only the agent's peak memory with --pods running pods (docs/agent-cost.md)")
    parser.add_argument("--report", type=Path, default=None,
                        help="redo the summary and plots of a run's folder (the run's --minutes and --pods, "
                        "or --real and --real-pods)")
    parser.add_argument("--real", action="store_true",
                        help="the DaemonSet's agent on this host as a real node (make node; root; one per host)")
    parser.add_argument("--real-pods", type=int, default=6, help="--real: pause pods on the real node (default 6)")
    parser.add_argument("--image", default=None,
                        help="--real: a local image to run under the project's name (default: the project's)")
    parser.add_argument("--tree", type=Path, action="append",
                        help="--rss: the agent's code from this tree (repeatable: the trees in turn)")
    args = parser.parse_args(list(argv))
    if args.churn is None:
        args.churn = 2 if args.real else 10
    check(parser, args, LIMITS)
    if args.report is not None:
        try:
            args.samples = read_samples(args.report, args.minutes, args.real)
        except ValueError as err:
            parser.error(str(err))
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv or [])
    if args.report is not None:
        samples = args.samples
        marks = [(args.minutes * q / 4, "policy edit") for q in (1, 3)]
        marks.append((args.minutes / 2, "policy edit, apiserver restart"))
        summary = summarize(samples, args.minutes, args.real_pods if args.real else args.pods)
        print(summary)
        _report(args.report, samples, sorted(marks), summary)
        return
    need_built_control_plane()
    out = args.out or Path(f"soak-{time.strftime('%Y%m%d-%H%M%S')}")
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="waterline-soak-") as tmp_dir:
        tmp = Path(tmp_dir)
        kube = start_cluster(tmp / "cluster")
        try:
            kube.install()
            (rss_only if args.rss else real_soak if args.real else soak)(kube, args, out.resolve(), tmp)
        finally:
            kube.close()


if __name__ == "__main__":
    main(sys.argv[1:])
