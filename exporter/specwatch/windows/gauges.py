"""Window values of an engine that exports its acceptance only as gauges (SGLang). Pure functions.

Such an engine sets each gauge to its own estimate over the batches since it last logged, and keeps
it while idle. A window's value of such a gauge is the mean of its readings at the window's polls
after an active interval: since the poll before, some counter of the route moved or some of these
gauges changed (the engine logged anew). The window's first poll closes the interval before the
window and is not read. A reading after an idle interval repeats an old estimate and is left out,
so an idle window has no value rather than a stale one; the running-requests gauge, held the same
way, gives the batch size by the same rule.

This is a time mean of the engine's running estimate, sampled once per poll: each reading weighs the
same, however many tokens its interval held, so it is not the window ratio a counter pair gives.
What no gauge holds (draft and accepted token counts, per-position rates) stays absent.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from itertools import pairwise

from specwatch.engines.series import Gauge
from specwatch.windows.window import Entry, WindowView

#: The key of gauge_means' batch size (the running-requests gauge, mean over engines).
BATCH = "batch_size"

#: The readings each gauge may take; outside them it is unset (SGLang starts at 0) or broken: skipped.
PLAUSIBLE: Mapping[str, tuple[float, float]] = {
    Gauge.ACCEPTANCE_RATE: (0.0, 1.0),
    Gauge.ACCEPTANCE_LENGTH: (1.0, 1025.0),
    Gauge.DRAFT_LENGTH: (1.0, 1024.0),
}


def _active(before: Entry, entry: Entry) -> bool:
    """Did the engine work between two polls: a counter moved, or a gauge was set anew."""
    totals = before.totals
    if any(value > totals.get(key, value) for key, value in entry.totals.items()):
        return True
    gauges = before.snapshot.gauges
    return any(gauges.get(name) != value for name, value in entry.snapshot.gauges.items())


def gauge_means(view: WindowView) -> dict[str, float]:
    """Per canonical gauge (and BATCH), the mean of its plausible readings at the window's active polls."""
    sums: dict[str, float] = {}
    counts: dict[str, int] = {}

    def add(name: str, value: float) -> None:
        sums[name] = sums.get(name, 0.0) + value
        counts[name] = counts.get(name, 0) + 1

    for before, entry in pairwise(view.entries):
        if not _active(before, entry):
            continue
        for name, value in entry.snapshot.gauges.items():
            low, high = PLAUSIBLE.get(name, (-math.inf, math.inf))
            if low <= value <= high:
                add(name, value)
        running = entry.snapshot.running
        if running:
            batch = sum(running.values()) / len(running)
            if math.isfinite(batch) and batch >= 0:
                add(BATCH, batch)
    return {name: total / counts[name] for name, total in sums.items()}
