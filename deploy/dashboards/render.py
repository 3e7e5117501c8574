"""Write waterline-dashboard.yaml, the ConfigMap that carries waterline.json.

Run after editing waterline.json: ``python deploy/dashboards/render.py``
(tests/unit/test_dashboards.py fails while the two differ), then ``make chart`` for the
Helm chart's copy of the JSON (tests/unit/test_chart.py fails while it differs).

The ConfigMap follows the Grafana sidecar convention (label ``grafana_dashboard: "1"``;
the kube-prometheus-stack and grafana charts' dashboard sidecar loads every ConfigMap with
that label). The ``grafana_folder`` annotation puts it in a Waterline folder where the
sidecar has folderAnnotation set, and is ignored elsewhere.
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
DASHBOARD = HERE / "waterline.json"
CONFIGMAP = HERE / "waterline-dashboard.yaml"

HEADER = """\
# Generated from waterline.json by render.py: edit the JSON, then run
# `python deploy/dashboards/render.py`. Loaded by the Grafana dashboard sidecar (label
# grafana_dashboard: "1"); kubectl apply --server-side avoids the 256 KiB
# last-applied-configuration annotation limit if the dashboard ever grows past it.
apiVersion: v1
kind: ConfigMap
metadata:
  name: waterline-dashboard
  namespace: waterline-system
  labels:
    grafana_dashboard: "1"
    app.kubernetes.io/name: waterline-dashboard
    app.kubernetes.io/part-of: waterline
  annotations:
    grafana_folder: Waterline
data:
  waterline.json: |
"""


def render(dashboard_text: str) -> str:
    body = "".join(f"    {line}\n" if line else "\n" for line in dashboard_text.splitlines())
    return HEADER + body


def main() -> int:
    CONFIGMAP.write_text(render(DASHBOARD.read_text()))
    print(f"wrote {CONFIGMAP}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
