"""`python -m devtools generate`: a synthetic cluster scenario for benchmarks and demos.

    python -m devtools generate --nodes 5000 --pods 150000 --jobs 10000 --queues 100 --seed 1 \\
        --out /tmp/cluster.json

The output is a `waterline simulate` scenario (../shared/SIMULATE.md) in JSON, the same
Kubernetes-shaped objects as the example scenarios, deterministic from the seed: the same
arguments give the same bytes. It is shaped so that every cluster engine has real work:

* Nodes in three worker pools (online, batch, general) of three sizes, plus a few
  control-plane nodes with static (mirror) pods; some cordoned, NotReady, tainted GPU,
  ``critical=true`` or recently defragmented nodes.
* Requested CPU per node follows a target: about 5% of online/general nodes below 25%
  (defrag sources), a quarter in the 72..88% band (defrag targets), a few filled to the
  brim (where a new DaemonSet's pods wait), the rest 40..70%.
* Pods belong to workloads (Deployments through ReplicaSets, StatefulSets, batch Jobs),
  four DaemonSets run on every node, and a new DaemonSet has pending pods on the full
  nodes. Pods of a workload share one template (requests, priority, QoS class, labels);
  some have required anti-affinity, node selectors, PodDisruptionBudgets, or opt out.
* ``--queues`` Queues: batch pods and most services carry ``qos.waterline.io/queue``. A
  few heavy-weight queues starve with a backlog of big pending pods, a few light-weight
  ones hold more than their share, the rest are steady (some with a guarantee above what
  they use). The backlog exceeds the free capacity a little, so the starving queues need
  more than is free and preemption has victims to pick from the overused queues.
* ``--jobs`` PodMigrationJobs: mostly Pending on migratable pods (some whole batch Jobs
  together), a few Running, a few on DaemonSet pods or on pods that do not exist.

Where the counts leave no room (a tiny --pods for many nodes), the fixed parts (DaemonSet
pods, backlog) shrink first; the totals asked for are always exact.

One module a concern, in the order the data flows: ``args`` (the validated arguments),
``model`` (shape tables, plans, the streaming writer, the run's state), ``nodes``,
``queues``, ``workloads``, ``pods``, ``daemonsets``, ``placement`` (how ``--pods`` is
split and where each pod goes), ``jobs`` (PodMigrationJobs), ``cluster`` (the whole run)
and ``command``. Every draw comes from one seeded random source in a fixed order, so a
change that moves a draw changes the bytes: ``tests/unit/test_generate.py`` pins a digest.
"""

from __future__ import annotations

from devtools.generate.args import GenerateArgs
from devtools.generate.cluster import generate

__all__ = ["GenerateArgs", "generate"]
