"""charts/waterline through the real ``helm`` (built from its Go module by
``hack/cluster/build helm``) and deploy/ through ``kubectl kustomize``: read by
tests/unit/test_chart.py (rendering, lint, schema) and tests/integration/test_helm.py
(install, upgrade, uninstall on the real cluster).

Helm's own folders (config, cache, data) are kept under .cluster/helm, never in $HOME.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import yaml

from devtools.harness.cluster import BIN
from tests.need import need

ROOT = Path(__file__).resolve().parent.parent
CHART = ROOT / "charts" / "waterline"
DEPLOY = ROOT / "deploy"
HELM_HOME = ROOT / ".cluster" / "helm"
#: The labels Helm's objects carry and deploy/'s do not (templates/_helpers.tpl), and the
#: one kustomize adds (deploy/kustomization.yaml): left out when the two are compared.
HELM_LABELS = frozenset(
    {"helm.sh/chart", "app.kubernetes.io/instance", "app.kubernetes.io/version",
     "app.kubernetes.io/managed-by"}  # fmt: skip
)
Key = tuple[str, str, str]  # kind, namespace, name


def _tool(name: str) -> Path:
    path = BIN / name
    if not path.exists():
        need(f"{name} is not built: hack/cluster/build {name}")
    return path


def helm(
    *args: str, kubeconfig: Path | None = None, check: bool = True, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "HELM_CONFIG_HOME": str(HELM_HOME / "config"),
        "HELM_CACHE_HOME": str(HELM_HOME / "cache"),
        "HELM_DATA_HOME": str(HELM_HOME / "data"),
    }
    if kubeconfig is not None:
        env["KUBECONFIG"] = str(kubeconfig)
    done = subprocess.run(  # noqa: S603
        [str(_tool("helm")), *args], capture_output=True, text=True, timeout=timeout, env=env
    )
    if check and done.returncode != 0:
        raise AssertionError(f"helm {' '.join(args)}: {done.returncode}\n{done.stderr}")
    return done


_VALUES = tempfile.TemporaryDirectory(prefix="waterline-values-")


def values_file(values: Mapping[str, Any]) -> Path:
    """``values`` written to a YAML file (removed when the test run ends)."""
    text = yaml.safe_dump(dict(values))
    path = Path(_VALUES.name) / f"{hashlib.sha256(text.encode()).hexdigest()[:16]}.yaml"
    path.write_text(text)
    return path


def render_text(
    values: Mapping[str, Any] | None = None, *, release: str = "waterline",
    namespace: str = "waterline-system", check: bool = True,
) -> subprocess.CompletedProcess[str]:  # fmt: skip
    args = ["template", release, str(CHART), "--namespace", namespace, "--include-crds"]
    if values:
        args += ["--values", str(values_file(values))]
    return helm(*args, check=check)


def render(
    values: Mapping[str, Any] | None = None, *, release: str = "waterline",
    namespace: str = "waterline-system",
) -> list[dict[str, Any]]:  # fmt: skip
    """``helm template`` of the chart, CRDs included, as objects."""
    return _docs(render_text(values, release=release, namespace=namespace).stdout)


def kustomize(path: Path) -> list[dict[str, Any]]:
    """``kubectl kustomize path`` as objects."""
    done = subprocess.run(  # noqa: S603
        [str(_tool("kubectl")), "kustomize", str(path)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return _docs(done.stdout)


def _docs(text: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(text) if d]


def key(doc: Mapping[str, Any]) -> Key:
    meta = doc["metadata"]
    return doc["kind"], meta.get("namespace", ""), meta["name"]


def by_key(docs: list[dict[str, Any]]) -> dict[Key, dict[str, Any]]:
    out: dict[Key, dict[str, Any]] = {}
    for doc in docs:
        assert key(doc) not in out, f"rendered twice: {key(doc)}"
        out[key(doc)] = doc
    return out


def without_tool_labels(doc: Mapping[str, Any]) -> dict[str, Any]:
    """``doc`` without the labels of the tool that made it (Helm's or kustomize's)."""
    out = json.loads(json.dumps(doc))
    labels = out["metadata"].get("labels") or {}
    for label in HELM_LABELS:
        labels.pop(label, None)
    if "labels" in out["metadata"] and not labels:
        del out["metadata"]["labels"]
    return out


def differences(want: Any, got: Any, path: str = "") -> Iterator[str]:
    """Where two parsed objects differ, as ``path: want != got`` lines."""
    if isinstance(want, dict) and isinstance(got, dict):
        for k in sorted(set(want) | set(got), key=str):
            where = f"{path}.{k}" if path else str(k)
            if k not in got:
                yield f"{where}: missing from the chart"
            elif k not in want:
                yield f"{where}: only in the chart ({got[k]!r})"
            else:
                yield from differences(want[k], got[k], where)
    elif isinstance(want, list) and isinstance(got, list) and len(want) == len(got):
        for i, (w, g) in enumerate(zip(want, got, strict=True)):
            yield from differences(w, g, f"{path}[{i}]")
    elif want != got:
        yield f"{path}: deploy/ has {_short(want)}, the chart {_short(got)}"


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) < 200 else text[:200] + "..."


def name(k: Key) -> str:
    kind, namespace, obj = k
    return f"{kind} {namespace}/{obj}" if namespace else f"{kind} {obj}"


def compare(want: list[dict[str, Any]], got: list[dict[str, Any]]) -> list[str]:
    """Object by object (kind, namespace, name), the tools' labels left out: every
    difference between deploy/'s objects (``want``) and the chart's (``got``), named."""
    wanted, rendered = by_key(want), by_key(got)
    problems = [f"{name(k)}: in deploy/, not rendered by the chart" for k in sorted(set(wanted) - set(rendered))]
    problems += [f"{name(k)}: rendered by the chart, not in deploy/" for k in sorted(set(rendered) - set(wanted))]
    for k in sorted(set(wanted) & set(rendered)):
        problems += [f"{name(k)}: {line}" for line in
                     differences(without_tool_labels(wanted[k]), without_tool_labels(rendered[k]))]  # fmt: skip
    return problems
