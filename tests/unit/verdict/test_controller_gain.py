"""verdict/controller_gain.py: what an engine's own controller of K delivers, from the measured step
and tokens per request-step against the spec-off step, and how it replaces one fixed K's reading."""

from __future__ import annotations

import math

import pytest

from specwatch import costmodel
from specwatch.costmodel.observation import StepObservation
from specwatch.engines.vllm_schedule import parse_speculative_config
from specwatch.verdict import controller_gain as cg
from specwatch.verdict.decide import Assessment, extend_position_rates
from specwatch.windows.derive import COUNTER_RATIO, GAUGE_MEAN, WindowStats

CM = costmodel.build_cost_model(hardware="h100-sxm", model="llama-3.1-8b", context_tokens=640)
ADAPTIVE = {"num_speculative_tokens": 5, "enable_adaptive_verification": True}


def stats(*, tau: float = 3.0, drafts: float = 20_000.0, rates=(0.8, 0.64, 0.51), **values) -> WindowStats:
    return WindowStats(
        route="r",
        window="5m",
        t=0.0,
        samples=60,
        span_seconds=300.0,
        spec_present=True,
        drafts=drafts,
        mean_acceptance_length=tau,
        acceptance_rate=(tau - 1.0) / 3.0,
        draft_length=3.0,
        position_rates=rates,
        batch_size=16.0,
        itl_p50_seconds=0.010,
        itl_p99_seconds=0.014,
        **values,
    )


def point(step: float, *, batch: float = 16.0, steps: float = 1_000.0, prefill: float = 0.0) -> StepObservation:
    return StepObservation(
        t=0.0,
        batch=batch,
        query_tokens=batch * 4,
        step_seconds=step,
        draft_length=3.0,
        draft_coverage=1.0,
        steps=steps,
        prefill_tokens=prefill,
    )


def test_the_gain_is_tokens_per_request_step_times_the_plain_step_over_the_measured_step():
    plain = cg.plain_step_seconds(CM, point(1.0))
    gain = cg.delivered_gain(CM, stats(tau=3.0), point(2 * plain), confidence=0.9)
    assert gain is not None
    assert gain.tokens_per_step == 3.0 and gain.plain_step_seconds == plain
    assert gain.gain == pytest.approx(1.5)
    assert gain.lower < gain.gain < gain.upper and gain.loss_probability < 0.5


def test_a_falling_acceptance_with_faster_steps_per_token_is_a_higher_gain():
    plain = cg.plain_step_seconds(CM, point(1.0))
    before = cg.delivered_gain(CM, stats(tau=2.4), point(1.6 * plain), confidence=0.9)
    # Longer drafts: a smaller share accepted, more tokens per step, a step not much longer.
    after = cg.delivered_gain(CM, stats(tau=3.3, rates=(0.8, 0.6, 0.45, 0.3, 0.2)), point(1.9 * plain), confidence=0.9)
    assert before is not None and after is not None
    assert after.gain > before.gain > 1.0


def test_prefill_on_a_share_of_the_steps_costs_more_than_spread_over_all_of_them():
    # Below the roofline's knee 60 prefill tokens a step are free; a whole prompt on a tenth of the
    # steps crosses it.
    spread_evenly = CM.step_time(16 + 60, 16 * CM.context_tokens)
    lumpy = cg.plain_step_seconds(CM, point(1.0, prefill=60.0))
    assert lumpy > spread_evenly >= cg.plain_step_seconds(CM, point(1.0))


def test_fewer_steps_widen_the_interval_and_no_steps_or_drafts_give_no_gain():
    narrow = cg.delivered_gain(CM, stats(), point(0.02, steps=10_000), confidence=0.9)
    wide = cg.delivered_gain(CM, stats(), point(0.02, steps=10), confidence=0.9)
    assert narrow is not None and wide is not None
    assert wide.upper / wide.lower > narrow.upper / narrow.lower
    assert cg.delivered_gain(CM, stats(), None, confidence=0.9) is None
    assert cg.delivered_gain(CM, stats(drafts=0.0), point(0.02), confidence=0.9) is None


