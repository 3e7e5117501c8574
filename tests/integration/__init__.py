"""Integration tests: real cgroups, processes and sockets (``pytest -m integration``)."""
