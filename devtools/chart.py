"""`make chart` (``python -m devtools.chart``): the only writer of what the install has in
more than one place: into charts/waterline/ what Helm takes verbatim from deploy/, the
chart's version from pyproject.toml, and RBAC rules from the code's access tables.

deploy/ and the chart are one install written twice: the templated objects are written by
hand on both sides and proven equal by rendering (tests/unit/test_chart.py: ``helm
template`` with default values is ``kubectl kustomize deploy/``, object by object); what
Helm does not template is copied here, never edited in the chart:

* the CRDs (Helm installs crds/ as they are, before the templates);
* the Grafana dashboard's JSON and the alert rules, read by the chart's templates as data
  (``.Files.Get``): their ``{{ $labels.node }}`` are Grafana's and Prometheus' templates;
* the CRDs again into ``agent/crds/``, shipped in the package: ``waterline simulate`` and
  the agent's local mode refuse a field the cluster would refuse by the same schemas
  (agent/model/schema.py);
* Chart.yaml's ``version`` and ``appVersion``: pyproject.toml's version, so the chart of a
  release installs that release's image.
* the ``rules:`` of every Role and ClusterRole, in deploy/rbac.yaml and in the chart's
  RBAC templates alike, from the programs' access tables (devtools/rbac.py): RBAC is
  written once, in code.

``--check`` writes nothing and exits 1 naming each file that differs (the unit test runs
the same comparison).
"""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

from devtools import rbac

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy"
CHART = ROOT / "charts" / "waterline"
#: The package's copy of the CRDs (agent/model/schema.py reads them).
PACKAGE_CRDS = ROOT / "agent" / "crds"
#: chart file -> the deploy/ file it is a copy of.
COPIES: dict[str, str] = {
    **{f"crds/{p.name}": f"crds/{p.name}" for p in sorted((DEPLOY / "crds").glob("*.yaml"))},
    "files/dashboards/waterline.json": "dashboards/waterline.json",
    "files/prometheus/rules.yaml": "prometheus/rules.yaml",
    "files/prometheus/controller-rules.yaml": "prometheus/controller-rules.yaml",
}
#: The RBAC files whose rules are written from the access tables (devtools/rbac.py).
RBAC_FILES = (DEPLOY / "rbac.yaml", CHART / "templates" / "rbac-agent.yaml",
              CHART / "templates" / "rbac-controller.yaml")  # fmt: skip
_VERSION_LINE = re.compile(r'^(version|appVersion): .*$', re.MULTILINE)


def project_version() -> str:
    version: str = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    return version


def chart_yaml(text: str, version: str) -> str:
    """Chart.yaml's text with its version and appVersion set to ``version``."""
    return _VERSION_LINE.sub(
        lambda m: f'{m[1]}: {version}' if m[1] == "version" else f'{m[1]}: "{version}"', text
    )


def wanted() -> dict[Path, str]:
    """Every file `make chart` owns -> the text it must have."""
    files = {CHART / dst: (DEPLOY / src).read_text() for dst, src in COPIES.items()}
    files.update({PACKAGE_CRDS / p.name: p.read_text() for p in sorted((DEPLOY / "crds").glob("*.yaml"))})
    chart = CHART / "Chart.yaml"
    files[chart] = chart_yaml(chart.read_text(), project_version())
    for path in RBAC_FILES:
        files[path] = rbac.rewrite(path.read_text(), str(path.relative_to(ROOT)))
    return files


def stale() -> list[Path]:
    """The chart files that differ from what `make chart` writes, and CRDs in the chart
    that deploy/ no longer has."""
    out = [p for p, text in wanted().items() if not p.exists() or p.read_text() != text]
    owned = set(wanted())
    out += [p for p in _crd_copies() if p not in owned]
    return out


def _crd_copies() -> list[Path]:
    return sorted((CHART / "crds").glob("*")) + sorted(PACKAGE_CRDS.glob("*"))


def main(argv: list[str]) -> int:
    if argv == ["--check"]:
        for path in stale():
            print(f"{path.relative_to(ROOT)} differs from deploy/ or pyproject.toml: run make chart")
        return 1 if stale() else 0
    if argv:
        print("usage: python -m devtools.chart [--check]", file=sys.stderr)
        return 2
    for path in _crd_copies():
        if path not in wanted():
            path.unlink()
            print(f"removed {path.relative_to(ROOT)}")
    for path, text in wanted().items():
        if not path.exists() or path.read_text() != text:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            print(f"wrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
