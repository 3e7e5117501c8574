"""What the dev server serves, described the way discovery describes it.

``ApiResource`` is one resource (group, version, plural) with the facts kubectl reads from
discovery (singular, short names, categories, subresources), the kubernetes client model
whose fields a built-in kind has (for field validation) and, for a custom resource, its
CRD's schema and printer columns. ``BUILTINS`` are the kinds the agent and the controller
read and write, plus the CRD kind itself; ``crds.py`` adds one entry per served version of
every CustomResourceDefinition created.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from agent.kube.resources import Resource

#: Verbs of every resource (the server implements each of them).
VERBS = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")
#: Verbs of a subresource, by name.
SUBRESOURCE_VERBS = {"status": ("get", "patch", "update"), "eviction": ("create",)}


@dataclass(frozen=True)
class PrinterColumn:
    """A column of the Table format: ``json_path`` as in a CRD's additionalPrinterColumns."""

    name: str
    type: str
    json_path: str
    priority: int = 0
    description: str = ""
    format: str = ""


@dataclass(frozen=True)
class ApiResource:
    resource: Resource
    singular: str = ""
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    subresources: tuple[str, ...] = ()
    #: kubernetes.client model class holding the kind's fields ("" when unknown).
    model: str = ""
    #: A custom resource's openAPIV3Schema (None: built-in, or a CRD without one).
    schema: Mapping[str, Any] | None = None
    columns: tuple[PrinterColumn, ...] = ()
    #: The name of the CRD that serves this resource ("" for built-ins).
    crd: str = ""
    #: Strategic merge patch is defined for built-in kinds only (as on a real server).
    strategic: bool = True
    extra: Mapping[str, Any] = field(default_factory=dict)

    @property
    def key(self) -> tuple[str, str, str]:
        r = self.resource
        return (r.group, r.version, r.plural)

    @property
    def list_kind(self) -> str:
        return f"{self.resource.kind}List"


def plain(resource: Resource) -> ApiResource:
    """Discovery facts for a resource registered without any (tests, ``--objects`` with an
    unknown kind): singular from the kind, status if the resource has it."""
    return ApiResource(
        resource,
        singular=resource.kind.lower(),
        subresources=("status",) if resource.status_subresource else (),
        strategic=resource.group in BUILTIN_GROUPS,
    )


def _builtin(
    group: str,
    plural: str,
    kind: str,
    namespaced: bool,
    subresources: tuple[str, ...] = ("status",),
    short: tuple[str, ...] = (),
    categories: tuple[str, ...] = (),
    model: str = "",
) -> ApiResource:
    resource = Resource(group, "v1", plural, kind, namespaced, "status" in subresources)
    return ApiResource(
        resource,
        singular=kind.lower(),
        short_names=short,
        categories=categories,
        subresources=subresources,
        model=model or f"V1{kind}",
    )


ALL = ("all",)
BUILTINS: tuple[ApiResource, ...] = (
    _builtin("", "nodes", "Node", False, short=("no",)),
    _builtin("", "pods", "Pod", True, ("status", "eviction"), ("po",), ALL),
    _builtin("", "namespaces", "Namespace", False, short=("ns",)),
    _builtin("", "events", "Event", True, (), ("ev",), model="CoreV1Event"),
    _builtin("", "configmaps", "ConfigMap", True, (), ("cm",)),
    _builtin("", "persistentvolumes", "PersistentVolume", False, short=("pv",)),
    _builtin("", "persistentvolumeclaims", "PersistentVolumeClaim", True, short=("pvc",)),
    _builtin("apps", "deployments", "Deployment", True, short=("deploy",), categories=ALL),
    _builtin("apps", "replicasets", "ReplicaSet", True, short=("rs",), categories=ALL),
    _builtin("apps", "statefulsets", "StatefulSet", True, short=("sts",), categories=ALL),
    _builtin("apps", "daemonsets", "DaemonSet", True, short=("ds",), categories=ALL),
    _builtin("batch", "jobs", "Job", True, categories=ALL),
    _builtin("policy", "poddisruptionbudgets", "PodDisruptionBudget", True, short=("pdb",)),
    _builtin("scheduling.k8s.io", "priorityclasses", "PriorityClass", False, (), ("pc",)),
    _builtin("coordination.k8s.io", "leases", "Lease", True, ()),
    _builtin("events.k8s.io", "events", "Event", True, (), ("ev",), model="EventsV1Event"),
    _builtin(
        "apiextensions.k8s.io",
        "customresourcedefinitions",
        "CustomResourceDefinition",
        False,
        short=("crd", "crds"),
        categories=("api-extensions",),
    ),
)
BUILTIN_GROUPS = frozenset(b.resource.group for b in BUILTINS)
CRDS = next(b.resource for b in BUILTINS if b.resource.kind == "CustomResourceDefinition")


def builtin(group: str, plural: str) -> ApiResource:
    for entry in BUILTINS:
        if entry.resource.group == group and entry.resource.plural == plural:
            return entry
    raise KeyError(f"{plural}.{group}")
