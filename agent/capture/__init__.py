"""`waterline capture`: record a live node into a scenario that `waterline simulate` replays
(DESIGN.md "Capture and replay").

The agent's own loop runs (the same collectors, decision core and actuators as `waterline
agent`) with one more publisher, the recorder: each tick becomes one sample (node metrics,
per-pod usage, ``capped: true`` with the cap for pods throttled when measured), and the
objects the agent decided on become the scenario's objects.

* ``recorder``: ticks -> samples, and the scenario document;
* ``manifests``: the raw objects (from the ``--objects`` files, or listed from the API);
* ``caps``: where the caps in force when a figure was measured come from;
* ``command``: the CLI.
"""
