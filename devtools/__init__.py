"""Tools for workstations, tests and benchmarks; never imported by the agent or controller.

* ``cluster``: a real Kubernetes control plane on this machine, built from its Go modules
  (``make cluster``, ``make node``: ``python -m devtools.cluster``), which the tests use;
* ``generate``: the synthetic cluster scenario (``python -m devtools generate``) that
  ``python -m bench cluster`` measures the cluster engines on;
* ``demo``: ``python -m devtools demo`` (``make demo``), the node agent throttling real processes
  in real cgroups, or replaying a scenario where it cannot.
* ``harness``: what the tests and the benchmarks share to run the real cluster, a fault
  proxy and an agent's pool on it (bench/ imports this, never tests/);
* ``chart``: ``make chart``, the chart and the package's CRDs brought in line with deploy/;
* ``vm``: the cgroup v2 + systemd guest of tests/vm.

They are not installed: pyproject.toml packages only agent, collectors and executors, so
neither the wheel nor the image carries them, and they run from a checkout
(``python -m devtools COMMAND`` from its root puts it on the path). They are kept out of
``agent/`` so that the product's packages hold only what runs in a cluster: nothing under
``agent/``, ``collectors/`` or ``executors/`` imports ``devtools`` (an import-linter
contract), while the tools may use the agent's model, adapter and loops like any other
client of them.
"""
