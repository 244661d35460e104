"""Poll a sidecar from the simulation in virtual time, with no HTTP: the loop the flow goldens, the
benchmarks and the end-to-end tests share, so that each reads a scenario's faults the same way.

    for t, evaluations in simulated_polls(Simulator(scenario, seed=7), pipeline, interval=5.0):
        ...

The sink is anything with the sidecar pipeline's ingest / ingest_error / evaluate: `sim/` may not
import the running exporter (the import contracts), so the pipeline is described here, not named.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Protocol, TypeVar

from specwatch.sim.simulator import Simulator

SCRAPE_SECONDS = 0.01  # the scrape duration each simulated poll reports
FAULT_REASON = "http_status"  # a poll during a scenario fault fails as a bad HTTP answer would

Evaluation_co = TypeVar("Evaluation_co", covariant=True)


class PollSink(Protocol[Evaluation_co]):
    """What a poll feeds: the sidecar pipeline's three calls."""

    def ingest(self, target: str, t: float, text: str, duration: float | None = None) -> object: ...

    def ingest_error(self, target: str, t: float, reason: str, duration: float | None = None) -> None: ...

    def evaluate(self, now: float) -> Sequence[Evaluation_co]: ...


def simulated_polls(
    simulator: Simulator,
    sink: PollSink[Evaluation_co],
    *,
    interval: float,
    count: int | None = None,
    target: str = "vllm",
) -> Iterator[tuple[float, Sequence[Evaluation_co]]]:
    """Poll at interval, 2 * interval, ... `count` times (default: every poll within the scenario).

    Each poll advances the simulator to its time t and ingests the exposition, or a failed poll
    while a scenario fault is active at t, then evaluates; yields (t, the evaluations at t). The
    generator runs one poll per step, so a caller reads the sink's state between polls."""
    if interval <= 0:
        raise ValueError("interval must be > 0")
    polls = int(simulator.scenario.duration // interval) if count is None else count
    for i in range(1, polls + 1):
        t = interval * i  # a product, not a running sum: poll times do not drift
        simulator.advance_to(t)
        if simulator.scenario.faults_at(t):
            sink.ingest_error(target, t, FAULT_REASON, duration=SCRAPE_SECONDS)
        else:
            sink.ingest(target, t, simulator.render(), duration=SCRAPE_SECONDS)
        yield t, sink.evaluate(t)
