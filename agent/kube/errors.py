"""The one place where API failures become the project's exceptions.

Callers catch these, never ``kubernetes.client.ApiException`` or urllib3 errors. A
``transient`` error (network, timeout, 5xx, 429 throttling) is retried with backoff; the
others are answers (404, 409, 410, a 429 from a disruption budget).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from agent.errors import WaterlineError


class KubeError(WaterlineError):
    status: int = 0
    transient = False

    def __init__(
        self,
        message: str,
        *,
        status: int = 0,
        reason: str = "",
        causes: tuple[Mapping[str, Any], ...] = (),
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status or type(self).status
        self.reason = reason
        self.causes = causes
        #: Seconds the server asked to wait (``Retry-After``, or the Status's
        #: ``details.retryAfterSeconds``), when it said.
        self.retry_after = retry_after

    def has_cause(self, reason: str) -> bool:
        """StatusCause.type (``reason`` in older servers) equals ``reason``."""
        return any(reason in (c.get("type"), c.get("reason")) for c in self.causes)


class KubeUnreachable(KubeError):
    """No HTTP answer: connection refused or dropped, DNS, TLS, a client-side timeout."""

    transient = True


class KubeBadRequest(KubeError):
    status = 400


class KubeUnauthorized(KubeError):
    status = 401


class KubeForbidden(KubeError):
    status = 403


class KubeNotFound(KubeError):
    status = 404


class KubeConflict(KubeError):
    """409: a stale resourceVersion, a failed precondition, or AlreadyExists."""

    status = 409


class KubeGone(KubeError):
    """410: the resourceVersion is too old (compacted); relist."""

    status = 410


class KubeInvalid(KubeError):
    status = 422


class KubeTooManyRequests(KubeError):
    """429: API priority-and-fairness throttling (transient) or a disruption budget."""

    status = 429

    @property
    def transient(self) -> bool:  # type: ignore[override]
        return not self.has_cause("DisruptionBudget")


class KubeServerError(KubeError):
    status = 500
    transient = True


_BY_STATUS: dict[int, type[KubeError]] = {
    400: KubeBadRequest,
    401: KubeUnauthorized,
    403: KubeForbidden,
    404: KubeNotFound,
    409: KubeConflict,
    410: KubeGone,
    422: KubeInvalid,
    429: KubeTooManyRequests,
}


def _seconds(value: object) -> float | None:
    """A Retry-After value in seconds (the HTTP-date form is not used by the API server)."""
    try:
        seconds = float(str(value).strip())
    except ValueError:
        return None
    return seconds if seconds >= 0 else None


def retry_after_header(headers: object) -> float | None:
    """``Retry-After`` from a response's headers (any mapping, case-insensitive)."""
    if headers is None or not hasattr(headers, "items"):
        return None
    for name, value in headers.items():
        if str(name).lower() == "retry-after":
            return _seconds(value)
    return None


def from_status(
    status: int, body: object = None, fallback: str = "", retry_after: float | None = None
) -> KubeError:
    """Build the exception for an HTTP status and a (possibly) metav1.Status body."""
    payload: Any = body
    if isinstance(body, bytes | bytearray):
        body = body.decode("utf-8", "replace")
    if isinstance(body, str):
        try:
            payload = json.loads(body)
        except ValueError:
            payload = None
    message, reason = fallback or f"HTTP {status}", ""
    causes: tuple[Mapping[str, Any], ...] = ()
    if isinstance(payload, dict):
        message = str(payload.get("message") or message)
        reason = str(payload.get("reason") or "")
        details = payload.get("details")
        if isinstance(details, dict) and isinstance(details.get("causes"), list):
            causes = tuple(c for c in details["causes"] if isinstance(c, dict))
        wait = details.get("retryAfterSeconds") if isinstance(details, dict) else None
        if retry_after is None and wait is not None:
            retry_after = _seconds(wait)
    cls = _BY_STATUS.get(status) or (KubeServerError if status >= 500 else KubeError)
    return cls(message, status=status, reason=reason, causes=causes, retry_after=retry_after)


def translate(exc: BaseException) -> KubeError | None:
    """Map a client, urllib3 or socket exception to ours; None if it is none of those."""
    if isinstance(exc, KubeError):
        return exc
    status = getattr(exc, "status", None)
    # By class name, so this module never imports the client; 36.x raises subclasses
    # (NotFoundException, ...) where older releases raised ApiException itself.
    is_api_exception = any(c.__name__ == "ApiException" for c in type(exc).__mro__)
    if is_api_exception and isinstance(status, int):
        if status == 0:
            return KubeUnreachable(str(getattr(exc, "reason", "") or exc))
        return from_status(
            status,
            getattr(exc, "body", None),
            str(getattr(exc, "reason", "")),
            retry_after_header(getattr(exc, "headers", None)),
        )
    import urllib3.exceptions

    if isinstance(exc, urllib3.exceptions.HTTPError | OSError | TimeoutError):
        return KubeUnreachable(f"{type(exc).__name__}: {exc}")
    return None


@contextmanager
def api_errors() -> Iterator[None]:
    """Re-raise client, urllib3 and socket failures as KubeError subclasses."""
    try:
        yield
    except KubeError:
        raise
    except Exception as exc:
        mapped = translate(exc)
        if mapped is None:
            raise
        raise mapped from exc
