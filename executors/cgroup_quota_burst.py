"""The quota burst on the host's cgroups: a latency-critical pod's CFS quota raised above
its limit, and its exact undo (DESIGN.md "Batch capacity": an LC pod's own quota may rise
above its limit by a policy's percent; the decision is ``engine.phases.isolation``).

The quota files: v1 ``cpu.cfs_quota_us`` (with ``cpu.cfs_period_us``), v2 ``cpu.max``
(``quota period``). The pod's cgroup and each container's are raised: the pod-level quota
is the sum of the containers' (the kubelet sets it only when every container has a
limit), and it binds them all, so a raise of the containers alone would change nothing.

Ordering the kernel asks for: on v1 a child's quota may not exceed its parent's (EINVAL),
so a raise writes the pod's cgroup first and then its containers', and a take-back the
containers' first and the pod's last. And the kernel refuses a quota below the cgroup's
CFS burst (EINVAL): CPU burst is sized from the quota in force (at 100% it equals the
raised quota), so before a quota goes back, a burst above the original quota is brought
down to it (the isolator sizes it from the quota again at its next tick, and its own
release writes the burst's original back).

Crash-safe and exact like the caps and the marks: each quota file's text before the first
raise is persisted (``IsolationState``, the ``quota`` of the pod's record) *before* the
write, and a take-back writes exactly that back (``max 100000`` included, though a cgroup
with no quota is never raised). Asked every tick, the raise is checked against the kernel:
a quota found back at the original (a ``systemctl daemon-reload`` puts a unit's
``CPUQuota`` back; the kubelet) is raised again and reported (``Reverted``, control
``cpu_quota_burst``); one found at a third value is someone else's change (a resize, an
operator): that is the original from then on, and the raise is applied over it.
"""

from __future__ import annotations

import errno
import os
from dataclasses import replace
from typing import Any, Protocol

import structlog

from agent.model.objects import Pod
from collectors.cpu_quota import V1_PERIOD, V1_QUOTA, V2_MAX, parse_quota
from collectors.layout import PodCgroupLayout
from engine.records import CPU_QUOTA_BURST
from executors.cgroup_throttle import MIN_QUOTA_US
from executors.isolation_state import POD_LEVEL, IsolatedPod, IsolationState, Saved

#: The control a quota found put back is counted under.
QUOTA_BURST_CONTROL = CPU_QUOTA_BURST


def raised_quota(original_us: int, percent: float) -> int:
    """The quota ``percent`` above ``original_us`` (whole microseconds)."""
    return max(MIN_QUOTA_US, round(original_us * (1.0 + percent / 100.0)))


class Isolator(Protocol):
    """What the raiser uses of ``executors.cgroup_isolation.CgroupIsolator``: its files, its
    writes and its state."""

    version: int
    files: Any
    layout: PodCgroupLayout
    state: IsolationState

    def _read(self, cgroup: str, name: str) -> str: ...
    def _write(self, cgroup: str, name: str, text: str) -> None: ...
    def _give_back(self, cgroup: str, name: str, text: str) -> None: ...
    def _path(self, cgroup: str, name: str) -> str: ...
    def _record(self, pod: Pod) -> IsolatedPod: ...
    def _persist(self, record: IsolatedPod, what: str) -> bool: ...
    def _reverted(self, control: str, key: str, uid: str, cgroup: str) -> None: ...