def test_the_best_fixed_k_is_the_cost_models_over_the_measured_positions():
    best = cg.best_fixed_k(CM, 16.0, (0.8, 0.64, 0.51), 1.0)
    assert best is not None
    k, speedup = best
    p = extend_position_rates((0.8, 0.64, 0.51), cg.MAX_FIXED_K)
    scanned = [costmodel.expected_speedup_for_positions(CM, 16.0, p[:kk]) for kk in range(1, len(p) + 1)]
    assert speedup == pytest.approx(max(scanned)) and k == 1 + scanned.index(max(scanned))
    assert cg.best_fixed_k(CM, 16.0, (), 1.0) is None
    # Nothing pays: K = 0 at speedup 1.
    assert cg.best_fixed_k(CM, 16.0, (0.01,), 1.0) == (0, 1.0)


def gain_of(value: float, half: float = 0.1) -> cg.ControllerGain:
    return cg.ControllerGain(
        gain=value,
        lower=value * math.exp(-half),
        upper=value * math.exp(half),
        loss_probability=0.5 if value == 1.0 else float(value < 1.0),
        tokens_per_step=2.5,
        step_seconds=0.02,
        plain_step_seconds=0.01,
        log_error=half,
        best_fixed_k=2,
        best_fixed_k_speedup=1.25,
    )


def test_a_controller_that_clearly_pays_is_kept_whatever_one_fixed_ks_break_even_says():
    fixed = Assessment(
        candidate="disable", expected_speedup=0.9, recommended_draft_length=0, action="remove_speculative_config"
    )
    judged = cg.judged(fixed, gain_of(1.5), ADAPTIVE)
    assert judged.candidate == "keep" and judged.action == "no_change"
    assert judged.expected_speedup == 1.5 and judged.speedup_upper == gain_of(1.5).upper
    assert any("enable_adaptive_verification" in note for note in judged.notes)
    assert gain_of(1.5).vs_best_fixed_k == pytest.approx(1.2)


def test_a_controller_that_clearly_loses_is_disabled_and_an_unclear_one_keeps_the_candidate():
    keep = Assessment(candidate="keep", expected_speedup=1.4, recommended_draft_length=5, action="no_change")
    lost = cg.judged(keep, gain_of(0.8), ADAPTIVE)
    assert lost.candidate == "disable" and lost.action == "remove_speculative_config"
    assert lost.recommended_draft_length == 0 and lost.loss_probability == 1.0
    unclear = cg.judged(keep, gain_of(1.02), ADAPTIVE)
    assert unclear.candidate == "keep" and unclear.expected_speedup == 1.02


def test_only_an_engine_that_moves_k_itself_is_judged_by_delivery():
    assert cg.judges_by_delivery(ADAPTIVE, None)
    assert cg.judges_by_delivery({"speculative_adaptive": True}, None)
    schedule = parse_speculative_config(
        {"num_speculative_tokens": 4, "num_speculative_tokens_per_batch_size": [[1, 16, 4], [17, 1024, 2]]}
    )
    assert cg.judges_by_delivery({"num_speculative_tokens": 4}, schedule)
    assert not cg.judges_by_delivery(
        {"num_speculative_tokens": 4}, parse_speculative_config({"num_speculative_tokens": 4})
    )
    assert not cg.judges_by_delivery(None, None)


SGLANG_BANDS = {"num_speculative_tokens": 7, "speculative_adaptive": True}


def test_where_the_engine_chooses_k_a_kept_or_shortened_verdict_keeps_the_k_it_was_started_with():
    keep = Assessment(candidate="keep", expected_speedup=1.4, recommended_draft_length=5, action="no_change")
    assert cg.judged(keep, gain_of(1.02), SGLANG_BANDS).recommended_draft_length == 7
    shorten = Assessment(candidate="shorten", expected_speedup=1.2, recommended_draft_length=3, action="merge")
    moot = cg.judged(shorten, gain_of(1.02), SGLANG_BANDS)
    assert (moot.candidate, moot.action, moot.recommended_draft_length) == ("keep", "no_change", 7)
    assert any("speculative_adaptive" in note for note in moot.notes)
    # a stated schedule's K is the user's setting: a shorter one stays advice
    schedule = {"num_speculative_tokens": 4, "num_speculative_tokens_per_batch_size": [[1, 16, 4], [17, 1024, 2]]}
    assert cg.judged(shorten, gain_of(1.02), schedule).recommended_draft_length == 3


