"""The real CPU throttle: CFS quota writes on container cgroups, and their exact undo.

For each container the cap (cores) becomes ``quota = cap * period`` with the period the
cgroup already has (v1 ``cpu.cfs_period_us``; v2 the second field of ``cpu.max``), at
least 1000 us (the kernel refuses less), and never above the container's original quota:
throttling only ever tightens what the pod spec allowed.

Ordering that makes it safe to kill the agent at any moment: the original quota of a
container is persisted (``QuotaState``, atomic) *before* the first write to it; when
persisting fails nothing is written. Restoring writes the stored original back verbatim
(``-1`` / ``max 100000`` = unlimited) and then forgets it. A container cgroup that no
longer exists (pod deleted, container restarted) counts as restored: the runtime created
the new one with the spec's quota.

Caps that survive systemd (:meth:`hold`, each tick): with the kubelet's systemd driver
the pod slices and container scopes are systemd units, and systemd writes a unit's own
properties back into its cgroup whenever it re-realizes it (``systemctl daemon-reload``,
which every package install runs; a ``set-property`` on the unit or its slice): a quota
written straight into ``cpu.max`` is lifted without a word. So every cap the state file
names is read back each tick; one the kernel no longer holds is written again and
reported (``engine.records.Reverted``: the agent counts it, says it once and its node
state applies it, ``agent.node.holding``). Found equal to the saved original, it is a plain revert
(systemd put the unit's property back); found at another value, the container's limit
was changed under us (a resize, an operator's ``set-property``): that value becomes the
original a release writes back, and the cap is written over it (never above it); one
tighter than the cap is the cap now, reported with the pod's new cap. A cap that cannot
be written back is dropped from the state file and reported so, and the node's memory
drops it too: the agent never claims a cap the kernel does not hold. Where systemd owns the
cgroup (v2, the systemd driver, its bus reachable) the cap is set as the unit's runtime
property as well, so a reload keeps it (``executors.cgroup_writes``); the read-back stays
the net for every other writer (docs/vm.md).

After a restart the agent adopts the caps the state file names (``executors.adoption``)
and hands back those of pods that are gone (:meth:`restore_uid`); a state file that could
not be read leaves :meth:`rebuild_originals` to write every container's quota back from
its pod spec; ``waterline agent release`` and an uninstalled agent call :meth:`restore_all`.
Failures are logged, never raised: a single bad pod or file must not stop the agent.
"""

from __future__ import annotations

import contextlib
import errno
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace

import structlog

from agent.model.objects import Pod
from collectors.cgroups import CgroupMounts
from collectors.cpu_quota import V1_PERIOD, V1_QUOTA, V2_MAX, parse_quota
from collectors.files import read_bytes
from collectors.layout import PodCgroupLayout
from engine.records import CPU_QUOTA, Reverted
from engine.state import NodeState
from executors.actuators import CpuThrottler
from executors.cgroup_writes import CgroupWrites, DirectWrites
from executors.quota_state import ContainerQuota, QuotaState, ThrottledPod

MIN_QUOTA_US = 1000


def quota_for(cap_cores: float, period_us: int, original_quota: int | None) -> int:
    """The quota that caps at ``cap_cores``: >= 1000 us, <= the original quota."""
    quota = max(MIN_QUOTA_US, round(cap_cores * period_us))
    if original_quota is not None:
        quota = min(quota, max(original_quota, MIN_QUOTA_US))
    return quota


def within_a_millicore(quota: int, other: int, period_us: int) -> bool:
    """Two quotas of one period that cap within 1 millicore of each other: the cap is in
    force (not rewritten, not reverted)."""
    return abs(quota - other) * 1000 <= period_us


def spec_quota(version: int, limit_cores: float | None, period_us: int) -> str:
    """The quota file's content the kubelet writes for a container's CPU limit."""
    if limit_cores is None:
        return "-1" if version == 1 else f"max {period_us}"
    quota = max(MIN_QUOTA_US, round(limit_cores * period_us))
    return str(quota) if version == 1 else f"{quota} {period_us}"


