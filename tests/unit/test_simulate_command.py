"""`waterline simulate`'s exits: 2 with one line for an --html path that cannot be written,
found before the simulation runs; the report still goes to stdout otherwise."""

import os

import pytest

from agent.cli import main
from tests.conftest import SCENARIOS

THROTTLE = str(SCENARIOS / "node-cpu-throttle.yaml")


@pytest.mark.parametrize(
    ("where", "why"),
    [
        ("missing/report.html", "No such file or directory"),
        (".", "it is a directory"),
    ],
)
def test_an_unwritable_html_path_exits_2_before_the_work(tmp_path, capsys, where, why):
    path = tmp_path / where
    assert main(["simulate", THROTTLE, "--html", str(path)]) == 2
    out, err = capsys.readouterr()
    assert out == ""  # nothing simulated, no report printed
    assert err == f"cannot write the HTML report to {path}: {why}\n"


def test_a_read_only_folder_is_refused(tmp_path, capsys):
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o500)
    try:
        if os.access(folder, os.W_OK):  # root ignores the mode: use a read-only mount instead
            path = "/proc/waterline-report.html"
        else:
            path = str(folder / "report.html")
        assert main(["simulate", THROTTLE, "--html", path]) == 2
        assert capsys.readouterr().err.startswith(f"cannot write the HTML report to {path}: ")
    finally:
        folder.chmod(0o700)


def test_a_writable_path_gets_the_report_and_a_failed_scenario_leaves_no_file(tmp_path, capsys):
    report = tmp_path / "report.html"
    assert main(["simulate", THROTTLE, "--html", str(report)]) == 0
    assert report.read_text().startswith("<!DOCTYPE html>")
    assert capsys.readouterr().out.startswith('{"nodes"')
    bad = tmp_path / "bad.yaml"
    bad.write_text("sampels: []\n")
    other = tmp_path / "other.html"
    assert main(["simulate", str(bad), "--html", str(other)]) == 2
    assert not other.exists()  # the test write made no empty file
