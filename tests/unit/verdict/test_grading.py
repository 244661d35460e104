"""Before/after grading on the simulator: the sidecar's own recommendation is applied mid-scenario
(the simulated vLLM changes its draft length), and the sidecar's measured gain matches the
simulator's true change in tokens/s; /api/v1/status and the gauges carry the grading."""

from __future__ import annotations

import json

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from specwatch import sim
from specwatch.export.collector import registry_for
from specwatch.export.status import status_document
from specwatch.sidecar.pipeline import Pipeline
from specwatch.sim.polling import simulated_polls
from specwatch.sim.scenario import parse_scenario
from specwatch.verdict.grading import AdviceGrader, summarize
from specwatch.windows.derive import WindowStats
from support.builders import chat_scenario, scenario_config

POLL = 5.0
BEFORE, AFTER = 300.0, 360.0  # seconds of each phase


# Per-position conditional acceptance of an EAGLE-3 head that is sure of its first two tokens and
# weak after them; truncating the chain draft keeps the first rates.
ACCEPTANCE = [0.9, 0.7, 0.25, 0.15]
CONCURRENCY = 64


def scenario(k_after: int | None):
    """Llama-3.1-8B on one H100, EAGLE-3 K=4 at 64 concurrent requests, acceptance falling with the
    position (ACCEPTANCE); optionally a second phase that runs the draft length the sidecar
    recommended."""
    phases = [
        {"name": "before", "duration": f"{BEFORE:.0f}s", "concurrency": CONCURRENCY, "k": 4, "acceptance": ACCEPTANCE}
    ]
    if k_after is not None:
        phases.append(
            {
                "name": "after",
                "duration": f"{AFTER:.0f}s",
                "concurrency": CONCURRENCY,
                "k": k_after,
                "acceptance": ACCEPTANCE,
            }
        )
    return parse_scenario(chat_scenario("apply-recommendation", 4, phases))


def drive(sc, until: float, marks: tuple[float, ...] = ()):
    """Sidecar + simulator in virtual time; returns the pipeline, the config and the simulator's
    generated-token totals at `marks` (its true tokens/s)."""
    config = scenario_config(sc, poll_interval=POLL, windows=("1m", "4m"))
    pipeline = Pipeline(config)
    simulator = sim.Simulator(sc, seed=1)
    generated = {}
    for t, _evaluations in simulated_polls(simulator, pipeline, interval=POLL, count=round(until / POLL)):
        if t in marks:
            generated[t] = sum(e.counters.generation_tokens for r in simulator.routes.values() for e in r.engines)
    return pipeline, config, generated


@pytest.fixture(scope="module")
def applied():
    # 1. The sidecar watches K=4 at batch 64 and asks for a shorter draft: a shorten verdict, or,
    # while the speedup's interval spans 1, the measurement that decides (a restart with K').
    before_only, _, _ = drive(scenario(None), BEFORE)
    longest = before_only.state().routes[0].evaluations[-1]
    if longest.verdict == "shorten":
        recommended = longest.recommended_draft_length
    else:
        measurement = longest.measurement
        assert longest.verdict == "undecided" and measurement is not None
        assert measurement.kind == "restart_with_draft_length"
        recommended = measurement.draft_length
    assert recommended is not None
    assert 0 < recommended < 4
    # 2. The same run with the recommendation applied at BEFORE (same seed: the same first phase).
    marks = (60.0, BEFORE, BEFORE + 60.0, BEFORE + AFTER)
    pipeline, config, generated = drive(scenario(recommended), BEFORE + AFTER, marks)
    # The simulator's true tokens/s in the steady part of each phase (closed loop, same load).
    true_before = (generated[BEFORE] - generated[60.0]) / (BEFORE - 60.0)
    true_after = (generated[BEFORE + AFTER] - generated[BEFORE + 60.0]) / (AFTER - 60.0)
    # The change is larger than the tolerance: a grading that measured no change would fail the bound.
    assert true_after / true_before > 1 / 0.9
    return pipeline, config, recommended, true_after / true_before


def test_the_graded_gain_of_an_applied_recommendation_is_within_10_percent_of_the_simulators_truth(applied):
    pipeline, _, recommended, true_gain = applied
    grading = pipeline.state().routes[0].grading
    assert grading is not None and grading.status == "graded"
    assert grading.before.draft_length == pytest.approx(4.0, abs=0.01)
    assert grading.new_draft_length == pytest.approx(recommended, abs=0.01)
    assert grading.measured_gain_ratio == pytest.approx(true_gain, rel=0.10)
    # Graded on windows that do not straddle the change.
    assert grading.before.t <= grading.changed_at <= BEFORE
    assert grading.after is not None and grading.after.t - grading.after.span_seconds >= BEFORE


