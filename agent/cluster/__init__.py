"""The cluster controller: arbitration, migration, defragmentation, reservations and preemption."""
