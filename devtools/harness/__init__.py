"""What the tests and the benchmarks share to run the real thing: the real cluster
(``cluster``), a fault-injecting proxy in front of it (``faultproxy``), a node agent's
pool of namespace, kwok nodes and cgroups on it (``agent_env``, ``fake_cgroups``), the
one ``wait_until`` (``waiting``) and the agent's log read by event code (``logs``).

It lives here, not under tests/, so that bench/ never imports the tests (an import-linter
contract says so). It imports no pytest: where the cluster cannot be had it raises
ClusterError, and the tests' fixture turns that into tests/need.py's ``need()``.
"""
