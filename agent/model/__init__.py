"""The domain model: Kubernetes objects parsed once, at the edge, into slim frozen records,
and the node agent's vocabulary (metric registry, policies and actions, analysis results,
eviction results, agent settings) that the analyzer and the executors both speak.

Imports nothing of the layers above it (agent.node, agent.cluster, agent.kube,
agent.simulate, executors, collectors); ``lint-imports`` checks it.
"""