class CgroupThrottler(CpuThrottler):
    """An ``executors.actuators.CpuThrottler`` on the host's cgroup tree, and a ``Holder``
    of the caps."""

    released = "caps released"
    released_code = "caps-released"

    def __init__(
        self,
        mounts: CgroupMounts,
        state: QuotaState,
        layout: PodCgroupLayout | None = None,
        kubelet_root: str = "",
        writes: CgroupWrites | None = None,
    ) -> None:
        self.version = mounts.version
        #: Where the quotas go: the files, or systemd's units (``executors.cgroup_writes``).
        self.writes: CgroupWrites = writes if writes is not None else DirectWrites()
        root = mounts.v1.get("cpu") if self.version == 1 else mounts.unified
        if root is None:
            raise ValueError("no cpu controller hierarchy: cannot throttle")
        self.cpu_root: str = root
        self.state = state
        self.layout = layout if layout is not None else PodCgroupLayout(root, kubelet_root)
        self._log = structlog.get_logger()

    # -- files ---------------------------------------------------------------------

    def _quota_file(self, cgroup: str, version: int) -> str:
        return f"{self.cpu_root}/{cgroup}/{V1_QUOTA if version == 1 else V2_MAX}"

    def _read(self, cgroup: str) -> tuple[str, int | None, int]:
        """(raw quota text, quota or None, period) of a cgroup; raises OSError/ValueError."""
        raw = read_bytes(self._quota_file(cgroup, self.version), 256).decode().strip()
        period_text = ""
        if self.version == 1:
            period_text = read_bytes(f"{self.cpu_root}/{cgroup}/{V1_PERIOD}", 64).decode()
        quota, period = parse_quota(self.version, raw, period_text)
        return raw, quota, period

    def _write(self, cgroup: str, version: int, text: str) -> None:
        """A cap: through ``self.writes`` (systemd's unit property where it keeps one)."""
        self.writes.write(self.cpu_root, cgroup, V1_QUOTA if version == 1 else V2_MAX, text)

    def _give_back(self, cgroup: str, version: int, text: str) -> None:
        """An original (and the unit's own property, where one was set)."""
        self.writes.give_back(self.cpu_root, cgroup, V1_QUOTA if version == 1 else V2_MAX, text)

    # -- CpuThrottler --------------------------------------------------------------

    def apply(self, pod: Pod, container_caps: Mapping[str, float], owner: str = "") -> bool:
        """Cap each named container at the given cores (original quotas saved first).
        True when at least one container's quota was written or already held the cap
        (within 1 millicore: not rewritten)."""
        found = self.layout.locate(pod)
        if found is None:
            self._log.warning("throttle: pod cgroup not found", pod=pod.key, uid=pod.uid)
            return False
        record = self.state.get(pod.uid)
        originals: dict[str, ContainerQuota] = dict(record.containers) if record else {}
        targets: dict[str, tuple[str, int | None, int, int | None]] = {}
        for name in sorted(container_caps):
            cgroup = found.containers.get(name)
            if cgroup is None:
                self._log.warning(
                    "throttle: container cgroup not found", pod=pod.key, container=name
                )
                continue
            try:
                raw, quota, period = self._read(cgroup)
            except (OSError, ValueError, UnicodeDecodeError) as err:
                self._log.warning(
                    "throttle: quota unreadable", pod=pod.key, container=name, error=str(err)
                )
                continue
            saved = originals.get(name)
            if saved is None or saved.cgroup != cgroup:  # first write, or a restarted container
                originals[name] = saved = ContainerQuota(cgroup, self.version, raw)
            orig_quota, _ = parse_quota(self.version, saved.original, str(period))
            targets[name] = (cgroup, orig_quota, period, quota)
        if not targets:
            return False
        # One record before any write: the originals, and each cap as it will be (a cap
        # to write keeps the one so far as ``previous``: ``_was_ours``).
        recorded = dict(originals)
        written: dict[str, float] = {}  # name -> the cap in force after this call
        texts: dict[str, tuple[str, str, int, int]] = {}  # name -> (cgroup, text, quota, period)
        for name, (cgroup, orig_quota, period, current) in targets.items():
            quota = quota_for(container_caps[name], period, orig_quota)
            if current is not None and within_a_millicore(quota, current, period):
                written[name] = current / period  # in force, not rewritten
                recorded[name] = replace(recorded[name], cap=written[name])
                continue
            texts[name] = (cgroup, str(quota) if self.version == 1 else f"{quota} {period}", quota, period)
            recorded[name] = replace(recorded[name], cap=quota / period, previous=recorded[name].cap)
        updated = ThrottledPod(
            pod.uid, pod.namespace, pod.name, recorded, owner or (record.tag if record else "")
        )
        if updated != record:
            try:
                self.state.put(updated)
            except OSError as err:
                self._log.error(
                    "throttle: original quotas and caps not persisted, nothing written",
                    pod=pod.key,
                    error=str(err),
                )
                return False
        failed: dict[str, float | None] = {}
        for name, (cgroup, text, quota, period) in texts.items():
            try:
                self._write(cgroup, self.version, text)
            except OSError as err:
                self._log.warning(
                    "throttle: quota write failed", pod=pod.key, container=name, error=str(err)
                )
                failed[name] = originals[name].cap  # the kernel holds what it held
                continue
            written[name] = quota / period
            self._log.info(
                "throttled", code="throttled", pod=pod.key, container=name, quota_us=quota,
                period_us=period,
            )
        if failed:
            try:
                self.state.set_caps(pod.uid, failed)
            except OSError as err:
                self._log.warning("throttle: caps not persisted", pod=pod.key, error=str(err))
        return bool(written)

    def restore(self, pod: Pod) -> bool:
        """Write back the original quota of every container of ``pod`` and forget it."""
        return self.restore_uid(pod.uid)

    @property
    def state_unreadable(self) -> bool:
        """The state file could not be read at start (it was moved aside)."""
        return self.state.unreadable

    def rebuild_originals(self, pods: Iterable[Pod]) -> list[str]:
        """Write every container's quota as its pod spec sets it (the CPU limit, or
        unlimited without one), as the kubelet did: what to do when the originals were
        lost with an unreadable state file. Returns the pods whose quota changed."""
        changed = []
        for pod in pods:
            found = self.layout.locate(pod)
            if found is None:
                continue
            limits = {c.name: c.limits.get("cpu") for c in pod.containers}
            wrote = False
            for name, cgroup in found.containers.items():
                try:
                    raw, _quota, period = self._read(cgroup)
                    text = spec_quota(self.version, limits.get(name), period)
                    if raw != text:
                        self._give_back(cgroup, self.version, text)
                        wrote = True
                except (OSError, ValueError, UnicodeDecodeError) as err:
                    self._log.warning("rebuild: quota not written", pod=pod.key,
                                      container=name, error=str(err))
            if wrote:
                self._log.info("original quota rebuilt from the pod spec", code="quota-rebuilt", pod=pod.key)
                changed.append(pod.key)
        return changed

    def hold(self) -> list[Reverted]:
        """Read back every cap the state file names and write again those the kernel no
        longer holds (see the module's docstring). A container whose cgroup is gone is
        left to the usual paths (restore counts it as restored)."""
        reverted: list[Reverted] = []
        for uid, record in self.state.pods().items():
            found = [item for name, saved in record.containers.items() if saved.cap is not None
                     and (item := self._held(record.key, uid, name, saved)) is not None]
            if found and (cap := self._tighter(record)) is not None:
                found = [replace(item, cap=cap) for item in found]
            reverted.extend(found)
        return reverted

    def _tighter(self, before: ThrottledPod) -> float | None:
        """The pod's cap when the containers' recorded caps sum lower than before."""
        after = self.state.get(before.uid)
        if after is None:
            return None
        def total(pod: ThrottledPod) -> float:
            return sum(c.cap for c in pod.containers.values() if c.cap is not None)
        cap = total(after)
        return cap if cap > 0 and total(before) - cap > 1e-3 else None

    def _held(self, pod: str, uid: str, name: str, saved: ContainerQuota) -> Reverted | None:
        assert saved.cap is not None
        try:
            raw, quota, period = self._read(saved.cgroup)
            orig_quota, _ = parse_quota(saved.version, saved.original, str(period))
        except FileNotFoundError:
            return None
        except (OSError, ValueError, UnicodeDecodeError) as err:
            self._log.warning("hold: quota unreadable", pod=pod, container=name, error=str(err))
            return None
        want = quota_for(saved.cap, period, orig_quota)
        if quota is not None and within_a_millicore(quota, want, period):
            return None  # held (within 1 millicore)
        new_original = raw != saved.original and not self._was_ours(quota, saved, period, orig_quota)
        if new_original:  # the container's limit changed under us: release gives this back
            orig_quota = quota
            want = quota_for(saved.cap, period, orig_quota)
        text = str(want) if self.version == 1 else f"{want} {period}"
        try:
            if new_original:  # persisted before the write, as every original is
                self.state.put_container(uid, name, ContainerQuota(
                    saved.cgroup, saved.version, raw, saved.cap))  # fmt: skip
            if quota != want:
                self._write(saved.cgroup, saved.version, text)
        except OSError as err:
            with contextlib.suppress(OSError):  # the kernel does not hold it: say so
                self.state.set_caps(uid, {name: None})
            return Reverted(CPU_QUOTA, uid, pod, saved.cgroup, name, raw, text, new_original,
                            False, str(err))
        if abs(want / period - saved.cap) * 1000 > 1:  # a tighter new original: the cap now
            with contextlib.suppress(OSError):
                self.state.set_caps(uid, {name: want / period})
        return Reverted(CPU_QUOTA, uid, pod, saved.cgroup, name, raw, text, new_original, True)

    @staticmethod
    def _was_ours(quota: int | None, saved: ContainerQuota, period: int, orig_quota: int | None) -> bool:
        """The kernel holds the agent's previous cap: it stopped after recording the
        current one and before writing it (``apply`` records before it writes)."""
        if quota is None or saved.previous is None:
            return False
        return within_a_millicore(quota, quota_for(saved.previous, period, orig_quota), period)

    # -- restart and policy deletion -----------------------------------------------

    def restore_uid(self, uid: str) -> bool:
        """Restore a pod by uid from the state file; True when nothing is left to restore."""
        record = self.state.get(uid)
        if record is None:
            return True
        done: set[str] = set()
        for name, saved in record.containers.items():
            try:
                self._give_back(saved.cgroup, saved.version, saved.original)
            except OSError as err:
                if err.errno != errno.ENOENT:
                    self._log.warning(
                        "restore failed, will retry", pod=record.key, container=name, error=str(err)
                    )
                    continue
            done.add(name)
            self._log.info("quota restored", code="quota-restored", pod=record.key, container=name, quota=saved.original)
        try:
            self.state.remove(uid, done)
        except OSError as err:
            self._log.error("restore: state not persisted", pod=record.key, error=str(err))
        return len(done) == len(record.containers)

    def throttled_pods(self) -> Mapping[str, ThrottledPod]:
        """Pods with a saved original quota, by uid (survives restarts)."""
        return self.state.pods()

    def restore_where(self, predicate: Callable[[ThrottledPod], bool]) -> list[str]:
        """Restore every throttled pod the predicate picks; the uids fully restored."""
        return [
            uid
            for uid, record in self.state.pods().items()
            if predicate(record) and self.restore_uid(uid)
        ]

    def restore_all(self) -> list[str]:
        return self.restore_where(lambda _record: True)

    def release_all(self) -> list[str]:
        return self.restore_all()

    def forget_all(self, state: NodeState) -> None:
        state.forget_caps()

    def reconcile(
        self,
        existing_pod_uids: Iterable[str],
        keep: Callable[[ThrottledPod], bool] | None = None,
    ) -> list[str]:
        """Start-up: restore (or just forget, when their cgroup is gone) pods that no longer
        exist, and pods that ``keep`` says no rule needs any more. Pods kept stay throttled
        at their current quota; the engine raises them through throttle-up."""
        existing = set(existing_pod_uids)
        return self.restore_where(
            lambda r: r.uid not in existing or (keep is not None and not keep(r))
        )
