"""The node agent: metric registry, policies, analyzer, the per-node tick and the live loop."""
