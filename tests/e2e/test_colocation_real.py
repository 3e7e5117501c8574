"""One short round of the co-location benchmark on the real node (``python -m bench
colocation --real``, cut as short as it goes): the pods are pods the kubelet started, the
policies go through the API to the agent installed from deploy/, the load comes from the
host. No latency is asserted (a benchmark holds goals, a test never asserts timings): only
that the records, the intervals and the pictures are produced, and are consistent with
each other and with what ran; and that the run leaves the node as it found it.

The round includes the ``batch-capacity`` window: its demand carried by the cap pods
(``cap-1..3``, requesting only ``waterline.io/batch-cpu`` / ``batch-memory``), which
must have run BestEffort under the agent's quota from their batch-cpu limit, held idle
while the window's policy was in force, never squeezed (the policy's floor covers them),
every mark handed back after each window and the node's published figures gone at the end.
The ``batch-capacity-breathe`` window is the same with web's quota breathing (raised
above its limit while no line is in force), judged against ``alone-breathe``: web's quota
must have been raised in both, and in no other window. Only the baselines the strategies
are judged against run (no ``alone-burst`` here).
"""

from __future__ import annotations

import html
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from bench.colocation_plot import chromium
from devtools.harness.cluster import ROOT
from devtools.harness.waiting import wait_until
from tests.e2e.conftest import RealNodeRun, report

ROUNDS, WINDOW, WARMUP = 2, 2, 1
KINDS = ("alone", "alone-breathe", "busy-alone", "none", "idle", "batch-capacity", "batch-capacity-breathe")
IDLE_ALONE = ("alone", "alone-breathe")
CAPACITY = ("batch-capacity", "batch-capacity-breathe")
BREATHING = ("alone-breathe", "batch-capacity-breathe")
CAPS = {"cap-1": 0.6, "cap-2": 0.5, "cap-3": 0.4}
BATCH_CPU = "waterline.io/batch-cpu"


