"""PodMigrationJobs, at most one per pod: about 4% Running (they count as migrating), 2%
on DaemonSet pods and 1% on pods that do not exist (arbitration fails those), whole batch
Jobs together for a tenth of them, and the rest on random running pods."""

from __future__ import annotations

from typing import Any

from agent.model.timeutil import format_time
from devtools.generate.model import PRIORITY_CLASSES, Generator, suffix


def migration_jobs(g: Generator) -> None:
    """Write ``--jobs`` PodMigrationJobs."""
    if not g.args.jobs:
        return
    for n, ref in enumerate(_targets(g)):
        g.writer.add(_job(g, n, ref))


def _targets(g: Generator) -> list[int | None]:
    """The pods to migrate, as indices into ``g.placed`` (None: a pod that does not exist),
    in random order."""
    rng, total = g.rng, g.args.jobs
    regular = [k for k, p in enumerate(g.placed) if p[3] != "DaemonSet"]
    daemon = [k for k, p in enumerate(g.placed) if p[3] == "DaemonSet"]
    by_job: dict[str, list[int]] = {}
    for k in regular:
        if g.placed[k][3] == "Job":
            by_job.setdefault(g.placed[k][4], []).append(k)
    job_uids = list(by_job)
    rng.shuffle(regular)
    rng.shuffle(job_uids)
    chosen: list[int | None] = []
    used: set[int] = set()

    def take(k: int) -> None:
        if k not in used and len(chosen) < total:
            used.add(k)
            chosen.append(k)

    for k in daemon[: int(total * 0.02)]:
        take(k)
    grouped = int(total * 0.10)
    for uid in job_uids:
        if len(chosen) >= int(total * 0.02) + grouped:
            break
        for k in by_job[uid][:16]:
            take(k)
    for k in regular:
        if len(chosen) >= total - max(1, int(total * 0.01)):
            break
        take(k)
    while len(chosen) < total:
        chosen.append(None)
    rng.shuffle(chosen)
    return chosen


def _job(g: Generator, n: int, ref: int | None) -> dict[str, Any]:
    rng = g.rng
    if ref is None:
        namespace, pod = "team-00", f"gone-{suffix(rng, 8)}"
    else:
        namespace, pod = g.placed[ref][0], g.placed[ref][1]
    spec: dict[str, Any] = {
        "podRef": {"namespace": namespace, "name": pod},
        "mode": "ReservationFirst" if rng.random() < 0.8 else "EvictDirectly",
        "ttl": rng.choice(("10m", "30m", "1h")),
    }
    x = rng.random()
    if x < 0.2:
        spec["priority"] = rng.choice((0, 10, 100, 1000))
    elif x < 0.3:
        spec["priorityClassName"] = rng.choice(sorted(PRIORITY_CLASSES))
    phase = "Running" if rng.random() < 0.04 else "Pending"
    return {
        "apiVersion": "qos.waterline.io/v1alpha1",
        "kind": "PodMigrationJob",
        "metadata": {
            "name": f"pmj-{n:05d}",
            "uid": g.uid(),
            "creationTimestamp": format_time(g.now - rng.uniform(0, 7200)),
        },
        "spec": spec,
        "status": {"phase": phase},
    }
