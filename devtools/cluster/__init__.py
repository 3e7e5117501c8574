"""A real Kubernetes control plane on this machine: ``make cluster`` / ``make cluster-down``.

The programs are built from their published Go modules by ``hack/cluster/build``; this
package starts and stops them (``python -m devtools.cluster up|down|status``) and is what
the tests' cluster fixture (devtools/harness/cluster.py) uses. Standard library only.
"""
