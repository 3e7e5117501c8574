"""The dev server's memory: objects by resource, one global resourceVersion counter, and
a bounded history of changes that watches read from.

A watch from a version older than the history window gets 410 Gone, as from a compacted
etcd; ``compact()`` empties the window on purpose (tests). Every change keeps the old
object too, so a watch with a selector sees ADDED when an object starts matching and
DELETED when it stops, as the real watch cache does.
"""

from __future__ import annotations

import builtins
import contextlib
import copy
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from agent.kube.resources import KNOWN, Resource

#: Built-in kinds that are namespaced even when a manifest leaves the namespace out.
NAMESPACED_KINDS = frozenset(
    {
        "Deployment",
        "ReplicaSet",
        "StatefulSet",
        "DaemonSet",
        "Job",
        "CronJob",
        "ReplicationController",
        "ConfigMap",
        "Secret",
        "Service",
        "ServiceAccount",
    }
)


class ApiStatus(Exception):
    """An error answer, rendered as a metav1.Status."""

    def __init__(
        self, code: int, reason: str, message: str, causes: list[dict[str, str]] | None = None
    ) -> None:
        super().__init__(message)
        self.code, self.reason, self.message, self.causes = code, reason, message, causes or []

    def body(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if self.causes:
            out["details"] = {"causes": self.causes}
        return out


@dataclass(frozen=True, slots=True)
class Change:
    version: int
    type: str  # ADDED | MODIFIED | DELETED
    resource: Resource
    old: Mapping[str, Any] | None
    new: Mapping[str, Any]


def now_rfc3339(clock: Callable[[], float]) -> str:
    return datetime.fromtimestamp(clock(), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _meta(obj: Mapping[str, Any]) -> dict[str, Any]:
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        raise ApiStatus(400, "BadRequest", "metadata: expected an object")
    return meta


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


class Store:
    def __init__(
        self,
        resources: Iterable[Resource] = KNOWN,
        history: int = 10_000,
        clock: Callable[[], float] = time.time,
        grace_cap: float = 0.0,
    ) -> None:
        self.clock = clock
        #: There is no kubelet: a pod deleted with a grace period stays terminating (with a
        #: deletionTimestamp) for min(grace, grace_cap) seconds, then ``reap`` removes it.
        self.grace_cap = grace_cap
        self.terminating: dict[tuple[str, str], float] = {}
        self.cond = threading.Condition()
        self.version = 0
        self.resources: dict[tuple[str, str, str], Resource] = {}
        self.objects: dict[Resource, dict[tuple[str, str], dict[str, Any]]] = {}
        self.history: deque[Change] = deque(maxlen=history)
        #: Watches must start after this version (older ones are compacted away).
        self.compacted = 0
        for resource in resources:
            self.register(resource)

    # -- resources ----------------------------------------------------------------------
    def register(self, resource: Resource) -> None:
        with self.cond:
            self.resources[(resource.group, resource.version, resource.plural)] = resource
            self.objects.setdefault(resource, {})

    def resource(self, group: str, version: str, plural: str) -> Resource:
        found = self.resources.get((group, version, plural))
        if found is None:
            raise ApiStatus(404, "NotFound", "the server could not find the requested resource")
        return found

    def resource_for(self, obj: Mapping[str, Any]) -> Resource:
        """The resource of a manifest by apiVersion and kind; unknown kinds are registered
        on the fly (plural = lower-case kind + "s"; namespaced when the object has a
        namespace)."""
        api_version, kind = str(obj.get("apiVersion") or "v1"), str(obj.get("kind") or "")
        group, _, version = api_version.rpartition("/")
        for res in self.resources.values():
            if res.group == group and res.version == version and res.kind == kind:
                return res
        namespaced = kind in NAMESPACED_KINDS or bool((obj.get("metadata") or {}).get("namespace"))
        resource = Resource(group, version, kind.lower() + "s", kind, namespaced, True)
        self.register(resource)
        return resource

    def register_crd(self, crd: Mapping[str, Any]) -> None:
        spec = crd.get("spec") or {}
        names = spec.get("names") or {}
        for version in spec.get("versions") or []:
            self.register(
                Resource(
                    str(spec.get("group")),
                    str(version.get("name")),
                    str(names.get("plural")),
                    str(names.get("kind")),
                    spec.get("scope") == "Namespaced",
                    "status" in (version.get("subresources") or {}),
                )
            )

    # -- reads --------------------------------------------------------------------------
    def get(self, resource: Resource, namespace: str, name: str) -> dict[str, Any]:
        with self.cond:
            obj = self.objects[resource].get((namespace if resource.namespaced else "", name))
            if obj is None:
                raise ApiStatus(404, "NotFound", f'{resource.plural} "{name}" not found')
            return copy.deepcopy(obj)

    def list(
        self,
        resource: Resource,
        namespace: str | None,
        match: Callable[[Mapping[str, Any]], bool],
        offset: int = 0,
        limit: int = 0,
    ) -> tuple[builtins.list[dict[str, Any]], int, bool]:
        """(copies of the matching objects from ``offset``, at most ``limit`` of them when
        set; the current version; whether more follow)."""
        with self.cond:
            found = [
                obj
                for (ns, _), obj in sorted(self.objects[resource].items())
                if (not namespace or ns == namespace) and match(obj)
            ]
            end = offset + limit if limit else len(found)
            return [copy.deepcopy(o) for o in found[offset:end]], self.version, end < len(found)

    def changes_after(self, version: int) -> builtins.list[Change]:
        """Changes with a version above ``version``; 410 if some were compacted away."""
        with self.cond:
            if version < self.compacted:
                raise ApiStatus(
                    410, "Expired", f"too old resource version: {version} ({self.compacted})"
                )
            return [c for c in self.history if c.version > version]

    # -- writes -------------------------------------------------------------------------
    def create(self, resource: Resource, namespace: str, obj: Mapping[str, Any]) -> dict[str, Any]:
        obj = copy.deepcopy(dict(obj))
        meta = _meta(obj)
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = f"{meta['generateName']}{uuid.uuid4().hex[:5]}"
        name = meta.get("name")
        if not name:
            raise ApiStatus(422, "Invalid", f"{resource.kind}: metadata.name: Required value")
        ns = (namespace or meta.get("namespace") or "default") if resource.namespaced else ""
        with self.cond:
            if (ns, name) in self.objects[resource]:
                raise ApiStatus(409, "AlreadyExists", f'{resource.plural} "{name}" already exists')
            if ns:
                meta["namespace"] = ns
            else:
                meta.pop("namespace", None)
            meta.setdefault("uid", str(uuid.uuid4()))
            meta.setdefault("creationTimestamp", now_rfc3339(self.clock))
            meta["generation"] = 1
            created: dict[str, Any] = {
                **obj,
                "apiVersion": resource.api_version,
                "kind": resource.kind,
            }
            return self._commit(resource, "ADDED", None, created)

    def replace(
        self,
        resource: Resource,
        namespace: str,
        name: str,
        obj: Mapping[str, Any],
        subresource: str = "",
    ) -> dict[str, Any]:
        """PUT: 409 when the body's resourceVersion is set and stale; unconditional when unset."""
        body = copy.deepcopy(dict(obj))
        meta = _meta(body)
        if meta.get("name") not in (None, name):
            raise ApiStatus(
                400, "BadRequest", "the name of the object does not match the name on the URL"
            )
        with self.cond:
            old = self._current(resource, namespace, name)
            wanted = meta.get("resourceVersion")
            if wanted and str(wanted) != old["metadata"]["resourceVersion"]:
                raise ApiStatus(
                    409,
                    "Conflict",
                    f'Operation cannot be fulfilled on {resource.plural} "{name}": the object has been modified; please apply your changes to the latest version and try again',
                )
            return self._update(resource, old, body, subresource)

    def patch(
        self,
        resource: Resource,
        namespace: str,
        name: str,
        patch: Mapping[str, Any],
        subresource: str = "",
    ) -> dict[str, Any]:
        with self.cond:
            old = self._current(resource, namespace, name)
            wanted = (
                (patch.get("metadata") or {}).get("resourceVersion")
                if isinstance(patch.get("metadata"), dict)
                else None
            )
            if wanted and str(wanted) != old["metadata"]["resourceVersion"]:
                raise ApiStatus(
                    409,
                    "Conflict",
                    f'Operation cannot be fulfilled on {resource.plural} "{name}": the object has been modified',
                )
            return self._update(resource, old, merge_patch(old, patch), subresource)

    def delete(
        self, resource: Resource, namespace: str, name: str, uid: str = ""
    ) -> dict[str, Any]:
        with self.cond:
            old = self._current(resource, namespace, name)
            if uid and uid != old["metadata"].get("uid"):
                raise ApiStatus(
                    409,
                    "Conflict",
                    f"Precondition failed: UID in precondition: {uid}, UID in object meta: {old['metadata'].get('uid')}",
                )
            del self.objects[resource][self._key(resource, namespace, name)]
            gone = copy.deepcopy(old)
            return self._commit(resource, "DELETED", old, gone, stored=False)

    def delete_pod(
        self, namespace: str, name: str, grace: int | None, uid: str = ""
    ) -> dict[str, Any]:
        """Graceful pod deletion: mark terminating, or remove at once when the grace
        period (or the cap) is zero."""
        pods = self.resource("", "v1", "pods")
        with self.cond:
            old = self._current(pods, namespace, name)
            if uid and uid != old["metadata"].get("uid"):
                return self.delete(pods, namespace, name, uid)  # raises the 409
            if grace is None:
                grace = int((old.get("spec") or {}).get("terminationGracePeriodSeconds", 30))
            wait = min(float(grace), self.grace_cap)
            if wait <= 0:
                return self.delete(pods, namespace, name)
            if old["metadata"].get("deletionTimestamp"):
                return copy.deepcopy(old)
            new = copy.deepcopy(old)
            new["metadata"]["deletionTimestamp"] = now_rfc3339(self.clock)
            new["metadata"]["deletionGracePeriodSeconds"] = grace
            self.terminating[(namespace, name)] = self.clock() + wait
            return self._commit(pods, "MODIFIED", old, new)

    def reap(self) -> None:
        """Remove terminating pods whose (capped) grace period is over."""
        with self.cond:
            now = self.clock()
            for (namespace, name), due in list(self.terminating.items()):
                if due <= now:
                    del self.terminating[(namespace, name)]
                    with contextlib.suppress(ApiStatus):
                        self.delete(self.resource("", "v1", "pods"), namespace, name)

    def compact(self) -> None:
        """Forget the history: every watch from an older version gets 410."""
        with self.cond:
            self.history.clear()
            self.compacted = self.version

    # -- internals ----------------------------------------------------------------------
    def _key(self, resource: Resource, namespace: str, name: str) -> tuple[str, str]:
        return (namespace if resource.namespaced else "", name)

    def _current(self, resource: Resource, namespace: str, name: str) -> dict[str, Any]:
        old = self.objects[resource].get(self._key(resource, namespace, name))
        if old is None:
            raise ApiStatus(404, "NotFound", f'{resource.plural} "{name}" not found')
        return old

    def _update(
        self, resource: Resource, old: dict[str, Any], new: dict[str, Any], subresource: str
    ) -> dict[str, Any]:
        """Identity and system fields stay; the status subresource writes only status and
        the main resource never writes status (when the resource has the subresource)."""
        new = copy.deepcopy(new)
        if resource.status_subresource:
            if subresource == "status":
                new = {**copy.deepcopy(old), "status": new.get("status")}
                if new["status"] is None:
                    new.pop("status")
            elif "status" in old:
                new["status"] = copy.deepcopy(old["status"])
            else:
                new.pop("status", None)
        meta = new.setdefault("metadata", {})
        for key in (
            "name",
            "namespace",
            "uid",
            "creationTimestamp",
            "generation",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
        ):
            if key in old["metadata"]:
                meta[key] = old["metadata"][key]
        new["apiVersion"], new["kind"] = resource.api_version, resource.kind
        if {k: v for k, v in new.items() if k not in ("metadata", "status")} != {
            k: v for k, v in old.items() if k not in ("metadata", "status")
        }:
            meta["generation"] = int(old["metadata"].get("generation") or 1) + 1
        return self._commit(resource, "MODIFIED", old, new)

    def _commit(
        self,
        resource: Resource,
        kind: str,
        old: Mapping[str, Any] | None,
        new: dict[str, Any],
        stored: bool = True,
    ) -> dict[str, Any]:
        self.version += 1
        new["metadata"]["resourceVersion"] = str(self.version)
        meta = new["metadata"]
        if stored:
            self.objects[resource][self._key(resource, meta.get("namespace", ""), meta["name"])] = (
                new
            )
        if self.history.maxlen and len(self.history) == self.history.maxlen:
            self.compacted = self.history[0].version
        self.history.append(
            Change(
                self.version,
                kind,
                resource,
                copy.deepcopy(old) if old else None,
                copy.deepcopy(new),
            )
        )
        self.cond.notify_all()
        return copy.deepcopy(new)