class Increases:
    """What gauge_window_point reads of a window's view: its counter increases."""

    def __init__(self, prompt: float) -> None:
        self.prompt = prompt

    def increases(self):
        from specwatch.engines.series import Counter, SeriesKey

        return {SeriesKey(Counter.PROMPT, "0"): self.prompt, SeriesKey(Counter.GEN, "0"): 1.0}


def sglang_window(**values) -> WindowStats:
    base = {
        "route": "r",
        "window": "5m",
        "t": 0.0,
        "samples": 60,
        "span_seconds": 300.0,
        "spec_present": True,
        "drafts": 50_000.0,
        "mean_acceptance_length": 4.0,
        "draft_length": 5.0,
        "batch_size": 32.0,
        "generation_tokens": 1_200_000.0,
        "acceptance_basis": GAUGE_MEAN,
        "engine": "sglang",
    }
    return WindowStats(**{**base, **values})


def test_an_sglang_window_steps_at_its_batch_times_acceptance_length_over_its_token_rate():
    obs = cg.gauge_window_point(Increases(prompt=600_000.0), sglang_window())
    assert obs is not None
    # 32 requests x 4 tokens per step, 4000 tokens per second: 32 ms per step, 9375 steps in 300 s.
    assert obs.step_seconds == pytest.approx(0.032)
    assert obs.steps == pytest.approx(9375.0) and obs.prefill_tokens == pytest.approx(64.0)
    gain = cg.delivered_gain(CM, sglang_window(), obs, confidence=0.9)
    assert gain is not None
    # The acceptance length cancels: the plain step times the tokens per request-second.
    assert gain.gain == pytest.approx(gain.plain_step_seconds * 1_200_000.0 / (32.0 * 300.0))


def test_a_counter_window_or_one_without_generation_or_batch_is_no_gauge_point():
    assert cg.gauge_window_point(Increases(0.0), sglang_window(acceptance_basis=COUNTER_RATIO)) is None
    assert cg.gauge_window_point(Increases(0.0), sglang_window(generation_tokens=0.0)) is None
    assert cg.gauge_window_point(Increases(0.0), sglang_window(batch_size=None)) is None
    # too few steps to be a point (one step of 32 requests would take the whole span)
    assert cg.gauge_window_point(Increases(0.0), sglang_window(generation_tokens=128.0)) is None


def test_iid_position_rates_reproduce_the_acceptance_length_at_the_rounded_draft_length():
    rates = cg.iid_position_rates(1.0 + 0.8 + 0.64 + 0.512, 2.8)
    assert rates == pytest.approx((0.8, 0.64, 0.512), abs=1e-6)
    assert cg.iid_position_rates(None, 3.0) == () and cg.iid_position_rates(2.0, None) == ()
    assert cg.iid_position_rates(9.0, 3.0) == pytest.approx((1.0, 1.0, 1.0))  # capped at every draft accepted


def test_sglangs_band_candidates_are_priced_from_its_acceptance_length_without_per_position_counts():
    keep = Assessment(candidate="keep", expected_speedup=1.4, recommended_draft_length=None, action="no_change")
    window = sglang_window()
    terms = cg.controller_terms(CM, window, keep, None, [32.0], SGLANG_BANDS)
    assert terms is not None and len(terms.band_ks) == 3
    rates = cg.iid_position_rates(window.mean_acceptance_length, window.draft_length)
    p = extend_position_rates(rates, cg.MAX_FIXED_K)
    assert terms.band_ks[0] == costmodel.best_draft_length(CM, 32.0, p, coverage=1.0)
    assert terms.adaptive_option == "speculative_adaptive"
