"""The `waterline` command itself: its version and what it says with no command."""

from __future__ import annotations

from importlib import metadata

import pytest

from agent.cli import COMMANDS, main


def test_version_is_the_installed_distributions(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out == f"waterline {metadata.version('waterline')}\n"


def test_no_command_lists_every_command_on_its_own_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main([]) == 2
    err = capsys.readouterr().err
    lines = err.splitlines()
    for command in COMMANDS:
        (line,) = [line for line in lines if line.split()[:1] == [command.name]]
        assert command.help in line
    assert "args" not in err and "required" not in err


def test_an_unknown_command_names_the_valid_ones(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["agnet"])
    assert exit_.value.code == 2
    assert "invalid choice: 'agnet'" in capsys.readouterr().err


def test_ctrl_c_before_a_command_handles_it_is_one_line_and_130(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from agent.simulate import command as simulate

    def interrupted(_args: object) -> int:
        raise KeyboardInterrupt

    monkeypatch.setattr(simulate, "run", interrupted)
    assert main(["simulate", "x.yaml"]) == 130
    assert capsys.readouterr().err == "waterline simulate: interrupted\n"


def test_a_reader_that_goes_away_is_no_traceback(monkeypatch: pytest.MonkeyPatch) -> None:
    """`waterline simulate ... | head`: 141 (128 + SIGPIPE), as the shell's tools end."""
    from agent.simulate import command as simulate

    def reader_gone(_args: object) -> int:
        raise BrokenPipeError

    monkeypatch.setattr(simulate, "run", reader_gone)
    assert main(["simulate", "x.yaml"]) == 141
