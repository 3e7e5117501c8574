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
from typing import Any

from agent.kube.resources import KNOWN, Resource
from agent.model.timeutil import format_time
from devtools.apiserver.catalog import BUILTINS, ApiResource, plain
from devtools.apiserver.errors import ApiStatus
from devtools.apiserver.patches import merge_patch

#: Called with (resource, new object, old object or None) before a write is committed,
#: inside the store's lock: returns the object to store or raises ApiStatus (admission).
Admit = Callable[[ApiResource, dict[str, Any], Mapping[str, Any] | None], dict[str, Any]]
#: Computes the patched object from the current one (a copy it may change).
Patcher = Callable[[dict[str, Any]], dict[str, Any]]


def _admit_all(
    _res: ApiResource, new: dict[str, Any], _old: Mapping[str, Any] | None
) -> dict[str, Any]:
    return new


@dataclass(frozen=True, slots=True)
class Change:
    version: int
    type: str  # ADDED | MODIFIED | DELETED
    resource: Resource
    old: Mapping[str, Any] | None
    new: Mapping[str, Any]


def _meta(obj: Mapping[str, Any]) -> dict[str, Any]:
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        raise ApiStatus(400, "BadRequest", "metadata: expected an object")
    return meta


class Store:
    def __init__(
        self,
        resources: Iterable[Resource | ApiResource] = (*BUILTINS, *KNOWN),
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
        self.catalog: dict[tuple[str, str, str], ApiResource] = {}
        #: Bumped whenever the served resources change (discovery and OpenAPI caches).
        self.catalog_generation = 0
        self.objects: dict[Resource, dict[tuple[str, str], dict[str, Any]]] = {}
        self.history: deque[Change] = deque(maxlen=history)
        #: Watches must start after this version (older ones are compacted away).
        self.compacted = 0
        #: Called with every committed change, inside the lock (CRDs serve their kinds).
        self.listeners: list[Callable[[Change], None]] = []
        for resource in resources:
            self.register(resource)

    # -- resources ----------------------------------------------------------------------
    def register(self, resource: Resource | ApiResource) -> None:
        """Serve a resource (again: a new description replaces the old, the objects stay
        when the Resource is the same)."""
        info = resource if isinstance(resource, ApiResource) else None
        res = info.resource if info else resource
        assert isinstance(res, Resource)
        with self.cond:
            key = (res.group, res.version, res.plural)
            known = self.catalog.get(key)
            if info is None:  # a bare Resource keeps the richer description it already has
                info = known if known is not None and known.resource == res else plain(res)
            previous = self.resources.get(key)
            if previous is not None and previous != res:
                self.objects.pop(previous, None)
            self.resources[key] = res
            self.catalog[key] = info
            self.catalog_generation += 1
            self.objects.setdefault(res, {})

    def unregister(self, key: tuple[str, str, str]) -> None:
        """Stop serving a resource and forget its objects (a deleted CRD)."""
        with self.cond:
            res = self.resources.pop(key, None)
            self.catalog.pop(key, None)
            self.catalog_generation += 1
            if res is not None:
                self.objects.pop(res, None)

    def resource(self, group: str, version: str, plural: str) -> Resource:
        found = self.resources.get((group, version, plural))
        if found is None:
            raise ApiStatus(404, "NotFound", "the server could not find the requested resource")
        return found

    def info(self, resource: Resource) -> ApiResource:
        return self.catalog.get((resource.group, resource.version, resource.plural)) or plain(
            resource
        )

    def resource_for(self, obj: Mapping[str, Any]) -> Resource:
        """The resource of a manifest by apiVersion and kind; ApiStatus 404 when none is
        served (a custom resource whose CRD is not loaded yet)."""
        api_version, kind = str(obj.get("apiVersion") or "v1"), str(obj.get("kind") or "")
        group, _, version = api_version.rpartition("/")
        with self.cond:
            for res in self.resources.values():
                if res.group == group and res.version == version and res.kind == kind:
                    return res
        raise ApiStatus(
            404,
            "NotFound",
            f'no resource serves kind "{kind}" in version "{api_version}" (load its CustomResourceDefinition first)',
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
    def create(
        self,
        resource: Resource,
        namespace: str,
        obj: Mapping[str, Any],
        admit: Admit = _admit_all,
    ) -> dict[str, Any]:
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
            meta.setdefault("creationTimestamp", format_time(self.clock()))
            meta["generation"] = 1
            created: dict[str, Any] = {
                **obj,
                "apiVersion": resource.api_version,
                "kind": resource.kind,
            }
            created = admit(self.info(resource), created, None)
            return self._commit(resource, "ADDED", None, created)

    def replace(
        self,
        resource: Resource,
        namespace: str,
        name: str,
        obj: Mapping[str, Any],
        subresource: str = "",
        admit: Admit = _admit_all,
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
            return self._update(resource, old, body, subresource, admit)

    def patch(
        self,
        resource: Resource,
        namespace: str,
        name: str,
        patcher: Patcher | Mapping[str, Any],
        subresource: str = "",
        admit: Admit = _admit_all,
    ) -> dict[str, Any]:
        """Apply ``patcher`` (a function of the current object, or a JSON merge patch) to
        the current object; 409 when the patch set a metadata.resourceVersion other than
        the current one (a precondition)."""
        if not callable(patcher):
            body = patcher
            patcher = lambda old: merge_patch(old, body)  # noqa: E731
        with self.cond:
            old = self._current(resource, namespace, name)
            new = patcher(copy.deepcopy(old))
            if not isinstance(new, dict) or not isinstance(new.get("metadata"), dict):
                raise ApiStatus(
                    422,
                    "Invalid",
                    f'{resource.kind} "{name}": the patch left no object with metadata',
                )
            wanted = new["metadata"].get("resourceVersion")
            if wanted and str(wanted) != old["metadata"]["resourceVersion"]:
                raise ApiStatus(
                    409,
                    "Conflict",
                    f'Operation cannot be fulfilled on {resource.plural} "{name}": the object has been modified',
                )
            return self._update(resource, old, new, subresource, admit)

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

    def delete_namespaced(self, namespace: str) -> None:
        """Delete every object in a namespace at once (what the namespace controller does
        when a namespace is deleted, without the Terminating phase)."""
        with self.cond:
            for resource, objects in list(self.objects.items()):
                for ns, name in [k for k in objects if resource.namespaced and k[0] == namespace]:
                    self.terminating.pop((ns, name), None)
                    with contextlib.suppress(ApiStatus):
                        self.delete(resource, ns, name)

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
            new["metadata"]["deletionTimestamp"] = format_time(self.clock())
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
        self,
        resource: Resource,
        old: dict[str, Any],
        new: dict[str, Any],
        subresource: str,
        admit: Admit = _admit_all,
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
        new = admit(self.info(resource), new, old)
        meta = new["metadata"]  # admission may have copied it
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
        change = Change(
            self.version, kind, resource, copy.deepcopy(old) if old else None, copy.deepcopy(new)
        )
        self.history.append(change)
        for listener in self.listeners:
            listener(change)
        self.cond.notify_all()
        return copy.deepcopy(new)
