"""Core Kubernetes objects as slim, frozen records, parsed once from API-shaped dicts.

Only what Waterline decides on is kept: at 150,000 pods the typed models of the official
client cost gigabytes, these cost a small fraction. Every ``parse_*`` raises
``InvalidObject`` naming the object and the field.

One module per concern (``pods``, ``nodes``, ``owners``, ``budgets``, ``volumes``; ``common`` holds what
their parsers share); import the names from here.
"""

from agent.model.objects.budgets import (
    BudgetStatus,
    PodDisruptionBudget,
    budget_status,
    disruptions_allowed,
    parse_pdb,
)
from agent.model.objects.common import EMPTY, Resources, guarded, resource_list
from agent.model.objects.nodes import (
    HOSTNAME_LABEL,
    NAMESPACE_NAME_LABEL,
    Namespace,
    Node,
    Taint,
    namespace_labels,
    parse_namespace,
    parse_node,
)
from agent.model.objects.owners import WORKLOAD_KINDS, OwnerRef, Workload, parse_workload
from agent.model.objects.pods import (
    BEST_EFFORT,
    BURSTABLE,
    CONFIG_SOURCE_ANNOTATION,
    EVICTABLE_ANNOTATION,
    GUARANTEED,
    MIRROR_ANNOTATION,
    PREEMPT_NEVER,
    PROTECTED_ANNOTATION,
    QOS_CLASSES,
    QOS_RANK,
    SYSTEM_CRITICAL_PRIORITY,
    Container,
    Pod,
    PodAffinityTerm,
    Toleration,
    parse_pod,
)
from agent.model.objects.volumes import (
    PV_KIND,
    PVC_KIND,
    PersistentVolume,
    PersistentVolumeClaim,
    parse_persistent_volume,
    parse_persistent_volume_claim,
)

__all__ = [
    "BEST_EFFORT",
    "BURSTABLE",
    "CONFIG_SOURCE_ANNOTATION",
    "EMPTY",
    "EVICTABLE_ANNOTATION",
    "GUARANTEED",
    "HOSTNAME_LABEL",
    "MIRROR_ANNOTATION",
    "PREEMPT_NEVER",
    "PROTECTED_ANNOTATION",
    "PVC_KIND",
    "PV_KIND",
    "QOS_CLASSES",
    "QOS_RANK",
    "SYSTEM_CRITICAL_PRIORITY",
    "WORKLOAD_KINDS",
    "BudgetStatus",
    "Container",
    "NAMESPACE_NAME_LABEL",
    "Namespace",
    "Node",
    "OwnerRef",
    "PersistentVolume",
    "PersistentVolumeClaim",
    "Pod",
    "PodAffinityTerm",
    "PodDisruptionBudget",
    "Resources",
    "Taint",
    "Toleration",
    "Workload",
    "budget_status",
    "disruptions_allowed",
    "guarded",
    "namespace_labels",
    "parse_namespace",
    "parse_node",
    "parse_pdb",
    "parse_persistent_volume",
    "parse_persistent_volume_claim",
    "parse_pod",
    "parse_workload",
    "resource_list",
]
