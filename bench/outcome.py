"""What a benchmark that could not measure raises, so that ``python -m bench`` says so in
its exit code (3) instead of 0: a CI job or a script that runs a benchmark must not take
"no cluster here, nothing measured" for a run."""

from __future__ import annotations

#: ``python -m bench``'s exit code when a named benchmark measured nothing (2 is bad flags)
NOTHING_MEASURED = 3


class NothingMeasured(Exception):
    """The benchmark lacked what it measures with (a built control plane, a real node,
    /dev/shm); the message says what, and how to get it."""


def need_built_control_plane() -> None:
    """Raises NothingMeasured unless ``make cluster`` has built the control plane the
    cluster benchmarks (faults, soak, watch-recovery) start."""
    from devtools.harness.cluster import BIN  # here: `python -m bench NAME` imports this module

    if not (BIN / "kube-apiserver").exists():
        raise NothingMeasured(f"no {BIN / 'kube-apiserver'}: run hack/cluster/build (make cluster) first")
