"""Waterline: node-level QoS for Kubernetes.

Data flows collectors -> agent (analyze) -> executors (act). Everything that decides is
pure code over plain dataclasses, so the same decisions run live, in `waterline simulate`
and in tests.
"""

__version__ = "0.1.0"
