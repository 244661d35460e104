"""The step-time curve learned online (costmodel/learned.py) and what it feeds."""

from __future__ import annotations

import itertools
import json
import math
from dataclasses import replace
from pathlib import Path

import pytest

from specwatch import costmodel
from specwatch.config import from_mapping
from specwatch.costmodel import breakeven, learned
from specwatch.sidecar.pipeline import Pipeline

FIXTURES = Path(__file__).parents[2] / "fixtures" / "vllm-0.32-cpu"
PRIOR = costmodel.build_cost_model(draft_method="ngram", context_tokens=512)


def obs(t: float, batch: float, seconds: float, k: float = 0.0, coverage: float = 0.0) -> learned.StepObservation:
    tokens = batch * (1 + coverage * k)
    return learned.StepObservation(
        t=t,
        batch=batch,
        query_tokens=tokens,
        step_seconds=seconds,
        draft_length=k,
        draft_coverage=coverage,
        steps=1000.0,
    )


def slow_server(tokens: float) -> float:
    """A server unlike the prior: 3 ms fixed, 40 µs per token (an early compute knee)."""
    return 3e-3 + 40e-6 * tokens


def test_below_min_points_the_prior_is_used_and_no_curve_is_served():
    learner = learned.StepTimeLearner(PRIOR, min_points=3)
    for i in range(2):
        learner.add(obs(10.0 * i, 4, slow_server(4)))
    assert learner.curve() is None


def test_the_curve_reproduces_plain_steps_it_learned_from_and_keeps_the_prior_shape_outside():
    learner = learned.StepTimeLearner(PRIOR, min_points=3)
    for i, b in enumerate((2, 8, 32, 128, 2, 8, 32, 128)):
        learner.add(obs(10.0 * i, b, slow_server(b)))
    curve = learner.curve()
    assert curve is not None
    model = learned.learned_cost_model(PRIOR, curve)
    for b in (2, 8, 32, 128):
        assert model.base_step_time(b) == pytest.approx(slow_server(b), rel=0.05)
    # Outside the data the ratio to the prior is held: the prior's shape, the data's level.
    assert model.base_step_time(1024) / PRIOR.base_step_time(1024) == pytest.approx(
        model.base_step_time(128) / PRIOR.base_step_time(128), rel=0.02
    )


def test_spec_on_steps_alone_give_the_counterfactual_plain_step_by_the_method_class():
    # n-gram: the prior charges only the fixed costs of a spec step; the rest is the target.
    learner = learned.StepTimeLearner(PRIOR, min_points=3)
    for i, b in enumerate((1, 4, 16, 1, 4, 16)):
        prior_share = PRIOR.spec_step_time(b, 3, 0.8) / PRIOR.step_time(b * 3.4, b * 512)
        learner.add(obs(10.0 * i, b, slow_server(b * 3.4) * prior_share, k=3, coverage=0.8))
    model = learned.learned_cost_model(PRIOR, learner.curve())
    assert model.step_time(4 * 3.4, 4 * 512) == pytest.approx(slow_server(4 * 3.4), rel=0.05)


def test_one_stalled_window_moves_the_curve_little():
    learner = learned.StepTimeLearner(PRIOR, min_points=3)
    for i in range(20):
        learner.add(obs(10.0 * i, 8, slow_server(8)))
    learner.add(obs(300.0, 8, 10 * slow_server(8)))  # a 10x outlier (a stall, a prefill burst)
    model = learned.learned_cost_model(PRIOR, learner.curve())
    assert model.base_step_time(8) == pytest.approx(slow_server(8), rel=0.15)


def test_old_points_are_forgotten_with_the_half_life():
    learner = learned.StepTimeLearner(PRIOR, min_points=1, half_life_seconds=600.0)
    for i in range(10):
        learner.add(obs(10.0 * i, 8, slow_server(8)))
    for i in range(60):  # the server got twice as slow, for two hours
        learner.add(obs(1000.0 + 120.0 * i, 8, 2 * slow_server(8)))
    model = learned.learned_cost_model(PRIOR, learner.curve())
    assert model.base_step_time(8) == pytest.approx(2 * slow_server(8), rel=0.05)
    assert learner.points < 20  # the forgotten weight, not the count


