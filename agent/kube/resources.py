"""The API resources Waterline reads and writes, and how their URLs are built."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import quote

from agent.model.group import GROUP as QOS_GROUP
from agent.model.group import VERSION as QOS_VERSION


@dataclass(frozen=True, slots=True)
class Resource:
    group: str  # "" for the core group
    version: str
    plural: str
    kind: str
    namespaced: bool
    status_subresource: bool = False

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def prefix(self) -> str:
        return f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"

    def path(
        self, namespace: str | None = None, name: str | None = None, subresource: str | None = None
    ) -> str:
        """The URL path; ``namespace=None`` on a namespaced resource means all namespaces."""
        parts = [self.prefix]
        if self.namespaced and namespace:
            parts.append(f"namespaces/{quote(namespace, safe='')}")
        parts.append(self.plural)
        if name is not None:
            parts.append(quote(name, safe=""))
            if subresource:
                parts.append(subresource)
        return "/".join(parts)


PODS = Resource("", "v1", "pods", "Pod", True, True)
NODES = Resource("", "v1", "nodes", "Node", False, True)
NAMESPACES = Resource("", "v1", "namespaces", "Namespace", False, True)
EVENTS = Resource("", "v1", "events", "Event", True)
PDBS = Resource("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget", True, True)
LEASES = Resource("coordination.k8s.io", "v1", "leases", "Lease", True)
CONFIGMAPS = Resource("", "v1", "configmaps", "ConfigMap", True)
POLICIES = Resource(
    QOS_GROUP, QOS_VERSION, "nodeqosensurancepolicies", "NodeQOSEnsurancePolicy", False, True
)
ACTIONS = Resource(QOS_GROUP, QOS_VERSION, "avoidanceactions", "AvoidanceAction", False, True)
DAEMONSETS = Resource("apps", "v1", "daemonsets", "DaemonSet", True, True)

#: Everything the adapter knows by default.
KNOWN: tuple[Resource, ...] = (
    PODS,
    NODES,
    NAMESPACES,
    EVENTS,
    PDBS,
    LEASES,
    CONFIGMAPS,
    POLICIES,
    ACTIONS,
    DAEMONSETS,
)


def by_kind(kind: str) -> Resource:
    for resource in KNOWN:
        if resource.kind == kind:
            return resource
    raise KeyError(kind)
