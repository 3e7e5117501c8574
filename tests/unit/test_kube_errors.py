"""API errors become our exceptions; backoff grows with bounded jitter."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import urllib3

from agent.errors import InvalidObject
from agent.kube.backoff import Backoff, BackoffArgs
from agent.kube.errors import (
    KubeConflict,
    KubeError,
    KubeGone,
    KubeNotFound,
    KubeServerError,
    KubeTooManyRequests,
    KubeUnreachable,
    api_errors,
    from_status,
)


def status_body(code: int, reason: str, causes: list | None = None) -> bytes:
    body = {"kind": "Status", "code": code, "reason": reason, "message": f"msg {code}"}
    if causes:
        body["details"] = {"causes": causes}
    return json.dumps(body).encode()


@pytest.mark.parametrize(
    ("code", "cls", "transient"),
    [
        (404, KubeNotFound, False),
        (409, KubeConflict, False),
        (410, KubeGone, False),
        (500, KubeServerError, True),
        (503, KubeServerError, True),
        (418, KubeError, False),
    ],
)
def test_status_codes_map_to_exceptions(code: int, cls: type, transient: bool) -> None:
    err = from_status(code, status_body(code, "X"))
    assert type(err) is cls and err.status == code and err.message == f"msg {code}"
    assert err.transient is transient


def test_a_budget_429_is_an_answer_and_a_throttling_429_is_transient() -> None:
    budget = from_status(
        429,
        status_body(429, "TooManyRequests", [{"type": "DisruptionBudget", "message": "needs 2"}]),
    )
    throttled = from_status(429, status_body(429, "TooManyRequests"))
    assert (
        isinstance(budget, KubeTooManyRequests)
        and budget.has_cause("DisruptionBudget")
        and not budget.transient
    )
    assert throttled.transient


def test_client_and_network_exceptions_are_translated() -> None:
    from kubernetes.client.exceptions import ApiException

    with pytest.raises(KubeNotFound), api_errors():
        raise ApiException(status=404, reason="Not Found")
    with pytest.raises(KubeUnreachable), api_errors():
        raise urllib3.exceptions.ReadTimeoutError(None, "/api", "read timed out")  # type: ignore[arg-type]
    with pytest.raises(KubeUnreachable), api_errors():
        raise ConnectionRefusedError(111, "refused")
    with pytest.raises(ZeroDivisionError), api_errors():  # bugs are not hidden
        raise ZeroDivisionError


def test_backoff_grows_to_the_cap_with_bounded_jitter_and_resets() -> None:
    backoff = Backoff(BackoffArgs(initial=1, maximum=8, factor=2, jitter=0.25), random.Random(3))
    delays = [backoff.next() for _ in range(8)]
    for i, d in enumerate(delays):
        base = min(8, 2**i)
        assert base * 0.75 <= d <= min(8, base * 1.25)
    assert len({round(d, 6) for d in delays[4:]}) > 1  # jittered, not in step
    backoff.reset()
    assert backoff.next() <= 1.25
    with pytest.raises(InvalidObject, match="jitter"):
        BackoffArgs(jitter=1.5).validate()


def test_client_exception_subclasses_map_like_the_base_class():
    """kubernetes 36.x raises NotFoundException and friends, subclasses of ApiException."""
    from kubernetes.client.exceptions import ApiException

    from agent.kube.errors import KubeNotFound, translate

    class NotFoundException(ApiException):
        pass

    exc = NotFoundException(status=404, reason="Not Found")
    exc.body = '{"kind": "Status", "reason": "NotFound", "code": 404, "message": "pods \\"x\\" not found"}'
    assert isinstance(translate(exc), KubeNotFound)


def test_a_kubeconfig_that_cannot_be_loaded_is_one_line_naming_it(tmp_path: Path) -> None:
    """agent, controller and capture all report a ValueError in one line (exit 2)."""
    from agent.kube.client import build_api

    missing = str(tmp_path / "none.kubeconfig")
    with pytest.raises(ValueError, match=r"cannot load the kubeconfig \(.*none.kubeconfig\)"):
        build_api(missing)
    garbage = tmp_path / "garbage.kubeconfig"
    garbage.write_text("clusters: 5\n")
    with pytest.raises(ValueError, match="cannot load the kubeconfig"):
        build_api(str(garbage))