# A server whose fixed costs of speculation are twice the prior's (EAGLE-3, K=3): the prior's step otherwise.
EAGLE_PRIOR = costmodel.build_cost_model(draft_method="eagle3", context_tokens=512)
TWICE_THE_FIXED_COSTS = replace(
    EAGLE_PRIOR,
    verify_overhead_seconds=2 * EAGLE_PRIOR.verify_overhead_seconds,
    verify_seconds_per_request=2 * EAGLE_PRIOR.verify_seconds_per_request,
    draft=replace(EAGLE_PRIOR.draft, fixed_seconds=2 * EAGLE_PRIOR.draft.fixed_seconds),
)


def breakeven_k3(model: costmodel.CostModel, batch: float) -> float:
    return (model.spec_step_time(batch, 3) / model.base_step_time(batch) - 1) / 3


def test_spec_off_windows_over_the_spec_on_tokens_measure_the_spec_costs_and_move_the_breakeven():
    learner = learned.StepTimeLearner(EAGLE_PRIOR, min_points=3)
    spec_only = learned.StepTimeLearner(EAGLE_PRIOR, min_points=3)
    for i in range(6):
        for b in (2, 4, 8):
            spec_on = obs(100.0 * i + b, b, TWICE_THE_FIXED_COSTS.spec_step_time(b, 3), k=3, coverage=1.0)
            learner.add(spec_on)
            spec_only.add(spec_on)
        for b in (2, 4, 8, 16, 32):  # the canary: the target alone, over the spec-on steps' tokens
            learner.add(obs(100.0 * i + 50 + b, b, TWICE_THE_FIXED_COSTS.base_step_time(b)))
    measured = learned.learned_cost_model(EAGLE_PRIOR, learner.curve())
    scaled = learned.learned_cost_model(EAGLE_PRIOR, spec_only.curve())
    assert learner.baseline_points > 0 and spec_only.baseline_points == 0
    for b in (2, 4, 8):
        true_breakeven = breakeven_k3(TWICE_THE_FIXED_COSTS, b)
        assert breakeven_k3(measured, b) == pytest.approx(true_breakeven, abs=0.01)
        # Spec-on steps alone keep the prior's split: near its break-even, far from the server's.
        prior_error = abs(breakeven_k3(scaled, b) - breakeven_k3(EAGLE_PRIOR, b))
        assert prior_error < 0.02
        assert abs(breakeven_k3(scaled, b) - true_breakeven) > 0.05


def test_points_that_end_together_are_all_kept_and_a_repeated_time_adds_nothing():
    learner = learned.StepTimeLearner(PRIOR, min_points=3)
    learner.add_together([obs(10.0, b, slow_server(b)) for b in (2, 8, 32)])
    assert learner.points == 3 and learner.curve() is not None
    learner.add_together([obs(10.0, 4, slow_server(4))])  # the same end time again
    learner.add(obs(10.0, 4, slow_server(4)))
    assert learner.points == 3
    # Refitted under another prior, the points that ended together are all kept too.
    assert learner.with_prior(PRIOR.with_method("eagle3")).points == pytest.approx(3)


def test_spec_off_bins_are_dropped_eight_half_lives_after_their_last_window():
    learner = learned.StepTimeLearner(PRIOR, min_points=1, half_life_seconds=600.0)
    learner.add(obs(0.0, 8, slow_server(8)))
    assert learner.baseline_points == 1
    learner.add(obs(7 * 600.0, 8, slow_server(8 * 3.4), k=3, coverage=0.8))
    assert 0 < learner.baseline_points < 0.01
    learner.add(obs(8 * 600.0 + 1, 8, slow_server(8 * 3.4), k=3, coverage=0.8))
    assert learner.baseline_points == 0 and not learner._plain.bins


