"""The interval of a predicted speedup (costmodel/uncertainty.py): which error the model carries,
alpha's sampling noise, and how long a canary must run."""

from __future__ import annotations

import math
from statistics import NormalDist

import pytest
from hypothesis import given
from hypothesis import strategies as st

from specwatch import costmodel as cmod
from specwatch.costmodel import uncertainty
from specwatch.costmodel.engine_priors import (
    ENGINE_PRIORS,
    EXTRAPOLATION_LOG_ERROR_PER_DOUBLING,
    GENERIC,
    MOE_LOG_ERROR,
    TAIL_FACTOR,
)
from specwatch.costmodel.learned import LearnedStepCurve

CM = cmod.build_cost_model(hardware="h100-sxm", model="llama-3.1-8b", draft_method="eagle3")


def learned(cm: cmod.CostModel, *, residual: float, spec_scale: float | None) -> cmod.CostModel:
    curve = LearnedStepCurve(
        prior=cm, knots=((1.0, 0.008), (256.0, 0.03)), points=12.0, residual_ratio=residual, spec_scale=spec_scale
    )
    return cmod.learned.learned_cost_model(cm, curve)


def test_a_configured_model_carries_its_engine_priors_calibration_error():
    assert uncertainty.model_log_error(CM) == GENERIC.log_error
    vllm = cmod.build_cost_model(hardware="h100-sxm", model="llama-3.1-8b", engine="vllm", engine_version="0.10.1")
    own = ENGINE_PRIORS["vllm-v1"]
    # inside its batch range, on a dense target: the prior's own error with the tail factor
    assert uncertainty.model_log_error(vllm, 64.0) == pytest.approx(TAIL_FACTOR * own.log_error)
    assert uncertainty.model_log_error(vllm, 64.0) < GENERIC.log_error


def test_the_priors_error_grows_outside_its_batch_range_and_on_a_moe_target():
    vllm = cmod.build_cost_model(hardware="h100-sxm", model="llama-3.1-8b", engine="vllm")
    inside, edge, twice, four = (uncertainty.model_log_error(vllm, b) for b in (64.0, 128.0, 256.0, 512.0))
    assert inside == edge < twice < four
    assert twice == pytest.approx(TAIL_FACTOR * math.hypot(0.103, EXTRAPOLATION_LOG_ERROR_PER_DOUBLING))
    moe = cmod.build_cost_model(hardware="h100-sxm", model="qwen3-30b-a3b", engine="vllm")
    assert uncertainty.model_log_error(moe, 64.0) == pytest.approx(TAIL_FACTOR * math.hypot(0.103, MOE_LOG_ERROR))
    # pooled and generic: one number for every batch
    assert uncertainty.model_log_error(CM, 1.0) == uncertainty.model_log_error(CM, 4096.0) == GENERIC.log_error


def test_the_loss_probability_is_the_intervals_mass_below_1():
    assert uncertainty.loss_probability(1.0, 0.2, 0.0) == pytest.approx(0.5)
    assert uncertainty.loss_probability(math.exp(-0.2 * 1.2816), 0.2, 0.0) == pytest.approx(0.9, abs=1e-4)
    assert uncertainty.loss_probability(math.exp(0.3), 0.3, 0.4) == pytest.approx(0.5 - 0.5 * math.erf(0.6 / 2**0.5))
    assert uncertainty.loss_probability(0.9, 0.0, 0.0) == 1.0 and uncertainty.loss_probability(1.1, 0.0, 0.0) == 0.0


def test_assumed_hardware_and_model_widen_the_error_until_a_curve_measured_spec_off_steps():
    assumed = cmod.build_cost_model(setup_assumed=True)
    assert uncertainty.model_log_error(assumed) == pytest.approx(
        math.hypot(GENERIC.log_error, uncertainty.ASSUMED_SETUP_LOG_ERROR)
    )
    # Spec-on steps alone fix the curve's scale, not the split the assumed setup guessed: its error stays.
    spec_on_only = learned(assumed, residual=0.05, spec_scale=None)
    assert uncertainty.model_log_error(spec_on_only) == pytest.approx(
        math.hypot(GENERIC.log_error, math.log1p(0.05), uncertainty.ASSUMED_SETUP_LOG_ERROR)
    )
    # With spec-off steps too, the curve's residual is all that is left.
    assert uncertainty.model_log_error(learned(assumed, residual=0.05, spec_scale=1.0)) == pytest.approx(
        math.log1p(0.05)
    )


def test_a_curve_that_measured_spec_off_steps_too_carries_only_its_residual():
    both = learned(CM, residual=0.05, spec_scale=1.1)
    assert uncertainty.model_log_error(both) == pytest.approx(math.log1p(0.05))
    assert uncertainty.model_log_error(learned(CM, residual=0.05, spec_scale=None)) > 0.3