def test_a_short_real_round_keeps_its_records_and_makes_intervals_and_pictures(
    real: RealNodeRun, tmp_path: Path
) -> None:
    out = tmp_path / "run"
    argv = [sys.executable, "-m", "bench", "colocation", "--real", "--quick", "--cases", "burstable",
            "--strategies", "idle,batch-capacity,batch-capacity-breathe", "--rounds", str(ROUNDS), "--window", str(WINDOW), "--warmup", str(WARMUP),
            "--settle", "0.2", "--sizing", "2", "--out", str(out)]  # fmt: skip
    masks = {pid: os.sched_getaffinity(pid) for pid in [os.getpid(), *_named("kubelet")]}
    start = time.monotonic()
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=600, check=False)  # noqa: S603
    took = time.monotonic() - start
    assert done.returncode == 0, done.stderr[-3000:]
    assert "skipped" not in done.stdout, done.stdout
    # the bench CPU was the pods': this test's process and the kubelet (outside kubepods)
    # were moved off it for the run, and have their masks back
    assert len(masks) == 2, masks
    assert {pid: os.sched_getaffinity(pid) for pid in masks} == masks

    run = json.loads((out / "run.json").read_text())
    windows = [json.loads(line) for line in (out / "windows.jsonl").read_text().splitlines()]
    report("colocation --real", f"{ROUNDS} rounds x {len(KINDS)} windows of {WARMUP} + {WINDOW} s on "
           f"{run['real']['node']}: {took:.0f} s, report and pictures included")  # fmt: skip
    assert run["mode"] == "real" and run["real"]["node"] == real.node.name
    assert run["real"]["cluster"] == "running already" and run["real"]["installed"] == "already"
    assert run["real"]["bench_cpu"]["shared"] is False and run["real"]["bench_cpu"]["moved_at_start"] >= 2
    assert [w["key"] for w in run["windows"]] == list(KINDS)
    assert sorted((w["window"], w["round"]) for w in windows) == sorted((k, r) for k in KINDS for r in range(ROUNDS))
    for w in windows:
        assert len([t for t in w["ticks"] if t["in_window"]]) == WINDOW
        assert len(w["ticks"]) == WARMUP + WINDOW
        assert w["latency_us"] and all(v > 0 for v in w["latency_us"])
        # the web pod's own quota was read: Burstable web has a 0.6 core limit
        assert sum(t["web_periods"] for t in w["ticks"]) > 0
        assert sum(t["web"] for t in w["ticks"]) > 0
    slots = {(w["window"], w["round"]): w["slot"] for w in windows}
    assert all(slots[(k, 0)] != slots[(k, 1)] for k in KINDS)  # the order is rotated
    for w in windows:  # batch work ran where the window asks for it, and only there
        batch = sum(sum(t["batch"].values()) for t in w["ticks"] if t["in_window"])
        assert (batch > 0.05 * WINDOW) == (w["window"] not in IDLE_ALONE), (w["window"], batch)
        assert bool(w["iterations"]) == (w["window"] not in IDLE_ALONE)
    # the policies reached the agent through the API: it held the batch pods in the idle
    # class in the idle windows (once its tick came), and nothing in the others
    held = {k: [t["isolated"].get("idle", 0) for w in windows if w["window"] == k for t in w["ticks"]] for k in KINDS}
    assert max(held["idle"]) == 3 and max(held["busy-alone"]) == 3, held  # the cap pods left out
    assert all(max(held[k]) == 3 for k in CAPACITY), held  # the cap pods, by the batchCapacity section
    assert max(held["none"] + held["alone"] + held["alone-breathe"]) == 0, held
    # web's quota raised above its limit in the breathing windows (once the agent's tick
    # came), never in the others
    raised = {k: max(t["isolated"].get("quotaBurst", 0) for w in windows if w["window"] == k for t in w["ticks"])
              for k in KINDS}  # fmt: skip
    assert raised == {k: int(k in BREATHING) for k in KINDS}, raised
    # the cap pods: BestEffort, their baseline the agent's quota from their batch-cpu limit
    caps = run["real"]["cap_pods"]
    assert sorted(caps) == sorted(CAPS)
    for name, cores in CAPS.items():
        quota = round(cores * 1000) * caps[name]["period_us"] // 1000
        assert caps[name]["qos"] == "BestEffort" and caps[name]["quota_us"] == quota
        quotas = [v for k, v in caps[name]["baseline"].items() if k.endswith("/cpu.cfs_quota_us")]
        assert quotas == [str(quota), str(quota)], caps[name]  # the pod's cgroup and its container's
        assert all(v == "0" for k, v in caps[name]["baseline"].items() if k.endswith("/cpu.idle"))
    for w in windows:
        assert w["released"] is True, (w["window"], w["round"])  # every mark and cap handed back
        ticks = [t for t in w["ticks"] if t["in_window"]]
        assert set(CAPS) <= set(ticks[0]["batch"])  # read from kubepods/besteffort/pod<uid>
        caps_cpu = sum(t["batch"][c] for t in ticks for c in CAPS)
        others_cpu = sum(v for t in ticks for k, v in t["batch"].items() if k not in CAPS)
        if w["window"] in CAPACITY:  # the cap pods carried the demand, under a quota
            assert caps_cpu > 0.05 * WINDOW and others_cpu < 0.05 * WINDOW, (caps_cpu, others_cpu)
            assert sum(t["batch_periods"] for t in ticks) > 0
            assert set(w["iterations"]) == set(CAPS)
            assert any((t["published"] or 0) >= sum(CAPS.values()) - 1e-6 for t in w["ticks"]), w["ticks"]
        else:
            assert caps_cpu < 0.05 * WINDOW, (w["window"], caps_cpu)
        assert not [c for t in w["ticks"] for c in t["caps"] if c in CAPS], w["ticks"]  # never squeezed
    # the agent's figures were read beside the kernel's: its /metrics answered
    scraped = [t["agent_batch"] for w in windows for t in w["ticks"]]
    assert sum(1 for v in scraped if v == v) >= 0.9 * len(scraped), scraped  # NaN: no answer

    text = (out / "report.txt").read_text()
    report("colocation --real", "$ " + " ".join(["python", *argv[1:-2]]), *text.splitlines())
    assert text in done.stdout and f"on the real node {real.node.name}" in text
    for w in run["windows"]:  # every kind with its pooled request count and an interval
        count = sum(len(x["latency_us"]) for x in windows if x["window"] == w["key"])
        line = next(ln for ln in text.splitlines() if ln.startswith(w["label"] + " "))
        assert str(count) in line.split() and "[" in line
    assert "no verdict for this case" in text  # sized over 2 s < 30 s: it says so

    page = (out / "colocation.html").read_text()
    assert page.count("<svg") == 2 and all(html.escape(w["label"]) in page for w in run["windows"])
    assert (out / "colocation.png").exists() == (chromium() is not None)
    again = subprocess.run([sys.executable, "-m", "bench", "colocation", "--replot", str(out)], cwd=ROOT,  # noqa: S603
                           capture_output=True, text=True, timeout=120, check=True)  # fmt: skip
    assert (out / "report.txt").read_text() == text and text in again.stdout

    # the node as it was: the run's namespace and its policies gone
    namespaces = real.get("namespaces")["items"]
    assert not [n for n in namespaces if n["metadata"]["name"].startswith("colocation-")]
    policies = real.get("nodeqosensurancepolicies")["items"]
    assert not [p for p in policies if p["metadata"]["name"] == "bench"], policies
    def withdrawn() -> bool:  # the policy gone: the node's figures withdrawn by the agent's next tick
        status = real.get("node", real.node.name)["status"]
        return BATCH_CPU not in status.get("allocatable", {}) and BATCH_CPU not in status.get("capacity", {})

    wait_until(withdrawn, 30, "the node's batch capacity withdrawn", interval=0.5)


def _named(name: str) -> list[int]:
    """The pids of the processes called ``name`` (their comm)."""
    out = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/comm") as f:
                if f.read().strip() == name:
                    out.append(int(pid))
        except OSError:
            continue
    return out