def test_memory_is_bounded_whatever_the_number_of_windows():
    learner = learned.StepTimeLearner(PRIOR, min_points=1)
    for i in range(1500):
        b = 1 + (i * 7919) % 4096
        learner.add(obs(float(i), b, slow_server(b)))
    assert len(learner._plain.bins) + len(learner._spec.bins) <= 2 * (learned._N_BINS)
    curve = learner.curve()
    assert curve is not None and len(curve.knots) <= learned._N_BINS


def test_the_learned_step_time_never_decreases_with_tokens():
    learner = learned.StepTimeLearner(PRIOR, min_points=1)
    noisy = {2: 1.0, 4: 0.8, 8: 1.1, 16: 0.9, 32: 1.2}  # noise that would make it dip
    for i, (b, f) in enumerate(noisy.items()):
        learner.add(obs(10.0 * i, b, f * slow_server(b)))
    model = learned.learned_cost_model(PRIOR, learner.curve())
    times = [model.base_step_time(b) for b in range(1, 64)]
    assert all(b >= a - 1e-12 for a, b in itertools.pairwise(times))


def test_a_window_with_too_few_steps_or_no_observations_is_not_a_point():
    assert learned.observation_from_deltas(1.0, 0.5, 100.0, 5.0, 0.0, 0.0) is None
    assert learned.observation_from_deltas(1.0, 0.0, 0.0, 500.0, 0.0, 0.0) is None
    point = learned.observation_from_deltas(1.0, 5.0, 1000.0, 250.0, 2400.0, 700.0)
    assert point is not None
    assert point.batch == 4.0 and point.step_seconds == 0.005
    assert point.query_tokens == pytest.approx(4.0 + 2400 / 250)
    assert point.draft_length == pytest.approx(2400 / 700) and point.draft_coverage == 0.7


# ------------------------------------------------------------------------------------------
# Real vLLM (tests/fixtures/vllm-0.32-cpu): spec-on recordings alone predict the spec-off server
# ------------------------------------------------------------------------------------------


def spec_on_pipeline(config: dict[str, object] | None = None) -> Pipeline:
    pipeline = Pipeline(from_mapping(config or {}))
    index = [json.loads(line) for line in (FIXTURES / "ngram-index.jsonl").read_text().splitlines()]
    recording = [json.loads(line) for line in (FIXTURES / "ngram-recording.jsonl").read_text().splitlines()]
    polls = sorted(
        [(r["t"], r["text"]) for r in recording] + [(i["t"], (FIXTURES / i["file"]).read_text()) for i in index]
    )
    for t, text in polls:
        pipeline.ingest("vllm", t, text)
        pipeline.evaluate(t)
    return pipeline


#: Tolerance of the real-vLLM prediction: the bar the learned cost model is held to.
REAL_VLLM_TOLERANCE = 0.15
#: The client concurrencies of the real run (speedup-results.json's phases).
CONCURRENCIES = (1, 4, 16)


def real_vllm_prediction(conc: int) -> tuple[float, float, float]:
    """At client concurrency ``conc``: (measured, predicted at that concurrency, predicted at the same batch)."""
    results = json.loads((FIXTURES / "speedup-results.json").read_text())
    ((learner, model),) = spec_on_pipeline().learners().values()
    assert learner.curve() is not None
    server = results["spec"]["phases"][str(conc)]["server"]  # from the spec-on payloads
    coverage = results["prediction"][str(conc)]["draft_coverage"]  # Δdrafts/ΔITL count, spec on
    measured = (
        results["spec"]["phases"][str(conc)]["client"]["tokens_per_second"]
        / results["nospec"]["phases"][str(conc)]["client"]["tokens_per_second"]
    )
    m, c = model.with_method("ngram"), costmodel.draft_coverage(coverage)
    return (
        measured,
        breakeven.closed_loop_speedup(m, conc, server["batch"], server["k_mean"], server["alpha"], c),
        costmodel.expected_speedup(m, server["batch"], server["k_mean"], server["alpha"], c),
    )


