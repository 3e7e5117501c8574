"""Read the world: cgroup v1/v2, /proc and psutil, PSI, and the pod -> cgroup mapping."""
