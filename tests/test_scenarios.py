"""Every tests/scenarios/NAME.yaml with a NAME.expect.json, run through `waterline simulate`.

Same semantics as ../shared/bin/check-scenarios: ``$exit`` (default 0) is the expected exit
code; a non-zero exit must print an error that contains every ``$stderr_contains`` word
(case-insensitive); exit 0 must print one JSON report that the expectation matches (the
expectation is a subset; see tests/scenario_matcher.py for the operators).

The command runs in-process through ``agent.cli.main`` (the same entry point as the
`waterline` script and `python -m agent`), which keeps a hundred scenarios to a few seconds.
The matcher is the shared script's ``match`` when ../shared is present, else the copy in
tests/scenario_matcher.py.
"""

from __future__ import annotations

import contextlib
import importlib.machinery
import importlib.util
import io
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agent.cli import main

ROOT = Path(__file__).resolve().parent.parent
SCENARIOS = ROOT / "tests" / "scenarios"
SHARED_CHECKER = ROOT.parent / "shared" / "bin" / "check-scenarios"

Matcher = Callable[[Any, Any, str], list[str]]


def _load_matcher() -> Matcher:
    if SHARED_CHECKER.is_file():
        loader = importlib.machinery.SourceFileLoader("_check_scenarios", str(SHARED_CHECKER))
        spec = importlib.util.spec_from_loader("_check_scenarios", loader)
        if spec is not None:
            module = importlib.util.module_from_spec(spec)
            loader.exec_module(module)
            return module.match  # type: ignore[no-any-return]
    from tests.scenario_matcher import match

    return match


match = _load_matcher()


def _scenarios() -> list[Path]:
    return [p for p in sorted(SCENARIOS.glob("*.yaml")) if p.with_suffix(".expect.json").exists()]


def _simulate(path: Path) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(["simulate", str(path)])
        except SystemExit as exc:  # argparse and friends
            code = exc.code if isinstance(exc.code, int) else 1
    return code, out.getvalue(), err.getvalue()


def test_there_are_scenarios() -> None:
    assert len(_scenarios()) >= 3


@pytest.mark.parametrize("scenario", _scenarios(), ids=lambda p: p.stem)
def test_scenario(scenario: Path) -> None:
    want = json.loads(scenario.with_suffix(".expect.json").read_text())
    exit_code = want.pop("$exit", 0)
    words = want.pop("$stderr_contains", [])
    code, stdout, stderr = _simulate(scenario)
    assert code == exit_code, f"exit {code}, expected {exit_code}: {(stderr or stdout)[-400:]}"
    if exit_code != 0:
        message = (stderr + stdout).strip()
        assert message, "no error message"
        missing = [w for w in words if w.lower() not in message.lower()]
        assert not missing, f"error message lacks {missing}: {message[-300:]}"
        return
    report = json.loads(stdout)
    errors = match(want, report, "report")
    assert not errors, "\n".join(errors[:12])