def test_alphas_noise_is_the_binomial_error_over_drafts_carried_through_the_speedup():
    k, alpha, batch = 3.0, 0.6, 16.0
    small = uncertainty.sampling_log_error(k=k, alpha=alpha, coverage=1.0, drafts=1000.0)
    assert uncertainty.sampling_log_error(k=k, alpha=alpha, coverage=1.0, drafts=4000.0) == pytest.approx(small / 2)
    # The same as the speedup's own slope in log alpha-space times alpha's standard error.
    se, h = math.sqrt(alpha * (1 - alpha) / 1000.0), 1e-4
    up, down = (cmod.expected_speedup(CM, batch, k, alpha + d) for d in (h, -h))
    assert small == pytest.approx((math.log(up) - math.log(down)) / (2 * h) * se, rel=1e-3)
    # V0 (no draft count) adds nothing: its values are lifetime.
    assert uncertainty.sampling_log_error(k=k, alpha=alpha, coverage=1.0, drafts=None) == 0.0


def test_the_interval_holds_the_speedup_and_widens_with_the_confidence():
    narrow, wide = (
        uncertainty.speedup_interval(CM, 1.2, k=3, alpha=0.6, coverage=1.0, drafts=2000.0, confidence=c)
        for c in (0.8, 0.95)
    )
    assert narrow.lower < 1.2 < narrow.upper
    assert wide.lower < narrow.lower and wide.upper > narrow.upper
    assert math.log(narrow.upper / 1.2) == pytest.approx(math.log(1.2 / narrow.lower))
    assert uncertainty.z_for(0.9) == pytest.approx(1.6449, abs=1e-4)


def test_a_canary_runs_longer_the_closer_the_speedup_is_to_1_and_not_at_all_within_the_noise():
    def minutes(speedup: float, drafts: float) -> float | None:
        interval = uncertainty.speedup_interval(
            CM, speedup, k=3, alpha=0.6, coverage=1.0, drafts=drafts, confidence=0.9
        )
        return uncertainty.canary_minutes(interval, speedup, step_seconds=0.05, step_spread=0.3)

    assert minutes(0.8, 2000.0) == uncertainty.MIN_CANARY_MINUTES
    close = minutes(0.997, 1e9)
    assert close is not None and uncertainty.MIN_CANARY_MINUTES < close <= uncertainty.MAX_CANARY_MINUTES
    assert minutes(0.99, 2000.0) is None  # alpha's noise alone spans 1
    assert minutes(0.9999, 1e9) is None  # no hour-long canary resolves it


def test_the_step_spread_comes_from_the_windows_itl_quantiles():
    assert uncertainty.step_log_spread(0.02, 0.02 * math.exp(2 * 2.3263)) == pytest.approx(2.0, rel=1e-3)
    assert uncertainty.step_log_spread(None, 0.05) == uncertainty.DEFAULT_STEP_LOG_SPREAD


@given(confidences=st.lists(st.floats(0.01, 0.999), min_size=1, max_size=20))
def test_the_remembered_z_is_the_normal_quantile_computed_afresh(confidences):
    for confidence in confidences + confidences[::-1]:  # every confidence again, remembered
        assert uncertainty.z_for(confidence) == NormalDist().inv_cdf(0.5 + confidence / 2.0)


@given(speedup=st.floats(1e-12, 1e6), model=st.floats(1e-6, 3.0), sampling=st.floats(0.0, 3.0))
def test_the_loss_probability_is_a_fresh_standard_normals_cdf(speedup, model, sampling):
    centre = math.log(max(speedup, 1e-9))
    expected = NormalDist().cdf(-centre / math.hypot(model, sampling))
    assert uncertainty.loss_probability(speedup, model, sampling) == expected


@given(p=st.floats(0.0, 1.0, exclude_min=True, exclude_max=True))
def test_the_normal_quantile_is_statistics_normal_dists(p):
    assert uncertainty.normal_quantile(p) == pytest.approx(NormalDist().inv_cdf(p), rel=1e-12, abs=1e-12)


@given(x=st.floats(-40.0, 40.0))
def test_the_normal_cdf_is_statistics_normal_dists(x):
    assert uncertainty.normal_cdf(x) == pytest.approx(NormalDist().cdf(x), rel=1e-12, abs=1e-12)


@pytest.mark.parametrize("p", [0.0, 1.0, -0.5, 1.5, float("nan")])
def test_the_normal_quantile_refuses_p_outside_the_open_unit_interval(p):
    with pytest.raises(ValueError, match="p must be"):
        uncertainty.normal_quantile(p)
