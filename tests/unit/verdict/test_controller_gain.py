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
from specwatch.windows.derive import WindowStats

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
