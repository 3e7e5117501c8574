"""Benchmarks: `make bench` (python -m bench) prints figures; nothing here asserts timings."""
