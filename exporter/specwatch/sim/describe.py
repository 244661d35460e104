"""A scenario's description with its figures filled in from the model the simulator runs.

A description names break-evens as placeholders, never as typed numbers: ``{breakeven@64}`` is
the true break-even at batch 64 and the scenario's K, ``{breakeven@160:2}`` the same at K=2. They
are computed with the simulator's own step times (sim/steptime.py), the ones its truth and the
sidecar's documented crossings come from, so a description cannot contradict the table under it.
"""

from __future__ import annotations

import re

from specwatch.sim.scenario import Scenario
from specwatch.sim.simulator import Simulator

PLACEHOLDER = re.compile(r"\{breakeven@(\d+)(?::(\d+))?\}")


class DescriptionError(ValueError):
    """A placeholder the scenario cannot fill (no speculation, K = 0)."""


def describe(scenario: Scenario) -> str:
    """The description on one line, placeholders replaced by break-evens to two decimals."""
    text = " ".join(scenario.description.split())
    if not PLACEHOLDER.search(text):
        return text
    sim = Simulator(scenario)
    default_k = scenario.num_speculative_tokens or 0

    def fill(match: re.Match[str]) -> str:
        batch, k = int(match.group(1)), int(match.group(2) or default_k)
        if k <= 0:
            raise DescriptionError(f"{scenario.name}: {match.group(0)} needs a draft length K > 0")
        return f"{sim.timer.breakeven(float(batch), k):.2f}"

    return PLACEHOLDER.sub(fill, text)