def test_the_prediction_made_from_the_before_window_is_reported_beside_the_measured_change(applied):
    pipeline, _, _, _ = applied
    route = status_document(pipeline.view())["routes"][0]
    grading = route["grading"]
    assert grading["status"] == "graded"
    assert grading["predicted_gain_ratio"] > 0 and grading["measured"]["gain_ratio"] > 0
    for key in (
        "tokens_per_step_ratio",
        "step_time_ratio",
        "itl_p99_ratio",
        "tokens_per_engine_step_ratio",
        "prediction_error",
    ):
        assert grading["measured"][key] is not None, key
    for key in ("tokens_per_step", "step_time_seconds", "itl_p99_seconds", "tokens_per_engine_step"):
        assert grading["before"][key] > 0 and grading["after"][key] > 0, key
    # Fewer tokens per step, shorter steps: that is what shortening K does.
    assert grading["measured"]["tokens_per_step_ratio"] < 1 and grading["measured"]["step_time_ratio"] < 1
    json.dumps(grading, allow_nan=False)


def test_the_gauges_export_the_predicted_and_measured_gain(applied):
    pipeline, _, _, _ = applied
    text = generate_latest(registry_for(pipeline.view)).decode()
    samples = {s.name: s for fam in text_string_to_metric_families(text) for s in fam.samples}
    grading = pipeline.state().routes[0].grading
    assert samples["specwatch_advice_measured_gain_ratio"].value == pytest.approx(grading.measured_gain_ratio)
    assert samples["specwatch_advice_predicted_gain_ratio"].value == pytest.approx(grading.predicted_gain_ratio)
    assert samples["specwatch_advice_measured_gain_ratio"].labels == {"route": "chat", "target": "vllm"}


def test_turning_speculation_off_is_graded_against_the_simulators_truth():
    """At 128 requests with a weak drafter (per-position acceptance 0.3) vLLM is restarted without
    speculation at 300 s: the measured gain matches the simulator's tokens/s."""
    sc = parse_scenario(
        chat_scenario(
            "apply-disable",
            4,
            [{"name": "weak", "duration": "660s", "concurrency": 128, "k": 4, "alpha": 0.3}],
            events=[{"at": "300s", "type": "spec_off"}],
        )
    )
    # The restart at 300 s zeroes the simulator's counters: measure each phase on its own side of it.
    pipeline, _, generated = drive(sc, 660.0, (60.0, 300.0, 360.0, 660.0))
    true_gain = ((generated[660.0] - generated[360.0]) / 300.0) / ((generated[300.0] - generated[60.0]) / 240.0)
    grading = pipeline.state().routes[0].grading
    assert grading is not None and grading.status == "graded" and grading.new_draft_length == 0
    assert grading.after is not None and grading.after.tokens_per_step == 1.0
    assert grading.measured_gain_ratio == pytest.approx(true_gain, rel=0.10)
    assert grading.predicted_gain_ratio is not None and grading.predicted_gain_ratio > 1


def _stats(t: float, span: float, k: float | None, drafts: float, window: str = "1m") -> WindowStats:
    return WindowStats(
        route="r",
        window=window,
        t=t,
        samples=10,
        span_seconds=span,
        spec_present=True,
        drafts=drafts,
        draft_tokens=(k or 0) * drafts,
        accepted_tokens=None,
        acceptance_rate=0.6,
        mean_acceptance_length=2.5 if k else None,
        draft_length=k if drafts else None,
        position_rates=(0.8, 0.6, 0.4, 0.2)[: int(k or 0)] or None,
        batch_size=8.0,
        itl_per_token_mean_seconds=0.01,
        itl_p99_seconds=0.03,
        generation_tokens=5000.0,
        draft_coverage=1.0,
    )


def test_a_steady_route_is_never_graded_and_a_thin_window_moves_nothing():
    from specwatch import costmodel

    cm = costmodel.build_cost_model()
    grader = AdviceGrader()
    for i in range(1, 40):
        t = 5.0 * i
        # Fewer drafts than the guard (a K=1 mix would look like a change): not evidence.
        thin = i % 7 == 0
        windows = [
            _stats(t, min(t, 60.0), 1.0 if thin else 4.0, 50 if thin else 2000),
            _stats(t, min(t, 240.0), 4.0, 8000, "4m"),
        ]
        assert grader.observe(t, windows, "eagle3", 500, cm) is None


def test_a_summary_needs_a_measured_draft_length_and_an_itl():
    assert summarize(_stats(10, 10, 4.0, 100), "eagle3", 500) is None  # too few drafts
    off = _stats(10, 10, None, 0)
    assert summarize(off, "eagle3", 500).tokens_per_step == 1.0  # speculation off: K = 0, one token per step
