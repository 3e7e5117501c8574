"""Act on the world: sorters, the precise-execution engine, and the actuators behind it."""
