"""What the tests compare between fleet mode and the sidecar (or a replay of what Prometheus
scraped), and how: the same number within 1 %, absent only where the other is absent too."""

from __future__ import annotations

import math

#: The window values both paths derive from the counters and histograms they read.
WINDOW_VALUES = (
    "acceptance_rate",
    "mean_acceptance_length",
    "draft_length",
    "batch_size",
    "itl_p50_seconds",
    "itl_p99_seconds",
)
#: Those and what the cost model makes of them.
PRICED_VALUES = (*WINDOW_VALUES, "breakeven_acceptance_rate", "expected_speedup")


def agree(a: float | None, b: float | None) -> bool:
    """Within 1 % of each other (and 1e-12 of zero), or both absent."""
    if a is None or b is None:
        return a is None and b is None
    return math.isclose(a, b, rel_tol=0.01, abs_tol=1e-12)
