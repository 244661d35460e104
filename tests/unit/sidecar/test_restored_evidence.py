"""Restored state is evidence, not truth: the previous pod's learned curve and
before-window, read back at start, are used only once this process's first live windows agree
with them, and dropped (counted, logged) otherwise; while a restored curve is in use the cost
model says `restored`."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from specwatch import sim
from specwatch.base.logsetup import capture_logs
from specwatch.config import from_mapping
from specwatch.sidecar import pipeline as pipeline_module
from specwatch.sidecar.pipeline import Pipeline
from specwatch.sim.polling import simulated_polls
from specwatch.sim.scenario import load_scenario, parse_scenario
from support.builders import pod_scenario, scenario_raw_config

POLL = 5.0
STEADY = Path(sim.__file__).parent / "scenarios" / "steady.yaml"


def _pipeline(sc, learning: bool = True) -> Pipeline:
    raw = scenario_raw_config(sc, poll_interval=POLL, windows=("1m", "4m"))
    return Pipeline(from_mapping({**raw, "learning": {"enabled": learning}}, environ={}))


def _run(sc, pipeline: Pipeline, seconds: float, seed: int = 1):
    verdicts, sources = [], []
    for _t, evaluations in simulated_polls(
        sim.Simulator(sc, seed=seed), pipeline, interval=POLL, count=round(seconds / POLL)
    ):
        verdicts += [e.verdict for e in evaluations]
        sources.append(pipeline.cost_model_info().source)
    return verdicts, sources


def _learned_knots(sc) -> tuple[tuple[float, float], ...]:
    pipeline = _pipeline(sc)
    _run(sc, pipeline, 400.0)
    ((learner, _),) = pipeline.learners().values()
    curve = learner.curve()
    assert curve is not None
    return curve.knots


@pytest.fixture(scope="module")
def steady():
    sc = load_scenario(STEADY)
    return sc, _learned_knots(sc)


def _poisoned(knots):
    """Well-formed (tokens rising, seconds positive and non-decreasing) and true at the verify
    step the live windows measure, but a plain step ten times cheaper: speculation looks dear."""
    (n, v), *_ = knots
    return ((n / 4, v / 10), (n, v))


def test_a_poisoned_restored_curve_serves_no_disable_on_the_steady_scenario_and_is_dropped(steady, monkeypatch):
    sc, knots = steady
    route = next(iter(_pipeline(sc).config.routes)).name if _pipeline(sc).config.routes else "llama-70b"
    poisoned = _poisoned(knots)
    # Taken as truth (the checks off), the poisoned curve turns the steady scenario's keep into disable.
    monkeypatch.setattr(pipeline_module, "RESTORED_CURVE_TOLERANCE", float("inf"))
    monkeypatch.setattr(pipeline_module, "RESTORED_CURVE_PRIOR_RATIO", float("inf"))
    monkeypatch.setattr(pipeline_module, "RESTORED_CURVE_SHAPE", float("inf"))
    trusting = _pipeline(sc)
    trusting.restore({}, {route: poisoned})
    verdicts, _ = _run(sc, trusting, 120.0, seed=2)
    assert "disable" in verdicts, "the poison is strong enough to matter"
    monkeypatch.undo()
    checked = _pipeline(sc)
    checked.restore({}, {route: poisoned})
    with capture_logs() as logs:
        verdicts, sources = _run(sc, checked, 300.0, seed=2)
    assert "disable" not in verdicts
    assert "restored" not in sources
    assert checked.restore_disagreed == 1
    assert [e["event"] for e in logs].count("readback_curve_dropped") == 1


def test_a_restored_curve_that_agrees_is_used_and_the_cost_model_says_restored(steady):
    sc, knots = steady
    pipeline = _pipeline(sc)
    route = pipeline.config.routes[0].name if pipeline.config.routes else "llama-70b"
    pipeline.restore({}, {route: knots})
    _, sources = _run(sc, pipeline, 120.0, seed=2)
    assert sources[0] != "restored", "not before the first live window confirms it"
    assert "restored" in sources and pipeline.restore_disagreed == 0
    # Until this process's own curve fits; then its own.
    assert sources[sources.index("restored") :].count("learned") == len(sources) - sources.index(
        "restored"
    ) - sources.count("restored")


def _before_pod():
    """A K=4 pod's before-window, as it would be read back."""
    from prometheus_client import generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    from specwatch.export.collector import registry_for
    from specwatch.fleet.client import Series
    from specwatch.serve.readback import restored_from_series

    sc = parse_scenario(pod_scenario(4, "600s"))
    old = _pipeline(sc, learning=False)
    _run(sc, old, 300.0)
    text = generate_latest(registry_for(old.view)).decode()
    series = [
        Series({**s.labels, "__name__": s.name, "pod": "old"}, ((1000.0, s.value),))
        for f in text_string_to_metric_families(text)
        for s in f.samples
        if s.name.startswith("specwatch_advice_before")
    ]
    return restored_from_series(series).before_windows["chat"]


@pytest.mark.parametrize("scale", [1000.0, 0.001], ids=["ITL 1000x", "ITL 1/1000"])
def test_a_poisoned_before_window_is_dropped_at_the_first_live_window_and_nothing_is_graded(scale):
    before = _before_pod()
    poisoned = dataclasses.replace(
        before,
        itl_per_token_seconds=before.itl_per_token_seconds * scale,
        step_time_seconds=before.step_time_seconds * scale,
    )
    sc = parse_scenario(pod_scenario(2, "600s"))
    pipeline = _pipeline(sc, learning=False)
    pipeline.restore({"chat": poisoned})
    with capture_logs() as logs:
        _run(sc, pipeline, 300.0, seed=2)
    assert pipeline.state().routes[0].grading is None, "no gain of 0.0011 or 1120 graded"
    assert pipeline.restore_disagreed == 1
    assert [e["event"] for e in logs].count("readback_before_window_dropped") == 1


def test_a_before_window_that_predicts_an_impossible_gain_is_dropped():
    before = _before_pod()
    # Acceptance rates of one at every position with a tiny batch: a gain no K change can give.
    poisoned = dataclasses.replace(before, position_rates=(1.0,) * 4, acceptance_rate=1.0, batch_size=1e-6)
    sc = parse_scenario(pod_scenario(2, "600s"))
    pipeline = _pipeline(sc, learning=False)
    pipeline.restore({"chat": poisoned})
    _run(sc, pipeline, 300.0, seed=2)
    grading = pipeline.state().routes[0].grading
    assert grading is None or (grading.predicted_gain_ratio is not None and grading.predicted_gain_ratio < 3)


def test_an_honest_before_window_is_still_graded_against():
    before = _before_pod()
    sc = parse_scenario(pod_scenario(2, "600s"))
    pipeline = _pipeline(sc, learning=False)
    pipeline.restore({"chat": before})
    _run(sc, pipeline, 300.0, seed=2)
    grading = pipeline.state().routes[0].grading
    assert grading is not None and grading.status == "graded" and pipeline.restore_disagreed == 0
