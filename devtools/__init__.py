"""Tools for workstations, tests and benchmarks; never imported by the agent or controller.

* ``cluster``: a real Kubernetes control plane on this machine, built from its Go modules
  (``make cluster``, ``make node``: ``python -m devtools.cluster``), which the tests use;
* ``generate``: the synthetic cluster scenario (``python -m devtools generate``) that
  ``python -m bench cluster`` measures the cluster engines on;
* ``demo``: ``python -m devtools demo`` (``make demo``), the node agent throttling real processes
  in real cgroups, or replaying a scenario where it cannot.

They ship in the same distribution, so ``waterline`` can run them, but they are kept out
of ``agent/`` so that the product's packages hold only what runs in a cluster: nothing
under ``agent/`` imports ``devtools`` (the CLI's command table names these modules as
strings and imports one only when its command runs), while the tools may use the agent's
model, adapter and loops like any other client of them.
"""
