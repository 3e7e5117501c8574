"""What a write goes through before it is stored, as on a real server: field validation
(``?fieldValidation=Strict|Warn|Ignore``, default Warn: unknown and duplicate fields are
refused with 400, reported as ``Warning`` headers, or let pass), and for a custom resource
its CRD's schema (pruned, defaulted, validated: 422 with every violation).

``Admission`` is made per request and collects the warnings the response carries.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from devtools.apiserver import crds, fields, schema
from devtools.apiserver.catalog import ApiResource
from devtools.apiserver.errors import ApiStatus, invalid

DIRECTIVES = ("Strict", "Warn", "Ignore")


@dataclass
class Admission:
    directive: str = "Warn"
    #: Keys a JSON body repeated (the parser found them; Strict refuses them).
    duplicates: list[str] = field(default_factory=list)
    #: False: a custom resource that breaks its schema is stored with Warning headers
    #: instead of refused (tests that seed objects a real server would refuse).
    refuse_invalid: bool = True
    warnings: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.directive not in DIRECTIVES:
            raise ApiStatus(
                400,
                "BadRequest",
                f"fieldValidation: must be one of {', '.join(DIRECTIVES)}, got {self.directive!r}",
            )

    def __call__(
        self, info: ApiResource, new: dict[str, Any], old: Mapping[str, Any] | None
    ) -> dict[str, Any]:
        name = str((new.get("metadata") or {}).get("name", ""))
        unknown = fields.unknown_fields(new.get("metadata"), "V1ObjectMeta", "metadata")
        if info.schema is not None:
            new, report = schema.check(new, info.schema, old)
            unknown += report.unknown
            self.warnings += [
                f"validation rule not evaluated by the dev server: {r}"
                for r in report.skipped_rules
            ]
            if report.errors and self.refuse_invalid:
                raise invalid(info, name, report.errors)
            self.warnings += [f"{path}: {message}" for path, message in report.errors]
        elif info.model:
            unknown += [
                p for p in fields.unknown_fields(new, info.model) if not p.startswith("metadata.")
            ]
        self._unknown(info, unknown + [f"duplicate field {d!r}" for d in self.duplicates])
        if info.resource.kind == "CustomResourceDefinition" and info.resource.group == crds.GROUP:
            new = crds.admit(info, new)
        return new

    def _unknown(self, info: ApiResource, paths: list[str]) -> None:
        if not paths or self.directive == "Ignore":
            return
        described = [p if p.startswith("duplicate") else f'unknown field "{p}"' for p in paths]
        if self.directive == "Warn":
            self.warnings += described
            return
        r = info.resource
        raise ApiStatus(
            400,
            "BadRequest",
            f'{r.kind} in version "{r.version}" cannot be handled as a {r.kind}: strict decoding error: {", ".join(described)}',
        )
