"""The domain model: Kubernetes objects parsed once, at the edge, into slim frozen records."""
