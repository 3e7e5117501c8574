"""What an eviction request came to: the node engine, the controller and the API adapter's
callers all speak this one vocabulary."""

from __future__ import annotations

from enum import StrEnum


class EvictionResult(StrEnum):
    EVICTED = "evicted"  # the API accepted the eviction; the pod is terminating
    BLOCKED_BY_PDB = "blocked-by-pdb"  # 429: a disruption budget refused; try the next pod
    GONE = "gone"  # 404: already gone, counts as released
    FAILED = "failed"  # anything else (500 for several budgets, network): skip the pod

    @property
    def releases(self) -> bool:
        return self in (EvictionResult.EVICTED, EvictionResult.GONE)
