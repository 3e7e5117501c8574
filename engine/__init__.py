"""The node's decision, pure: what one tick decides from plain data and the node's memory.

``engine.decide`` is the whole of it (the sample analyzed into waterlines and gaps,
``engine.analyzer``; the actions planned, ``engine.plan`` and its ``engine.phases``, on a
working copy of the memory, ``engine.state``), yielding what it wants done as intents
(``engine.intents``) and sent the answers. Nothing here reads a file, a clock or the
network, logs or counts: an import-linter contract (pyproject.toml) forbids it, so it
runs the same live, in `simulate`, in the benchmarks and in tests. The shell that
carries the intents out, and the writers, are ``executors``.
"""
