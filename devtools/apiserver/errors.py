"""Error answers shared by admission and the CRD checks, in the API server's words."""

from __future__ import annotations

from typing import Any

from devtools.apiserver.catalog import ApiResource

NOT_FOUND = "the server could not find the requested resource"


class ApiStatus(Exception):
    """An error answer, rendered as a metav1.Status."""

    def __init__(
        self,
        code: int,
        reason: str,
        message: str,
        causes: list[dict[str, str]] | None = None,
        details: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.code, self.reason, self.message, self.causes = code, reason, message, causes or []
        #: name, group and kind of the object the error is about (kubectl prints them).
        self.details = details or {}

    def body(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if self.causes or self.details:
            out["details"] = {**self.details, **({"causes": self.causes} if self.causes else {})}
        return out


_REASONS = {"Required value": "FieldValueRequired", "Unsupported value": "FieldValueNotSupported"}


def invalid(info: ApiResource, name: str, errors: list[tuple[str, str]]) -> ApiStatus:
    """422 Invalid naming the object and each field:
    ``Queue.qos.waterline.io "research" is invalid: spec.weight: Invalid value: 0: ...``."""
    r = info.resource
    qualified = f"{r.kind}.{r.group}" if r.group else r.kind
    parts = [f"{path}: {message}" for path, message in errors]
    listed = parts[0] if len(parts) == 1 else "[" + ", ".join(parts) + "]"
    causes = [
        {
            "reason": next(
                (v for k, v in _REASONS.items() if m.startswith(k)), "FieldValueInvalid"
            ),
            "message": m,
            "field": p,
        }
        for p, m in errors
    ]
    details = {"name": name, "group": r.group, "kind": r.kind}
    return ApiStatus(422, "Invalid", f'{qualified} "{name}" is invalid: {listed}', causes, details)
