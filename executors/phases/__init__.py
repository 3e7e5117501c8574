"""The phases of a node's tick, in the order the engine runs them (``executors.engine``):
``caps.reconcile_caps``, ``evict.evict``, ``caps.throttle_down``, ``caps.throttle_up``.
A new kind of act (an idle class, CPU burst) is a new phase module and one more entry in
``executors.engine.PHASES``."""
