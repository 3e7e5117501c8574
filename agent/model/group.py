"""The API group and version of every Waterline custom resource (DESIGN.md: group
``qos.waterline.io``, version ``v1alpha1``), defined once; the CRDs, the adapter, the
local objects and the model all read them from here."""

from __future__ import annotations

GROUP = "qos.waterline.io"
VERSION = "v1alpha1"
#: ``apiVersion`` of a Waterline object.
API_VERSION = f"{GROUP}/{VERSION}"
