"""Counting this process's open descriptors of one file tree, for the tests of collectors
that hold their cgroup files open between ticks."""

from __future__ import annotations

import gc
import os


def open_fds_of(part: str) -> int:
    """This process's descriptors whose target path contains ``part`` (a tree's root, or a
    folder name only that tree has): only those, since in
    the whole suite other threads (a control plane's watches and connection pools) open and
    close sockets meanwhile (whole-suite runs counted 151 for 153, 43 for 45, 61 for 65).
    Collects garbage first: the collectors of earlier tests close what they held when they
    go."""
    gc.collect()
    held = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            held += part in os.readlink(f"/proc/self/fd/{fd}")
        except OSError:  # closed since the listing
            continue
    return held
