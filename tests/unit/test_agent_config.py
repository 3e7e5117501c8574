"""`waterline agent --config PATH`: the agent: section, checked at start, re-read live."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import pytest
import structlog
from structlog.testing import capture_logs

from agent.errors import InvalidObject
from agent.model.objects import GUARANTEED, Node
from agent.model.settings import DEFAULT_MAX_OPEN_FILES, parse_agent_settings
from agent.node import command
from agent.node.config_file import ConfigFile, read_config
from agent.node.host import build_host_parts
from agent.node.tick import NodeBrain
from collectors.files import open_files_budget
from collectors.layout import CGROUPFS, container_names, pod_path
from devtools.harness.fake_cgroups import Clock, FakeTree, make_pod


def write(path: Path, text: str, bump: int = 0) -> None:
    path.write_text(text)
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + bump))


def test_reads_the_agent_section(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    write(path, "agent:\n  executeExcessPercent: 5\n  extCpuResource: example.com/cpu\narbitration: {interval: 30}\n")
    settings = read_config(str(path))
    assert (settings.execute_excess_percent, settings.ext_cpu_resource) == (5.0, "example.com/cpu")
    write(path, "")
    assert read_config(str(path)).execute_excess_percent == 0.0


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("agent:\n  executeExcessPercent: 150\n", "agent.executeExcessPercent"),
        ("agent:\n  extCpuResource: ''\n", "agent.extCpuResource"),
        ("agent:\n  executeExessPercent: 1\n", "agent.executeExessPercent"),
        ("agent: [1]\n", "agent"),
    ],
)
def test_bad_config_names_the_field(tmp_path: Path, text: str, field: str) -> None:
    path = tmp_path / "c.yaml"
    write(path, text)
    with pytest.raises(InvalidObject) as err:
        read_config(str(path))
    assert err.value.field == field
    assert field in str(err.value) and ", got " in str(err.value)


def test_the_agent_section_reads_like_the_engines_sections() -> None:
    """One format for every config section: ``config <section>: <field> <problem>, got <value>``."""
    with pytest.raises(InvalidObject) as err:
        parse_agent_settings({"executeExcessPercent": 150})
    assert str(err.value) == "config agent: executeExcessPercent must be between 0 and 100, got 150"
    with pytest.raises(InvalidObject) as err:
        parse_agent_settings({"executeExessPercent": 1})
    assert str(err.value).startswith("config agent: executeExessPercent is not a known field (known: ")
    assert str(err.value).endswith(", got 1")


def test_agent_exits_2_on_a_bad_config(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "c.yaml"
    write(path, "agent:\n  executeExcessPercent: -1\n")
    objects = tmp_path / "objects.yaml"
    objects.write_text("apiVersion: v1\nkind: Node\nmetadata: {name: n}\n")
    parser = argparse.ArgumentParser()
    command.add_arguments(parser)
    args = parser.parse_args(["--local", "--objects", str(objects), "--config", str(path),
                              "--metrics-addr", "off", "--ticks", "1", "--no-console"])  # fmt: skip
    try:
        assert command.run(args) == 2
    finally:
        structlog.reset_defaults()  # run() configured logging for the whole process
    out, err = capfd.readouterr()
    line = next(x for x in (out + err).splitlines() if "bad configuration" in x)
    assert "field=agent.executeExcessPercent" in line and "got -1" in line


def test_live_reload_keeps_the_last_good_settings_on_a_bad_edit(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    write(path, "agent:\n  executeExcessPercent: 5\n")
    config = ConfigFile(str(path))
    assert config.changed() is None
    write(path, "agent:\n  executeExcessPercent: 20\n", bump=10**9)
    new = config.changed()
    assert new is not None and new.execute_excess_percent == 20
    write(path, "agent:\n  executeExcessPercent: nope\n", bump=2 * 10**9)
    with capture_logs() as logs:
        assert config.changed() is None
    assert config.settings.execute_excess_percent == 20
    assert any(e.get("code") == "config-kept" for e in logs)


def test_a_section_neither_program_knows_is_refused(tmp_path: Path) -> None:
    """One file may configure the agent and the controller; a typo is named, not ignored."""
    path = tmp_path / "c.yaml"
    write(path, "agents:\n  executeExcessPercent: 5\n")
    with pytest.raises(InvalidObject) as err:
        read_config(str(path))
    assert str(err.value).startswith(f"config {path}: agents is not a known field")


# -- maxOpenFiles: the descriptors the collectors hold across ticks ------------------------


def test_max_open_files_defaults_to_4096_and_takes_0_to_the_kernels_ceiling() -> None:
    assert parse_agent_settings({}).max_open_files == DEFAULT_MAX_OPEN_FILES == 4096
    assert parse_agent_settings({"maxOpenFiles": 0}).max_open_files == 0
    assert parse_agent_settings({"maxOpenFiles": 1 << 20}).max_open_files == 1 << 20


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("-1", "must be >= 0, got -1"),
        ("1048577", "must be <= 1048576, got 1048577"),
        ("1.5", "must be an integer, got 1.5"),
        ("lots", "must be an integer, got 'lots'"),
        ("true", "must be an integer, got true"),
        ("null", None),  # unset: the default
    ],
)
def test_a_bad_max_open_files_is_refused_naming_it(tmp_path: Path, value: str, problem: str | None) -> None:
    path = tmp_path / "c.yaml"
    write(path, f"agent:\n  maxOpenFiles: {value}\n")
    if problem is None:
        assert read_config(str(path)).max_open_files == DEFAULT_MAX_OPEN_FILES
        return
    with pytest.raises(InvalidObject) as err:
        read_config(str(path))
    assert err.value.field == "agent.maxOpenFiles"
    assert str(err.value) == f"config {path}: agent.maxOpenFiles {problem}"


def _host(tmp_path: Path) -> tuple[FakeTree, str]:
    tree = FakeTree(tmp_path / "cg", 1)
    proc = tmp_path / "proc"
    proc.mkdir()
    (proc / "stat").write_text("cpu  10 0 10 100 0 0 0 0\ncpu0 10 0 10 100 0 0 0 0\n")
    (proc / "meminfo").write_text("MemTotal: 8000000 kB\nMemFree: 4000000 kB\nInactive(file): 0 kB\n")
    return tree, str(proc)


def test_the_agent_holds_files_within_max_open_files_and_a_live_edit_applies(tmp_path: Path) -> None:
    """The setting is the bound of the collector the agent builds, shared by the pod
    collector and the lc_* reader; an edit of the file closes what is held and holds again
    within the new bound from the next tick on."""
    tree, proc = _host(tmp_path)
    pods = [make_pod(f"p{i}", f"u{i}", GUARANTEED, {"main": f"containerd://u{i}c"}) for i in range(3)]
    for pod in pods:
        rel = pod_path(CGROUPFS, pod.qos_class, pod.uid)
        for r in (rel, f"{rel}/{container_names(CGROUPFS, pod.containers[0].container_id)[0]}"):
            tree.add(r)
            tree.set(r, 1.0)
    node = Node(name="n1", allocatable={"cpu": 1.0})
    path = tmp_path / "c.yaml"
    write(path, "agent:\n  maxOpenFiles: 10\n")
    config = ConfigFile(str(path))
    clock = Clock()
    parts = build_host_parts(str(tree.root), proc, "", str(tmp_path / "state"), dry_run=True,
                             settings=config.settings, clock=clock)  # fmt: skip
    collector = parts.collector
    budget = collector.pod_stats.budget
    assert budget.limit == open_files_budget(10) == 10
    assert collector.interference.waits.files.budget is budget
    for _ in range(3):
        collector.collect(node, pods)
        clock.t += 1
    assert collector.pod_stats.open_files == 8  # 4 files a v1 cgroup: two cgroups fit in 10
    reload = config.reloader(NodeBrain(), collector)
    write(path, "agent:\n  maxOpenFiles: 0\n", bump=10**9)
    reload(None)  # type: ignore[arg-type]
    assert (budget.limit, budget.held, collector.pod_stats.open_files) == (0, 0, 0)
    collector.collect(node, pods)
    assert budget.held == 0
    write(path, "agent:\n  maxOpenFiles: 100\n", bump=2 * 10**9)
    reload(None)  # type: ignore[arg-type]
    collector.collect(node, pods)
    assert collector.pod_stats.open_files == 24  # all six cgroups now
    collector.pod_stats.close()
