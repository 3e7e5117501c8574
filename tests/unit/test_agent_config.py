"""`waterline agent --config PATH`: the agent: section, checked at start, re-read live."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import pytest
import structlog
from structlog.testing import capture_logs

from agent.errors import InvalidObject
from agent.model.settings import parse_agent_settings
from agent.node import command
from agent.node.config_file import ConfigFile, read_config


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
