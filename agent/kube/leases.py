"""Leader election on a coordination.k8s.io/v1 Lease, written for our needs.

Why not the client's elector: it calls ``sys.exit`` on bad settings, never releases the
lease on shutdown, and cannot tell the leader's work to stop at the moment renewal fails.

The protocol is client-go's:

* every attempt GETs the lease and writes it back with PUT carrying the read
  ``resourceVersion`` (optimistic concurrency: of two candidates only one PUT wins, the
  other gets 409 and stays a follower);
* a follower takes the lease only when its holder has not renewed it for
  ``leaseDurationSeconds``, measured on the follower's own clock from the moment it saw
  the lease change (so no clock skew between machines matters), or at once when the
  holder released it (empty holder). "The moment it saw" is the clock read *after* the
  GET returned, as client-go does: the answer may describe a renewal made at any time
  during a slow GET, so a clock read before it could expire the lease up to the GET's
  duration early (a 6.9 s GET gave two leaders for 1.5 s);
* ``leaseTransitions`` counts holder changes; ``acquireTime`` is kept while renewing;
* the leader renews every ``retry_period``; if no renewal has succeeded for
  ``renew_deadline`` (shorter than the lease duration) it stops leading, so it stops
  before any follower can consider the lease expired. ``is_leader()`` is exact at every
  instant (it compares the clock with the deadline), and ``run`` has a watchdog that fires
  the stop-leading callback at the deadline even when a request hangs;
* on clean shutdown the leader stops its work, then releases (empty holder, duration 1s),
  so a follower takes over at its next attempt instead of after a lease duration.

Waits are drawn from [retry_period * (1 - jitter), retry_period] so candidates do not
move in step while every bound above still holds: a follower takes over within
``lease_duration + retry_period`` after the leader's last renewal.

``step`` is the whole state machine (one attempt at a given clock reading, returning the
delay to the next); clock, sleep and randomness are injected, so tests drive several
electors on a fake clock over ``MemoryLeases``, and the real ones over HTTP. ``run``
survives every exception (logged, backed off, reported to the ``ThreadBoard`` as
failing), so leadership never ends because of a bug in one attempt.
"""

from __future__ import annotations

import copy
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

import structlog

from agent.errors import InvalidObject
from agent.kube.client import KubeApi
from agent.kube.errors import KubeConflict, KubeError, KubeNotFound, KubeUnreachable
from agent.kube.health import ThreadBoard
from agent.kube.resources import LEASES


@dataclass(frozen=True, slots=True)
class ElectionArgs:
    lease_duration: int = 15
    renew_deadline: float = 10.0
    retry_period: float = 2.0
    jitter: float = 0.2

    def validate(self) -> ElectionArgs:
        if self.lease_duration < 1:
            raise InvalidObject(
                "ElectionArgs", "", "lease_duration", f"must be >= 1, got {self.lease_duration}"
            )
        if not 0 < self.renew_deadline < self.lease_duration:
            raise InvalidObject(
                "ElectionArgs",
                "",
                "renew_deadline",
                f"must be in (0, lease_duration={self.lease_duration}), got {self.renew_deadline}",
            )
        if not 0 < self.retry_period < self.renew_deadline:
            raise InvalidObject(
                "ElectionArgs",
                "",
                "retry_period",
                f"must be in (0, renew_deadline={self.renew_deadline}), got {self.retry_period}",
            )
        if not 0 <= self.jitter < 1:
            raise InvalidObject(
                "ElectionArgs", "", "jitter", f"must be in [0, 1), got {self.jitter}"
            )
        return self


class LeaseBackend(Protocol):
    """One Lease object: get (None when absent), create, replace (409 when stale)."""

    def get(self) -> dict[str, Any] | None: ...

    def create(self, lease: dict[str, Any]) -> dict[str, Any]: ...

    def replace(self, lease: dict[str, Any]) -> dict[str, Any]: ...


class KubeLeases:
    """The Lease through the API; each request times out after ``timeout`` seconds."""

    def __init__(self, api: KubeApi, namespace: str, name: str, timeout: float) -> None:
        self.api, self.namespace, self.name = api, namespace, name
        self.timeout = (timeout, timeout)

    def get(self) -> dict[str, Any] | None:
        try:
            return self.api.request(
                "GET", LEASES.path(self.namespace, self.name), timeout=self.timeout
            )
        except KubeNotFound:
            return None

    def create(self, lease: dict[str, Any]) -> dict[str, Any]:
        return self.api.request(
            "POST", LEASES.path(self.namespace), body=lease, timeout=self.timeout
        )

    def replace(self, lease: dict[str, Any]) -> dict[str, Any]:
        return self.api.request(
            "PUT", LEASES.path(self.namespace, self.name), body=lease, timeout=self.timeout
        )


