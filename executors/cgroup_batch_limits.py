"""The real batch limits: a batch pod's CFS quota and memory limit from its batch
resources, on its pod-level and container cgroups, and their exact undo (DESIGN.md
"Batch capacity").

The files, by cgroup version: v1 ``cpu.cfs_quota_us`` (with the cgroup's own
``cpu.cfs_period_us``) in the ``cpu`` hierarchy and ``memory.limit_in_bytes`` in the
``memory`` hierarchy; v2 ``cpu.max`` (``QUOTA PERIOD``) and ``memory.max``. The quota is
``cores x period`` (at least 1000 us, the kernel's least), the memory limit the
``batch-memory`` limit in bytes. The pod level is written before its containers (v1
refuses a child quota above its parent's) and given back after them.

Ordering that makes it safe to kill the agent at any moment, as for caps and marks: what a
file held is persisted (``BatchLimitsState``, atomic) *before* the first write to it, and
nothing is written when persisting fails. A release writes it back verbatim and forgets it.

A limit is *in force* when the file is at it or tighter: a cap of the throttler sits below
the CPU limit (the throttler records the limit as the original it returns to), and is no
revert. A file found looser than the limit it holds (``systemctl daemon-reload`` put a
systemd unit's own ``cpu.max`` back, someone wrote it) is written again and reported
(``on_reverted``: the agent counts it under ``waterline_caps_reverted_total{control=
"batch_cpu_limit" | "batch_memory_limit"}`` and says it once per pod,
``agent.node.holding``). Where systemd owns the cgroup (cgroup v2, the kubelet's systemd
driver: the pod slice and the container scopes) both are set as the unit's runtime
properties (``executors.cgroup_writes``): the quota as ``CPUQuotaPerSecUSec`` /
``CPUQuotaPeriodUSec``, the memory limit as ``MemoryMax``, the unit's own values (for a
BestEffort pod: unset) recorded first and given back exactly on release; so a
daemon-reload writes the batch limits back instead of the unit's ``max``, and that check
stays the net.

**A pod already above its memory limit.** The limit is written as it is, whatever the pod
uses: it is the limit the pod asked for, and the kernel does with it what it does for any
container over its limit, at the write. On v2 it reclaims what it can (page cache first)
and, if the cgroup stays above, its OOM killer ends a task in it (the container restarts
as its ``restartPolicy`` says): the same end as a container that grew past a limit set at
its start. On v1 the kernel reclaims and, if that is not enough, refuses the write
(``EBUSY``): the limit is then not in force, the answer is False (counted, logged, tried
again each tick, which reclaims again) and it holds as soon as the pod is under it. The
window where a batch pod can be above its limit is short: the first tick after its
containers start (the agent asks every tick), or while no agent runs. The memory
waterlines keep guarding the node either way. Not done instead: holding the write until
the pod is under the limit (a pod that never gets under it would never be limited), or
``memory.high`` first (v2 only; it stalls the pod without bound instead of ending it).

A file found exactly at the limit with no record (the state file was lost) is taken for
the agent's own write: the original recorded is the kubelet's value for a BestEffort pod
(no quota, no memory limit). Failures are logged, never raised.
"""

from __future__ import annotations

import errno
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

import structlog

from agent.model.batch import Amounts, BatchLimits
from agent.model.objects import Pod
from collectors.cgroups import CgroupMounts
from collectors.cpu_quota import V1_PERIOD, V1_QUOTA, V2_MAX, parse_quota
from collectors.files import read_bytes
from collectors.layout import PodCgroupLayout
from engine.records import BATCH_CPU_LIMIT, BATCH_MEMORY_LIMIT, Reverted
from engine.state import NodeState
from executors.actuators import BatchLimiter
from executors.batch_limits_state import (
    CPU,
    MEMORY,
    BatchLimitsState,
    LimitedPod,
    LimitFile,
    limit_key,
)
from executors.cgroup_writes import CgroupWrites, DirectWrites

