"""Latency probe beside busy work in kubepods/besteffort: the kubelet's weight 2 against
the idle class (issue 33; docs/node.md "The besteffort QoS cgroup in the idle class").

Usage, as root on the real node (`make node` up): python3 hack/node/besteffort_probe.py ROUNDS SECONDS

Makes kubepods/wlprobe (cpu.shares 614, where a Guaranteed 600m pod would be) and
kubepods/besteffort/wlbusy (cpu and cpuacct; names without the kubelet's "pod" prefix, so
its orphan cleanup leaves them), two busy loops in wlbusy, and an open-loop probe in
wlprobe: a request every 5 ms, each 0.5 ms of CPU; latency = end - scheduled start.
Conditions per round, the order alternating: alone (no busy loops), w2 (besteffort
cpu.idle 0, cpu.shares 2, as the kubelet has it), idle (besteffort cpu.idle 1). Prints a
JSON line per round (percentiles in ms, the busy loops' cores from cpuacct) and medians
and ranges per condition; leaves besteffort at idle 0, shares 2 and removes its cgroups.
"""
import json, os, signal, statistics, subprocess, sys, time
CPU = "/sys/fs/cgroup/cpu/kubepods"; ACCT = "/sys/fs/cgroup/cpuacct/kubepods"
BE = f"{CPU}/besteffort"
def w(p, v): open(p, "w").write(str(v))
def r(p): return open(p).read().strip()
def mk(p): os.makedirs(p, exist_ok=True)
def probe(seconds, period=0.005, work=0.0005):
    lat = []; t = time.perf_counter(); end = t + seconds; nxt = t
    while nxt < end:
        now = time.perf_counter()
        if now < nxt: time.sleep(nxt - now)
        s = time.perf_counter()
        while time.perf_counter() - s < work: pass
        lat.append(time.perf_counter() - nxt); nxt += period
        if time.perf_counter() > nxt + 0.1: nxt = time.perf_counter()  # do not pile up
    return lat
def pct(xs, q): xs = sorted(xs); return xs[min(len(xs) - 1, int(q * len(xs)))]
def main():
    rounds, secs = int(sys.argv[1]), float(sys.argv[2])
    mk(f"{CPU}/wlprobe"); w(f"{CPU}/wlprobe/cpu.shares", 614)
    mk(f"{BE}/wlbusy"); mk(f"{ACCT}/besteffort/wlbusy")
    w(f"{CPU}/wlprobe/tasks", os.getpid())
    busy = []
    out = []
    try:
        for rnd in range(rounds):
            order = ["alone", "w2", "idle"] if rnd % 2 == 0 else ["idle", "w2", "alone"]
            for cond in order:
                if cond == "idle": w(f"{BE}/cpu.idle", 1)
                else:
                    w(f"{BE}/cpu.idle", 0); w(f"{BE}/cpu.shares", 2)
                if cond != "alone" and not busy:
                    for _ in range(2):
                        p = subprocess.Popen(["sh", "-c", "while :; do :; done"])
                        w(f"{BE}/wlbusy/tasks", p.pid); w(f"{ACCT}/besteffort/wlbusy/tasks", p.pid); busy.append(p)
                if cond == "alone":
                    for p in busy: p.kill(); p.wait()
                    busy = []
                time.sleep(1)
                u0 = int(r(f"{ACCT}/besteffort/wlbusy/cpuacct.usage")); t0 = time.time()
                lat = probe(secs)
                u1 = int(r(f"{ACCT}/besteffort/wlbusy/cpuacct.usage")); t1 = time.time()
                rec = {"round": rnd, "cond": cond, "n": len(lat), "p50": pct(lat, .5) * 1e3,
                       "p99": pct(lat, .99) * 1e3, "p999": pct(lat, .999) * 1e3,
                       "batch_cores": (u1 - u0) / 1e9 / (t1 - t0),
                       "be": f"{r(BE + '/cpu.shares')}/{r(BE + '/cpu.idle')}", "load1": os.getloadavg()[0]}
                out.append(rec); print(json.dumps(rec), flush=True)
    finally:
        for p in busy: p.kill(); p.wait()
        w(f"{BE}/cpu.idle", 0); w(f"{BE}/cpu.shares", 2)
        w(f"{CPU}/tasks", os.getpid())
        for d in (f"{BE}/wlbusy", f"{ACCT}/besteffort/wlbusy", f"{CPU}/wlprobe"):
            try: os.rmdir(d)
            except OSError as e: print("rmdir", d, e)
    for cond in ("alone", "w2", "idle"):
        rs = [x for x in out if x["cond"] == cond]
        for k in ("p99", "p999", "batch_cores"):
            v = [x[k] for x in rs]
            print(f"{cond:5} {k:11} median {statistics.median(v):7.2f} range {min(v):7.2f}-{max(v):7.2f} (n={len(v)} rounds)")
main()
