"""The quota state file and the cgroup throttler on fake v1 and v2 trees."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent.model.objects import BURSTABLE
from collectors.cpu_quota import parse_quota
from devtools.harness.fake_cgroups import FakeTree, make_pod
from executors.cgroup_throttle import CgroupThrottler, quota_for
from executors.quota_state import ContainerQuota, QuotaState, ThrottledPod

V2_POD = "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-podu_1.slice"
V1_POD = "kubepods/burstable/podu-1"
POD = make_pod("web", "u-1", BURSTABLE, {"a": "containerd://c1", "b": "containerd://c2"})


def _record(uid: str = "u-1", tag: str = "") -> ThrottledPod:
    return ThrottledPod(uid, "default", "web", {"a": ContainerQuota("x/a", 1, "-1", 0.5)}, tag)


def test_state_survives_a_new_instance_and_leaves_no_temp_files(tmp_path: Path) -> None:
    state = QuotaState(str(tmp_path / "state"))
    state.put(_record())
    state.set_caps("u-1", {"a": 0.25})
    again = QuotaState(str(tmp_path / "state"))
    assert again.get("u-1") == ThrottledPod(
        "u-1", "default", "web", {"a": ContainerQuota("x/a", 1, "-1", 0.25)}
    )
    assert [p.name for p in (tmp_path / "state").iterdir()] == ["cpu-quota.json"]


def test_removing_some_containers_keeps_the_others(tmp_path: Path) -> None:
    state = QuotaState(str(tmp_path))
    two = ThrottledPod(
        "u",
        "ns",
        "p",
        {"a": ContainerQuota("a", 2, "max 100000"), "b": ContainerQuota("b", 2, "5000 100000")},
    )
    state.put(two)
    state.remove("u", {"a"})
    record = QuotaState(str(tmp_path)).get("u")
    assert record is not None and set(record.containers) == {"b"}
    state.remove("u")
    assert QuotaState(str(tmp_path)).pods() == {}


@pytest.mark.parametrize("content", ["{not json", '{"version": 7, "pods": {}}', '{"version": 1}'])
def test_corrupt_state_is_moved_aside_and_the_agent_starts_empty(
    tmp_path: Path, content: str
) -> None:
    (tmp_path / "cpu-quota.json").write_text(content)
    state = QuotaState(str(tmp_path))
    assert state.pods() == {}
    aside = [p for p in tmp_path.iterdir() if ".corrupt-" in p.name]
    assert len(aside) == 1 and aside[0].read_text() == content


def test_parse_quota_and_quota_for() -> None:
    assert parse_quota(1, "-1", "100000\n") == (None, 100000)
    assert parse_quota(2, "max 100000") == (None, 100000)
    assert parse_quota(2, "50000 100000") == (50000, 100000)
    with pytest.raises(ValueError):
        parse_quota(2, "max")
    assert quota_for(0.2, 100000, None) == 20000
    assert quota_for(0.001, 100000, None) == 1000  # the kernel refuses less
    assert quota_for(3.0, 100000, 150000) == 150000  # never looser than the pod spec


def _tree(tmp_path: Path, version: int) -> tuple[FakeTree, str]:
    tree = FakeTree(tmp_path / "cg", version)
    rel = V1_POD if version == 1 else V2_POD
    name = "{}" if version == 1 else "cri-containerd-{}.scope"
    tree.add(rel)
    tree.add(f"{rel}/{name.format('c1')}")
    tree.add(f"{rel}/{name.format('c2')}", quota="300000" if version == 1 else "300000")
    return tree, rel + "/" + name


@pytest.mark.parametrize("version", [1, 2])
def test_throttle_then_restore_exactly(tmp_path: Path, version: int) -> None:
    tree, container = _tree(tmp_path, version)
    state_dir = tmp_path / "state"
    throttler = CgroupThrottler(tree.mounts, QuotaState(str(state_dir)))
    throttler.apply(POD, {"a": 0.2, "b": 0.5}, owner="throttle")
    c1, c2 = container.format("c1"), container.format("c2")
    if version == 1:
        assert (tree.quota(c1), tree.quota(c2)) == ("20000", "50000")
    else:
        assert (tree.quota(c1), tree.quota(c2)) == ("20000 100000", "50000 100000")
    saved = json.loads((state_dir / "cpu-quota.json").read_text())["pods"]["u-1"]
    original = "-1" if version == 1 else "max 100000"
    assert saved["containers"]["a"]["original"] == original
    assert saved["tag"] == "throttle"
    assert throttler.throttled_pods()["u-1"].containers["a"].cap == pytest.approx(0.2)

    throttler.apply(POD, {"a": 0.1})  # a second step keeps the first original
    assert throttler.state.get("u-1").containers["a"].original == original  # type: ignore[union-attr]

    throttler.restore(POD)
    assert tree.quota(c1) == original
    assert tree.quota(c2) == ("300000" if version == 1 else "300000 100000")
    assert throttler.throttled_pods() == {}


def test_caps_above_the_original_quota_are_clamped(tmp_path: Path) -> None:
    tree, container = _tree(tmp_path, 1)
    throttler = CgroupThrottler(tree.mounts, QuotaState(str(tmp_path / "state")))
    throttler.apply(POD, {"b": 5.0})
    assert tree.quota(container.format("c2")) == "300000"


def test_no_write_when_the_original_cannot_be_persisted(tmp_path: Path) -> None:
    tree, container = _tree(tmp_path, 2)
    (tmp_path / "file").write_text("")
    state = QuotaState(str(tmp_path / "file" / "state"))  # a dir that cannot be created
    CgroupThrottler(tree.mounts, state).apply(POD, {"a": 0.2})
    assert tree.quota(container.format("c1")) == "max 100000"


def test_unknown_container_and_missing_pod_are_skipped(tmp_path: Path) -> None:
    tree, container = _tree(tmp_path, 2)
    throttler = CgroupThrottler(tree.mounts, QuotaState(str(tmp_path / "state")))
    throttler.apply(POD, {"nope": 0.2})
    throttler.apply(make_pod("gone", "zzz", containers={"a": "containerd://c9"}), {"a": 0.2})
    assert throttler.throttled_pods() == {}


def test_garbage_quota_file_skips_that_container(tmp_path: Path) -> None:
    tree, container = _tree(tmp_path, 2)
    (tree.root / container.format("c1") / "cpu.max").write_text("garbage\n")
    throttler = CgroupThrottler(tree.mounts, QuotaState(str(tmp_path / "state")))
    throttler.apply(POD, {"a": 0.2, "b": 0.5})
    assert set(throttler.throttled_pods()["u-1"].containers) == {"b"}


def test_restarted_container_records_its_new_original(tmp_path: Path) -> None:
    tree, container = _tree(tmp_path, 2)
    throttler = CgroupThrottler(tree.mounts, QuotaState(str(tmp_path / "state")))
    throttler.apply(POD, {"a": 0.2})
    tree.add(container.format("c3"), quota="70000")
    restarted = make_pod("web", "u-1", BURSTABLE, {"a": "containerd://c3"})
    throttler.apply(restarted, {"a": 0.3})
    assert tree.quota(container.format("c3")) == "30000 100000"
    assert throttler.state.get("u-1").containers["a"].original == "70000 100000"  # type: ignore[union-attr]
    throttler.restore(restarted)
    assert tree.quota(container.format("c3")) == "70000 100000"


def test_a_new_throttler_restores_from_the_state_file(tmp_path: Path) -> None:
    tree, container = _tree(tmp_path, 1)
    state_dir = str(tmp_path / "state")
    CgroupThrottler(tree.mounts, QuotaState(state_dir)).apply(POD, {"a": 0.2})
    fresh = CgroupThrottler(tree.mounts, QuotaState(state_dir))
    assert fresh.restore_all() == ["u-1"]
    assert tree.quota(container.format("c1")) == "-1"


def test_reconcile_forgets_gone_pods_restores_unneeded_and_keeps_the_rest(tmp_path: Path) -> None:
    tree, container = _tree(tmp_path, 2)
    other_rel = "kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-podu_2.slice"
    tree.add(other_rel)
    tree.add(f"{other_rel}/cri-containerd-d1.scope")
    state_dir = str(tmp_path / "state")
    throttler = CgroupThrottler(tree.mounts, QuotaState(state_dir))
    other = make_pod("batch", "u-2", "BestEffort", {"x": "containerd://d1"})
    throttler.apply(POD, {"a": 0.2}, owner="keep-me")
    throttler.apply(other, {"x": 0.2}, owner="deleted-action")
    state = QuotaState(state_dir)
    state.put(
        ThrottledPod(
            "gone", "default", "old", {"a": ContainerQuota("kubepods.slice/x/y", 2, "max 100000")}
        )
    )

    restarted = CgroupThrottler(tree.mounts, QuotaState(state_dir))
    restored = restarted.reconcile({"u-1", "u-2"}, keep=lambda r: r.tag == "keep-me")
    assert sorted(restored) == ["gone", "u-2"]
    assert set(restarted.throttled_pods()) == {"u-1"}
    assert tree.quota(f"{other_rel}/cri-containerd-d1.scope") == "max 100000"
    assert tree.quota(container.format("c1")) == "20000 100000"
    assert restarted.restore_where(lambda r: r.tag == "keep-me") == ["u-1"]
    assert tree.quota(container.format("c1")) == "max 100000"
