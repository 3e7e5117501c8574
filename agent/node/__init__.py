"""The node agent: analyzer, the per-node tick, the live loop and its in-cluster side.

Its vocabulary (metric registry, policies, analysis types) is in ``agent.model``.
"""
