"""`waterline simulate`: the product's decision code on a scenario, with simulated actuators."""
