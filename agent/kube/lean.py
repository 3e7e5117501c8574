"""The official client's transport and kubeconfig loaders, without its models.

``from kubernetes import client, config`` runs ``kubernetes/__init__.py`` and
``kubernetes/client/__init__.py``, which import every API class and every one of the
~800 typed models: about 39 MiB of a cluster-mode agent's ~91 MiB, for code it never
runs (requests go through ``ApiClient.call_api`` with ``_preload_content=False`` and are
decoded as plain JSON, ``agent.kube.client``). What the agent does use is small:
``Configuration``, ``ApiClient``, ``rest`` and ``exceptions`` of ``kubernetes.client``,
and ``kubernetes.config`` (kubeconfig, in-cluster config, exec plugins, token refresh).

``load()`` imports just those. The three packages in the way (``kubernetes``,
``kubernetes.client``, ``kubernetes.client.models``) are put in ``sys.modules`` as
*lazy* packages: found where the client is installed, their submodules importable, their
``__init__`` not run. The first read of a name the lazy package does not hold yet (a
model class, ``CoreV1Api``, ``kubernetes.watch``) runs the real ``__init__`` into it, so
any other code in the process that wants the whole client still gets it, only later.
Where ``kubernetes`` was imported already, the real modules are used as they are.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import sys
import threading
import types
from dataclasses import dataclass
from typing import Any

_LOCK = threading.RLock()  # a package's __init__ can read another lazy package's names


class _LazyPackage(types.ModuleType):
    """A package whose ``__init__`` runs at the first read of a name it lacks."""

    def __getattr__(self, name: str) -> Any:
        with _LOCK:
            spec = self.__dict__.get("_lazy_spec")
            if spec is not None and spec.loader is not None:
                del self.__dict__["_lazy_spec"]
                spec.loader.exec_module(self)
        try:
            return self.__dict__[name]
        except KeyError:
            raise AttributeError(f"module {self.__name__!r} has no attribute {name!r}") from None


def _lazy(name: str, parent_path: list[str] | None) -> None:
    """Put package ``name`` in sys.modules without running its ``__init__``."""
    if name in sys.modules:
        return
    leaf = name.rsplit(".", 1)[-1]
    if parent_path is None:
        spec = importlib.util.find_spec(name)
    else:
        spec = importlib.machinery.PathFinder.find_spec(name, parent_path)
    if spec is None or spec.loader is None or spec.submodule_search_locations is None:
        raise ImportError(f"no package {name}")
    module = importlib.util.module_from_spec(spec)
    module.__class__ = _LazyPackage
    module.__dict__["_lazy_spec"] = spec
    sys.modules[name] = module
    if "." in name:
        setattr(sys.modules[name.rsplit(".", 1)[0]], leaf, module)


@dataclass(frozen=True)
class Client:
    """What ``agent.kube.client`` uses of the official client."""

    Configuration: Any
    ApiClient: Any
    config: Any  # the kubernetes.config package


def load() -> Client:
    """The client's transport and kubeconfig loaders (see the module docstring)."""
    with _LOCK:
        if "kubernetes" not in sys.modules:
            _lazy("kubernetes", None)
            base = list(sys.modules["kubernetes"].__path__)
            _lazy("kubernetes.client", base)
            _lazy("kubernetes.client.models", list(sys.modules["kubernetes.client"].__path__))
    # In the order that keeps every ``from kubernetes.client import X`` below finding X
    # already there (else the lazy package would run its __init__ to look for it).
    client = importlib.import_module("kubernetes.client")
    importlib.import_module("kubernetes.client.exceptions")
    configuration = importlib.import_module("kubernetes.client.configuration")
    importlib.import_module("kubernetes.client.rest")
    api_client = importlib.import_module("kubernetes.client.api_client")
    if isinstance(client, _LazyPackage):
        for name in ("Configuration", "ApiClient"):
            if name not in client.__dict__:
                setattr(client, name, getattr(configuration if name == "Configuration"
                                              else api_client, name))
    config = importlib.import_module("kubernetes.config")
    return Client(configuration.Configuration, api_client.ApiClient, config)
