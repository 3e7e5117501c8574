"""``python -m devtools.vm``'s bad input (devtools/vm/__main__.py): refused before anything
starts, with argparse's usage error naming the option, never a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from devtools.vm.__main__ import main, positive_seconds
from devtools.vm.guest import Boot


@pytest.mark.parametrize("value", ["-5", "0", "nan", "abc"])
def test_a_timeout_that_is_not_above_zero_is_refused_before_any_boot(
    value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """``up --timeout -5`` used to start qemu, kill it at once and end in a
    FileNotFoundError (no console.log yet); ``--timeout 0`` silently meant 600."""
    with pytest.raises(SystemExit) as exit_:
        main(["up", "--timeout", value])
    assert exit_.value.code == 2
    assert "argument --timeout" in capsys.readouterr().err


def test_a_timeout_above_zero_is_taken_as_seconds() -> None:
    assert positive_seconds("90") == 90.0
    assert positive_seconds("0.5") == 0.5


def test_a_boot_killed_before_its_console_existed_has_an_empty_console(tmp_path: Path) -> None:
    done = Boot(tmp_path, None, 0.1, None, tmp_path / "console.log")
    assert done.console_tail() == ""
    (tmp_path / "console.log").write_text("x" * 5000 + "end")
    assert done.console_tail(10) == "xxxxxxxend"