@pytest.mark.parametrize("conc", CONCURRENCIES, ids=[f"concurrency-{c}" for c in CONCURRENCIES])
def test_real_vllm_speedups_are_predicted_within_15_percent_from_spec_on_data_alone(conc):
    measured, predicted, same_batch = real_vllm_prediction(conc)
    print(
        f"c={conc}: measured {measured:.2f}x, predicted {predicted:.2f}x at concurrency "
        f"({predicted / measured - 1:+.0%}), {same_batch:.2f}x at the same batch"
    )
    assert abs(predicted / measured - 1) <= REAL_VLLM_TOLERANCE, (measured, predicted)


@pytest.mark.parametrize("conc", CONCURRENCIES, ids=[f"concurrency-{c}" for c in CONCURRENCIES])
def test_real_vllm_learned_plain_step_matches_the_spec_off_server_never_shown_to_it(conc):
    results = json.loads((FIXTURES / "speedup-results.json").read_text())
    ((_, model),) = spec_on_pipeline().learners().values()
    off = results["nospec"]["phases"][str(conc)]["server"]
    assert model.base_step_time(off["batch"]) == pytest.approx(off["step_seconds"], rel=0.15)


def test_with_learning_off_the_default_roofline_is_what_the_sidecar_uses():
    pipeline = spec_on_pipeline({"learning": {"enabled": False}})
    assert pipeline.learners() == {}
    assert pipeline.cost_model_source() == "default"
    assert spec_on_pipeline().cost_model_source() == "learned"


def test_a_configured_profile_overrides_learning():
    profile = {"points": [[1, 0.004], [32, 0.014]]}
    pipeline = spec_on_pipeline({"profile": profile})
    assert pipeline.learners() == {} and pipeline.cost_model_source() == "profile"


def test_learned_model_keeps_the_prior_when_it_is_right():
    # A server that runs exactly as the prior: the ratios stay 1.
    learner = learned.StepTimeLearner(PRIOR, min_points=1)
    for i, b in enumerate((1, 4, 16, 64)):
        learner.add(obs(10.0 * i, b, PRIOR.base_step_time(b)))
    curve = learner.curve()
    assert all(math.isclose(curve.ratio(n), 1.0, rel_tol=1e-6) for n, _ in curve.knots)
    assert replace(PRIOR, profile=curve).base_step_time(8) == pytest.approx(PRIOR.base_step_time(8))


# ------------------------------------------------------------------------------------------
# What the sidecar says it assumed
# ------------------------------------------------------------------------------------------


def exported(pipeline: Pipeline) -> dict[str, list[tuple[dict[str, str], float]]]:
    from prometheus_client import generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    from specwatch.export.collector import registry_for

    text = generate_latest(registry_for(pipeline.view)).decode()
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out.setdefault(s.name, []).append((dict(s.labels), s.value))
    return out


def test_info_metric_says_default_before_learning_and_learned_after_with_the_fit_exported():
    empty = Pipeline(from_mapping({}))
    ((labels, value),) = exported(empty)["specwatch_cost_model_info"]
    assert value == 1 and labels == {
        "source": "default",
        "hardware": "h100-sxm",
        "model": "llama-3.1-8b",
        "dtype": "bf16",
        "tp": "1",
        "method": "auto",
        "baseline": "none",
    }
    metrics = exported(spec_on_pipeline())
    ((labels, _),) = metrics["specwatch_cost_model_info"]
    # Learned from spec-on windows alone: the split between target and speculation is the prior's.
    assert labels["source"] == "learned" and labels["baseline"] == "none"
    ((_, points),) = metrics["specwatch_step_time_fit_points"]
    assert points >= 5
    ((_, residual),) = metrics["specwatch_step_time_fit_residual_ratio"]
    assert 0 <= residual < 1
    ((_, predicted),) = metrics["specwatch_step_time_predicted_seconds"]
    ((_, observed),) = metrics["specwatch_step_time_observed_seconds"]
    assert predicted == pytest.approx(observed, rel=0.3)


