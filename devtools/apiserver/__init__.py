"""A Kubernetes API server in one process, for a workstation and for tests
(`waterline dev-apiserver`, docs/dev-apiserver.md). NOT for production: no authentication,
no persistence, one process, everything in memory.

kubectl and the official client talk to it unchanged: discovery (legacy and aggregated),
OpenAPI v3, resourceVersions, list and watch (ADDED / MODIFIED / DELETED / BOOKMARK, 410
for compacted versions), label and field selectors, the Table format, create / get /
replace (409 on a stale version) / merge, strategic merge and JSON patch / delete, the
status subresource, pods/eviction with PodDisruptionBudgets as the API server applies
them, CustomResourceDefinitions served with their schemas, Events and Leases.

Modules, in the order a request meets them: ``server`` (the process), ``handler`` (HTTP:
bodies, watches), ``endpoints`` (discovery, OpenAPI, version), ``api`` (resource verbs),
``admission`` (field validation, ``schema`` for custom resources, ``crds``), ``store``
(objects, versions, history); ``catalog`` says what is served.
"""