class MemoryLeases:
    """A Lease in memory with the API's semantics (resourceVersion, 404, 409); each
    candidate gets its own ``view`` whose ``reachable`` flag simulates a partition.
    Used by tests and by local (single-process) runs."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.lease: dict[str, Any] | None = None
        self.version = 0

    def view(self) -> MemoryLeaseView:
        return MemoryLeaseView(self)


class MemoryLeaseView:
    def __init__(self, store: MemoryLeases) -> None:
        self.store = store
        self.reachable = True

    def _check(self) -> None:
        if not self.reachable:
            raise KubeUnreachable("partitioned")

    def get(self) -> dict[str, Any] | None:
        self._check()
        with self.store.lock:
            return copy.deepcopy(self.store.lease)

    def create(self, lease: dict[str, Any]) -> dict[str, Any]:
        self._check()
        with self.store.lock:
            if self.store.lease is not None:
                raise KubeConflict("already exists", reason="AlreadyExists")
            return self._write(lease)

    def replace(self, lease: dict[str, Any]) -> dict[str, Any]:
        self._check()
        with self.store.lock:
            current = self.store.lease
            if current is None:
                raise KubeNotFound("lease not found")
            if lease["metadata"].get("resourceVersion") != current["metadata"]["resourceVersion"]:
                raise KubeConflict("the object has been modified", reason="Conflict")
            return self._write(lease)

    def _write(self, lease: dict[str, Any]) -> dict[str, Any]:
        self.store.version += 1
        stored = copy.deepcopy(lease)
        stored["metadata"]["resourceVersion"] = str(self.store.version)
        self.store.lease = stored
        return copy.deepcopy(stored)


def micro_time(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaderElector:
    def __init__(
        self,
        backend: LeaseBackend,
        identity: str,
        args: ElectionArgs | None = None,
        *,
        namespace: str = "default",
        name: str = "waterline-controller",
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
        rng: random.Random | None = None,
        on_started_leading: Callable[[], None] | None = None,
        on_stopped_leading: Callable[[], None] | None = None,
        logger: Any = None,
        board: ThreadBoard | None = None,
    ) -> None:
        if not identity:
            raise InvalidObject("LeaderElector", name, "identity", "must be non-empty")
        self.backend = backend
        self.identity = identity
        self.args = (args or ElectionArgs()).validate()
        self.namespace, self.name = namespace, name
        self.clock, self.wall = clock, wall
        self.rng = rng or random.Random()
        self.on_started = on_started_leading
        self.on_stopped = on_stopped_leading
        self.log = (logger or structlog.get_logger("waterline.kube.leases")).bind(
            lease=f"{namespace}/{name}", identity=identity
        )
        self.lock = threading.RLock()
        #: Set while leading; cleared the moment leadership ends.
        self.leading = threading.Event()
        self.observed_version = ""
        self.observed_time = 0.0
        self.observed_holder = ""
        self.observed_duration = 0.0
        self.last_renew = 0.0  # clock() at the start of the last successful renewal
        self._failing: str | None = None
        self.board = board
        self.thread_name = "elector"
        if board is not None:
            board.register(self.thread_name)

    # -- queries ------------------------------------------------------------------------
    def is_leader(self, now: float | None = None) -> bool:
        """Leading and within the renew deadline of the last successful renewal."""
        now = self.clock() if now is None else now
        with self.lock:
            return self.leading.is_set() and now < self.last_renew + self.args.renew_deadline

    @property
    def deadline(self) -> float:
        return self.last_renew + self.args.renew_deadline

    def time_left(self, now: float | None = None) -> float:
        """Seconds until leadership ends unless renewed (<= 0 when not leading): what a
        leader's write may take at most."""
        now = self.clock() if now is None else now
        with self.lock:
            return self.deadline - now if self.leading.is_set() else 0.0

    # -- the state machine --------------------------------------------------------------
    def step(self, now: float | None = None) -> float:
        """One attempt to acquire or renew at clock reading ``now``; the delay until the
        next attempt."""
        now = self.clock() if now is None else now
        self.check_deadline(now)
        renewed = self._try_acquire_or_renew(now)
        wait = self.args.retry_period * (1 - self.rng.random() * self.args.jitter)
        with self.lock:
            if self.leading.is_set():
                if not renewed:  # wake up exactly at the deadline to stop in time
                    wait = min(wait, max(0.001, self.deadline - now))
                return wait
            if self.observed_holder and self.observed_holder != self.identity:
                expiry = self.observed_time + self.observed_duration
                if expiry > now:
                    wait = min(wait, expiry - now)
            return wait

    def check_deadline(self, now: float | None = None) -> None:
        now = self.clock() if now is None else now
        with self.lock:
            if self.leading.is_set() and now >= self.deadline:
                self._stop_leading("renew deadline passed without a successful renewal")

    def _try_acquire_or_renew(self, now: float) -> bool:
        """``now`` is the clock before the GET: a renewal counts from then (the leader's
        deadline errs early); what the GET shows counts from after it returned (a
        follower's view of the expiry errs late). Both errors keep one leader."""
        try:
            raw = self.backend.get()
            seen = max(now, self.clock())
            stamp = micro_time(self.wall())
            if raw is None:
                created = self.backend.create(self._fresh_lease(stamp))
                self._observe(created, now)
                self._renewed(now, acquired=True)
                return True
            spec = raw.get("spec") or {}
            holder = str(spec.get("holderIdentity") or "")
            with self.lock:
                self._observe(raw, seen)
                mine = holder == self.identity
                if holder and not mine and seen < self.observed_time + self.observed_duration:
                    self._ok()
                    return False  # held by another candidate and not expired
            lease = copy.deepcopy(raw)
            new_spec = lease.setdefault("spec", {})
            new_spec["holderIdentity"] = self.identity
            new_spec["leaseDurationSeconds"] = int(self.args.lease_duration)
            new_spec["renewTime"] = stamp
            if not mine:
                new_spec["leaseTransitions"] = int(spec.get("leaseTransitions") or 0) + 1
                new_spec["acquireTime"] = stamp
            written = self.backend.replace(lease)
            with self.lock:
                self._observe(written, now)
                self._renewed(now, acquired=not self.leading.is_set())
            return True
        except KubeConflict:
            self._ok()
            return False  # another candidate wrote first; try again next period
        except KubeError as err:
            self._failed(err)
            return False

    def _fresh_lease(self, stamp: str) -> dict[str, Any]:
        return {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": self.name, "namespace": self.namespace},
            "spec": {
                "holderIdentity": self.identity,
                "leaseDurationSeconds": int(self.args.lease_duration),
                "acquireTime": stamp,
                "renewTime": stamp,
                "leaseTransitions": 0,
            },
        }

    def _observe(self, raw: dict[str, Any], now: float) -> None:
        version = str((raw.get("metadata") or {}).get("resourceVersion") or "")
        spec = raw.get("spec") or {}
        with self.lock:
            if version != self.observed_version:
                self.observed_version = version
                self.observed_time = now
            self.observed_holder = str(spec.get("holderIdentity") or "")
            self.observed_duration = float(
                spec.get("leaseDurationSeconds") or self.args.lease_duration
            )

    def _renewed(self, now: float, acquired: bool) -> None:
        with self.lock:
            self.last_renew = now
            self._ok()
            if acquired and not self.leading.is_set():
                self.leading.set()
                self.log.info("started leading")
                if self.on_started:
                    self.on_started()

    def _stop_leading(self, why: str) -> None:
        with self.lock:
            if not self.leading.is_set():
                return
            self.leading.clear()
            self.log.warning("stopped leading", reason=why)
            if self.on_stopped:
                self.on_stopped()

    def _failed(self, err: Exception) -> None:
        fault = f"{type(err).__name__}: {getattr(err, 'message', None) or err}"
        if self._failing is None:
            self.log.warning("lease request failed", error=fault)
        self._failing = fault
        if self.board is not None:
            self.board.failed(self.thread_name, fault)

    def _ok(self) -> None:
        if self._failing is not None:
            self.log.info("lease requests work again", after=self._failing)
            self._failing = None
        if self.board is not None:
            self.board.beat(self.thread_name)

    # -- shutdown -----------------------------------------------------------------------
    def release(self) -> bool:
        """Stop leading (work first), then hand the lease back so a follower takes over
        at its next attempt. True when the lease was released."""
        with self.lock:
            was_leading = self.leading.is_set()
            self._stop_leading("released on shutdown")
        if not was_leading:
            return False
        try:
            raw = self.backend.get()
            if raw is None or (raw.get("spec") or {}).get("holderIdentity") != self.identity:
                return False
            lease = copy.deepcopy(raw)
            stamp = micro_time(self.wall())
            spec = lease["spec"]
            spec.pop("holderIdentity", None)
            spec["leaseDurationSeconds"] = 1
            spec["renewTime"] = stamp
            spec["acquireTime"] = stamp
            self.backend.replace(lease)
            self.log.info("released the lease")
            return True
        except KubeError as err:
            self.log.warning("could not release the lease; it will expire", error=str(err))
            return False

    # -- the loop -----------------------------------------------------------------------
    def run(self, stop: threading.Event) -> None:
        """Elect until ``stop`` is set, then release. A watchdog thread stops leadership
        at the renew deadline even while a request hangs."""
        watchdog = threading.Thread(
            target=self._watch_deadline, args=(stop,), name="lease-watchdog", daemon=True
        )
        watchdog.start()
        try:
            while not stop.is_set():
                stop.wait(self._guarded_step())
        finally:
            self.release()
            watchdog.join(1.0)

    def _guarded_step(self) -> float:
        """``step``, surviving anything: an unexpected error is logged with its traceback,
        reported as failing, and the next attempt comes after a retry period (the
        watchdog still stops leadership at the deadline meanwhile)."""
        try:
            return self.step()
        except Exception as err:
            self.log.exception("leader election attempt failed unexpectedly")
            self._failed(err)
            return self.args.retry_period

    def _watch_deadline(self, stop: threading.Event) -> None:
        while not stop.is_set():
            with self.lock:
                wait = (
                    self.deadline - self.clock()
                    if self.leading.is_set()
                    else self.args.retry_period
                )
            stop.wait(max(0.01, min(wait, self.args.retry_period)))
            self.check_deadline()
