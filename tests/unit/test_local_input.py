"""Local mode: a bad --objects file never stops the good ones, a missing path stops the start.

A file that cannot be parsed (deep nesting, an alias bomb, garbage, not UTF-8, too large,
not a regular file) is named in the log with the reason, counted as an invalid ``file``,
and skipped; the objects of every other file keep acting.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import pytest
import structlog
from structlog.testing import capture_logs

import agent.node.local as local
from agent.node.arguments import add_arguments
from agent.node.command import run as run_agent
from agent.node.local import FileObjectSource
from tests.unit.test_documents import BOMB
from tests.unit.test_loop import (
    Scripted,
    cpu,
    make_loop,
    node_manifest,
    pod_manifest,
    policy_manifests,
    write_yaml,
)

BAD_FILES: dict[str, tuple[bytes, str]] = {
    # 300 levels: past our bound, within PyYAML's own (6.0.4 refuses 1,000 itself).
    "deep.yaml": (b"[" * 300, "nested deeper than 100 levels"),
    "deep.json": (b'{"a": ' + b"[" * 1000, "nested deeper than 100 levels"),
    "bomb.yaml": (BOMB.encode(), "alias bomb"),
    "garbage.yaml": (b"kind: [Pod\n\x00\x01", "not valid YAML"),
    "binary.yml": (b"\xff\xfe\x00garbage", "not UTF-8 text"),
    "date.yaml": (b"kind: Pod\nmetadata: {creationTimestamp: 2026-13-01}\n", "month must be in 1..12"),
    "big.yaml": (b"# " + b"x" * 5000 + b"\n", "larger than 4,096 bytes"),
}


@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(local, "MAX_FILE_BYTES", 4096)
    write_yaml(tmp_path / "good.yaml", [node_manifest(), pod_manifest("be-1", "u1"), *policy_manifests(avoid=1)])
    for name, (data, _) in BAD_FILES.items():
        (tmp_path / name).write_bytes(data)
    os.mkfifo(tmp_path / "pipe.yaml")  # would block a plain open()
    return tmp_path


def test_every_unparsable_file_is_named_and_skipped_and_the_good_one_acts(folder: Path) -> None:
    structlog.reset_defaults()
    with capture_logs() as logs:
        source = FileObjectSource([str(folder)])
        objects = source()
    assert [p.name for p in objects.pods] == ["be-1"]
    assert [p.name for p in objects.policies.policies] == ["guard"]
    assert objects.invalid == {"file": len(BAD_FILES) + 1}
    for name, (_, reason) in BAD_FILES.items():
        assert reason in source.bad_files[str(folder / name)], name
    named = {e["path"]: e["error"] for e in logs if e.get("code") in ("objects-file-skipped", "objects-file-unreadable")}
    assert set(named) == {str(folder / n) for n in [*BAD_FILES, "pipe.yaml"]}
    assert "not a regular file" in named[str(folder / "pipe.yaml")]

    outcome = make_loop(source, Scripted([cpu(3.0, be_1=3.0)])).tick()
    assert outcome.ok and outcome.report is not None
    assert [(a.action, a.pod) for a in outcome.report.actions] == [("throttle", "default/be-1")]


def test_a_fixed_file_is_read_again_and_no_longer_counted(folder: Path) -> None:
    source = FileObjectSource([str(folder)])
    assert source().invalid["file"] == len(BAD_FILES) + 1
    for name in BAD_FILES:
        (folder / name).unlink()
    (folder / "pipe.yaml").unlink()
    write_yaml(folder / "deep.yaml", [pod_manifest("be-2", "u2", cid="c2")])
    objects = source()
    assert objects.invalid == {}
    assert sorted(p.name for p in objects.pods) == ["be-1", "be-2"]


def test_a_missing_objects_path_stops_the_start_with_exit_2(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no-such-dir: no such file or directory"):
        FileObjectSource([str(tmp_path), str(tmp_path / "no-such-dir")])
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args([
        "--local", "--objects", str(tmp_path / "no-such-dir"), "--ticks", "1", "--dry-run",
        "--metrics-addr", "off", "--no-console", "--log-level", "error",
    ])  # fmt: skip
    try:
        assert run_agent(args) == 2
    finally:
        structlog.reset_defaults()  # run() configured logging for the whole process
