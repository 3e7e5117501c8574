"""Which pods may be migrated at all, and if not, why (the descheduler calls these its
"evictor" filters; this module evicts nothing).

As the descheduler's DefaultEvictor does by default, a pod is not moved when it has no
controller to recreate it, belongs to a DaemonSet, is a mirror (static) pod, is annotated
protected, or lives in a namespace ``evictableNamespaces`` leaves out; nor when it keeps
data on its node: a ``hostPath`` volume, an ``emptyDir`` not in memory, or a claim bound to
a PersistentVolume tied to that node (``local``, ``hostPath``, or a node affinity that
admits one node). The storage filters yield to the pod annotation
``qos.waterline.io/evictable: "true"`` (its owner accepts losing that data); the others
never do. A placeholder pod of a reservation is never moved (it holds room for another
pod).

What the controller can see: claims and volumes come from its PersistentVolume and
PersistentVolumeClaim caches. A claim it cannot resolve (no such claim, not bound, or its
volume unknown) counts as tied to the node: moving a pod whose storage we cannot place is
the mistake that cannot be undone.

Every refusal is one short reason: a code and the object it is about
(``LocalStorage emptyDir "cache"``, ``LocalPersistentVolume claim "data": local volume on
n3``), reported by defrag (``skipped``, ``notMigratable``) and in a job's status.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from agent.cluster.defrag.args import DefragArgs
from agent.model.objects import PersistentVolume, PersistentVolumeClaim, Pod

#: The label every reservation placeholder pod carries (its value: the reservation).
PLACEHOLDER_LABEL = "qos.waterline.io/reservation"

NO_CONTROLLER = "NoController"
DAEMONSET = "DaemonSet"
MIRROR = "MirrorPod"
PROTECTED = "Protected"
NAMESPACE_EXCLUDED = "NamespaceExcluded"
PLACEHOLDER = "ReservationPlaceholder"
LOCAL_STORAGE = "LocalStorage"
LOCAL_VOLUME = "LocalPersistentVolume"


@dataclass(frozen=True, slots=True)
class Storage:
    """The claims and volumes of one snapshot, as the storage filter reads them."""

    claims: Mapping[str, PersistentVolumeClaim] = field(default_factory=dict)
    volumes: Mapping[str, PersistentVolume] = field(default_factory=dict)

    def claim_reason(self, namespace: str, claim: str) -> str | None:
        """Why the claim ties its pod to the node, or None when it does not."""
        found = self.claims.get(f"{namespace}/{claim}")
        if found is None:
            return f'{LOCAL_VOLUME} claim "{claim}": PersistentVolumeClaim not found'
        if not found.volume_name:
            return f'{LOCAL_VOLUME} claim "{claim}": not bound'
        volume = self.volumes.get(found.volume_name)
        if volume is None:
            return (
                f'{LOCAL_VOLUME} claim "{claim}": PersistentVolume "{found.volume_name}" not found'
            )
        if volume.pinned:
            return f'{LOCAL_VOLUME} claim "{claim}": {volume.pinned}'
        return None


def is_placeholder(pod: Pod) -> bool:
    return PLACEHOLDER_LABEL in pod.labels


def storage_reason(pod: Pod, storage: Storage) -> str | None:
    """Why the pod's storage keeps it on its node (None: it does not, or the pod is
    annotated evictable)."""
    if pod.marked_evictable:
        return None
    if pod.local_volumes:
        return f"{LOCAL_STORAGE} {pod.local_volumes[0]}"
    for claim in pod.claims:
        reason = storage.claim_reason(pod.namespace, claim)
        if reason is not None:
            return reason
    return None


def why_not_migratable(pod: Pod, args: DefragArgs, storage: Storage) -> str | None:
    """None when defrag may move the pod, else the first filter's reason."""
    ctl = pod.controller
    if is_placeholder(pod):
        return PLACEHOLDER
    if ctl is None:
        return NO_CONTROLLER
    if ctl.kind == "DaemonSet":
        return DAEMONSET
    if pod.is_mirror:
        return MIRROR
    if pod.is_protected:
        return PROTECTED
    if not args.namespace_allowed(pod.namespace):
        return f"{NAMESPACE_EXCLUDED} {pod.namespace}"
    return storage_reason(pod, storage)
