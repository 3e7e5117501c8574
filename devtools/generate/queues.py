"""The Queues: a few heavy-weight ones starve, a few light-weight ones hold more than their
share, the rest are steady; and the Queue objects, written once the pods are placed."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from devtools.generate.model import Generator, weighted


def plan_queues(g: Generator) -> None:
    rng, q = g.rng, g.args.queues
    for i in range(q):
        if i < max(1, round(q * 0.15)):
            role, weight = "starving", rng.randint(6, 10)
        elif i < max(2, round(q * 0.30)):
            role, weight = "overused", 1
        else:
            role, weight = "steady", rng.randint(1, 4)
        g.queues.append((f"q-{i:03d}", role, weight))


def pick_queue(g: Generator, roles: tuple[tuple[str, float], ...]) -> str:
    """A queue of a role drawn from ``roles`` (any queue when none has that role)."""
    if not g.queues:
        return ""
    role = weighted(g.rng, roles)
    members = [name for name, r, _ in g.queues if r == role] or [name for name, _, _ in g.queues]
    return g.rng.choice(members)


def queue_objects(g: Generator, total_cpu: int, queue_running: int) -> Iterator[dict[str, Any]]:
    """Queue CRs. A fifth of the steady queues hold a guarantee (capacity reserved for a
    team) above what they use: together with the capacity used outside any queue, that
    is what the heavy queues cannot get, so the light overused queues are cut below what
    they hold and become reclaimable victims."""
    rng = g.rng
    outside = sum(p.used_cpu for p in g.nodes if p.ready) - queue_running
    steady = [name for name, role, _ in g.queues if role == "steady"]
    overused = [name for name, role, _ in g.queues if role == "overused"]
    guaranteed = set(steady[::5]) if steady else set()
    per_queue = (outside + 0.10 * total_cpu) / max(1, len(guaranteed))
    allocated: dict[str, int] = {}
    for w in g.workloads:
        if w.queue:
            allocated[w.queue] = allocated.get(w.queue, 0) + w.cpu * (w.pods - w.pending)
    for name, role, weight in g.queues:
        spec: dict[str, Any] = {
            "weight": weight,
            # every fourth overused queue may not be reclaimed from
            "reclaimable": name not in overused[3::4],
        }
        if name in guaranteed:
            cores = max(1, round((allocated.get(name, 0) + per_queue) / 1000))
            spec["guarantee"] = {"resource": {"cpu": str(cores), "memory": "64Gi"}}
        elif role == "steady" and rng.random() < 0.1:
            spec["capability"] = {"cpu": str(rng.choice((1000, 2000, 5000)))}
        yield {
            "apiVersion": "qos.waterline.io/v1alpha1",
            "kind": "Queue",
            "metadata": {"name": name, "labels": {"role": role}},
            "spec": spec,
        }
