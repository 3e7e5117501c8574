"""`waterline simulate SCENARIO --policies DIR`: replay a scenario (a recorded day, from
`waterline capture`) with other NodeQOSEnsurancePolicies and AvoidanceActions.

``DIR`` is a folder (read recursively, ``*.yaml``, ``*.yml``, ``*.json``) or one file, of
manifests in any of the shapes the agent's ``--objects`` takes. Its policies and actions
replace the scenario's, all of them: what the new policy set would have done on that day.
Other kinds in it are ignored (and named on stderr by the command), so a folder that also
holds other manifests can be pointed at as is.

Invalid input is refused the way an invalid scenario is: one error naming the file, the
object and the field (exit 2). A folder without a single policy is refused too: replaying
with no rule at all is surely a wrong path.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from agent.documents import DocumentError
from agent.errors import InvalidObject
from agent.model.policy import ACTION_KIND, POLICY_KIND, load_policies
from agent.node.local import documents_objects, object_files, read_objects_file
from agent.scenario import Scenario

KINDS = (POLICY_KIND, ACTION_KIND)


def _files(path: Path) -> list[str]:
    if not path.is_file() and not path.is_dir():
        raise InvalidObject("--policies", str(path), "", "no such file or folder")
    return object_files([str(path)])


def read_policies(path: str | Path) -> tuple[dict[str, list[Mapping[str, Any]]], Counter[str]]:
    """The policies and actions under ``path`` by kind, and a count of the other kinds."""
    found: dict[str, list[Mapping[str, Any]]] = {kind: [] for kind in KINDS}
    ignored: Counter[str] = Counter()
    for file in _files(Path(path)):
        try:
            docs = read_objects_file(file)
        except (OSError, DocumentError) as err:
            first = str(err).splitlines()[0] if str(err) else type(err).__name__
            raise InvalidObject("--policies", file, "", f"cannot read: {first}") from None
        for index, raw in enumerate(documents_objects(docs)):
            kind = raw.get("kind") if isinstance(raw, dict) else None
            if not isinstance(kind, str):
                raise InvalidObject("--policies", file, f"[{index}]",
                                    f"is not a manifest with a kind, got {str(raw)[:60]}")  # fmt: skip
            if kind in found:
                found[kind].append(raw)
            else:
                ignored[kind] += 1
    if not found[POLICY_KIND]:
        raise InvalidObject("--policies", str(path), "", f"holds no {POLICY_KIND}")
    policies = load_policies(found[POLICY_KIND], found[ACTION_KIND], strict=True)
    if policies.errors:
        raise policies.errors[0]
    return found, ignored


def replace_policies(scenario: Scenario, found: Mapping[str, list[Mapping[str, Any]]]) -> None:
    """Put ``found``'s policies and actions in place of the scenario's."""
    for kind in KINDS:
        scenario.store.raw[kind] = list(found.get(kind, []))