MIN_QUOTA_US = 1000
V1_MEMORY, V2_MEMORY = "memory.limit_in_bytes", "memory.max"
#: What v1 reads for "no memory limit" (PAGE_COUNTER_MAX pages of 4 KiB) and accepts back.
V1_UNLIMITED = "9223372036854771712"
CONTROLS = {CPU: BATCH_CPU_LIMIT, MEMORY: BATCH_MEMORY_LIMIT}


@dataclass(frozen=True, slots=True)
class _Plan:
    """One file to hold at a limit: where, what it holds now, what the limit is."""

    key: str
    resource: str
    container: str
    cgroup: str
    file: str
    current: str
    wanted: str
    in_force: bool
    unlimited: str  # the kubelet's value for a BestEffort pod


def _memory_value(text: str) -> int | None:
    """Bytes, None for "max" (v2's no limit)."""
    return None if text == "max" else int(text)


class CgroupBatchLimiter(BatchLimiter):
    """An ``executors.actuators.BatchLimiter`` on the host's cgroup tree, and a ``Holder``
    of the limits."""

    released = "batch limits released"
    released_code = "batch-limits-released"

    def __init__(self, mounts: CgroupMounts, state: BatchLimitsState,
                 layout: PodCgroupLayout | None = None, kubelet_root: str = "",
                 writes: CgroupWrites | None = None) -> None:  # fmt: skip
        self.version = mounts.version
        self.writes: CgroupWrites = writes if writes is not None else DirectWrites()
        cpu = mounts.v1.get("cpu") if self.version == 1 else mounts.unified
        if cpu is None:
            raise ValueError("no cpu controller hierarchy: no batch limits")
        memory = mounts.v1.get("memory") if self.version == 1 else mounts.controller_root("memory")
        #: Each resource's controller root (memory: None where there is no memory controller).
        self.roots: dict[str, str | None] = {CPU: cpu, MEMORY: memory}
        self.state = state
        self.layout = layout if layout is not None else PodCgroupLayout(cpu, kubelet_root)
        self._log = structlog.get_logger()
        if memory is None:
            self._log.warning("no memory controller: batch pods get their CPU limit only",
                              code="batch-memory-unlimited")  # fmt: skip
        #: Called with each limit found lifted, as it is written again (the agent counts
        #: and says it); None: nobody is told.
        self.on_reverted: Callable[[Reverted], None] | None = None

    # -- files ------------------------------------------------------------------------

    def _read(self, resource: str, cgroup: str, name: str) -> str:
        root = self.roots[resource]
        return read_bytes(f"{root}/{cgroup}/{name}", 256).decode().strip()

    def _plan_cpu(self, key: str, container: str, cgroup: str, cores: float) -> _Plan:
        if self.version == 1:
            raw = self._read(CPU, cgroup, V1_QUOTA)
            quota, period = parse_quota(1, raw, self._read(CPU, cgroup, V1_PERIOD))
        else:
            raw = self._read(CPU, cgroup, V2_MAX)
            quota, period = parse_quota(2, raw)
        want = max(MIN_QUOTA_US, round(cores * period))
        text = str(want) if self.version == 1 else f"{want} {period}"
        held = quota is not None and quota * 1000 <= want * 1000 + period  # within 1 millicore
        unlimited = "-1" if self.version == 1 else f"max {period}"
        return _Plan(key, CPU, container, cgroup, V1_QUOTA if self.version == 1 else V2_MAX,
                     raw, text, held, unlimited)  # fmt: skip

    def _plan_memory(self, key: str, container: str, cgroup: str, limit: float) -> _Plan:
        name = V1_MEMORY if self.version == 1 else V2_MEMORY
        raw = self._read(MEMORY, cgroup, name)
        current = _memory_value(raw)
        want = int(limit)
        held = current is not None and current <= want  # v1 rounds down to a page
        return _Plan(key, MEMORY, container, cgroup, name, raw, str(want), held,
                     V1_UNLIMITED if self.version == 1 else "max")  # fmt: skip

    def _plans(self, pod: Pod, limits: BatchLimits, path: str,
               containers: Mapping[str, str]) -> list[_Plan] | None:  # fmt: skip
        """The files to hold, pod level first; None when one could not be read."""
        where: list[tuple[str, str, Amounts]] = [("", path, limits.pod)]
        where += [(name, cgroup, limits.containers[name]) for name, cgroup in sorted(containers.items())
                  if name in limits.containers]  # fmt: skip
        plans = []
        for container, cgroup, amounts in where:
            try:
                if amounts.cpu is not None:
                    plans.append(self._plan_cpu(limit_key(CPU, container), container, cgroup, amounts.cpu))
                if amounts.memory is not None and self.roots[MEMORY] is not None:
                    plans.append(self._plan_memory(limit_key(MEMORY, container), container, cgroup,
                                                   amounts.memory))  # fmt: skip
            except (OSError, ValueError, UnicodeDecodeError) as err:
                self._log.warning("batch limits: cgroup unreadable", pod=pod.key, cgroup=cgroup,
                                  error=str(err))  # fmt: skip
                return None
        return plans

    # -- BatchLimiter -------------------------------------------------------------------

    def set_limits(self, pod: Pod, limits: BatchLimits) -> bool:
        """Every limit of ``pod`` in force: what each file held recorded first, then the
        limit written where the file is looser. True when all are in force."""
        found = self.layout.locate(pod)
        if found is None:
            self._log.warning("batch limits: pod cgroup not found", pod=pod.key, uid=pod.uid)
            return False
        plans = self._plans(pod, limits, found.path, found.containers)
        if not plans:
            return plans is not None
        record = self.state.get(pod.uid) or LimitedPod(pod.uid, pod.namespace, pod.name)
        files = dict(record.files)
        for plan in plans:
            saved = files.get(plan.key)
            if saved is not None and saved.cgroup == plan.cgroup:
                if saved.limit != plan.wanted:
                    files[plan.key] = replace(saved, limit=plan.wanted)
                continue
            original = plan.current
            if plan.current == plan.wanted:  # at our limit with no record: a lost write of ours
                original = plan.unlimited
                self._log.warning("batch limits: found at the limit with no record of ours; the "
                                  "kubelet's value will be given back", pod=pod.key,
                                  cgroup=plan.cgroup, file=plan.file)  # fmt: skip
            files[plan.key] = LimitFile(plan.resource, plan.cgroup, plan.file, original, plan.wanted)
        updated = replace(record, files=files)
        if updated != record:
            try:
                self.state.put(updated)
            except OSError as err:
                self._log.error("batch limits: what was there not persisted, nothing written",
                                pod=pod.key, error=str(err))  # fmt: skip
                return False
        in_force = True
        for plan in plans:
            if plan.in_force:
                continue
            try:
                self.writes.write(self.roots[plan.resource] or "", plan.cgroup, plan.file, plan.wanted)
            except OSError as err:
                in_force = False
                self._log.warning("batch limits: write refused, tried again next tick", pod=pod.key,
                                  cgroup=plan.cgroup, file=plan.file, limit=plan.wanted,
                                  found=plan.current, error=str(err),
                                  busy=err.errno == errno.EBUSY)  # fmt: skip
                continue
            if record.files.get(plan.key) is not None and record.files[plan.key].cgroup == plan.cgroup:
                self._reverted(pod, plan)
            else:
                self._log.info("batch limit", code="batch-limit", pod=pod.key,
                               container=plan.container or "(pod)", file=plan.file,
                               limit=plan.wanted, before=plan.current)  # fmt: skip
        return in_force

    def _reverted(self, pod: Pod, plan: _Plan) -> None:
        if self.on_reverted is not None:
            self.on_reverted(Reverted(CONTROLS[plan.resource], pod.uid, pod.key, plan.cgroup,
                                      plan.container, plan.current, plan.wanted))  # fmt: skip

    def release_limits(self, pod: Pod) -> bool:
        return self.release_uid(pod.uid)

    def release_uid(self, uid: str) -> bool:
        """Every recorded file of the pod given back (containers first, then the pod
        level); True when none is left. A cgroup gone counts as given back."""
        record = self.state.get(uid)
        if record is None:
            return True
        done: set[str] = set()
        order = sorted(record.files.items(), key=lambda kv: (kv[0].endswith(":"), kv[0]))
        for key, saved in order:
            try:
                self.writes.give_back(self.roots[saved.resource] or "", saved.cgroup, saved.file,
                                      saved.original)  # fmt: skip
            except OSError as err:
                if err.errno != errno.ENOENT:
                    self._log.warning("batch limits: release failed, will retry", pod=record.key,
                                      cgroup=saved.cgroup, file=saved.file, error=str(err))  # fmt: skip
                    continue
            done.add(key)
        if done:
            self._log.info("batch limits released", code="batch-limits-given-back", pod=record.key,
                           files=len(done))  # fmt: skip
        try:
            self.state.remove(uid, done)
        except OSError as err:
            self._log.error("batch limits: release not persisted", pod=record.key, error=str(err))
        return len(done) == len(record.files)

    # -- before each tick: under the caps ------------------------------------------------

    def hold(self) -> list[Reverted]:
        """Every recorded limit read back, and written again where the file is looser (a
        daemon-reload put ``max`` back). Run before the throttler's own read-back
        (``agent.node.holding``): a cap of a batch pod found lifted then reads as its
        limit, the throttler's recorded original, and is written back as a plain revert,
        where it would otherwise take ``max`` for a new original and hand it back later."""
        found: list[Reverted] = []
        for uid, record in self.state.pods().items():
            for key, saved in record.files.items():
                item = self._held(uid, record.key, key, saved)
                if item is not None:
                    found.append(item)
        return found

    def _held(self, uid: str, pod: str, key: str, saved: LimitFile) -> Reverted | None:
        try:
            raw = self._read(saved.resource, saved.cgroup, saved.file)
            if saved.resource == CPU:
                period = "" if self.version == 2 else self._read(CPU, saved.cgroup, V1_PERIOD)
                quota, period_us = parse_quota(self.version, raw, period)
                want = int(saved.limit.split()[0])
                loose = quota is None or quota * 1000 > want * 1000 + period_us
            else:
                current = _memory_value(raw)
                loose = current is None or current > int(saved.limit)
        except FileNotFoundError:
            return None  # the pod's cgroup went: its record goes with the pod
        except (OSError, ValueError, UnicodeDecodeError) as err:
            self._log.warning("batch limits: unreadable", pod=pod, cgroup=saved.cgroup, error=str(err))
            return None
        if not loose:
            return None
        try:
            self.writes.write(self.roots[saved.resource] or "", saved.cgroup, saved.file, saved.limit)
        except OSError as err:
            self._log.warning("batch limits: write refused, tried again next tick", pod=pod,
                              cgroup=saved.cgroup, file=saved.file, error=str(err))  # fmt: skip
            return None
        container = key.partition(":")[2]
        return Reverted(CONTROLS[saved.resource], uid, pod, saved.cgroup, container, raw, saved.limit)

    # -- restart, uninstall, release by hand --------------------------------------------

    def held(self) -> Mapping[str, LimitedPod]:
        """The pods with a recorded limit, by uid (survives restarts)."""
        return self.state.pods()

    def release_all(self) -> list[str]:
        return [uid for uid in self.state.pods() if self.release_uid(uid)]

    def forget_all(self, state: NodeState) -> None:
        state.forget_limits()
