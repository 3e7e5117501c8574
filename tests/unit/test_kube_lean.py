"""agent.kube.lean: the client's transport without its models, and the whole client
still there for whoever asks for it. Each case runs in a fresh interpreter (the test
process may have imported kubernetes already, and an import cannot be undone)."""

from __future__ import annotations

import subprocess
import sys

import pytest


def _run(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_load_imports_no_model_and_no_api_class() -> None:
    out = _run(
        "import sys\n"
        "from agent.kube import lean\n"
        "k = lean.load()\n"
        "api = k.ApiClient(k.Configuration())\n"
        "print(sum(m.startswith('kubernetes.client.models.') for m in sys.modules),"
        " sum(m.startswith('kubernetes.client.api.') for m in sys.modules),"
        " type(api).__module__, hasattr(k.config, 'load_kube_config'))\n"
    )
    assert out == "0 0 kubernetes.client.api_client True"


@pytest.mark.parametrize("ask", ["from kubernetes import client; print(client.V1Pod.__name__)",
                                 "import kubernetes.client as c; print(c.CoreV1Api.__name__)",
                                 "import kubernetes; print(kubernetes.watch.Watch.__name__)",
                                 "from kubernetes.client.models import V1Node; print(V1Node.__name__)"])
def test_the_whole_client_is_there_when_asked_for_after(ask: str) -> None:
    out = _run(f"from agent.kube import lean\nlean.load()\n{ask}\n")
    assert out in ("V1Pod", "CoreV1Api", "Watch", "V1Node")


def test_a_client_imported_before_is_used_as_it_is() -> None:
    out = _run(
        "import kubernetes.client as before\n"
        "from agent.kube import lean\n"
        "k = lean.load()\n"
        "print(k.ApiClient is before.ApiClient, k.Configuration is before.Configuration)\n"
    )
    assert out == "True True"
