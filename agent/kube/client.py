"""The transport: the official client's ApiClient used as a JSON-over-HTTP layer.

We call ``ApiClient.call_api`` with ``_preload_content=False`` and decode the JSON
ourselves, so no typed model object is ever built (at 150,000 pods those cost gigabytes
and seconds of CPU). Authentication, TLS, exec plugins and token refresh stay the
client's. Every request carries a client-side timeout; urllib3's own retries are off so
that our backoff (with jitter) is the only retry policy.

Two optional guards travel with a ``KubeApi``: its program's ``AccessTable``
(``agent.kube.access``: an undeclared call is refused before it is sent), and a time
bound (``bounded``): every request of a bounded API times out on the client when the
bound is up *and* carries the API server's own ``timeout`` parameter, so the server
abandons (does not commit) a write it could not finish in time. The controller bounds
each leader write by the time left before its renew deadline.

The client's transport is imported here, lazily, when an API is built, and without its
typed models and API classes (``agent.kube.lean``: 39 MiB the agent never used).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from agent.errors import InvalidObject
from agent.kube.errors import KubeError, api_errors

if TYPE_CHECKING:
    from agent.kube.access import AccessTable

JSON = "application/json"
MERGE_PATCH = "application/merge-patch+json"

Query = Sequence[tuple[str, str]]


@dataclass(frozen=True, slots=True)
class ClientArgs:
    """Client-side timeouts in seconds (connect, read) and the connection pool size."""

    connect_timeout: float = 5.0
    read_timeout: float = 30.0
    pool_size: int = 8

    def validate(self) -> ClientArgs:
        for name in ("connect_timeout", "read_timeout"):
            if getattr(self, name) <= 0:
                raise InvalidObject(
                    "ClientArgs", "", name, f"must be > 0, got {getattr(self, name)}"
                )
        if self.pool_size < 1:
            raise InvalidObject(
                "ClientArgs", "", "pool_size", f"must be >= 1, got {self.pool_size}"
            )
        return self


class KubeApi:
    """Raw JSON requests against one API server. Thread-safe (urllib3 pool)."""

    def __init__(
        self,
        api_client: Any,
        args: ClientArgs | None = None,
        access: AccessTable | None = None,
        bound: float | None = None,
    ) -> None:
        self.api_client = api_client
        self.args = (args or ClientArgs()).validate()
        self.access = access
        #: Seconds every request of this API may take, client and server side (None: the
        #: client's timeouts only).
        self.bound = bound

    def bounded(self, seconds: float) -> KubeApi:
        """The same connection, every request of which ends within ``seconds``."""
        if seconds <= 0:
            raise ValueError(f"a time bound must be > 0, got {seconds}")
        return KubeApi(self.api_client, self.args, self.access, seconds)

    @property
    def host(self) -> str:
        return str(self.api_client.configuration.host)

    def _call(
        self,
        method: str,
        path: str,
        query: Query | None,
        body: object,
        content_type: str,
        timeout: tuple[float, float] | None,
    ) -> Any:
        if self.access is not None:
            self.access.check(method, path, query or ())
        headers = {"Accept": JSON}
        if body is not None:
            headers["Content-Type"] = content_type
        if self.bound is not None and timeout is None:
            # The server's own deadline (Go duration) keeps it from committing late.
            query = [*(query or ()), ("timeout", f"{max(1, int(self.bound * 1000))}ms")]
            timeout = (min(self.args.connect_timeout, self.bound), self.bound)
        with api_errors():
            return self.api_client.call_api(
                path,
                method,
                query_params=list(query or ()),
                header_params=headers,
                body=body,
                auth_settings=["BearerToken"],
                _return_http_data_only=True,
                _preload_content=False,
                _request_timeout=timeout or (self.args.connect_timeout, self.args.read_timeout),
            )

    def request(
        self,
        method: str,
        path: str,
        *,
        query: Query | None = None,
        body: object = None,
        content_type: str = JSON,
        timeout: tuple[float, float] | None = None,
    ) -> dict[str, Any]:
        """One request; the decoded JSON object of a 2xx answer, else a KubeError."""
        response = self._call(method, path, query, body, content_type, timeout)
        try:
            with api_errors():
                data = response.data
        finally:
            response.release_conn()
        try:
            decoded = json.loads(data) if data else {}
        except ValueError as err:
            raise KubeError(f"{method} {path}: malformed JSON answer: {err}") from None
        if not isinstance(decoded, dict):
            raise KubeError(f"{method} {path}: expected a JSON object")
        return decoded

    def stream(self, path: str, query: Query, read_timeout: float) -> WatchStream:
        """Open a watch stream (the request is sent and its headers read here; an error
        status raises at once). Iterate it for lines, one JSON event each."""
        return WatchStream(
            self._call("GET", path, query, None, JSON, (self.args.connect_timeout, read_timeout))
        )

    def close(self) -> None:
        self.api_client.close()


def build_api(
    kubeconfig: str | None = None,
    context: str | None = None,
    args: ClientArgs | None = None,
    access: AccessTable | None = None,
) -> KubeApi:
    """An API from a kubeconfig path, else in-cluster config (service account), else
    ``$KUBECONFIG`` / ``~/.kube/config``."""
    import urllib3

    from agent.kube import lean

    kube = lean.load()
    config = kube.config
    configuration = kube.Configuration()
    try:
        if kubeconfig is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
            config.load_incluster_config(client_configuration=configuration)
        else:
            with api_errors():
                config.load_kube_config(
                    config_file=kubeconfig, context=context, client_configuration=configuration
                )
    except (OSError, KubeError):
        raise
    except Exception as err:  # noqa: BLE001 - the loader raises ConfigException, TypeError,
        # KeyError... on a bad file; every command reports a ValueError in one line
        where = kubeconfig or "in-cluster config, $KUBECONFIG or ~/.kube/config"
        what = str(err) if isinstance(err, config.ConfigException) else f"{type(err).__name__}: {err}"
        raise ValueError(f"cannot load the kubeconfig ({where}): {what}") from None
    args = (args or ClientArgs()).validate()
    configuration.retries = urllib3.Retry(
        total=0, connect=0, read=0, redirect=0, status=0, raise_on_redirect=False
    )
    configuration.connection_pool_maxsize = args.pool_size
    api_client = kube.ApiClient(configuration)
    api_client.user_agent = "waterline/0.1.0"
    return KubeApi(api_client, args, access)


class WatchStream:
    """The lines of an open watch response. A dropped connection or a read timeout
    raises KubeUnreachable. ``close`` may be called from another thread to stop a reader
    blocked on a quiet stream."""

    def __init__(self, response: Any) -> None:
        self.response = response

    def __iter__(self) -> Iterator[bytes]:
        pending = b""
        try:
            with api_errors():
                for chunk in self.response.stream(amt=None, decode_content=True):
                    pending += chunk
                    while b"\n" in pending:
                        line, pending = pending.split(b"\n", 1)
                        if line.strip():
                            yield line
            if pending.strip():
                yield pending
        finally:
            self.close()

    def close(self) -> None:
        shutdown = getattr(self.response, "shutdown", None)
        try:
            if shutdown is not None:
                shutdown()
            self.response.close()
            self.response.release_conn()
        except Exception:  # closing a broken connection: nothing left to do
            pass
