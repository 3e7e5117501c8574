"""The Kubernetes adapter: one verb a module, as in kopf.

``client`` builds the transport (the official client's ApiClient, raw JSON only),
``errors`` turns API failures into our exceptions, ``fetching`` lists, ``watching`` keeps a
list+watch loop alive, ``cache`` holds slim records, ``nodeview`` is what the node agent
reads, ``evicting``, ``patching``, ``creating`` and ``events`` write, ``leases`` elects a
leader. The tests run it against a real kube-apiserver (devtools/harness/cluster.py).

Nothing here imports the agent's engines, the controller or ``devtools``, and
``kubernetes.client`` is imported lazily (inside ``client``), never when ``agent`` is
imported.
"""
