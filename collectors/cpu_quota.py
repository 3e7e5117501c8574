"""The CFS quota files of a cgroup, read one way everywhere: v1 ``cpu.cfs_quota_us`` and
``cpu.cfs_period_us`` (``-1`` = unlimited), v2 ``cpu.max`` (``max PERIOD`` = unlimited).

The throttler (its writes and exact undo), capture (the caps in force) and discovery (the
limits the kubelet wrote) all parse them with ``parse_quota``."""

from __future__ import annotations

V1_QUOTA = "cpu.cfs_quota_us"
V1_PERIOD = "cpu.cfs_period_us"
V2_MAX = "cpu.max"


def parse_quota(version: int, quota_text: str, period_text: str = "") -> tuple[int | None, int]:
    """(quota us or None for unlimited, period us) from the files' contents; ValueError
    for contents that are not a quota."""
    if version == 1:
        quota = int(quota_text)
        return (None if quota < 0 else quota), int(period_text)
    fields = quota_text.split()
    if len(fields) != 2:
        raise ValueError(f"cpu.max must hold 'quota period', got {quota_text!r}")
    return (None if fields[0] == "max" else int(fields[0])), int(fields[1])
