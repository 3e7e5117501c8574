"""The phases of a node's tick, in the order the engine runs them (``engine.plan``):
``caps.reconcile_caps``, ``isolation.take_back_quota``, ``evict.evict``,
``caps.throttle_down``, ``caps.throttle_up``, ``isolation.idle_class``,
``isolation.quota_burst``, ``isolation.cpu_burst``, ``batch.batch_capacity``. A new kind of act is a new phase module
and one more entry in ``engine.plan.PHASES``."""