class QuotaRaiser:
    """The isolator's quota burst: it reads and writes through the isolator's files and
    writes (systemd's unit property where there is one) and records in its state."""

    def __init__(self, iso: Isolator) -> None:
        self.iso = iso
        self._log = structlog.get_logger()

    @property
    def quota_file(self) -> str:
        return V1_QUOTA if self.iso.version == 1 else V2_MAX

    def _read(self, cgroup: str) -> tuple[str, int | None, int]:
        """(quota file's text, quota in us or None, period in us); raises OSError/ValueError."""
        raw = self.iso._read(cgroup, self.quota_file)
        period = self.iso._read(cgroup, V1_PERIOD) if self.iso.version == 1 else ""
        quota, period_us = parse_quota(self.iso.version, raw, period)
        return raw, quota, period_us

    def _text(self, quota: int, period: int) -> str:
        return str(quota) if self.iso.version == 1 else f"{quota} {period}"

    # -- raise ------------------------------------------------------------------------

    def raise_quota(self, pod: Pod, percent: float, owner: str = "") -> bool:
        iso = self.iso
        found = iso.layout.locate(pod)
        if found is None:
            self._log.warning("quota burst: pod cgroup not found", pod=pod.key, uid=pod.uid)
            return False
        record = iso._record(pod)
        saved: dict[str, Saved] = dict(record.quota)
        plans: dict[str, tuple[str, str | None]] = {}  # name -> (cgroup, text to write or None: held)
        for name, cgroup in {POD_LEVEL: found.path, **found.containers}.items():
            try:
                raw, quota, period = self._read(cgroup)
            except (OSError, ValueError, UnicodeDecodeError) as err:
                self._log.warning("quota burst: cgroup unreadable", pod=pod.key, cgroup=cgroup, error=str(err))
                continue
            before = saved.get(name)
            known = before is not None and before.cgroup == cgroup
            if before is None or not known:  # first raise, or a new container cgroup
                if quota is None:
                    continue  # no quota: nothing to raise
                before = saved[name] = Saved(cgroup, raw)
            original, _ = parse_quota(iso.version, before.original, str(period))
            if original is None:
                continue
            want = raised_quota(original, percent)
            if quota == want:
                plans[name] = (cgroup, None)
                continue
            # raised by an earlier percent of ours (a policy edit): the original stays
            ours = quota in {raised_quota(original, p) for p in (record.quota_percent, record.quota_percent_before) if p}
            if known and quota != original and not ours:  # someone else's value: the original from now on
                saved[name] = Saved(cgroup, raw)
                if quota is None:
                    continue  # the limit went: nothing to raise
                want = raised_quota(quota, percent)
            elif known and quota == original:  # back at the original: put back by someone (systemd, the kubelet)
                iso._reverted(QUOTA_BURST_CONTROL, pod.key, pod.uid, cgroup)
            plans[name] = (cgroup, self._text(want, period))
        if not plans:
            return False
        earlier = record.quota_percent if record.quota_percent != percent else record.quota_percent_before
        updated = replace(record, quota=saved, quota_owner=owner or record.quota_owner,
                          quota_percent=percent, quota_percent_before=earlier)
        if not iso._persist(updated, "quota burst"):
            return False
        held: set[str] = set()
        order = [POD_LEVEL] + sorted(n for n in plans if n != POD_LEVEL)  # parent first (v1)
        for name in (n for n in order if n in plans):
            cgroup, text = plans[name]
            if text is not None:
                try:
                    iso._write(cgroup, self.quota_file, text)
                except OSError as err:
                    self._log.warning("quota burst: write failed", pod=pod.key, cgroup=cgroup, error=str(err))
                    if name == POD_LEVEL:
                        break  # the containers may not go above a pod quota that stayed (v1)
                    continue
                self._log.info("quota raised", code="quota-raised", pod=pod.key,
                               container=name or "(pod)", quota=text, before=saved[name].original)
            held.add(name)
        return POD_LEVEL in held

    # -- take back --------------------------------------------------------------------

    def take_back_uid(self, uid: str) -> bool:
        iso = self.iso
        record = iso.state.get(uid)
        if record is None or not record.quota:
            return True
        done: set[str] = set()
        order = sorted(n for n in record.quota if n != POD_LEVEL) + (
            [POD_LEVEL] if POD_LEVEL in record.quota else [])  # children first (v1)
        for name in order:
            saved = record.quota[name]
            try:
                self._burst_within(saved)
                iso._give_back(saved.cgroup, self.quota_file, saved.original)
            except OSError as err:
                if err.errno != errno.ENOENT:
                    self._log.warning("quota burst: take-back failed, will retry", pod=record.key,
                                      cgroup=saved.cgroup, error=str(err))
                    continue
            done.add(name)
        if done:
            self._log.info("quota taken back", code="quota-taken-back", pod=record.key, cgroups=len(done))
        try:
            iso.state.forget_quota(uid, done)
        except OSError as err:
            self._log.error("quota burst: take-back not persisted", pod=record.key, error=str(err))
        return len(done) == len(record.quota)

    def _burst_within(self, saved: Saved) -> None:
        """A CFS burst above the quota about to be written back is brought down to it
        first (the kernel refuses a quota below the burst)."""
        iso = self.iso
        path = iso._path(saved.cgroup, iso.files.burst)
        if not os.path.exists(path):
            return
        original, _ = parse_quota(iso.version, saved.original,
                                  iso._read(saved.cgroup, V1_PERIOD) if iso.version == 1 else "")
        if original is None:
            return
        try:
            burst = int(iso._read(saved.cgroup, iso.files.burst) or "0")
        except ValueError:
            return
        if burst > original:
            iso._write(saved.cgroup, iso.files.burst, str(original))
