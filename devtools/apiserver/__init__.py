"""A local Kubernetes-shaped API server for tests and demos. NOT for production: no
authentication, no admission, no persistence, one process, everything in memory.

It speaks real HTTP that the official client talks to unchanged: resourceVersions, list
and watch (ADDED / MODIFIED / DELETED / BOOKMARK, 410 for compacted versions), the label
and field selectors the adapter uses, create / get / replace (409 on a stale version) /
merge-patch / delete, the status subresource, pods/eviction with PodDisruptionBudgets as
the API server applies them, Events and Leases.
"""
