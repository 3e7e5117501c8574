"""The real CPU isolation classes: ``cpu.idle`` on pod-level cgroups, CFS burst on a pod's
cgroups, the quota raised above the limit (``executors.cgroup_quota_burst``), and their
exact undo (DESIGN.md "CPU isolation").

The files, by cgroup version (``FILES``): v1 ``cpu.idle``, ``cpu.shares``,
``cpu.cfs_burst_us``; v2 ``cpu.idle``, ``cpu.weight``, ``cpu.max.burst``. Only a pod's own
cgroup is marked idle, never the QoS-level (``besteffort``, ``burstable``) or kubepods
cgroups the kubelet rewrites: a kubelet that cannot write ``cpu.shares`` there does not
start. Burst goes on the pod's cgroup and on its containers' (the pod-level quota is the
sum of the containers': without burst there it would throttle what the containers borrow).

Ordering that makes it safe to kill the agent at any moment, as for the quotas: the value
a file held is persisted (``IsolationState``, atomic) *before* the first write to it, and
nothing is written when persisting fails. Two kernel facts shape the idle class:

* while ``cpu.idle`` is 1 a write to ``cpu.shares`` / ``cpu.weight`` fails with EINVAL and
  the file reads the idle weight (3 / 1): the weight is recorded before the mark, and a
  restarted agent uses the record, never what it reads then;
* setting ``cpu.idle`` back to 0 leaves the default weight (1024 / 100): a release writes
  0, then the recorded weight.

And one shapes burst: the kernel refuses a burst above the quota, and a quota below the
burst (EINVAL), so a burst is sized from the quota in force, and the engine takes it
back before it caps the pod, or while the kubelet resizes it.

Every mark is checked against the kernel each time it is asked for (each tick): one that
something reverted (``systemctl daemon-reload`` puts a systemd unit's properties back) is
written again and reported (``on_reverted``, an ``engine.records.Reverted``: the
agent counts it in ``waterline_caps_reverted_total{control="cpu_idle" | "cpu_burst"}``
and says it once per pod, as for the caps, ``agent.node.holding``). Where systemd owns the
pod slice (v2, the systemd driver, its bus reachable) the idle mark is also the unit's
runtime ``CPUWeight=idle``, so a reload keeps it (``executors.cgroup_writes``); burst has no
systemd property and stays a direct write held by the check. Where the kernel
lacks a file the class is not offered (``support``), said once in the log. Failures are
logged, never raised.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace

import structlog

from agent.model.isolation import IsolationSupport
from agent.model.objects import Pod
from agent.model.registry import CPU
from collectors.cgroups import CgroupMounts
from collectors.cpu_quota import V1_PERIOD, V1_QUOTA, V2_MAX, parse_quota
from collectors.files import read_bytes
from collectors.layout import PodCgroupLayout, kubepods_path
from engine.records import CPU_BURST, CPU_IDLE, Reverted
from engine.state import NodeState
from executors.actuators import CpuIsolator
from executors.cgroup_quota_burst import QuotaRaiser
from executors.cgroup_throttle import spec_quota
from executors.cgroup_writes import CgroupWrites, DirectWrites
from executors.isolation_state import POD_LEVEL, IsolatedPod, IsolationState, Saved

IDLE_FILE = "cpu.idle"
#: The ``control`` a reverted mark is counted under (agent.metrics' reverted counter).
IDLE_CONTROL, BURST_CONTROL = CPU_IDLE, CPU_BURST


@dataclass(frozen=True, slots=True)
class CpuFiles:
    """The files of one cgroup version."""

    weight: str
    burst: str
    idle: str = IDLE_FILE


FILES = {1: CpuFiles("cpu.shares", "cpu.cfs_burst_us"), 2: CpuFiles("cpu.weight", "cpu.max.burst")}
#: What the kernel first needed for each class (said when it is missing).
KERNEL_NEEDED = {"idle": "5.15", "burst": "5.14"}


def spec_weight(version: int, pod: Pod) -> str:
    """The pod-level weight the kubelet writes for a pod's CPU request: ``cpu.shares`` =
    request x 1024 (2 at least), and on v2 the kubelet's mapping of shares to weight."""
    shares = min(262144, max(2, int(pod.request(CPU) * 1024)))
    return str(shares) if version == 1 else str(1 + ((shares - 2) * 9999) // 262142)


class CgroupIsolator(CpuIsolator):
    """An ``executors.actuators.CpuIsolator`` on the host's cgroup tree, and a ``Holder``
    of the marks."""

    released = "idle, burst and quota burst marks released"
    released_code = "marks-released"

    def __init__(self, mounts: CgroupMounts, state: IsolationState,
                 layout: PodCgroupLayout | None = None, kubelet_root: str = "",
                 writes: CgroupWrites | None = None) -> None:
        self.version = mounts.version
        #: Where the marks go: the files, or systemd's units (``executors.cgroup_writes``).
        self.writes: CgroupWrites = writes if writes is not None else DirectWrites()
        root = mounts.v1.get("cpu") if self.version == 1 else mounts.unified
        if root is None:
            raise ValueError("no cpu controller hierarchy: no CPU isolation")
        self.cpu_root: str = root
        self.files = FILES[self.version]
        self.state = state
        self.layout = layout if layout is not None else PodCgroupLayout(root, kubelet_root)
        self._support: IsolationSupport | None = None
        self._log = structlog.get_logger()
        #: Called with each mark found reverted, as it is written again (the agent counts
        #: and says it); None: nobody is told.
        self.on_reverted: Callable[[Reverted], None] | None = None
        self.quota = QuotaRaiser(self)

    def _reverted(self, control: str, key: str, uid: str, cgroup: str) -> None:
        if self.on_reverted is not None:
            self.on_reverted(Reverted(control, uid, key, cgroup))

    # -- what the kernel offers -------------------------------------------------------

    @property
    def support(self) -> IsolationSupport:
        """Probed once in the kubepods cgroup (the root has no ``cpu.idle`` on v2); full
        until that cgroup exists (there is no pod to act on before it)."""
        if self._support is not None:
            return self._support
        driver = self.layout.detect_driver()
        if driver is None:
            return IsolationSupport()  # quota: the quota files are there wherever cpu is
        where = os.path.join(self.cpu_root, kubepods_path(driver, self.layout.kubelet_root))
        found = {kind: os.path.exists(os.path.join(where, name))
                 for kind, name in (("idle", self.files.idle), ("burst", self.files.burst))}
        self._support = IsolationSupport(idle=found["idle"], burst=found["burst"])
        for kind, present in found.items():
            if not present:
                self._log.warning(
                    f"this kernel has no {kind} class (no {getattr(self.files, kind)}, kernel "
                    f"{KERNEL_NEEDED[kind]}+): the policies' {kind} sections are not acted on "
                    "here; everything else acts as before", cgroup=where)
        return self._support

    # -- files ------------------------------------------------------------------------

    def _path(self, cgroup: str, name: str) -> str:
        return f"{self.cpu_root}/{cgroup}/{name}"

    def _read(self, cgroup: str, name: str) -> str:
        return read_bytes(self._path(cgroup, name), 64).decode().strip()

    def _write(self, cgroup: str, name: str, text: str) -> None:
        """A mark: through ``self.writes`` (systemd's unit property where it keeps one)."""
        self.writes.write(self.cpu_root, cgroup, name, text)

    def _give_back(self, cgroup: str, name: str, text: str) -> None:
        """What was there (and the unit's own property, where one was set)."""
        self.writes.give_back(self.cpu_root, cgroup, name, text)

    def _quota(self, cgroup: str) -> int | None:
        """The cgroup's CFS quota in us (None: unlimited); raises OSError/ValueError."""
        if self.version == 1:
            return parse_quota(1, self._read(cgroup, V1_QUOTA), self._read(cgroup, V1_PERIOD))[0]
        return parse_quota(2, self._read(cgroup, V2_MAX))[0]

    def _record(self, pod: Pod) -> IsolatedPod:
        return self.state.get(pod.uid) or IsolatedPod(pod.uid, pod.namespace, pod.name, self.version)

    def _persist(self, record: IsolatedPod, what: str) -> bool:
        try:
            self.state.put(record)
        except OSError as err:
            self._log.error(f"{what}: what was there not persisted, nothing written",
                            pod=record.key, error=str(err))
            return False
        return True

    # -- the idle class ---------------------------------------------------------------

    def mark_idle(self, pod: Pod, owner: str = "") -> bool:
        """``cpu.idle = 1`` on the pod's cgroup, its weight recorded first. True when the
        mark is in force (found so, or written)."""
        found = self.layout.locate(pod)
        if found is None:
            self._log.warning("idle: pod cgroup not found", pod=pod.key, uid=pod.uid)
            return False
        record = self._record(pod)
        try:
            idle = self._read(found.path, self.files.idle)
            weight = None if idle == "1" else self._read(found.path, self.files.weight)
        except (OSError, UnicodeDecodeError) as err:
            self._log.warning("idle: cgroup unreadable", pod=pod.key, error=str(err))
            return False
        if weight is None:  # in force: the record holds the weight (the file reads 3 / 1)
            if record.idle is not None and (record.idle_owner == owner or not owner):
                return True
            original = record.idle or Saved(found.path, spec_weight(self.version, pod))
            if record.idle is None:
                self._log.warning("idle: found marked with no record of ours; the pod "
                                  "spec's weight will be written back", pod=pod.key)
            return self._persist(replace(record, idle=original, idle_owner=owner), "idle")
        if record.idle is not None:
            self._reverted(IDLE_CONTROL, pod.key, pod.uid, found.path)
        marked = replace(record, idle=Saved(found.path, weight), idle_owner=owner or record.idle_owner)
        if not self._persist(marked, "idle"):
            return False
        try:
            self._write(found.path, self.files.idle, "1")
        except OSError as err:
            self._log.warning("idle: write failed", pod=pod.key, error=str(err))
            self._persist(record, "idle")  # the mark is not there: neither is its record
            return False
        self._log.info("idle", code="idle", pod=pod.key, cgroup=found.path, weight_before=weight)
        return True

    def release_idle(self, pod: Pod) -> bool:
        return self.release_idle_uid(pod.uid)

    def release_idle_uid(self, uid: str) -> bool:
        """``cpu.idle = 0``, then the recorded weight; True when nothing is left to write
        back (a cgroup gone counts as done: the pod went with it)."""
        record = self.state.get(uid)
        if record is None or record.idle is None:
            return True
        saved = record.idle
        try:
            self._give_back(saved.cgroup, self.files.idle, "0")
            self._give_back(saved.cgroup, self.files.weight, saved.original)
        except OSError as err:
            if err.errno != errno.ENOENT:
                self._log.warning("idle: release failed, will retry", pod=record.key, error=str(err))
                return False
        self._log.info("idle released", code="idle-released", pod=record.key, weight=saved.original)
        try:
            self.state.forget_idle(uid)
        except OSError as err:  # written back already: a stale record is written back again
            self._log.error("idle: release not persisted", pod=record.key, error=str(err))
        return True

    # -- CPU burst --------------------------------------------------------------------

    def set_burst(self, pod: Pod, percent: float, owner: str = "") -> bool:
        """Burst = ``percent`` of each quota on the pod's cgroup and its containers', the
        bursts there recorded first. True when in force on at least one cgroup."""
        found = self.layout.locate(pod)
        if found is None:
            self._log.warning("burst: pod cgroup not found", pod=pod.key, uid=pod.uid)
            return False
        record = self._record(pod)
        plans: dict[str, tuple[str, int, str]] = {}  # name -> (cgroup, burst, current)
        saved: dict[str, Saved] = dict(record.burst)
        for name, cgroup in {POD_LEVEL: found.path, **found.containers}.items():
            try:
                quota = self._quota(cgroup)
                current = self._read(cgroup, self.files.burst)
            except (OSError, ValueError, UnicodeDecodeError) as err:
                self._log.warning("burst: cgroup unreadable", pod=pod.key, cgroup=cgroup, error=str(err))
                continue
            if quota is None:
                continue  # unlimited: nothing to borrow from
            before = saved.get(name)
            burst = int(quota * min(percent, 100.0) / 100.0)
            if before is None or before.cgroup != cgroup:  # first write, or a new container
                saved[name] = Saved(cgroup, current)
            elif current == before.original != str(burst):  # back to what was there before us
                self._reverted(BURST_CONTROL, pod.key, pod.uid, cgroup)
            plans[name] = (cgroup, burst, current)
        if not plans:
            return False
        if not self._persist(replace(record, burst=saved, burst_owner=owner or record.burst_owner), "burst"):
            return False
        held = 0
        for name, (cgroup, burst, current) in sorted(plans.items()):
            if current == str(burst):
                held += 1
                continue
            try:
                self._write(cgroup, self.files.burst, str(burst))
            except OSError as err:
                self._log.warning("burst: write failed", pod=pod.key, cgroup=cgroup, error=str(err))
                continue
            held += 1
            self._log.info("burst", pod=pod.key, container=name or "(pod)", burst_us=burst,
                           before=saved[name].original)
        return held > 0

    def release_burst(self, pod: Pod) -> bool:
        return self.release_burst_uid(pod.uid)

    def release_burst_uid(self, uid: str) -> bool:
        """The recorded bursts written back; True when none is left to write."""
        record = self.state.get(uid)
        if record is None or not record.burst:
            return True
        done: set[str] = set()
        for name, saved in record.burst.items():
            try:
                self._give_back(saved.cgroup, self.files.burst, saved.original)
            except OSError as err:
                if err.errno != errno.ENOENT:
                    self._log.warning("burst: release failed, will retry", pod=record.key,
                                      cgroup=saved.cgroup, error=str(err))
                    continue
            done.add(name)
        if done:
            self._log.info("burst released", pod=record.key, cgroups=len(done))
        try:
            self.state.forget_burst(uid, done)
        except OSError as err:
            self._log.error("burst: release not persisted", pod=record.key, error=str(err))
        return len(done) == len(record.burst)

    # -- the quota burst (executors.cgroup_quota_burst) ---------------------------------

    def raise_quota(self, pod: Pod, percent: float, owner: str = "") -> bool:
        return self.quota.raise_quota(pod, percent, owner)

    def take_back_quota(self, pod: Pod) -> bool:
        return self.quota.take_back_uid(pod.uid)

    # -- restart, uninstall, release by hand ------------------------------------------

    def held(self) -> Mapping[str, IsolatedPod]:
        """The pods with a recorded mark, by uid (survives restarts)."""
        return self.state.pods()

    @property
    def state_unreadable(self) -> bool:
        return self.state.unreadable

    def release_uid(self, uid: str) -> bool:
        idle = self.release_idle_uid(uid)
        quota = self.quota.take_back_uid(uid)  # before the burst: it may be above the original
        return self.release_burst_uid(uid) and idle and quota

    def release_all(self) -> list[str]:
        """Every mark of the state file released; the uids fully released."""
        return [uid for uid in self.state.pods() if self.release_uid(uid)]

    def forget_all(self, state: NodeState) -> None:
        state.forget_isolation()

    def rebuild_from_specs(self, pods: Iterable[Pod]) -> list[str]:
        """What to do when the records were lost with an unreadable state file: every
        pod-level cgroup found idle gets ``cpu.idle = 0`` and the weight its pod spec
        gives (what the kubelet wrote), every burst goes back to 0 (the kubelet sets
        none), every quota above the one its pod spec gives goes back to it. The tick
        then puts back the marks the policies still want, re-recorded. Returns the pods
        changed."""
        changed = []
        for pod in pods:
            found = self.layout.locate(pod)
            if found is None:
                continue
            wrote = False
            try:
                if os.path.exists(self._path(found.path, self.files.idle)) and \
                        self._read(found.path, self.files.idle) == "1":
                    self._give_back(found.path, self.files.idle, "0")
                    self._give_back(found.path, self.files.weight, spec_weight(self.version, pod))
                    wrote = True
                for cgroup in (found.path, *found.containers.values()):
                    burst = self._path(cgroup, self.files.burst)
                    if os.path.exists(burst) and self._read(cgroup, self.files.burst) not in ("0", ""):
                        self._give_back(cgroup, self.files.burst, "0")
                        wrote = True
                wrote = self._spec_quotas(pod, found.path, found.containers) or wrote
            except (OSError, UnicodeDecodeError) as err:
                self._log.warning("rebuild: not written", pod=pod.key, error=str(err))
            if wrote:
                changed.append(pod.key)
        return changed

    def _spec_quotas(self, pod: Pod, pod_cgroup: str, containers: Mapping[str, str]) -> bool:
        """A quota above its pod spec's (a raise whose record was lost) written back as the
        kubelet writes it: the containers first, the pod's cgroup last (v1: a child may not
        exceed its parent). True when one was written."""
        limits = {c.name: c.limits.get(CPU) for c in pod.containers}
        wanted = [(cgroup, limits.get(name)) for name, cgroup in sorted(containers.items())]
        wanted.append((pod_cgroup, pod.limits.get(CPU)))
        wrote = False
        for cgroup, limit in wanted:
            if limit is None:
                continue
            try:
                _raw, quota, period = self.quota._read(cgroup)
            except ValueError:
                continue
            text = spec_quota(self.version, limit, period)
            spec, _ = parse_quota(self.version, text, str(period))
            if quota is None or (spec is not None and quota > spec):
                self._give_back(cgroup, self.quota.quota_file, text)
                wrote = True
        return wrote
