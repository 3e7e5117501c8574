import random, threading, time
from structlog.testing import capture_logs
from agent.kube.backoff import BackoffArgs
from agent.kube.cache import Cache
from agent.kube.fetching import Selectors
from agent.kube.resources import PODS
from agent.kube.watching import Reflector, WatchArgs
from tests.cluster import RealCluster, AGENT_SA

def test_restart_410(kube: RealCluster):
    ns = kube.namespace("scr")
    node = kube.node(labels={"pool": ns})
    with kube.proxy() as proxy:
        api = kube.client(kube.token_kubeconfig(kube.token(AGENT_SA), proxy.url))
        cache = Cache()
        r = Reflector(api, PODS, cache, Selectors(field_selector=f"spec.nodeName={node}"),
                      WatchArgs(watch_timeout_seconds=60, backoff=BackoffArgs(initial=0.2, maximum=1)), random.Random(1))
        with capture_logs() as logs:
            t = threading.Thread(target=r.run, daemon=True); t.start()
            kube.wait(lambda: cache.synced(["Pod"]))
            time.sleep(3)
            print("rv before", r.resource_version)
            t0 = time.monotonic()
            kube.restart_apiserver()
            print("restart took", time.monotonic() - t0)
            time.sleep(15)
            r.stop(); t.join(5)
        for e in logs: print(e)
        for s in proxy.requests: print(s)
