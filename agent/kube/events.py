"""Kubernetes Events (core/v1), aggregated so that a hot node cannot flood the API.

As client-go's EventCorrelator does, in this order:

1. *similar*: past ``similar_limit`` distinct messages with the same object, type and
   reason inside ``window_seconds``, further ones are folded into one event whose
   message starts with "(combined from similar events): ";
2. *dedup*: a repeat of the same (object, type, reason, message) inside the window
   patches the existing Event's ``count`` and ``lastTimestamp`` instead of creating one;
3. *spam filter*: per object a token bucket (``burst`` events, one more every
   ``refill_seconds``); without a token the event is dropped, and counted.

Event writes are best effort: a failure is logged once per outage and never raised.
Events on cluster-scoped objects (nodes, policies, actions) go to namespace "default".

What the three steps remember is keyed by object (a pod's uid is in its key), so it is let
go as soon as it can no longer change an answer (issue 32: pods come and go for months):
a *similar* or *dedup* entry once its window is over, a bucket once it has refilled to
``burst`` (a fresh bucket's). ``MAX_KEYS`` stays the bound for a burst of objects within
one window.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import structlog

from agent.errors import InvalidObject
from agent.kube.client import KubeApi
from agent.kube.creating import create
from agent.kube.errors import KubeError, KubeNotFound
from agent.kube.patching import merge_patch
from agent.kube.resources import EVENTS, QOS_GROUP, QOS_VERSION
from agent.model.objects import Pod
from agent.model.timeutil import format_time

NORMAL = "Normal"
WARNING = "Warning"

THROTTLED = "Throttled"
RESTORED = "Restored"
EVICTED = "Evicted"
EVICTION_BLOCKED = "EvictionBlocked"
INVALID_POLICY = "InvalidPolicy"
INVALID_ACTION = "InvalidAction"
RULE_TRIGGERED = "RuleTriggered"
RULE_RESTORED = "RuleRestored"

COMBINED = "(combined from similar events): "
MAX_KEYS = 4096


@dataclass(frozen=True, slots=True)
class ObjectRef:
    kind: str
    name: str
    namespace: str = ""
    uid: str = ""
    api_version: str = "v1"

    def body(self) -> dict[str, str]:
        out = {"kind": self.kind, "name": self.name, "apiVersion": self.api_version}
        if self.namespace:
            out["namespace"] = self.namespace
        if self.uid:
            out["uid"] = self.uid
        return out


def pod_ref(pod: Pod) -> ObjectRef:
    return ObjectRef("Pod", pod.name, pod.namespace, pod.uid if pod.uid != pod.key else "")


def node_ref(name: str) -> ObjectRef:
    return ObjectRef("Node", name, uid=name)  # the kubelet uses the node name as the uid


def policy_ref(name: str, uid: str = "") -> ObjectRef:
    return ObjectRef(
        "NodeQOSEnsurancePolicy", name, uid=uid, api_version=f"{QOS_GROUP}/{QOS_VERSION}"
    )


def action_ref(name: str, uid: str = "") -> ObjectRef:
    return ObjectRef("AvoidanceAction", name, uid=uid, api_version=f"{QOS_GROUP}/{QOS_VERSION}")


@dataclass(frozen=True, slots=True)
class EventArgs:
    burst: int = 25
    refill_seconds: float = 300.0
    similar_limit: int = 10
    window_seconds: float = 600.0

    def validate(self) -> EventArgs:
        for name in ("burst", "similar_limit"):
            if getattr(self, name) < 1:
                raise InvalidObject(
                    "EventArgs", "", name, f"must be >= 1, got {getattr(self, name)}"
                )
        for name in ("refill_seconds", "window_seconds"):
            if getattr(self, name) <= 0:
                raise InvalidObject(
                    "EventArgs", "", name, f"must be > 0, got {getattr(self, name)}"
                )
        return self


class EventSink(Protocol):
    def create(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]: ...

    def patch(self, namespace: str, name: str, patch: dict[str, Any]) -> dict[str, Any]: ...


class KubeEvents:
    def __init__(self, api: KubeApi) -> None:
        self.api = api

    def create(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        return create(self.api, EVENTS, body, namespace)

    def patch(self, namespace: str, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        return merge_patch(self.api, EVENTS, name, patch, namespace=namespace)


@dataclass
class _Seen:
    name: str
    namespace: str
    count: int
    first: float


@dataclass
class _Bucket:
    tokens: float
    at: float


class EventRecorder:
    CREATED, UPDATED, DROPPED, FAILED = "created", "updated", "dropped", "failed"

    def __init__(
        self,
        sink: EventSink,
        component: str,
        host: str = "",
        args: EventArgs | None = None,
        clock: Callable[[], float] = time.time,
        logger: Any = None,
    ) -> None:
        self.sink = sink
        self.component, self.host = component, host
        self.args = (args or EventArgs()).validate()
        self.clock = clock
        self.log = logger or structlog.get_logger("waterline.kube.events")
        self._similar: OrderedDict[tuple[ObjectRef, str, str], tuple[float, set[str]]] = (
            OrderedDict()
        )
        self._seen: OrderedDict[tuple[ObjectRef, str, str, str], _Seen] = OrderedDict()
        self._buckets: OrderedDict[ObjectRef, _Bucket] = OrderedDict()
        self._ids = itertools.count()
        self._failing = False
        self.dropped = 0
        self._lock = threading.Lock()

    def record(self, ref: ObjectRef, type_: str, reason: str, message: str) -> str:
        """Record one event; returns created / updated / dropped / failed. Thread-safe."""
        with self._lock:
            return self._record(ref, type_, reason, message)

    @property
    def remembered(self) -> int:
        """Entries held for aggregation (similar, dedup and bucket, all objects)."""
        with self._lock:
            return len(self._similar) + len(self._seen) + len(self._buckets)

    def _record(self, ref: ObjectRef, type_: str, reason: str, message: str) -> str:
        now = self.clock()
        self._expire(now)
        message, dedup = self._aggregate(ref, type_, reason, message, now)
        if not self._take_token(ref, now):
            self.dropped += 1
            return self.DROPPED
        key = (ref, type_, reason, dedup)
        seen = self._seen.get(key)
        if seen is not None and now - seen.first > self.args.window_seconds:
            seen = None
        try:
            if seen is not None:
                seen.count += 1
                try:
                    self.sink.patch(
                        seen.namespace,
                        seen.name,
                        {"count": seen.count, "lastTimestamp": format_time(now), "message": message},
                    )
                    self._seen.move_to_end(key)
                    return self._ok(self.UPDATED)
                except KubeNotFound:
                    pass  # the Event expired (TTL): create a fresh one
            namespace = ref.namespace or "default"
            name = f"{ref.name}.{int(now * 1e9) + next(self._ids):x}"
            stamp = format_time(now)
            self.sink.create(
                namespace, self._body(ref, type_, reason, message, name, namespace, stamp)
            )
            self._remember(self._seen, key, _Seen(name, namespace, 1, now))
            return self._ok(self.CREATED)
        except KubeError as err:
            if not self._failing:
                self.log.warning(
                    "could not write an event; dropping events until it works",
                    error=str(err),
                    reason=reason,
                )
            self._failing = True
            return self.FAILED

    # -- internals ----------------------------------------------------------------------
    def _aggregate(
        self, ref: ObjectRef, type_: str, reason: str, message: str, now: float
    ) -> tuple[str, str]:
        """(message to write, dedup key): past the limit every new message goes to one
        combined Event (keyed without its message) that shows the latest."""
        key = (ref, type_, reason)
        entry = self._similar.get(key)
        if entry is None or now - entry[0] > self.args.window_seconds:
            entry = (now, set())
        if len(entry[1]) <= self.args.similar_limit:  # past it every message is combined
            entry[1].add(message)
        self._remember(self._similar, key, entry)
        if len(entry[1]) > self.args.similar_limit:
            return COMBINED + message, COMBINED
        return message, message

    def _take_token(self, ref: ObjectRef, now: float) -> bool:
        a = self.args
        bucket = self._buckets.get(ref) or _Bucket(float(a.burst), now)
        bucket.tokens = min(float(a.burst), bucket.tokens + (now - bucket.at) / a.refill_seconds)
        bucket.at = now
        self._remember(self._buckets, ref, bucket)
        if bucket.tokens < 1:
            return False
        bucket.tokens -= 1
        return True

    def _expire(self, now: float) -> None:
        """Forget what can no longer change an answer, oldest touched first (each cache is
        in the order its entries were last touched, so the sweep stops at the first one
        still in use; one behind it goes when that one does, within a window)."""
        a = self.args
        similar, seen, buckets = self._similar, self._seen, self._buckets
        while similar and now - next(iter(similar.values()))[0] > a.window_seconds:
            similar.popitem(last=False)
        while seen and now - next(iter(seen.values())).first > a.window_seconds:
            seen.popitem(last=False)
        while buckets:
            bucket = next(iter(buckets.values()))
            if bucket.tokens + (now - bucket.at) / a.refill_seconds < a.burst:
                break
            buckets.popitem(last=False)

    def _remember(self, cache: OrderedDict[Any, Any], key: Any, value: Any) -> None:
        cache[key] = value
        cache.move_to_end(key)
        while len(cache) > MAX_KEYS:
            cache.popitem(last=False)

    def _ok(self, result: str) -> str:
        if self._failing:
            self.log.info("events are written again")
            self._failing = False
        return result

    def _body(
        self,
        ref: ObjectRef,
        type_: str,
        reason: str,
        message: str,
        name: str,
        namespace: str,
        stamp: str,
    ) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": name, "namespace": namespace},
            "involvedObject": ref.body(),
            "type": type_,
            "reason": reason,
            "message": message[:1024],
            "count": 1,
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "source": {"component": self.component, **({"host": self.host} if self.host else {})},
            "reportingComponent": self.component,
            "reportingInstance": self.host or self.component,
        }
