"""`python -m devtools demo` (`make demo`): Waterline throttling real processes in real cgroups.

On a host where the cgroup v1 ``cpu`` and ``cpuacct`` hierarchies are writable (root), the
demo builds a small kubelet-shaped tree under its own kubelet cgroup root
(``waterline-demo-<pid>/kubepods/...``, so it never touches a real kubelet's pods):

* ``demo/web``, Guaranteed, limit 500m (its quota is 50 ms per 100 ms), one busy process;
* ``demo/batch-a`` and ``demo/batch-b``, BestEffort (no limit), one busy process each.

It starts the processes, measures for two seconds what they get on this machine, and sets
the waterline at the web pod's usage plus 60% of the batch pods' (1.4 cores on an idle
2-CPU machine; lower on a busy one). It writes the pods, a Node of 2 CPUs and the policy
(``cpu_total_usage`` above the line, 2 samples to trigger, 2 to restore; throttle with
minCPURatio 5 and stepCPURatio 25, BestEffort pods only) to a YAML file and runs the real
local-mode agent loop over it, every second: the node figure is the sum of the pods'
cgroup usage (``--node-cpu pods``), so that whatever else the machine runs does not move
it. The console view shows usage against the waterline,
the throttle actions with their reason, and the kernel-measured CPU of each pod.

Phase 1 (load): usage goes above the waterline; after two samples Waterline caps the
BestEffort pods, the most expensive first, just enough to bring the node to the line, and
the kernel holds them at their caps. Phase 2 (the load goes): the web pod goes idle and the
batch jobs pause; after two samples at or below the line, the caps are raised step by step
and finally the original quota (-1) is written back, exactly. The demo then checks every
quota file, kills every process, removes every cgroup and file it made (also on Ctrl-C,
SIGTERM or SIGHUP) and exits 0 when everything behaved. Killed outright (SIGKILL), it
cannot clean up: its busy processes die with it (``PR_SET_PDEATHSIG``), and the next demo
removes the cgroups and files named after a demo pid that no longer runs.

Phase 3 (who runs first, ``idle``): a Burstable latency-critical pod answering 300
requests a second beside two busy Burstable batch pods on one CPU; its response times each
tick, alone, beside them, and with them in the idle class (``cpu.idle``), then the class
released and each batch pod's ``cpu.shares`` checked against the kubelet's value.

Where cgroups are not writable (not root, cgroup v2 only, read-only mount), the demo says
why and replays an embedded scenario through ``waterline simulate``'s engine instead.

Modules: ``pods`` (the demo's pods and the objects the agent reads), ``cgroups`` (the
cgroup tree, its busy processes and the kernel's per-pod CPU figure), ``load`` (the
latency-critical server and the batch workers, shared with ``bench.colocation``),
``idle`` (phase 3), ``leftovers`` (an earlier demo's remains), ``live`` (the narrated
run), ``replay`` (the fallback) and ``command``.
"""
