"""What the controller's integration tests share: the CRDs as deploy/ ships them, and a
wait for a condition the controller's threads bring about."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

CRDS = Path(__file__).resolve().parents[2] / "deploy" / "crds"


def crds() -> list[dict[str, Any]]:
    """deploy/crds/*.yaml, to load into a dev server."""
    return [yaml.safe_load(p.read_text()) for p in sorted(CRDS.glob("*.yaml"))]


