"""The one tolerance for comparing computed figures (cores, bytes, percent, tokens).

Gaps, caps and token counts are sums and differences of floats: two figures closer than
``EPSILON`` are the same figure, so a gap of 1e-12 is closed and a cap 1e-12 under its
ceiling is at the ceiling. One constant, so every comparison agrees with the others.
"""

from __future__ import annotations

EPSILON = 1e-9