def test_a_configured_preset_is_source_preset_and_no_start_up_warning_is_due():
    configured = Pipeline(
        from_mapping(
            {
                "hardware": {"preset": "a100-80gb"},
                "model": {"preset": "llama-3.1-8b"},
                "learning": {"enabled": False},
            }
        )
    )
    ((labels, _),) = exported(configured)["specwatch_cost_model_info"]
    assert labels["source"] == "preset" and labels["hardware"] == "a100-80gb"
    assert not configured.rests_on_defaults()
    assert Pipeline(from_mapping({})).rests_on_defaults()


@pytest.mark.parametrize(
    ("raw", "warned"),
    [
        pytest.param({}, 1, id="nothing-configured-warns-once"),
        pytest.param({"model": {"preset": "llama-3.1-70b"}}, 0, id="a-configured-model-does-not-warn"),
    ],
)
def test_the_service_warns_once_at_start_up_when_the_verdict_rests_on_defaults(raw, warned):
    from specwatch.base.logsetup import capture_logs
    from specwatch.serve.service import Service

    service = Service(
        from_mapping(
            {
                **raw,
                "listen": "127.0.0.1:0",
                "targets": [{"name": "vllm", "url": "http://127.0.0.1:9/metrics"}],
            }
        )
    )
    with capture_logs() as logs:
        service.start()
        service.stop()
    assert sum(1 for e in logs if e["event"] == "cost_model_defaults") == warned


def test_the_kept_fit_summary_is_the_plain_one_at_every_step_and_is_worked_out_again_only_after_a_point_or_model_change():
    learner = learned.StepTimeLearner(PRIOR, min_points=3)
    other = replace(PRIOR, context_tokens=1024)
    assert learned.fit_summary_kept(learner, PRIOR) == learned.fit_summary(learner, PRIOR)  # no point yet
    for i, b in enumerate((2, 8, 32, 128, 2, 8, 3, 40)):
        point = obs(10.0 * i, b, slow_server(b), k=2.0 if i % 2 else 0.0, coverage=0.7 if i % 2 else 0.0)
        learner.add(point)
        curve = learner.curve()
        model = learned.learned_cost_model(PRIOR, curve) if curve is not None else PRIOR
        first = learned.fit_summary_kept(learner, model)
        assert first == learned.fit_summary(learner, model)
        assert learned.fit_summary_kept(learner, model) is first  # asked again between points: kept
        changed = learned.fit_summary_kept(learner, other)  # another model: worked out for it
        assert changed == learned.fit_summary(learner, other)
        assert learned.fit_summary_kept(learner, model) == first
    learner.add(point)  # a repeated time adds nothing: the summary stays
    assert learned.fit_summary_kept(learner, model) == learned.fit_summary(learner, model)


def test_a_learned_curve_is_a_relative_curve_and_a_measured_profile_is_not():
    """CostModel scales its absolute spec costs by a curve learned relative to the roofline; the test
    that tells one (profile.is_relative_curve) answers as isinstance against the Protocol would."""
    from specwatch.costmodel.profile import Profile, is_relative_curve

    prior = costmodel.build_cost_model(hardware="h100-sxm", model="llama-3.1-8b", draft_method="eagle3")
    curve = learned.LearnedStepCurve(prior=prior, knots=((1.0, 0.008), (256.0, 0.03)), points=12.0, residual_ratio=0.1)

    class StepOnly:
        def step_seconds(self, tokens: float, context_tokens: float, roofline_kv_seconds_per_token: float) -> float:
            return 0.01

    class NulledRatio(StepOnly):
        spec_cost_ratio = None  # a member set to None is no method (as the Protocol's check has it)

    assert is_relative_curve(curve)
    assert not is_relative_curve(Profile(points=((1.0, 0.01), (64.0, 0.02))))
    assert not is_relative_curve(StepOnly())
    assert not is_relative_curve(NulledRatio())
    assert not is_relative_curve(None)
    assert learned.learned_cost_model(prior, curve).cost_scale(64.0) == curve.spec_cost_ratio(64.0)
    assert replace(prior, profile=Profile(points=((1.0, 0.01), (64.0, 0.02)))).cost_scale(64.0) == 1.0
