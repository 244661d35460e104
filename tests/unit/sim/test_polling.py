"""The simulated poll loop: polls at multiples of the interval, a scenario fault read as a failed
poll at its times, the exposition rendered at the poll time, the evaluations made at each poll."""

from __future__ import annotations

import pytest

from specwatch import sim
from specwatch.sidecar.pipeline import Pipeline
from specwatch.sim.polling import simulated_polls
from specwatch.sim.scenario import parse_scenario
from support.builders import pod_scenario, scenario_config

# 40 s of one pod; its endpoint answers HTTP 500 from 10 s until 20 s.
SCENARIO = parse_scenario({**pod_scenario(4, "40s"), "faults": [{"at": "10s", "duration": "10s", "kind": "http_500"}]})


class WatchedPipeline(Pipeline):
    """The sidecar's pipeline, noting each call the polls make before it runs it."""

    def __init__(self) -> None:
        super().__init__(scenario_config(SCENARIO, poll_interval=5.0, windows=("1m",)))
        self.calls: list[tuple[str, str, float, str]] = []  # (call, target, t, payload text or reason)
        self.evaluated: list[tuple[float, list]] = []  # (t, what evaluate returned)

    def ingest(self, target, t, text, duration=None):
        self.calls.append(("ingest", target, t, text))
        return super().ingest(target, t, text, duration)

    def ingest_error(self, target, t, reason, duration=None):
        self.calls.append(("ingest_error", target, t, reason))
        super().ingest_error(target, t, reason, duration)

    def evaluate(self, now):
        evaluations = super().evaluate(now)
        self.calls.append(("evaluate", "", now, ""))
        self.evaluated.append((now, evaluations))
        return evaluations


def test_polls_fall_on_multiples_of_the_interval_up_to_the_scenarios_end():
    times = [t for t, _ in simulated_polls(sim.Simulator(SCENARIO), WatchedPipeline(), interval=5.0)]
    assert times == [5.0, 10.0, 15.0, 20.0, 25.0, 30.0, 35.0, 40.0]


def test_a_count_sets_how_many_polls_are_made():
    pipeline = WatchedPipeline()
    times = [t for t, _ in simulated_polls(sim.Simulator(SCENARIO), pipeline, interval=2.5, count=3)]
    assert times == [2.5, 5.0, 7.5]
    assert [(call, t) for call, _, t, _ in pipeline.calls] == [
        (call, t) for t in times for call in ("ingest", "evaluate")
    ]


def test_the_poll_times_are_products_of_the_interval_so_they_do_not_drift():
    times = [t for t, _ in simulated_polls(sim.Simulator(SCENARIO), WatchedPipeline(), interval=0.1, count=10)]
    assert times[-1] == 1.0  # ten additions of 0.1 make 0.9999999999999999


def test_a_poll_while_a_scenario_fault_is_active_is_ingested_as_a_failed_poll_at_that_time():
    pipeline = WatchedPipeline()
    for _ in simulated_polls(sim.Simulator(SCENARIO), pipeline, interval=5.0):
        pass
    failed = [(target, t, reason) for call, target, t, reason in pipeline.calls if call == "ingest_error"]
    assert failed == [("vllm", 10.0, "http_status"), ("vllm", 15.0, "http_status")]
    ingested = [t for call, _, t, _ in pipeline.calls if call == "ingest"]
    assert ingested == [5.0, 20.0, 25.0, 30.0, 35.0, 40.0]
    assert pipeline.state().targets[0].errors["http_status"] == 2


def test_each_payload_is_the_simulators_exposition_at_the_poll_time():
    pipeline = WatchedPipeline()
    for _ in simulated_polls(sim.Simulator(SCENARIO, seed=3), pipeline, interval=5.0):
        pass
    reference = sim.Simulator(SCENARIO, seed=3)
    for call, target, t, text in pipeline.calls:
        if call == "ingest":
            reference.advance_to(t)
            assert (target, text) == ("vllm", reference.render()), t


def test_each_poll_yields_what_the_pipeline_evaluated_after_that_polls_ingest():
    pipeline = WatchedPipeline()
    polled = list(simulated_polls(sim.Simulator(SCENARIO), pipeline, interval=5.0))
    assert polled == pipeline.evaluated
    assert any(evaluations for _, evaluations in polled)  # a run whose verdicts are there to see
    # One ingest (or failed poll), then the evaluation, at each poll time.
    assert [(call != "evaluate", t) for call, _, t, _ in pipeline.calls] == [
        (ingested, t) for t, _ in polled for ingested in (True, False)
    ]


def test_an_interval_that_is_not_positive_is_refused():
    with pytest.raises(ValueError, match="interval"):
        next(simulated_polls(sim.Simulator(SCENARIO), WatchedPipeline(), interval=0.0))
